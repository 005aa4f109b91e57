/* test_hybrid_train.c: the fp64 host reference of the ReLU FFN training step
 * (sj_hybrid_ffn_step_host, the sparse formulation) against a dense brute force written here
 * from the autograd of y = Wd . (relu(Wg . x) (.) (Wu . x)): every matrix dense, the ReLU as a
 * mask over all d_ff units, on fresh random data at 50% to 99.9% zeros with ragged sizes, f16 and
 * bf16. The brute force itself is checked against central finite differences of the loss
 * L = sum(dY (.) Y) for entries of every weight and of X, so the math both share is tested too.
 * Argument refusals. */
#include "test_util.h"
#include "tuner/harness.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng;

static int setup(void **state)
{
    (void)state;
    rng = tu_seed();
    return 0;
}

/* One problem's inputs: 16-bit and the same values in fp64. */
typedef struct inputs {
    sj_dtype dt;
    int64_t T, D, F;
    uint16_t *x, *wg, *wu, *wd, *dy;   /* X, dY: T x D; WgT, WuT, Wd: F x D */
    double *X, *Wg, *Wu, *Wd, *dY;
} inputs;

static uint16_t *fill(inputs *in, size_t n, double **as_double)
{
    uint16_t *v = malloc(sizeof *v * n);
    *as_double = malloc(sizeof **as_double * n);
    assert_true(v && *as_double);
    tu_fill16(in->dt, v, n, 1.0f, &rng);
    return v;
}

static void to_double(const inputs *in, const uint16_t *v, double *d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = tu_from16(in->dt, v[i]);
}

/* Random inputs whose gate is positive with probability about 1 - sparsity: column 0 of X is
 * all ones and column 0 of WgT each unit's bias, -z(sparsity) standard deviations of the rest. */
static void make_inputs(inputs *in, sj_dtype dt, int64_t T, int64_t D, int64_t F, double sparsity)
{
    *in = (inputs){ .dt = dt, .T = T, .D = D, .F = F };
    const size_t td = (size_t)(T * D), fd = (size_t)(F * D);
    in->x = fill(in, td, &in->X);
    in->dy = fill(in, td, &in->dY);
    in->wg = fill(in, fd, &in->Wg);
    in->wu = fill(in, fd, &in->Wu);
    in->wd = fill(in, fd, &in->Wd);
    const double sigma = sqrt((double)(D - 1) / 9.0), bias = -sigma * harness_normal_quantile(sparsity);
    for (int64_t t = 0; t < T; t++) in->x[t * D] = tu_to16(dt, 1.0f);
    for (int64_t j = 0; j < F; j++) in->wg[j * D] = tu_to16(dt, (float)bias);
    to_double(in, in->x, in->X, td);
    to_double(in, in->dy, in->dY, td);
    to_double(in, in->wg, in->Wg, fd);
    to_double(in, in->wu, in->Wu, fd);
    to_double(in, in->wd, in->Wd, fd);
}

