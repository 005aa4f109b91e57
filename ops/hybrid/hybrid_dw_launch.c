/* hybrid_dw_launch.c: the weight gradients' launch sequence, which sj_hybrid_ffn_dw and the
 * hybrid-ffn-dw harness share: the transpose of H's pairs into per-unit token lists in the
 * caller's workspace (templates/hybrid_transpose.lua, a kernel per stage, after the bitmaps are
 * zeroed on the stream), then the gradient kernel; for a BUSY > 0 config (not the default) the
 * busy units' stages and their two dense GEMMs around it, in the busy buffers after the
 * transpose's in the same workspace. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdio.h>

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

/* C = A . B for rows busy coefficient rows over the tokens (B: X or dY, tokens x d_model), fp32
 * accumulation, out in the gradients' dtype: the gemm op's kernel for the shape. */
static sj_status busy_gemm(sj_context *ctx, const sj_problem *dw, int64_t rows, sj_devptr A, sj_devptr B, sj_devptr C,
                           void *stream)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, dw->dtype, rows, dw->n, dw->m);
    p.out_dtype = dw->out_dtype;
    const loaded_kernel *k;
    sj_status st = rt_kernel_for(ctx, &p, &k);
    if (st != SJ_OK)
        return error_prefix(st, "the busy units' GEMM (%lld x %lld over %lld tokens)", (long long)rows, (long long)dw->n,
                            (long long)dw->m);
    int m = (int)rows, n = (int)dw->n, kk = (int)dw->m;
    void *args[] = { &A, &B, &C, &m, &n, &kk };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

/* One launch's pointers and R (the kernel's ABI in order, then slot_of), which the transpose's,
 * the kernel's and the busy units' argument arrays point into. */
typedef struct dw_args {
    sj_devptr X, dY, values, owner, backup, counter, uv, ub, dgv, dgb, duv, dub, start, list, dwg, dwu, dwd;
    int r;
    sj_devptr slot_of;
} dw_args;

/* A BUSY > 0 config's sequence after the transpose, in buffers b at busy: the selection (into
 * a->slot_of, which kernel_args point at), the scatter of the busy units' coefficients into A
 * (zeroed first), the kernel k (skipping them), the two GEMMs into C and the copy of C's rows to
 * the gradients. */
static sj_status busy_sequence(sj_context *ctx, const loaded_kernel *k, const sj_hybrid_layout *l, dw_args *a,
                               void **kernel_args, size_t n_kernel_args, int capacity, sj_devptr busy,
                               const hybrid_dw_busy_ws *b, void *stream)
{
    const sj_problem *p = &k->problem;
    const size_t in_size = sj_dtype_size(p->dtype), out_size = sj_dtype_size(p->out_dtype);
    sj_devptr unit_of = busy + b->unit_of, A = busy + b->a, C = busy + b->c;
    a->slot_of = busy + b->slot_of;
    int row_words = (int)(p->n * (int64_t)out_size / 16);
    void *select[] = { &a->start, &a->slot_of, &unit_of, &capacity };
    void *scatter[] = { &a->values, &a->owner, &a->backup, &a->uv, &a->ub, &a->dgv, &a->dgb, &a->duv, &a->dub,
                        &a->start, &a->list, &unit_of, &A, &capacity };
    void *copy[] = { &unit_of, &C, &a->dwg, &a->dwu, &a->dwd, &capacity, &row_words };
    /* the scatter writes only the busy units' active tokens into A: the rest must be zeros */
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)A, 0, b->a_bytes / 4, (CUstream)stream), "zeroing the busy coefficients");
    sj_status st;
    if ((st = transpose_stage(ctx, l, 4, RT_ARGS(select), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 5, RT_ARGS(scatter), stream)) != SJ_OK ||
        (st = rt_launch(ctx, k, kernel_args, n_kernel_args, stream)) != SJ_OK ||
        (st = busy_gemm(ctx, p, 2 * (int64_t)capacity, A, a->X, C, stream)) != SJ_OK ||
        (st = busy_gemm(ctx, p, capacity, A + 2 * (size_t)capacity * (size_t)p->m * in_size, a->dY,
                        C + 2 * (size_t)capacity * (size_t)p->n * out_size, stream)) != SJ_OK)
        return st;
    return transpose_stage(ctx, l, 6, RT_ARGS(copy), stream);
}

sj_status hybrid_ffn_dw_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr X, sj_devptr dY,
                               const sj_hybrid_device *H, const hybrid_saved_u *u, const hybrid_grads *g,
                               const hybrid_weight_grads *out, sj_devptr workspace, const hybrid_dw_ws *w,
                               void *stream)
{
    const sj_hybrid_layout *l = &H->layout;
    dw_args a = { X, dY, H->values, H->owner, H->backup, H->counter, u->values, u->backup, g->dg_values, g->dg_backup,
                  g->du_values, g->du_backup, workspace + w->start, workspace + w->list, out->dWgT, out->dWuT,
                  out->dWd, (int)l->backup_rows, 0 };
    sj_devptr bits = workspace + w->bits, wpre = workspace + w->wpre, columns = H->columns, nnz = H->nnz,
              slot = H->slot;
    int capacity; /* BUSY: the busy units' slots (0: none) */
    sj_status st = hybrid_config_value(k->config, "BUSY", &capacity);
    if (st != SJ_OK) return st;
    /* the marks are ORed into zeroed bitmaps; the other arrays are written whole before read */
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)bits, 0, (size_t)w->words, (CUstream)stream), "zeroing the token bitmaps");
    void *pairs[] = { &columns, &nnz, &slot, &a.owner, &a.backup, &a.counter, &bits, &wpre, &a.start, &a.list, &a.r };
    void *count[] = { &bits, &wpre, &a.start };
    void *scan[] = { &a.start };
    if ((st = transpose_stage(ctx, l, 0, RT_ARGS(pairs), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 1, RT_ARGS(count), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 2, RT_ARGS(scan), stream)) != SJ_OK ||
        (st = transpose_stage(ctx, l, 3, RT_ARGS(pairs), stream)) != SJ_OK)
        return st;
    /* BUSY = 0's kernel takes the first 18 */
    void *args[] = { &a.X, &a.dY, &a.values, &a.owner, &a.backup, &a.counter, &a.uv, &a.ub, &a.dgv, &a.dgb, &a.duv,
                     &a.dub, &a.start, &a.list, &a.dwg, &a.dwu, &a.dwd, &a.r, &a.slot_of };
    if (!capacity) return rt_launch(ctx, k, RT_ARGS(args), stream);
    const sj_problem *p = &k->problem;
    hybrid_dw_busy_ws b;
    hybrid_dw_busy_plan(p->m, p->d_ff, p->n, capacity, sj_dtype_size(p->dtype), sj_dtype_size(p->out_dtype), &b);
    return busy_sequence(ctx, k, l, &a, RT_ARGS(args), capacity, workspace + w->total, &b, stream);
}
