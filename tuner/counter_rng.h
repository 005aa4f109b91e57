/* counter_rng.h: the benchmarks' random inputs as a pure function of (seed, stream, element):
 * a splitmix64 mix of the element's index under a key made from the seed and the stream. The
 * device writes whole matrices with it (templates/fill_random.lua, tuner/random_fill.c) and the
 * host computes, bit for bit, only the elements a reference reads (a sampled row's inputs and
 * the weight rows its active units touch), so no input is generated on the host or uploaded
 * whole. Every float step is exact (24-bit integers times powers of two) and the one rounding
 * to 16 bits is round-to-nearest-even on both sides, so the two agree on every bit. Keep the
 * arithmetic here and in templates/fill_random.lua the same. */
#ifndef SJ_TUNER_COUNTER_RNG_H
#define SJ_TUNER_COUNTER_RNG_H

#include <stdint.h>
#include "sparsejit.h"

/* splitmix64's output function. */
static inline uint64_t crng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of one input stream (a matrix, the activations) under a seed. */
static inline uint64_t crng_key(uint64_t seed, uint64_t stream)
{
    return crng_mix(seed * 0x9e3779b97f4a7c15ull ^ crng_mix(stream + 0x6a09e667f3bcc909ull));
}

/* The 64 random bits of element index of key's stream: splitmix64's index-th output from key. */
static inline uint64_t crng_bits(uint64_t key, uint64_t index)
{
    return crng_mix(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

/* Uniform in [-1, 1) on a grid of 2^-23 (the top 24 bits), exact in fp32. */
static inline float crng_uniform(uint64_t bits) { return (float)(int32_t)(bits >> 40) * 0x1p-23f - 1.0f; }

/* An active unit's value, uniform in (0, 1] on a grid of 2^-24 (the low 24 bits): positive, as a
 * ReLU writes it, and never zero, so the unit stays a non-zero after rounding to 16 bits. */
static inline float crng_activation(uint64_t bits)
{
    return (float)(int32_t)(0x1000000u - (uint32_t)(bits & 0xffffffu)) * 0x1p-24f;
}

/* Whether a unit with this threshold fires (the top 32 bits, independent of the value's). */
static inline int crng_fires(uint64_t bits, uint32_t threshold) { return (uint32_t)(bits >> 32) < threshold; }

/* The threshold that makes crng_fires true with probability rate (in [0, 1]; 1 - 2^-32 at 1). */
uint32_t crng_threshold(double rate);

/* A rows x cols matrix of dtype (f16 or bf16): element (r, c) is crng_uniform of index
 * r * cols + c, rounded to dtype, except column 0 when col0 is set: col0[r] (the gate's bias). */
typedef struct crng_matrix {
    sj_dtype dtype;
    uint64_t key;
    int64_t rows, cols;
    const uint16_t *col0;    /* host, rows values, or NULL */
} crng_matrix;

uint16_t crng_matrix_at(const crng_matrix *m, int64_t r, int64_t c);
/* Row r into out (cols values). */
void crng_matrix_row(const crng_matrix *m, int64_t r, uint16_t *out);
/* The whole matrix into out (rows x cols, row-major): for inputs a host format is built from. */
void crng_matrix_fill(const crng_matrix *m, uint16_t *out);

/* ReLU-like activations, rows x cols of dtype: element (r, c) fires with unit c's rate
 * (crng_fires against threshold[c]) and is then crng_activation rounded to dtype, else +0; both
 * from the bits of index r * cols + c. */
typedef struct crng_activations {
    sj_dtype dtype;
    uint64_t key;
    int64_t rows, cols;
    const uint32_t *threshold; /* host, cols values */
} crng_activations;

uint16_t crng_activation_at(const crng_activations *a, int64_t r, int64_t c);
void crng_activation_row(const crng_activations *a, int64_t r, uint16_t *out);

#endif
