/* test_vnm_step_reference.c: the sampled reference of the training-step benchmarks
 * (ops/vnm/vnm_step_reference.c) on the CPU, against whole products computed here from the
 * library's host references: Y against the dense W the compressed one stands for times X, dX
 * (exact) against the dense masked W^T times dY, dX (double-pruned) against the whole
 * sj_vnm_double_prune_host copy times dY, which checks that compressing one block of W^T's rows
 * gives WT2's rows there, and dW against sj_vnm_dw_host's slots. X and dY come from their
 * counter-based laws, as the benchmark's device inputs do. Every V in {64, 128}, M in
 * {4, 8, 16, 32}, f16 and bf16, ragged shapes with more than 16 rows and several V blocks of
 * W^T, so the sampling and the last, shorter block are both exercised; and the refusals. */
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

/* rows x cols of W: not multiples of V or M; cols spans 2 or 3 blocks of V (the last shorter). */
static void shape_for(int v, int m, int variant, int64_t *rows, int64_t *cols)
{
    switch (variant) {
    case 0: *rows = v + 37; *cols = 2 * v + 3 * m + 5; break;
    case 1: *rows = 2 * v; *cols = 2 * v + 1; break;
    default: *rows = 3 * m - 1; *cols = 3 * v - 7; break;
    }
}

/* ||got - want|| / ||want|| over n values must be at fp32 rounding (and got all zero where want
 * is: at 2:32 the sampled rows of a small WT2 may hold no value). */
static void expect_close(const char *what, const char *part, const float *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    if (den > 0 ? !(sqrt(num / den) < 1e-6) : num != 0)
        fail_msg("%s: %s: error %.3g against the whole product (norm %.3g)", what, part, sqrt(num), sqrt(den));
}

static void test_sampled_step(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    int64_t differing = 0;
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++)
                for (int var = 0; var < 3; var++) {
                    const sj_dtype dt = DTS[d];
                    const int v = VS[vi], m = MS[mi];
                    const int64_t T = 16 + 8 * var;
                    int64_t rows, cols;
                    shape_for(v, m, var, &rows, &cols);
                    char what[160];
                    snprintf(what, sizeof what, "V=%d 2:%d %s W %lldx%lld T=%lld", v, m, sj_dtype_name(dt), (long long)rows,
                             (long long)cols, (long long)T);
                    /* W pruned by magnitude; X and dY from their laws */
                    sj_vnm_layout l;
                    SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, m, rows, cols));
                    uint16_t *D = malloc((size_t)(rows * cols) * 2), *Dt = malloc((size_t)(rows * cols) * 2),
                             *D2 = malloc((size_t)(rows * cols) * 2), *X = malloc((size_t)(cols * T) * 2),
                             *dY = malloc((size_t)(rows * T) * 2);
                    tu_fill16(dt, D, (size_t)(rows * cols), 1.0f, &st);
                    sj_vnm_host W, W2;
                    SJ_ASSERT_OK(sj_vnm_compress(&l, D, cols, SJ_VNM_PRUNE_L2, &W));
                    SJ_ASSERT_OK(sj_vnm_decompress(&W, D, cols));
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) Dt[c * rows + r] = D[r * cols + c];
                    SJ_ASSERT_OK(sj_vnm_double_prune_host(&W, &W2));
                    SJ_ASSERT_OK(sj_vnm_decompress(&W2, D2, rows));
                    const crng_matrix Xl = { dt, crng_key(st, 2), cols, T, NULL }, dYl = { dt, crng_key(st, 3), rows, T, NULL };
                    crng_matrix_fill(&Xl, X);
                    crng_matrix_fill(&dYl, dY);
                    double *Y = malloc(sizeof(double) * (size_t)(rows * T)), *dX = malloc(sizeof(double) * (size_t)(cols * T)),
                           *dX2 = malloc(sizeof(double) * (size_t)(cols * T));
                    tu_ref_gemm16(dt, D, X, Y, rows, T, cols);
                    tu_ref_gemm16(dt, Dt, dY, dX, cols, T, rows);
                    tu_ref_gemm16(dt, D2, dY, dX2, cols, T, rows);
                    float *dW = malloc(l.values_bytes / 2 * sizeof *dW);
                    SJ_ASSERT_OK(sj_vnm_dw_host(&W, dY, X, T, SJ_DTYPE_F32, dW));

                    for (int rule = 0; rule < 2; rule++) {
                        vnm_step_sample s;
                        SJ_ASSERT_OK(vnm_step_reference(&W, &Xl, &dYl, rule ? VNM_DX_EXACT : VNM_DX_DOUBLE_PRUNED, &s));
                        assert_int_equal(s.y_rows, rows < 16 ? rows : 16);
                        assert_int_equal(s.dx_rows, cols < 16 ? cols : 16);
                        assert_int_equal(s.tokens, T);
                        assert_int_equal(s.dw_slots, 2 * l.groups);
                        const double *dx_want = rule ? dX : dX2;
                        double *want = malloc(sizeof(double) * (size_t)((s.y_rows + s.dx_rows) * (T + s.dw_slots)));
                        for (int i = 0; i < s.y_rows; i++)
                            memcpy(want + i * T, Y + harness_sample_row(rows, i) * T, sizeof(double) * (size_t)T);
                        expect_close(what, "Y", s.y, want, (size_t)(s.y_rows * T));
                        for (int j = 0; j < s.dx_rows; j++)
                            memcpy(want + j * T, dx_want + harness_sample_row(cols, j) * T, sizeof(double) * (size_t)T);
                        expect_close(what, rule ? "dX exact" : "dX double-pruned", s.dx, want, (size_t)(s.dx_rows * T));
                        for (int i = 0; i < s.y_rows; i++)
                            for (int64_t g = 0; g < l.groups; g++)
                                for (int h = 0; h < 2; h++)
                                    want[i * s.dw_slots + 2 * g + h] = dW[vnm_value_at(&l, harness_sample_row(rows, i), g, h)];
                        expect_close(what, "dW", s.dw, want, (size_t)(s.y_rows * s.dw_slots));
                        /* the rule matters: the double-pruned rows differ from the exact ones */
                        for (int j = 0; !rule && j < s.dx_rows; j++)
                            for (int64_t t = 0; t < T; t++) differing += s.dx[j * T + t] != (float)dX[harness_sample_row(cols, j) * T + t];
                        free(want);
                        vnm_step_sample_free(&s);
                    }
                    free(D);
                    free(Dt);
                    free(D2);
                    free(X);
                    free(dY);
                    free(Y);
                    free(dX);
                    free(dX2);
                    free(dW);
                    sj_vnm_host_free(&W);
                    sj_vnm_host_free(&W2);
                }
    assert_true(differing > 0);
}

