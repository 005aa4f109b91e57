/* hybrid_api.c: the hybrid gate through the request path (rt_kernel_for / rt_launch):
 * sj_hybrid_gate resets the matrix's counts, counter, slots and backup on the stream and launches
 * templates/hybrid_gate.lua, whose epilogue decides the row partition on the GPU;
 * sj_hybrid_gate_complete adds the one host step a too-small backup needs: it reads the overflow
 * counter back and, when rows were left unplaced, grows the backup to all of them and runs the
 * gate again, so no row is dropped. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

static sj_status gate_check(sj_context *ctx, const sj_problem *p, sj_devptr X, sj_devptr WgT, const sj_hybrid_device *H,
                            const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_HYBRID_GATE)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s, expected hybrid-gate", what, sj_op_name(p->op));
    if (p->out_dtype != p->dtype)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.out_dtype is %s; the hybrid values have the input dtype %s",
                         what, sj_dtype_name(p->out_dtype), sj_dtype_name(p->dtype));
    if (p->k % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.k (d_model) = %lld must be a multiple of 8", what,
                         (long long)p->k);
    if ((st = rt_check_ptr("X", X, 16)) != SJ_OK || (st = rt_check_ptr("WgT", WgT, 16)) != SJ_OK) return st;
    return hybrid_check_device(H, p, what);
}

sj_status hybrid_gate_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X, sj_devptr WgT,
                             const sj_hybrid_device *H, void *stream)
{
    const sj_hybrid_layout *l = &H->layout;
    CUstream s = (CUstream)stream;
    /* the epilogue reserves positions from zero counts, backup rows from a zero counter, waits on
     * slot -1, and writes only the non-zeros of a backup row */
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)H->nnz, 0, (size_t)l->rows, s), "resetting the hybrid counts");
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)H->counter, 0, 1, s), "resetting the hybrid overflow counter");
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)H->slot, 0xFFFFFFFFu, (size_t)l->rows, s), "resetting the hybrid slots");
    if (l->backup_rows)
        CU_CHECK(cu.cuMemsetD16Async((CUdeviceptr)H->backup, 0, (size_t)(l->backup_rows * l->cols), s),
                 "zeroing the hybrid backup");
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k, r = (int)l->backup_rows;
    sj_devptr values = H->values, columns = H->columns, nnz = H->nnz, slot = H->slot, owner = H->owner,
              backup = H->backup, counter = H->counter;
    void *args[] = { &X, &WgT, &values, &columns, &nnz, &slot, &owner, &backup, &counter, &m, &n, &kk, &r };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_hybrid_gate(sj_context *ctx, const sj_problem *p, sj_devptr X, sj_devptr WgT, const sj_hybrid_device *H,
                         void *stream)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = gate_check(ctx, p, X, WgT, H, "sj_hybrid_gate");
    if (st != SJ_OK) return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    return hybrid_gate_launch(ctx, k, p, X, WgT, H, stream);
}

sj_status sj_hybrid_gate_complete(sj_context *ctx, const sj_problem *p, sj_devptr X, sj_devptr WgT,
                                  sj_hybrid_device *H, sj_hybrid_report *report, int *relaunched, void *stream)
{
    RT_USE_CONTEXT(ctx);
    if (relaunched) *relaunched = 0;
    sj_status st = sj_hybrid_gate(ctx, p, X, WgT, H, stream);
    if (st != SJ_OK) return st;
    int32_t counter = 0;
    CU_CHECK(cu.cuStreamSynchronize((CUstream)stream), "waiting for the hybrid gate");
    if ((st = sj_memcpy_dtoh(ctx, &counter, H->counter, sizeof counter)) != SJ_OK) return st;
    if (counter > H->layout.backup_rows) {
        /* the flagged path: unplaced rows lost their rest, so the whole gate runs again into a
         * backup that holds every overflow row (the same inputs overflow the same rows) */
        if ((st = sj_hybrid_device_grow(ctx, H, counter)) != SJ_OK) return st;
        if (relaunched) *relaunched = 1;
        if ((st = sj_hybrid_gate(ctx, p, X, WgT, H, stream)) != SJ_OK) return st;
        CU_CHECK(cu.cuStreamSynchronize((CUstream)stream), "waiting for the hybrid gate");
    }
    return report ? sj_hybrid_report_device(ctx, H, report) : SJ_OK;
}
