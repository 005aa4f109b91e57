/* hybrid_dw_launch.c: the weight gradients' launch sequence, which sj_hybrid_ffn_dw and the
 * hybrid-ffn-dw harness share: the workspace plan of the transpose (sj_hybrid_ffn_dw_workspace),
 * the transpose of H's pairs into per-unit token lists (templates/hybrid_transpose.lua, a kernel
 * per stage, after the bitmaps are zeroed on the stream), then the gradient kernel. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdint.h>
#include <stdio.h>

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

void hybrid_dw_plan(int64_t rows, int64_t cols, int width, int64_t backup_rows, hybrid_dw_ws *out)
{
    const int64_t words = cols * ((rows + 31) / 32), dense = rows * cols,
                  held = rows * width + backup_rows * (cols - width);
    out->words = words;
    out->pairs = held < dense ? held : dense;
    out->bits = 0;
    out->wpre = align16((size_t)words * 4);
    out->start = out->wpre + align16((size_t)words * 4);
    out->list = out->start + align16((size_t)(cols + 1) * 4);
    out->total = out->list + align16((size_t)out->pairs * 4);
}

sj_status sj_hybrid_ffn_dw_workspace(const sj_hybrid_layout *l, size_t *bytes)
{
    sj_status st = hybrid_layout_check(l, "sj_hybrid_ffn_dw_workspace");
    if (st != SJ_OK) return st;
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_ffn_dw_workspace: bytes is NULL");
    /* a list entry is a 32-bit position (ELL slot or backup position), a start a 32-bit rank */
    const int64_t positions = l->rows * l->width + l->backup_rows * l->cols;
    if (positions > (int64_t)UINT32_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_ffn_dw_workspace: rows x W + backup_rows x cols = %lld "
                         "positions; the weight gradients index at most 2^32 - 1", (long long)positions);
    hybrid_dw_ws w;
    hybrid_dw_plan(l->rows, l->cols, l->width, l->backup_rows, &w);
    if (w.pairs > INT32_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_ffn_dw_workspace: the layout holds up to %lld pairs; the "
                         "weight gradients rank at most 2^31 - 1", (long long)w.pairs);
    *bytes = w.total;
    return SJ_OK;
}

/* One stage of the transpose, keyed on the matrix's shape (the law unspecified: one compile). */
static sj_status transpose_stage(sj_context *ctx, const sj_hybrid_layout *l, int stage, void **args, size_t n_args,
                                 void *stream)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_HYBRID_TRANSPOSE, l->dtype, l->rows, l->cols, 1);
    p.twell_tile = (int)l->cols;
    p.twell_capacity = l->width;
    char config[16];
    snprintf(config, sizeof config, "STAGE=%d", stage);
    const loaded_kernel *k;
    sj_status st = rt_kernel_with_config(ctx, &p, NULL, config, &k);
    if (st != SJ_OK) return error_prefix(st, "the hybrid transpose's %s", config);
    return rt_launch(ctx, k, args, n_args, stream);
}

sj_status hybrid_ffn_dw_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr X, sj_devptr dY,
                               const sj_hybrid_device *H, const hybrid_saved_u *u, const hybrid_grads *g,
                               const hybrid_weight_grads *out, sj_devptr workspace, const hybrid_dw_ws *w, void *stream)
{
    const sj_hybrid_layout *l = &H->layout;
    int r = (int)l->backup_rows;
    sj_devptr bits = workspace + w->bits, wpre = workspace + w->wpre, start = workspace + w->start,
              list = workspace + w->list, values = H->values, columns = H->columns, nnz = H->nnz, slot = H->slot,
              owner = H->owner, backup = H->backup, counter = H->counter;
    /* the marks are ORed into zeroed bitmaps; the other arrays are written whole before read */
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)bits, 0, (size_t)w->words, (CUstream)stream), "zeroing the token bitmaps");
    void *pairs[] = { &columns, &nnz, &slot, &owner, &backup, &counter, &bits, &wpre, &start, &list, &r };
    void *count[] = { &bits, &wpre, &start };
    void *scan[] = { &start };
    sj_status st;
    if ((st = transpose_stage(ctx, l, 0, RT_ARGS(pairs), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 1, RT_ARGS(count), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 2, RT_ARGS(scan), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 3, RT_ARGS(pairs), stream)) != SJ_OK)
        return st;
    sj_devptr uv = u->values, ub = u->backup, dgv = g->dg_values, dgb = g->dg_backup, duv = g->du_values,
              dub = g->du_backup, dwg = out->dWgT, dwu = out->dWuT, dwd = out->dWd;
    void *args[] = { &X, &dY, &values, &owner, &backup, &counter, &uv, &ub, &dgv, &dgb, &duv, &dub, &start, &list,
                     &dwg, &dwu, &dwd, &r };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}
