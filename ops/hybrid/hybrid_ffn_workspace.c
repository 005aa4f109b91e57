/* hybrid_ffn_workspace.c: the workspaces of the hybrid FFN ops (hybrid-ffn-fwd, -dx, -dw), which
 * always come from the caller: the plan of the dw's transpose (hybrid_dw_plan,
 * sj_hybrid_ffn_dw_workspace; ALGO=2's list and the busy units' buffers are planned beside their
 * host references), what a kernel of a config needs over a matrix's layout
 * (hybrid_ffn_workspace_of), the public query that resolves the kernel as the call will
 * (sj_hybrid_ffn_workspace), the entry points' check of the workspace they were given, and the
 * bound over every layout of a problem's shape and every config (hybrid_ffn_workspace_bound:
 * sj_workspace_size, through the descriptors in hybrid_op.c). */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdint.h>
#include <string.h>

void hybrid_dw_plan(int64_t rows, int64_t cols, int width, int64_t backup_rows, hybrid_dw_ws *out)
{
    const int64_t words = cols * ((rows + 31) / 32), dense = rows * cols,
                  held = rows * width + backup_rows * (cols - width);
    out->words = words;
    out->pairs = held < dense ? held : dense;
    out->bits = 0;
    out->wpre = hybrid_align16((size_t)words * 4);
    out->start = out->wpre + hybrid_align16((size_t)words * 4);
    out->list = out->start + hybrid_align16((size_t)(cols + 1) * 4);
    out->total = out->list + hybrid_align16((size_t)out->pairs * 4);
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

sj_status hybrid_config_value(const char *config, const char *name, int *value)
{
    gen_config c;
    sj_status st = gen_config_parse(config, &c);
    *value = 0;
    for (int i = 0; st == SJ_OK && i < c.n; i++)
        if (!strcmp(c.names[i], name)) *value = c.values[i];
    return st;
}

/* The bytes of a kernel of p whose config has ALGO = value (fwd, dx) or BUSY = value (dw), over a
 * matrix of p's shape with backup_rows backup rows. */
static size_t kernel_bytes(const sj_problem *p, int value, int64_t backup_rows)
{
    if (p->op == SJ_OP_HYBRID_FFN_DW) {
        hybrid_dw_ws w;
        hybrid_dw_plan(p->m, p->d_ff, p->twell_capacity, backup_rows, &w);
        if (!value) return w.total;
        hybrid_dw_busy_ws b;
        hybrid_dw_busy_plan(p->m, p->d_ff, p->n, value, sj_dtype_size(p->dtype), sj_dtype_size(p->out_dtype), &b);
        return w.total + b.total;
    }
    if (value != 2) return 0; /* the per-token and the L2-blocked kernels read no workspace */
    hybrid_pairs_ws w;
    hybrid_pairs_plan(p->m, p->d_ff, p->twell_capacity, backup_rows, p->op == SJ_OP_HYBRID_FFN_DX ? 2 : 1, &w);
    return w.total;
}

sj_status hybrid_ffn_workspace_of(const sj_problem *p, const char *config, const sj_hybrid_layout *l, size_t *bytes)
{
    *bytes = 0;
    const int dw = p->op == SJ_OP_HYBRID_FFN_DW;
    int value;
    sj_status st = hybrid_config_value(config, dw ? "BUSY" : "ALGO", &value);
    /* the transpose's own query refuses a layout past the 32-bit positions the list holds */
    if (st != SJ_OK || (dw && (st = sj_hybrid_ffn_dw_workspace(l, bytes)) != SJ_OK)) return st;
    *bytes = kernel_bytes(p, value, l->backup_rows);
    return SJ_OK;
}

size_t hybrid_ffn_workspace_bound(const sj_problem *p)
{
    /* ALGO=2 is the fwd's and the dx's only kernel with a workspace; the template refuses a BUSY
     * above d_ff */
    const int value = p->op != SJ_OP_HYBRID_FFN_DW ? 2 : p->d_ff < HYBRID_DW_MAX_BUSY ? (int)p->d_ff : HYBRID_DW_MAX_BUSY;
    return kernel_bytes(p, value, p->m);
}

sj_status hybrid_ffn_workspace_check(const loaded_kernel *k, const sj_hybrid_layout *l, sj_devptr workspace,
                                     size_t workspace_bytes, const char *what)
{
    size_t need;
    sj_status st = hybrid_ffn_workspace_of(&k->problem, k->config, l, &need);
    if (st != SJ_OK) return error_prefix(st, "%s", what);
    if (workspace_bytes < need)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace_bytes = %zu; the kernel it launches (config %s) needs "
                         "%zu for H's layout (sj_hybrid_ffn_workspace)", what, workspace_bytes, k->config, need);
    if (need && !workspace)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace is a null device pointer; the kernel it launches "
                         "(config %s) needs %zu bytes (sj_hybrid_ffn_workspace)", what, k->config, need);
    return SJ_OK;
}

sj_status sj_hybrid_ffn_workspace(sj_context *ctx, const sj_problem *p, const sj_hybrid_layout *layout, size_t *bytes)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_hybrid_ffn_workspace";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", what);
    *bytes = 0;
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return error_prefix(st, "%s", what);
    if (p->op != SJ_OP_HYBRID_FFN_FWD && p->op != SJ_OP_HYBRID_FFN_DX && p->op != SJ_OP_HYBRID_FFN_DW)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s; expected hybrid-ffn-fwd, hybrid-ffn-dx or "
                         "hybrid-ffn-dw", what, sj_op_name(p->op));
    sj_problem rows = *p; /* the layout is tokens x d_ff: the gate's view of the same matrix */
    rows.n = p->d_ff;
    if ((st = hybrid_check_layout(layout, &rows, "layout", what)) != SJ_OK) return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return error_prefix(st, "%s: resolving the kernel", what);
    if ((st = hybrid_ffn_workspace_of(p, k->config, layout, bytes)) != SJ_OK) return error_prefix(st, "%s", what);
    return SJ_OK;
}
