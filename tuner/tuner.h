/* tuner.h: the tuner's internal modules. search.c walks a template's space (pure C, no GPU);
 * measure.c is the benchmark method (device events, L2 flush, warm-up and repetition budgets,
 * median with 20/80% quantiles); cublas_baseline.c times an op's dense baseline (cuBLAS GEMMs,
 * a dense FFN's element-wise product) with that method. The orchestration (tuner.c) is the
 * public sj_tune / sj_bench; bench.c (bench.h) is the one benchmark path. */
#ifndef SJ_TUNER_H
#define SJ_TUNER_H

#include <stdint.h>
#include "sparsejit.h"
#include "generator/generator.h"
#include "runtime/cuda_driver.h"

/* ------------------------------------------------------------------ search (search.c) */

/* Answers whether cfg (text: its canonical form) is valid for the problem being tuned. */
typedef sj_status (*search_valid_fn)(void *user, const gen_config *cfg, const char *text, int *valid);

#define SEARCH_MAX_FIRST 8

typedef struct search_options {
    sj_tune_strategy strategy;
    int budget_trials;       /* 0: all (exhaustive) or the default share of the space (random) */
    double budget_seconds;   /* 0: no limit */
    uint64_t seed;
    /* random strategy: configs measured first, in this order (the template's default, so a
     * budgeted winner is never slower than what an untuned call gets, then each variant's own
     * default, so every variant is seen at its best); NULL entries, configs outside the space
     * or invalid for the problem, and repeats are skipped */
    const char *first[SEARCH_MAX_FIRST];
} search_options;

/* One config the search wants measured. */
typedef struct search_candidate {
    int id;                  /* issue number, 0, 1, ...: pass it back to search_report */
    uint64_t index;          /* position in the stable order (mixed radix over params) */
    char config[256];        /* canonical text */
} search_candidate;

typedef enum search_step {
    SEARCH_CANDIDATE = 0,    /* *out holds the next candidate */
    SEARCH_WAIT = 1,         /* the next candidates depend on results still pending */
    SEARCH_DONE = 2          /* nothing more will be issued */
} search_step;

typedef struct search_entry {
    uint64_t index;
    char config[256];
    int finished;
    double time_us;          /* > 0 when measured, else rejected */
} search_entry;

typedef struct search {
    gen_space space;         /* values deduplicated, in declared order */
    search_valid_fn valid;
    void *user;
    search_options opts;
    uint64_t total;          /* size of the cartesian product */
    uint64_t *valid_list;    /* all valid indices in stable order, when total is small enough */
    int n_valid;             /* -1: not enumerated (space too large to count) */
    int pruned;              /* configs the validity predicate refused (counted while enumerating) */
    int budget;              /* candidates to issue at most */
    int n_random;            /* random strategy: size of the sampling stage */
    uint64_t *batch;         /* random strategy: the model's current batch (SEARCH_BATCH) */
    int batch_len, batch_pos;
    uint64_t cursor;         /* exhaustive: next index / valid_list position */
    uint64_t rng;
    int random_drawn;        /* positions of valid_list already used by the sampling shuffle */
    uint64_t *shuffle;       /* random strategy over valid_list: the seeded permutation */
    uint64_t first_index[SEARCH_MAX_FIRST]; /* random strategy: opts.first found in the space */
    int n_first, first_pos;  /* ... how many, and how many were issued or skipped */
    search_entry *entries;   /* in issue order */
    int n_entries, cap_entries;
    int pending;             /* issued, not yet reported */
    uint64_t *set_keys;      /* visited set: open addressing over index + 1 (0 = empty) */
    size_t set_cap;
    int exhausted;           /* no unvisited valid config can be found */
} search;

/* Spaces whose cartesian product is at most this are enumerated up front (valid count known). */
#define SEARCH_MAX_ENUMERATE 65536
/* The model stage issues batches of this many (compiled in parallel), half of them within
 * SEARCH_NEAR changed parameters of the best config so far. */
#define SEARCH_BATCH 16
#define SEARCH_NEAR 2

sj_status search_init(search *s, const gen_space *space, search_valid_fn valid, void *user,
                      const search_options *opts);
void search_free(search *s);
/* elapsed_s: seconds since tuning began (checked against budget_seconds). */
sj_status search_next(search *s, double elapsed_s, search_step *step, search_candidate *out);
/* time_us > 0: measured; <= 0: rejected. */
sj_status search_report(search *s, int id, double time_us);
/* Candidates the search plans to issue (for progress), or -1 when unknown. */
int search_planned(const search *s);
/* The winner: the fastest measured entry; entries within tie_frac of it go to the earliest in
 * stable order. -1 when none was measured. */
