/* hybrid_ffn_api.c: the forward and the backward of the FFN block over hybrid activations
 * through the request path (rt_kernel_for / rt_launch): sj_hybrid_ffn_fwd
 * (templates/hybrid_ffn_fwd.lua), sj_hybrid_ffn_dx (templates/hybrid_ffn_dx.lua) and
 * sj_hybrid_ffn_dw (the transpose, then templates/hybrid_ffn_dw.lua: hybrid_dw_launch.c), their
 * argument checks (the caller's workspace against the kernel they resolve:
 * hybrid_ffn_workspace.c), the fwd and dx launches (shared with the harness; an L2-blocked config,
 * SPLIT > 0, and the tensor-core variants, ALGO=2, are two kernels in stream order) and their
 * problem. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <string.h>

sj_status sj_hybrid_ffn_problem(const sj_hybrid_layout *l, sj_op op, int64_t d_model, sj_problem *out)
{
    sj_status st = hybrid_layout_check(l, "sj_hybrid_ffn_problem");
    if (st != SJ_OK) return st;
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_ffn_problem: out is NULL");
    if (op != SJ_OP_HYBRID_FFN_FWD && op != SJ_OP_HYBRID_FFN_DX && op != SJ_OP_HYBRID_FFN_DW)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "sj_hybrid_ffn_problem: op %d: expected hybrid-ffn-fwd, hybrid-ffn-dx or hybrid-ffn-dw", (int)op);
    sj_problem_init(out, op, l->dtype, l->rows, d_model, d_model);
    out->d_ff = l->cols;
    out->twell_tile = (int)l->cols;
    out->twell_capacity = l->width;
    return sj_problem_validate(out);
}

/* The checks the entry points share: the problem (of op), H against it, the dense operands named
 * in names (16-byte aligned), and the workspace's alignment when there is one (whether it must
 * be there and its size depend on the kernel: hybrid_ffn_workspace_check, after resolving it). */
static sj_status ffn_check(sj_context *ctx, const sj_problem *p, sj_op op, const sj_hybrid_device *H,
                           const char *const names[], const sj_devptr ptrs[], int n, sj_devptr workspace,
                           const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != op)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s, expected %s", what, sj_op_name(p->op), sj_op_name(op));
    sj_problem rows = *p; /* H is tokens x d_ff: the gate's view of the same matrix */
    rows.n = p->d_ff;
    if ((st = hybrid_check_device(H, &rows, what)) != SJ_OK) return st;
    for (int i = 0; i < n; i++)
        if ((st = rt_check_ptr(names[i], ptrs[i], 16)) != SJ_OK) return st;
    return workspace ? rt_check_ptr("workspace", workspace, 16) : SJ_OK;
}

/* The per-pair arrays: the ELL-shaped one always, the backup-shaped one when there is a backup. */
static sj_status pair_arrays(const sj_hybrid_device *H, const char *ell_name, sj_devptr ell, const char *bk_name,
                             sj_devptr bk, unsigned align)
{
    sj_status st = rt_check_ptr(ell_name, ell, align);
    if (st == SJ_OK && H->layout.backup_rows) st = rt_check_ptr(bk_name, bk, align);
    return st;
}

/* The op's kernel k, then for a config of two kernels its second, STAGE=1 of the same config
 * with the same arguments, in stream order: an L2-blocked config's column-slice updates (SPLIT >
 * 0, lib/hybrid_rows.lua), which read the per-pair values k stored (u; dg, du), and the
 * tensor-core variant's pairs kernel (ALGO=2, lib/hybrid_pairs.lua), which reads the list k wrote
 * into the workspace. STAGE=1 alone is refused. */
static sj_status launch_stages(sj_context *ctx, const loaded_kernel *k, void **args, size_t n_args, void *stream)
{
    gen_config c;
    sj_status st = gen_config_parse(k->config, &c);
    int split = 0, algo = 0, *stage = NULL;
    for (int i = 0; st == SJ_OK && i < c.n; i++) {
        if (!strcmp(c.names[i], "SPLIT")) split = c.values[i];
        if (!strcmp(c.names[i], "ALGO")) algo = c.values[i];
        if (!strcmp(c.names[i], "STAGE")) stage = &c.values[i];
    }
    if (st != SJ_OK) return st;
    const int two = split > 0 || algo == 2;
    if (two && (!stage || *stage != 0))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s config %s: STAGE=1 is the second kernel of %s, which the op "
                         "launches after STAGE=0; give STAGE=0", k->template_name, k->config,
                         algo == 2 ? "ALGO=2" : "SPLIT > 0");
    if ((st = rt_launch(ctx, k, args, n_args, stream)) != SJ_OK || !two) return st;
    *stage = 1;
    char config[sizeof k->config];
    gen_config_format(&c, config, sizeof config);
    const loaded_kernel *second;
    if ((st = rt_kernel_with_config(ctx, &k->problem, k->template_name, config, &second)) != SJ_OK)
        return error_prefix(st, "the second kernel %s", config);
    return rt_launch(ctx, second, args, n_args, stream);
}

