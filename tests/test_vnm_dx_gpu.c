/* test_vnm_dx_gpu.c: the exact input gradient from W's compressed form (vnm-dx,
 * templates/vnm_dx.lua, sj_vnm_dx; docs/training.md).
 * CPU: the template refuses what it cannot run, naming why; a default exists for every V and M
 * on sm_80 and sm_90a, and at V in {64, 128}, M in {4, 8, 16, 32} it compiles with NVRTC for both
 * with no local memory (SASS, where cuobjdump is found); the entry points refuse bad arguments
 * naming them; the harness's sampled reference (vnm_step_reference_dx, exact rule) equals the
 * rows of sj_vnm_dx_host.
 * GPU (skipped with the reason without one): sj_vnm_dx against the fp64 host reference
 * (sj_vnm_dx_host) for every V in {64, 128}, M in {4, 8, 16, 32}, f16 and bf16, every output
 * dtype, ragged rows, columns and tokens, the output poisoned first; explicit tile configs (the
 * smallest, BG = 4 tiles starting mid fragment tile, the largest warp tiles, 4 stages, 256
 * tokens); two runs equal byte for byte (no atomics). */
#include "test_util.h"
#include "ops/vnm/vnm_format.h"
#include "ops/vnm/vnm_step_reference.h"
#include "tuner/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int VS[] = { 64, 128 };
static const int MS[] = { 4, 8, 16, 32 };
static const sj_dtype DTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };
static const sj_dtype OUTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };

static double tolerance(sj_dtype in, sj_dtype out) { return in == SJ_DTYPE_BF16 || out == SJ_DTYPE_BF16 ? 1e-2 : 5e-3; }

static void problem_of(sj_problem *p, int v, int m, int64_t rows, int64_t cols, int64_t tokens)
{
    sj_problem_init(p, SJ_OP_VNM_DX, SJ_DTYPE_F16, rows, cols, tokens);
    p->vnm_v = v, p->vnm_n = 2, p->vnm_m = m;
}

/* ---------------------------------------------------------------- CPU */

static void test_template_refuses(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_problem p;
    problem_of(&p, 32, 8, 256, 256, 256);
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=16,BN=64,BK=64,WM=32,WN=32,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT,
                     "BK=64 exceeds V=32");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=16,BN=64,BK=48,WM=32,WN=32,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT, "BK=48");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=12,BN=64,BK=32,WM=16,WN=32,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT, "BG=12");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=16,BN=128,BK=32,WM=16,WN=16,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT,
                     "= 32 warps");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=4,BN=64,BK=32,WM=32,WN=32,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT,
                     "4*BG=16 (compact rows) is not a multiple of WM=32");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=16,BN=64,BK=32,WM=32,WN=32,STAGES=5", &g), SJ_ERR_INVALID_ARGUMENT, "STAGES=5");
    /* 64 groups of 32 columns: a 2048-row fp32 tile */
    p.n = 4096, p.vnm_m = 32;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BG=64,BN=128,BK=32,WM=64,WN=64,STAGES=3", &g), SJ_ERR_INVALID_ARGUMENT,
                     "fp32 tile of 2048 x 128");
    problem_of(&p, 64, 8, 256, 256, 250);
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, NULL, &g), SJ_ERR_INVALID_ARGUMENT, "problem.k = 250");
    sj_context_destroy(ctx);
}