int search_best(const search *s, double tie_frac);
/* The run-off's rule: finalist i is scored by the median of its n_rounds timings
 * (times[i * n_rounds + r], n_rounds <= 16); the fastest wins, ties within tie_frac going to the
 * smaller stable index. Returns the winner's position in 0..n-1 (-1 if n < 1) and, in
 * *median_round, the round whose timing was its score. */
int search_runoff_pick(int n, int n_rounds, const double *times, const uint64_t *index, double tie_frac,
                       int *median_round);

/* ------------------------------------------------------------------ measurement (measure.c) */

/* Enqueues one run of the timed work on the default stream (asynchronous). */
typedef sj_status (*measure_launch_fn)(void *user);

typedef struct measure_options {
    double warmup_ms;        /* default 25 */
    double rep_ms;           /* default 100 */
    int min_reps;            /* default 10 */
    int max_reps;            /* default 10000 */
    double max_spread;       /* (p80 - p20) / median above this is noisy: measured again (0.05) */
    int retries;             /* measurements again when noisy (default 2) */
} measure_options;

void measure_options_init(measure_options *o);
void measure_options_from_tune(const sj_tune_options *t, measure_options *o);

typedef struct measure_result {
    double median_us, p20_us, p80_us, min_us;
    int reps;
    int noisy;               /* the spread stayed above max_spread after the retries */
} measure_result;

/* Device scratch shared by the measurements of one session: the L2-flush buffer and events. */
typedef struct measure_session {
    sj_context *ctx;
    sj_devptr flush;
    size_t flush_bytes;
    CUevent *events;         /* start/stop pairs, one per timed run */
    int n_events;
} measure_session;

sj_status measure_begin(sj_context *ctx, measure_session *m);
void measure_end(measure_session *m);
/* Times fn: estimate one call, derive warm-up and repetition counts from the ms budgets,
 * flush L2 before each timed run, events around each run, median and quantiles. */
sj_status measure_run(measure_session *m, const measure_options *o, measure_launch_fn fn, void *user,
                      measure_result *out);
/* Quantile q in [0,1] of sorted values (linear interpolation). */
double measure_quantile(const double *sorted, int n, double q);

/* ------------------------------------------------------------------ cuBLAS baseline (cublas_baseline.c) */

/* Median time of C = A.B (row-major, A m x k, B k x n, C m x n in dtype, fp32 compute) through
 * cublasGemmEx, timed like a candidate. libcublas.so.13 is loaded on first use: without it the
 * call fails with SJ_ERR_UNSUPPORTED and says so; nothing else needs it. */
sj_status cublas_gemm_time(sj_context *ctx, sj_dtype dtype, int64_t m, int64_t n, int64_t k,
                              double *median_us);
/* Several GEMMs run back to back in each timed run; shapes[i] = {m, n, k}. opts NULL: the default
 * budgets. */
sj_status cublas_gemm_seq_time(sj_context *ctx, sj_dtype dtype, int n_gemms, const int64_t shapes[][3],
                                  const measure_options *opts, measure_result *out);
/* An op's baseline (tuner/harness.h's baseline_step): its GEMMs on cuBLAS and its element-wise
 * products (templates/ewise_product.lua) back to back in each timed run, each step on buffers
 * of its own (1..BASELINE_MAX steps), written on the device by the input generator. opts NULL:
 * the default budgets. cublas_baseline_time opens, runs once and closes; a bench's rounds open
 * once and run the same buffers each round; cublas_baseline_run_steps times the count steps from
 * first alone (a part of the baseline: a training step's forward or backward). */
typedef struct baseline_step baseline_step;
typedef struct cublas_baseline cublas_baseline;
sj_status cublas_baseline_open(sj_context *ctx, sj_dtype dtype, int n_steps, const baseline_step *steps,
                               cublas_baseline **out);
sj_status cublas_baseline_run(cublas_baseline *b, const measure_options *opts, measure_result *out);
sj_status cublas_baseline_run_steps(cublas_baseline *b, int first, int count, const measure_options *opts,
                                    measure_result *out);
void cublas_baseline_close(cublas_baseline *b);
sj_status cublas_baseline_time(sj_context *ctx, sj_dtype dtype, int n_steps, const baseline_step *steps,
                               const measure_options *opts, measure_result *out);

#endif
