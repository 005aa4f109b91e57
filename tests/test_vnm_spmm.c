/* test_vnm_spmm.c: the V:N:M SpMM (with and without its low-rank term) and the GPU compressor.
 * CPU: the templates generate and NVRTC-compile for sm_80 and sm_90a (the sm_90a SASS has
 * HMMA.SP and no local memory; with a rank also HMMA.16816), the wgmma.sp variant (WG=1) for
 * sm_90a (HGMMA.SP, no local memory) and is refused elsewhere, bad configs and arguments are
 * refused with the reason; the fp64 host reference of A . B + U . Z (vnm_spmm_host, walking the
 * compressed slots) against a brute-force dense product of the decompressed A.
 * GPU: sj_vnm_spmm against an fp64 CPU reference of the decompressed A times B on fresh random
 * data for every V in {16, 32, 64, 128} and M in {4, 5, 7, 8, 16, 32, 64, 128}, f16 and bf16,
 * ragged shapes, alpha/beta and every output dtype; explicit tile configs; WG=1 (sm_90a GPUs)
 * for V in {64, 128} and M in {4, 8, 16, 32} over its tiles; sj_vnm_spmm_lowrank against
 * vnm_spmm_host for V in {64, 128}, M in {8, 16}, r in {8, 32, 128} and r = 40, 72 (a padded
 * last k16 step), f16 and bf16, ragged shapes, and tile configs; the GPU compressor byte for
 * byte against the host compressor; upload/download round trips. */
#include "test_util.h"
#include "runtime/runtime.h"
#include "ops/vnm/vnm_format.h"
#include "ops/vnm/vnm_spmm_host.h"
#include "generator/nvrtc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static const int VS[] = { 16, 32, 64, 128 };
static const int MS[] = { 4, 5, 7, 8, 16, 32, 64, 128 };

static sj_problem vnm_problem(sj_dtype dt, sj_dtype out, int64_t rows, int64_t n, int64_t k, int v, int m)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_VNM_SPMM, dt, rows, n, k);
    p.out_dtype = out;
    p.vnm_v = v;
    p.vnm_n = 2;
    p.vnm_m = m;
    return p;
}

static sj_problem lowrank_problem(sj_dtype dt, sj_dtype out, int64_t rows, int64_t n, int64_t k, int v, int m, int r)
{
    sj_problem p = vnm_problem(dt, out, rows, n, k, v, m);
    p.lowrank_rank = r;
    return p;
}


/* Generates p (config cfg, NULL: default) on ctx and compiles it for arch; returns the cubin.
 * The source must hold the sparse MMA of its main loop: mma.sp, or wgmma.sp for WG=1. */
static void *compile(sj_context *ctx, const sj_problem *p, const char *cfg, const char *arch, size_t *size,
                     sj_generated **gout)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, p, cfg, &g));
    const char *mma = tu_config_value(g->config, "WG") == 1 ? "wgmma.mma_async.sp.sync.aligned"
                                                             : "mma.sp::ordered_metadata.sync.aligned.m16n8k32";
    if (!strstr(g->source, mma)) fail_msg("%s (%s): no %s in the source", g->entry, g->config, mma);
    void *cubin = NULL;
    char *log = NULL;
    SJ_ASSERT_OK(nvrtc_compile(g->source, g->entry, arch, &cubin, size, &log, NULL));
    free(log);
    if (gout) *gout = g; else sj_generated_free(g);
    return cubin;
}

/* A context that generates for this machine's GPU, or for sm_90a without one; compiles for
 * other archs go through nvrtc_compile (a context refuses an arch its GPU cannot run). */
static sj_context *gen_context(void)
{
    sj_context *ctx = tu_compile_context(NULL);
    assert_non_null(ctx);
    return ctx;
}

