/* vnm_step_reference.c: the sampled fp64 reference of one V:N:M training step
 * (vnm_step_reference.h). It walks W's compressed form slot by slot (vnm_format.h) and makes
 * two passes over the rows of the generated inputs, each row generated once and only when a
 * sampled output reads it:
 *   - over X's rows c: every sampled row r of Y adds W[r][c] X[c][:], and every kept slot
 *     (r, c) of a sampled row gets dW = dY[r][:] . X[c][:] (kept slots holding zero included,
 *     as sj_vnm_dw_host does);
 *   - over dY's rows r: every sampled row c of dX adds WT[c][r] dY[r][:], where WT's row c is
 *     column c of the masked W (exact) or row c of the double-pruned copy.
 * The double-pruned row is sj_vnm_double_prune_host's rule applied to the one block of V rows of
 * W^T that holds it: sj_vnm_compress decides each block of V rows from that block alone, so
 * compressing W^T's rows c0 .. c0 + V - 1 (the last block shorter) by magnitude gives WT2's
 * rows there, without the whole W^T (tests/test_vnm_step_reference.c checks it against the
 * whole). The check of a shape of 28672 x 8192 over 8192 tokens costs a few fp64 passes of
 * 16 rows; nothing of it was run on a GPU machine yet. */
#include "ops/vnm/vnm_step_reference.h"
#include "ops/vnm/vnm_format.h"
#include "core/error.h"
#include "tuner/harness.h"

#include <stdlib.h>
#include <string.h>

void vnm_step_sample_free(vnm_step_sample *s)
{
    if (!s) return;
    free(s->y);
    free(s->dx);
    free(s->dw);
    memset(s, 0, sizeof *s);
}

/* WT's row c as dense weights over W's rows: column c of the masked W. */
static void exact_row(const sj_vnm_host *W, int64_t c, double *row)
{
    const sj_vnm_layout *l = &W->layout;
    const float *lut = harness_lut16(l->dtype);
    for (int64_t r = 0; r < l->rows; r++)
        for (int h = 0; h < 2; h++)
            if (vnm_slot_column(l, W->meta, W->index, r, c / l->m, h) == c)
                row[r] = lut[W->values[vnm_value_at(l, r, c / l->m, h)]];
}

/* WT2's row c as dense weights over W's rows: the block of W^T's rows that holds c, taken from
 * W's kept slots and compressed by magnitude on its own. */
static sj_status double_pruned_row(const sj_vnm_host *W, int64_t c, double *row)
{
    const sj_vnm_layout *l = &W->layout;
    const float *lut = harness_lut16(l->dtype);
    const int64_t c0 = c / l->v * l->v, height = l->cols - c0 < l->v ? l->cols - c0 : l->v;
    uint16_t *block = calloc((size_t)(height * l->rows), sizeof *block); /* W^T's rows c0 .. c0 + height - 1 */
    if (!block)
        return error_set(SJ_ERR_OUT_OF_MEMORY, "vnm_step_reference: no host memory for a %lld x %lld block of W^T",
                         (long long)height, (long long)l->rows);
    for (int64_t r = 0; r < l->rows; r++)
        for (int64_t g = c0 / l->m; g <= (c0 + height - 1) / l->m; g++)
            for (int h = 0; h < 2; h++) {
                int32_t col = vnm_slot_column(l, W->meta, W->index, r, g, h);
                if (col >= c0 && col < c0 + height) block[(col - c0) * l->rows + r] = W->values[vnm_value_at(l, r, g, h)];
            }
    sj_vnm_layout bl;
    sj_vnm_host pruned;
    memset(&pruned, 0, sizeof pruned);
    sj_status st = sj_vnm_layout_init(&bl, l->dtype, l->v, l->n, l->m, height, l->rows);
    if (st == SJ_OK) st = sj_vnm_compress(&bl, block, l->rows, SJ_VNM_PRUNE_L2, &pruned);
    for (int64_t g = 0; st == SJ_OK && g < bl.groups; g++)
        for (int h = 0; h < 2; h++) {
            int32_t r = vnm_slot_column(&bl, pruned.meta, pruned.index, c - c0, g, h);
            if (r >= 0) row[r] = lut[pruned.values[vnm_value_at(&bl, c - c0, g, h)]];
        }
    sj_vnm_host_free(&pruned);
    free(block);
    return st == SJ_OK ? SJ_OK : error_prefix(st, "vnm_step_reference (the double-pruned row %lld)", (long long)c);
}

