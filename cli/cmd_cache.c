/* cmd_cache.c: `sparsejit cache list|show|export|import|clear|vacuum`: looking at and moving the
 * SQLite kernel cache (cache/cache.h). Opens the default cache (cache_default_path) or --db. */
#include "cli/json_out.h"
#include "cli/commands.h"
#include "cli/cli_context.h"
#include "cli/cli_problem.h"
#include "core/number.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"
#include "sparsejit.h"

enum { OPT_JSON = 1, OPT_FILTERS = 2, OPT_EXPORT = 4, OPT_DEVICE = 8, OPT_YES = 16 };

typedef struct cache_opts {
    const char *db, *op, *shape, *gpu, *arch, *dtype, *sparsity, *driver, *nvrtc, *device;
    int json, yes;
    int64_t m, n, k;          /* from --shape */
    const char *args[3];      /* positional: command, file */
    int n_args;
} cache_opts;

static void usage(FILE *f)
{
    char path[1024];
    if (cache_default_path(path, sizeof path) != SJ_OK) snprintf(path, sizeof path, "(unresolved: %s)", sj_last_error());
    fprintf(f,
        "usage: sparsejit cache [--db PATH] COMMAND [options]\n"
        "\n"
        "The kernel cache: compiled cubins, tuning trials and tuned winners, keyed by GPU, arch,\n"
        "SM count, driver, NVRTC, template (and its source hash), op, dtypes, shape and sparsity.\n"
        "\n"
        "commands:\n"
        "  list [--json]            one line per key: tuned config, median time, TFLOP/s, counts\n"
        "  show [FILTERS] [--json]  the matching keys, each with all its trials\n"
        "                           FILTERS: --op OP --shape MxNxK --gpu NAME --arch ARCH\n"
        "                                    --dtype DT --sparsity S (exact matches)\n"
        "  export FILE [--gpu NAME] [--arch ARCH]\n"
        "                           copy the matching entries into a new database FILE\n"
        "                           (never overwrites an existing file)\n"
        "  import FILE [--arch ARCH --driver N --nvrtc N] [--device N]\n"
        "                           merge FILE, taking only entries for this device's arch,\n"
        "                           driver and NVRTC version (read from GPU N, default 0; without a GPU\n"
        "                           all three flags are needed, e.g. --arch sm_90a --driver 13000\n"
        "                           --nvrtc 13000); a faster winner already here is kept\n"
        "  clear --yes              delete every entry\n"
        "  vacuum                   compact the database file\n"
        "\n"
        "options:\n"
        "  --db PATH                the cache file; default $SPARSEJIT_CACHE, else\n"
        "                           $XDG_CACHE_HOME/sparsejit/kernels.db, else\n"
        "                           ~/.cache/sparsejit/kernels.db (here: %s)\n"
        "  --json                   JSON output (list, show)\n"
        "  -h, --help               this text\n", path);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "sparsejit cache: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see sparsejit cache --help)\n");
    return 2;
}

static int fail(void)
{
    fprintf(stderr, "sparsejit cache: %s\n", sj_last_error());
    return 1;
}

