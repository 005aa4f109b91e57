/* test_vnm_train_gpu.c: the device products of V:N:M training (docs/training.md).
 * CPU: the vnm-dw template refuses what it cannot run, naming why, and every entry point refuses
 * bad arguments naming them (a compile-only context).
 * GPU (skipped with the reason without one): sj_vnm_dw against the fp64 host reference
 * (sj_vnm_dw_host) for every V in {64, 128}, M in {4, 8, 16, 32}, f16 and bf16, every output
 * dtype, ragged rows, columns and tokens, with the output poisoned first, with the default and the
 * two wgmma variants (WG=1, WG=2: sm_90a), and a set of explicit tile configs; sj_vnm_transpose against the host's dense W^T (padding past ldt untouched);
 * sj_vnm_double_prune byte for byte against sj_vnm_double_prune_host; dX both ways, the exact one
 * (sj_vnm_dx_exact) against sj_vnm_dx_host and the double-pruned one (sj_vnm_spmm on the second
 * copy) against an fp64 product of that copy, with its distance from the exact dX printed. */
#include "test_util.h"
#include "ops/vnm/vnm_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int VS[] = { 64, 128 };
static const int MS[] = { 4, 8, 16, 32 };
static const sj_dtype DTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };
static const sj_dtype OUTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };

static double tolerance(sj_dtype in, sj_dtype out) { return in == SJ_DTYPE_BF16 || out == SJ_DTYPE_BF16 ? 1e-2 : 5e-3; }

static sj_devptr upload(sj_context *ctx, const void *host, size_t bytes)
{
    sj_devptr p;
    SJ_ASSERT_OK(sj_malloc(ctx, bytes, &p));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, p, host, bytes));
    return p;
}

static uint16_t *random16(sj_dtype dt, size_t n, uint64_t *rng)
{
    uint16_t *x = malloc(n * 2);
    tu_fill16(dt, x, n, 1.0f, rng);
    return x;
}

/* ---------------------------------------------------------------- CPU */

static void test_dw_template_refuses(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_VNM_DW, SJ_DTYPE_F16, 256, 256, 256);
    p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = 8;
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=128,BG=16,BK=64,WM=64,WN=32,STAGES=3,WG=0", &g), SJ_ERR_INVALID_ARGUMENT, "exceeds V=64");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=48,WM=32,WN=32,STAGES=3,WG=0", &g), SJ_ERR_INVALID_ARGUMENT, "BK=48");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=16,WN=16,STAGES=3,WG=0", &g), SJ_ERR_INVALID_ARGUMENT, "16 warps");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=32,WM=64,WN=64,STAGES=3,WG=1", &g), SJ_ERR_INVALID_ARGUMENT,
                     "WG=1 needs BK=64");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=32,WN=64,STAGES=3,WG=1", &g), SJ_ERR_INVALID_ARGUMENT,
                     "WG=1 takes WM=64 and WN=4*BG=64");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=3", &g), SJ_ERR_INVALID_ARGUMENT,
                     "WG=3 must be 0");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=32,WN=64,STAGES=3,WG=0,TMA=1", &g), SJ_ERR_INVALID_ARGUMENT,
                     "TMA=1 (dY by TMA) needs WG=1");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=1,TMA=2", &g), SJ_ERR_INVALID_ARGUMENT,
                     "TMA=2 must be 0");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=1,GROUP_M=65", &g), SJ_ERR_INVALID_ARGUMENT,
                     "GROUP_M=65 must be 0");
    p.m = 1024, p.n = 4096, p.vnm_v = 128; /* 512 groups: room for BG=64 */
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=128,BG=64,BK=64,WM=64,WN=256,STAGES=3,WG=2", &g), SJ_ERR_INVALID_ARGUMENT,
                     "384 threads leave 170 registers each");
    p.m = 256, p.n = 256, p.vnm_v = 64;
    p.k = 250;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "problem.k = 250");
    sj_context_destroy(ctx);
    ctx = tu_compile_context("sm_80");
    assert_non_null(ctx);
    p.k = 256;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=1", &g), SJ_ERR_INVALID_ARGUMENT,
                     "needs sm_90a");
    sj_context_destroy(ctx);
}

