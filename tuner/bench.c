/* bench.c: bench_run, the one benchmark path (bench.h): the name to an op's harness or a
 * benchmark of several kernels, the first launch and the check, then interleaved rounds of the
 * benchmark and its dense baseline, reduced to medians. */
#include "tuner/bench.h"
#include "core/error.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 100

void bench_options_init(bench_options *o)
{
    memset(o, 0, sizeof *o);
    measure_options_init(&o->measure);
    o->rounds = 1;
    o->cublas = 1;
    o->seed = 1;
}

sj_status bench_find(const char *name, const op_desc **op, const op_bench **bench)
{
    *op = NULL;
    *bench = NULL;
    const op_desc *d = op_find_name(name);
    if (d && d->harness) {
        *op = d;
        return SJ_OK;
    }
    if ((*bench = op_bench_find_name(name))) return SJ_OK;
    return error_set(SJ_ERR_INVALID_ARGUMENT, "bench: '%s' %s; expected an op (%s) or a benchmark (%s)",
                     name ? name : "(null)", d ? "is a conversion with no harness" : "is not an op or a benchmark",
                     op_tunable_names(), op_bench_names());
}

sj_status bench_flops(const char *name, const sj_problem *p, double *flops)
{
    const op_desc *d;
    const op_bench *b;
    sj_status st = bench_find(name, &d, &b);
    if (st != SJ_OK) return st;
    *flops = d ? d->harness->flops(p) : b->ops->flops(p);
    return SJ_OK;
}

/* What is timed: an op's kernel through its harness, or a benchmark's parts. */
typedef struct target {
    sj_context *ctx;
    harness h;               /* an op: its harness and the kernel the request path gives */
    const loaded_kernel *k;
    const bench_ops *ops;    /* a benchmark of several kernels */
    bench_case *c;
} target;

static sj_status target_launch(void *user)
{
    target *t = user;
    if (!t->ops) return t->h.ops->launch(&t->h, t->k, NULL);
    if (t->ops->launch) return t->ops->launch(t->ctx, t->c);
    sj_status st = SJ_OK;
    for (int i = 0; st == SJ_OK && i < BENCH_MAX_PARTS && t->ops->part_names[i]; i++) st = t->ops->launch_part(t->ctx, t->c, i);
    return st;
}

sj_status bench_output(sj_context *ctx, size_t bytes, sj_devptr *out)
{
    sj_status st = sj_malloc(ctx, bytes, out);
    return st == SJ_OK ? sj_memset_u8(ctx, *out, 0xff, bytes) : st;
}

/* One part of a benchmark, timed alone. */
typedef struct part_target {
    target *t;
    int part;
} part_target;

static sj_status part_launch(void *user)
{
    part_target *pt = user;
    return pt->t->ops->launch_part(pt->t->ctx, pt->t->c, pt->part);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return measure_quantile(v, n, 0.5);
}

/* The first launch (lookup, compile, load included), timed on the host, and the kernel it ran. */
static sj_status first_launch(target *t, const sj_problem *p, bench_result *out)
{
    double t0 = rt_seconds();
    sj_status st = t->ops ? SJ_OK : rt_kernel_for(t->ctx, p, &t->k);
    if (st == SJ_OK && (st = target_launch(t)) == SJ_OK) st = sj_synchronize(t->ctx);
    if (st != SJ_OK) return st;
    out->first_ms = (rt_seconds() - t0) * 1e3;
    sj_kernel_info ki;
    if ((st = sj_last_kernel_info(t->ctx, &ki)) != SJ_OK) return st;
    snprintf(out->run.config, sizeof out->run.config, "%s", ki.config);
    snprintf(out->template_name, sizeof out->template_name, "%s", ki.template_name);
    out->run.origin = ki.origin;
    out->run.source = ki.source;
    return SJ_OK;
}

/* The rounds: the benchmark, its parts alone (if it times them), then its baseline and its
 * baseline's parts alone (until one fails), each timed with the same budgets. */
