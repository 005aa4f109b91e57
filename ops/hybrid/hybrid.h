/* hybrid.h: the hybrid family's parts that its descriptor (hybrid_op.c) hangs together, and the
 * launch its entry points (hybrid_api.c) and its harness share. */
#ifndef SJ_OPS_HYBRID_H
#define SJ_OPS_HYBRID_H

#include "runtime/runtime.h"
#include "tuner/harness.h"

extern const harness_ops harness_hybrid_gate; /* hybrid_harness.c */

/* SJ_OK when the device matrix has the layout the problem describes (rows = m, cols = n,
 * W = twell_capacity, dtype) and its arrays are allocated and aligned. */
sj_status hybrid_check_device(const sj_hybrid_device *H, const sj_problem *p, const char *what);

/* Resets H's counts, counter, slots (-1) and backup on the stream, then launches a hybrid-gate
 * kernel with its ABI (X, WgT, values, columns, nnz, slot, owner, backup, counter, M, N, K, R). */
sj_status hybrid_gate_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X, sj_devptr WgT,
                             const sj_hybrid_device *H, void *stream);

#endif
