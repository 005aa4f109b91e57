/* cmd_tune.c: `sparsejit tune`: tunes one problem (sj_tune) with a progress bar on stderr
 * (cli_progress.h: plain lines when stderr is not a terminal), then a
 * table of the fastest trials and the winner, or one JSON object with --json. */
#include "cli/json_out.h"
#include "cli/cli_no_gpu.h"
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/cli_progress.h"
#include "cli/commands.h"
#include "sparsejit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
    printf("usage: sparsejit tune --op OP --shape MxNxK [options]\n\n"
           "Searches the op's template space for the fastest config that agrees with an independent\n"
           "reference kernel, and stores every trial and the winner (config, cubin, time) in the cache,\n"
           "where every later call on this GPU model finds it.\n\n%s"
           "  --strategy S       exhaustive | random (default random: a sample, then model-picked batches)\n"
           "  --budget-trials N  candidates to measure (random default: a quarter of the space, 16..256)\n"
           "  --budget-seconds S stop starting candidates after S seconds\n"
           "  --seed N           seed of the random strategy (default 1)\n"
           "  --threads N        NVRTC compile threads (default: CPUs - 1)\n"
           "  --warmup-ms X      warm-up budget per candidate (default 25)\n"
           "  --rep-ms X         timing budget per candidate (default 100)\n"
           "  --top N            rows of the final table (default 10)\n"
           "  --cache PATH       the cache database (default $SPARSEJIT_CACHE or ~/.cache/sparsejit/kernels.db)\n"
           "  --no-save          measure only; leave the cache as it is\n" CLI_DEVICE_HELP
           "  --json             print the result as one JSON object (all trials included)\n",
           cli_problem_help(CLI_OPS_TUNABLE));
}

static int by_time(const void *a, const void *b)
{
    const sj_tune_trial *x = a, *y = b;
    int xo = !strcmp(x->status, "ok") || !strcmp(x->status, "noisy");
    int yo = !strcmp(y->status, "ok") || !strcmp(y->status, "noisy");
    if (xo != yo) return yo - xo;
    return (x->median_us > y->median_us) - (x->median_us < y->median_us);
}

static void print_json(const sj_problem *p, const sj_device_info *d, const sj_tune_options *o, const sj_tune_result *r)
{
    printf("{\"gpu\":");
    json_string(stdout, d->name);
    printf(",\"arch\":\"%s\",\"op\":\"%s\",\"dtype\":\"%s\",\"out_dtype\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
           "\"vnm\":\"%d:%d:%d\",\"twell\":\"%d:%d\",\"d_ff\":%lld,",
           d->arch, sj_op_name(p->op), sj_dtype_name(p->dtype), sj_dtype_name(p->out_dtype), (long long)p->m,
           (long long)p->n, (long long)p->k, p->vnm_v, p->vnm_n, p->vnm_m, p->twell_tile, p->twell_capacity,
           (long long)p->d_ff);
    printf("\"template\":");
    json_string(stdout, r->template_name);
    printf(",\"strategy\":\"%s\",\"seed\":%llu,\"budget_trials\":%d,\"budget_seconds\":%g,\"space_size\":%d,"
           "\"trials_done\":%d,\"trials_rejected\":%d,\"seconds\":%.3f,\"compile_seconds\":%.3f,\"saved\":%s,\"cache\":",
           r->strategy, (unsigned long long)o->seed, o->budget_trials, o->budget_seconds, r->space_size,
           r->trials_done, r->trials_rejected, r->seconds, r->compile_seconds, r->saved ? "true" : "false");
    json_string(stdout, d->cache_path);
    printf(",\"finalists\":%d,\"winner\":{\"config\":", r->finalists);
    json_string(stdout, r->config);
    printf(",\"median_us\":%.3f,\"p20_us\":%.3f,\"p80_us\":%.3f,\"tflops\":%.3f},\"trials\":[", r->median_us, r->p20_us,
           r->p80_us, r->tflops);
    for (int i = 0; i < r->n_trials; i++) {
        const sj_tune_trial *t = &r->trials[i];
        printf("%s{\"config\":", i ? "," : "");
        json_string(stdout, t->config);
        printf(",\"status\":\"%s\",\"median_us\":%.3f,\"p20_us\":%.3f,\"p80_us\":%.3f,\"tflops\":%.3f,"
               "\"compile_seconds\":%.3f,\"rel_error\":",
               t->status, t->median_us, t->p20_us, t->p80_us, t->tflops, t->compile_seconds);
        json_number(stdout, t->rel_error, 4);
        putchar('}');
    }
    printf("]}\n");
}