static void test_template_compiles(void **state)
{
    (void)state;
    sj_context *ctx = gen_context(), *ctx80 = tu_compile_context("sm_80");
    assert_non_null(ctx80);
    /* The benchmark shapes' defaults (gather and 2:4 paths), and small ragged ones, each for the
     * arch it is the default of: on sm_90a V = 128 takes wgmma.sp (WG=1) where it fills a wave. */
    const struct { int64_t rows, n, k; int v, m; sj_dtype dt, out; int rank; } cases[] = {
        { 28672, 8192, 8192, 128, 8, SJ_DTYPE_F16, SJ_DTYPE_F16, 0 },
        { 28672, 8192, 8192, 64, 32, SJ_DTYPE_BF16, SJ_DTYPE_BF16, 0 },
        { 4096, 4096, 4096, 128, 4, SJ_DTYPE_F16, SJ_DTYPE_F32, 0 },
        { 100, 136, 333, 16, 7, SJ_DTYPE_BF16, SJ_DTYPE_F16, 0 },
        { 28672, 8192, 8192, 64, 8, SJ_DTYPE_F16, SJ_DTYPE_F32, 8 },
        { 28672, 8192, 8192, 128, 16, SJ_DTYPE_BF16, SJ_DTYPE_BF16, 128 },
        { 100, 136, 333, 16, 7, SJ_DTYPE_BF16, SJ_DTYPE_F16, 40 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = lowrank_problem(cases[i].dt, cases[i].out, cases[i].rows, cases[i].n, cases[i].k, cases[i].v,
                                       cases[i].m, cases[i].rank);
        size_t size;
        void *cubin = compile(ctx80, &p, NULL, "sm_80", &size, NULL);
        assert_true(size > 0);
        free(cubin);
        sj_generated *g;
        cubin = compile(ctx, &p, NULL, "sm_90a", &size, &g);
        const int wgmma = tu_config_value(g->config, "WG") == 1;
        if (wgmma != (cases[i].v == 128 && !cases[i].rank && cases[i].rows >= 4096))
            fail_msg("%s: the sm_90a default %s WG=1", g->config, wgmma ? "took" : "did not take");
        char *sass = tu_sass(cubin, size);
        if (sass) {
            const char *mma = wgmma ? "HGMMA.SP.64x256x32.F32" : "HMMA.SP.16832.F32";
            if (!strstr(sass, mma)) fail_msg("%s: no %s in the SASS", g->entry, mma);
            /* the low-rank tail's dense MMAs, and none without a rank */
            if (!strstr(sass, "HMMA.16816.F32") != !p.lowrank_rank)
                fail_msg("%s: HMMA.16816 %s in the SASS", g->entry, p.lowrank_rank ? "missing" : "present");
            if (strstr(sass, "LDL") || strstr(sass, "STL")) fail_msg("%s (%s): local memory in the SASS", g->entry, g->config);
            free(sass);
        }
        fprintf(stderr, "# %s %s: %zu-byte cubin, %u B shared\n", g->entry, g->config, size, g->shared_bytes);
        sj_generated_free(g);
        free(cubin);
    }
    sj_context_destroy(ctx80);
    /* The compressor template (no op of its own: through the generator directly). */
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(ctx, &gs));
    sj_problem p = vnm_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, 300, 8, 777, 128, 100);
    for (int a = 0; a < 2; a++) {
        sj_generated *g = NULL;
        SJ_ASSERT_OK(gen_generate(gs, "vnm_compress", &p, NULL, &g));
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        SJ_ASSERT_OK(nvrtc_compile(g->source, g->entry, a ? "sm_80" : "sm_90a", &cubin, &size, &log, NULL));
        free(log);
        free(cubin);
        sj_generated_free(g);
    }
    sj_context_destroy(ctx);
}

/* WG=1 (wgmma.sp): generates and NVRTC-compiles for sm_90a on the gather and 2:4 paths, V 64 and
 * 128, one and two warpgroups (two V blocks, the last tile row half past the rows), every BN and
 * BK, both BMAPs, ragged shapes; the SASS holds the sparse HGMMA of the tile's BN (a k step of 32
 * per instruction, each stage's steps in both register sets) and no mma.sync or local memory.
 * Refused for sm_80, V < 64, a tile other than a warpgroup's and an unknown WG, naming why. */
static void test_wgmma_template(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    const struct { int64_t rows, n, k; int v, m; sj_dtype dt, out; int bm, bn, bk, stages, bmap; } cases[] = {
        { 28672, 8192, 8192, 128, 8, SJ_DTYPE_F16, SJ_DTYPE_F16, 128, 256, 64, 4, 1 },
        { 28672, 8192, 8192, 128, 4, SJ_DTYPE_F16, SJ_DTYPE_F16, 128, 256, 64, 4, 0 },
        { 11008, 8192, 4096, 64, 16, SJ_DTYPE_BF16, SJ_DTYPE_F32, 64, 256, 64, 3, 1 },
        { 320, 200, 1000, 64, 7, SJ_DTYPE_F16, SJ_DTYPE_F32, 128, 128, 64, 3, 0 },
        { 200, 136, 333, 64, 4, SJ_DTYPE_BF16, SJ_DTYPE_F16, 64, 64, 128, 2, 1 },
        { 300, 264, 1000, 128, 32, SJ_DTYPE_BF16, SJ_DTYPE_BF16, 128, 64, 64, 2, 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = vnm_problem(cases[i].dt, cases[i].out, cases[i].rows, cases[i].n, cases[i].k, cases[i].v, cases[i].m);
        char cfg[128], hgmma[64];
        snprintf(cfg, sizeof cfg, "WG=1,BM=%d,BN=%d,WM=64,WN=%d,BK=%d,STAGES=%d,BMAP=%d", cases[i].bm, cases[i].bn,
                 cases[i].bn, cases[i].bk, cases[i].stages, cases[i].bmap);
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(ctx, &p, cfg, &g));
        assert_int_equal(tu_config_value(g->config, "WG"), 1);
        assert_non_null(strstr(g->source, "wgmma.mma_async.sp.sync.aligned.m64n"));
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        if (nvrtc_compile(g->source, g->entry, "sm_90a", &cubin, &size, &log, NULL) != SJ_OK)
            fail_msg("%s (%s): %s\n%.2000s", g->entry, cfg, sj_last_error(), log ? log : "");
        free(log);
        char *sass = tu_sass(cubin, size);
        if (sass) {
            snprintf(hgmma, sizeof hgmma, "HGMMA.SP.64x%dx32.F32", cases[i].bn);
            const int steps = tu_count_lines(sass, hgmma);
            if (steps < 2 * cases[i].bk / 32)
                fail_msg("%s (%s): %d %s in the SASS, expected %d or more", g->entry, cfg, steps, hgmma, 2 * cases[i].bk / 32);
            if (strstr(sass, "HMMA.SP")) fail_msg("%s (%s): mma.sync in the SASS", g->entry, cfg);
            if (strstr(sass, "LDL") || strstr(sass, "STL")) fail_msg("%s (%s): local memory in the SASS", g->entry, cfg);
            free(sass);
        }
        fprintf(stderr, "# %s %s: %zu-byte cubin, %u B shared\n", g->entry, g->config, size, g->shared_bytes);
        free(cubin);
        sj_generated_free(g);
    }
    sj_generated *g = NULL;
    sj_problem p = vnm_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 512, 512, 1024, 64, 8);
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WG=1,BM=64,BN=128,WM=32,WN=128", &g), SJ_ERR_INVALID_ARGUMENT,
                     "WG=1 takes WM=64 and WN=BN=128");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WG=1,BM=256,BN=64,WM=64,WN=64", &g), SJ_ERR_INVALID_ARGUMENT,
                     "WG=1 needs BM=64 or 128");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WG=2,BM=64,BN=64,WM=64,WN=64", &g), SJ_ERR_INVALID_ARGUMENT, "WG=2 must be 0");
    p.vnm_v = 32;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WG=1,BM=64,BN=64,WM=64,WN=64", &g), SJ_ERR_INVALID_ARGUMENT, "V >= 64");
    sj_context_destroy(ctx);
    ctx = tu_compile_context("sm_80");
    assert_non_null(ctx);
    p.vnm_v = 64;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WG=1,BM=64,BN=64,WM=64,WN=64", &g), SJ_ERR_INVALID_ARGUMENT, "needs sm_90a");
    assert_null(g);
    sj_context_destroy(ctx);
}

