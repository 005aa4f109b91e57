/* test_hybrid_step_reference.c: the host side of the ffn-train benchmark on the CPU. The sampled
 * reference of its check (ops/hybrid/hybrid_step_reference.c) against a dense brute force
 * written here (every token and unit, the activations A as the only mask) on the benchmark's own
 * input laws (twell_gate_inputs at 50% to 95% zeros, f16 and bf16, ragged shapes with more than
 * 16 tokens and units, so the sampling is exercised), and against the library's whole step
 * (sj_hybrid_ffn_step_host), which decides the pairs by its own gate and keeps a unrounded; an A
 * whose values are not the gate's is followed (a from A, the gate rows from X and Wg); its
 * refusals; and the benchmark's memory accounting against its formula. */
#include "test_util.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_step_reference.h"
#include "ops/twell/twell.h"
#include "tuner/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

/* The whole step by brute force over every pair, with A's non-zeros as the active set and A's
 * values as a (dense arrays of the inputs, tokens T, d_model D, d_ff F). */
typedef struct brute {
    double *gate, *y, *dx, *dwg, *dwu, *dwd;
} brute;

static double at(sj_dtype dt, const uint16_t *m, int64_t r, int64_t c, int64_t cols) { return tu_from16(dt, m[r * cols + c]); }

static void brute_step(sj_dtype dt, int64_t T, int64_t D, int64_t F, const uint16_t *X, const uint16_t *WgT,
                       const uint16_t *WuT, const uint16_t *Wd, const uint16_t *dY, const uint16_t *A, brute *b)
{
    b->gate = calloc((size_t)(T * F), sizeof(double));
    b->y = calloc((size_t)(T * D), sizeof(double)), b->dx = calloc((size_t)(T * D), sizeof(double));
    b->dwg = calloc((size_t)(F * D), sizeof(double)), b->dwu = calloc((size_t)(F * D), sizeof(double));
    b->dwd = calloc((size_t)(F * D), sizeof(double));
    assert_true(b->gate && b->y && b->dx && b->dwg && b->dwu && b->dwd);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < F; j++) {
            double g = 0, u = 0, dh = 0;
            for (int64_t k = 0; k < D; k++) {
                g += at(dt, X, t, k, D) * at(dt, WgT, j, k, D);
                u += at(dt, X, t, k, D) * at(dt, WuT, j, k, D);
                dh += at(dt, dY, t, k, D) * at(dt, Wd, j, k, D);
            }
            b->gate[t * F + j] = g > 0 ? g : 0;
            const double a = tu_from16(dt, A[t * F + j]);
            if (a == 0) continue; /* relu' = 0 off the active set */
            for (int64_t k = 0; k < D; k++) {
                b->y[t * D + k] += a * u * at(dt, Wd, j, k, D);
                b->dx[t * D + k] += dh * u * at(dt, WgT, j, k, D) + dh * a * at(dt, WuT, j, k, D);
                b->dwg[j * D + k] += dh * u * at(dt, X, t, k, D);
                b->dwu[j * D + k] += dh * a * at(dt, X, t, k, D);
                b->dwd[j * D + k] += a * u * at(dt, dY, t, k, D);
            }
        }
}

static void brute_free(brute *b)
{
    free(b->gate), free(b->y), free(b->dx), free(b->dwg), free(b->dwu), free(b->dwd);
}

/* ||got - want|| / ||want|| over the sampled rows (row i of got is row sample(i) of want, cols
 * values each) must be below tol. */
static void expect_rows(const char *what, const float *got, const double *want, int rows, int64_t total, int64_t cols,
                        double tol)
{
    double num = 0, den = 0;
    for (int i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
            double w = want[harness_sample_row(total, i) * cols + c], d = got[i * cols + c] - w;
            num += d * d;
            den += w * w;
        }
    if (!(den > 0 && sqrt(num / den) < tol))
        fail_msg("%s: relative error %.3g over %d sampled rows (norm %.3g), tolerance %.3g", what, sqrt(num / den), rows,
                 sqrt(den), tol);
}

static void expect_sample(const char *what, const hybrid_step_sample *s, const brute *b, int64_t T, double tol)
{
    char name[128];
    const struct { const char *part; const float *got; const double *want; int rows; int64_t total, cols; } parts[] = {
        { "gate", s->gate, b->gate, s->rows, T, s->d_ff }, { "Y", s->y, b->y, s->rows, T, s->d_model },
        { "dX", s->dx, b->dx, s->rows, T, s->d_model }, { "dWgT", s->dwg, b->dwg, s->units, s->d_ff, s->d_model },
        { "dWuT", s->dwu, b->dwu, s->units, s->d_ff, s->d_model }, { "dWd", s->dwd, b->dwd, s->units, s->d_ff, s->d_model } };
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        snprintf(name, sizeof name, "%s: %s", what, parts[i].part);
        expect_rows(name, parts[i].got, parts[i].want, parts[i].rows, parts[i].total, parts[i].cols, tol);
    }
}