static void test_entry_points_refuse(void **state)
{
    (void)state;
    uint64_t rng = tu_seed();
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_vnm_host h;
    tu_random_vnm(ctx, SJ_DTYPE_F16, 64, 8, 128, 96, &rng, &h, NULL);
    sj_vnm_device W = { .layout = h.layout, .values = 4096, .meta = 8192, .index = 16384 };
    sj_problem p;
    SJ_ASSERT_OK(sj_vnm_dw_problem(&h.layout, 64, SJ_DTYPE_F32, &p));
    assert_int_equal(p.m, 128);
    assert_int_equal(p.n, 96);
    assert_int_equal(p.k, 64);
    SJ_ASSERT_STATUS(sj_vnm_dw_problem(&h.layout, 60, SJ_DTYPE_F32, &p), SJ_ERR_INVALID_ARGUMENT, "problem.k = 60");
    SJ_ASSERT_OK(sj_vnm_dw_problem(&h.layout, 64, SJ_DTYPE_F32, &p));
    sj_problem q = p;
    q.n = 100;
    SJ_ASSERT_STATUS(sj_vnm_dw(ctx, &q, &W, 4096, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "does not match W");
    SJ_ASSERT_STATUS(sj_vnm_dw(ctx, &p, &W, 4097, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "dY");
    SJ_ASSERT_STATUS(sj_vnm_dw(ctx, &p, NULL, 4096, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "W is NULL");
    SJ_ASSERT_STATUS(sj_vnm_transpose(ctx, &W, 4096, 127, NULL), SJ_ERR_INVALID_ARGUMENT, "ldt = 127");
    sj_vnm_device WT2 = W; /* W's layout, not the transposed one */
    SJ_ASSERT_STATUS(sj_vnm_double_prune(ctx, &W, &WT2, 4096, 1 << 20, NULL), SJ_ERR_INVALID_ARGUMENT, "transposed layout");
    SJ_ASSERT_OK(sj_vnm_transpose_layout(&h.layout, &WT2.layout));
    size_t need;
    SJ_ASSERT_OK(sj_vnm_double_prune_workspace(&h.layout, &need));
    assert_int_equal(need, 128 * 96 * 2 + 16);
    SJ_ASSERT_STATUS(sj_vnm_double_prune(ctx, &W, &WT2, 4096, need - 1, NULL), SJ_ERR_INVALID_ARGUMENT, "workspace_bytes");
    SJ_ASSERT_STATUS(sj_vnm_dx_exact(ctx, &W, 4096, 4096, 4096, 0, SJ_DTYPE_F16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem.n = 0");
    sj_vnm_host_free(&h);
    sj_context_destroy(ctx);
}

/* ---------------------------------------------------------------- GPU */

/* dW on the device with the op's current config, against sj_vnm_dw_host; returns the error. */
static double run_dw(sj_context *ctx, sj_dtype dt, sj_dtype od, int v, int m, int64_t rows, int64_t cols, int64_t tokens,
                     uint64_t *rng)
{
    sj_vnm_host h;
    sj_vnm_device W;
    tu_random_vnm(ctx, dt, v, m, rows, cols, rng, &h, &W);
    uint16_t *dY = random16(dt, (size_t)(rows * tokens), rng), *X = random16(dt, (size_t)(cols * tokens), rng);
    sj_devptr ddY = upload(ctx, dY, (size_t)(rows * tokens) * 2), dX = upload(ctx, X, (size_t)(cols * tokens) * 2), ddW;
    const size_t n = h.layout.values_bytes / 2, osz = sj_dtype_size(od);
    SJ_ASSERT_OK(sj_malloc(ctx, n * osz, &ddW));
    SJ_ASSERT_OK(sj_memset_u8(ctx, ddW, 0xff, n * osz)); /* NaN: every slot must be written */
    sj_problem p;
    SJ_ASSERT_OK(sj_vnm_dw_problem(&h.layout, tokens, od, &p));
    SJ_ASSERT_OK(sj_vnm_dw(ctx, &p, &W, ddY, dX, ddW, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    void *out = malloc(n * osz);
    float *ref32 = malloc(n * 4);
    double *ref = malloc(n * sizeof *ref);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, ddW, n * osz));
    SJ_ASSERT_OK(sj_vnm_dw_host(&h, dY, X, tokens, SJ_DTYPE_F32, ref32));
    for (size_t i = 0; i < n; i++) ref[i] = ref32[i];
    double err = tu_rel_error(od, out, ref, n);
    free(out);
    free(ref32);
    free(ref);
    free(dY);
    free(X);
    sj_free(ctx, ddY);
    sj_free(ctx, dX);
    sj_free(ctx, ddW);
    sj_vnm_device_free(ctx, &W);
    sj_vnm_host_free(&h);
    return err;
}

/* run_dw with config forced for its problem ("" : the op's choice). */
static double run_dw_config(sj_context *ctx, const char *config, sj_dtype dt, sj_dtype od, int v, int m, int64_t rows,
                            int64_t cols, int64_t tokens, uint64_t *rng)
{
    sj_problem p;
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, m, rows, cols));
    SJ_ASSERT_OK(sj_vnm_dw_problem(&l, tokens, od, &p));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, config));
    double err = run_dw(ctx, dt, od, v, m, rows, cols, tokens, rng);
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    return err;
}

/* The wgmma variant (WG=1) runs where the GPU is sm_90a; elsewhere the test says it skipped it. */
static int has_wgmma(sj_context *ctx)
{
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    if (strcmp(info.arch, "sm_90a") == 0) return 1;
    fprintf(stderr, "# SKIP vnm-dw WG=1 and WG=2 cases: wgmma needs sm_90a, this GPU is %s\n", info.arch);
    return 0;
}

static void test_dw_matches_fp64(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    /* the default, then the wgmma variants (BM=64 fits both V) */
    const char *configs[] = { "", "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=1", "BM=64,BG=16,BK=64,WM=64,WN=64,STAGES=3,WG=2" };
    const size_t n_configs = has_wgmma(ctx) ? 3 : 1;
    for (size_t c = 0; c < n_configs; c++)
        for (size_t d = 0; d < 2; d++)
            for (size_t vi = 0; vi < 2; vi++)
                for (size_t mi = 0; mi < 4; mi++) {
                    const sj_dtype dt = DTS[d], od = OUTS[(d + vi + mi + c) % 3];
                    const int v = VS[vi], m = MS[mi];
                    /* ragged: rows not a multiple of V, columns not of M, tokens not of any tile */
                    const int64_t rows = 2 * v + 19, cols = 37 * m + 3, tokens = 8 * (int64_t)(25 + 6 * mi);
                    double err = run_dw_config(ctx, configs[c], dt, od, v, m, rows, cols, tokens, &rng);
                    if (!(err <= tolerance(dt, od)))
                        fail_msg("vnm-dw V=%d 2:%d %s->%s %lldx%lld T=%lld config '%s': rel. error %g", v, m,
                                 sj_dtype_name(dt), sj_dtype_name(od), (long long)rows, (long long)cols, (long long)tokens,
                                 configs[c], err);
                }
}

static void test_dw_configs(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    /* 333 columns: 42 groups of 8, 48 padded; 565: 71 groups, 80 padded (for BG=64) */
    static const struct { const char *config; int64_t cols; } cfgs[] = {
        { "BM=16,BG=8,BK=32,WM=16,WN=16,STAGES=2,WG=0,GROUP_M=0,TMA=0", 333 },    /* the smallest tile, 64-byte rows' swizzle */
        { "BM=128,BG=32,BK=64,WM=64,WN=64,STAGES=4,WG=0,GROUP_M=0,TMA=0", 333 },  /* the largest warp tiles */
        { "BM=64,BG=16,BK=32,WM=16,WN=32,STAGES=3,WG=0,GROUP_M=0,TMA=0", 333 },   /* 8 warps */
        { "BM=32,BG=32,BK=64,WM=32,WN=16,STAGES=2,WG=0,GROUP_M=0,TMA=0", 333 },   /* BG past the padded groups' multiple */
        { "BM=128,BG=64,BK=64,WM=64,WN=64,STAGES=3,WG=0,GROUP_M=0,TMA=0", 565 },  /* 256 gathered columns */
        { "BM=16,BG=8,BK=32,WM=16,WN=16,STAGES=2,WG=0,GROUP_M=8,TMA=0", 333 }, /* grouped raster: 19 row tiles, 8 + 8 + 3 */
        { "BM=64,BG=8,BK=64,WM=64,WN=32,STAGES=2,WG=1,GROUP_M=0,TMA=0", 333 },    /* wgmma: one warpgroup, n32 */
        { "BM=128,BG=32,BK=64,WM=64,WN=128,STAGES=4,WG=1,GROUP_M=0,TMA=0", 333 }, /* two warpgroups, n128 */
        { "BM=128,BG=64,BK=64,WM=64,WN=256,STAGES=3,WG=1,GROUP_M=0,TMA=0", 565 }, /* n256, BG past the padded groups */
        { "BM=128,BG=64,BK=64,WM=64,WN=256,STAGES=3,WG=1,GROUP_M=2,TMA=0", 565 }, /* 3 row tiles in groups of 2 + 1 */
        { "BM=128,BG=64,BK=64,WM=64,WN=256,STAGES=3,WG=1,TMA=1,GROUP_M=0", 565 },  /* dY by TMA: rows past M, tokens past K */
        { "BM=64,BG=32,BK=64,WM=64,WN=128,STAGES=2,WG=1,TMA=1,GROUP_M=2", 333 }, /* one box a stage, 2 stages */
        { "BM=128,BG=64,BK=64,WM=64,WN=256,STAGES=4,WG=1,TMA=1,GROUP_M=16", 565 }, /* the sm_90a default's tile */
        { "BM=64,BG=8,BK=64,WM=64,WN=32,STAGES=2,WG=2,GROUP_M=0,TMA=0", 333 },    /* producer + one consumer, LAG 0 */
        { "BM=128,BG=32,BK=64,WM=64,WN=128,STAGES=4,WG=2,GROUP_M=0,TMA=0", 333 }, /* two consumers, LAG 2 */
        { "BM=64,BG=64,BK=64,WM=64,WN=256,STAGES=4,WG=2,GROUP_M=0,TMA=0", 565 },  /* n256 */
    };
    const size_t n = has_wgmma(ctx) ? sizeof cfgs / sizeof *cfgs : 6;
    for (size_t i = 0; i < n; i++) {
        const int64_t rows = 300, tokens = 136;
        double err = run_dw_config(ctx, cfgs[i].config, SJ_DTYPE_BF16, SJ_DTYPE_F32, 128, 8, rows, cfgs[i].cols, tokens, &rng);
        if (!(err <= tolerance(SJ_DTYPE_BF16, SJ_DTYPE_F32)))
            fail_msg("vnm-dw config %s, %lld columns: rel. error %g", cfgs[i].config, (long long)cfgs[i].cols, err);
    }
}

/* sj_vnm_transpose's dense W^T, then sj_vnm_double_prune's copy byte for byte. */
static void test_transpose_and_double_prune(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                const sj_dtype dt = DTS[d];
                const int v = VS[vi], m = MS[mi];
                const int64_t rows = v + 45, cols = 9 * m + 7, ldt = rows + 5;
                sj_vnm_host h, want, got;
                sj_vnm_device W;
                tu_random_vnm(ctx, dt, v, m, rows, cols, &rng, &h, &W);
                /* the dense W^T, its 5 columns past rows poisoned and left alone */
                uint16_t *D = malloc((size_t)(rows * cols) * 2), *T = malloc((size_t)(cols * ldt) * 2);
                SJ_ASSERT_OK(sj_vnm_decompress(&h, D, cols));
                sj_devptr dT;
                SJ_ASSERT_OK(sj_malloc(ctx, (size_t)(cols * ldt) * 2, &dT));
                SJ_ASSERT_OK(sj_memset_u8(ctx, dT, 0xa5, (size_t)(cols * ldt) * 2));
                SJ_ASSERT_OK(sj_vnm_transpose(ctx, &W, dT, ldt, NULL));
                SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, T, dT, (size_t)(cols * ldt) * 2));
                for (int64_t c = 0; c < cols; c++)
                    for (int64_t r = 0; r < ldt; r++) {
                        uint16_t want16 = r < rows ? D[r * cols + c] : 0xa5a5;
                        if (T[c * ldt + r] != want16)
                            fail_msg("vnm-transpose V=%d 2:%d: WT[%lld][%lld] = 0x%04x, expected 0x%04x", v, m, (long long)c,
                                     (long long)r, T[c * ldt + r], want16);
                    }
                /* the double-pruned copy */
                sj_vnm_layout lt;
                SJ_ASSERT_OK(sj_vnm_transpose_layout(&h.layout, &lt));
                sj_vnm_device W2 = { .layout = lt };
                size_t ws_bytes;
                sj_devptr ws;
                SJ_ASSERT_OK(sj_vnm_double_prune_workspace(&h.layout, &ws_bytes));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.values_bytes, &W2.values));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.meta_bytes, &W2.meta));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.index_bytes, &W2.index));
                SJ_ASSERT_OK(sj_malloc(ctx, ws_bytes, &ws));
                SJ_ASSERT_OK(sj_memset_u8(ctx, W2.values, 0xff, lt.values_bytes));
                SJ_ASSERT_OK(sj_memset_u8(ctx, W2.meta, 0xff, lt.meta_bytes));
                SJ_ASSERT_OK(sj_vnm_double_prune(ctx, &W, &W2, ws, ws_bytes, NULL));
                SJ_ASSERT_OK(sj_vnm_download(ctx, &W2, &got));
                SJ_ASSERT_OK(sj_vnm_double_prune_host(&h, &want));
                assert_memory_equal(got.values, want.values, lt.values_bytes);
                assert_memory_equal(got.meta, want.meta, lt.meta_bytes);
                assert_memory_equal(got.index, want.index, lt.index_bytes);
                sj_vnm_host_free(&got);
                sj_vnm_host_free(&want);
                sj_vnm_device_free(ctx, &W2);
                sj_free(ctx, ws);
                sj_free(ctx, dT);
                free(D);
                free(T);
                sj_vnm_device_free(ctx, &W);
                sj_vnm_host_free(&h);
            }
}

