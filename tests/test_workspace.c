/* test_workspace.c: on the CPU, what a binding checks at load time (the ABI version, every public
 * struct's size as the library was built) and the caller-provided workspaces: the size query
 * (the FFN's pairs workspace against the template's own formula and the 4 x tokens x d_ff lower
 * bound, the compressor's violation word, none for the other ops), the argument errors of
 * sj_twell_ffn_ws, sj_vnm_compress_device_ws and the hybrid FFN ops (each naming the argument,
 * before any GPU is needed; right arguments then fail for want of a GPU, which resolving the
 * kernel that sizes the hybrid ops' workspace needs), the hybrid weight gradients' transpose
 * workspace (a layout's own bound against its arrays, the 32-bit position limit), the hybrid FFN
 * ops' bounds for any layout of a shape and any config (sj_workspace_size), the refusals of
 * sj_hybrid_ffn_workspace, and the decoding of a violation word. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

/* Whether ctx reached a GPU (a context for the GPU's own arch does). */
static int has_gpu(sj_context *ctx)
{
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    return info.has_gpu;
}

static void test_abi(void **state)
{
    assert_int_equal(sj_abi_version(), SJ_ABI_VERSION);
    const struct { const char *name; size_t size; } structs[] = {
        { "sj_problem", sizeof(sj_problem) },           { "sj_context_options", sizeof(sj_context_options) },
        { "sj_device_info", sizeof(sj_device_info) },   { "sj_stats", sizeof(sj_stats) },
        { "sj_generated", sizeof(sj_generated) },       { "sj_kernel_info", sizeof(sj_kernel_info) },
        { "sj_vnm_layout", sizeof(sj_vnm_layout) },     { "sj_vnm_host", sizeof(sj_vnm_host) },
        { "sj_vnm_device", sizeof(sj_vnm_device) },     { "sj_twell_layout", sizeof(sj_twell_layout) },
        { "sj_twell_host", sizeof(sj_twell_host) },     { "sj_twell_device", sizeof(sj_twell_device) },
        { "sj_tune_progress", sizeof(sj_tune_progress) }, { "sj_tune_options", sizeof(sj_tune_options) },
        { "sj_tune_trial", sizeof(sj_tune_trial) },     { "sj_tune_result", sizeof(sj_tune_result) },
        { "sj_bench_result", sizeof(sj_bench_result) },
    };
    for (size_t i = 0; i < sizeof structs / sizeof *structs; i++) {
        size_t got = 12345;
        SJ_ASSERT_OK(sj_struct_size(structs[i].name, &got));
        assert_int_equal(got, structs[i].size);
    }
    size_t got;
    SJ_ASSERT_STATUS(sj_struct_size("sj_context", &got), SJ_ERR_INVALID_ARGUMENT, "sj_problem");
    SJ_ASSERT_STATUS(sj_struct_size(NULL, &got), SJ_ERR_INVALID_ARGUMENT, "name");
    SJ_ASSERT_STATUS(sj_struct_size("sj_problem", NULL), SJ_ERR_INVALID_ARGUMENT, "out");
}

static void ffn_problem(int64_t tokens, int64_t d_model, int64_t d_ff, sj_twell_layout *l, sj_problem *p)
{
    SJ_ASSERT_OK(sj_twell_layout_init(l, SJ_DTYPE_BF16, tokens, d_ff, 128, 16));
    SJ_ASSERT_OK(sj_twell_ffn_problem(l, d_model, SJ_DTYPE_BF16, p));
}

