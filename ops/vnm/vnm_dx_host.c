/* vnm_dx_host.c: the exact input gradient dX = W^T . dY on the host, from W's compressed form
 * (the reference of the device dX: dense W^T on tensor cores, and the yardstick of the
 * double-pruned one). It walks the kept slots, not a dense W: every kept value v = W[r][c] adds
 * v * dY[r][:] to dX[c][:], rows in order, in fp64; dX is rounded once at the end. */
#include "ops/vnm/vnm_format.h"
#include "core/error.h"
#include "tuner/harness.h"

#include <stdlib.h>
#include <string.h>

/* Stores x (already rounded to f32 where out is f32) as element i of out. */
static void store(sj_dtype dt, void *out, size_t i, double x)
{
    if (dt == SJ_DTYPE_F32) ((float *)out)[i] = (float)x;
    else ((uint16_t *)out)[i] = harness_f32_to_16(dt, (float)x);
}

sj_status sj_vnm_dx_host(const sj_vnm_host *W, const void *dY, int64_t tokens, sj_dtype out_dtype, void *dX)
{
    if (!W || !W->values || !W->meta || !W->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dx_host: W or its arrays are NULL");
    const sj_vnm_layout *l = &W->layout;
    sj_status st = vnm_layout_check(l, "sj_vnm_dx_host");
    if (st != SJ_OK) return st;
    if (!dY || !dX) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dx_host: dY or dX is NULL");
    if (tokens < 1 || tokens > ((int64_t)1 << 30))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dx_host: tokens = %lld: expected 1..2^30", (long long)tokens);
    if (!sj_dtype_size(out_dtype))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dx_host: out_dtype = %d: expected f16, bf16 or f32", (int)out_dtype);
    double *acc = calloc((size_t)(l->cols * tokens), sizeof *acc);
    if (!acc) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_vnm_dx_host: cannot allocate %lld x %lld doubles",
                               (long long)l->cols, (long long)tokens);
    const uint16_t *dy = dY;
    for (int64_t r = 0; r < l->rows; r++)
        for (int64_t g = 0; g < l->groups; g++)
            for (int h = 0; h < 2; h++) {
                int32_t c = vnm_slot_column(l, W->meta, W->index, r, g, h);
                double v = harness_16_to_f64(l->dtype, W->values[vnm_value_at(l, r, g, h)]);
                if (c < 0 || v == 0.0) continue;
                double *d = acc + (int64_t)c * tokens;
                for (int64_t t = 0; t < tokens; t++) d[t] += v * harness_16_to_f64(l->dtype, dy[r * tokens + t]);
            }
    for (size_t i = 0; i < (size_t)(l->cols * tokens); i++) store(out_dtype, dX, i, acc[i]);
    free(acc);
    return SJ_OK;
}
