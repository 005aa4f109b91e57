/* test_gmp_gpu.c: gradual magnitude pruning on the device (sj_gmp_prune, sj_gmp_recompress;
 * templates/gmp_prune.lua), against its host reference sj_gmp_prune_host.
 * CPU: the template refuses a one-block stage on 256 threads naming why, and the entry points
 * refuse bad arguments naming them (a compile-only context).
 * GPU (skipped with the reason without one): a whole schedule from dense to V:2:M (plus
 * unstructured sparsity beyond the pattern), for V in {64, 128}, M in {4, 8, 16}, f16 and bf16,
 * ragged rows and columns, W drawn from few magnitudes so the threshold always falls among
 * ties, and W moved between steps like an optimizer would (masked weights too): after every step
 * W and the mask byte for byte equal to the host's; at the end both compressed copies
 * (sj_gmp_recompress) byte for byte the host's compression and double pruning of the host's W. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sj_gmp_schedule schedule(int v, int m, double extra)
{
    sj_gmp_schedule s = { .initial_sparsity = 0.0, .final_sparsity = 1.0 - 2.0 / m + extra, .start_step = 2,
                          .interval = 3, .n_steps = 6, .v = v, .m = m };
    return s;
}

/* ---------------------------------------------------------------- CPU */

static void test_refusals(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GMP_PRUNE, SJ_DTYPE_F16, 256, 1, 256);
    p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = 8;
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "STAGE=3,THREADS=256", &g), SJ_ERR_INVALID_ARGUMENT, "take THREADS=1024");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "STAGE=7,THREADS=256", &g), SJ_ERR_INVALID_ARGUMENT, "STAGE=7");
    sj_gmp_schedule s = schedule(64, 8, 0.0);
    size_t bytes = 0;
    SJ_ASSERT_STATUS(sj_gmp_prune_workspace(&s, SJ_DTYPE_F16, 256, 256, NULL), SJ_ERR_INVALID_ARGUMENT, "bytes is NULL");
    SJ_ASSERT_STATUS(sj_gmp_prune_workspace(&s, SJ_DTYPE_F16, 0, 256, &bytes), SJ_ERR_INVALID_ARGUMENT, "rows = 0");
    s.final_sparsity = 0.5;
    SJ_ASSERT_STATUS(sj_gmp_prune_workspace(&s, SJ_DTYPE_F16, 256, 256, &bytes), SJ_ERR_INVALID_ARGUMENT,
                     "schedule.final_sparsity = 0.5");
    s = schedule(64, 8, 0.0);
    SJ_ASSERT_OK(sj_gmp_prune_workspace(&s, SJ_DTYPE_F16, 256, 256, &bytes));
    assert_true(bytes > 256 * 256 * 2 + 32768 * 4);
    const sj_devptr fake = 4096; /* never dereferenced: every call below is refused first */
    SJ_ASSERT_STATUS(sj_gmp_prune(NULL, &s, 2, SJ_DTYPE_F16, 256, 256, fake, 256, fake, 256, fake, bytes, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    SJ_ASSERT_STATUS(sj_gmp_prune(ctx, &s, 2, SJ_DTYPE_F32, 256, 256, fake, 256, fake, 256, fake, bytes, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "expected f16 or bf16");
    SJ_ASSERT_STATUS(sj_gmp_prune(ctx, &s, 2, SJ_DTYPE_F16, 256, 256, fake, 200, fake, 256, fake, bytes, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "ldw = 200");
    SJ_ASSERT_STATUS(sj_gmp_prune(ctx, &s, 2, SJ_DTYPE_F16, 256, 256, fake, 256, fake, 256, fake, bytes - 16, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "needs");
    SJ_ASSERT_STATUS(sj_gmp_prune(ctx, &s, -1, SJ_DTYPE_F16, 256, 256, fake, 256, fake, 256, fake, bytes, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "step = -1");
    SJ_ASSERT_STATUS(sj_gmp_recompress(ctx, fake, 256, NULL, NULL, fake, bytes, NULL), SJ_ERR_INVALID_ARGUMENT,
                     "fwd or wt2 is NULL");
    sj_context_destroy(ctx);
}

/* ---------------------------------------------------------------- GPU */

/* Few magnitudes (1/8 steps of [-1, 1]) so that the threshold key always has ties. */
static void coarse(sj_dtype dt, uint16_t *W, size_t n, uint64_t *rng)
{
    tu_fill16(dt, W, n, 1.0f, rng);
    for (size_t i = 0; i < n; i++) {
        double x = tu_load(dt, W + i, 0);
        float q = (float)((long)(x * 8.0) / 8.0);
        W[i] = dt == SJ_DTYPE_F16 ? tu_f32_to_f16(q) : tu_f32_to_bf16(q);
    }
}

static void test_schedule_matches_host(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    uint64_t rng = tu_seed();
    const int VS[] = { 64, 128 }, MS[] = { 4, 8, 16 };
    const sj_dtype DTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };
    for (int d = 0; d < 2; d++)
        for (int vi = 0; vi < 2; vi++)
            for (int mi = 0; mi < 3; mi++) {
                const sj_dtype dt = DTS[d];
                const int v = VS[vi], m = MS[mi];
                const sj_gmp_schedule s = schedule(v, m, 0.05 * (mi % 2));
                const int64_t rows = 2 * v + 24, cols = 9 * m + 5, n = rows * cols;
                uint16_t *W = malloc((size_t)n * 2), *got = malloc((size_t)n * 2), *step_noise = malloc((size_t)n * 2);
                uint8_t *mask = malloc((size_t)n), *got_mask = malloc((size_t)n);
                coarse(dt, W, (size_t)n, &rng);
                memset(mask, 1, (size_t)n);
                size_t ws_bytes;
                SJ_ASSERT_OK(sj_gmp_prune_workspace(&s, dt, rows, cols, &ws_bytes));
                sj_devptr dW, dM, ws;
                SJ_ASSERT_OK(sj_malloc(ctx, (size_t)n * 2, &dW));
                SJ_ASSERT_OK(sj_malloc(ctx, (size_t)n, &dM));
                SJ_ASSERT_OK(sj_malloc(ctx, ws_bytes, &ws));
                SJ_ASSERT_OK(sj_memset_u8(ctx, ws, 0xa5, ws_bytes)); /* poisoned: every stage writes before it reads */
                SJ_ASSERT_OK(sj_memcpy_htod(ctx, dM, mask, (size_t)n));
                const int64_t last = s.start_step + s.interval * s.n_steps;
                for (int64_t t = 0; t <= last + 1; t++) {
                    /* an optimizer step moved every weight, the masked ones too (they are
                       zeroed again by the next pruning step; the mask keeps them out); none
                       after the last pruning step, whose weight must stay in the pattern */
                    if (t <= last) {
                        coarse(dt, step_noise, (size_t)n, &rng);
                        for (int64_t i = 0; i < n; i++) {
                            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                            if (rng >> 63) W[i] = step_noise[i];
                        }
                    }
                    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dW, W, (size_t)n * 2));
                    SJ_ASSERT_OK(sj_gmp_prune_host(&s, t, dt, rows, cols, W, cols, mask, cols));
                    SJ_ASSERT_OK(sj_gmp_prune(ctx, &s, t, dt, rows, cols, dW, cols, dM, cols, ws, ws_bytes, NULL));
                    SJ_ASSERT_OK(sj_synchronize(ctx));
                    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, got, dW, (size_t)n * 2));
                    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, got_mask, dM, (size_t)n));
                    if (memcmp(got_mask, mask, (size_t)n) || memcmp(got, W, (size_t)n * 2))
                        fail_msg("GMP step %lld, V=%d 2:%d %s %lldx%lld: the device's W or mask differs from the host's",
                                 (long long)t, v, m, sj_dtype_name(dt), (long long)rows, (long long)cols);
                }
                /* both copies of the final V:2:M weight */
                sj_vnm_layout l, lt;
                SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, m, rows, cols));
                SJ_ASSERT_OK(sj_vnm_transpose_layout(&l, &lt));
                sj_vnm_device fwd = { .layout = l }, wt2 = { .layout = lt };
                SJ_ASSERT_OK(sj_malloc(ctx, l.values_bytes, &fwd.values));
                SJ_ASSERT_OK(sj_malloc(ctx, l.meta_bytes, &fwd.meta));
                SJ_ASSERT_OK(sj_malloc(ctx, l.index_bytes, &fwd.index));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.values_bytes, &wt2.values));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.meta_bytes, &wt2.meta));
                SJ_ASSERT_OK(sj_malloc(ctx, lt.index_bytes, &wt2.index));
                SJ_ASSERT_OK(sj_memset_u8(ctx, fwd.values, 0xff, l.values_bytes));
                SJ_ASSERT_OK(sj_memset_u8(ctx, wt2.values, 0xff, lt.values_bytes));
                size_t dp_bytes;
                sj_devptr dp;
                SJ_ASSERT_OK(sj_vnm_double_prune_workspace(&l, &dp_bytes));
                SJ_ASSERT_OK(sj_malloc(ctx, dp_bytes, &dp));
                SJ_ASSERT_OK(sj_gmp_recompress(ctx, dW, cols, &fwd, &wt2, dp, dp_bytes, NULL));
                SJ_ASSERT_OK(sj_synchronize(ctx));
                sj_vnm_host hf, ht, want_f, want_t;
                SJ_ASSERT_OK(sj_vnm_download(ctx, &fwd, &hf));
                SJ_ASSERT_OK(sj_vnm_download(ctx, &wt2, &ht));
                SJ_ASSERT_OK(sj_vnm_check(&l, W, cols)); /* the host's W ends in the pattern */
                SJ_ASSERT_OK(sj_vnm_compress(&l, W, cols, SJ_VNM_PRUNE_L2, &want_f));
                SJ_ASSERT_OK(sj_vnm_double_prune_host(&want_f, &want_t));
                assert_memory_equal(hf.values, want_f.values, l.values_bytes);
                assert_memory_equal(hf.meta, want_f.meta, l.meta_bytes);
                assert_memory_equal(hf.index, want_f.index, l.index_bytes);
                assert_memory_equal(ht.values, want_t.values, lt.values_bytes);
                assert_memory_equal(ht.meta, want_t.meta, lt.meta_bytes);
                assert_memory_equal(ht.index, want_t.index, lt.index_bytes);
                sj_vnm_host_free(&hf);
                sj_vnm_host_free(&ht);
                sj_vnm_host_free(&want_f);
                sj_vnm_host_free(&want_t);
                sj_vnm_device_free(ctx, &fwd);
                sj_vnm_device_free(ctx, &wt2);
                sj_free(ctx, dp);
                sj_free(ctx, ws);
                sj_free(ctx, dM);
                sj_free(ctx, dW);
                free(W);
                free(got);
                free(step_noise);
                free(mask);
                free(got_mask);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_schedule_matches_host),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