static void test_size_query(void **state)
{
    uint64_t rng = tu_seed();
    for (int trial = 0; trial < 50; trial++) {
        int64_t tokens = 1 + (int64_t)((tu_uniform(&rng) + 1) * 5000), d_ff = 8 + (int64_t)((tu_uniform(&rng) + 1) * 9000);
        sj_twell_layout l;
        sj_problem p;
        ffn_problem(tokens, 64, d_ff, &l, &p);
        size_t bytes = 0;
        SJ_ASSERT_OK(sj_workspace_size(&p, &bytes));
        /* templates/lib/twell_pairs.lua: 4 * (list_offset(M) + ceil64(M' / 8 * ceil(F / 256)) + M' * F') */
        size_t m5 = (size_t)((tokens + 511) / 512) * 512, f5 = (size_t)((d_ff + 511) / 512) * 512;
        size_t list_offset = (size_t)((2 + (tokens + 255) / 256 + 63) / 64) * 64;
        size_t slot_counts = (m5 / 8 * (size_t)((d_ff + 255) / 256) + 63) / 64 * 64;
        assert_int_equal(bytes, 4 * (list_offset + slot_counts + m5 * f5));
        assert_true(bytes >= 4 * (size_t)tokens * (size_t)d_ff);
    }
    sj_vnm_layout vl;
    sj_problem p;
    SJ_ASSERT_OK(sj_vnm_layout_init(&vl, SJ_DTYPE_F16, 64, 2, 8, 300, 200));
    sj_problem_init(&p, SJ_OP_VNM_COMPRESS, SJ_DTYPE_F16, 300, 1, 200);
    p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = 8;
    size_t bytes = 99;
    SJ_ASSERT_OK(sj_workspace_size(&p, &bytes));
    assert_int_equal(bytes, 16);
    SJ_ASSERT_OK(sj_vnm_problem(&vl, 64, SJ_DTYPE_F32, &p));
    SJ_ASSERT_OK(sj_workspace_size(&p, &bytes));
    assert_int_equal(bytes, 0);
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 64, 64, 64);
    bytes = 99;
    SJ_ASSERT_OK(sj_workspace_size(&p, &bytes));
    assert_int_equal(bytes, 0);
    SJ_ASSERT_STATUS(sj_workspace_size(&p, NULL), SJ_ERR_INVALID_ARGUMENT, "bytes");
    p.m = 0;
    SJ_ASSERT_STATUS(sj_workspace_size(&p, &bytes), SJ_ERR_INVALID_ARGUMENT, "problem.m");
    SJ_ASSERT_STATUS(sj_workspace_size(NULL, &bytes), SJ_ERR_INVALID_ARGUMENT, "problem");
}

static void test_ffn_ws_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    sj_twell_layout l;
    sj_problem p;
    ffn_problem(1000, 256, 2048, &l, &p);
    size_t need;
    SJ_ASSERT_OK(sj_workspace_size(&p, &need));
    sj_twell_device H = { .layout = l, .entries = 0x100000, .counts = 0x200000, .spill = 0x300000 };
    sj_devptr X = 0x400000, WuT = 0x500000, Wd = 0x600000, Y = 0x700000, W = 0x800000;
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &p, X, &H, WuT, Wd, Y, 0, need, NULL), SJ_ERR_INVALID_ARGUMENT, "workspace");
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &p, X, &H, WuT, Wd, Y, W + 8, need, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "16-byte aligned");
    char msg[64];
    snprintf(msg, sizeof msg, "at least %zu", need);
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &p, X, &H, WuT, Wd, Y, W, need - 1, NULL), SJ_ERR_INVALID_ARGUMENT, msg);
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &p, X, &H, WuT, Wd, 0, W, need, NULL), SJ_ERR_INVALID_ARGUMENT, "Y");
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(NULL, &p, X, &H, WuT, Wd, Y, W, need, NULL), SJ_ERR_INVALID_ARGUMENT, "ctx");
    sj_problem gate;
    SJ_ASSERT_OK(sj_twell_gate_problem(&l, 256, &gate));
    SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &gate, X, &H, WuT, Wd, Y, W, need, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "expected twell-ffn");
    /* Past the checks only the GPU is missing; on a GPU (tu_compile_context("sm_90a") on an H100
     * is a GPU context) the call would launch on the fake pointers, so it is not made there. */
    if (!has_gpu(ctx)) SJ_ASSERT_STATUS(sj_twell_ffn_ws(ctx, &p, X, &H, WuT, Wd, Y, W, need, NULL), SJ_ERR_NO_GPU, NULL);
    sj_context_destroy(ctx);
}

static void test_compress_ws_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    sj_vnm_layout l, other;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 8, 300, 200));
    SJ_ASSERT_OK(sj_vnm_layout_init(&other, SJ_DTYPE_F16, 64, 2, 8, 300, 208));
    sj_vnm_device out = { .layout = l, .values = 0x100000, .meta = 0x200000, .index = 0x300000 };
    sj_vnm_device wrong = out;
    wrong.layout = other;
    sj_devptr A = 0x400000, W = 0x500000;
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, SJ_VNM_PRUNE_L2, &wrong, W, 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "out->layout");
    sj_vnm_device no_meta = out;
    no_meta.meta = 0;
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, SJ_VNM_PRUNE_L2, &no_meta, W, 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "out->meta");
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 199, SJ_VNM_PRUNE_L2, &out, W, 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "lda = 199");
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, (sj_vnm_select)7, &out, W, 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "select = 7");
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, SJ_VNM_EXACT, &out, W, 8, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "at least 16");
    SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, SJ_VNM_EXACT, &out, 0, 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "workspace");
    if (!has_gpu(ctx))   /* as above: on a GPU the fake pointers would be written */
        SJ_ASSERT_STATUS(sj_vnm_compress_device_ws(ctx, &l, A, 200, SJ_VNM_EXACT, &out, W, 16, NULL), SJ_ERR_NO_GPU,
                         NULL);
    sj_context_destroy(ctx);
}

