/* twell.h: the TwELL family's parts that its descriptors (twell_op.c) hang together, and the
 * launches its entry points (twell_api.c) and its harness share. */
#ifndef SJ_OPS_TWELL_H
#define SJ_OPS_TWELL_H

#include "runtime/runtime.h"
#include "tuner/harness.h"

/* The activation sparsity the CLI, the Lua module and the bench assume unless told. */
#define TWELL_DEFAULT_SPARSITY 0.99

extern const harness_ops harness_twell_gate, harness_twell_ffn; /* twell_harness.c */

/* The gate's random inputs for a twell-gate problem (m tokens, n = d_ff, k = d_model): X (m x k)
 * and WgT (n x k) uniform in [-1, 1), column 0 of X all ones and column 0 of WgT each unit's
 * bias, so that relu(X . Wg) has the problem's sparsity and skew (twell_harness.c). The gate's
 * harness and the FFN block's bench share them. */
sj_status twell_gate_inputs(const sj_problem *gate, uint64_t *rng, uint16_t *X, uint16_t *WgT);

/* Launches a twell-gate kernel with its ABI (X, WgT, H, M, N, K, and the TMA descriptors of X
 * and WgT): sj_twell_gate and the tuner's harness share it. */
sj_status twell_gate_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                               sj_devptr WgT, const sj_twell_device *H, void *stream);

/* Launches a twell-ffn kernel with its ABI (X, H, WuT, Wd, Y, M, D, F, workspace): sj_twell_ffn
 * and the tuner's harness share it. ALGO=1 and 2 kernels get the context's scratch buffer. */
sj_status twell_ffn_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr X,
                              const sj_twell_device *H, sj_devptr WuT, sj_devptr Wd, sj_devptr Y, void *stream);
/* Bytes of workspace an ALGO=1 or 2 (pairs) FFN kernel needs, for any of their configs, and the
 * u32 counters at its start that must be zero when a kernel starts (twell_op.c). */
size_t twell_ffn_workspace(const sj_problem *p);
size_t twell_ffn_counter_words(const sj_problem *p);

#endif
