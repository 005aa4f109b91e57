/* tuner.c: sj_tune and sj_bench (through bench.c). Owns the tuning pipeline: the search (search.c) proposes
 * configs; the calling thread generates their source (the Lua state is single-threaded) and
 * hands it to a pool of NVRTC threads; as cubins come back the calling thread loads each one,
 * gates it against the reference output (harness.c) and times it (measure.c) while the pool
 * compiles the next. The sweep's few fastest candidates are then timed again in interleaved
 * rounds (a run-off): one timing each in a sweep of thousands lets noise, not speed, pick among
 * near-equal configs. The trials and the winner go to the cache in one transaction and the
 * runtime's resolved kernel for the problem is dropped, so the next op call loads the winner. */
#include "core/op.h"
#include "tuner/tuner.h"
#include "tuner/harness.h"
#include "tuner/bench.h"
#include "core/error.h"
#include "runtime/runtime.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIE_FRACTION 0.005 /* medians within 0.5% are a tie: the stable order decides */
#define FINALISTS 4        /* the sweep's fastest, re-timed side by side before the winner is named */
#define RUNOFF_ROUNDS 3
#define MAX_THREADS 64

const char *sj_tune_strategy_name(sj_tune_strategy s)
{
    switch (s) {
    case SJ_TUNE_EXHAUSTIVE: return "exhaustive";
    case SJ_TUNE_RANDOM: return "random";
    }
    return NULL;
}

sj_status sj_tune_strategy_parse(const char *name, sj_tune_strategy *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_tune_strategy_parse: out is NULL");
    if (name && !strcmp(name, "exhaustive")) *out = SJ_TUNE_EXHAUSTIVE;
    else if (name && !strcmp(name, "random")) *out = SJ_TUNE_RANDOM;
    else return error_set(SJ_ERR_INVALID_ARGUMENT, "strategy '%s': expected exhaustive or random", name ? name : "(null)");
    return SJ_OK;
}

void sj_tune_options_init(sj_tune_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->strategy = SJ_TUNE_RANDOM;
    o->seed = 1;
    o->warmup_ms = 25;
    o->rep_ms = 100;
    o->min_reps = 10;
    o->save = 1;
}

void sj_tune_result_free(sj_tune_result *r)
{
    if (!r) return;
    free(r->trials);
    r->trials = NULL;
    r->n_trials = 0;
}

/* ------------------------------------------------------------------ the compile pool */

typedef struct job {
    int id;                  /* search candidate id */
    char config[256];
    sj_generated *gen;       /* the candidate's source; freed by the worker once compiled */
    cache_kernel built;      /* what build_compile made of it: cubin, entry, geometry, seconds */
    sj_status status;
    char error[512];         /* first line of the failure */
    struct job *next;
} job;

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    job *todo, *todo_tail, *fin, *fin_tail;
    int stop;
    char arch[16];
    pthread_t threads[MAX_THREADS];
    int n_threads;
} pool;

static void job_free(job *j)
{
    if (!j) return;
    sj_generated_free(j->gen);
    free(j->built.cubin);
    free(j);
}

static void first_line(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%.*s", (int)strcspn(src, "\n"), src);
}

static void *worker(void *arg)
{
    pool *pl = arg;
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        while (!pl->stop && !pl->todo) pthread_cond_wait(&pl->work, &pl->mu);
        if (pl->stop) {
            pthread_mutex_unlock(&pl->mu);
            return NULL;
        }
        job *j = pl->todo;
        pl->todo = j->next;
        if (!pl->todo) pl->todo_tail = NULL;
        pthread_mutex_unlock(&pl->mu);

        j->status = build_compile(j->gen, pl->arch, &j->built, NULL);
        if (j->status != SJ_OK) first_line(j->error, sizeof j->error, sj_last_error()); /* thread-local */
        sj_generated_free(j->gen);
        j->gen = NULL;
        j->next = NULL;

        pthread_mutex_lock(&pl->mu);
        if (pl->fin_tail) pl->fin_tail->next = j;
        else pl->fin = j;
        pl->fin_tail = j;
        pthread_cond_signal(&pl->done);
        pthread_mutex_unlock(&pl->mu);
    }
}