/* Options take a value either as "--opt VALUE" or "--opt=VALUE". */
static int parse_args(int argc, char **argv, cache_opts *o, int *help)
{
    static const struct { const char *name; size_t field; int group; } valued[] = {
        { "--db", offsetof(cache_opts, db), 0 },
        { "--op", offsetof(cache_opts, op), OPT_FILTERS },
        { "--shape", offsetof(cache_opts, shape), OPT_FILTERS },
        { "--gpu", offsetof(cache_opts, gpu), OPT_FILTERS | OPT_EXPORT },
        { "--arch", offsetof(cache_opts, arch), OPT_FILTERS | OPT_EXPORT | OPT_DEVICE },
        { "--dtype", offsetof(cache_opts, dtype), OPT_FILTERS },
        { "--sparsity", offsetof(cache_opts, sparsity), OPT_FILTERS },
        { "--driver", offsetof(cache_opts, driver), OPT_DEVICE },
        { "--nvrtc", offsetof(cache_opts, nvrtc), OPT_DEVICE },
        { "--device", offsetof(cache_opts, device), OPT_DEVICE },
    };
    memset(o, 0, sizeof *o);
    *help = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { *help = 1; return 0; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--yes")) { o->yes = 1; continue; }
        if (a[0] == '-' && a[1]) {
            size_t j, nlen = strcspn(a, "=");
            for (j = 0; j < sizeof valued / sizeof valued[0]; j++)
                if (strlen(valued[j].name) == nlen && !strncmp(a, valued[j].name, nlen)) break;
            if (j == sizeof valued / sizeof valued[0]) return bad_usage("unknown option '%s'", a);
            const char *v = a[nlen] == '=' ? a + nlen + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !*v) return bad_usage("option %s needs a value", valued[j].name);
            *(const char **)((char *)o + valued[j].field) = v;
            continue;
        }
        if (o->n_args == 3) return bad_usage("unexpected argument '%s'", a);
        o->args[o->n_args++] = a;
    }
    if (!o->n_args) return 0;
    /* options that do not apply to the command are refused, so that a typo is not ignored */
    const char *cmd = o->args[0];
    int allowed = !strcmp(cmd, "list") ? OPT_JSON
                : !strcmp(cmd, "show") ? OPT_JSON | OPT_FILTERS
                : !strcmp(cmd, "export") ? OPT_EXPORT
                : !strcmp(cmd, "import") ? OPT_DEVICE
                : !strcmp(cmd, "clear") ? OPT_YES : 0;
    if (o->json && !(allowed & OPT_JSON)) return bad_usage("--json does not apply to '%s'", cmd);
    if (o->yes && !(allowed & OPT_YES)) return bad_usage("--yes does not apply to '%s'", cmd);
    for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) {
        const char *v = *(const char **)((char *)o + valued[j].field);
        if (v && valued[j].group && !(valued[j].group & allowed))
            return bad_usage("option %s does not apply to this command", valued[j].name);
    }
    long long v[3];
    char why[512];
    if (o->shape) {
        if (!cli_parse_fields("--shape", o->shape, &cli_shape_fields, v, why, sizeof why)) return bad_usage("%s", why);
        o->m = v[0];
        o->n = v[1];
        o->k = v[2];
    }
    return 0;
}

/* ---------------------------------------------------------------- JSON and text output */

static void json_key(FILE *f, const cache_key *k)
{
    fputs("\"gpu\": ", f); json_string(f, k->gpu);
    fputs(", \"arch\": ", f); json_string(f, k->arch);
    fprintf(f, ", \"sm_count\": %d, \"driver_version\": %d, \"nvrtc_version\": %d",
            k->sm_count, k->driver_version, k->nvrtc_version);
    fputs(", \"template\": ", f); json_string(f, k->template_name);
    fputs(", \"template_hash\": ", f); json_string(f, k->template_hash);
    fputs(", \"op\": ", f); json_string(f, k->op);
    fputs(", \"dtype\": ", f); json_string(f, k->dtype);
    fputs(", \"out_dtype\": ", f); json_string(f, k->out_dtype);
    fprintf(f, ", \"m\": %lld, \"n\": %lld, \"k\": %lld", (long long)k->m, (long long)k->n, (long long)k->k);
    fputs(", \"sparsity\": ", f); json_string(f, k->sparsity);
}

static void json_winner(FILE *f, const cache_winner *w)
{
    if (!w) { fputs("null", f); return; }
    fputs("{\"config\": ", f); json_string(f, w->config);
    fputs(", \"median_us\": ", f); json_number(f, w->median_us, 9);
    fputs(", \"tflops\": ", f); json_number(f, w->tflops, 9);
    fputs(", \"strategy\": ", f); json_string(f, w->strategy);
    fprintf(f, ", \"tuned_at\": %lld}", (long long)w->tuned_at);
}

static void fmt_num(char *buf, size_t len, double v, const char *fmt)
{
    if (isfinite(v)) snprintf(buf, len, fmt, v);
    else snprintf(buf, len, "-");
}

/* ---------------------------------------------------------------- list and show */

typedef struct key_row {
    cache_key key;
    cache_winner winner;
    int has_winner, n_kernels, n_trials;
} key_row;

typedef struct key_rows {
    key_row *rows;
    size_t count, cap;
    const cache_opts *filter; /* NULL: every key */
    int oom;
} key_rows;

