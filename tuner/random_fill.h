/* random_fill.h: the benchmarks' counter-based inputs (counter_rng.h) written on the device by
 * templates/fill_random.lua: a matrix (or its transpose, for a reference that takes the other
 * layout) and ReLU-like activations straight into TwELL. The host's crng_matrix_at /
 * crng_activation_at give the same bits for any element. Launches go on the default stream;
 * each call returns once its output is written. */
#ifndef SJ_TUNER_RANDOM_FILL_H
#define SJ_TUNER_RANDOM_FILL_H

#include "sparsejit.h"
#include "tuner/counter_rng.h"

/* Writes m (m->rows x m->cols) into dst, or its transpose (m->cols x m->rows) when transposed. */
sj_status random_fill_matrix(sj_context *ctx, const crng_matrix *m, int transposed, sj_devptr dst);
/* A new device buffer holding m (or its transpose). */
sj_status random_device_matrix(sj_context *ctx, const crng_matrix *m, int transposed, sj_devptr *out);
/* Writes a (its rows x cols, dtype) into H, whose layout must have the same rows, cols and
 * dtype: every count and slot, and the spill (zeros outside overflowing tiles). */
sj_status random_fill_twell(sj_context *ctx, const crng_activations *a, const sj_twell_device *H);

#endif