static sj_status pool_start(pool *pl, const char *arch, int threads)
{
    memset(pl, 0, sizeof *pl);
    snprintf(pl->arch, sizeof pl->arch, "%s", arch);
    if (pthread_mutex_init(&pl->mu, NULL) || pthread_cond_init(&pl->work, NULL) || pthread_cond_init(&pl->done, NULL))
        return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: could not create the compile pool's lock");
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&pl->threads[i], NULL, worker, pl) != 0) {
            if (pl->n_threads > 0) break; /* fewer threads than asked still work */
            return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: could not start a compile thread");
        }
        pl->n_threads++;
    }
    return SJ_OK;
}

static void pool_submit(pool *pl, job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&pl->mu);
    if (pl->todo_tail) pl->todo_tail->next = j;
    else pl->todo = j;
    pl->todo_tail = j;
    pthread_cond_signal(&pl->work);
    pthread_mutex_unlock(&pl->mu);
}

static job *pool_wait(pool *pl)
{
    pthread_mutex_lock(&pl->mu);
    while (!pl->fin) pthread_cond_wait(&pl->done, &pl->mu);
    job *j = pl->fin;
    pl->fin = j->next;
    if (!pl->fin) pl->fin_tail = NULL;
    pthread_mutex_unlock(&pl->mu);
    return j;
}

/* Stops the threads once their current compile ends; frees every job not yet handed out. */
static void pool_stop(pool *pl)
{
    pthread_mutex_lock(&pl->mu);
    pl->stop = 1;
    pthread_cond_broadcast(&pl->work);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->n_threads; i++) pthread_join(pl->threads[i], NULL);
    for (job *j = pl->todo, *n; j; j = n) { n = j->next; job_free(j); }
    for (job *j = pl->fin, *n; j; j = n) { n = j->next; job_free(j); }
    pthread_cond_destroy(&pl->done);
    pthread_cond_destroy(&pl->work);
    pthread_mutex_destroy(&pl->mu);
}

/* ------------------------------------------------------------------ one tuning run */

typedef struct tuner {
    sj_context *ctx;
    const sj_problem *p;
    sj_tune_options opts;
    const char *tname;
    gen_state *gen;
    search s;
    pool pl;
    harness h;
    measure_session ms;
    measure_options mo;
    double flops, tol, t0;
    int in_flight;           /* generated, handed to the pool, not yet evaluated */
    int issuing_done;
    int stopped;             /* the progress callback asked to stop */
    sj_tune_result *res;
    int cap_trials;
    job **kept;              /* by candidate id: compiled kernels that may still win */
    int cap_kept;
    double best_us;
    char best_config[256];
    char last_reason[600];
} tuner;

static sj_status valid_cb(void *user, const gen_config *cfg, const char *text, int *valid)
{
    tuner *t = user;
    char reason[256];
    return gen_config_valid(t->gen, t->tname, t->p, text, valid, reason, sizeof reason);
}

static sj_status add_trial(tuner *t, const sj_tune_trial *tr)
{
    sj_tune_result *r = t->res;
    if (r->n_trials == t->cap_trials) {
        int cap = t->cap_trials ? t->cap_trials * 2 : 64;
        sj_tune_trial *p = realloc(r->trials, sizeof *p * (size_t)cap);
        if (!p) return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: out of memory for %d trials", cap);
        r->trials = p;
        t->cap_trials = cap;
    }
    r->trials[r->n_trials++] = *tr;
    return SJ_OK;
}

static sj_status keep(tuner *t, job *j)
{
    if (j->id >= t->cap_kept) {
        int cap = t->cap_kept ? t->cap_kept : 64;
        while (cap <= j->id) cap *= 2;
        job **p = realloc(t->kept, sizeof *p * (size_t)cap);
        if (!p) return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: out of memory");
        memset(p + t->cap_kept, 0, sizeof *p * (size_t)(cap - t->cap_kept));
        t->kept = p;
        t->cap_kept = cap;
    }
    t->kept[j->id] = j;
    return SJ_OK;
}

