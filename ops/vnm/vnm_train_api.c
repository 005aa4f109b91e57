/* vnm_train_api.c: the device entry points of V:N:M training (docs/training.md): the sampled
 * weight gradient (sj_vnm_dw, templates/vnm_dw.lua), the exact input gradient from W's compressed
 * form (sj_vnm_dx, templates/vnm_dx.lua; a candidate), the dense masked W^T (sj_vnm_transpose,
 * templates/vnm_transpose.lua), and on top of it the double-pruned copy for dX
 * (sj_vnm_double_prune: W^T, then the existing compressor by magnitude) and the exact dX
 * (sj_vnm_dx_exact: W^T, then the dense tensor-core gemm). Every call takes the caller's arrays
 * and workspace, allocates nothing and never waits on the stream, so a training step can be
 * captured in a CUDA graph once its kernels are loaded. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/vnm/vnm.h"
#include "ops/vnm/vnm_format.h"

#include <string.h>

/* W on the device: a layout made by sj_vnm_layout_init and aligned arrays (values optional). */
static sj_status check_w(const sj_vnm_device *W, int need_values, const char *what)
{
    if (!W) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: W is NULL", what);
    sj_status st = vnm_layout_check(&W->layout, what);
    if (st != SJ_OK) return st;
    if ((need_values && (st = rt_check_ptr("W.values", W->values, 16)) != SJ_OK) ||
        (st = rt_check_ptr("W.meta", W->meta, 16)) != SJ_OK || (st = rt_check_ptr("W.index", W->index, 16)) != SJ_OK)
        return error_prefix(st, "%s", what);
    return SJ_OK;
}

/* The problem of op (vnm-dw or vnm-dx) for W of layout l over tokens: m = rows, n = cols, k = tokens. */
static sj_status training_problem(sj_op op, const sj_vnm_layout *l, int64_t tokens, sj_dtype out_dtype, sj_problem *out,
                                  const char *what)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: out is NULL", what);
    sj_status st = vnm_layout_check(l, what);
    if (st != SJ_OK) return st;
    sj_problem_init(out, op, l->dtype, l->rows, l->cols, tokens);
    out->out_dtype = out_dtype;
    out->vnm_v = l->v;
    out->vnm_n = l->n;
    out->vnm_m = l->m;
    return sj_problem_validate(out);
}

/* The common checks of sj_vnm_dw and sj_vnm_dx: a valid problem of op that matches W (its
 * metadata and index, and its values where need_values). */
static sj_status check_training_call(sj_context *ctx, const sj_problem *p, sj_op op, const sj_vnm_device *W, int need_values,
                                     const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != op)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s, expected %s", what, sj_op_name(p->op), sj_op_name(op));
    if ((st = check_w(W, need_values, what)) != SJ_OK) return st;
    const sj_vnm_layout *l = &W->layout;
    if (p->dtype != l->dtype || p->m != l->rows || p->n != l->cols || p->vnm_v != l->v || p->vnm_n != l->n ||
        p->vnm_m != l->m)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "%s: problem (%s, m=%lld, n=%lld, V:N:M %d:%d:%d) does not match W (%s, %lldx%lld, %d:%d:%d); "
                         "see %s_problem",
                         what, sj_dtype_name(p->dtype), (long long)p->m, (long long)p->n, p->vnm_v, p->vnm_n, p->vnm_m,
                         sj_dtype_name(l->dtype), (long long)l->rows, (long long)l->cols, l->v, l->n, l->m, what);
    return SJ_OK;
}

sj_status sj_vnm_dw_problem(const sj_vnm_layout *l, int64_t tokens, sj_dtype out_dtype, sj_problem *out)
{
    return training_problem(SJ_OP_VNM_DW, l, tokens, out_dtype, out, "sj_vnm_dw_problem");
}

sj_status sj_vnm_dw(sj_context *ctx, const sj_problem *p, const sj_vnm_device *W, sj_devptr dY, sj_devptr X,
                    sj_devptr dW_values, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_dw";
    sj_status st = check_training_call(ctx, p, SJ_OP_VNM_DW, W, 0, what);
    if (st != SJ_OK) return st;
    if ((st = rt_check_ptr("dY", dY, 16)) != SJ_OK || (st = rt_check_ptr("X", X, 16)) != SJ_OK ||
        (st = rt_check_ptr("dW_values", dW_values, 16)) != SJ_OK)
        return error_prefix(st, "%s", what);
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    return vnm_dw_launch(ctx, k, p, dY, X, W->meta, W->index, dW_values, stream);
}