/* Canonical configs sort their names, so ALGO leads: ALGO=2 is the tensor-core variant. */
static int pairs_variant(const loaded_kernel *k) { return !strncmp(k->config, "ALGO=2,", 7); }

/* ALGO=2's TMA descriptors: the up product's rows (X; dY) and weights (WuT; Wd), 32-element
 * boxes, and the down product's one or two weights (Wd; WgT, WuT), 64 x 64 boxes. */
static sj_status pairs_maps(sj_context *ctx, const loaded_kernel *k, int halves, sj_devptr up_x, sj_devptr up_w,
                            const sj_devptr down_w[2], tensor_map maps[4])
{
    const sj_problem *p = &k->problem;
    sj_status st;
    if ((st = rt_tensor_map_rows(ctx, &maps[0], up_x, p->m, p->n, TMA_ROWS32, "TMA descriptor of the up product's rows")) != SJ_OK ||
        (st = rt_tensor_map_rows(ctx, &maps[1], up_w, p->d_ff, p->n, TMA_ROWS32, "TMA descriptor of the up product's weights")) != SJ_OK)
        return st;
    for (int i = 0; i < halves; i++)
        if ((st = rt_tensor_map_rows(ctx, &maps[2 + i], down_w[i], p->d_ff, p->n, TMA_WGMMA,
                                     "TMA descriptor of the down product's weights")) != SJ_OK)
            return st;
    return SJ_OK;
}

sj_status hybrid_ffn_fwd_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr X, const sj_hybrid_device *H,
                                sj_devptr WuT, sj_devptr Wd, sj_devptr Y, const hybrid_saved_u *u, sj_devptr work,
                                void *stream)
{
    int r = (int)H->layout.backup_rows;
    sj_devptr values = H->values, columns = H->columns, nnz = H->nnz, slot = H->slot, backup = H->backup,
              uv = u->values, ub = u->backup;
    tensor_map maps[4] = { { { 0 } } };
    const sj_devptr down[2] = { Wd, 0 };
    sj_status st;
    if (pairs_variant(k) && (st = pairs_maps(ctx, k, 1, X, WuT, down, maps)) != SJ_OK) return st;
    /* the launch reads as many arguments as the kernel declares: ALGO=0's stop at R */
    void *args[] = { &X, &values, &columns, &nnz, &slot, &backup, &WuT, &Wd, &Y, &uv, &ub, &r, &work,
                     &maps[0], &maps[1], &maps[2] };
    return launch_stages(ctx, k, RT_ARGS(args), stream);
}

