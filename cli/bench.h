/* bench.h: what `sparsejit bench` (and the tuner's timing) needs from each op: set up random
 * inputs for a problem on the device, launch the op once, and name a cuBLAS dense baseline of
 * the same shape. One bench_op per op, in cli/bench_<op>.c. */
#ifndef SJ_CLI_BENCH_H
#define SJ_CLI_BENCH_H

#include "sparsejit.h"

typedef struct bench_case bench_case;

typedef struct bench_op {
    sj_op op;
    /* Allocates and fills inputs (random, never zeros) for p. */
    sj_status (*setup)(sj_context *ctx, const sj_problem *p, bench_case **out);
    /* Launches the op once on the default stream (asynchronous). */
    sj_status (*launch)(sj_context *ctx, bench_case *c);
    /* Useful FLOPs of one launch (sparse ops count only the kept non-zeros' work). */
    double (*flops)(const sj_problem *p);
    /* The dense cuBLAS work the op replaces, as a list of GEMM shapes (m, n, k) run back to back
     * with the same dtype: one for gemm/vnm, three for the FFN. Returns the count (<= 4). */
    int (*baseline)(const sj_problem *p, int64_t shapes[4][3]);
    /* Optional: after one launch, the relative error of (a sample of) the output against a
     * reference that shares no code with the kernel (fp64 on the host for TwELL, the fp32
     * reference kernel for gemm and V:N:M), so no time is reported for a kernel that computes
     * the wrong thing. */
    sj_status (*check)(sj_context *ctx, bench_case *c, double *rel_error);
    void (*teardown)(sj_context *ctx, bench_case *c);
} bench_op;

extern const bench_op bench_op_gemm;   /* cli/bench_gemm.c */
extern const bench_op bench_op_vnm;    /* cli/bench_vnm.c */
extern const bench_op bench_op_twell;  /* cli/bench_twell.c */

#endif
