/* vnm.h: the V:N:M family's parts that its descriptors (vnm_op.c) hang together. */
#ifndef SJ_OPS_VNM_H
#define SJ_OPS_VNM_H

#include "tuner/harness.h"

extern const harness_ops harness_vnm;    /* vnm_harness.c */
extern const harness_ops harness_vnm_dw; /* vnm_dw_harness.c */
extern const harness_ops harness_vnm_dx; /* vnm_dx_harness.c */

/* Launches a vnm-dw kernel (templates/vnm_dw.lua's ABI: the arrays, the sizes, then dY's TMA
 * descriptor, zeros off sm_90a) of problem p: sj_vnm_dw's and the harness's one launch path
 * (vnm_train_api.c). */
sj_status vnm_dw_launch(sj_context *ctx, const loaded_kernel *k, const sj_problem *p, sj_devptr dY, sj_devptr X,
                        sj_devptr meta, sj_devptr index, sj_devptr dW_values, void *stream);

/* The training-product harnesses' W (vnm-dw's and vnm-dx's problem: m x n, V:N:M, dtype): drawn
 * from the seed's stream 1 and pruned and compressed by magnitude on the host into *w
 * (vnm_dw_harness.c). */
sj_status vnm_harness_weight(const sj_problem *p, uint64_t seed, sj_vnm_host *w);

#endif
