/* hybrid_step_reference.h: the fp64 host reference of sampled outputs of one training step of the
 * ReLU FFN block y = Wd . (relu(Wg . x) (.) (Wu . x)) over hybrid activations (docs/training.md,
 * "Training with sparse activations"): token rows of the gate a = relu(X . Wg), of Y and of dX,
 * and unit rows of dWgT, dWuT and dWd. It is the check of the ffn-train benchmark
 * (hybrid_train_bench.c) and reads X, the weights and dY through their counter-based laws
 * (tuner/counter_rng.h), generating on the host only the rows it needs, so its cost stays
 * bounded at the largest shapes: 16 sampled rows per output, whatever the shape.
 *
 * Every product but the gate's runs over the active pairs of A, the activations the device's gate
 * stored, with A's values as a: a gate within rounding of zero may fall on either side on the
 * device and here, and such a pair moves dg = dh u by its whole size (a is ~0 there, u and dh are
 * not), so the active set must be the device's. The gate rows are computed from X and Wg alone
 * and compared with A's rows: a wrong active set or value shows there. */
#ifndef SJ_OPS_HYBRID_STEP_REFERENCE_H
#define SJ_OPS_HYBRID_STEP_REFERENCE_H

#include "sparsejit.h"
#include "tuner/counter_rng.h"

/* The step's inputs: X and dY tokens x d_model, WgT, WuT and Wd d_ff x d_model (row j: unit j's
 * weights), one dtype (f16 or bf16); A tokens x d_ff, row-major 16-bit of that dtype, +0 or -0
 * where a unit is inactive. */
typedef struct hybrid_step_inputs {
    const crng_matrix *X, *WgT, *WuT, *Wd, *dY;
    const uint16_t *A;
} hybrid_step_inputs;

/* The sampled rows, fp32 (each an fp64 sum rounded once). Token rows t = harness_sample_row(
 * tokens, i), i < rows; unit rows j = harness_sample_row(d_ff, i), i < units. */
typedef struct hybrid_step_sample {
    int rows, units;
    int64_t d_model, d_ff;
    float *gate;             /* rows x d_ff: relu(X[t] . WgT[j]) */
    float *y, *dx;           /* rows x d_model */
    float *dwg, *dwu, *dwd;  /* units x d_model: dWgT[j], dWuT[j], dWd[j] */
} hybrid_step_sample;

/* The sampled rows of the step; allocates out's arrays (free with hybrid_step_sample_free).
 * SJ_ERR_INVALID_ARGUMENT naming the input that is missing or whose shape or dtype does not fit X. */
sj_status hybrid_step_reference(const hybrid_step_inputs *in, hybrid_step_sample *out);
void hybrid_step_sample_free(hybrid_step_sample *s);

#endif