/* Keeps the cubins of the FINALISTS fastest candidates so far: the run-off's field. */
static void prune_kept(tuner *t)
{
    for (;;) {
        int n = 0, slowest = -1;
        for (int i = 0; i < t->cap_kept; i++) {
            if (!t->kept[i]) continue;
            n++;
            if (slowest < 0 || t->s.entries[i].time_us > t->s.entries[slowest].time_us) slowest = i;
        }
        if (n <= FINALISTS) return;
        job_free(t->kept[slowest]);
        t->kept[slowest] = NULL;
    }
}

static void report_progress(tuner *t, const sj_tune_trial *tr);

/* Asks the search for candidates until the pool holds enough work. */
static sj_status top_up(tuner *t)
{
    int want = 2 * t->pl.n_threads;
    while (!t->issuing_done && t->in_flight < want) {
        search_step step;
        search_candidate c;
        sj_status st = search_next(&t->s, rt_seconds() - t->t0, &step, &c);
        if (st != SJ_OK) return st;
        if (step == SEARCH_DONE) t->issuing_done = 1;
        if (step != SEARCH_CANDIDATE) return SJ_OK;
        sj_generated *g = NULL;
        st = rt_generate(t->ctx, t->p, t->tname, c.config, &g);
        if (st != SJ_OK) {
            /* A template that claims a config valid but cannot generate it: the candidate loses. */
            sj_tune_trial tr = { .rel_error = -1 };
            snprintf(tr.config, sizeof tr.config, "%s", c.config);
            snprintf(tr.status, sizeof tr.status, "generate-error");
            snprintf(t->last_reason, sizeof t->last_reason, "%s: generate-error: %s", c.config, sj_last_error());
            t->res->trials_rejected++;
            t->res->trials_done++;
            if ((st = add_trial(t, &tr)) != SJ_OK || (st = search_report(&t->s, c.id, 0)) != SJ_OK) return st;
            report_progress(t, &tr);
            continue;
        }
        job *j = calloc(1, sizeof *j);
        if (!j) {
            sj_generated_free(g);
            return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: out of memory");
        }
        j->id = c.id;
        snprintf(j->config, sizeof j->config, "%s", c.config);
        j->gen = g;
        pool_submit(&t->pl, j);
        t->in_flight++;
    }
    return SJ_OK;
}

typedef struct launch_arg { harness *h; const loaded_kernel *k; } launch_arg;

static sj_status launch_candidate(void *user)
{
    launch_arg *a = user;
    return a->h->ops->launch(a->h, a->k, NULL);
}

/* After a failed launch or timing: is the context still usable? */
static int context_lost(void) { return cu.cuCtxSynchronize() != CUDA_SUCCESS; }

/* Loads, gates and times one compiled candidate. SJ_OK unless the whole run must stop (the
 * CUDA context was lost); the trial's status says how the candidate fared. */