static int key_matches(const cache_opts *o, const cache_key *k)
{
    if (o->op && strcmp(o->op, k->op)) return 0;
    if (o->gpu && strcmp(o->gpu, k->gpu)) return 0;
    if (o->arch && strcmp(o->arch, k->arch)) return 0;
    if (o->dtype && strcmp(o->dtype, k->dtype)) return 0;
    if (o->sparsity && strcmp(o->sparsity, k->sparsity)) return 0;
    if (o->shape && (o->m != k->m || o->n != k->n || o->k != k->k)) return 0;
    return 1;
}

static int collect_key(void *user, const cache_key *key, const cache_winner *winner, int n_kernels, int n_trials)
{
    key_rows *r = user;
    if (r->filter && !key_matches(r->filter, key)) return 0;
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        key_row *nr = realloc(r->rows, cap * sizeof *nr);
        if (!nr) { r->oom = 1; return 1; }
        r->rows = nr;
        r->cap = cap;
    }
    key_row *row = &r->rows[r->count++];
    row->key = *key;
    row->has_winner = winner != NULL;
    if (winner) row->winner = *winner;
    row->n_kernels = n_kernels;
    row->n_trials = n_trials;
    return 0;
}

static int load_keys(cache_db *db, const cache_opts *filter, key_rows *r)
{
    memset(r, 0, sizeof *r);
    r->filter = filter;
    if (cache_list(db, collect_key, r) != SJ_OK) return fail();
    if (r->oom) { fprintf(stderr, "sparsejit cache: out of memory listing keys\n"); return 1; }
    return 0;
}

enum { COLS = 11 };

static void list_cells(const key_row *r, char cells[COLS][288])
{
    const cache_key *k = &r->key;
    snprintf(cells[0], 288, "%s", k->gpu[0] ? k->gpu : "(none)");
    snprintf(cells[1], 288, "%s", k->arch);
    snprintf(cells[2], 288, "%s", k->op);
    snprintf(cells[3], 288, "%s->%s", k->dtype, k->out_dtype);
    snprintf(cells[4], 288, "%lldx%lldx%lld", (long long)k->m, (long long)k->n, (long long)k->k);
    snprintf(cells[5], 288, "%s", k->sparsity[0] ? k->sparsity : "dense");
    snprintf(cells[6], 288, "%s", r->has_winner ? r->winner.config : "(untuned)");
    fmt_num(cells[7], 288, r->has_winner ? r->winner.median_us : NAN, "%.2f");
    fmt_num(cells[8], 288, r->has_winner ? r->winner.tflops : NAN, "%.1f");
    snprintf(cells[9], 288, "%d", r->n_kernels);
    snprintf(cells[10], 288, "%d", r->n_trials);
}

static int cmd_list(cache_db *db, const char *path, const cache_opts *o)
{
    key_rows r;
    if (load_keys(db, NULL, &r)) return 1;
    if (o->json) {
        printf("[");
        for (size_t i = 0; i < r.count; i++) {
            printf("%s\n  {", i ? "," : "");
            json_key(stdout, &r.rows[i].key);
            printf(", \"winner\": ");
            json_winner(stdout, r.rows[i].has_winner ? &r.rows[i].winner : NULL);
            printf(", \"kernels\": %d, \"trials\": %d}", r.rows[i].n_kernels, r.rows[i].n_trials);
        }
        printf("%s]\n", r.count ? "\n" : "");
        free(r.rows);
        return 0;
    }
    static const char *const head[COLS] = { "GPU", "ARCH", "OP", "DTYPE", "SHAPE", "SPARSITY",
                                            "TUNED CONFIG", "MEDIAN_US", "TFLOP/S", "KERNELS", "TRIALS" };
    int width[COLS];
    char cells[COLS][288];
    for (int c = 0; c < COLS; c++) width[c] = (int)strlen(head[c]);
    for (size_t i = 0; i < r.count; i++) {
        list_cells(&r.rows[i], cells);
        for (int c = 0; c < COLS; c++) if ((int)strlen(cells[c]) > width[c]) width[c] = (int)strlen(cells[c]);
    }
    for (int c = 0; c < COLS; c++) printf(c >= 7 ? "%*s%s" : "%-*s%s", width[c], head[c], c + 1 < COLS ? "  " : "\n");
    for (size_t i = 0; i < r.count; i++) {
        list_cells(&r.rows[i], cells);
        for (int c = 0; c < COLS; c++)
            printf(c >= 7 ? "%*s%s" : "%-*s%s", width[c], cells[c], c + 1 < COLS ? "  " : "\n");
    }
    printf("%zu key%s in %s\n", r.count, r.count == 1 ? "" : "s", path);
    free(r.rows);
    return 0;
}

