/* twell_bench.c: bench_op_twell, what `sparsejit bench --op twell-gate | twell-ffn` times.
 *
 * Inputs are uniform [-1, 1) (never zeros) with shifted pre-activations: X[:, d_model-1] = 1
 * and Wg[d_model-1, :] = -b, b chosen so that a fraction problem.twell_sparsity (default 0.99; the
 * bench command sets it from --sparsity) of relu(X . Wg) is zero, independently per token and
 * unit; with --skew A each unit j has its own b_j and rate (harness_unit_rates). twell-gate: one
 * launch is the gate GEMM with its TwELL epilogue, against one cuBLAS GEMM of the same shape.
 * twell-ffn: one launch is the whole FFN block, the gate and then the fused FFN over the TwELL
 * the gate just wrote, against the block's three dense GEMMs. Before timing, CHECK_ROWS token
 * rows spread over the whole output (so every part of the grid is seen) are compared with an
 * fp64 host reference. */
#include "tuner/harness.h"
#include "ops/twell/twell.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct bench_case {
    sj_problem p;        /* as benched: twell-gate or twell-ffn */
    sj_problem gate;     /* the block's gate problem */
    sj_twell_device H;
    sj_devptr X, WgT, WuT, Wd, Y;
    uint16_t *hX, *hWgT, *hWuT, *hWd;   /* the host copies, for check() */
};

enum { CHECK_ROWS = 16 };

/* The inputs' fraction of zeros: the problem's twell_sparsity (the CLI and the Lua module set
 * it, 0.99 by default); a library caller's unspecified 0 gets the same 0.99. */
static double bench_sparsity(const sj_problem *p)
{
    return p->twell_sparsity > 0 ? p->twell_sparsity : TWELL_DEFAULT_SPARSITY;
}

/* Uploads n random values of dtype (uniform [-1, 1)); column col of every row r of width ld is
 * set to value, or to row_value[r] when row_value is not NULL, when col >= 0. The host copy goes
 * to *keep. */
static sj_status random_upload(sj_context *ctx, sj_dtype dt, int64_t rows, int64_t ld, int64_t col, float value,
                               const float *row_value, uint64_t *rng, sj_devptr *out, uint16_t **keep)
{
    size_t n = (size_t)(rows * ld);
    uint16_t *host = malloc(n * sizeof *host);
    if (!host) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory for %zu inputs", n);
    harness_fill16(dt, host, n, 1.0f, rng);
    if (col >= 0) {
        uint16_t v = harness_f32_to_16(dt, value);
        for (int64_t r = 0; r < rows; r++) host[r * ld + col] = row_value ? harness_f32_to_16(dt, row_value[r]) : v;
    }
    sj_status st = sj_malloc(ctx, n * sizeof *host, out);
    if (st == SJ_OK && (st = sj_memcpy_htod(ctx, *out, host, n * sizeof *host)) != SJ_OK) {
        sj_free(ctx, *out);
        *out = 0;
    }
    if (st == SJ_OK) *keep = host;
    else free(host);
    return st;
}

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    sj_twell_device_free(ctx, &c->H);
    sj_devptr ptrs[] = { c->X, c->WgT, c->WuT, c->Wd, c->Y };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) sj_free(ctx, ptrs[i]);
    free(c->hX);
    free(c->hWgT);
    free(c->hWuT);
    free(c->hWd);
    free(c);
}