static sj_status evaluate(tuner *t, job *j, sj_tune_trial *tr, int *kept)
{
    *kept = 0;
    memset(tr, 0, sizeof *tr);
    snprintf(tr->config, sizeof tr->config, "%s", j->config);
    tr->compile_seconds = j->built.compile_seconds;
    tr->rel_error = -1;
    rt_count_compile(t->ctx, j->built.compile_seconds);
    if (j->status != SJ_OK) {
        snprintf(tr->status, sizeof tr->status, "compile-error");
        snprintf(t->last_reason, sizeof t->last_reason, "%s: compile-error: %s", j->config, j->error);
        return SJ_OK;
    }
    loaded_kernel k;
    sj_status st = rt_module_load(t->ctx, t->p, &j->built, t->tname, SJ_FROM_COMPILE, &k);
    if (st != SJ_OK) {
        snprintf(tr->status, sizeof tr->status, "load-error");
        snprintf(t->last_reason, sizeof t->last_reason, "%s: load-error: %s", j->config, sj_last_error());
        return SJ_OK;
    }
    int sticky = 0;
    double err;
    st = harness_check(&t->h, &k, &err, &sticky);
    if (st != SJ_OK) {
        rt_module_unload(&k);
        if (sticky) return error_prefix(st, "tuning stopped at config %s", j->config);
        snprintf(tr->status, sizeof tr->status, "launch-error");
        snprintf(t->last_reason, sizeof t->last_reason, "%s: launch-error: %s", j->config, sj_last_error());
        return SJ_OK;
    }
    tr->rel_error = err;
    if (!(err <= t->tol)) {
        rt_module_unload(&k);
        snprintf(tr->status, sizeof tr->status, "wrong-result");
        snprintf(t->last_reason, sizeof t->last_reason, "%s: wrong-result: relative error %.3g > %.3g", j->config,
                 err, t->tol);
        return SJ_OK;
    }
    launch_arg a = { &t->h, &k };
    measure_result mr;
    st = measure_run(&t->ms, &t->mo, launch_candidate, &a, &mr);
    rt_module_unload(&k);
    if (st != SJ_OK) {
        if (context_lost()) return error_prefix(st, "tuning stopped while timing config %s", j->config);
        snprintf(tr->status, sizeof tr->status, "launch-error");
        snprintf(t->last_reason, sizeof t->last_reason, "%s: launch-error: %s", j->config, sj_last_error());
        return SJ_OK;
    }
    snprintf(tr->status, sizeof tr->status, "%s", mr.noisy ? "noisy" : "ok");
    tr->median_us = mr.median_us;
    tr->p20_us = mr.p20_us;
    tr->p80_us = mr.p80_us;
    tr->tflops = t->flops > 0 ? t->flops / (mr.median_us * 1e-6) / 1e12 : 0;
    *kept = 1; /* a finalist until FINALISTS faster ones are in */
    return SJ_OK;
}

static int rejected(const sj_tune_trial *tr) { return strcmp(tr->status, "ok") && strcmp(tr->status, "noisy"); }

static void report_progress(tuner *t, const sj_tune_trial *tr)
{
    if (!t->opts.progress) return;
    double elapsed = rt_seconds() - t->t0;
    int done = t->res->trials_done, planned = search_planned(&t->s);
    double eta = -1;
    if (planned > 0 && done > 0) eta = elapsed / done * (planned > done ? planned - done : 0);
    if (t->opts.budget_seconds > 0) {
        double left = t->opts.budget_seconds - elapsed;
        if (left < 0) left = 0;
        if (eta < 0 || left < eta) eta = left;
    }
    sj_tune_progress pr = {
        .done = done, .total = planned, .rejected = t->res->trials_rejected, .config = tr->config,
        .status = tr->status, .median_us = tr->median_us, .best_config = t->best_config, .best_us = t->best_us,
        .elapsed_s = elapsed, .eta_s = eta,
    };
    if (t->opts.progress(t->opts.progress_user, &pr)) t->issuing_done = t->stopped = 1;
}

