/* test_bench_gpu.c: the one benchmark path on the GPU. The baseline's element-wise kernel
 * (templates/ewise_product.lua) against the host, bit for bit, on ragged sizes; a bench's
 * sampled reference holds exactly the full reference's rows, and the gate passes the request
 * path's kernel under both; bench_run of every op, of the FFN block, of a V:N:M layer's
 * training step and of the FFN block's over hybrid activations checks its output, counts the
 * FLOPs bench_flops gives, times a baseline of the steps it names and, where a benchmark times
 * its parts (or its baseline's) alone, each part, and counts a training step's saved bytes. */
#include "test_util.h"
#include "core/op.h"
#include "runtime/runtime.h"
#include "tuner/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static void test_elementwise_kernel_matches_host(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const int64_t shapes[][2] = { { 333, 77 }, { 1, 5 }, { 64, 1024 } }; /* 25641 and 5 are not multiples of 8 */
    for (int d = 0; d < 2; d++) {
        sj_dtype dt = d ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            sj_problem p;
            sj_problem_init(&p, SJ_OP_GEMM, dt, shapes[s][0], shapes[s][1], 1);
            const loaded_kernel *k;
            SJ_ASSERT_OK(rt_kernel_with_config(ctx, &p, "ewise_product", "", &k));
            long long n = (long long)(p.m * p.n);
            uint16_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2), *c = malloc((size_t)n * 2);
            assert_true(a && b && c);
            tu_fill16(dt, a, (size_t)n, 4.0f, &rng);
            tu_fill16(dt, b, (size_t)n, 4.0f, &rng);
            sj_devptr A, B, C;
            SJ_ASSERT_OK(sj_malloc(ctx, (size_t)n * 2, &A));
            SJ_ASSERT_OK(sj_malloc(ctx, (size_t)n * 2, &B));
            SJ_ASSERT_OK(sj_malloc(ctx, (size_t)n * 2, &C));
            SJ_ASSERT_OK(sj_memcpy_htod(ctx, A, a, (size_t)n * 2));
            SJ_ASSERT_OK(sj_memcpy_htod(ctx, B, b, (size_t)n * 2));
            for (int relu = 0; relu < 2; relu++) {
                SJ_ASSERT_OK(sj_memset_u8(ctx, C, 0xFF, (size_t)n * 2));
                void *args[] = { &A, &B, &C, &n, &relu };
                SJ_ASSERT_OK(rt_launch(ctx, k, RT_ARGS(args), NULL));
                SJ_ASSERT_OK(sj_synchronize(ctx));
                SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, c, C, (size_t)n * 2));
                for (long long i = 0; i < n; i++) {
                    /* the product of two 16-bit values is exact in fp32: one rounding, as the kernel's */
                    float x = tu_from16(dt, a[i]);
                    if (relu && x < 0) x = 0;
                    uint16_t want = tu_to16(dt, x * tu_from16(dt, b[i]));
                    if (c[i] != want && !(tu_from16(dt, c[i]) == 0 && tu_from16(dt, want) == 0))
                        fail_msg("%s %lldx%lld relu=%d: element %lld is 0x%04x, expected 0x%04x", sj_dtype_name(dt),
                                 (long long)p.m, (long long)p.n, relu, i, c[i], want);
                }
            }
            sj_free(ctx, A);
            sj_free(ctx, B);
            sj_free(ctx, C);
            free(a);
            free(b);
            free(c);
        }
    }
}

static void ffn_problem(sj_problem *p, int64_t tokens, int64_t d_model, int64_t d_ff, double sparsity)
{
    sj_problem_init(p, SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, tokens, d_model, d_model);
    p->d_ff = d_ff;
    p->twell_tile = 128;
    p->twell_capacity = 16;
    p->twell_sparsity = sparsity;
}

static void test_sampled_reference_is_the_full_ones_rows(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_problem p;
    ffn_problem(&p, 300, 256, 1024, 0.95);
    uint64_t seed = rng;
    harness full, sampled;
    SJ_ASSERT_OK(harness_open(ctx, &p, seed, HARNESS_REFERENCE, &full));
    SJ_ASSERT_OK(harness_open(ctx, &p, seed, HARNESS_REFERENCE_SAMPLED, &sampled));
    assert_false(full.ref_sampled);
    assert_true(sampled.ref_sampled);
    assert_int_equal(sampled.out_rows, 300);
    int rows = harness_sample_count(p.m);
    for (int i = 0; i < rows; i++) {
        int64_t r = harness_sample_row(p.m, i);
        if (memcmp(sampled.reference + i * p.n, full.reference + r * p.n, sizeof(float) * (size_t)p.n))
            fail_msg("sampled row %d differs from the full reference's row %lld", i, (long long)r);
    }
    const loaded_kernel *k;
    SJ_ASSERT_OK(rt_kernel_for(ctx, &p, &k));
    double e_full, e_sampled;
    int sticky;
    SJ_ASSERT_OK(harness_check(&full, k, &e_full, &sticky));
    SJ_ASSERT_OK(harness_check(&sampled, k, &e_sampled, &sticky));
    fprintf(stderr, "# twell-ffn %s: relative error %.2e over every row, %.2e over %d sampled\n", k->config, e_full,
            e_sampled, rows);
    assert_true(e_full > 0 && e_full < harness_tolerance(&p));
    assert_true(e_sampled > 0 && e_sampled < harness_tolerance(&p));
    harness_close(&full);
    harness_close(&sampled);
}