static sj_status timed_rounds(target *t, const sj_problem *p, const bench_options *o, bench_result *out)
{
    measure_session ms;
    sj_status st = measure_begin(t->ctx, &ms);
    if (st != SJ_OK) return st;
    double us[MAX_ROUNDS], p20[MAX_ROUNDS], p80[MAX_ROUNDS], cb[MAX_ROUNDS], parts[BENCH_MAX_PARTS][MAX_ROUNDS],
        dense_parts[BENCH_MAX_PARTS][MAX_ROUNDS];
    int n_cb = 0;
    /* the baseline's buffers, written once, timed every round; one that cannot open leaves the
     * benchmark's own timing standing, and the row says why it has no baseline */
    cublas_baseline *bl = NULL;
    if (o->cublas && cublas_baseline_open(t->ctx, p->dtype, out->n_baseline, out->baseline, &bl) != SJ_OK)
        snprintf(out->cublas_error, sizeof out->cublas_error, "%s", sj_last_error());
    for (int r = 0; r < o->rounds && st == SJ_OK; r++) {
        measure_result mr;
        if ((st = measure_run(&ms, &o->measure, target_launch, t, &mr)) != SJ_OK) break;
        us[r] = mr.median_us;
        p20[r] = mr.p20_us;
        p80[r] = mr.p80_us;
        out->run.reps = mr.reps;
        for (int i = 0; i < out->n_parts && st == SJ_OK; i++) {
            part_target pt = { t, i };
            if ((st = measure_run(&ms, &o->measure, part_launch, &pt, &mr)) == SJ_OK) parts[i][r] = mr.median_us;
        }
        if (st != SJ_OK) break;
        if (!bl || out->cublas_error[0]) continue;
        measure_result cr;
        sj_status bs = cublas_baseline_run(bl, &o->measure, &cr);
        for (int i = 0; bs == SJ_OK && i < out->n_dense_parts; i++) {
            const baseline_part *bp = &t->ops->baseline_parts[i];
            int end = i + 1 < out->n_dense_parts ? bp[1].first : out->n_baseline;
            measure_result pr;
            if ((bs = cublas_baseline_run_steps(bl, bp->first, end - bp->first, &o->measure, &pr)) == SJ_OK)
                dense_parts[i][n_cb] = pr.median_us;
        }
        if (bs == SJ_OK)
            cb[n_cb++] = cr.median_us;
        else
            snprintf(out->cublas_error, sizeof out->cublas_error, "%s", sj_last_error());
    }
    cublas_baseline_close(bl);
    measure_end(&ms);
    if (st != SJ_OK) return st;
    out->run.median_us = median_of(us, o->rounds);
    out->run.p20_us = median_of(p20, o->rounds);
    out->run.p80_us = median_of(p80, o->rounds);
    out->run.tflops = out->flops / (out->run.median_us * 1e-6) / 1e12;
    for (int i = 0; i < out->n_parts; i++) out->part_us[i] = median_of(parts[i], o->rounds);
    if (n_cb == o->rounds) {
        out->cublas_us = median_of(cb, n_cb);
        out->cublas_tflops = out->dense_flops / (out->cublas_us * 1e-6) / 1e12;
        out->speedup = out->cublas_us / out->run.median_us;
        for (int i = 0; i < out->n_dense_parts; i++) out->dense_part_us[i] = median_of(dense_parts[i], n_cb);
    }
    return SJ_OK;
}

/* A benchmark's baseline parts: named, the first at step 0, the others at rising steps within
 * the n_steps of its baseline; a table entry that breaks this is the benchmark's bug. */
static sj_status check_baseline_parts(const char *name, const baseline_part *bp, int n_steps, int *n_parts)
{
    *n_parts = 0;
    for (int i = 0; bp && bp[i].name; i++) {
        int lo = i ? bp[i - 1].first + 1 : 0, hi = i ? n_steps - 1 : 0;
        if (i == BENCH_MAX_PARTS || bp[i].first < lo || bp[i].first > hi)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "bench %s: baseline part %d (%s) starts at step %d: expected at most %d "
                             "parts, the first at step 0 and each later one in %d..%d", name, i, bp[i].name, bp[i].first,
                             BENCH_MAX_PARTS, lo, hi);
        *n_parts = i + 1;
    }
    return SJ_OK;
}