static void free_inputs(inputs *in)
{
    void *p[] = { in->x, in->wg, in->wu, in->wd, in->dy, in->X, in->Wg, in->Wu, in->Wd, in->dY };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

static double *zeros(size_t n)
{
    double *v = calloc(n, sizeof *v);
    assert_non_null(v);
    return v;
}

/* The dense forward and backward, every (token, unit) pair visited; returns L = sum(dY (.) Y). */
static double dense_step(const inputs *in, const double *X, const double *Wg, const double *Wu, const double *Wd,
                         sj_hybrid_ffn_step *o)
{
    const int64_t T = in->T, D = in->D, F = in->F;
    double *G = zeros((size_t)(T * F)), *U = zeros((size_t)(T * F)), *H = zeros((size_t)(T * F));
    double *dH = zeros((size_t)(T * F)), *dG = zeros((size_t)(T * F)), *dU = zeros((size_t)(T * F));
    double L = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < F; j++) {
            for (int64_t k = 0; k < D; k++) {
                G[t * F + j] += X[t * D + k] * Wg[j * D + k];
                U[t * F + j] += X[t * D + k] * Wu[j * D + k];
            }
            H[t * F + j] = (G[t * F + j] > 0 ? G[t * F + j] : 0) * U[t * F + j];
        }
    memset(o->Y, 0, sizeof(double) * (size_t)(T * D));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D; i++) {
            for (int64_t j = 0; j < F; j++) o->Y[t * D + i] += H[t * F + j] * Wd[j * D + i];
            L += in->dY[t * D + i] * o->Y[t * D + i];
        }
    /* dH = dY . Wd^T everywhere; through the product and the ReLU's mask */
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < F; j++) {
            for (int64_t i = 0; i < D; i++) dH[t * F + j] += in->dY[t * D + i] * Wd[j * D + i];
            const double g = G[t * F + j], a = g > 0 ? g : 0;
            dU[t * F + j] = dH[t * F + j] * a;
            dG[t * F + j] = dH[t * F + j] * U[t * F + j] * (g > 0 ? 1.0 : 0.0);
        }
    memset(o->dX, 0, sizeof(double) * (size_t)(T * D));
    memset(o->dWgT, 0, sizeof(double) * (size_t)(F * D));
    memset(o->dWuT, 0, sizeof(double) * (size_t)(F * D));
    memset(o->dWd, 0, sizeof(double) * (size_t)(F * D));
    o->active = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < F; j++) {
            o->active += G[t * F + j] > 0;
            for (int64_t k = 0; k < D; k++) {
                o->dX[t * D + k] += dG[t * F + j] * Wg[j * D + k] + dU[t * F + j] * Wu[j * D + k];
                o->dWgT[j * D + k] += dG[t * F + j] * X[t * D + k];
                o->dWuT[j * D + k] += dU[t * F + j] * X[t * D + k];
                o->dWd[j * D + k] += H[t * F + j] * in->dY[t * D + k];
            }
        }
    free(G), free(U), free(H), free(dH), free(dG), free(dU);
    return L;
}

static sj_hybrid_ffn_step alloc_step(const inputs *in)
{
    const size_t td = (size_t)(in->T * in->D), fd = (size_t)(in->F * in->D);
    sj_hybrid_ffn_step s = { zeros(td), zeros(td), zeros(fd), zeros(fd), zeros(fd), -1 };
    return s;
}

static void free_step(sj_hybrid_ffn_step *s) { free(s->Y), free(s->dX), free(s->dWgT), free(s->dWuT), free(s->dWd); }

