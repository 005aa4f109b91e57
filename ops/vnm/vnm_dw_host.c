/* vnm_dw_host.c: the sampled weight gradient dW = dY . X^T on the host, only at the slots W's
 * compressed form keeps, written straight into W's value layout (ops/vnm/vnm_format.h), so an
 * optimizer can update W's values in place: the reference of templates/vnm_dw.lua. A slot is
 * kept whether or not its value is zero (a row with fewer than 2 non-zeros in a block keeps
 * zeros), so the gradient of every slot the format carries is there; slots of padding rows and
 * padding columns get 0 (what the compressor stores there). Each value is the sum over the
 * tokens, in order, of dY[r][t] * X[c][t] in fp64, rounded at the end. */
#include "ops/vnm/vnm_format.h"
#include "core/error.h"
#include "tuner/harness.h"

#include <string.h>

sj_status sj_vnm_dw_host(const sj_vnm_host *W, const void *dY, const void *X, int64_t tokens, sj_dtype out_dtype,
                         void *dW_values)
{
    if (!W || !W->values || !W->meta || !W->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dw_host: W or its arrays are NULL");
    const sj_vnm_layout *l = &W->layout;
    sj_status st = vnm_layout_check(l, "sj_vnm_dw_host");
    if (st != SJ_OK) return st;
    if (!dY || !X || !dW_values) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dw_host: dY, X or dW_values is NULL");
    if (tokens < 1 || tokens > ((int64_t)1 << 30))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dw_host: tokens = %lld: expected 1..2^30", (long long)tokens);
    if (!sj_dtype_size(out_dtype))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_dw_host: out_dtype = %d: expected f16, bf16 or f32", (int)out_dtype);
    const uint16_t *dy = dY, *x = X;
    const int64_t rp = vnm_rows_padded(l), gp = vnm_groups_padded(l);
    for (int64_t r = 0; r < rp; r++)
        for (int64_t g = 0; g < gp; g++)
            for (int h = 0; h < 2; h++) {
                double s = 0.0;
                int32_t c = r < l->rows && g < l->groups ? vnm_slot_column(l, W->meta, W->index, r, g, h) : -1;
                for (int64_t t = 0; c >= 0 && t < tokens; t++)
                    s += harness_16_to_f64(l->dtype, dy[r * tokens + t]) * harness_16_to_f64(l->dtype, x[c * tokens + t]);
                size_t i = vnm_value_at(l, r, g, h);
                if (out_dtype == SJ_DTYPE_F32) ((float *)dW_values)[i] = (float)s;
                else ((uint16_t *)dW_values)[i] = harness_f32_to_16(out_dtype, (float)s);
            }
    return SJ_OK;
}
