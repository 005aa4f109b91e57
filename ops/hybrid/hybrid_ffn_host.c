/* hybrid_ffn_host.c: the fp64 host reference of one training step of the ReLU FFN block
 * (sj_hybrid_ffn_step_host), in the sparse formulation the device products follow: the gate is
 * the one dense product; per token the active units (g > 0) are listed once, and the up product,
 * the down product, the sampled dh, dX and the three weight gradients visit those only. Summation
 * runs over d_model in order for each dot product and over the tokens in order for the weight
 * gradients. */
#include "core/error.h"
#include "tuner/harness.h"

#include <stdlib.h>
#include <string.h>

/* One active unit of the current token: its index and gate value. */
typedef struct active_unit {
    int64_t j;
    double g;
} active_unit;

static double dot16(sj_dtype dt, const uint16_t *a, const uint16_t *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += harness_16_to_f64(dt, a[i]) * harness_16_to_f64(dt, b[i]);
    return s;
}

/* acc[i] += w * v[i] for 16-bit v */
static void axpy16(sj_dtype dt, double w, const uint16_t *v, double *acc, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] += w * harness_16_to_f64(dt, v[i]);
}

sj_status sj_hybrid_ffn_step_host(sj_dtype dt, int64_t tokens, int64_t d_model, int64_t d_ff, const void *X,
                                  const void *WgT, const void *WuT, const void *Wd, const void *dY,
                                  sj_hybrid_ffn_step *out)
{
    const char *what = "sj_hybrid_ffn_step_host";
    if (dt != SJ_DTYPE_F16 && dt != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: dtype %d: expected f16 or bf16", what, (int)dt);
    const int64_t limit = (int64_t)1 << 30;
    if (tokens < 1 || tokens > limit || d_model < 1 || d_model > limit || d_ff < 1 || d_ff > limit)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: tokens = %lld, d_model = %lld, d_ff = %lld: each expected 1..2^30",
                         what, (long long)tokens, (long long)d_model, (long long)d_ff);
    if (!X || !WgT || !WuT || !Wd || !dY || !out)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: X, WgT, WuT, Wd, dY and out must not be NULL", what);
    if (!out->Y || !out->dX || !out->dWgT || !out->dWuT || !out->dWd)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: out->Y, dX, dWgT, dWuT and dWd must not be NULL", what);
    active_unit *act = malloc(sizeof *act * (size_t)d_ff);
    if (!act) return error_set(SJ_ERR_OUT_OF_MEMORY, "%s: out of memory (%lld active units)", what, (long long)d_ff);
    const uint16_t *x = X, *wg = WgT, *wu = WuT, *wd = Wd, *dy = dY;
    const size_t tok_bytes = sizeof(double) * (size_t)(tokens * d_model), w_bytes = sizeof(double) * (size_t)(d_ff * d_model);
    memset(out->Y, 0, tok_bytes);
    memset(out->dX, 0, tok_bytes);
    memset(out->dWgT, 0, w_bytes);
    memset(out->dWuT, 0, w_bytes);
    memset(out->dWd, 0, w_bytes);
    out->active = 0;
    for (int64_t t = 0; t < tokens; t++) {
        const uint16_t *xt = x + t * d_model, *dyt = dy + t * d_model;
        int64_t n = 0;
        for (int64_t j = 0; j < d_ff; j++) { /* the gate: the one dense product */
            double g = dot16(dt, xt, wg + j * d_model, d_model);
            if (g > 0) act[n++] = (active_unit){ j, g };
        }
        out->active += n;
        double *yt = out->Y + t * d_model, *dxt = out->dX + t * d_model;
        for (int64_t i = 0; i < n; i++) {
            const int64_t j = act[i].j;
            const double g = act[i].g, u = dot16(dt, xt, wu + j * d_model, d_model), h = g * u;
            axpy16(dt, h, wd + j * d_model, yt, d_model);              /* Y[t] += h Wd[j] */
            const double dh = dot16(dt, dyt, wd + j * d_model, d_model); /* sampled: active pairs only */
            const double du = dh * g, dg = dh * u;                     /* relu'(g) = 1 here */
            axpy16(dt, dg, wg + j * d_model, dxt, d_model);
            axpy16(dt, du, wu + j * d_model, dxt, d_model);
            axpy16(dt, dg, xt, out->dWgT + j * d_model, d_model);
            axpy16(dt, du, xt, out->dWuT + j * d_model, d_model);
            axpy16(dt, h, dyt, out->dWd + j * d_model, d_model);
        }
    }
    free(act);
    return SJ_OK;
}