/* The main loop: keep the pool fed, evaluate compiled candidates as they arrive. */
static sj_status run_pipeline(tuner *t)
{
    sj_status st;
    for (;;) {
        if ((st = top_up(t)) != SJ_OK) return st;
        if (t->in_flight == 0) {
            if (t->issuing_done) return SJ_OK;
            return error_set(SJ_ERR_INVALID_ARGUMENT, "tuner: the search waits for results but none are pending");
        }
        job *j = pool_wait(&t->pl);
        t->in_flight--;
        if (t->stopped) { /* the caller asked to stop: what is still compiling is dropped */
            job_free(j);
            continue;
        }
        sj_tune_trial tr;
        int keep_it = 0;
        st = evaluate(t, j, &tr, &keep_it);
        if (st != SJ_OK) {
            job_free(j);
            return st;
        }
        int bad = rejected(&tr);
        t->res->trials_done++;
        t->res->trials_rejected += bad;
        t->res->compile_seconds += tr.compile_seconds;
        if ((st = add_trial(t, &tr)) != SJ_OK || (st = search_report(&t->s, j->id, bad ? 0 : tr.median_us)) != SJ_OK) {
            job_free(j);
            return st;
        }
        if (keep_it) {
            /* The winner is chosen at the end; keep the cubins that may still win. */
            if ((st = keep(t, j)) != SJ_OK) {
                job_free(j);
                return st;
            }
            prune_kept(t);
            if (t->best_us == 0 || tr.median_us < t->best_us) {
                t->best_us = tr.median_us;
                snprintf(t->best_config, sizeof t->best_config, "%s", tr.config);
            }
        } else {
            job_free(j);
        }
        report_progress(t, &tr);
    }
}

/* The run-off: the kept finalists timed again in RUNOFF_ROUNDS interleaved rounds (so a clock
 * drift hits them all alike); each scores the median of its round medians, and the fastest wins,
 * ties within TIE_FRACTION going to the stable order. *winner is the sweep's pick on entry. */
static sj_status run_off(tuner *t, int *winner, measure_result *won)
{
    int ids[FINALISTS], n = 0;
    for (int i = 0; i < t->cap_kept && n < FINALISTS; i++)
        if (t->kept[i]) ids[n++] = i;
    t->res->finalists = 0;
    if (n < 2) return SJ_OK;
    loaded_kernel k[FINALISTS];
    measure_result mr[FINALISTS][RUNOFF_ROUNDS];
    sj_status st = SJ_OK;
    int loaded = 0;
    for (; loaded < n; loaded++) {
        const job *j = t->kept[ids[loaded]];
        st = rt_module_load(t->ctx, t->p, &j->built, t->tname, SJ_FROM_COMPILE, &k[loaded]);
        if (st != SJ_OK) goto done;
    }
    for (int r = 0; r < RUNOFF_ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            launch_arg a = { &t->h, &k[i] };
            if ((st = measure_run(&t->ms, &t->mo, launch_candidate, &a, &mr[i][r])) != SJ_OK)
                goto done;
        }
    double times[FINALISTS * RUNOFF_ROUNDS];
    uint64_t index[FINALISTS];
    for (int i = 0; i < n; i++) {
        index[i] = t->s.entries[ids[i]].index;
        for (int r = 0; r < RUNOFF_ROUNDS; r++) times[i * RUNOFF_ROUNDS + r] = mr[i][r].median_us;
    }
    int round = 0, best = search_runoff_pick(n, RUNOFF_ROUNDS, times, index, TIE_FRACTION, &round);
    *winner = ids[best];
    *won = mr[best][round];
    t->res->finalists = n;
done:
    for (int i = 0; i < loaded; i++) rt_module_unload(&k[i]);
    if (st != SJ_OK) st = error_prefix(st, "tuner: the run-off of the %d fastest configs", n);
    return st;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int t = n > 1 ? (int)n - 1 : 1;
    return t > MAX_THREADS ? MAX_THREADS : t;
}