static void test_template_rejects(void **state)
{
    (void)state;
    sj_context *ctx = gen_context();
    sj_generated *g = NULL;
    sj_problem p = vnm_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 256, 100, 512, 64, 8);
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, NULL, &g), SJ_ERR_TEMPLATE, "multiple of 8");
    p = vnm_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 256, 256, 512, 32, 8);
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "WM=64,BM=64", &g), SJ_ERR_INVALID_ARGUMENT, "WM=64 exceeds V=32");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BK=96", &g), SJ_ERR_INVALID_ARGUMENT, "BK=96");
    sj_problem big = vnm_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 256, 256, 8192, 128, 8);
    SJ_ASSERT_STATUS(sj_generate(ctx, &big, "BM=128,BN=256,WM=64,WN=64,STAGES=6", &g), SJ_ERR_INVALID_ARGUMENT,
                     "shared memory");
    /* the rank: 8..128 in steps of 8, vnm-spmm only */
    const int bad_ranks[] = { -8, 4, 12, 136 };
    for (size_t i = 0; i < sizeof bad_ranks / sizeof *bad_ranks; i++) {
        sj_problem q = lowrank_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 256, 256, 512, 64, 8, bad_ranks[i]);
        SJ_ASSERT_STATUS(sj_generate(ctx, &q, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "multiple of 8 in 8..128");
    }
    sj_problem dense;
    sj_problem_init(&dense, SJ_OP_GEMM, SJ_DTYPE_F16, 256, 256, 256);
    dense.lowrank_rank = 32;
    SJ_ASSERT_STATUS(sj_generate(ctx, &dense, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "gemm takes no low-rank term");
    /* the rank is in the key text, and a rank-0 problem's text is what it always was */
    char text[128];
    sj_problem q = lowrank_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 256, 256, 512, 64, 8, 16);
    SJ_ASSERT_OK(sj_problem_describe(&q, text, sizeof text));
    assert_string_equal(text, "vnm-spmm f16->f16 256x256x512 V=64,NS=2,MS=8,R=16");
    q.lowrank_rank = 0;
    SJ_ASSERT_OK(sj_problem_describe(&q, text, sizeof text));
    assert_string_equal(text, "vnm-spmm f16->f16 256x256x512 V=64,NS=2,MS=8");
    p.vnm_v = 48;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "V must be 16, 32, 64 or 128");
    p.vnm_v = 64;
    p.vnm_m = 3;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "M must be in 4..128");
    sj_context_destroy(ctx);
}

/* Argument checks of sj_vnm_spmm come before any device work, so they run without a GPU (the
 * device pointers are made up: nothing may reach a real GPU with them). */
