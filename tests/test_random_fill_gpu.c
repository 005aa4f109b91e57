/* test_random_fill_gpu.c: the benchmarks' inputs on the GPU. The device generator
 * (templates/fill_random.lua through tuner/random_fill.c) writes, bit for bit, what the host
 * generator (tuner/counter_rng.h) gives: matrices and their transposes with and without a
 * column-0 table, and activations as TwELL (every count, slot and the spill, overflowing tiles
 * included) equal to the host's sj_twell_from_dense of the host's dense activations, on random
 * seeds and ragged sizes. Then one bench row at the largest FFN shape, timed on the host: the
 * inputs no longer come from the host, so it takes seconds. */
#include "test_util.h"
#include "runtime/runtime.h"
#include "tuner/bench.h"
#include "tuner/random_fill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static void test_matrix_matches_host(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const int64_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 333, 77 }, { 1000, 129 }, { 64, 4096 } };
    for (int d = 0; d < 2; d++) {
        sj_dtype dt = d ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            size_t n = (size_t)(rows * cols);
            uint16_t *col0 = malloc(sizeof *col0 * (size_t)rows), *got = malloc(sizeof *got * n);
            assert_true(col0 && got);
            for (int64_t r = 0; r < rows; r++) col0[r] = (uint16_t)next();
            for (int variant = 0; variant < 4; variant++) {
                int transposed = variant & 1;
                crng_matrix m = { dt, crng_key(next(), next()), rows, cols, variant & 2 ? col0 : NULL };
                sj_devptr dst;
                SJ_ASSERT_OK(random_device_matrix(ctx, &m, transposed, &dst));
                SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, got, dst, sizeof *got * n));
                sj_free(ctx, dst);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++) {
                        uint16_t want = crng_matrix_at(&m, r, c), have = got[transposed ? c * rows + r : r * cols + c];
                        if (have != want)
                            fail_msg("%s %lldx%lld transposed=%d col0=%d: (%lld, %lld) is 0x%04x on the device, 0x%04x "
                                     "on the host", sj_dtype_name(dt), (long long)rows, (long long)cols, transposed,
                                     !!m.col0, (long long)r, (long long)c, have, want);
                    }
            }
            free(col0);
            free(got);
        }
    }
}

static void test_twell_matches_host(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    /* rows, cols, T, C, density: ragged last tiles, T not a multiple of 32, C = 1, and densities
     * far above C / T so that tiles overflow into the spill */
    const struct { int64_t rows, cols; int tile, capacity; double density; } cases[] = {
        { 100, 1000, 128, 16, 0.05 }, { 37, 300, 64, 4, 0.2 }, { 5, 77, 33, 1, 0.5 }, { 1, 40, 128, 16, 0.9 },
        { 64, 2048, 256, 32, 0.01 },
    };
    for (int d = 0; d < 2; d++) {
        sj_dtype dt = d ? SJ_DTYPE_F16 : SJ_DTYPE_BF16;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            int64_t rows = cases[i].rows, cols = cases[i].cols;
            uint32_t *thr = malloc(sizeof *thr * (size_t)cols);
            uint16_t *dense = malloc(sizeof *dense * (size_t)(rows * cols));
            assert_true(thr && dense);
            for (int64_t j = 0; j < cols; j++) /* each unit its own rate, around the case's */
                thr[j] = crng_threshold(cases[i].density * (0.5 + (double)(next() >> 11) / 9007199254740992.0));
            crng_activations a = { dt, crng_key(next(), next()), rows, cols, thr };
            for (int64_t r = 0; r < rows; r++) crng_activation_row(&a, r, dense + r * cols);
            sj_twell_layout l;
            SJ_ASSERT_OK(sj_twell_layout_init(&l, dt, rows, cols, cases[i].tile, cases[i].capacity));
            sj_twell_host want, got;
            int64_t overflow;
            SJ_ASSERT_OK(sj_twell_from_dense(&l, dense, cols, &want, &overflow));
            sj_twell_device H;
            SJ_ASSERT_OK(sj_twell_device_alloc(ctx, &l, &H));
            /* poisoned: every count and slot must be written */
            SJ_ASSERT_OK(sj_memset_u8(ctx, H.entries, 0xFF, l.entries_bytes));
            SJ_ASSERT_OK(sj_memset_u8(ctx, H.counts, 0xFF, l.counts_bytes));
            SJ_ASSERT_OK(sj_memset_u8(ctx, H.spill, 0xFF, l.spill_bytes));
            SJ_ASSERT_OK(random_fill_twell(ctx, &a, &H));
            SJ_ASSERT_OK(sj_twell_download(ctx, &H, &got));
            fprintf(stderr, "# %s %lldx%lld T=%d C=%d: %lld overflowing tiles\n", sj_dtype_name(dt), (long long)rows,
                    (long long)cols, l.tile, l.capacity, (long long)overflow);
            if (memcmp(got.counts, want.counts, l.counts_bytes)) fail_msg("case %zu: the counts differ", i);
            if (memcmp(got.entries, want.entries, l.entries_bytes)) fail_msg("case %zu: the entries differ", i);
            if (memcmp(got.spill, want.spill, l.spill_bytes)) fail_msg("case %zu: the spill differs", i);
            sj_twell_host_free(&want);
            sj_twell_host_free(&got);
            sj_twell_device_free(ctx, &H);
            free(thr);
            free(dense);
        }
    }
}

/* `sparsejit bench --op NAME --shape 8192x8192x8192 --d-ff 28672` (the CLI's TwELL defaults:
 * 128:16, 99% zeros), timed on the host from the call to the row. Before the inputs were
 * generated on the device it did not finish in 90 s. */
static void test_largest_ffn_bench_takes_seconds(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const char *names[] = { "twell-ffn", "twell-ffn-block" };
    for (int b = 0; b < 2; b++) {
        sj_problem p;
        sj_problem_init(&p, SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, 8192, 8192, 8192);
        p.d_ff = 28672;
        p.twell_tile = 128;
        p.twell_capacity = 16;
        p.twell_sparsity = 0.99;
        bench_options o;
        bench_options_init(&o);
        bench_result r;
        double t0 = rt_seconds();
        SJ_ASSERT_OK(bench_run(ctx, names[b], &p, &o, &r));
        double wall = rt_seconds() - t0;
        fprintf(stderr, "# bench %s 8192x8192x8192 d_ff 28672: %.1f s wall (first launch %.0f ms), %s, rel error %.2e, "
                "%.1f us vs baseline %.1f us\n", names[b], wall, r.first_ms, r.run.config, r.run.rel_error,
                r.run.median_us, r.cublas_us);
        if (r.cublas_error[0]) fprintf(stderr, "# no baseline: %s\n", r.cublas_error);
        if (!(wall < 60)) fail_msg("bench %s took %.1f s, expected well under a minute", names[b], wall);
    }
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_matches_host),
        cmocka_unit_test(test_twell_matches_host),
        cmocka_unit_test(test_largest_ffn_bench_takes_seconds),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