/* sj_hybrid_ffn_dw_workspace: two words per unit and 32 tokens (bitmap, prefix), d_ff + 1 starts
 * and a word per pair the layout can hold, each array padded to 16 bytes; sj_workspace_size's is
 * that of a backup row for every token plus the busy units' buffers at the largest BUSY (512, or
 * less where d_ff is: the template refuses more slots than units): d_ff + 513 ints, 3 x 512 rows
 * of tokens in the input dtype, 3 x 512 rows of d_model in the gradients'; refusals name what is
 * wrong. */
static void test_hybrid_dw_workspace(void **state)
{
    uint64_t rng = tu_seed();
    for (int trial = 0; trial < 50; trial++) {
        const int64_t tokens = 1 + (int64_t)((tu_uniform(&rng) + 1) * 3000), d_ff = 8 + (int64_t)((tu_uniform(&rng) + 1) * 5000);
        const int w = 1 + (int)((tu_uniform(&rng) + 1) * 0.5 * (double)(d_ff < 300 ? d_ff - 1 : 299));
        const int64_t backup = (int64_t)((tu_uniform(&rng) + 1) * 0.5 * (double)tokens);
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, tokens, d_ff, w, backup));
        size_t bytes = 0;
        SJ_ASSERT_OK(sj_hybrid_ffn_dw_workspace(&l, &bytes));
#define PAD16(n) (((size_t)(n) + 15) / 16 * 16)
        const size_t words = (size_t)d_ff * (size_t)((tokens + 31) / 32);
        const size_t pairs = (size_t)(tokens * w + backup * (d_ff - w));
        assert_int_equal(bytes, 2 * PAD16(4 * words) + PAD16(4 * (d_ff + 1)) + PAD16(4 * pairs));
        /* the list holds every pair the arrays can: the ELL's rows x W and the backup's rows x (d_ff - W) */
        assert_true(PAD16(4 * pairs) >= (l.values_bytes / 2 + l.backup_bytes / 2 - (size_t)(backup * w)) * 4);
        sj_problem p;
        SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, 64, &p));
        p.out_dtype = SJ_DTYPE_F32;
        size_t any = 0;
        SJ_ASSERT_OK(sj_workspace_size(&p, &any));
        const size_t busy = d_ff < 512 ? (size_t)d_ff : 512;
        assert_int_equal(any, 2 * PAD16(4 * words) + PAD16(4 * (d_ff + 1)) + PAD16(4 * (size_t)(tokens * d_ff)) +
                                  PAD16(4 * d_ff) + PAD16(4 * (busy + 1)) + PAD16(3 * busy * (size_t)tokens * 2) +
                                  PAD16(3 * busy * 64 * 4));
        assert_true(any >= bytes);
#undef PAD16
    }
    sj_hybrid_layout big;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&big, SJ_DTYPE_F16, 70000, 65536, 128, 70000));
    size_t bytes;
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw_workspace(&big, &bytes), SJ_ERR_INVALID_ARGUMENT, "2^32 - 1");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw_workspace(NULL, &bytes), SJ_ERR_INVALID_ARGUMENT, NULL);
    SJ_ASSERT_OK(sj_hybrid_layout_init(&big, SJ_DTYPE_F16, 64, 64, 8, 0));
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw_workspace(&big, NULL), SJ_ERR_INVALID_ARGUMENT, "bytes");
}

/* The fwd's and the dx's bound: ALGO=2's list over a backup row for every token, the pairs
 * kernel's own (its counters, the slot counts and 4 or, for the dx, 8 bytes a token and unit,
 * tokens and units rounded up to 512), then counts and starts (tokens x ceil(d_ff / 256) ints
 * each, padded to 64 ints), then 8 bytes a position (tokens x (W + d_ff)). */