static void test_sampled_step(void **state)
{
    (void)state;
    const struct { sj_dtype dt; int64_t T, D, F; double sparsity; } cases[] = {
        { SJ_DTYPE_F16, 37, 24, 50, 0.5 }, { SJ_DTYPE_BF16, 40, 40, 33, 0.8 }, { SJ_DTYPE_BF16, 64, 16, 120, 0.95 },
        { SJ_DTYPE_F16, 9, 32, 12, 0.7 }, /* fewer than 16 tokens and units: every one sampled */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const sj_dtype dt = cases[ci].dt;
        const int64_t T = cases[ci].T, D = cases[ci].D, F = cases[ci].F;
        sj_problem gp;
        sj_problem_init(&gp, SJ_OP_HYBRID_GATE, dt, T, F, D);
        gp.twell_tile = (int)F, gp.twell_capacity = 1, gp.twell_sparsity = cases[ci].sparsity;
        const uint64_t seed = (uint64_t)(tu_uniform(&rng) * 1e9) + 1000;
        twell_gate_law law;
        SJ_ASSERT_OK(twell_gate_inputs(&gp, seed, &law));
        const crng_matrix WuT = { dt, crng_key(seed, TWELL_STREAM_WU), F, D, NULL },
                          Wd = { dt, crng_key(seed, TWELL_STREAM_WD), F, D, NULL },
                          dY = { dt, crng_key(seed, 99), T, D, NULL };
        uint16_t *X = malloc(2 * (size_t)(T * D)), *WgT = malloc(2 * (size_t)(F * D)), *Wu = malloc(2 * (size_t)(F * D)),
                 *Wdd = malloc(2 * (size_t)(F * D)), *dYd = malloc(2 * (size_t)(T * D)), *A = malloc(2 * (size_t)(T * F));
        assert_true(X && WgT && Wu && Wdd && dYd && A);
        crng_matrix_fill(&law.X, X), crng_matrix_fill(&law.WgT, WgT), crng_matrix_fill(&WuT, Wu);
        crng_matrix_fill(&Wd, Wdd), crng_matrix_fill(&dY, dYd);
        /* A: the gate as the device stores it, relu(X . Wg) rounded to the dtype */
        int64_t active = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < F; j++) {
                double g = 0;
                for (int64_t k = 0; k < D; k++) g += at(dt, X, t, k, D) * at(dt, WgT, j, k, D);
                A[t * F + j] = tu_to16(dt, g > 0 ? (float)g : 0.0f);
                active += g > 0;
            }
        assert_true(active > 0 && active < T * F);
        const hybrid_step_inputs in = { &law.X, &law.WgT, &WuT, &Wd, &dY, A };
        hybrid_step_sample s;
        SJ_ASSERT_OK(hybrid_step_reference(&in, &s));
        assert_int_equal(s.rows, T < 16 ? T : 16);
        assert_int_equal(s.units, F < 16 ? F : 16);
        brute b;
        brute_step(dt, T, D, F, X, WgT, Wu, Wdd, dYd, A, &b);
        expect_sample("against the brute force", &s, &b, T, 1e-6);

        /* the library's whole step: its own gate decides the same pairs, a unrounded */
        sj_hybrid_ffn_step whole = { malloc(8 * (size_t)(T * D)), malloc(8 * (size_t)(T * D)), malloc(8 * (size_t)(F * D)),
                                     malloc(8 * (size_t)(F * D)), malloc(8 * (size_t)(F * D)), 0 };
        assert_true(whole.Y && whole.dX && whole.dWgT && whole.dWuT && whole.dWd);
        SJ_ASSERT_OK(sj_hybrid_ffn_step_host(dt, T, D, F, X, WgT, Wu, Wdd, dYd, &whole));
        assert_int_equal(whole.active, active);
        const brute lib = { b.gate, whole.Y, whole.dX, whole.dWgT, whole.dWuT, whole.dWd };
        expect_sample("against sj_hybrid_ffn_step_host", &s, &lib, T, 1e-2);
        free(whole.Y), free(whole.dX), free(whole.dWgT), free(whole.dWuT), free(whole.dWd);
        hybrid_step_sample_free(&s);
        brute_free(&b);

        /* an A that is not the gate's (a sampled token's pairs doubled, an inactive pair set):
         * the products follow A, the gate rows stay X . Wg's */
        const int64_t t0 = harness_sample_row(T, 1);
        for (int64_t j = 0; j < F; j++) A[t0 * F + j] = tu_to16(dt, 2 * tu_from16(dt, A[t0 * F + j]));
        for (int64_t j = 0; j < F; j++)
            if (A[t0 * F + j] == 0) {
                A[t0 * F + j] = tu_to16(dt, 0.5f);
                break;
            }
        SJ_ASSERT_OK(hybrid_step_reference(&in, &s));
        brute_step(dt, T, D, F, X, WgT, Wu, Wdd, dYd, A, &b);
        expect_sample("an A that is not the gate's", &s, &b, T, 1e-6);
        hybrid_step_sample_free(&s);
        brute_free(&b);
        twell_gate_inputs_free(&law);
        free(X), free(WgT), free(Wu), free(Wdd), free(dYd), free(A);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    const crng_matrix X = { SJ_DTYPE_BF16, 1, 20, 16, NULL }, W = { SJ_DTYPE_BF16, 2, 30, 16, NULL },
                      dY = { SJ_DTYPE_BF16, 3, 20, 16, NULL };
    uint16_t A[20 * 30] = { 0 };
    hybrid_step_sample s;
    SJ_ASSERT_STATUS(hybrid_step_reference(NULL, &s), SJ_ERR_INVALID_ARGUMENT, "X, WgT, WuT, Wd, dY and A must all be set");
    hybrid_step_inputs in = { &X, &W, &W, &W, &dY, NULL };
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, &s), SJ_ERR_INVALID_ARGUMENT, "must all be set");
    in.A = A;
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    crng_matrix bad = W;
    bad.rows = 31;
    in.WuT = &bad;
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, &s), SJ_ERR_INVALID_ARGUMENT, "WuT is bf16 31 x 16; expected bf16 30 x 16");
    bad = W;
    bad.dtype = SJ_DTYPE_F16;
    in.WuT = &W, in.Wd = &bad;
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, &s), SJ_ERR_INVALID_ARGUMENT, "Wd is f16 30 x 16; expected bf16 30 x 16");
    bad = dY;
    bad.cols = 8;
    in.Wd = &W, in.dY = &bad;
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, &s), SJ_ERR_INVALID_ARGUMENT, "dY is bf16 20 x 8; expected bf16 20 x 16");
    crng_matrix x32 = X;
    x32.dtype = SJ_DTYPE_F32;
    in.dY = &dY, in.X = &x32;
    SJ_ASSERT_STATUS(hybrid_step_reference(&in, &s), SJ_ERR_INVALID_ARGUMENT, "expected f16 or bf16");
    in.X = &X;
    SJ_ASSERT_OK(hybrid_step_reference(&in, &s)); /* nothing active: all zero but the gate rows */
    for (int64_t i = 0; i < s.units * s.d_model; i++) assert_true(s.dwg[i] == 0 && s.dwu[i] == 0 && s.dwd[i] == 0);
    hybrid_step_sample_free(&s);
}

