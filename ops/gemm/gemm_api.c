/* gemm_api.c: the dense GEMM op, C = A.B (row-major): argument checks, then the request path. */
#include "core/error.h"
#include "runtime/runtime.h"

sj_status sj_gemm(sj_context *ctx, const sj_problem *p, sj_devptr A, sj_devptr B, sj_devptr C, void *stream)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gemm: ctx is NULL");
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_GEMM) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gemm: problem.op is %s, expected gemm", sj_op_name(p->op));
    if ((st = rt_check_ptr("A", A, 16)) != SJ_OK || (st = rt_check_ptr("B", B, 16)) != SJ_OK ||
        (st = rt_check_ptr("C", C, 16)) != SJ_OK)
        return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    void *args[] = { &A, &B, &C, &m, &n, &kk };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}