static void test_hybrid_ffn_bound(void **state)
{
    uint64_t rng = tu_seed();
    for (int trial = 0; trial < 50; trial++) {
        const int64_t tokens = 1 + (int64_t)((tu_uniform(&rng) + 1) * 3000), d_ff = 8 + (int64_t)((tu_uniform(&rng) + 1) * 5000);
        const int w = 1 + (int)((tu_uniform(&rng) + 1) * 0.5 * (double)(d_ff < 300 ? d_ff - 1 : 299));
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, tokens, d_ff, w, 0));
#define CEIL64(n) (((size_t)(n) + 63) / 64 * 64)
        const size_t m512 = (size_t)(tokens + 511) / 512 * 512, f512 = (size_t)(d_ff + 511) / 512 * 512;
        const size_t tiles = (size_t)(d_ff + 255) / 256, counters = CEIL64(2 + (tokens + 255) / 256);
        for (int halves = 1; halves <= 2; halves++) {
            sj_problem p;
            SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, halves == 1 ? SJ_OP_HYBRID_FFN_FWD : SJ_OP_HYBRID_FFN_DX, 64, &p));
            const size_t own = CEIL64(counters + CEIL64(halves * m512 / 8 * tiles) + halves * m512 * f512);
            const size_t per_tile = CEIL64((size_t)tokens * tiles);
            size_t any = 0;
            SJ_ASSERT_OK(sj_workspace_size(&p, &any));
            assert_int_equal(any, 4 * (own + 2 * per_tile) + 8 * (size_t)(tokens * (w + d_ff)));
            assert_true(any >= 4 * (size_t)halves * (size_t)(tokens * d_ff));
        }
#undef CEIL64
    }
}

/* sj_hybrid_ffn_workspace's refusals, each naming what is wrong; right arguments then need the GPU
 * that resolving the kernel takes. */
static void test_hybrid_query_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    sj_hybrid_layout l, other;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 300, 1024, 64, 40));
    SJ_ASSERT_OK(sj_hybrid_layout_init(&other, SJ_DTYPE_BF16, 300, 1024, 32, 40));
    sj_problem p, gate;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DX, 256, &p));
    SJ_ASSERT_OK(sj_hybrid_gate_problem(&l, 256, &gate));
    size_t bytes = 7;
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(NULL, &p, &l, &bytes), SJ_ERR_INVALID_ARGUMENT, "ctx");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, &p, &l, NULL), SJ_ERR_INVALID_ARGUMENT, "bytes");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, NULL, &l, &bytes), SJ_ERR_INVALID_ARGUMENT, "problem");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, &gate, &l, &bytes), SJ_ERR_INVALID_ARGUMENT,
                     "problem.op is hybrid-gate; expected hybrid-ffn-fwd");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, &p, NULL, &bytes), SJ_ERR_INVALID_ARGUMENT, "layout is NULL");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, &p, &other, &bytes), SJ_ERR_INVALID_ARGUMENT,
                     "layout is bf16 300 x 1024 W=32, the problem expects bf16 300 x 1024 W=64");
    assert_int_equal(bytes, 0);
    if (!has_gpu(ctx))
        SJ_ASSERT_STATUS(sj_hybrid_ffn_workspace(ctx, &p, &l, &bytes), SJ_ERR_NO_GPU, "resolving the kernel");
    sj_context_destroy(ctx);
}

/* The fwd and the dx: a workspace, when given, must be 16-byte aligned; none at all is a valid
 * argument (the kernel decides whether it needs one), so right arguments reach the GPU. */
static void test_hybrid_ffn_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 300, 1024, 64, 40));
    sj_problem fp, xp;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_FWD, 256, &fp));
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DX, 256, &xp));
    sj_hybrid_device H = { .layout = l, .values = 0x100000, .columns = 0x110000, .nnz = 0x120000, .slot = 0x130000,
                           .owner = 0x140000, .backup = 0x150000, .counter = 0x160000 };
    sj_devptr X = 0x200000, Wt = 0x210000, Y = 0x220000, uv = 0x230000, ub = 0x240000, gv = 0x250000, gb = 0x260000,
              dv = 0x270000, db = 0x280000, W = 0x300000;
    SJ_ASSERT_STATUS(sj_hybrid_ffn_fwd(ctx, &fp, X, &H, Wt, Wt, Y, uv, ub, W + 4, 1 << 20, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "workspace = 0x300004 is not 16-byte aligned");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dx(ctx, &xp, X, &H, uv, ub, Wt, Wt, Wt, Y, gv, gb, dv, db, W + 8, 1 << 20, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "workspace = 0x300008 is not 16-byte aligned");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_fwd(ctx, &fp, X, &H, Wt, Wt, 0, uv, ub, W, 1 << 20, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "Y");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dx(ctx, &fp, X, &H, uv, ub, Wt, Wt, Wt, Y, gv, gb, dv, db, 0, 0, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "expected hybrid-ffn-dx");
    if (!has_gpu(ctx)) { /* as above: on a GPU the fake pointers would be written */
        SJ_ASSERT_STATUS(sj_hybrid_ffn_fwd(ctx, &fp, X, &H, Wt, Wt, Y, uv, ub, 0, 0, NULL), SJ_ERR_NO_GPU, NULL);
        SJ_ASSERT_STATUS(sj_hybrid_ffn_dx(ctx, &xp, X, &H, uv, ub, Wt, Wt, Wt, Y, gv, gb, dv, db, W, 1 << 20, NULL),
                         SJ_ERR_NO_GPU, NULL);
    }
    sj_context_destroy(ctx);
}