static sj_status setup(sj_context *ctx, const sj_problem *p, bench_case **out)
{
    *out = NULL;
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_TWELL_GATE && p->op != SJ_OP_TWELL_FFN)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench twell: problem op is %s, expected twell-gate or twell-ffn",
                       sj_op_name(p->op));
    double sparsity = bench_sparsity(p);
    int ffn = p->op == SJ_OP_TWELL_FFN;
    int64_t d_model = p->k, d_ff = ffn ? p->d_ff : p->n;
    if (d_model < 2) return error_set(SJ_ERR_INVALID_ARGUMENT, "bench twell: d_model = %lld leaves no column for the shift",
                                    (long long)d_model);
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory");
    c->p = *p;
    sj_twell_layout layout;
    if ((st = sj_twell_layout_init(&layout, p->dtype, p->m, d_ff, p->twell_tile, p->twell_capacity)) != SJ_OK ||
        (st = sj_twell_gate_problem(&layout, d_model, &c->gate)) != SJ_OK) {
        teardown(ctx, c);
        return st;
    }
    /* the sparsity is part of the cache key: without it the gate would miss a winner tuned at it */
    c->gate.twell_sparsity = p->twell_sparsity;
    c->gate.twell_skew = p->twell_skew;
    /* x . w over d_model - 1 uniform terms has variance (d_model - 1) / 9; unit j's shift makes
     * it fire at its rate (all 1 - sparsity unless the problem has a skew) */
    uint64_t rng = ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)getpid();
    if (!rng) rng = 1;
    double *shift = malloc(sizeof *shift * (size_t)d_ff);
    float *bias = malloc(sizeof *bias * (size_t)d_ff);
    st = shift && bias ? harness_unit_shifts(1.0 - sparsity, p->twell_skew, sqrt((double)(d_model - 1) / 9.0), d_ff, &rng, shift)
                       : error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory for %lld unit shifts", (long long)d_ff);
    for (int64_t j = 0; st == SJ_OK && j < d_ff; j++) bias[j] = (float)-shift[j];
    if (st != SJ_OK ||
        (st = random_upload(ctx, p->dtype, p->m, d_model, d_model - 1, 1.0f, NULL, &rng, &c->X, &c->hX)) != SJ_OK ||
        (st = random_upload(ctx, p->dtype, d_ff, d_model, d_model - 1, 0, bias, &rng, &c->WgT, &c->hWgT)) != SJ_OK ||
        (st = sj_twell_device_alloc(ctx, &layout, &c->H)) != SJ_OK) {
        free(shift);
        free(bias);
        teardown(ctx, c);
        return st;
    }
    free(shift);
    free(bias);
    if (ffn) {
        size_t y_bytes = (size_t)(p->m * d_model) * sj_dtype_size(p->out_dtype);
        if ((st = random_upload(ctx, p->dtype, d_ff, d_model, -1, 0, NULL, &rng, &c->WuT, &c->hWuT)) != SJ_OK ||
            (st = random_upload(ctx, p->dtype, d_ff, d_model, -1, 0, NULL, &rng, &c->Wd, &c->hWd)) != SJ_OK ||
            (st = sj_malloc(ctx, y_bytes, &c->Y)) != SJ_OK) {
            teardown(ctx, c);
            return st;
        }
    }
    *out = c;
    return SJ_OK;
}

static sj_status launch(sj_context *ctx, bench_case *c)
{
    sj_status st = sj_twell_gate(ctx, &c->gate, c->X, c->WgT, &c->H, NULL);
    if (st != SJ_OK || c->p.op == SJ_OP_TWELL_GATE) return st;
    return sj_twell_ffn(ctx, &c->p, c->X, &c->H, c->WuT, c->Wd, c->Y, NULL);
}

/* The sampled rows: the first, the last, and evenly between. */
static int64_t check_row(int64_t M, int i) { return M <= CHECK_ROWS ? i % M : (int64_t)i * (M - 1) / (CHECK_ROWS - 1); }

/* The reference of the sampled rows in one pass over the d_ff units: h = relu(x . Wg[:, j])
 * rounded to the dtype as the gate stores it; for the FFN, y += h (x . Wu[:, j]) Wd[j, :]. */
static sj_status reference(const bench_case *c, int ffn, float *h_ref, float *y_ref)
{
    const sj_problem *p = &c->p;
    int64_t D = p->k, F = ffn ? p->d_ff : p->n, M = p->m;
    const float *lut = harness_lut16(p->dtype);
    double *x = malloc(sizeof *x * (size_t)(CHECK_ROWS * D)), *y = calloc((size_t)(CHECK_ROWS * D), sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory for the reference");
    }
    for (int i = 0; i < CHECK_ROWS; i++)
        for (int64_t k = 0; k < D; k++) x[i * D + k] = lut[c->hX[check_row(M, i) * D + k]];
    for (int64_t j = 0; j < F; j++) {
        const uint16_t *wg = c->hWgT + j * D;
        for (int i = 0; i < CHECK_ROWS; i++) {
            double pre = 0;
            for (int64_t k = 0; k < D; k++) pre += x[i * D + k] * lut[wg[k]];
            float h = lut[harness_f32_to_16(p->dtype, pre > 0 ? (float)pre : 0.0f)];
            if (h_ref) h_ref[i * F + j] = h;
            if (!ffn || h == 0) continue;
            const uint16_t *wu = c->hWuT + j * D, *wd = c->hWd + j * D;
            double u = 0;
            for (int64_t k = 0; k < D; k++) u += x[i * D + k] * lut[wu[k]];
            for (int64_t k = 0; k < D; k++) y[i * D + k] += h * u * lut[wd[k]];
        }
    }
    if (y_ref)
        for (int64_t i = 0; i < CHECK_ROWS * D; i++) y_ref[i] = (float)y[i];
    free(x);
    free(y);
    return SJ_OK;
}