/* The default of every V and M; at the tested V and M it compiles for both targets, no spills. */
static void test_defaults_compile(void **state)
{
    (void)state;
    const char *archs[] = { "sm_80", "sm_90a" };
    static const int all_v[] = { 16, 32, 64, 128 }, all_m[] = { 4, 5, 8, 16, 32, 64, 128 };
    for (size_t a = 0; a < 2; a++) {
        sj_context *ctx = tu_compile_context(archs[a]);
        assert_non_null(ctx);
        for (size_t vi = 0; vi < 4; vi++)
            for (size_t mi = 0; mi < sizeof all_m / sizeof *all_m; mi++) {
                sj_problem p;
                problem_of(&p, all_v[vi], all_m[mi], 11008, 4096, 8192);
                sj_generated *g = NULL;
                SJ_ASSERT_OK(sj_generate(ctx, &p, NULL, &g));
                sj_generated_free(g);
            }
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                sj_problem p;
                problem_of(&p, VS[vi], MS[mi], 2 * VS[vi] + 19, 37 * MS[mi] + 3, 200);
                p.dtype = DTS[(vi + mi) % 2];
                sj_generated *g = NULL;
                SJ_ASSERT_OK(sj_generate(ctx, &p, NULL, &g));
                void *cubin = NULL;
                size_t size = 0;
                char *log = NULL;
                sj_status st = sj_compile(ctx, g, &cubin, &size, &log);
                if (st != SJ_OK) fail_msg("vnm-dx V=%d 2:%d on %s (%s): %s", VS[vi], MS[mi], archs[a], g->config, log ? log : "");
                char *sass = tu_sass(cubin, size);
                if (sass) {
                    assert_int_equal(tu_count_lines(sass, "LDL"), 0);
                    assert_int_equal(tu_count_lines(sass, "STL"), 0);
                    assert_true(tu_count_lines(sass, "HMMA.16816.F32") > 0);
                }
                printf("# vnm-dx V=%d 2:%d %s on %s: %s\n", VS[vi], MS[mi], sj_dtype_name(p.dtype), archs[a], g->config);
                free(sass);
                free(cubin);
                free(log);
                sj_generated_free(g);
            }
        sj_context_destroy(ctx);
    }
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
    SJ_ASSERT_OK(sj_vnm_dx_problem(&h.layout, 64, SJ_DTYPE_F32, &p));
    assert_int_equal(p.op, SJ_OP_VNM_DX);
    assert_int_equal(p.m, 128);
    assert_int_equal(p.n, 96);
    assert_int_equal(p.k, 64);
    SJ_ASSERT_STATUS(sj_vnm_dx_problem(&h.layout, 60, SJ_DTYPE_F32, &p), SJ_ERR_INVALID_ARGUMENT, "problem.k = 60");
    SJ_ASSERT_STATUS(sj_vnm_dx_problem(&h.layout, 64, SJ_DTYPE_F32, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    SJ_ASSERT_OK(sj_vnm_dx_problem(&h.layout, 64, SJ_DTYPE_F32, &p));
    sj_problem q = p;
    q.n = 100;
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &q, &W, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "does not match W");
    SJ_ASSERT_OK(sj_vnm_dw_problem(&h.layout, 64, SJ_DTYPE_F32, &q));
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &q, &W, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "expected vnm-dx");
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &p, &W, 4097, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "dY");
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &p, &W, 4096, 4100, NULL), SJ_ERR_INVALID_ARGUMENT, "dX");
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &p, NULL, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "W is NULL");
    W.values = 0;
    SJ_ASSERT_STATUS(sj_vnm_dx(ctx, &p, &W, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "W.values");
    SJ_ASSERT_STATUS(sj_vnm_dx(NULL, &p, &W, 4096, 4096, NULL), SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    sj_vnm_host_free(&h);
    sj_context_destroy(ctx);
}

/* The benches' sampled reference against the rows of the whole host reference. */
static void test_sampled_reference(void **state)
{
    (void)state;
    uint64_t rng = tu_seed();
    for (size_t mi = 0; mi < 4; mi++) {
        const sj_dtype dt = DTS[mi % 2];
        const int64_t rows = 150, cols = 21 * MS[mi] + 5, tokens = 24;
        sj_vnm_host h;
        tu_random_vnm(NULL, dt, 64, MS[mi], rows, cols, &rng, &h, NULL);
        const crng_matrix law = { dt, crng_key(rng, 2), rows, tokens, NULL };
        uint16_t *dY = malloc((size_t)(rows * tokens) * 2);
        float *whole = malloc((size_t)(cols * tokens) * sizeof *whole);
        crng_matrix_fill(&law, dY);
        SJ_ASSERT_OK(sj_vnm_dx_host(&h, dY, tokens, SJ_DTYPE_F32, whole));
        vnm_step_sample s;
        SJ_ASSERT_OK(vnm_step_reference_dx(&h, &law, VNM_DX_EXACT, &s));
        assert_int_equal(s.dx_rows, harness_sample_count(cols));
        assert_int_equal(s.y_rows, 0);
        double diff = 0, norm = 0;
        for (int j = 0; j < s.dx_rows; j++)
            for (int64_t t = 0; t < tokens; t++) {
                double a = s.dx[j * tokens + t], b = whole[harness_sample_row(cols, j) * tokens + t];
                diff += (a - b) * (a - b);
                norm += b * b;
            }
        assert_true(norm > 0);
        if (!(sqrt(diff / norm) < 1e-6)) fail_msg("2:%d: sampled rows differ from sj_vnm_dx_host by %g", MS[mi], sqrt(diff / norm));
        vnm_step_sample_free(&s);
        free(dY);
        free(whole);
        sj_vnm_host_free(&h);
    }
}

/* ---------------------------------------------------------------- GPU */

/* sj_vnm_dx with config forced ("": the op's choice) against sj_vnm_dx_host; the output's bytes in
 * *out_bytes when asked (the caller frees them). Returns the relative error. */
static double run_dx(sj_context *ctx, const char *config, sj_dtype dt, sj_dtype od, int v, int m, int64_t rows,
                     int64_t cols, int64_t tokens, uint64_t *rng, void **out_bytes)
{
    sj_vnm_host h;
    sj_vnm_device W;
    tu_random_vnm(ctx, dt, v, m, rows, cols, rng, &h, &W);
    uint16_t *dY = malloc((size_t)(rows * tokens) * 2);
    tu_fill16(dt, dY, (size_t)(rows * tokens), 1.0f, rng);
    const size_t n = (size_t)(cols * tokens), osz = sj_dtype_size(od);
    sj_devptr ddY, ddX;
    SJ_ASSERT_OK(sj_malloc(ctx, (size_t)(rows * tokens) * 2, &ddY));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, ddY, dY, (size_t)(rows * tokens) * 2));
    SJ_ASSERT_OK(sj_malloc(ctx, n * osz, &ddX));
    SJ_ASSERT_OK(sj_memset_u8(ctx, ddX, 0xff, n * osz)); /* NaN: every element must be written */
    sj_problem p;
    SJ_ASSERT_OK(sj_vnm_dx_problem(&h.layout, tokens, od, &p));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, config));
    SJ_ASSERT_OK(sj_vnm_dx(ctx, &p, &W, ddY, ddX, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    void *out = malloc(n * osz);
    float *ref32 = malloc(n * 4);
    double *ref = malloc(n * sizeof *ref);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, ddX, n * osz));
    SJ_ASSERT_OK(sj_vnm_dx_host(&h, dY, tokens, SJ_DTYPE_F32, ref32));
    for (size_t i = 0; i < n; i++) ref[i] = ref32[i];
    double err = tu_rel_error(od, out, ref, n);
    if (out_bytes) *out_bytes = out;
    else free(out);
    free(ref32);
    free(ref);
    free(dY);
    sj_free(ctx, ddY);
    sj_free(ctx, ddX);
    sj_vnm_device_free(ctx, &W);
    sj_vnm_host_free(&h);
    return err;
}