typedef struct trial_rows { cache_trial *t; size_t count, cap; int oom; } trial_rows;

static int collect_trial(void *user, const cache_trial *t)
{
    trial_rows *r = user;
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        cache_trial *nt = realloc(r->t, cap * sizeof *nt);
        if (!nt) { r->oom = 1; return 1; }
        r->t = nt;
        r->cap = cap;
    }
    r->t[r->count++] = *t;
    return 0;
}

static void show_text(const key_row *r, const trial_rows *tr)
{
    const cache_key *k = &r->key;
    printf("%s %s (%d SMs, driver %d, NVRTC %d)  %s %s->%s %lldx%lldx%lld  %s\n",
           k->gpu[0] ? k->gpu : "(no GPU)", k->arch, k->sm_count, k->driver_version, k->nvrtc_version,
           k->op, k->dtype, k->out_dtype, (long long)k->m, (long long)k->n, (long long)k->k,
           k->sparsity[0] ? k->sparsity : "dense");
    printf("  template %s (sha256 %.16s...)  %d kernel%s cached\n", k->template_name, k->template_hash,
           r->n_kernels, r->n_kernels == 1 ? "" : "s");
    if (r->has_winner) {
        char when[32] = "?";
        time_t t = (time_t)r->winner.tuned_at;
        struct tm tm;
        if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
        printf("  tuned: %s  %.2f us  %.1f TFLOP/s  (%s, %s)\n", r->winner.config, r->winner.median_us,
               r->winner.tflops, r->winner.strategy[0] ? r->winner.strategy : "-", when);
    } else {
        printf("  tuned: no\n");
    }
    if (!tr->count) { printf("  no trials\n\n"); return; }
    int cw = (int)strlen("CONFIG");
    for (size_t i = 0; i < tr->count; i++) if ((int)strlen(tr->t[i].config) > cw) cw = (int)strlen(tr->t[i].config);
    printf("    %-*s  %-14s %10s %10s %10s %9s %9s\n", cw, "CONFIG", "STATUS", "MEDIAN_US", "P20_US", "P80_US",
           "TFLOP/S", "COMPILE_S");
    for (size_t i = 0; i < tr->count; i++) {
        const cache_trial *t = &tr->t[i];
        char med[32], p20[32], p80[32], tf[32], cs[32];
        fmt_num(med, sizeof med, t->median_us, "%.2f");
        fmt_num(p20, sizeof p20, t->p20_us, "%.2f");
        fmt_num(p80, sizeof p80, t->p80_us, "%.2f");
        fmt_num(tf, sizeof tf, t->tflops, "%.1f");
        fmt_num(cs, sizeof cs, t->compile_seconds, "%.2f");
        int win = r->has_winner && !strcmp(t->config, r->winner.config);
        printf("  %c %-*s  %-14s %10s %10s %10s %9s %9s\n", win ? '*' : ' ', cw, t->config, t->status,
               med, p20, p80, tf, cs);
    }
    printf("\n");
}

static void show_json_trials(const trial_rows *tr)
{
    printf("[");
    for (size_t i = 0; i < tr->count; i++) {
        const cache_trial *t = &tr->t[i];
        printf("%s\n    {\"config\": ", i ? "," : "");
        json_string(stdout, t->config);
        printf(", \"status\": ");
        json_string(stdout, t->status);
        printf(", \"median_us\": "); json_number(stdout, t->median_us, 9);
        printf(", \"p20_us\": "); json_number(stdout, t->p20_us, 9);
        printf(", \"p80_us\": "); json_number(stdout, t->p80_us, 9);
        printf(", \"tflops\": "); json_number(stdout, t->tflops, 9);
        printf(", \"compile_seconds\": "); json_number(stdout, t->compile_seconds, 9);
        printf("}");
    }
    printf("%s]", tr->count ? "\n  " : "");
}

