/* context.c: sj_context_create, above the runtime: the runtime's context plus, under
 * SJ_TUNE_ON_MISS, the tuner's hook that tunes a problem the first time it has no winner. The
 * runtime calls the hook through the context and never includes the tuner. */
#include "tuner/tuner.h"
#include "core/error.h"
#include "runtime/runtime.h"

#include <stdio.h>

/* SJ_TUNE_ON_MISS: a budgeted search, so a first call costs seconds, not minutes. */
static sj_status tune_on_miss(sj_context *ctx, const sj_problem *p, char *config, size_t len)
{
    sj_tune_options o;
    sj_tune_options_init(&o);
    o.strategy = SJ_TUNE_RANDOM;
    o.budget_trials = 0; /* the strategy default: a quarter of the space, 16..256 trials */
    o.budget_seconds = 60;
    sj_tune_result r;
    sj_status st = sj_tune(ctx, p, &o, &r);
    if (st != SJ_OK) return error_prefix(st, "tuning on first use (SJ_TUNE_ON_MISS)");
    snprintf(config, len, "%s", r.config);
    sj_tune_result_free(&r);
    return SJ_OK;
}

sj_status sj_context_create(const sj_context_options *opts, sj_context **out)
{
    RT_USE_CONTEXT(NULL); /* none yet: only the caller's is kept */
    sj_status st = rt_context_create(opts, out);
    if (st == SJ_OK && (*out)->opts.tune_policy == SJ_TUNE_ON_MISS) (*out)->tune_on_miss = tune_on_miss;
    return st;
}
