/* measure.c: the one benchmark method of sparsejit (tuner trials, sj_bench, the cuBLAS baseline).
 * Estimate one call, derive warm-up and repetition counts from millisecond budgets, write an
 * L2-sized buffer before every timed run so each starts with a cold cache, put device events
 * around each run, and report the median with 20/80% quantiles; a measurement whose spread stays
 * large is taken again and flagged noisy if it does not settle. */
#include "tuner/tuner.h"
#include "core/error.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void measure_options_init(measure_options *o)
{
    o->warmup_ms = 25;
    o->rep_ms = 100;
    o->min_reps = 10;
    o->max_reps = 1000;
    o->max_spread = 0.05;
    o->retries = 2;
}

void measure_options_from_tune(const sj_tune_options *t, measure_options *o)
{
    measure_options_init(o);
    if (!t) return;
    if (t->warmup_ms > 0) o->warmup_ms = t->warmup_ms;
    if (t->rep_ms > 0) o->rep_ms = t->rep_ms;
    if (t->min_reps > 0) o->min_reps = t->min_reps;
    if (o->max_reps < o->min_reps) o->max_reps = o->min_reps;
}

double measure_quantile(const double *sorted, int n, double q)
{
    if (n <= 0) return 0;
    double pos = q * (double)(n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    return sorted[lo] + (pos - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

sj_status measure_begin(sj_context *ctx, measure_session *m)
{
    memset(m, 0, sizeof *m);
    sj_status st = rt_require_gpu(ctx, "timing a kernel");
    if (st != SJ_OK) return st;
    m->ctx = ctx;
    CU_CHECK(cu.cuCtxSetCurrent(ctx->cu_ctx), "cuCtxSetCurrent");
    /* Twice the L2, so no line of the previous run's inputs survives the flush. */
    size_t l2 = ctx->info.l2_bytes ? ctx->info.l2_bytes : ((size_t)64 << 20);
    m->flush_bytes = (2 * l2 + 3) & ~(size_t)3;
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc(&p, m->flush_bytes);
    if (r != CUDA_SUCCESS) return cuda_error(r, "allocating the L2 flush buffer");
    m->flush = (sj_devptr)p;
    return SJ_OK;
}

void measure_end(measure_session *m)
{
    if (!m->ctx) return;
    for (int i = 0; i < m->n_events; i++) cu.cuEventDestroy(m->events[i]);
    free(m->events);
    if (m->flush) cu.cuMemFree((CUdeviceptr)m->flush);
    memset(m, 0, sizeof *m);
}

static sj_status need_events(measure_session *m, int n)
{
    if (n <= m->n_events) return SJ_OK;
    CUevent *e = realloc(m->events, sizeof *e * (size_t)n);
    if (!e) return error_set(SJ_ERR_OUT_OF_MEMORY, "measure: out of memory for %d events", n);
    m->events = e;
    while (m->n_events < n) {
        CU_CHECK(cu.cuEventCreate(&m->events[m->n_events], CU_EVENT_DEFAULT), "cuEventCreate");
        m->n_events++;
    }
    return SJ_OK;
}

static sj_status flush_l2(measure_session *m, unsigned value)
{
    CU_CHECK(cu.cuMemsetD32((CUdeviceptr)m->flush, value, m->flush_bytes / 4), "flushing L2 (cuMemsetD32)");
    return SJ_OK;
}

/* reps timed runs, each after a flush, one event pair per run. times_ms gets the elapsed times. */
static sj_status timed_runs(measure_session *m, int reps, measure_launch_fn fn, void *user, double *times_ms)
{
    sj_status st = need_events(m, 2 * reps);
    if (st != SJ_OK) return st;
    for (int i = 0; i < reps; i++) {
        if ((st = flush_l2(m, (unsigned)i)) != SJ_OK) return st;
        CU_CHECK(cu.cuEventRecord(m->events[2 * i], NULL), "cuEventRecord");
        if ((st = fn(user)) != SJ_OK) return st;
        CU_CHECK(cu.cuEventRecord(m->events[2 * i + 1], NULL), "cuEventRecord");
    }
    CU_CHECK(cu.cuEventSynchronize(m->events[2 * reps - 1]), "waiting for the timed runs");
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CU_CHECK(cu.cuEventElapsedTime(&ms, m->events[2 * i], m->events[2 * i + 1]), "cuEventElapsedTime");
        times_ms[i] = ms;
    }
    return SJ_OK;
}

sj_status measure_run(measure_session *m, const measure_options *o, measure_launch_fn fn, void *user,
                      measure_result *out)
{
    if (!m || !m->ctx || !o || !fn || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "measure_run: NULL argument");
    memset(out, 0, sizeof *out);
    CU_CHECK(cu.cuCtxSetCurrent(m->ctx->cu_ctx), "cuCtxSetCurrent");
    sj_status st = need_events(m, 2);
    if (st != SJ_OK) return st;

    /* Estimate: one untimed call (first-launch costs), then 5 flushed calls between two events.
     * The estimate includes the flush, so the budgets bound the wall time spent. */
    if ((st = fn(user)) != SJ_OK) return st;
    CU_CHECK(cu.cuEventRecord(m->events[0], NULL), "cuEventRecord");
    for (int i = 0; i < 5; i++) {
        if ((st = flush_l2(m, 0x3f800000u + (unsigned)i)) != SJ_OK) return st;
        if ((st = fn(user)) != SJ_OK) return st;
    }
    CU_CHECK(cu.cuEventRecord(m->events[1], NULL), "cuEventRecord");
    CU_CHECK(cu.cuEventSynchronize(m->events[1]), "waiting for the estimate runs");
    float est_total = 0;
    CU_CHECK(cu.cuEventElapsedTime(&est_total, m->events[0], m->events[1]), "cuEventElapsedTime");
    double per_call = est_total / 5.0 > 1e-4 ? est_total / 5.0 : 1e-4;

    int warmup = (int)ceil(o->warmup_ms / per_call);
    if (warmup < 1) warmup = 1;
    int reps = (int)ceil(o->rep_ms / per_call);
    if (reps < o->min_reps) reps = o->min_reps;
    if (reps > o->max_reps) reps = o->max_reps;
    if (reps < 1) reps = 1;
    for (int i = 0; i < warmup; i++)
        if ((st = fn(user)) != SJ_OK) return st;

    double *t = malloc(sizeof *t * (size_t)reps);
    if (!t) return error_set(SJ_ERR_OUT_OF_MEMORY, "measure: out of memory for %d times", reps);
    double best_spread = INFINITY;
    for (int attempt = 0; attempt <= o->retries; attempt++) {
        if ((st = timed_runs(m, reps, fn, user, t)) != SJ_OK) break;
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        double med = measure_quantile(t, reps, 0.5);
        double p20 = measure_quantile(t, reps, 0.2), p80 = measure_quantile(t, reps, 0.8);
        double spread = med > 0 ? (p80 - p20) / med : INFINITY;
        if (spread < best_spread) {
            best_spread = spread;
            out->median_us = med * 1e3;
            out->p20_us = p20 * 1e3;
            out->p80_us = p80 * 1e3;
            out->min_us = t[0] * 1e3;
            out->reps = reps;
        }
        if (spread <= o->max_spread) break;
    }
    free(t);
    if (st != SJ_OK) return st;
    out->noisy = best_spread > o->max_spread;
    return SJ_OK;
}