static int cmd_show(cache_db *db, const char *path, const cache_opts *o)
{
    key_rows r;
    if (load_keys(db, o, &r)) return 1;
    int rc = 0;
    if (o->json) printf("[");
    for (size_t i = 0; i < r.count && !rc; i++) {
        trial_rows tr = { 0 };
        if (cache_list_trials(db, &r.rows[i].key, collect_trial, &tr) != SJ_OK) rc = fail();
        else if (tr.oom) { fprintf(stderr, "sparsejit cache: out of memory listing trials\n"); rc = 1; }
        else if (o->json) {
            printf("%s\n  {", i ? "," : "");
            json_key(stdout, &r.rows[i].key);
            printf(", \"winner\": ");
            json_winner(stdout, r.rows[i].has_winner ? &r.rows[i].winner : NULL);
            printf(", \"kernels\": %d, \"trials\": ", r.rows[i].n_kernels);
            show_json_trials(&tr);
            printf("}");
        } else {
            show_text(&r.rows[i], &tr);
        }
        free(tr.t);
    }
    if (o->json) printf("%s]\n", r.count ? "\n" : "");
    else if (!rc) printf("%zu matching key%s in %s\n", r.count, r.count == 1 ? "" : "s", path);
    free(r.rows);
    return rc;
}

/* ---------------------------------------------------------------- export, import, clear, vacuum */

static int cmd_export(cache_db *db, const cache_opts *o)
{
    int n = 0;
    if (cache_export(db, o->args[1], o->gpu, o->arch, &n) != SJ_OK) return fail();
    printf("exported %d key%s (with their kernels, trials and winners) to %s\n", n, n == 1 ? "" : "s", o->args[1]);
    if (n == 0) fprintf(stderr, "sparsejit cache: warning: no entries matched; %s is an empty cache\n", o->args[1]);
    return 0;
}