static void test_spmm_arguments(void **state)
{
    (void)state;
    sj_context *ctx = gen_context();
    sj_vnm_device A;
    memset(&A, 0, sizeof A);
    SJ_ASSERT_OK(sj_vnm_layout_init(&A.layout, SJ_DTYPE_F16, 64, 2, 8, 256, 512));
    A.values = A.meta = A.index = 0x10000;
    sj_problem p;
    SJ_ASSERT_OK(sj_vnm_problem(&A.layout, 128, SJ_DTYPE_F32, &p));
    assert_int_equal(p.m, 256);
    assert_int_equal(p.k, 512);
    assert_int_equal(p.vnm_m, 8);
    sj_problem q = p;
    q.k = 520;
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &q, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "does not match A");
    q = p;
    q.vnm_m = 16;
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &q, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "does not match A");
    q = p;
    q.n = 100;
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &q, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "multiple of 8");
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &p, &A, 0, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "B is a null");
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &p, &A, 0x20008, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "16-byte aligned");
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &p, NULL, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "A is NULL");
    q = p;
    q.op = SJ_OP_GEMM;
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &q, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "expected vnm-spmm");
    /* Without a GPU, valid arguments reach the device and stop there. */
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    if (!info.has_gpu) SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &p, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_NO_GPU, NULL);

    /* The low-rank entry point: a rank and U, Z, each refused by name; sj_vnm_spmm takes no rank. */
    sj_devptr U = 0x40000, Z = 0x50000;
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &p, &A, 0x20000, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "lowrank_rank is 0");
    q = p;
    q.lowrank_rank = 32;
    SJ_ASSERT_STATUS(sj_vnm_spmm(ctx, &q, &A, 0x20000, 0x30000, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT, "sj_vnm_spmm_lowrank");
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20000, 0x30000, 0, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "U is a null");
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20000, 0x30000, U, 0x50004, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "Z");
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20008, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "16-byte aligned");
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(NULL, &q, &A, 0x20000, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "sj_vnm_spmm_lowrank: ctx is NULL");
    q.lowrank_rank = 20;
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20000, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "problem.lowrank_rank = 20");
    q.lowrank_rank = 32;
    q.k = 520;
    SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20000, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "sj_vnm_spmm_lowrank: problem");
    q.k = p.k;
    if (!info.has_gpu)
        SJ_ASSERT_STATUS(sj_vnm_spmm_lowrank(ctx, &q, &A, 0x20000, 0x30000, U, Z, 1, 0, NULL), SJ_ERR_NO_GPU, NULL);
    sj_context_destroy(ctx);
}

/* The host reference on fresh random data against a brute-force dense product in fp64 of the
 * decompressed A (every element, zeros included) plus U . Z, for ranks 0 (no term) to 128,
 * ragged rows, columns and n, both dtypes. Exact up to fp64 summation order. */
static void test_host_reference_matches_dense(void **state)
{
    (void)state;
    const struct { int64_t rows, cols, n; int v, m, rank; sj_dtype dt; } cases[] = {
        { 70, 100, 24, 64, 8, 8, SJ_DTYPE_F16 },   { 130, 77, 16, 128, 16, 32, SJ_DTYPE_BF16 },
        { 33, 250, 8, 16, 7, 128, SJ_DTYPE_F16 },  { 64, 64, 40, 32, 4, 0, SJ_DTYPE_BF16 },
        { 129, 300, 8, 64, 32, 40, SJ_DTYPE_BF16 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t rows = cases[c].rows, cols = cases[c].cols, n = cases[c].n;
        const int r = cases[c].rank;
        const sj_dtype dt = cases[c].dt;
        sj_vnm_layout l;
        SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, cases[c].v, 2, cases[c].m, rows, cols));
        uint16_t *A = malloc(rows * cols * 2), *P = malloc(rows * cols * 2), *B = malloc(cols * n * 2);
        uint16_t *U = malloc((r ? r : 1) * rows * 2), *Z = malloc((r ? r : 1) * n * 2);
        double *got = malloc(rows * n * sizeof *got), *want = calloc(rows * n, sizeof *want);
        assert_true(A && P && B && U && Z && got && want);
        tu_fill16(dt, A, rows * cols, 1.0f, &rng);
        tu_fill16(dt, B, cols * n, 1.0f, &rng);
        tu_fill16(dt, U, r * rows, 1.0f, &rng);
        tu_fill16(dt, Z, r * n, 1.0f, &rng);
        sj_vnm_host h;
        SJ_ASSERT_OK(sj_vnm_compress(&l, A, cols, SJ_VNM_PRUNE_L2, &h));
        SJ_ASSERT_OK(sj_vnm_decompress(&h, P, cols));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++) {
                double sum = 0;
                for (int64_t k = 0; k < cols; k++) sum += tu_load(dt, P, i * cols + k) * tu_load(dt, B, k * n + j);
                for (int q = 0; q < r; q++) sum += tu_load(dt, U, i * r + q) * tu_load(dt, Z, q * n + j);
                want[i * n + j] = sum;
            }
        for (int64_t i = 0; i < rows * n; i++) got[i] = NAN;
        SJ_ASSERT_OK(vnm_spmm_host(&h, B, n, r, r ? U : NULL, r ? Z : NULL, got));
        double worst = 0, norm = 0;
        for (int64_t i = 0; i < rows * n; i++) {
            double d = fabs(got[i] - want[i]);
            worst = d > worst || d != d ? d : worst;
            norm += want[i] * want[i];
        }
        if (!(worst <= 1e-9 * (1 + sqrt(norm)))) fail_msg("case %zu: host reference off by %g", c, worst);
        if (r) {
            /* the rank term is there: without it the result differs */
            SJ_ASSERT_OK(vnm_spmm_host(&h, B, n, 0, NULL, NULL, got));
            double diff = 0;
            for (int64_t i = 0; i < rows * n; i++) diff += fabs(got[i] - want[i]);
            assert_true(diff > 1.0);
        }
        SJ_ASSERT_STATUS(vnm_spmm_host(&h, B, n, 8, NULL, Z, got), SJ_ERR_INVALID_ARGUMENT, "needs U and Z");
        sj_vnm_host_free(&h);
        free(A); free(P); free(B); free(U); free(Z); free(got); free(want);
    }
}

/* ---- GPU ---- */