sj_status vnm_dw_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr dY, sj_devptr X,
                        sj_devptr meta, sj_devptr index, sj_devptr dW_values, void *stream)
{
    /* every config takes the descriptor (one ABI); TMA=1 reads dY through it (memoised: a
     * relaunch on the same dY encodes nothing) */
    tensor_map map_dy;
    sj_status st = rt_tensor_map_rows(ctx, &map_dy, dY, p->m, p->k, TMA_WGMMA, "sj_vnm_dw: TMA descriptor of dY");
    if (st != SJ_OK) return st;
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    void *args[] = { &dY, &X, &meta, &index, &dW_values, &m, &n, &kk, &map_dy };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_vnm_dx_problem(const sj_vnm_layout *l, int64_t tokens, sj_dtype out_dtype, sj_problem *out)
{
    return training_problem(SJ_OP_VNM_DX, l, tokens, out_dtype, out, "sj_vnm_dx_problem");
}

sj_status sj_vnm_dx(sj_context *ctx, const sj_problem *p, const sj_vnm_device *W, sj_devptr dY, sj_devptr dX, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_dx";
    sj_status st = check_training_call(ctx, p, SJ_OP_VNM_DX, W, 1, what);
    if (st != SJ_OK) return st;
    if ((st = rt_check_ptr("dY", dY, 16)) != SJ_OK || (st = rt_check_ptr("dX", dX, 16)) != SJ_OK)
        return error_prefix(st, "%s", what);
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    sj_devptr values = W->values, meta = W->meta, index = W->index;
    void *args[] = { &values, &meta, &index, &dY, &dX, &m, &n, &kk };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_vnm_transpose(sj_context *ctx, const sj_vnm_device *W, sj_devptr WT, int64_t ldt, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_transpose";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = check_w(W, 1, what);
    if (st != SJ_OK) return st;
    const sj_vnm_layout *l = &W->layout;
    if (ldt < l->rows)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ldt = %lld is less than W's rows = %lld (WT is cols x rows)", what,
                         (long long)ldt, (long long)l->rows);
    if ((st = rt_check_ptr("WT", WT, 2)) != SJ_OK) return error_prefix(st, "%s", what);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_VNM_TRANSPOSE, l->dtype, l->rows, 1, l->cols);
    p.vnm_v = l->v;
    p.vnm_n = l->n;
    p.vnm_m = l->m;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, &p, &k)) != SJ_OK) return error_prefix(st, "the V:N:M transpose kernel");
    long long ld = (long long)ldt;
    sj_devptr values = W->values, meta = W->meta, index = W->index;
    void *args[] = { &values, &meta, &index, &WT, &ld };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

/* The dense W^T's bytes, rounded to 16 so the compressor's word after it stays aligned. */
static size_t dense_t_bytes(const sj_vnm_layout *l) { return ((size_t)(l->rows * l->cols) * 2 + 15) & ~(size_t)15; }

sj_status sj_vnm_double_prune_workspace(const sj_vnm_layout *l, size_t *bytes)
{
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_double_prune_workspace: bytes is NULL");
    sj_status st = vnm_layout_check(l, "sj_vnm_double_prune_workspace");
    if (st != SJ_OK) return st;
    *bytes = dense_t_bytes(l) + 16;
    return SJ_OK;
}

sj_status sj_vnm_double_prune(sj_context *ctx, const sj_vnm_device *W, const sj_vnm_device *WT2, sj_devptr workspace,
                              size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_double_prune";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = check_w(W, 1, what);
    if (st != SJ_OK) return st;
    if (!WT2) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: WT2 is NULL", what);
    sj_vnm_layout lt;
    if ((st = sj_vnm_transpose_layout(&W->layout, &lt)) != SJ_OK) return st;
    if (memcmp(&lt, &WT2->layout, sizeof lt))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: WT2->layout is not W's transposed layout (see sj_vnm_transpose_layout)",
                         what);
    size_t need = dense_t_bytes(&W->layout) + 16;
    if ((st = rt_check_ptr("workspace", workspace, 16)) != SJ_OK) return error_prefix(st, "%s", what);
    if (workspace_bytes < need)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace_bytes = %zu, needs %zu (sj_vnm_double_prune_workspace)", what,
                         workspace_bytes, need);
    /* W^T dense at the start of the workspace, then the compressor's word. */
    if ((st = sj_vnm_transpose(ctx, W, workspace, W->layout.rows, stream)) != SJ_OK) return st;
    return sj_vnm_compress_device_ws(ctx, &lt, workspace, W->layout.rows, SJ_VNM_PRUNE_L2, WT2,
                                     workspace + dense_t_bytes(&W->layout), 16, stream);
}

sj_status sj_vnm_dx_exact(sj_context *ctx, const sj_vnm_device *W, sj_devptr WT, sj_devptr dY, sj_devptr dX, int64_t tokens,
                          sj_dtype out_dtype, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_dx_exact";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = check_w(W, 1, what);
    if (st != SJ_OK) return st;
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, W->layout.dtype, W->layout.cols, tokens, W->layout.rows);
    p.out_dtype = out_dtype;
    if ((st = sj_problem_validate(&p)) != SJ_OK) return error_prefix(st, "%s (the gemm of W^T . dY)", what);
    if ((st = rt_check_ptr("WT", WT, 16)) != SJ_OK) return error_prefix(st, "%s", what);
    if ((st = sj_vnm_transpose(ctx, W, WT, W->layout.rows, stream)) != SJ_OK) return st;
    return sj_gemm(ctx, &p, WT, dY, dX, stream);
}