static int parse_version(const char *flag, const char *s, int *out)
{
    long long v;
    if (number_parse(s, strlen(s), 1, 1000000, &v) != NUMBER_OK) {
        bad_usage("%s needs a version number in 1..1000000 such as 13000 (major*1000 + minor*10)", flag);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* The device an import keeps entries for: --arch, --driver and --nvrtc, else the GPU's. Decided
 * before the cache is opened, so a bad --device or no GPU creates no cache file. 0 when known,
 * else the exit code. */
typedef struct import_target {
    char arch[16];
    int driver, nvrtc;
} import_target;

static int import_target_of(const cache_opts *o, import_target *t)
{
    *t = (import_target){ "", 0, 0 };
    if (o->arch) snprintf(t->arch, sizeof t->arch, "%s", o->arch);
    if (o->driver && !parse_version("--driver", o->driver, &t->driver)) return 2;
    if (o->nvrtc && !parse_version("--nvrtc", o->nvrtc, &t->nvrtc)) return 2;
    int device = -1;
    if (o->device && !cli_parse_device("cache", o->device, &device)) return 2;
    if (o->device && o->arch && o->driver && o->nvrtc)
        return bad_usage("%s: --arch, --driver and --nvrtc already say which device; give --device or them", "--device");
    if (!o->arch || !o->driver || !o->nvrtc) {
        /* entries are only good for the device they were tuned on: ask the GPU what it is */
        sj_context_options co;
        cli_context_options_init(&co);
        co.cache_path = "";
        co.require_gpu = 1;
        sj_context *ctx = NULL;
        sj_device_info info;
        sj_status st = cli_context_create(&co, device, &ctx);
        if (st == SJ_OK) {
            st = sj_get_device_info(ctx, &info);
            sj_context_destroy(ctx);
        }
        if (st != SJ_OK && st != SJ_ERR_NO_GPU) {
            fprintf(stderr, "sparsejit cache: import: %s\n", sj_last_error());
            return cli_exit_code(st);
        }
        if (st != SJ_OK) {
            fprintf(stderr, "sparsejit cache: import keeps only entries for this device, but there is no "
                    "GPU to ask (%s); pass --arch, --driver and --nvrtc (e.g. --arch sm_90a --driver 13000 "
                    "--nvrtc 13000)\n", sj_last_error());
            return 2;
        }
        if (!o->arch) snprintf(t->arch, sizeof t->arch, "%s", info.arch);
        if (!o->driver) t->driver = info.driver_version;
        if (!o->nvrtc) t->nvrtc = info.nvrtc_version;
    }
    return 0;
}

static int cmd_import(cache_db *db, const cache_opts *o, const import_target *t)
{
    int imported = 0, refused = 0, invalid = 0;
    char why[512];
    if (cache_import(db, o->args[1], t->arch, t->driver, t->nvrtc, &imported, &refused, &invalid, why, sizeof why) != SJ_OK)
        return fail();
    printf("imported %d key%s from %s", imported, imported == 1 ? "" : "s", o->args[1]);
    if (refused)
        printf("; refused %d key%s for another arch, driver or NVRTC than %s / driver %d / NVRTC %d",
               refused, refused == 1 ? "" : "s", t->arch, t->driver, t->nvrtc);
    printf("\n");
    if (invalid)
        fprintf(stderr, "sparsejit cache: refused %d invalid key%s or row%s of %s (first: %s)\n", invalid,
                invalid == 1 ? "" : "s", invalid == 1 ? "" : "s", o->args[1], why);
    return 0;
}

static long long file_bytes(const char *path)
{
    struct stat sb;
    char wal[1100];
    long long total = stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (stat(wal, &sb) == 0) total += (long long)sb.st_size;
    return total;
}

int cmd_cache(int argc, char **argv)
{
    cache_opts o;
    int help;
    int rc = parse_args(argc, argv, &o, &help);
    if (rc) return rc;
    if (help) { usage(stdout); return 0; }
    if (!o.n_args) { usage(stderr); return 2; }
    const char *cmd = o.args[0];
    int known = !strcmp(cmd, "list") || !strcmp(cmd, "show") || !strcmp(cmd, "export") ||
                !strcmp(cmd, "import") || !strcmp(cmd, "clear") || !strcmp(cmd, "vacuum");
    if (!known) return bad_usage("unknown command '%s' (list, show, export, import, clear, vacuum)", cmd);
    int takes_file = !strcmp(cmd, "export") || !strcmp(cmd, "import");
    if (takes_file && o.n_args != 2)
        return bad_usage("%s needs one FILE (see the usage)", cmd);
    if (!takes_file && o.n_args > 1) return bad_usage("unexpected argument '%s'", o.args[1]);

    char path[1024];
    if (o.db) snprintf(path, sizeof path, "%s", o.db);
    else if (cache_default_path(path, sizeof path) != SJ_OK) return fail();
    if (!strcmp(cmd, "clear") && !o.yes) {
        fprintf(stderr, "sparsejit cache: clear deletes every kernel, trial and winner in %s; "
                "run `sparsejit cache clear --yes` to do it\n", path);
        return 2;
    }
    /* Reading never creates a file: `cache --db typo.db list` says there is none instead. */
    int reads = !strcmp(cmd, "list") || !strcmp(cmd, "show") || !strcmp(cmd, "export");
    struct stat st;
    if (reads && stat(path, &st) != 0 && errno == ENOENT) {
        if (!strcmp(cmd, "list") && o.json) {
            printf("[]\n");
            return 0;
        }
        fprintf(stderr, "sparsejit cache: there is no cache at %s (nothing compiled or tuned there yet)\n", path);
        return !strcmp(cmd, "list") ? 0 : 1;
    }
    import_target target;
    if (!strcmp(cmd, "import") && (rc = import_target_of(&o, &target)) != 0) return rc;
    cache_db *db = NULL;
    sj_status os = cache_open(path, cli_warning, NULL, &db);
    if (os != SJ_OK) {
        fail();
        return cli_exit_code(os); /* 2 for a path that is no file */
    }
    if (!strcmp(cmd, "list")) rc = cmd_list(db, path, &o);
    else if (!strcmp(cmd, "show")) rc = cmd_show(db, path, &o);
    else if (!strcmp(cmd, "export")) rc = cmd_export(db, &o);
    else if (!strcmp(cmd, "import")) rc = cmd_import(db, &o, &target);
    else if (!strcmp(cmd, "clear")) {
        rc = cache_clear(db) == SJ_OK ? 0 : fail();
        if (!rc) printf("cleared %s\n", path);
    } else {
        long long before = file_bytes(path);
        rc = cache_vacuum(db) == SJ_OK ? 0 : fail();
        if (!rc) printf("vacuumed %s: %lld -> %lld bytes\n", path, before, file_bytes(path));
    }
    cache_close(db);
    return rc;
}
