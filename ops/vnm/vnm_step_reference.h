/* vnm_step_reference.h: the fp64 host reference of sampled outputs of one training step of a
 * V:N:M linear layer Y = W . X (W out x in, X in x T): rows of the forward Y, of the input
 * gradient dX = W^T . dY (exact, or through the double-pruned copy WT2 of W^T) and of the
 * weight gradient dW = dY . X^T at W's kept slots. It is the check of the training-step
 * benchmarks (vnm_train_bench.c) and reads X and dY through their counter-based laws
 * (tuner/counter_rng.h), generating on the host only the rows it needs, so its cost stays
 * bounded at the largest shapes: 16 sampled rows per output, whatever out, in and T are. */
#ifndef SJ_OPS_VNM_STEP_REFERENCE_H
#define SJ_OPS_VNM_STEP_REFERENCE_H

#include "sparsejit.h"
#include "tuner/counter_rng.h"

/* Which product of W^T the reference of dX is. */
typedef enum vnm_dx_rule {
    VNM_DX_DOUBLE_PRUNED, /* WT2 . dY, WT2 by sj_vnm_double_prune_host's rule */
    VNM_DX_EXACT          /* W^T . dY, W^T the dense masked transpose */
} vnm_dx_rule;

/* The sampled rows, fp32 (each an fp64 sum rounded once). Y's and dW's rows are W's rows
 * harness_sample_row(out, i), i < y_rows; dX's are harness_sample_row(in, j), j < dx_rows. */
typedef struct vnm_step_sample {
    int y_rows, dx_rows;
    int64_t tokens;
    int64_t dw_slots;   /* per row of dW: 2 x W's groups, slot (group g, half h) at 2g + h */
    float *y;           /* y_rows x tokens */
    float *dx;          /* dx_rows x tokens */
    float *dw;          /* y_rows x dw_slots: 0 where the slot's column is padding */
} vnm_step_sample;

/* The sampled rows of the step for W (host compressed form, out x in), X (crng law, in x T) and
 * dY (out x T), both of W's dtype; allocates out's arrays (free with vnm_step_sample_free).
 * SJ_ERR_INVALID_ARGUMENT naming the input whose shape or dtype does not fit W. */
sj_status vnm_step_reference(const sj_vnm_host *W, const crng_matrix *X, const crng_matrix *dY, vnm_dx_rule rule,
                             vnm_step_sample *out);
/* dX's sampled rows alone (y_rows = 0, y and dw NULL), for dY (out x T): the sampled check of
 * vnm-dx's harness. Same errors; free with vnm_step_sample_free. */
sj_status vnm_step_reference_dx(const sj_vnm_host *W, const crng_matrix *dY, vnm_dx_rule rule, vnm_step_sample *out);
void vnm_step_sample_free(vnm_step_sample *s);

#endif