static void test_dx_matches_fp64(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                const sj_dtype dt = DTS[d], od = OUTS[(d + vi + mi) % 3];
                const int v = VS[vi], m = MS[mi];
                /* ragged: rows not a multiple of V, columns not of M, tokens not of any tile */
                const int64_t rows = 2 * v + 19, cols = 37 * m + 3, tokens = 8 * (int64_t)(25 + 6 * mi);
                double err = run_dx(ctx, "", dt, od, v, m, rows, cols, tokens, &rng, NULL);
                if (!(err <= tolerance(dt, od)))
                    fail_msg("vnm-dx V=%d 2:%d %s->%s %lldx%lld T=%lld: rel. error %g", v, m, sj_dtype_name(dt),
                             sj_dtype_name(od), (long long)rows, (long long)cols, (long long)tokens, err);
            }
}

static void test_dx_configs(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    static const struct { const char *config; int v, m; int64_t cols; } cfgs[] = {
        { "BG=4,BN=32,BK=16,WM=16,WN=32,STAGES=2", 64, 8, 333 },   /* one warp; BG=4 tiles start mid fragment tile */
        { "BG=4,BN=64,BK=16,WM=16,WN=16,STAGES=4", 128, 32, 333 }, /* 4 warps over the tokens, 4 stages, BK=16 */
        { "BG=8,BN=64,BK=64,WM=32,WN=16,STAGES=3", 64, 16, 333 },  /* BK=V: one stage per row block */
        { "BG=64,BN=64,BK=32,WM=64,WN=32,STAGES=3", 128, 4, 565 }, /* the largest warp tile rows, 256 compact rows */
        { "BG=8,BN=256,BK=32,WM=32,WN=64,STAGES=2", 64, 8, 333 },  /* 256 tokens */
        { "BG=32,BN=64,BK=32,WM=32,WN=64,STAGES=3", 128, 8, 565 }, /* the last tile past the padded groups */
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const int64_t rows = 300, tokens = 136;
        double err = run_dx(ctx, cfgs[i].config, SJ_DTYPE_BF16, SJ_DTYPE_F32, cfgs[i].v, cfgs[i].m, rows, cfgs[i].cols,
                            tokens, &rng, NULL);
        if (!(err <= tolerance(SJ_DTYPE_BF16, SJ_DTYPE_F32)))
            fail_msg("vnm-dx config %s V=%d 2:%d, %lld columns: rel. error %g", cfgs[i].config, cfgs[i].v, cfgs[i].m,
                     (long long)cfgs[i].cols, err);
    }
}

/* No atomics: the same inputs give the same bytes. */
static void test_dx_deterministic(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t seed = tu_seed();
    void *out[2];
    for (int run = 0; run < 2; run++) {
        uint64_t rng = seed;
        double err = run_dx(ctx, "", SJ_DTYPE_F16, SJ_DTYPE_F32, 128, 8, 515, 1027, 264, &rng, &out[run]);
        assert_true(err <= tolerance(SJ_DTYPE_F16, SJ_DTYPE_F32));
    }
    assert_memory_equal(out[0], out[1], (size_t)(1027 * 264) * 4);
    free(out[0]);
    free(out[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_refuses),
        cmocka_unit_test(test_defaults_compile),
        cmocka_unit_test(test_entry_points_refuse),
        cmocka_unit_test(test_sampled_reference),
        cmocka_unit_test(test_dx_matches_fp64),
        cmocka_unit_test(test_dx_configs),
        cmocka_unit_test(test_dx_deterministic),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
