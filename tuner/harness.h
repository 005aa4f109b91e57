/* harness.h: the one harness of each op, what the tuner, `sparsejit bench`, Lua's
 * sparsejit.bench and sj_bench all use (tuner/bench.c runs the benches through it): random
 * inputs for the problem on the device, one launch of a *given* loaded kernel with the op's
 * ABI, the output it writes, a reference output from an independent kernel
 * (templates/gemm_reference.lua) or the host, the op's useful FLOPs, and the dense work it
 * replaces (its cuBLAS baseline). One harness_ops per op, in ops/<family>/<family>_harness.c,
 * named by the op's descriptor (core/op.h); harness.c holds what they share. */
#ifndef SJ_TUNER_HARNESS_H
#define SJ_TUNER_HARNESS_H

#include <stdint.h>
#include "sparsejit.h"
#include "runtime/kernel_table.h"

/* One step of the dense work an op replaces, as its baseline runs it (cublas_baseline.c): a
 * cuBLAS GEMM (m x n over k), or an element-wise product of two m x n matrices (k unused), the
 * first one through a ReLU for BASELINE_RELU_PRODUCT (a dense FFN's relu(gate) (.) up). */
typedef enum baseline_kind { BASELINE_GEMM, BASELINE_PRODUCT, BASELINE_RELU_PRODUCT } baseline_kind;
typedef struct baseline_step {
    baseline_kind kind;
    int64_t m, n, k;
} baseline_step;
/* The most steps of a baseline: a whole training step of the FFN block (ffn-train) takes 12. */
#define BASELINE_MAX 16

/* What harness_open computes as the reference. */
typedef enum harness_reference {
    HARNESS_NO_REFERENCE = 0,
    HARNESS_REFERENCE = 1,         /* every output element: the tuner's gate */
    /* at least the sampled rows (harness_sample_row): the benches, where one row must take
     * seconds; an op whose reference is costly on the host computes only those */
    HARNESS_REFERENCE_SAMPLED = 2
} harness_reference;

typedef struct harness harness;

typedef struct harness_ops {
    sj_op op;
    /* Allocates random inputs (seeded, never zeros; written on the device by tuner/random_fill.h
     * unless a host format is built from them) and the output; sets h->out, h->out_count,
     * h->out_rows, h->out_dtype and h->state. */
    sj_status (*setup)(harness *h, uint64_t seed);
    /* Launches k once on stream (asynchronous), writing h->out. */
    sj_status (*launch)(harness *h, const loaded_kernel *k, void *stream);
    /* Computes h->reference (h->out_count values) with the reference kernel; under
     * HARNESS_REFERENCE_SAMPLED it may compute the sampled rows only (and sets h->ref_sampled). */
    sj_status (*reference)(harness *h);
    /* Useful FLOPs of one launch (sparse ops count the kept non-zeros only): the one count the
     * tuner's and every bench's TFLOP/s use. */
    double (*flops)(const sj_problem *p);
    /* The dense work the op replaces, in order: fills steps, returns their count. */
    int (*baseline)(const sj_problem *p, baseline_step steps[BASELINE_MAX]);
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
    harness_reference mode;
    sj_devptr out;           /* what a candidate writes */
    size_t out_count;        /* elements */
    int64_t out_rows;        /* the output is out_rows x (out_count / out_rows), row-major */
    sj_dtype out_dtype;
    /* host, fp32, NULL until computed: out_count values, or with ref_sampled set the
     * harness_sample_count(out_rows) sampled rows one after the other */
    float *reference;
    int ref_sampled;
    double ref_norm;         /* ||reference||, > 0 on random inputs */
    void *state;             /* the op's own */
};

/* The harness of p's op (its descriptor's); SJ_ERR_UNSUPPORTED naming the op when it has none. */
sj_status harness_for(const sj_problem *p, const harness_ops **out);
/* setup + the reference mode asks for; on failure everything is released. */
sj_status harness_open(sj_context *ctx, const sj_problem *p, uint64_t seed, harness_reference mode, harness *h);
void harness_close(harness *h);

