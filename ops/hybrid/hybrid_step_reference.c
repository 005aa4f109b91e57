/* hybrid_step_reference.c: the sampled fp64 reference of one training step of the ReLU FFN block
 * (hybrid_step_reference.h). Two passes, each input row generated once and only when a sampled
 * output reads it:
 *   - over the units j: the sampled tokens' gates X[t] . WgT[j] side by side (their x interleaved,
 *     so the compiler vectorizes across tokens; each dot product still sums in d_model order),
 *     and where A holds the pair, u = X[t] . WuT[j], dh = dY[t] . Wd[j], Y[t] += a u Wd[j] and
 *     dX[t] += dh u WgT[j] + dh a WuT[j] (dg = dh u, du = dh a; relu' = 1 on A's pairs);
 *   - over the tokens t active at a sampled unit: dWgT[j] += dh u X[t], dWuT[j] += dh a X[t],
 *     dWd[j] += a u dY[t].
 * sj_hybrid_ffn_step_host is the same step whole, with its own gate deciding the pairs;
 * tests/test_hybrid_step_reference.c checks this one against a dense brute force and against it. */
#include "ops/hybrid/hybrid_step_reference.h"
#include "core/error.h"
#include "ops/hybrid/hybrid_format.h"
#include "tuner/harness.h"

#include <stdlib.h>
#include <string.h>

void hybrid_step_sample_free(hybrid_step_sample *s)
{
    if (!s) return;
    free(s->gate);
    free(s->y);
    free(s->dx);
    free(s->dwg);
    free(s->dwu);
    free(s->dwd);
    memset(s, 0, sizeof *s);
}

static sj_status check_inputs(const hybrid_step_inputs *in)
{
    const char *what = "hybrid_step_reference";
    if (!in || !in->X || !in->WgT || !in->WuT || !in->Wd || !in->dY || !in->A)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: X, WgT, WuT, Wd, dY and A must all be set", what);
    const crng_matrix *X = in->X;
    if (X->dtype != SJ_DTYPE_F16 && X->dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: X's dtype %d: expected f16 or bf16", what, (int)X->dtype);
    if (X->rows < 1 || X->cols < 1 || in->WgT->rows < 1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: X is %lld x %lld, WgT has %lld rows: each expected at least 1",
                         what, (long long)X->rows, (long long)X->cols, (long long)in->WgT->rows);
    const int64_t F = in->WgT->rows;
    const struct { const char *name; const crng_matrix *m; int64_t rows; } want[] = {
        { "WgT", in->WgT, F }, { "WuT", in->WuT, F }, { "Wd", in->Wd, F }, { "dY", in->dY, X->rows } };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const crng_matrix *m = want[i].m;
        if (m->dtype != X->dtype || m->rows != want[i].rows || m->cols != X->cols)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: %s is %s %lld x %lld; expected %s %lld x %lld (X: %lld tokens "
                             "x d_model %lld; WgT: d_ff %lld)", what, want[i].name, sj_dtype_name(m->dtype),
                             (long long)m->rows, (long long)m->cols, sj_dtype_name(X->dtype), (long long)want[i].rows,
                             (long long)X->cols, (long long)X->rows, (long long)X->cols, (long long)F);
    }
    return SJ_OK;
}

/* Row r of m as doubles (bits: scratch of m->cols). */
static void row_f64(const crng_matrix *m, int64_t r, const float *lut, uint16_t *bits, double *out)
{
    crng_matrix_row(m, r, bits);
    for (int64_t c = 0; c < m->cols; c++) out[c] = lut[bits[c]];
}

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The gate, Y and dX of the sampled tokens (xt: their X rows interleaved, dy: their dY rows). */
static void token_rows(const hybrid_step_inputs *in, const float *lut, const double *xt, const double *dy, double *y,
                       double *dx, double *w, uint16_t *bits, hybrid_step_sample *out)
{
    const int64_t D = out->d_model, F = out->d_ff, T = in->X->rows;
    const int rows = out->rows;
    double *wg = w, *wu = w + D, *wd = w + 2 * D, *pre = w + 3 * D, *x = pre + rows;
    for (int64_t j = 0; j < F; j++) {
        row_f64(in->WgT, j, lut, bits, wg);
        for (int i = 0; i < rows; i++) pre[i] = 0;
        for (int64_t k = 0; k < D; k++)
            for (int i = 0; i < rows; i++) pre[i] += xt[k * rows + i] * wg[k];
        int have_weights = 0;
        for (int i = 0; i < rows; i++) {
            out->gate[i * F + j] = pre[i] > 0 ? (float)pre[i] : 0.0f;
            const uint16_t a_bits = in->A[harness_sample_row(T, i) * F + j];
            if (!hybrid_nonzero(a_bits)) continue;
            if (!have_weights) { /* the unit is active at a sampled token: its up and down weights */
                row_f64(in->WuT, j, lut, bits, wu);
                row_f64(in->Wd, j, lut, bits, wd);
                have_weights = 1;
            }
            for (int64_t k = 0; k < D; k++) x[k] = xt[k * rows + i];
            const double a = lut[a_bits], u = dot(x, wu, D), dh = dot(dy + i * D, wd, D);
            for (int64_t k = 0; k < D; k++) {
                y[i * D + k] += a * u * wd[k];
                dx[i * D + k] += dh * u * wg[k] + dh * a * wu[k];
            }
        }
    }
}