static double tolerance(sj_dtype out)
{
    if (out == SJ_DTYPE_BF16) return 1e-2;
    if (out == SJ_DTYPE_F16) return 2e-3;
    return 1e-5; /* f32 out: only fp32 accumulation rounding */
}

/* Runs C = alpha*A.B + beta*C for problem p on random data; returns the relative error against
 * the fp64 product of the decompressed (pruned) A. */
static double run_spmm(sj_context *ctx, const sj_problem *p, float alpha, float beta)
{
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, p->dtype, p->vnm_v, p->vnm_n, p->vnm_m, p->m, p->k));
    size_t na = (size_t)(p->m * p->k), nb = (size_t)(p->k * p->n), nc = (size_t)(p->m * p->n);
    size_t osz = sj_dtype_size(p->out_dtype);
    uint16_t *A = malloc(na * 2), *P = malloc(na * 2), *B = malloc(nb * 2);
    unsigned char *C0 = malloc(nc * osz), *C = malloc(nc * osz);
    double *ref = malloc(nc * sizeof(double));
    assert_true(A && P && B && C0 && C && ref);
    tu_fill16(p->dtype, A, na, 1.0f, &rng);
    tu_fill16(p->dtype, B, nb, 1.0f, &rng);
    if (beta != 0.0f) {
        if (p->out_dtype == SJ_DTYPE_F32)
            for (size_t i = 0; i < nc; i++) ((float *)C0)[i] = (float)tu_uniform(&rng);
        else
            tu_fill16(p->out_dtype, (uint16_t *)C0, nc, 1.0f, &rng);
    } else {
        memset(C0, 0xFF, nc * osz); /* NaN: beta = 0 must neither read C nor leave it unwritten */
    }
    sj_vnm_host h;
    SJ_ASSERT_OK(sj_vnm_compress(&l, A, p->k, SJ_VNM_PRUNE_L2, &h));
    SJ_ASSERT_OK(sj_vnm_decompress(&h, P, p->k));
    /* with a rank: U and Z, and the slot-walking host reference of A . B + U . Z */
    const int r = p->lowrank_rank;
    size_t nu = (size_t)(p->m * r), nz = (size_t)(r * p->n);
    uint16_t *U = malloc(nu * 2 + 2), *Z = malloc(nz * 2 + 2);
    assert_true(U && Z);
    tu_fill16(p->dtype, U, nu, 1.0f, &rng);
    tu_fill16(p->dtype, Z, nz, 1.0f, &rng);
    if (r) SJ_ASSERT_OK(vnm_spmm_host(&h, B, p->n, r, U, Z, ref));
    else tu_ref_gemm16(p->dtype, P, B, ref, p->m, p->n, p->k);
    for (size_t i = 0; i < nc; i++) ref[i] = alpha * ref[i] + (beta != 0.0f ? beta * tu_load(p->out_dtype, C0, i) : 0.0);
    sj_vnm_device dA;
    sj_devptr dB, dC, dU = 0, dZ = 0;
    SJ_ASSERT_OK(sj_vnm_upload(ctx, &h, &dA));
    SJ_ASSERT_OK(sj_malloc(ctx, nb * 2, &dB));
    SJ_ASSERT_OK(sj_malloc(ctx, nc * osz, &dC));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dB, B, nb * 2));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dC, C0, nc * osz));
    if (r) {
        SJ_ASSERT_OK(sj_malloc(ctx, nu * 2, &dU));
        SJ_ASSERT_OK(sj_malloc(ctx, nz * 2, &dZ));
        SJ_ASSERT_OK(sj_memcpy_htod(ctx, dU, U, nu * 2));
        SJ_ASSERT_OK(sj_memcpy_htod(ctx, dZ, Z, nz * 2));
        SJ_ASSERT_OK(sj_vnm_spmm_lowrank(ctx, p, &dA, dB, dC, dU, dZ, alpha, beta, NULL));
    } else {
        SJ_ASSERT_OK(sj_vnm_spmm(ctx, p, &dA, dB, dC, alpha, beta, NULL));
    }
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, C, dC, nc * osz));
    double err = tu_rel_error(p->out_dtype, C, ref, nc);
    SJ_ASSERT_OK(sj_vnm_device_free(ctx, &dA));
    sj_free(ctx, dB);
    sj_free(ctx, dC);
    if (r) {
        sj_free(ctx, dU);
        sj_free(ctx, dZ);
    }
    sj_vnm_host_free(&h);
    free(A); free(P); free(B); free(C0); free(C); free(ref); free(U); free(Z);
    return err;
}

static void check_spmm(sj_context *ctx, const sj_problem *p, float alpha, float beta)
{
    double err = run_spmm(ctx, p, alpha, beta);
    sj_kernel_info ki;
    SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
    char desc[160];
    SJ_ASSERT_OK(sj_problem_describe(p, desc, sizeof desc));
    fprintf(stderr, "# %-48s a=%.2f b=%.2f %-52s rel err %.2e\n", desc, alpha, beta, ki.config, err);
    if (!(err < tolerance(p->out_dtype)))
        fail_msg("%s (config %s): relative error %.3e over %.1e", desc, ki.config, err, tolerance(p->out_dtype));
}