sj_status hybrid_ffn_dx_launch(sj_context *ctx, const loaded_kernel *k, sj_devptr dY, const sj_hybrid_device *H,
                               const hybrid_saved_u *u, sj_devptr WgT, sj_devptr WuT, sj_devptr Wd, sj_devptr dX,
                               const hybrid_grads *g, sj_devptr work, void *stream)
{
    int r = (int)H->layout.backup_rows;
    sj_devptr values = H->values, columns = H->columns, nnz = H->nnz, slot = H->slot, backup = H->backup,
              uv = u->values, ub = u->backup, dgv = g->dg_values, dgb = g->dg_backup, duv = g->du_values,
              dub = g->du_backup;
    tensor_map maps[4] = { { { 0 } } };
    const sj_devptr down[2] = { WgT, WuT };
    sj_status st;
    if (pairs_variant(k) && (st = pairs_maps(ctx, k, 2, dY, Wd, down, maps)) != SJ_OK) return st;
    /* ALGO=0's kernels stop at R */
    void *args[] = { &dY, &values, &columns, &nnz, &slot, &backup, &uv, &ub, &WgT, &WuT, &Wd, &dX,
                     &dgv, &dgb, &duv, &dub, &r, &work, &maps[0], &maps[1], &maps[2], &maps[3] };
    return launch_stages(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_hybrid_ffn_fwd(sj_context *ctx, const sj_problem *p, sj_devptr X, const sj_hybrid_device *H,
                            sj_devptr WuT, sj_devptr Wd, sj_devptr Y, sj_devptr u_values, sj_devptr u_backup,
                            sj_devptr workspace, size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_hybrid_ffn_fwd";
    const char *const names[] = { "X", "WuT", "Wd", "Y" };
    const sj_devptr ptrs[] = { X, WuT, Wd, Y };
    sj_status st = ffn_check(ctx, p, SJ_OP_HYBRID_FFN_FWD, H, names, ptrs, 4, workspace, what);
    if (st == SJ_OK) st = pair_arrays(H, "u_values", u_values, "u_backup", u_backup, 2);
    const loaded_kernel *k;
    if (st != SJ_OK || (st = rt_kernel_for(ctx, p, &k)) != SJ_OK ||
        (st = hybrid_ffn_workspace_check(k, &H->layout, workspace, workspace_bytes, what)) != SJ_OK)
        return st;
    hybrid_saved_u u = { u_values, u_backup };
    return hybrid_ffn_fwd_launch(ctx, k, X, H, WuT, Wd, Y, &u, workspace, stream);
}

sj_status sj_hybrid_ffn_dx(sj_context *ctx, const sj_problem *p, sj_devptr dY, const sj_hybrid_device *H,
                           sj_devptr u_values, sj_devptr u_backup, sj_devptr WgT, sj_devptr WuT, sj_devptr Wd,
                           sj_devptr dX, sj_devptr dg_values, sj_devptr dg_backup, sj_devptr du_values,
                           sj_devptr du_backup, sj_devptr workspace, size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_hybrid_ffn_dx";
    const char *const names[] = { "dY", "WgT", "WuT", "Wd", "dX" };
    const sj_devptr ptrs[] = { dY, WgT, WuT, Wd, dX };
    sj_status st = ffn_check(ctx, p, SJ_OP_HYBRID_FFN_DX, H, names, ptrs, 5, workspace, what);
    if (st == SJ_OK) st = pair_arrays(H, "u_values", u_values, "u_backup", u_backup, 2);
    if (st == SJ_OK) st = pair_arrays(H, "dg_values", dg_values, "dg_backup", dg_backup, 4);
    if (st == SJ_OK) st = pair_arrays(H, "du_values", du_values, "du_backup", du_backup, 4);
    const loaded_kernel *k;
    if (st != SJ_OK || (st = rt_kernel_for(ctx, p, &k)) != SJ_OK ||
        (st = hybrid_ffn_workspace_check(k, &H->layout, workspace, workspace_bytes, what)) != SJ_OK)
        return st;
    hybrid_saved_u u = { u_values, u_backup };
    hybrid_grads g = { dg_values, dg_backup, du_values, du_backup };
    return hybrid_ffn_dx_launch(ctx, k, dY, H, &u, WgT, WuT, Wd, dX, &g, workspace, stream);
}

sj_status sj_hybrid_ffn_dw(sj_context *ctx, const sj_problem *p, sj_devptr X, sj_devptr dY, const sj_hybrid_device *H,
                           sj_devptr u_values, sj_devptr u_backup, sj_devptr dg_values, sj_devptr dg_backup,
                           sj_devptr du_values, sj_devptr du_backup, sj_devptr dWgT, sj_devptr dWuT, sj_devptr dWd,
                           sj_devptr workspace, size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_hybrid_ffn_dw";
    const char *const names[] = { "X", "dY", "dWgT", "dWuT", "dWd" };
    const sj_devptr ptrs[] = { X, dY, dWgT, dWuT, dWd };
    sj_status st = ffn_check(ctx, p, SJ_OP_HYBRID_FFN_DW, H, names, ptrs, 5, workspace, what);
    if (st == SJ_OK) st = pair_arrays(H, "u_values", u_values, "u_backup", u_backup, 2);
    if (st == SJ_OK) st = pair_arrays(H, "dg_values", dg_values, "dg_backup", dg_backup, 4);
    if (st == SJ_OK) st = pair_arrays(H, "du_values", du_values, "du_backup", du_backup, 4);
    const loaded_kernel *k;
    if (st != SJ_OK || (st = rt_kernel_for(ctx, p, &k)) != SJ_OK ||
        (st = hybrid_ffn_workspace_check(k, &H->layout, workspace, workspace_bytes, what)) != SJ_OK)
        return st;
    hybrid_dw_ws w;
    hybrid_dw_plan(H->layout.rows, H->layout.cols, H->layout.width, H->layout.backup_rows, &w);
    hybrid_saved_u u = { u_values, u_backup };
    hybrid_grads g = { dg_values, dg_backup, du_values, du_backup };
    hybrid_weight_grads out = { dWgT, dWuT, dWd };
    return hybrid_ffn_dw_launch(ctx, k, X, dY, H, &u, &g, &out, workspace, &w, stream);
}
