/* harness.h: what the tuner needs from each op to try a candidate kernel: random inputs for the
 * problem on the device, one launch of a *given* loaded kernel with the op's ABI, the output it
 * writes, and a reference output from an independent kernel (templates/gemm_reference.lua).
 * One harness_ops per op, in ops/<family>/<family>_harness.c, named by the op's descriptor
 * (core/op.h); harness.c holds what they share. */
#ifndef SJ_TUNER_HARNESS_H
#define SJ_TUNER_HARNESS_H

#include <stdint.h>
#include "sparsejit.h"
#include "runtime/kernel_table.h"

typedef struct harness harness;

typedef struct harness_ops {
    sj_op op;
    /* Allocates random inputs (seeded, never zeros) and the output; sets h->out, h->out_count,
     * h->out_dtype and h->state. */
    sj_status (*setup)(harness *h, uint64_t seed);
    /* Launches k once on stream (asynchronous), writing h->out. */
    sj_status (*launch)(harness *h, const loaded_kernel *k, void *stream);
    /* Computes h->reference (h->out_count values) with the reference kernel. */
    sj_status (*reference)(harness *h);
    /* Useful FLOPs of one launch (sparse ops count the kept non-zeros only). */
    double (*flops)(const sj_problem *p);
    void (*teardown)(harness *h);
    /* Optional, for an output that is not one dense buffer (TwELL): poison fills it with an
     * invalid pattern; read copies it to host as out_count dense values of out_dtype, and
     * returns SJ_ERR_VERIFY when the output is malformed. NULL: h->out is poisoned with 0xFF
     * bytes and copied as is. */
    sj_status (*poison)(harness *h);
    sj_status (*read)(harness *h, void *host);
} harness_ops;

struct harness {
    const harness_ops *ops;
    sj_context *ctx;
    sj_problem problem;
    sj_devptr out;           /* what a candidate writes */
    size_t out_count;        /* elements */
    sj_dtype out_dtype;
    float *reference;        /* host, out_count values (the fp32 reference), NULL until computed */
    double ref_norm;         /* ||reference||, > 0 on random inputs */
    void *state;             /* the op's own */
};

/* What `sparsejit bench` (and Lua's sparsejit.bench) times for an op: the op through its public
 * entry point on random inputs, against the dense cuBLAS work it replaces. One per op family, in
 * ops/<family>/<family>_bench.c, named by the op's descriptor (core/op.h). */
typedef struct bench_case bench_case;

typedef struct bench_op {
    sj_op op;
    /* Allocates and fills inputs (random, never zeros) for p. */
    sj_status (*setup)(sj_context *ctx, const sj_problem *p, bench_case **out);
    /* Launches the op once on the default stream (asynchronous). */
    sj_status (*launch)(sj_context *ctx, bench_case *c);
    /* Useful FLOPs of one launch (sparse ops count only the kept non-zeros' work). */
    double (*flops)(const sj_problem *p);
    /* The dense cuBLAS work the op replaces, as a list of GEMM shapes (m, n, k) run back to back
     * with the same dtype: one for gemm/vnm, three for the FFN. Returns the count (<= 4). */
    int (*baseline)(const sj_problem *p, int64_t shapes[4][3]);
    /* Optional: after one launch, the relative error of (a sample of) the output against a
     * reference that shares no code with the kernel (fp64 on the host for TwELL, the fp32
     * reference kernel for gemm and V:N:M), so no time is reported for a kernel that computes
     * the wrong thing. */
    sj_status (*check)(sj_context *ctx, bench_case *c, double *rel_error);
    void (*teardown)(sj_context *ctx, bench_case *c);
} bench_op;


/* The harness of p's op (its descriptor's); SJ_ERR_UNSUPPORTED naming the op when it has none. */
sj_status harness_for(const sj_problem *p, const harness_ops **out);
/* setup + reference; on failure everything is released. */
sj_status harness_open(sj_context *ctx, const sj_problem *p, uint64_t seed, int with_reference, harness *h);
void harness_close(harness *h);

/* Correctness gate: poisons the output with NaN bytes, launches k once, waits, and computes
 * ||out - ref|| / ||ref|| (+inf when an element is NaN/Inf, i.e. never written). A failed
 * launch is returned as SJ_ERR_CUDA; *sticky is set when the CUDA context is lost with it. */
sj_status harness_check(harness *h, const loaded_kernel *k, double *rel_error, int *sticky);
/* 16-bit -> float for every bit pattern of dtype (f16 or bf16), built once. */
const float *harness_lut16(sj_dtype dtype);
/* ||out - ref|| / ||ref|| over n elements of out (f16, bf16 or f32); INFINITY when out holds a
 * NaN or an infinity. */
double harness_rel_error(sj_dtype dtype, const void *out, const float *ref, size_t n);
/* Tolerance of the gate for a problem's dtypes: 1e-2 when bf16 is involved, else 5e-3. */
double harness_tolerance(const sj_problem *p);

/* Runs C = A.B through templates/gemm_reference.lua (fp32 output) for dtype inputs on the
 * device and copies the result into ref (m*n floats). The reference kernel goes through the
 * request path like any kernel (rt_kernel_with_config), keyed under its own template name. */
sj_status harness_reference_gemm(sj_context *ctx, sj_dtype dtype, sj_devptr A, sj_devptr B, int64_t m, int64_t n,
                                 int64_t k, float *ref);

/* Random 16-bit values of dtype in [-scale, scale), never all zero, from a seeded generator. */
void harness_fill16(sj_dtype dtype, uint16_t *x, size_t n, float scale, uint64_t *state);
/* The next value in [0, 1) of a seeded xorshift64* generator (state != 0). */
double harness_next_unit(uint64_t *state);
/* The firing rate of each of n units (d_ff columns) for generated TwELL inputs: all equal to
 * density when skew is 0; else unit of rank r in a random order fires at a rate proportional
 * to r^-skew, capped at HARNESS_RATE_CAP, scaled so the mean is density (at 1% density and
 * d_ff 11008 the busiest fifth of the units carries 44% of the non-zeros at skew 0.5, 76% at 1,
 * 98% at 2). density at or above the cap: all equal. */
#define HARNESS_RATE_CAP 0.5
sj_status harness_unit_rates(double density, double skew, int64_t n, uint64_t *rng, double *rate);
/* The same units' pre-activation shifts: unit j fires (x . w > shift[j] for x . w ~ N(0, sigma^2))
 * at its rate from harness_unit_rates. */
sj_status harness_unit_shifts(double density, double skew, double sigma, int64_t n, uint64_t *rng, double *shift);
/* A new device buffer holding `bytes` from host. */
sj_status harness_upload(sj_context *ctx, const void *host, size_t bytes, sj_devptr *out);
/* A new device buffer of n random 16-bit values of dtype, uniform in [-1, 1) (never zeros). */
sj_status harness_random_device16(sj_context *ctx, sj_dtype dtype, size_t n, uint64_t *rng, sj_devptr *out);
uint16_t harness_f32_to_16(sj_dtype dtype, float f);
/* z with P(N(0,1) <= z) = q, by bisection (q in [0, 1]; clamped to +-10): the shift that makes a
 * ReLU input zero with probability q. */
double harness_normal_quantile(double q);
double harness_16_to_f64(sj_dtype dtype, uint16_t h);

#endif