/* Row r of m as doubles. */
static void generated_row(const crng_matrix *m, int64_t r, uint16_t *bits, double *out)
{
    const float *lut = harness_lut16(m->dtype);
    crng_matrix_row(m, r, bits);
    for (int64_t t = 0; t < m->cols; t++) out[t] = lut[bits[t]];
}

/* Y's and dW's sampled rows in one pass over X's rows. */
static sj_status forward_and_dw(const sj_vnm_host *W, const crng_matrix *X, const crng_matrix *dY, vnm_step_sample *s)
{
    const sj_vnm_layout *l = &W->layout;
    const float *lut = harness_lut16(l->dtype);
    const int64_t T = s->tokens, in = l->cols;
    int32_t *slot_of = malloc(sizeof *slot_of * (size_t)(s->y_rows * in)); /* [i][c]: the slot of row i at c, or -1 */
    double *dy = malloc(sizeof *dy * (size_t)(s->y_rows * T)), *y = calloc((size_t)(s->y_rows * T), sizeof *y);
    double *x = malloc(sizeof *x * (size_t)T);
    uint16_t *bits = malloc(sizeof *bits * (size_t)T);
    sj_status st = SJ_OK;
    if (!slot_of || !dy || !y || !x || !bits) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "vnm_step_reference: no host memory for Y's and dW's sampled rows");
        goto done;
    }
    for (int i = 0; i < s->y_rows; i++) {
        int64_t r = harness_sample_row(l->rows, i);
        for (int64_t c = 0; c < in; c++) slot_of[i * in + c] = -1;
        for (int64_t g = 0; g < l->groups; g++)
            for (int h = 0; h < 2; h++) {
                int32_t c = vnm_slot_column(l, W->meta, W->index, r, g, h);
                if (c >= 0) slot_of[i * in + c] = (int32_t)(2 * g + h);
            }
        generated_row(dY, r, bits, dy + i * T);
    }
    for (int64_t c = 0; c < in; c++) {
        int read = 0;
        for (int i = 0; i < s->y_rows && !read; i++) read = slot_of[i * in + c] >= 0;
        if (!read) continue;
        generated_row(X, c, bits, x);
        for (int i = 0; i < s->y_rows; i++) {
            int32_t slot = slot_of[i * in + c];
            if (slot < 0) continue;
            double w = lut[W->values[vnm_value_at(l, harness_sample_row(l->rows, i), slot / 2, slot % 2)]], dot = 0;
            for (int64_t t = 0; t < T; t++) y[i * T + t] += w * x[t];
            for (int64_t t = 0; t < T; t++) dot += dy[i * T + t] * x[t];
            s->dw[i * s->dw_slots + slot] = (float)dot;
        }
    }
    for (int64_t e = 0; e < s->y_rows * T; e++) s->y[e] = (float)y[e];
done:
    free(slot_of);
    free(dy);
    free(y);
    free(x);
    free(bits);
    return st;
}

/* dX's sampled rows in one pass over dY's rows. */
static sj_status input_gradient(const sj_vnm_host *W, const crng_matrix *dY, vnm_dx_rule rule, vnm_step_sample *s)
{
    const sj_vnm_layout *l = &W->layout;
    const int64_t T = s->tokens, out = l->rows;
    double *wt = calloc((size_t)(s->dx_rows * out), sizeof *wt); /* [j][r]: WT's row of sampled row j */
    double *dx = calloc((size_t)(s->dx_rows * T), sizeof *dx), *dy = malloc(sizeof *dy * (size_t)T);
    uint16_t *bits = malloc(sizeof *bits * (size_t)T);
    sj_status st = SJ_OK;
    if (!wt || !dx || !dy || !bits) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "vnm_step_reference: no host memory for dX's sampled rows");
        goto done;
    }
    for (int j = 0; j < s->dx_rows && st == SJ_OK; j++) {
        int64_t c = harness_sample_row(l->cols, j);
        if (rule == VNM_DX_EXACT) exact_row(W, c, wt + j * out);
        else st = double_pruned_row(W, c, wt + j * out);
    }
    for (int64_t r = 0; r < out && st == SJ_OK; r++) {
        int read = 0;
        for (int j = 0; j < s->dx_rows && !read; j++) read = wt[j * out + r] != 0;
        if (!read) continue;
        generated_row(dY, r, bits, dy);
        for (int j = 0; j < s->dx_rows; j++) {
            double w = wt[j * out + r];
            if (w != 0)
                for (int64_t t = 0; t < T; t++) dx[j * T + t] += w * dy[t];
        }
    }
    for (int64_t e = 0; st == SJ_OK && e < s->dx_rows * T; e++) s->dx[e] = (float)dx[e];