static void print_table(const sj_problem *p, const sj_device_info *d, const sj_tune_result *r, int top)
{
    char desc[256];
    sj_problem_describe(p, desc, sizeof desc);
    sj_tune_trial *sorted = malloc(sizeof *sorted * (size_t)(r->n_trials ? r->n_trials : 1));
    if (!sorted) return;
    memcpy(sorted, r->trials, sizeof *sorted * (size_t)r->n_trials);
    qsort(sorted, (size_t)r->n_trials, sizeof *sorted, by_time);
    printf("%s on %s: %s, %s\n", desc, d->name, r->template_name, r->strategy);
    printf("  %-4s %-48s %10s %10s %10s %8s %-13s\n", "#", "config", "median us", "p20 us", "p80 us", "TFLOP/s", "status");
    for (int i = 0; i < r->n_trials && i < top; i++) {
        const sj_tune_trial *t = &sorted[i];
        printf("  %-4d %-48s %10.2f %10.2f %10.2f %8.1f %-13s%s\n", i + 1, t->config, t->median_us, t->p20_us,
               t->p80_us, t->tflops, t->status, strcmp(t->config, r->config) ? "" : "  <- winner");
    }
    /* Rejections by status, so a broken template shows up at a glance. */
    const char *seen[16];
    int counts[16], n_seen = 0;
    for (int i = 0; i < r->n_trials; i++) {
        const char *s = r->trials[i].status;
        if (!strcmp(s, "ok") || !strcmp(s, "noisy")) continue;
        int j = 0;
        while (j < n_seen && strcmp(seen[j], s)) j++;
        if (j == n_seen && n_seen < 16) {
            seen[n_seen] = s;
            counts[n_seen++] = 0;
        }
        if (j < 16) counts[j]++;
    }
    printf("  space %d valid configs, %d trials, %d rejected", r->space_size, r->trials_done, r->trials_rejected);
    for (int j = 0; j < n_seen; j++) printf("%s%d %s", j ? ", " : " (", counts[j], seen[j]);
    printf("%s\n", n_seen ? ")" : "");
    printf("  winner %s: %.2f us median (p20 %.2f, p80 %.2f), %.1f TFLOP/s", r->config, r->median_us, r->p20_us,
           r->p80_us, r->tflops);
    if (r->finalists > 0) printf(", from a %d-way run-off of the fastest", r->finalists);
    printf("\n");
    printf("  tuned in %.1f s (NVRTC %.1f s over all threads)%s%s\n", r->seconds, r->compile_seconds,
           r->saved ? ", stored in " : ", not stored", r->saved ? d->cache_path : "");
    free(sorted);
}

static int parse_double(const char *opt, const char *val, double *out)
{
    char *end;
    double v = strtod(val, &end);
    if (end == val || *end || !(v >= 0)) {
        fprintf(stderr, "sparsejit tune: %s '%s': expected a number >= 0\n", opt, val);
        return 0;
    }
    *out = v;
    return 1;
}

int cmd_tune(int argc, char **argv)
{
    sj_problem p;
    cli_problem_begin(&p, CLI_OPS_TUNABLE);
    sj_tune_options o;
    sj_tune_options_init(&o);
    const char *cache = NULL;
    int json = 0, device = -1;
    long long top = 10, v;
    for (int i = 1; i < argc; i++) {
        int r = cli_problem_option(argc, argv, &i, &p);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            help();
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--no-save")) {
            o.save = 0;
        } else if (!val && a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "sparsejit tune: %s needs a value (or is unknown; try --help)\n", a);
            return 2;
        } else if (!strcmp(a, "--strategy")) {
            if (sj_tune_strategy_parse(val, &o.strategy) != SJ_OK) {
                fprintf(stderr, "sparsejit tune: --strategy: %s\n", sj_last_error());
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--budget-trials")) {
            if (!cli_parse_int("tune", a, val, 1, 1000000, &v)) return 2;
            o.budget_trials = (int)v;
            i++;
        } else if (!strcmp(a, "--budget-seconds")) {
            if (!parse_double(a, val, &o.budget_seconds)) return 2;
            i++;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int("tune", a, val, 0, INT64_MAX, &v)) return 2;
            o.seed = (uint64_t)v;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("tune", a, val, 1, 64, &v)) return 2;
            o.threads = (int)v;
            i++;
        } else if (!strcmp(a, "--warmup-ms")) {
            if (!parse_double(a, val, &o.warmup_ms)) return 2;
            i++;
        } else if (!strcmp(a, "--rep-ms")) {
            if (!parse_double(a, val, &o.rep_ms)) return 2;
            i++;
        } else if (!strcmp(a, "--top")) {
            if (!cli_parse_int("tune", a, val, 1, 100000, &top)) return 2;
            i++;
        } else if (!strcmp(a, "--device")) {
            if (!cli_parse_device("tune", val, &device)) return 2;
            i++;
        } else if (!strcmp(a, "--cache")) {
            cache = val;
            i++;
        } else {
            fprintf(stderr, "sparsejit tune: unknown option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!cli_problem_finish(&p)) return 2;

    sj_context_options co;
    cli_context_options_init(&co);
    co.require_gpu = 1;
    co.cache_path = cache;
    sj_context *ctx;
    sj_status cs = cli_context_create(&co, device, &ctx);
    if (cs == SJ_ERR_NO_GPU && device < 0) return cli_no_gpu("tune", &p, NULL, sj_last_error());
    if (cs != SJ_OK) {
        fprintf(stderr, "sparsejit tune: %s\n", sj_last_error());
        return cli_exit_code(cs);
    }
    cli_progress ps;
    cli_progress_begin(&ps, isatty(2));
    o.progress = cli_progress_print;
    o.progress_user = &ps;
    sj_tune_result r;
    sj_status st = sj_tune(ctx, &p, &o, &r);
    cli_progress_end(&ps);
    if (st != SJ_OK) {
        fprintf(stderr, "sparsejit tune: %s\n", sj_last_error());
        sj_context_destroy(ctx);
        return cli_exit_code(st);
    }
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    if (json) print_json(&p, &d, &o, &r);
    else print_table(&p, &d, &r, (int)top);
    sj_tune_result_free(&r);
    sj_context_destroy(ctx);
    return 0;
}