/* The bytes each step keeps for its backward: H's arrays and u at its pairs (6 bytes an ELL pair,
 * 8 a row for its count and slot, 4 a backup row for its owner, 2 + 2 per backup column, the
 * counter), and the dense step's a, u and h. */
static void test_saved_bytes(void **state)
{
    (void)state;
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 8192, 11008, 128, 0));
    assert_int_equal(hybrid_ffn_saved_bytes(&l), 6356996);  /* 8192 x (6 x 128 + 8) + 4 */
    assert_int_equal(hybrid_ffn_dense_saved_bytes(8192, 11008, SJ_DTYPE_BF16), 541065216); /* 3 x 8192 x 11008 x 2 */
    for (int rep = 0; rep < 100; rep++) {
        const int64_t rows = 1 + (int64_t)((tu_uniform(&rng) + 1) * 5000), cols = 1 + (int64_t)((tu_uniform(&rng) + 1) * 30000);
        const int width = 1 + (int)((tu_uniform(&rng) + 1) * 0.5 * (double)(cols - 1));
        const int64_t backup = (int64_t)((tu_uniform(&rng) + 1) * 0.5 * (double)rows);
        const sj_dtype dt = rep % 2 ? SJ_DTYPE_F16 : SJ_DTYPE_BF16;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, dt, rows, cols, width, backup));
        assert_int_equal(hybrid_ffn_saved_bytes(&l), rows * (6 * width + 8) + backup * (4 * cols + 4) + 4);
        assert_int_equal(hybrid_ffn_dense_saved_bytes(rows, cols, dt), 6 * rows * cols);
    }
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_step),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_saved_bytes),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