static double rel_err(const double *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_sparse_matches_dense(void **state)
{
    (void)state;
    const struct { sj_dtype dt; int64_t T, D, F; double sparsity; } cases[] = {
        { SJ_DTYPE_BF16, 9, 24, 50, 0.50 },
        { SJ_DTYPE_F16, 17, 40, 130, 0.90 },
        { SJ_DTYPE_BF16, 33, 16, 301, 0.99 },
        { SJ_DTYPE_F16, 40, 32, 700, 0.999 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        inputs in;
        make_inputs(&in, cases[c].dt, cases[c].T, cases[c].D, cases[c].F, cases[c].sparsity);
        sj_hybrid_ffn_step sparse = alloc_step(&in), dense = alloc_step(&in);
        /* poison: the reference must write every element */
        for (int64_t i = 0; i < in.T * in.D; i++) sparse.Y[i] = sparse.dX[i] = NAN;
        for (int64_t i = 0; i < in.F * in.D; i++) sparse.dWgT[i] = sparse.dWuT[i] = sparse.dWd[i] = NAN;
        SJ_ASSERT_OK(sj_hybrid_ffn_step_host(in.dt, in.T, in.D, in.F, in.x, in.wg, in.wu, in.wd, in.dy, &sparse));
        dense_step(&in, in.X, in.Wg, in.Wu, in.Wd, &dense);
        assert_int_equal(sparse.active, dense.active);
        double zeros_seen = 1.0 - (double)dense.active / (double)(in.T * in.F);
        /* the bias makes the data as sparse as asked (loosely: few samples), and never empty */
        assert_true(dense.active > 0);
        assert_true(fabs(zeros_seen - cases[c].sparsity) < 0.5 * (1 - cases[c].sparsity) + 0.02);
        const size_t td = (size_t)(in.T * in.D), fd = (size_t)(in.F * in.D);
        const double *got[] = { sparse.Y, sparse.dX, sparse.dWgT, sparse.dWuT, sparse.dWd };
        const double *ref[] = { dense.Y, dense.dX, dense.dWgT, dense.dWuT, dense.dWd };
        const size_t n[] = { td, td, fd, fd, fd };
        for (int i = 0; i < 5; i++) {
            double e = rel_err(got[i], ref[i], n[i]);
            if (!(e < 1e-12)) fail_msg("case %zu output %d: relative error %g", c, i, e);
        }
        free_step(&sparse), free_step(&dense), free_inputs(&in);
    }
}

/* The dense brute force's gradients are those of L = sum(dY (.) Y): central differences. */
static void test_dense_is_the_gradient(void **state)
{
    (void)state;
    inputs in;
    make_inputs(&in, SJ_DTYPE_BF16, 6, 12, 40, 0.6);
    sj_hybrid_ffn_step g = alloc_step(&in), tmp = alloc_step(&in);
    dense_step(&in, in.X, in.Wg, in.Wu, in.Wd, &g);
    double *params[] = { in.X, in.Wg, in.Wu, in.Wd };
    const double *grads[] = { g.dX, g.dWgT, g.dWuT, g.dWd };
    const int64_t sizes[] = { in.T * in.D, in.F * in.D, in.F * in.D, in.F * in.D };
    const double eps = 1e-6;
    for (int p = 0; p < 4; p++)
        for (int s = 0; s < 12; s++) {
            int64_t i = (int64_t)((tu_uniform(&rng) + 1.0) * 0.5 * (double)sizes[p]);
            double keep = params[p][i];
            params[p][i] = keep + eps;
            double up = dense_step(&in, in.X, in.Wg, in.Wu, in.Wd, &tmp);
            params[p][i] = keep - eps;
            double down = dense_step(&in, in.X, in.Wg, in.Wu, in.Wd, &tmp);
            params[p][i] = keep;
            double fd = (up - down) / (2 * eps);
            if (!(fabs(fd - grads[p][i]) <= 1e-5 * (1 + fabs(fd))))
                fail_msg("parameter %d element %lld: finite difference %.9g, gradient %.9g", p, (long long)i, fd,
                         grads[p][i]);
        }
    free_step(&g), free_step(&tmp), free_inputs(&in);
}

static void test_refusals(void **state)
{
    (void)state;
    inputs in;
    make_inputs(&in, SJ_DTYPE_F16, 2, 8, 4, 0.5);
    sj_hybrid_ffn_step s = alloc_step(&in);
    SJ_ASSERT_STATUS(sj_hybrid_ffn_step_host(SJ_DTYPE_F32, 2, 8, 4, in.x, in.wg, in.wu, in.wd, in.dy, &s),
                     SJ_ERR_INVALID_ARGUMENT, "f16 or bf16");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_step_host(SJ_DTYPE_F16, 0, 8, 4, in.x, in.wg, in.wu, in.wd, in.dy, &s),
                     SJ_ERR_INVALID_ARGUMENT, "tokens = 0");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_step_host(SJ_DTYPE_F16, 2, 8, 0, in.x, in.wg, in.wu, in.wd, in.dy, &s),
                     SJ_ERR_INVALID_ARGUMENT, "d_ff = 0");
    SJ_ASSERT_STATUS(sj_hybrid_ffn_step_host(SJ_DTYPE_F16, 2, 8, 4, in.x, in.wg, NULL, in.wd, in.dy, &s),
                     SJ_ERR_INVALID_ARGUMENT, "must not be NULL");
    double *keep = s.dWd;
    s.dWd = NULL;
    SJ_ASSERT_STATUS(sj_hybrid_ffn_step_host(SJ_DTYPE_F16, 2, 8, 4, in.x, in.wg, in.wu, in.wd, in.dy, &s),
                     SJ_ERR_INVALID_ARGUMENT, "dWd");
    s.dWd = keep;
    free_step(&s), free_inputs(&in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_matches_dense),
        cmocka_unit_test(test_dense_is_the_gradient),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
