/* counter_rng.c: the host side of the counter-based inputs (counter_rng.h): thresholds, and
 * elements and rows of the generated matrices and activations, rounded to 16 bits as the device
 * rounds them (templates/fill_random.lua). */
#include "tuner/counter_rng.h"
#include "tuner/harness.h"

uint32_t crng_threshold(double rate)
{
    if (!(rate > 0)) return 0;
    if (rate >= 1) return UINT32_MAX;
    double t = rate * 4294967296.0;
    return t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
}

uint16_t crng_matrix_at(const crng_matrix *m, int64_t r, int64_t c)
{
    if (c == 0 && m->col0) return m->col0[r];
    return harness_f32_to_16(m->dtype, crng_uniform(crng_bits(m->key, (uint64_t)(r * m->cols + c))));
}

void crng_matrix_row(const crng_matrix *m, int64_t r, uint16_t *out)
{
    uint64_t base = (uint64_t)(r * m->cols);
    for (int64_t c = 0; c < m->cols; c++)
        out[c] = harness_f32_to_16(m->dtype, crng_uniform(crng_bits(m->key, base + (uint64_t)c)));
    if (m->col0) out[0] = m->col0[r];
}

void crng_matrix_fill(const crng_matrix *m, uint16_t *out)
{
    for (int64_t r = 0; r < m->rows; r++) crng_matrix_row(m, r, out + r * m->cols);
}

uint16_t crng_activation_at(const crng_activations *a, int64_t r, int64_t c)
{
    uint64_t bits = crng_bits(a->key, (uint64_t)(r * a->cols + c));
    return crng_fires(bits, a->threshold[c]) ? harness_f32_to_16(a->dtype, crng_activation(bits)) : 0;
}

void crng_activation_row(const crng_activations *a, int64_t r, uint16_t *out)
{
    for (int64_t c = 0; c < a->cols; c++) out[c] = crng_activation_at(a, r, c);
}