static void test_spmm_matches_fp64(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    /* rows not a multiple of V, K not of M, N not of the tile; shapes rotate over the cases. */
    const int64_t shapes[][3] = { { 3, 136, 5 }, { 2, 72, 11 }, { 5, 264, 3 } }; /* rows = V*a+b, n, K = M*c+d */
    const sj_dtype dts[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };
    int i = 0;
    for (int d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 4; vi++)
            for (size_t mi = 0; mi < sizeof MS / sizeof *MS; mi++, i++) {
                const int64_t *s = shapes[i % 3];
                int v = VS[vi], m = MS[mi];
                sj_dtype out = (i % 3 == 0) ? SJ_DTYPE_F32 : (i % 3 == 1 ? dts[d] : dts[1 - d]);
                sj_problem p = vnm_problem(dts[d], out, v * (s[0] / 2) + s[0] + 1, s[1], m * (8 + s[2]) + s[2], v, m);
                check_spmm(ctx, &p, i % 2 ? 1.25f : 1.0f, i % 2 ? -0.5f : 0.0f);
            }
}

/* Tile configs the defaults do not reach: several V blocks per CTA, 8 warps, BK=128, deep and
 * shallow rings, 16-wide warps. */
static void test_spmm_configs(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const struct { int64_t rows, n, k; int v, m; sj_dtype dt, out; const char *cfg; } cases[] = {
        { 300, 264, 1000, 64, 8, SJ_DTYPE_F16, SJ_DTYPE_F16, "BM=128,BN=128,WM=64,WN=64,STAGES=4,BMAP=0" },
        { 256, 512, 2048, 128, 16, SJ_DTYPE_BF16, SJ_DTYPE_F32, "BM=256,BN=128,WM=64,WN=64,STAGES=3" },
        { 256, 256, 1792, 128, 7, SJ_DTYPE_F16, SJ_DTYPE_F16, "BK=128,STAGES=3" },
        { 200, 200, 900, 32, 5, SJ_DTYPE_F16, SJ_DTYPE_BF16, "BM=128,BN=64,WM=32,WN=32,STAGES=5" },
        { 96, 512, 4000, 16, 32, SJ_DTYPE_BF16, SJ_DTYPE_BF16, "BM=32,BN=64,WM=16,WN=16,STAGES=6" },
        { 192, 192, 640, 64, 4, SJ_DTYPE_F16, SJ_DTYPE_F32, "BM=64,BN=64,WM=64,WN=16,STAGES=2,BMAP=1" },
        { 512, 1024, 4096, 64, 8, SJ_DTYPE_F16, SJ_DTYPE_F16, "BM=128,BN=256,WM=64,WN=64,STAGES=3,GROUP_M=64" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = vnm_problem(cases[i].dt, cases[i].out, cases[i].rows, cases[i].n, cases[i].k, cases[i].v, cases[i].m);
        SJ_ASSERT_OK(sj_set_config(ctx, &p, cases[i].cfg));
        check_spmm(ctx, &p, 0.75f, i % 2 ? 0.5f : 0.0f);
        SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    }
}

/* The low-rank term: V in {64, 128}, M in {8, 16}, r in {8, 32, 128} and 40, 72 (r not a
 * multiple of 16: the tail's last k16 step reads zeros past r), f16 and bf16, rows, n and K
 * ragged (n a multiple of 8, not of the tile), every output dtype, alpha and beta. */
static void test_lowrank_matches_fp64(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const int vs[] = { 64, 128 }, ms[] = { 8, 16 }, ranks[] = { 8, 32, 128, 40, 72 };
    const int64_t shapes[][3] = { { 3, 136, 5 }, { 2, 72, 11 }, { 5, 264, 3 } }; /* rows = V*a+b, n, K = M*c+d */
    const sj_dtype dts[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };
    int i = 0;
    for (int d = 0; d < 2; d++)
        for (int vi = 0; vi < 2; vi++)
            for (int mi = 0; mi < 2; mi++)
                for (size_t ri = 0; ri < sizeof ranks / sizeof *ranks; ri++, i++) {
                    const int64_t *s = shapes[i % 3];
                    int v = vs[vi], m = ms[mi];
                    sj_dtype out = (i % 3 == 0) ? SJ_DTYPE_F32 : (i % 3 == 1 ? dts[d] : dts[1 - d]);
                    sj_problem p = lowrank_problem(dts[d], out, v * (s[0] / 2) + s[0] + 1, s[1], m * (8 + s[2]) + s[2], v,
                                                   m, ranks[ri]);
                    check_spmm(ctx, &p, i % 2 ? 1.25f : 1.0f, i % 2 ? -0.5f : 0.0f);
                }
}

/* The tail under tile configs the defaults do not reach: several V blocks per CTA (BM > V), 8
 * warps, 16-wide warps (one ldmatrix row group), BN = 256 with N ragged, BK = 128, a shallow
 * ring whose slots are smaller than the tail's tiles (the shared size is the tail's). */
static void test_lowrank_configs(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const struct { int64_t rows, n, k; int v, m, r; sj_dtype dt, out; const char *cfg; } cases[] = {
        { 300, 264, 1000, 64, 8, 32, SJ_DTYPE_F16, SJ_DTYPE_F16, "BM=128,BN=128,WM=64,WN=64,STAGES=4,BMAP=0" },
        { 256, 512, 2048, 128, 16, 128, SJ_DTYPE_BF16, SJ_DTYPE_F32, "BM=256,BN=128,WM=64,WN=64,STAGES=3" },
        { 256, 520, 1792, 128, 8, 72, SJ_DTYPE_F16, SJ_DTYPE_F16, "BM=128,BN=256,WM=64,WN=64,STAGES=2" },
        { 96, 512, 4000, 64, 16, 128, SJ_DTYPE_BF16, SJ_DTYPE_BF16, "BM=32,BN=64,WM=16,WN=16,STAGES=2" },
        { 192, 200, 640, 64, 8, 8, SJ_DTYPE_F16, SJ_DTYPE_F32, "BM=64,BN=64,WM=64,WN=16,STAGES=2,BMAP=1" },
        { 200, 136, 900, 64, 16, 40, SJ_DTYPE_BF16, SJ_DTYPE_F16, "BM=128,BN=64,WM=32,WN=32,BK=128,STAGES=3" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = lowrank_problem(cases[i].dt, cases[i].out, cases[i].rows, cases[i].n, cases[i].k, cases[i].v,
                                       cases[i].m, cases[i].r);
        SJ_ASSERT_OK(sj_set_config(ctx, &p, cases[i].cfg));
        check_spmm(ctx, &p, 0.75f, i % 2 ? 0.5f : 0.0f);
        SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    }
}

/* WG=1 (wgmma.sp) against the fp64 reference where the GPU is sm_90a (elsewhere the test says it
 * skipped them): V 64 and 128, M 4, 8, 16 and 32, f16 and bf16, every output dtype in turn, alpha
 * and beta (beta 0: C poisoned); rows not a multiple of V (and at V=64 an odd number of V blocks:
 * a BM=128 CTA's second warpgroup past the rows), K not of M, N a multiple of 8 but not of BN; the
 * tiles rotate over one and two warpgroups, BN 64/128/256, BK 64 (an odd number of k stages: the
 * loop's last register set unused) and 128, BMAP 0 and 1, 2-4 stages (BM=128 at V=64 holds two B
 * tiles a stage). Then one longer k (33 stages of 64) at the 128 x 256 tile. The kernel that ran
 * must be the WG=1 one asked for. */
static void test_spmm_wgmma_matches_fp64(void **state)
{
    (void)state;
    sj_context *ctx;
    sj_device_info info;
    TU_REQUIRE_GPU(ctx);
    if (sj_get_device_info(ctx, &info) != SJ_OK) fail_msg("sj_get_device_info: %s", sj_last_error());
    if (strcmp(info.arch, "sm_90a") != 0) {
        fprintf(stderr, "# SKIP vnm-spmm WG=1 cases: wgmma.sp needs sm_90a, this GPU is %s\n", info.arch);
        return;
    }
    const struct { int bm, bn, bk, stages, bmap; } tiles[] = {
        { 64, 256, 64, 3, 1 }, { 128, 128, 64, 4, 1 }, { 64, 64, 128, 2, 0 }, { 128, 256, 64, 2, 0 }, { 64, 128, 128, 3, 1 },
    };
    const int wg_ms[] = { 4, 8, 16, 32 };
    const sj_dtype dts[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 }, outs[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };
    int i = 0;
    for (int d = 0; d < 2; d++)
        for (int v = 64; v <= 128; v *= 2)
            for (size_t mi = 0; mi < sizeof wg_ms / sizeof *wg_ms; mi++, i++) {
                const int m = wg_ms[mi], n_tiles = sizeof tiles / sizeof *tiles;
                const int t = i % n_tiles;
                /* groups: 143 -> 18 k tiles, 9 stages of 64; 124 -> 16 k tiles, 4 stages of 128 */
                const int64_t groups = tiles[t].bk == 64 ? 143 : 124;
                const int64_t rows = i % 2 ? 2 * v + 5 : 3 * v + v / 2 + 5, n = i % 3 ? 264 : 136;
                sj_problem p = vnm_problem(dts[d], outs[i % 3], rows, n, m * (groups - 1) + m / 2 + 1, v, m);
                char cfg[128];
                snprintf(cfg, sizeof cfg, "WG=1,BM=%d,BN=%d,WM=64,WN=%d,BK=%d,STAGES=%d,BMAP=%d", tiles[t].bm,
                         tiles[t].bn, tiles[t].bn, tiles[t].bk, tiles[t].stages, tiles[t].bmap);
                SJ_ASSERT_OK(sj_set_config(ctx, &p, cfg));
                check_spmm(ctx, &p, i % 2 ? 1.25f : 0.75f, i % 2 ? -0.5f : 0.0f);
                sj_kernel_info ki;
                SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
                if (tu_config_value(ki.config, "WG") != 1 || tu_config_value(ki.config, "BN") != tiles[t].bn)
                    fail_msg("asked for %s, ran %s", cfg, ki.config);
                SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
            }
    sj_problem p = vnm_problem(SJ_DTYPE_BF16, SJ_DTYPE_F32, 520, 1032, 8195, 128, 16);
    SJ_ASSERT_OK(sj_set_config(ctx, &p, "WG=1,BM=128,BN=256,WM=64,WN=256,BK=64,STAGES=4,BMAP=1"));
    check_spmm(ctx, &p, 1.0f, 0.25f);
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
}

static void test_compress_device_matches_host(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const struct { sj_dtype dt; int64_t rows, cols; int v, m; } cases[] = {
        { SJ_DTYPE_F16, 100, 300, 16, 4 }, { SJ_DTYPE_BF16, 70, 1000, 32, 7 }, { SJ_DTYPE_F16, 200, 999, 64, 16 },
        { SJ_DTYPE_BF16, 300, 777, 128, 100 }, { SJ_DTYPE_F16, 64, 130, 64, 5 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_vnm_layout l;
        SJ_ASSERT_OK(sj_vnm_layout_init(&l, cases[i].dt, cases[i].v, 2, cases[i].m, cases[i].rows, cases[i].cols));
        int64_t lda = cases[i].cols + 3;
        size_t n = (size_t)(cases[i].rows * lda);
        uint16_t *A = malloc(n * 2), *P = calloc(n, 2);
        tu_fill16(cases[i].dt, A, n, 1.0f, &rng);
        for (size_t j = 0; j < n; j += 7) A[j] = 0; /* zero norms and rows: ties and fills */
        sj_devptr dA;
        SJ_ASSERT_OK(sj_malloc(ctx, n * 2, &dA));
        for (int sel = 0; sel < 4; sel++) {
            /* sel 3: EXACT on the pruned matrix, which has the pattern */
            sj_vnm_select s = sel == 3 ? SJ_VNM_EXACT : (sj_vnm_select)sel;
            const uint16_t *src = A;
            if (sel == 3) {
                sj_vnm_host hp;
                SJ_ASSERT_OK(sj_vnm_compress(&l, A, lda, SJ_VNM_PRUNE_L1, &hp));
                SJ_ASSERT_OK(sj_vnm_decompress(&hp, P, lda));
                sj_vnm_host_free(&hp);
                src = P;
            }
            SJ_ASSERT_OK(sj_memcpy_htod(ctx, dA, src, n * 2));
            sj_vnm_device d;
            if (s == SJ_VNM_EXACT && sel == 0) {
                /* The dense matrix is not V:N:M: both compressors name the same first violation,
                   a block or a row ("... has" / "... have"), the host with its count. */
                assert_int_equal(sj_vnm_check(&l, A, lda), SJ_ERR_PATTERN);
                char host[512];
                snprintf(host, sizeof host, "%s", sj_last_error());
                const char *verb = strstr(host, " ha");
                assert_non_null(verb);
                SJ_ASSERT_STATUS(sj_vnm_compress_device(ctx, &l, dA, lda, s, &d, NULL), SJ_ERR_PATTERN, NULL);
                if (strncmp(sj_last_error(), host, (size_t)(verb - host) + 3))
                    fail_msg("case %zu: GPU says '%s', host says '%s'", i, sj_last_error(), host);
                assert_int_equal(d.values, 0);
                continue;
            }
            SJ_ASSERT_OK(sj_vnm_compress_device(ctx, &l, dA, lda, s, &d, NULL));
            sj_vnm_host want, got;
            SJ_ASSERT_OK(sj_vnm_compress(&l, src, lda, s, &want));
            SJ_ASSERT_OK(sj_vnm_download(ctx, &d, &got));
            if (memcmp(want.values, got.values, l.values_bytes) || memcmp(want.meta, got.meta, l.meta_bytes) ||
                memcmp(want.index, got.index, l.index_bytes))
                fail_msg("case %zu select %d: the GPU compressor differs from the host compressor", i, sel);
            sj_vnm_host_free(&want);
            sj_vnm_host_free(&got);
            SJ_ASSERT_OK(sj_vnm_device_free(ctx, &d));
        }
        sj_free(ctx, dA);
        free(A);
        free(P);
    }
}

static void test_upload_download(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, SJ_DTYPE_BF16, 32, 2, 12, 77, 500));
    uint16_t *A = malloc(77 * 500 * 2);
    tu_fill16(SJ_DTYPE_BF16, A, 77 * 500, 1.0f, &rng);
    sj_vnm_host h, back;
    SJ_ASSERT_OK(sj_vnm_compress(&l, A, 500, SJ_VNM_PRUNE_L2, &h));
    sj_vnm_device d;
    SJ_ASSERT_OK(sj_vnm_upload(ctx, &h, &d));
    SJ_ASSERT_OK(sj_vnm_download(ctx, &d, &back));
    assert_memory_equal(h.values, back.values, l.values_bytes);
    assert_memory_equal(h.meta, back.meta, l.meta_bytes);
    assert_memory_equal(h.index, back.index, l.index_bytes);
    SJ_ASSERT_OK(sj_vnm_device_free(ctx, &d));
    sj_vnm_host_free(&h);
    sj_vnm_host_free(&back);
    free(A);
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_compiles),
        cmocka_unit_test(test_wgmma_template),
        cmocka_unit_test(test_template_rejects),
        cmocka_unit_test(test_spmm_arguments),
        cmocka_unit_test(test_host_reference_matches_dense),
        cmocka_unit_test(test_spmm_matches_fp64),
        cmocka_unit_test(test_spmm_configs),
        cmocka_unit_test(test_lowrank_matches_fp64),
        cmocka_unit_test(test_lowrank_configs),
        cmocka_unit_test(test_spmm_wgmma_matches_fp64),
        cmocka_unit_test(test_compress_device_matches_host),
        cmocka_unit_test(test_upload_download),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