/* dX both ways: exact against sj_vnm_dx_host, double-pruned against WT2 . dY in fp64. */
static void test_dx_both_ways(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                const sj_dtype dt = DTS[d], od = OUTS[(d + mi) % 3];
                const int v = VS[vi], m = MS[mi];
                const int64_t rows = 3 * v + 8, cols = 20 * m + 8, tokens = 8 * (int64_t)(19 + 4 * mi);
                sj_vnm_host h, h2;
                sj_vnm_device W, W2;
                tu_random_vnm(ctx, dt, v, m, rows, cols, &rng, &h, &W);
                uint16_t *dY = random16(dt, (size_t)(rows * tokens), &rng);
                sj_devptr ddY = upload(ctx, dY, (size_t)(rows * tokens) * 2), dT, ddX;
                const size_t nx = (size_t)(cols * tokens), osz = sj_dtype_size(od);
                SJ_ASSERT_OK(sj_malloc(ctx, (size_t)(rows * cols) * 2, &dT));
                SJ_ASSERT_OK(sj_malloc(ctx, nx * osz, &ddX));
                void *out = malloc(nx * osz);
                float *ref32 = malloc(nx * 4);
                double *ref = malloc(nx * sizeof *ref), *ref2 = malloc(nx * sizeof *ref2);
                /* exact */
                SJ_ASSERT_OK(sj_memset_u8(ctx, ddX, 0xff, nx * osz));
                SJ_ASSERT_OK(sj_vnm_dx_exact(ctx, &W, dT, ddY, ddX, tokens, od, NULL));
                SJ_ASSERT_OK(sj_synchronize(ctx));
                SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, ddX, nx * osz));
                SJ_ASSERT_OK(sj_vnm_dx_host(&h, dY, tokens, SJ_DTYPE_F32, ref32));
                for (size_t i = 0; i < nx; i++) ref[i] = ref32[i];
                double err = tu_rel_error(od, out, ref, nx);
                if (!(err <= tolerance(dt, od)))
                    fail_msg("exact dX V=%d 2:%d %s->%s: rel. error %g", v, m, sj_dtype_name(dt), sj_dtype_name(od), err);
                /* double-pruned: the host's copy (its device twin is checked above), vnm-spmm on it */
                SJ_ASSERT_OK(sj_vnm_double_prune_host(&h, &h2));
                SJ_ASSERT_OK(sj_vnm_upload(ctx, &h2, &W2));
                uint16_t *D2 = malloc((size_t)(rows * cols) * 2);
                SJ_ASSERT_OK(sj_vnm_decompress(&h2, D2, rows));
                tu_ref_gemm16(dt, D2, dY, ref2, cols, tokens, rows);
                sj_problem p;
                SJ_ASSERT_OK(sj_vnm_problem(&h2.layout, tokens, od, &p));
                SJ_ASSERT_OK(sj_memset_u8(ctx, ddX, 0xff, nx * osz));
                SJ_ASSERT_OK(sj_vnm_spmm(ctx, &p, &W2, ddY, ddX, 1.0f, 0.0f, NULL));
                SJ_ASSERT_OK(sj_synchronize(ctx));
                SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, ddX, nx * osz));
                err = tu_rel_error(od, out, ref2, nx);
                if (!(err <= tolerance(dt, od)))
                    fail_msg("double-pruned dX V=%d 2:%d %s->%s: rel. error %g", v, m, sj_dtype_name(dt), sj_dtype_name(od), err);
                printf("dX V=%d 2:%d %s: double-pruned vs exact, rel. distance %.3f\n", v, m, sj_dtype_name(dt),
                       tu_rel_error(od, out, ref, nx));
                free(D2);
                free(out);
                free(ref32);
                free(ref);
                free(ref2);
                free(dY);
                sj_free(ctx, ddY);
                sj_free(ctx, dT);
                sj_free(ctx, ddX);
                sj_vnm_device_free(ctx, &W2);
                sj_vnm_device_free(ctx, &W);
                sj_vnm_host_free(&h2);
                sj_vnm_host_free(&h);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dw_template_refuses),
        cmocka_unit_test(test_entry_points_refuse),
        cmocka_unit_test(test_dw_matches_fp64),
        cmocka_unit_test(test_dw_configs),
        cmocka_unit_test(test_transpose_and_double_prune),
        cmocka_unit_test(test_dx_both_ways),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