/* The dw: as the fwd's; whether the workspace is large enough, or there at all, depends on the
 * kernel the call resolves, so those refusals are the GPU test's (tests/test_hybrid_ffn_gpu.c). */
static void test_hybrid_dw_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 300, 1024, 64, 40));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, 256, &p));
    size_t need;
    SJ_ASSERT_OK(sj_hybrid_ffn_dw_workspace(&l, &need));
    sj_hybrid_device H = { .layout = l, .values = 0x100000, .columns = 0x110000, .nnz = 0x120000, .slot = 0x130000,
                           .owner = 0x140000, .backup = 0x150000, .counter = 0x160000 };
    sj_devptr X = 0x200000, dY = 0x210000, uv = 0x220000, ub = 0x230000, gv = 0x240000, gb = 0x250000, dv = 0x260000,
              db = 0x270000, g1 = 0x280000, g2 = 0x290000, g3 = 0x2a0000, W = 0x300000;
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, &p, X, dY, &H, uv, ub, gv, gb, dv, db, g1, g2, g3, W + 8, need, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "16-byte aligned");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, &p, X, dY, &H, uv, ub, gv, 0, dv, db, g1, g2, g3, W, need, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "dg_backup");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, &p, X, dY, &H, uv, ub, gv, gb, dv, db, g1, 0, g3, W, need, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "dWuT");
    sj_problem dx;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DX, 256, &dx));
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, &dx, X, dY, &H, uv, ub, gv, gb, dv, db, g1, g2, g3, W, need, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "expected hybrid-ffn-dw");
    if (!has_gpu(ctx))   /* as above: on a GPU the fake pointers would be written */
        SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, &p, X, dY, &H, uv, ub, gv, gb, dv, db, g1, g2, g3, W, need, NULL),
                         SJ_ERR_NO_GPU, NULL);
    sj_context_destroy(ctx);
}

/* The word is ((row block * groups padded to k_tiles * 8) + group) * (V + 1) + (0: the block's
 * columns, 1 + r: row r of the block), templates/vnm_compress.lua. */
static void test_pattern_status(void **state)
{
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, SJ_DTYPE_BF16, 32, 2, 8, 100, 70));
    SJ_ASSERT_OK(sj_vnm_pattern_status(&l, ~0ull));
    uint64_t gp = (uint64_t)l.k_tiles * 8;
    SJ_ASSERT_STATUS(sj_vnm_pattern_status(&l, ((2 * gp + 3) * 33)), SJ_ERR_PATTERN,
                     "rows 64..95, columns 24..31 (row block 2, group 3)");
    SJ_ASSERT_STATUS(sj_vnm_pattern_status(&l, ((3 * gp + 8) * 33) + 1 + 2), SJ_ERR_PATTERN,
                     "row 98 has more than 2 non-zeros in columns 64..69 (group 8)");
    SJ_ASSERT_STATUS(sj_vnm_pattern_status(&l, ((4 * gp) * 33)), SJ_ERR_INVALID_ARGUMENT, "row block 4");
    SJ_ASSERT_STATUS(sj_vnm_pattern_status(NULL, 0), SJ_ERR_INVALID_ARGUMENT, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abi),
        cmocka_unit_test(test_size_query),
        cmocka_unit_test(test_ffn_ws_arguments),
        cmocka_unit_test(test_compress_ws_arguments),
        cmocka_unit_test(test_hybrid_dw_workspace),
        cmocka_unit_test(test_hybrid_ffn_bound),
        cmocka_unit_test(test_hybrid_query_arguments),
        cmocka_unit_test(test_hybrid_ffn_arguments),
        cmocka_unit_test(test_hybrid_dw_arguments),
        cmocka_unit_test(test_pattern_status),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
