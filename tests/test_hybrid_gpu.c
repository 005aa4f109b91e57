/* test_hybrid_gpu.c: the hybrid gate on the GPU (skips with a reason without one). On fresh
 * random X and Wg at 50% to 99.9% zeros with ragged shapes, f16 and bf16, both variants (WG=0
 * on any arch, WG=1 on sm_90a): the matrix sj_hybrid_gate writes, read back and validated by
 * sj_hybrid_to_dense, equals relu(X . Wg) from an fp64 host GEMM within the dtype's rounding
 * (fp32 accumulation), and its report matches an independent count of the reference's
 * non-zeros per row; a backup too small leaves rows unplaced (the counter says how many) and
 * sj_hybrid_gate_complete grows it and relaunches, so every row is there. */
#include "test_util.h"
#include "ops/hybrid/hybrid_format.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng;

static int setup(void **state)
{
    (void)state;
    rng = tu_seed();
    return 0;
}

typedef struct gate_case {
    sj_dtype dt;
    int64_t M, N, K;
    int W;
    int64_t backup;
    double sparsity;
    const char *config;   /* NULL: the default */
} gate_case;

/* Runs one case: the completed matrix against the host reference. */
static void run_case(sj_context *ctx, const gate_case *c)
{
    const int64_t M = c->M, N = c->N, K = c->K;
    uint16_t *X = malloc(sizeof *X * (size_t)(M * K)), *WgT = malloc(sizeof *WgT * (size_t)(N * K));
    uint16_t *out = malloc(sizeof *out * (size_t)(M * N));
    double *ref = malloc(sizeof *ref * (size_t)(M * N));
    assert_true(X && WgT && out && ref);
    tu_fill16(c->dt, X, (size_t)(M * K), 1.0f, &rng);
    tu_fill16(c->dt, WgT, (size_t)(N * K), 1.0f, &rng);
    /* column 0: ones in X and a bias in WgT that makes about `sparsity` of the gate negative */
    const double sigma = sqrt((double)(K - 1) / 9.0);
    double q = c->sparsity, lo = -10, hi = 10; /* z with Phi(z) = q, by bisection */
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < q) lo = mid; else hi = mid;
    }
    for (int64_t r = 0; r < M; r++) X[r * K] = tu_to16(c->dt, 1.0f);
    for (int64_t j = 0; j < N; j++) WgT[j * K] = tu_to16(c->dt, (float)(-sigma * lo));
    /* a gate within 1e-4 of zero may land on either side in fp32: such pairs (and their rows)
     * bound how far the counts may differ */
    int64_t want_over = 0, nnz = 0, ambiguous = 0, ambiguous_rows = 0;
    for (int64_t r = 0; r < M; r++) {
        int64_t row_nz = 0, row_amb = 0;
        for (int64_t j = 0; j < N; j++) {
            double g = 0;
            for (int64_t k = 0; k < K; k++) g += (double)tu_from16(c->dt, X[r * K + k]) * tu_from16(c->dt, WgT[j * K + k]);
            ref[r * N + j] = g > 0 ? g : 0;
            row_amb += fabs(g) < 1e-4;
            /* the kernel rounds to the dtype: a value that rounds to zero is no non-zero */
            row_nz += (tu_to16(c->dt, (float)ref[r * N + j]) & 0x7fff) != 0;
        }
        nnz += row_nz;
        want_over += row_nz > c->W;
        ambiguous += row_amb;
        ambiguous_rows += row_amb > 0;
    }
    sj_devptr dX, dW;
    SJ_ASSERT_OK(sj_malloc(ctx, sizeof *X * (size_t)(M * K), &dX));
    SJ_ASSERT_OK(sj_malloc(ctx, sizeof *WgT * (size_t)(N * K), &dW));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dX, X, sizeof *X * (size_t)(M * K)));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dW, WgT, sizeof *WgT * (size_t)(N * K)));
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, c->dt, M, N, c->W, c->backup));
    sj_hybrid_device H;
    SJ_ASSERT_OK(sj_hybrid_device_alloc(ctx, &l, &H));
    SJ_ASSERT_OK(sj_memset_u8(ctx, H.values, 0xFF, l.values_bytes)); /* poison */
    SJ_ASSERT_OK(sj_memset_u8(ctx, H.columns, 0xFF, l.columns_bytes));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_gate_problem(&l, K, &p));
    if (c->config) SJ_ASSERT_OK(sj_set_config(ctx, &p, c->config));
    sj_hybrid_report rep;
    int relaunched = -1;
    SJ_ASSERT_OK(sj_hybrid_gate_complete(ctx, &p, dX, dW, &H, &rep, &relaunched, NULL));
    assert_int_equal(relaunched, rep.backup_needed > c->backup);
    assert_int_equal(rep.rows_unplaced, 0);
    assert_int_equal(rep.rows_ell + rep.rows_backup, M);
    assert_true(llabs(rep.rows_backup - want_over) <= ambiguous_rows);
    assert_true(llabs(rep.nnz - nnz) <= ambiguous);
    if (c->backup == 0 && c->W == 256) assert_int_equal(relaunched, 0);
    sj_hybrid_host h;
    SJ_ASSERT_OK(sj_hybrid_download(ctx, &H, &h));
    SJ_ASSERT_OK(sj_hybrid_to_dense(&h, out, N));
    double e = tu_rel_error(c->dt, out, ref, (size_t)(M * N));
    if (!(e < (c->dt == SJ_DTYPE_BF16 ? 1e-2 : 5e-3)))
        fail_msg("%s %lldx%lldx%lld W=%d: relative error %g", sj_dtype_name(c->dt), (long long)M, (long long)N,
                 (long long)K, c->W, e);
    if (c->config) SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    sj_hybrid_host_free(&h);
    SJ_ASSERT_OK(sj_hybrid_device_free(ctx, &H));
    sj_free(ctx, dX), sj_free(ctx, dW);
    free(X), free(WgT), free(out), free(ref);
}

static void test_gate_matches_reference(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    const int wgmma = !strcmp(info.arch, "sm_90a");
    const gate_case cases[] = {
        { SJ_DTYPE_BF16, 256, 1024, 512, 128, 32, 0.99, NULL },
        { SJ_DTYPE_F16, 200, 1000, 264, 16, 200, 0.95, "WG=0" },        /* ragged; most rows overflow */
        { SJ_DTYPE_BF16, 77, 5632, 128, 64, 8, 0.999, "WG=0,BM=64,BN=128,WM=32,WN=64" },
        { SJ_DTYPE_F16, 130, 768, 64, 32, 130, 0.50, "WG=0,BM=64,BN=64,WM=32,WN=32" }, /* every row overflows */
        { SJ_DTYPE_BF16, 129, 2048, 256, 256, 0, 0.99, "WG=0" },       /* nothing overflows, no backup */
        { SJ_DTYPE_F16, 256, 1536, 512, 8, 4, 0.99, wgmma ? "WG=1" : "WG=0" }, /* full backup: relaunch */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ctx, &cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_matches_reference),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
