/* twell.h: the TwELL family's parts that its descriptors (twell_op.c) hang together, and the
 * launches its entry points (twell_api.c) and its harness share. */
#ifndef SJ_OPS_TWELL_H
#define SJ_OPS_TWELL_H

#include "runtime/runtime.h"
#include "tuner/harness.h"
#include "tuner/counter_rng.h"

/* The activation sparsity the CLI, the Lua module and the bench assume unless told. */
#define TWELL_DEFAULT_SPARSITY 0.99

extern const harness_ops harness_twell_gate, harness_twell_ffn; /* twell_harness.c */

/* The benchmarks' inputs of the TwELL family, as laws of the counter-based generator
 * (tuner/counter_rng.h): the device writes them whole (tuner/random_fill.h), a host reference
 * computes the elements it reads (twell_inputs.c). Each matrix has its own stream of the seed. */
enum { TWELL_STREAM_X = 1, TWELL_STREAM_WG, TWELL_STREAM_WU, TWELL_STREAM_WD, TWELL_STREAM_H };

/* The non-zero fraction of a problem's generated activations (m x d_ff for twell-ffn and the
 * hybrid FFN ops, m x n for the gates): 1 - twell_sparsity (with at least 64 non-zeros expected,
 * so a reference has something to compare), else C / (2T) (tiles then hold C/2 on average and
 * rarely overflow). */
double twell_target_density(const sj_problem *p);
/* problem.twell_dead (the share of never-firing units in generated inputs): in [0,
 * SJ_TWELL_MAX_DEAD], and > 0 only with a sparsity whose non-zeros the live units can carry at
 * rates of at most HARNESS_RATE_CAP. The twell and hybrid ops' validation shares it. */
sj_status twell_check_dead(const sj_problem *p);
/* The law's part of a cache key (",D=dead" when there are dead units, else nothing) and of a
 * label ("/Ddead"), after the sparsity and skew parts. */
void twell_dead_key(const sj_problem *p, char *buf, size_t len);
void twell_dead_label(const sj_problem *p, char *buf, size_t len);

/* The gate's inputs for a twell-gate problem (m tokens, n = d_ff, k = d_model): X (m x k) and
 * WgT (n x k) uniform in [-1, 1), column 0 of X all ones and column 0 of WgT each unit's bias,
 * so that relu(X . Wg) has the problem's sparsity and skew. The gate's and the hybrid gate's
 * harnesses and the FFN block's bench share them. */
typedef struct twell_gate_law {
    crng_matrix X, WgT;
    uint16_t *ones, *bias;   /* their column 0, owned */
} twell_gate_law;
sj_status twell_gate_inputs(const sj_problem *gate, uint64_t seed, twell_gate_law *law);
void twell_gate_inputs_free(twell_gate_law *law);
/* Writes the law on the device (tuner/random_fill.h): new buffers X and WgT and, when Wg is not
 * NULL, Wg (k x n: WgT transposed, as the reference kernel takes it). What it allocated before a
 * failure stays set for the caller to free. */
sj_status twell_gate_write(sj_context *ctx, const twell_gate_law *law, sj_devptr *X, sj_devptr *WgT, sj_devptr *Wg);
/* The gates' reference, relu(X . Wg) in fp64 into h->reference (h->out_count elements, the
 * problem's m x n), from the device's X and Wg (k x n); frees *Wg and zeroes it once done: the
 * twell gate's and the hybrid gate's harnesses share it. */
sj_status twell_gate_reference(harness *h, sj_devptr X, sj_devptr *Wg);

/* The fused FFN's inputs for a twell-ffn problem (m tokens, n = k = d_model, d_ff): X (m x
 * d_model), WuT and Wd (d_ff x d_model) uniform in [-1, 1), and H (m x d_ff) as a ReLU leaves
 * it: unit j fires with its rate (harness_unit_rates: the problem's density and skew) at a
 * value in (0, 1]. */
typedef struct twell_ffn_law {
    crng_matrix X, WuT, Wd;
    crng_activations H;
    uint32_t *threshold;     /* H's, owned */
} twell_ffn_law;
sj_status twell_ffn_inputs(const sj_problem *ffn, uint64_t seed, twell_ffn_law *law);
void twell_ffn_inputs_free(twell_ffn_law *law);

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