/* One bench_run: checked, counted as bench_flops says, timed with a baseline of n_steps steps. */
static void expect_row(sj_context *ctx, const char *name, const sj_problem *p, int n_steps)
{
    bench_options o;
    bench_options_init(&o);
    o.rounds = 2;
    o.measure.warmup_ms = 2;
    o.measure.rep_ms = 10;
    bench_result r;
    SJ_ASSERT_OK(bench_run(ctx, name, p, &o, &r));
    double flops;
    SJ_ASSERT_OK(bench_flops(name, p, &flops));
    fprintf(stderr, "# %s: %s %.2f us (%.1f TFLOP/s), baseline %.2f us in %d steps, %.3fx, rel error %.2e\n", name,
            r.run.config, r.run.median_us, r.run.tflops, r.cublas_us, r.n_baseline, r.speedup, r.run.rel_error);
    assert_string_equal(r.cublas_error, "");
    assert_true(r.run.rel_error > 0 && r.run.rel_error <= harness_tolerance(p));
    assert_true(r.flops == flops);
    assert_true(fabs(r.run.tflops - flops / (r.run.median_us * 1e-6) / 1e12) <= 1e-9 * r.run.tflops);
    assert_int_equal(r.n_baseline, n_steps);
    assert_true(r.run.median_us > 0 && r.cublas_us > 0 && isfinite(r.speedup));
    assert_true(r.first_ms > 0);
    assert_true(r.run.config[0] && r.template_name[0]);
    /* a benchmark that times its parts alone has a time for each */
    const op_bench *b = op_bench_find_name(name);
    int parts = 0;
    while (b && b->ops->part_names && b->ops->part_names[parts]) parts++;
    assert_int_equal(r.n_parts, parts);
    for (int i = 0; i < r.n_parts; i++) {
        fprintf(stderr, "#   %s alone: %.2f us\n", r.part_names[i], r.part_us[i]);
        assert_true(r.part_us[i] > 0);
    }
    /* ... and of its baseline's parts, and a training step counts its saved activations */
    int dense_parts = 0;
    while (b && b->ops->baseline_parts && b->ops->baseline_parts[dense_parts].name) dense_parts++;
    assert_int_equal(r.n_dense_parts, dense_parts);
    for (int i = 0; i < r.n_dense_parts; i++) {
        fprintf(stderr, "#   dense %s alone: %.2f us\n", r.dense_part_names[i], r.dense_part_us[i]);
        assert_true(r.dense_part_us[i] > 0);
    }
    if (b && b->ops->saved_bytes) {
        fprintf(stderr, "#   saved for the backward: %lld bytes, dense %lld\n", (long long)r.saved_bytes,
                (long long)r.dense_saved_bytes);
        assert_true(r.saved_bytes > 0 && r.dense_saved_bytes > 0);
    } else {
        assert_true(r.saved_bytes == -1 && r.dense_saved_bytes == -1);
    }
}

static void test_bench_rows(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 264, 136, 200);
    expect_row(ctx, "gemm", &p, 1);
    sj_problem_init(&p, SJ_OP_VNM_SPMM, SJ_DTYPE_F16, 256, 136, 512);
    p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = 8;
    expect_row(ctx, "vnm-spmm", &p, 1);
    sj_problem_init(&p, SJ_OP_TWELL_GATE, SJ_DTYPE_F16, 300, 1024, 256);
    p.twell_tile = 128, p.twell_capacity = 16, p.twell_sparsity = 0.95;
    expect_row(ctx, "twell-gate", &p, 1);
    ffn_problem(&p, 300, 256, 1024, 0.95);
    expect_row(ctx, "twell-ffn", &p, 3);
    expect_row(ctx, "twell-ffn-block", &p, 4);
    p.twell_skew = 1;
    expect_row(ctx, "twell-ffn-block", &p, 4);
    /* a V:N:M layer's training step, W 264 x 203 (ragged) over 136 tokens, either dX; bf16 with
     * fp32 outputs at 2:4 */
    sj_problem_init(&p, SJ_OP_VNM_DW, SJ_DTYPE_F16, 264, 203, 136);
    p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = 8;
    expect_row(ctx, "vnm-train", &p, 3);
    expect_row(ctx, "vnm-train-exact", &p, 3);
    p.dtype = SJ_DTYPE_BF16, p.out_dtype = SJ_DTYPE_F32, p.vnm_v = 128, p.vnm_m = 4;
    expect_row(ctx, "vnm-train", &p, 3);
    expect_row(ctx, "vnm-train-exact", &p, 3);
    /* sj_bench is the same path without the baseline */
    sj_bench_result b;
    SJ_ASSERT_OK(sj_bench(ctx, &p, NULL, &b));
    assert_true(b.rel_error > 0 && b.rel_error <= harness_tolerance(&p) && b.median_us > 0);
    /* the FFN block's training step over hybrid activations: 264 tokens, d_model 256, d_ff 1000;
     * W = 128 at 99% zeros, and W = 16 at 95% with skew, where every row overflows and setup grows
     * the backup to all of them */
    sj_problem_init(&p, SJ_OP_HYBRID_FFN_DW, SJ_DTYPE_BF16, 264, 256, 256);
    p.d_ff = 1000, p.twell_tile = 1000, p.twell_capacity = 128, p.twell_sparsity = 0.99;
    expect_row(ctx, "ffn-train", &p, 12);
    p.dtype = p.out_dtype = SJ_DTYPE_F16, p.twell_capacity = 16, p.twell_sparsity = 0.95, p.twell_skew = 1;
    expect_row(ctx, "ffn-train", &p, 12);
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_kernel_matches_host),
        cmocka_unit_test(test_sampled_reference_is_the_full_ones_rows),
        cmocka_unit_test(test_bench_rows),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