done:
    free(wt);
    free(dx);
    free(dy);
    free(bits);
    return st;
}

/* SJ_OK when m is a rows x cols matrix of dtype; else an error naming it (what). */
static sj_status check_input(const crng_matrix *m, const char *what, sj_dtype dtype, int64_t rows, int64_t cols)
{
    if (!m) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: %s is NULL", what);
    if (m->dtype != dtype || m->rows != rows || m->cols != cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: %s is %s %lld x %lld, expected %s %lld x %lld", what,
                         sj_dtype_name(m->dtype) ? sj_dtype_name(m->dtype) : "no dtype", (long long)m->rows,
                         (long long)m->cols, sj_dtype_name(dtype), (long long)rows, (long long)cols);
    return SJ_OK;
}

/* SJ_OK when W and rule can be walked; out zeroed first. */
static sj_status check_w_rule(const sj_vnm_host *W, vnm_dx_rule rule, vnm_step_sample *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: out is NULL");
    memset(out, 0, sizeof *out);
    if (!W || !W->values || !W->meta || !W->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: W or its arrays are NULL");
    sj_status st = vnm_layout_check(&W->layout, "vnm_step_reference");
    if (st != SJ_OK) return st;
    if (rule != VNM_DX_DOUBLE_PRUNED && rule != VNM_DX_EXACT)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: rule %d: expected double-pruned (%d) or exact (%d)",
                         (int)rule, (int)VNM_DX_DOUBLE_PRUNED, (int)VNM_DX_EXACT);
    return SJ_OK;
}

sj_status vnm_step_reference_dx(const sj_vnm_host *W, const crng_matrix *dY, vnm_dx_rule rule, vnm_step_sample *out)
{
    sj_status st = check_w_rule(W, rule, out);
    if (st != SJ_OK) return st;
    const sj_vnm_layout *l = &W->layout;
    if (!dY || dY->cols < 1) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: dY is NULL or has no tokens");
    if ((st = check_input(dY, "dY", l->dtype, l->rows, dY->cols)) != SJ_OK) return st;
    out->dx_rows = harness_sample_count(l->cols);
    out->tokens = dY->cols;
    if (!(out->dx = malloc(sizeof *out->dx * (size_t)(out->dx_rows * out->tokens))))
        return error_set(SJ_ERR_OUT_OF_MEMORY, "vnm_step_reference: no host memory for dX's sampled rows");
    if ((st = input_gradient(W, dY, rule, out)) != SJ_OK) vnm_step_sample_free(out);
    return st;
}

sj_status vnm_step_reference(const sj_vnm_host *W, const crng_matrix *X, const crng_matrix *dY, vnm_dx_rule rule,
                             vnm_step_sample *out)
{
    sj_status st = check_w_rule(W, rule, out);
    if (st != SJ_OK) return st;
    const sj_vnm_layout *l = &W->layout;
    if (!X || X->cols < 1) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_step_reference: X is NULL or has no tokens");
    const int64_t T = X->cols;
    if ((st = check_input(X, "X", l->dtype, l->cols, T)) != SJ_OK || (st = check_input(dY, "dY", l->dtype, l->rows, T)) != SJ_OK)
        return st;
    out->y_rows = harness_sample_count(l->rows);
    out->dx_rows = harness_sample_count(l->cols);
    out->tokens = T;
    out->dw_slots = 2 * l->groups;
    out->y = malloc(sizeof *out->y * (size_t)(out->y_rows * T));
    out->dx = malloc(sizeof *out->dx * (size_t)(out->dx_rows * T));
    out->dw = calloc((size_t)(out->y_rows * out->dw_slots), sizeof *out->dw);
    if (!out->y || !out->dx || !out->dw)
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "vnm_step_reference: no host memory for the sampled rows");
    if (st == SJ_OK) st = forward_and_dw(W, X, dY, out);
    if (st == SJ_OK) st = input_gradient(W, dY, rule, out);
    if (st != SJ_OK) vnm_step_sample_free(out);
    return st;
}