/* The three weight gradients of the sampled units (wu, wd: their WuT and Wd rows), over the
 * tokens active at any of them. */
static void unit_rows(const hybrid_step_inputs *in, const float *lut, const double *wu, const double *wd, double *acc,
                      double *x, double *dy, uint16_t *bits, const hybrid_step_sample *out)
{
    const int64_t D = out->d_model, F = out->d_ff, T = in->X->rows;
    const int units = out->units;
    double *dwg = acc, *dwu = acc + units * D, *dwd = acc + 2 * units * D;
    for (int64_t t = 0; t < T; t++) {
        const uint16_t *a_row = in->A + t * F;
        int any = 0;
        for (int s = 0; s < units && !any; s++) any = hybrid_nonzero(a_row[harness_sample_row(F, s)]);
        if (!any) continue;
        row_f64(in->X, t, lut, bits, x);
        row_f64(in->dY, t, lut, bits, dy);
        for (int s = 0; s < units; s++) {
            const uint16_t a_bits = a_row[harness_sample_row(F, s)];
            if (!hybrid_nonzero(a_bits)) continue;
            const double a = lut[a_bits], u = dot(x, wu + s * D, D), dh = dot(dy, wd + s * D, D);
            for (int64_t k = 0; k < D; k++) {
                dwg[s * D + k] += dh * u * x[k];
                dwu[s * D + k] += dh * a * x[k];
                dwd[s * D + k] += a * u * dy[k];
            }
        }
    }
}

static void round_rows(const double *from, float *to, int64_t n)
{
    for (int64_t i = 0; i < n; i++) to[i] = (float)from[i];
}

sj_status hybrid_step_reference(const hybrid_step_inputs *in, hybrid_step_sample *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid_step_reference: out is NULL");
    memset(out, 0, sizeof *out);
    sj_status st = check_inputs(in);
    if (st != SJ_OK) return st;
    const int64_t T = in->X->rows, D = in->X->cols, F = in->WgT->rows;
    const int rows = harness_sample_count(T), units = harness_sample_count(F);
    const float *lut = harness_lut16(in->X->dtype);
    *out = (hybrid_step_sample){ rows, units, D, F, malloc(sizeof(float) * (size_t)(rows * F)),
                                 malloc(sizeof(float) * (size_t)(rows * D)), malloc(sizeof(float) * (size_t)(rows * D)),
                                 malloc(sizeof(float) * (size_t)(units * D)), malloc(sizeof(float) * (size_t)(units * D)),
                                 malloc(sizeof(float) * (size_t)(units * D)) };
    /* xt and dy: the sampled tokens' rows; acc: Y and dX, then the three gradients; w: 3 weight
     * rows, the gates of the tokens and one token's x; uw: the units' WuT and Wd rows */
    const int64_t n_acc = 2 * rows * D > 3 * units * D ? 2 * rows * D : 3 * units * D;
    double *xt = malloc(sizeof *xt * (size_t)(rows * D)), *dy = malloc(sizeof *dy * (size_t)((rows + 1) * D)),
           *acc = calloc((size_t)n_acc, sizeof *acc), *w = malloc(sizeof *w * (size_t)(4 * D + rows)),
           *uw = malloc(sizeof *uw * (size_t)(2 * units * D));
    uint16_t *bits = malloc(sizeof *bits * (size_t)D);
    if (!out->gate || !out->y || !out->dx || !out->dwg || !out->dwu || !out->dwd || !xt || !dy || !acc || !w || !uw ||
        !bits) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "hybrid_step_reference: no host memory for %d tokens and %d units of "
                       "d_model %lld", rows, units, (long long)D);
        goto done;
    }
    for (int i = 0; i < rows; i++) {
        const int64_t t = harness_sample_row(T, i);
        row_f64(in->X, t, lut, bits, w);
        for (int64_t k = 0; k < D; k++) xt[k * rows + i] = w[k];
        row_f64(in->dY, t, lut, bits, dy + i * D);
    }
    token_rows(in, lut, xt, dy, acc, acc + rows * D, w, bits, out);
    round_rows(acc, out->y, rows * D);
    round_rows(acc + rows * D, out->dx, rows * D);
    for (int s = 0; s < units; s++) {
        row_f64(in->WuT, harness_sample_row(F, s), lut, bits, uw + s * D);
        row_f64(in->Wd, harness_sample_row(F, s), lut, bits, uw + (units + s) * D);
    }
    memset(acc, 0, sizeof *acc * (size_t)n_acc);
    unit_rows(in, lut, uw, uw + units * D, acc, w, dy, bits, out);
    round_rows(acc, out->dwg, units * D);
    round_rows(acc + units * D, out->dwu, units * D);
    round_rows(acc + 2 * units * D, out->dwd, units * D);
done:
    free(xt);
    free(dy);
    free(acc);
    free(w);
    free(uw);
    free(bits);
    if (st != SJ_OK) hybrid_step_sample_free(out);
    return st;
}
