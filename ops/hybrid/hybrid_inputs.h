/* hybrid_inputs.h: what the hybrid FFN harnesses share (hybrid_inputs.c): the generated inputs
 * (the activations a of a problem's law built into the hybrid format on the host, and per-pair
 * values u, dg, du drawn from a counter-based law at a's positions and uploaded in a's two
 * shapes) and the workspace of the kernel each launch is given. */
#ifndef SJ_OPS_HYBRID_INPUTS_H
#define SJ_OPS_HYBRID_INPUTS_H

#include "sparsejit.h"
#include "tuner/counter_rng.h"
#include "runtime/kernel_table.h"

/* The seed's streams of the hybrid harnesses' own inputs, past the TwELL family's. */
enum { HYBRID_STREAM_DY = 16, HYBRID_STREAM_U, HYBRID_STREAM_DG, HYBRID_STREAM_DU };

/* a = the activations of law (crng_activation_row rows, p->m x p->d_ff) as a host hybrid
 * matrix of width p->twell_capacity whose backup holds every overflow row. */
sj_status hybrid_activations(const sj_problem *p, const crng_activations *law, sj_hybrid_host *a);

/* The value law gives at pair (t, j), 16-bit bits or (f32) as a float. */
typedef enum hybrid_pair_kind { HYBRID_PAIR_16, HYBRID_PAIR_F32 } hybrid_pair_kind;
/* law's values at a's active pairs, 0 elsewhere, uploaded as an ELL-shaped (rows x W) and, when a
 * has a backup, a backup-shaped (backup_rows x cols) array of kind. */
sj_status hybrid_pairs_upload(sj_context *ctx, const sj_hybrid_host *a, const crng_matrix *law, hybrid_pair_kind kind,
                              sj_devptr *ell, sj_devptr *bk);
/* The value of law at (t, j), as either kind uploads it (f32: the 16-bit value widened). */
double hybrid_pair_value(const crng_matrix *law, int64_t t, int64_t j);

/* The workspace for launching kernel k over a matrix of layout l: *work (*bytes of it; 0 and 0 at
 * first) is replaced by one of hybrid_ffn_workspace_of's bytes for k's config when it is smaller,
 * after the device is done with the old one. The tuner and the benches launch every kernel once
 * untimed (harness_check, the first launch) before they time it, so a candidate that needs more
 * than those before it gets it there, never while it is timed. */
sj_status hybrid_harness_workspace(sj_context *ctx, const loaded_kernel *k, const sj_hybrid_layout *l, sj_devptr *work,
                                   size_t *bytes);

#endif