sj_status bench_run(sj_context *ctx, const char *name, const sj_problem *p, const bench_options *o, bench_result *out)
{
    if (!ctx || !p || !o || !out)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench: %s is NULL", !ctx ? "ctx" : !p ? "problem" : !o ? "options" : "result");
    memset(out, 0, sizeof *out);
    out->cublas_us = out->cublas_tflops = out->speedup = NAN;
    for (int i = 0; i < BENCH_MAX_PARTS; i++) out->dense_part_us[i] = NAN;
    out->saved_bytes = out->dense_saved_bytes = -1;
    if (o->rounds < 1 || o->rounds > MAX_ROUNDS)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench: rounds %d: expected 1..%d", o->rounds, MAX_ROUNDS);
    const op_desc *d;
    const op_bench *b;
    sj_status st = bench_find(name, &d, &b);
    if (st != SJ_OK) return st;
    sj_op want = d ? d->op : b->op;
    if (p->op != want)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench %s: problem.op is %s, expected a %s problem", name,
                         sj_op_name(p->op) ? sj_op_name(p->op) : "not an op", sj_op_name(want));
    if ((st = sj_problem_validate(p)) != SJ_OK) return st;
    if ((st = rt_require_gpu(ctx, "benchmarking")) != SJ_OK) return st;
    out->flops = d ? d->harness->flops(p) : b->ops->flops(p);
    out->n_baseline = d ? d->harness->baseline(p, out->baseline) : b->ops->baseline(p, out->baseline);
    if (out->n_baseline < 1 || out->n_baseline > BASELINE_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench %s: its baseline of this problem has %d steps: expected 1..%d",
                         name, out->n_baseline, BASELINE_MAX);
    for (int i = 0; i < out->n_baseline; i++)
        if (out->baseline[i].kind == BASELINE_GEMM)
            out->dense_flops += 2.0 * out->baseline[i].m * out->baseline[i].n * out->baseline[i].k;

    for (int i = 0; b && b->ops->launch_part && b->ops->part_names && i < BENCH_MAX_PARTS && b->ops->part_names[i]; i++)
        out->part_names[out->n_parts++] = b->ops->part_names[i];
    if (b && (st = check_baseline_parts(name, b->ops->baseline_parts, out->n_baseline, &out->n_dense_parts)) != SJ_OK)
        return st;
    for (int i = 0; i < out->n_dense_parts; i++) out->dense_part_names[i] = b->ops->baseline_parts[i].name;
    target t = { .ctx = ctx, .ops = b ? b->ops : NULL };
    st = b ? b->ops->setup(ctx, p, o->seed, &t.c) : harness_open(ctx, p, o->seed, HARNESS_REFERENCE_SAMPLED, &t.h);
    if (st != SJ_OK) return st;
    if (b && b->ops->saved_bytes) b->ops->saved_bytes(t.c, &out->saved_bytes, &out->dense_saved_bytes);
    if ((st = first_launch(&t, p, out)) != SJ_OK) goto done;
    /* the check first: a kernel that computes the wrong result is not timed */
    int sticky = 0;
    st = b ? b->ops->check(ctx, t.c, &out->run.rel_error) : harness_check(&t.h, t.k, &out->run.rel_error, &sticky);
    if (st != SJ_OK) goto done;
    if (!(out->run.rel_error <= harness_tolerance(p))) {
        st = error_set(SJ_ERR_VERIFY, "bench %s: config %s computes the wrong result: relative error %.3g against the "
                       "reference (tolerance %.3g); not timed", name, out->run.config, out->run.rel_error,
                       harness_tolerance(p));
        goto done;
    }
    st = timed_rounds(&t, p, o, out);
done:
    if (b && t.c) b->ops->teardown(ctx, t.c);
    if (!b) harness_close(&t.h);
    return st;
}