/* Stores the trials and the winner in one transaction, then forgets the resolved kernel. */
static sj_status save(tuner *t, const job *w)
{
    sj_tune_result *r = t->res;
    cache_key key;
    sj_status st = rt_cache_key(t->ctx, t->p, t->tname, &key);
    if (st != SJ_OK) return st;
    cache_trial *ct = calloc((size_t)r->n_trials, sizeof *ct);
    if (!ct) return error_set(SJ_ERR_OUT_OF_MEMORY, "tuner: out of memory for %d trials", r->n_trials);
    for (int i = 0; i < r->n_trials; i++) {
        const sj_tune_trial *tr = &r->trials[i];
        snprintf(ct[i].config, sizeof ct[i].config, "%s", tr->config);
        snprintf(ct[i].status, sizeof ct[i].status, "%s", tr->status);
        ct[i].median_us = tr->median_us;
        ct[i].p20_us = tr->p20_us;
        ct[i].p80_us = tr->p80_us;
        ct[i].tflops = tr->tflops;
        ct[i].compile_seconds = tr->compile_seconds;
    }
    cache_winner cw;
    memset(&cw, 0, sizeof cw);
    snprintf(cw.config, sizeof cw.config, "%s", r->config);
    cw.median_us = r->median_us;
    cw.tflops = r->tflops;
    snprintf(cw.strategy, sizeof cw.strategy, "%s", r->strategy);
    cw.tuned_at = (int64_t)time(NULL);
    /* An exhaustive run is authoritative; a budgeted one replaces the winner only if faster. */
    st = cache_put_tuning(t->ctx->cache, &key, ct, r->n_trials, &cw, &w->built, t->opts.strategy == SJ_TUNE_EXHAUSTIVE);
    free(ct);
    if (st != SJ_OK) return st;
    kernel_table_forget(&t->ctx->table, t->p);
    r->saved = 1;
    return SJ_OK;
}

sj_status sj_tune(sj_context *ctx, const sj_problem *p, const sj_tune_options *opts, sj_tune_result *res)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !p || !res)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_tune: %s is NULL", !ctx ? "ctx" : !p ? "problem" : "result");
    memset(res, 0, sizeof *res);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    tuner *t = calloc(1, sizeof *t);
    if (!t) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_tune: out of memory");
    t->ctx = ctx;
    t->p = p;
    t->res = res;
    if (opts) t->opts = *opts;
    else sj_tune_options_init(&t->opts);
    int pool_up = 0, session = 0, search_up = 0;
    const harness_ops *hops;
    if (!sj_tune_strategy_name(t->opts.strategy)) {
        st = error_set(SJ_ERR_INVALID_ARGUMENT, "sj_tune: opts.strategy %d is neither exhaustive nor random",
                     (int)t->opts.strategy);
        goto done;
    }
    if (t->opts.threads < 0 || t->opts.threads > MAX_THREADS) {
        st = error_set(SJ_ERR_INVALID_ARGUMENT, "sj_tune: opts.threads %d: expected 0 (automatic) .. %d",
                     t->opts.threads, MAX_THREADS);
        goto done;
    }
    if ((st = rt_require_gpu(ctx, "tuning")) != SJ_OK || (st = harness_for(p, &hops)) != SJ_OK ||
        (st = op_template(p->op, &t->tname)) != SJ_OK || (st = rt_generator(ctx, &t->gen)) != SJ_OK)
        goto done;
    snprintf(res->template_name, sizeof res->template_name, "%s", t->tname);
    snprintf(res->strategy, sizeof res->strategy, "%s", sj_tune_strategy_name(t->opts.strategy));
    t->t0 = rt_seconds();

    gen_space space;
    if ((st = gen_space_of(t->gen, t->tname, p, &space)) != SJ_OK) goto done;
    char dflt[256];
    if ((st = gen_default_config(t->gen, t->tname, p, dflt, sizeof dflt)) != SJ_OK) goto done;
    char variants[GEN_MAX_VARIANTS][256];
    int n_variants = 0;
    if ((st = gen_variant_configs(t->gen, t->tname, p, variants, GEN_MAX_VARIANTS, &n_variants)) != SJ_OK) goto done;
    search_options so = { .strategy = t->opts.strategy, .budget_trials = t->opts.budget_trials,
                          .budget_seconds = t->opts.budget_seconds, .seed = t->opts.seed, .first = { dflt } };
    for (int i = 0; i < n_variants && i + 1 < SEARCH_MAX_FIRST; i++) so.first[i + 1] = variants[i];
    if ((st = search_init(&t->s, &space, valid_cb, t, &so)) != SJ_OK) goto done;
    search_up = 1;
    res->space_size = t->s.n_valid;
    t->tol = harness_tolerance(p);
    t->flops = hops->flops(p); /* useful work: a template's flops() cannot see TwELL's data */
    measure_options_from_tune(&t->opts, &t->mo);

    if ((st = pool_start(&t->pl, ctx->arch, t->opts.threads ? t->opts.threads : default_threads())) != SJ_OK)
        goto done;
    pool_up = 1;
    /* The first compiles run while the inputs and the reference are prepared. */
    if ((st = top_up(t)) != SJ_OK) goto done;
    if ((st = harness_open(ctx, p, t->opts.seed ^ 0x5eedull, HARNESS_REFERENCE, &t->h)) != SJ_OK) goto done;
    if ((st = measure_begin(ctx, &t->ms)) != SJ_OK) goto done;
    session = 1;
    if ((st = run_pipeline(t)) != SJ_OK) goto done;

    int best = search_best(&t->s, TIE_FRACTION);
    if (best < 0) {
        st = error_set(SJ_ERR_VERIFY, "sj_tune: none of the %d candidates passed (%d rejected); last: %s",
                     res->trials_done, res->trials_rejected, t->last_reason);
        goto done;
    }
    measure_result won = { 0 };
    if ((st = run_off(t, &best, &won)) != SJ_OK) goto done;
    const job *w = best < t->cap_kept ? t->kept[best] : NULL;
    for (int i = 0; i < res->n_trials; i++)
        if (!strcmp(res->trials[i].config, t->s.entries[best].config)) {
            const sj_tune_trial *tr = &res->trials[i];
            snprintf(res->config, sizeof res->config, "%s", tr->config);
            res->median_us = tr->median_us;
            res->p20_us = tr->p20_us;
            res->p80_us = tr->p80_us;
            res->tflops = tr->tflops;
        }
    if (res->finalists > 0) { /* the run-off's timing of the winner, not the sweep's */
        res->median_us = won.median_us;
        res->p20_us = won.p20_us;
        res->p80_us = won.p80_us;
        res->tflops = t->flops > 0 ? t->flops / (won.median_us * 1e-6) / 1e12 : 0;
    }
    if (!w) {
        st = error_set(SJ_ERR_INVALID_ARGUMENT, "sj_tune: the winner's cubin (%s) was not kept", res->config);
        goto done;
    }
    res->seconds = rt_seconds() - t->t0;
    if (t->opts.save && ctx->cache && !cache_read_only(ctx->cache)) st = save(t, w);
    else if (t->opts.save && ctx->cache) /* the result stands; the caller learns it was not kept */
        rt_log(ctx, "the tuned winner %s was not stored: the cache %s is read-only", res->config, ctx->cache_path);