/* Correctness gate: poisons the output with NaN bytes, launches k once, waits, and computes
 * ||out - ref|| / ||ref|| over the elements the reference holds (+inf when one is NaN/Inf,
 * i.e. never written). A failed
 * launch is returned as SJ_ERR_CUDA; *sticky is set when the CUDA context is lost with it. */
sj_status harness_check(harness *h, const loaded_kernel *k, double *rel_error, int *sticky);
/* 16-bit -> float for every bit pattern of dtype (f16 or bf16), built once. */
const float *harness_lut16(sj_dtype dtype);
/* ||out - ref|| / ||ref|| over n elements of out (f16, bf16 or f32); INFINITY when out holds a
 * NaN or an infinity. */
double harness_rel_error(sj_dtype dtype, const void *out, const float *ref, size_t n);
/* A sampled check compares harness_sample_count(rows) rows (all of them up to
 * HARNESS_SAMPLE_ROWS): the first, the last and evenly between, so every part of the grid is
 * seen; harness_sample_row gives the i-th. */
#define HARNESS_SAMPLE_ROWS 16
int harness_sample_count(int64_t rows);
int64_t harness_sample_row(int64_t rows, int i);
/* Tolerance of the gate for a problem's dtypes: 1e-2 when bf16 is involved, else 5e-3. */
double harness_tolerance(const sj_problem *p);

/* The baseline of an op that replaces one dense GEMM of its own shape (m x n over k): gemm,
 * vnm-spmm, twell-gate. */
int harness_baseline_gemm(const sj_problem *p, baseline_step steps[BASELINE_MAX]);

/* Runs C = A.B through templates/gemm_reference.lua (fp32 output) for dtype inputs on the
 * device and copies the result into ref (m*n floats). The reference kernel goes through the
 * request path like any kernel (rt_kernel_with_config), keyed under its own template name. */
sj_status harness_reference_gemm(sj_context *ctx, sj_dtype dtype, sj_devptr A, sj_devptr B, int64_t m, int64_t n,
                                 int64_t k, float *ref);

/* The next value in [0, 1) of a seeded xorshift64* generator (state != 0): the order of the
 * units of a skewed law. Matrices come from the counter-based generator (counter_rng.h). */
double harness_next_unit(uint64_t *state);
/* The firing rate of each of n units (d_ff columns) for generated TwELL inputs. A share `dead`
 * of them (round(dead n) units at random places) never fires; the live ones share the mean, so
 * the rates average density over all n: all equal when skew is 0; else the live unit of rank r
 * in a random order fires at a rate proportional to r^-skew, capped at HARNESS_RATE_CAP (at 1%
 * density and d_ff 11008 the busiest fifth of the units carries 44% of the non-zeros at skew
 * 0.5, 76% at 1, 98% at 2). A live mean at or above the cap: all live ones equal. With dead = 0
 * the rates (and the rng's draws) are those of the law without dead units. */
#define HARNESS_RATE_CAP 0.5
sj_status harness_unit_rates(double density, double skew, double dead, int64_t n, uint64_t *rng, double *rate);
/* The same units' pre-activation shifts: unit j fires (x . w > shift[j] for x . w ~ N(0, sigma^2))
 * at its rate from harness_unit_rates (a dead unit's shift is 10 sigma: it never fires). */
sj_status harness_unit_shifts(double density, double skew, double dead, double sigma, int64_t n, uint64_t *rng,
                              double *shift);
/* A new device buffer holding `bytes` from host. */
sj_status harness_upload(sj_context *ctx, const void *host, size_t bytes, sj_devptr *out);
uint16_t harness_f32_to_16(sj_dtype dtype, float f);
/* z with P(N(0,1) <= z) = q, by bisection (q in [0, 1]; clamped to +-10): the shift that makes a
 * ReLU input zero with probability q. */
double harness_normal_quantile(double q);
double harness_16_to_f64(sj_dtype dtype, uint16_t h);

#endif
