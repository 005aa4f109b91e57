/* twell_api.c: the two ops of a ReLU FFN block over TwELL activations, through the request path
 * (kernel table, cache, template + NVRTC; rt_kernel_for / rt_launch):
 *   sj_twell_gate: H = relu(X . Wg) written as TwELL by templates/twell_gate.lua, whose epilogue
 *     also writes the overflow path (true counts, dense spill of tiles over C);
 *   sj_twell_ffn: Y = (H (.) (X . Wu)) . Wd by templates/twell_ffn.lua, which reads the spill of
 *     every tile whose count exceeds C, so overflow stays exact; its ALGO=1 and 2 kernels take a
 *     workspace (counters and pair lists) from the context's scratch buffer, and ALGO=2 reads X,
 *     WuT and Wd through TMA descriptors.
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
    return rt_launch(ctx, k, args, stream);
}

sj_status sj_twell_ffn(sj_context *ctx, const sj_problem *p, sj_devptr X, const sj_twell_device *H, sj_devptr WuT,
                       sj_devptr Wd, sj_devptr Y, void *stream)
{
    sj_status st = check_problem(ctx, p, SJ_OP_TWELL_FFN, "sj_twell_ffn");
    if (st != SJ_OK) return st;
    if (p->n != p->k)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_ffn: problem.n = %lld and problem.k = %lld must both be d_model",
                       (long long)p->n, (long long)p->k);
    if (p->n % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_ffn: d_model = %lld must be a multiple of 8", (long long)p->n);
    if ((st = rt_check_ptr("X", X, 16)) != SJ_OK || (st = rt_check_ptr("WuT", WuT, 16)) != SJ_OK ||
        (st = rt_check_ptr("Wd", Wd, 16)) != SJ_OK || (st = rt_check_ptr("Y", Y, 16)) != SJ_OK ||
        (st = twell_check_device(H, p, "sj_twell_ffn")) != SJ_OK)
        return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    return twell_ffn_launch(ctx, k, p, X, H, WuT, Wd, Y, stream);
}

/* Bytes of workspace an ALGO=1 or 2 (pairs) FFN kernel needs, for any of their configs
 * (templates/lib/twell_pairs.lua, list_offset): the counters, then ALGO=1's pair list (d_ff
 * entries per token) or ALGO=2's slot counts (per 8 tokens and unit tile of 256 or more) and
 * slots (8 * UT per 8 tokens and unit tile), with tokens and d_ff rounded up to 512. */
static size_t ffn_pairs_workspace(const sj_problem *p)
{
    size_t list_offset = (size_t)((2 + (p->m + 255) / 256 + 63) / 64 * 64);
    size_t m512 = (size_t)(p->m + 511) / 512 * 512, f512 = (size_t)(p->d_ff + 511) / 512 * 512;
    size_t counts = (m512 / 8 * (size_t)((p->d_ff + 255) / 256) + 63) / 64 * 64;
    return 4 * (list_offset + counts + m512 * f512);
}

sj_status twell_ffn_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                              const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y, void *stream)
{
    sj_devptr work = 0;
    sj_status st;
    /* canonical configs sort their names, so ALGO leads; 1 and 2 are the pairs kernels, and 2
     * also reads X, WuT and Wd through TMA descriptors */
    int algo2 = !strncmp(k->config, "ALGO=2,", 7);
    if (algo2 || !strncmp(k->config, "ALGO=1,", 7)) {
        if ((st = rt_scratch(ctx, ffn_pairs_workspace(p), &work)) != SJ_OK) return st;
    }
    int m = (int)p->m, d = (int)p->n, f = (int)p->d_ff;
    sj_devptr entries = H->entries, counts = H->counts, spill = H->spill;
    tensor_map map_x, map_wu, map_wd;
    if (algo2 && ((st = rt_tensor_map_rows(ctx, &map_x, X, p->m, p->n, TMA_ROWS32, "TMA descriptor of X")) != SJ_OK ||
                  (st = rt_tensor_map_rows(ctx, &map_wu, WuT, p->d_ff, p->n, TMA_ROWS32, "TMA descriptor of WuT")) != SJ_OK ||
                  (st = rt_tensor_map_rows(ctx, &map_wd, Wd, p->d_ff, p->n, TMA_WGMMA, "TMA descriptor of Wd")) != SJ_OK))
        return st;
    /* the launch reads as many arguments as the kernel declares: ALGO 0 and 1 stop at work */
    void *args[] = { &X, &entries, &counts, &spill, &WuT, &Wd, &Y, &m, &d, &f, &work, &map_x, &map_wu, &map_wd };
    return rt_launch(ctx, k, args, stream);
}