done:
    if (pool_up) pool_stop(&t->pl);
    if (session) measure_end(&t->ms);
    harness_close(&t->h);
    for (int i = 0; i < t->cap_kept; i++) job_free(t->kept[i]);
    free(t->kept);
    if (search_up) search_free(&t->s);
    if (res->seconds == 0 && t->t0 > 0) res->seconds = rt_seconds() - t->t0;
    free(t);
    if (st != SJ_OK) sj_tune_result_free(res);
    return st;
}

/* ------------------------------------------------------------------ bench */

/* The op alone through bench_run, the path `sparsejit bench` takes: the same inputs, check and
 * FLOP count, without the baseline. */
sj_status sj_bench(sj_context *ctx, const sj_problem *p, const sj_tune_options *opts, sj_bench_result *res)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !p || !res)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_bench: %s is NULL", !ctx ? "ctx" : !p ? "problem" : "result");
    memset(res, 0, sizeof *res);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    bench_options o;
    bench_options_init(&o);
    measure_options_from_tune(opts, &o.measure);
    o.cublas = 0;
    o.seed = opts ? opts->seed ^ 0xbe7cull : 0xbe7cull;
    bench_result r;
    if ((st = bench_run(ctx, sj_op_name(p->op), p, &o, &r)) != SJ_OK) return st;
    *res = r.run;
    return SJ_OK;
}
