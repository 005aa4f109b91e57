/* twell_api.c: the two ops of a ReLU FFN block over TwELL activations, through the request path
 * (kernel table, cache, template + NVRTC; rt_kernel_for / rt_launch):
 *   sj_twell_gate: H = relu(X . Wg) written as TwELL by templates/twell_gate.lua, whose epilogue
 *     also writes the overflow path (true counts, dense spill of tiles over C);
 *   sj_twell_ffn: Y = (H (.) (X . Wu)) . Wd by templates/twell_ffn.lua, which reads the spill of
 *     every tile whose count exceeds C, so overflow stays exact; its ALGO=1 and 2 kernels take a
 *     workspace (counters and pair lists) from the context's scratch buffer, or from the caller
 *     (sj_twell_ffn_ws: zeroes the counters on the stream, allocates nothing, never waits), and
 *     ALGO=2 reads X, WuT and Wd through TMA descriptors.
 * Both check every argument against the problem before anything reaches the GPU. */
#include <string.h>

#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/twell/twell.h"
#include "ops/twell/twell_format.h"

static sj_status check_problem(sj_context *ctx, const sj_problem *p, sj_op op, const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != op)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s, expected %s", what, sj_op_name(p->op), sj_op_name(op));
    return SJ_OK;
}

sj_status sj_twell_gate(sj_context *ctx, const sj_problem *p, sj_devptr X, sj_devptr WgT, const sj_twell_device *H,
                        void *stream)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = check_problem(ctx, p, SJ_OP_TWELL_GATE, "sj_twell_gate");
    if (st != SJ_OK) return st;
    if (p->out_dtype != p->dtype)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_gate: problem.out_dtype is %s; the TwELL values have the input dtype %s",
                       sj_dtype_name(p->out_dtype), sj_dtype_name(p->dtype));
    if (p->k % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_gate: problem.k (d_model) = %lld must be a multiple of 8",
                       (long long)p->k);
    if ((st = rt_check_ptr("X", X, 16)) != SJ_OK || (st = rt_check_ptr("WgT", WgT, 16)) != SJ_OK ||
        (st = twell_check_device(H, p, "sj_twell_gate")) != SJ_OK)
        return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    return twell_gate_launch(ctx, k, p, X, WgT, H, stream);
}

sj_status twell_gate_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                               sj_devptr WgT, const sj_twell_device *H, void *stream)
{
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    sj_devptr entries = H->entries, counts = H->counts, spill = H->spill;
    tensor_map map_x, map_w;
    sj_status st;
    if ((st = rt_tensor_map_rows(ctx, &map_x, X, p->m, p->k, TMA_WGMMA, "TMA descriptor of X")) != SJ_OK ||
        (st = rt_tensor_map_rows(ctx, &map_w, WgT, p->n, p->k, TMA_WGMMA, "TMA descriptor of WgT")) != SJ_OK)
        return st;
    void *args[] = { &X, &WgT, &entries, &counts, &spill, &m, &n, &kk, &map_x, &map_w };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

static sj_status ffn_check(sj_context *ctx, const sj_problem *p, sj_devptr X, const sj_twell_device *H, sj_devptr WuT,
                           sj_devptr Wd, sj_devptr Y, const char *what)
{
    sj_status st = check_problem(ctx, p, SJ_OP_TWELL_FFN, what);
    if (st != SJ_OK) return st;
    if (p->n != p->k)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.n = %lld and problem.k = %lld must both be d_model",
                       what, (long long)p->n, (long long)p->k);
    if (p->n % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: d_model = %lld must be a multiple of 8", what, (long long)p->n);
    if ((st = rt_check_ptr("X", X, 16)) != SJ_OK || (st = rt_check_ptr("WuT", WuT, 16)) != SJ_OK ||
        (st = rt_check_ptr("Wd", Wd, 16)) != SJ_OK || (st = rt_check_ptr("Y", Y, 16)) != SJ_OK ||
        (st = twell_check_device(H, p, what)) != SJ_OK)
        return st;
    return SJ_OK;
}

sj_status sj_twell_ffn(sj_context *ctx, const sj_problem *p, sj_devptr X, const sj_twell_device *H, sj_devptr WuT,
                       sj_devptr Wd, sj_devptr Y, void *stream)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = ffn_check(ctx, p, X, H, WuT, Wd, Y, "sj_twell_ffn");
    if (st != SJ_OK) return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    return twell_ffn_launch(ctx, k, p, X, H, WuT, Wd, Y, stream);
}

