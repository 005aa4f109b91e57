/* bench.h: one benchmark run, the one path of `sparsejit bench`, Lua's sparsejit.bench and
 * sj_bench. A name is either an op, run through its harness (tuner/harness.h: the inputs,
 * launch, check and FLOP count the tuner uses, on the kernel the request path resolves), or a
 * benchmark of several kernels from the table beside the op table (core/op.h's op_bench, e.g.
 * twell-ffn-block), run through its bench_ops. Either way the output is checked before
 * anything is timed, then the benchmark and its dense baseline (cublas_baseline.c) are timed in
 * interleaved rounds so clock drift under load hits both alike. */
#ifndef SJ_TUNER_BENCH_H
#define SJ_TUNER_BENCH_H

#include "sparsejit.h"
#include "core/op.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

typedef struct bench_case bench_case;

/* The most parts a benchmark times alone (bench_ops.launch_part), and the most parts of its
 * baseline (bench_ops.baseline_parts). */
#define BENCH_MAX_PARTS 4

/* A part of a benchmark's baseline, timed alone: its name and its first step; it runs up to the
 * next part's first step (the last part to the baseline's end). */
typedef struct baseline_part {
    const char *name;
    int first;
} baseline_part;

/* A benchmark of several kernels (an op_bench's ops), in ops/<family>/. */
typedef struct bench_ops {
    /* Allocates and fills the inputs (seeded random, never zeros) for p, a problem of the
     * benchmark's op. */
    sj_status (*setup)(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out);
    /* Runs every part once through its public entry point on the default stream (asynchronous).
     * NULL with launch_part: bench launches the parts in order. */
    sj_status (*launch)(sj_context *ctx, bench_case *c);
    /* After a launch: the relative error of (sampled rows of) the last part's output against a
     * reference that shares no code with the kernels. */
    sj_status (*check)(sj_context *ctx, bench_case *c, double *rel_error);
    /* Useful FLOPs of one launch: the sum of its parts' harness counts. */
    double (*flops)(const sj_problem *p);
    /* The dense work the parts replace, in order. */
    int (*baseline)(const sj_problem *p, baseline_step steps[BASELINE_MAX]);
    void (*teardown)(sj_context *ctx, bench_case *c);
    /* Optional: each part also timed alone, in every round after the whole (bench_result's
     * part_us): the parts' names in launch order, NULL-terminated (at most BENCH_MAX_PARTS), and
     * a launch of part i only (asynchronous, the inputs setup wrote). Each alone run starts from
     * a flushed L2 as the whole does, so their sum may exceed the whole's time. NULL: the parts
     * are timed together only. */
    const char *const *part_names;
    sj_status (*launch_part)(sj_context *ctx, bench_case *c, int part);
    /* Optional: the baseline's parts (a dense training step's forward and backward), each also
     * timed alone in every round after the whole baseline (bench_result's dense_part_us), ended
     * by a NULL name, at most BENCH_MAX_PARTS; the first at step 0, the others at rising steps
     * within the baseline. NULL: the baseline is timed whole only. */
    const baseline_part *baseline_parts;
    /* Optional (a training step): after setup, the bytes of activations the benchmark keeps for
     * its backward pass and those the dense step keeps (bench_result's saved_bytes). */
    void (*saved_bytes)(const bench_case *c, int64_t *sparse, int64_t *dense);
} bench_ops;

/* A new device buffer of bytes filled with 0xff (NaN in f16, bf16 and f32): a benchmark's output,
 * so that what no part writes fails its check. */
sj_status bench_output(sj_context *ctx, size_t bytes, sj_devptr *out);

typedef struct bench_options {
    measure_options measure; /* budgets of each timing */
    int rounds;              /* interleaved rounds of the benchmark and its baseline: 1..100 */
    int cublas;              /* 0: no baseline */
    uint64_t seed;           /* of the inputs */
} bench_options;

/* measure_options_init's budgets, 1 round, the baseline on, seed 1. */
void bench_options_init(bench_options *o);

typedef struct bench_result {
    /* medians over the rounds (p20, p80: the rounds' medians of them), the check, and the
     * kernel timed (of a benchmark of several: the last one launched) */
    sj_bench_result run;
    char template_name[64];
    double first_ms;         /* the first launch, with lookup, compile and load, timed on the host */
    double flops;            /* useful FLOPs of one run: the harness's count (bench_flops) */
    baseline_step baseline[BASELINE_MAX];
    int n_baseline;
    double dense_flops;      /* the baseline's GEMMs' FLOPs */
    /* the baseline's median and its TFLOP/s, and its time over the benchmark's; NAN when the
     * baseline was not asked for or failed (cublas_error says why) */
    double cublas_us, cublas_tflops, speedup;
    char cublas_error[256];
    /* a benchmark with launch_part: the median time of each part alone over the rounds, named
     * as its bench_ops names them; n_parts is 0 otherwise */
    int n_parts;
    const char *part_names[BENCH_MAX_PARTS];
    double part_us[BENCH_MAX_PARTS];
    /* a benchmark with baseline_parts: the median time of each alone (NAN as cublas_us is) */
    int n_dense_parts;
    const char *dense_part_names[BENCH_MAX_PARTS];
    double dense_part_us[BENCH_MAX_PARTS];
    /* a benchmark with saved_bytes: the activations kept for the backward, its own and the
     * dense step's; -1 otherwise */
    int64_t saved_bytes, dense_saved_bytes;
} bench_result;

/* The benchmark named name: an op with a harness (*op set) or a benchmark of the table (*bench
 * set); SJ_ERR_INVALID_ARGUMENT naming both lists otherwise. */
sj_status bench_find(const char *name, const op_desc **op, const op_bench **bench);
/* Useful FLOPs of one run of the benchmark named name on p (a valid problem of its op): what
 * bench_run reports, and for an op what the tuner counts. */
sj_status bench_flops(const char *name, const sj_problem *p, double *flops);
/* Checks, then times, the benchmark named name on p (a problem of its op) and its baseline;
 * SJ_ERR_VERIFY, timing nothing, when the check exceeds the tuner's tolerance. A failed
 * baseline is not an error: out->cublas_error says why. */
sj_status bench_run(sj_context *ctx, const char *name, const sj_problem *p, const bench_options *o,
                    bench_result *out);

#endif