/* twell-gate: the sampled rows of H (read back from TwELL); twell-ffn: those of Y. */
static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    *rel_error = INFINITY;
    const sj_problem *p = &c->p;
    int ffn = p->op == SJ_OP_TWELL_FFN;
    int64_t M = p->m, W = p->n;   /* Y: tokens x d_model; H: tokens x d_ff; both n wide */
    sj_dtype out_dt = ffn ? p->out_dtype : p->dtype;
    size_t osz = sj_dtype_size(out_dt), row_bytes = (size_t)W * osz;
    float *ref = malloc(sizeof *ref * (size_t)(CHECK_ROWS * W));
    unsigned char *got = malloc(row_bytes * CHECK_ROWS);
    sj_status st = ref && got ? SJ_OK : error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory for the check");
    if (st == SJ_OK) st = reference(c, ffn, ffn ? NULL : ref, ffn ? ref : NULL);
    if (st == SJ_OK && ffn) {
        for (int i = 0; i < CHECK_ROWS && st == SJ_OK; i++)
            st = sj_memcpy_dtoh(ctx, got + i * row_bytes, c->Y + (sj_devptr)check_row(M, i) * row_bytes, row_bytes);
    } else if (st == SJ_OK) {
        sj_twell_host th;
        uint16_t *dense = NULL;
        if ((st = sj_twell_download(ctx, &c->H, &th)) != SJ_OK) goto done;
        dense = malloc(sizeof *dense * (size_t)(M * W));
        st = dense ? sj_twell_to_dense(&th, dense, W) : error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell: no host memory for H");
        for (int i = 0; i < CHECK_ROWS && st == SJ_OK; i++)
            memcpy(got + i * row_bytes, dense + check_row(M, i) * W, row_bytes);
        free(dense);
        sj_twell_host_free(&th);
    }
    if (st == SJ_OK) *rel_error = harness_rel_error(out_dt, got, ref, (size_t)(CHECK_ROWS * W));
done:
    free(ref);
    free(got);
    return st;
}

/* The gate is dense work; the FFN's up and down products count at the active units only. */
static double flops(const sj_problem *p)
{
    if (p->op == SJ_OP_TWELL_GATE) return 2.0 * (double)p->m * (double)p->n * (double)p->k;
    double s = bench_sparsity(p);
    double dense = 2.0 * (double)p->m * (double)p->d_ff * (double)p->k;
    return dense + 2.0 * dense * (1.0 - s);
}

static int baseline(const sj_problem *p, int64_t shapes[4][3])
{
    if (p->op == SJ_OP_TWELL_GATE) {
        shapes[0][0] = p->m;
        shapes[0][1] = p->n;
        shapes[0][2] = p->k;
        return 1;
    }
    for (int i = 0; i < 2; i++) { /* gate and up: tokens x d_ff over d_model */
        shapes[i][0] = p->m;
        shapes[i][1] = p->d_ff;
        shapes[i][2] = p->k;
    }
    shapes[2][0] = p->m; /* down: tokens x d_model over d_ff */
    shapes[2][1] = p->n;
    shapes[2][2] = p->d_ff;
    return 3;
}

const bench_op bench_op_twell = {
    .op = SJ_OP_TWELL_FFN,
    .setup = setup,
    .launch = launch,
    .flops = flops,
    .baseline = baseline,
    .check = check,
    .teardown = teardown,
};