/* Canonical configs sort their names, so ALGO leads; 1 and 2 are the pairs kernels, which take
 * a workspace, and 2 also reads X, WuT and Wd through TMA descriptors. */
static int ffn_algo2(const loaded_kernel *k) { return !strncmp(k->config, "ALGO=2,", 7); }
static int ffn_pairs(const loaded_kernel *k) { return ffn_algo2(k) || !strncmp(k->config, "ALGO=1,", 7); }

/* The launch with its workspace (0 for ALGO=0, which reads none). */
static sj_status ffn_launch_with(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                                 const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y, sj_devptr work,
                                 void *stream)
{
    sj_status st;
    int m = (int)p->m, d = (int)p->n, f = (int)p->d_ff;
    sj_devptr entries = H->entries, counts = H->counts, spill = H->spill;
    tensor_map map_x, map_wu, map_wd;
    if (ffn_algo2(k) && ((st = rt_tensor_map_rows(ctx, &map_x, X, p->m, p->n, TMA_ROWS32, "TMA descriptor of X")) != SJ_OK ||
                         (st = rt_tensor_map_rows(ctx, &map_wu, WuT, p->d_ff, p->n, TMA_ROWS32, "TMA descriptor of WuT")) != SJ_OK ||
                         (st = rt_tensor_map_rows(ctx, &map_wd, Wd, p->d_ff, p->n, TMA_WGMMA, "TMA descriptor of Wd")) != SJ_OK))
        return st;
    /* the launch reads as many arguments as the kernel declares: ALGO 0 and 1 stop at work */
    void *args[] = { &X, &entries, &counts, &spill, &WuT, &Wd, &Y, &m, &d, &f, &work, &map_x, &map_wu, &map_wd };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status twell_ffn_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                              const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y, void *stream)
{
    sj_devptr work = 0;
    sj_status st;
    if (ffn_pairs(k) && (st = rt_scratch(ctx, twell_ffn_workspace(p), &work)) != SJ_OK) return st;
    return ffn_launch_with(ctx, k, p, X, H, WuT, Wd, Y, work, stream);
}

sj_status sj_twell_ffn_ws(sj_context *ctx, const sj_problem *p, sj_devptr X, const sj_twell_device *H, sj_devptr WuT,
                          sj_devptr Wd, sj_devptr Y, sj_devptr workspace, size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = ffn_check(ctx, p, X, H, WuT, Wd, Y, "sj_twell_ffn_ws");
    if (st != SJ_OK) return st;
    if ((st = rt_check_ptr("workspace", workspace, 16)) != SJ_OK) return st;
    size_t need = twell_ffn_workspace(p);
    if (workspace_bytes < need)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "sj_twell_ffn_ws: workspace_bytes = %zu; this problem needs at least %zu (sj_workspace_size)",
                         workspace_bytes, need);
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    /* the pairs kernels find their way through the counters at its start, which must be zero */
    if (ffn_pairs(k)) {
        CUresult r = cu.cuMemsetD32Async(workspace, 0, twell_ffn_counter_words(p), (CUstream)stream);
        if (r != CUDA_SUCCESS) return cuda_error(r, "cuMemsetD32Async (the FFN workspace's counters)");
    }
    return ffn_launch_with(ctx, k, p, X, H, WuT, Wd, Y, workspace, stream);
}