/* Inputs that do not fit W are refused, naming the input. */
static void test_refusals(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 8, 100, 80));
    uint16_t *D = malloc(100 * 80 * 2);
    tu_fill16(SJ_DTYPE_F16, D, 100 * 80, 1.0f, &st);
    sj_vnm_host W;
    SJ_ASSERT_OK(sj_vnm_compress(&l, D, 80, SJ_VNM_PRUNE_L2, &W));
    const crng_matrix X = { SJ_DTYPE_F16, 1, 80, 24, NULL }, dY = { SJ_DTYPE_F16, 2, 100, 24, NULL };
    crng_matrix bad = X;
    vnm_step_sample s;
    bad.rows = 81;
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &bad, &dY, VNM_DX_EXACT, &s), SJ_ERR_INVALID_ARGUMENT,
                     "X is f16 81 x 24, expected f16 80 x 24");
    bad = dY;
    bad.dtype = SJ_DTYPE_BF16;
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &X, &bad, VNM_DX_EXACT, &s), SJ_ERR_INVALID_ARGUMENT,
                     "dY is bf16 100 x 24, expected f16 100 x 24");
    bad.dtype = SJ_DTYPE_F16;
    bad.cols = 16;
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &X, &bad, VNM_DX_EXACT, &s), SJ_ERR_INVALID_ARGUMENT, "dY is f16 100 x 16");
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &X, NULL, VNM_DX_EXACT, &s), SJ_ERR_INVALID_ARGUMENT, "dY is NULL");
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &X, &dY, (vnm_dx_rule)7, &s), SJ_ERR_INVALID_ARGUMENT, "rule 7");
    SJ_ASSERT_STATUS(vnm_step_reference(NULL, &X, &dY, VNM_DX_EXACT, &s), SJ_ERR_INVALID_ARGUMENT, "W or its arrays are NULL");
    SJ_ASSERT_STATUS(vnm_step_reference(&W, &X, &dY, VNM_DX_EXACT, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    assert_null(s.y);
    sj_vnm_host_free(&W);
    free(D);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_step),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
