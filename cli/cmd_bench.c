/* cmd_bench.c: `sparsejit bench`: the command line of bench_run (tuner/bench.h), which times an
 * op (through the tuner's harness: its inputs, check and FLOP count) or a benchmark of several
 * kernels, and the dense work it replaces, interleaved in rounds; prints a row (table, CSV or
 * JSON). */
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/cli_no_gpu.h"
#include "core/error.h"
#include "tuner/bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf("usage: sparsejit bench --op OP --shape MxNxK [options]\n\n"
           "Times an op's kernel (tuned winner if cached, else the template default) on the inputs the\n"
           "tuner uses, checked first against the tuner's reference (sampled rows for twell-ffn), or a\n"
           "benchmark of several kernels, and the dense work it replaces, interleaved over rounds; prints\n"
           "time, TFLOP/s of useful work (the tuner's count) and the speedup over the dense baseline.\n\n%s"
           "  --config C         force a tuning config (e.g. BM=128,BN=128); for a benchmark, of its\n"
           "                     problem's op (twell-ffn-block: the FFN's; vnm-train*, ffn-train: dW's);\n"
           "                     parameters it leaves out come from the default, or from the first of\n"
           "                     the template's preferred configs it is valid with\n"
           "  --rounds N         interleaved rounds of op and baseline timing, 1..100 (default 5)\n"
           "  --seed N           seed of the random inputs (default 1)\n"
           "  --no-cublas        skip the baseline\n" CLI_DEVICE_HELP
           "  --csv | --json     machine-readable output (--csv-header prints the header first)\n\n"
           "The dense baseline, run back to back: GEMMs on cuBLAS (input dtype, fp32 accumulation),\n"
           "element-wise products on a vectorized kernel (cuBLAS has none). Per op:\n",
           cli_problem_help(CLI_OPS_BENCH));
    for (int i = 0; i < op_count(); i++)
        if (op_at(i)->harness) printf("  %-16s %s\n", op_at(i)->name, op_at(i)->baseline_help);
    for (int i = 0; i < op_bench_count(); i++) printf("  %-16s %s\n", op_bench_at(i)->name, op_bench_at(i)->summary);
}

/* "forward 12.30 us, dx 45.60 us, dw 78.90 us": a benchmark's parts, each timed alone, and with
 * dense (a baseline timed by parts too) "; dense forward 20.00 us, backward 40.00 us". */
static void print_parts(FILE *f, const bench_result *r, int dense)
{
    for (int i = 0; i < r->n_parts; i++) fprintf(f, "%s%s %.2f us", i ? ", " : "", r->part_names[i], r->part_us[i]);
    for (int i = 0; dense && i < r->n_dense_parts; i++)
        fprintf(f, "%s%s %.2f us", i ? ", " : "; dense ", r->dense_part_names[i], r->dense_part_us[i]);
}

/* "6.4 MB saved for the backward vs 541.1 MB dense (85.1x less)": a training step's activations. */
static void print_saved(FILE *f, const bench_result *r)
{
    fprintf(f, "%.1f MB saved for the backward vs %.1f MB dense (%.1fx less)", r->saved_bytes / 1e6,
            r->dense_saved_bytes / 1e6, (double)r->dense_saved_bytes / (double)r->saved_bytes);
}

/* The row: a table for people, or one CSV line or JSON object. A benchmark's parts timed alone
 * (and its baseline's) go into the JSON object ("parts_us", "dense_parts_us"), the table, or with
 * CSV a line on stderr (the CSV's columns stay those of every row); a training step's saved
 * activations into the JSON object, the table and the CSV's saved_bytes and dense_saved_bytes
 * columns (-1 for a row that is not a training step's). */
static void print_row(sj_context *ctx, const char *name, const sj_problem *p, const op_bench *b, const bench_options *bo,
                      const bench_result *r, int csv, int csv_header, int json)
{
    const op_desc *desc = op_find(p->op);
    char described[256], sp[64] = "";
    sj_problem_describe(p, described, sizeof described);
    if (desc->label) desc->label(p, sp, sizeof sp);
    const sj_bench_result *k = &r->run;
    const char *origin = k->origin == SJ_CONFIG_TUNED ? "tuned" : k->origin == SJ_CONFIG_EXPLICIT ? "explicit" : "default";
    const char *source = k->source == SJ_FROM_COMPILE ? "compiled" : k->source == SJ_FROM_CACHE ? "cache" : "table";
    double cb_us = bo->cublas ? r->cublas_us : -1.0, cb_tf = bo->cublas ? r->cublas_tflops : -1.0;
    double speedup = bo->cublas ? r->speedup : -1.0;
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    if (json) {
        fputc('{', stdout);
        json_kv_string(stdout, 1, "gpu", d.name);
        json_kv_string(stdout, 0, "op", name);
        json_kv_string(stdout, 0, "dtype", sj_dtype_name(p->dtype));
        json_kv_string(stdout, 0, "out_dtype", sj_dtype_name(p->out_dtype));
        json_kv_int(stdout, 0, "m", (long long)p->m);
        json_kv_int(stdout, 0, "n", (long long)p->n);
        json_kv_int(stdout, 0, "k", (long long)p->k);
        json_kv_string(stdout, 0, "sparsity", sp);
        json_kv_string(stdout, 0, "config", k->config);
        json_kv_string(stdout, 0, "config_origin", origin);
        json_kv_number(stdout, 0, "first_call_ms", r->first_ms, 9);
        json_kv_string(stdout, 0, "first_call_source", source);
        json_kv_number(stdout, 0, "median_us", k->median_us, 9);
        json_kv_number(stdout, 0, "p20_us", k->p20_us, 9);
        json_kv_number(stdout, 0, "p80_us", k->p80_us, 9);
        json_kv_number(stdout, 0, "tflops", k->tflops, 6);
        json_kv_number(stdout, 0, "cublas_us", cb_us, 9);
        json_kv_number(stdout, 0, "cublas_tflops", cb_tf, 6);
        json_kv_number(stdout, 0, "speedup", speedup, 6);
        json_kv_number(stdout, 0, "check_rel_err", k->rel_error, 3);
        if (r->n_parts) {
            fputs(",\"parts_us\":{", stdout);
            for (int i = 0; i < r->n_parts; i++) json_kv_number(stdout, i == 0, r->part_names[i], r->part_us[i], 9);
            fputc('}', stdout);
        }
        if (r->n_dense_parts && bo->cublas) {
            fputs(",\"dense_parts_us\":{", stdout);
            for (int i = 0; i < r->n_dense_parts; i++)
                json_kv_number(stdout, i == 0, r->dense_part_names[i], r->dense_part_us[i], 9);
            fputc('}', stdout);
        }
        if (r->saved_bytes >= 0) {
            json_kv_int(stdout, 0, "saved_bytes", (long long)r->saved_bytes);
            json_kv_int(stdout, 0, "dense_saved_bytes", (long long)r->dense_saved_bytes);
        }
        fputs("}\n", stdout);
    } else if (csv) {
        if (csv_header)
            printf("gpu,op,dtype,out_dtype,m,n,k,sparsity,config,origin,first_call_ms,source,median_us,p20_us,p80_us,tflops,"
                   "cublas_us,cublas_tflops,speedup,saved_bytes,dense_saved_bytes,check_rel_err\n");
        printf("%s,%s,%s,%s,%lld,%lld,%lld,%s,\"%s\",%s,%.3f,%s,%.3f,%.3f,%.3f,%.2f,%.3f,%.2f,%.3f,%lld,%lld,%.3g\n", d.name,
               name, sj_dtype_name(p->dtype), sj_dtype_name(p->out_dtype), (long long)p->m, (long long)p->n, (long long)p->k,
               sp, k->config, origin, r->first_ms, source, k->median_us, k->p20_us, k->p80_us, k->tflops, cb_us, cb_tf,
               speedup, (long long)r->saved_bytes, (long long)r->dense_saved_bytes, k->rel_error);
        if (r->n_parts) {
            fprintf(stderr, "sparsejit bench: %s %s parts, each alone: ", name, described);
            print_parts(stderr, r, bo->cublas);
            fputc('\n', stderr);
        }
        if (r->saved_bytes >= 0) {
            fprintf(stderr, "sparsejit bench: %s %s activations: ", name, described);
            print_saved(stderr, r);
            fputc('\n', stderr);
        }
    } else {
        if (b) printf("%s (%s) of %s on %s\n", name, b->parts, described, d.name);
        else printf("%s on %s\n", described, d.name);
        printf("  kernel   %s %s config %s%s\n", r->template_name, origin, k->config, b ? " (the last part)" : "");
        printf("  first    %.2f ms (%s, incl. one launch)\n", r->first_ms, source);
        printf("  checked  against the reference: relative error %.2e\n", k->rel_error);
        printf("  time     %.2f us median (p20 %.2f, p80 %.2f) over %d rounds, %.1f TFLOP/s useful\n", k->median_us,
               k->p20_us, k->p80_us, bo->rounds, k->tflops);
        if (r->n_parts) {
            fputs("  parts    ", stdout);
            print_parts(stdout, r, bo->cublas);
            puts(" (each alone, medians)");
        }
        if (r->saved_bytes >= 0) {
            fputs("  memory   ", stdout);
            print_saved(stdout, r);
            puts(" (activations kept for the backward, X aside)");
        }
        if (bo->cublas) {
            int gemms = 0;
            for (int i = 0; i < r->n_baseline; i++) gemms += r->baseline[i].kind == BASELINE_GEMM;
            char products[32] = "";
            if (gemms < r->n_baseline) snprintf(products, sizeof products, " + %d element-wise", r->n_baseline - gemms);
            printf("  cuBLAS   %.2f us dense (%d GEMM%s%s), %.1f TFLOP/s\n  speedup  %.3fx vs cuBLAS dense\n", r->cublas_us,
                   gemms, gemms > 1 ? "s" : "", products, r->cublas_tflops, r->speedup);
        }
    }
}

int cmd_bench(int argc, char **argv)
{
    sj_problem p;
    cli_problem_begin(&p, CLI_OPS_BENCH);
    const char *config = NULL;
    int csv = 0, json = 0, csv_header = 0;
    long long v;
    int device = -1;
    bench_options bo;
    bench_options_init(&bo);
    bo.rounds = 5;
    bo.measure.warmup_ms = 10;
    bo.measure.rep_ms = 40;
    for (int i = 1; i < argc; i++) {
        int r = cli_problem_option(argc, argv, &i, &p);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--help")) {
            help();
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--config")) config = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) {
            if (!cli_parse_int("bench", "--rounds", argv[++i], 1, 100, &v)) return 2;
            bo.rounds = (int)v;
        } else if (i + 1 < argc && !strcmp(argv[i], "--seed")) {
            if (!cli_parse_int("bench", "--seed", argv[++i], 0, INT64_MAX, &v)) return 2;
            bo.seed = (uint64_t)v;
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            if (!cli_parse_device("bench", argv[++i], &device)) return 2;
        } else if (!strcmp(argv[i], "--no-cublas")) bo.cublas = 0;
        else if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--csv-header")) csv = csv_header = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "sparsejit bench: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (!cli_problem_finish(&p)) return 2;
    const op_bench *b = cli_problem_bench();
    const char *name = b ? b->name : sj_op_name(p.op);
    sj_context_options o;
    cli_context_options_init(&o);
    o.require_gpu = 1;
    sj_context *ctx;
    sj_status cs = cli_context_create(&o, device, &ctx);
    if (cs == SJ_ERR_NO_GPU && device < 0) return cli_no_gpu("bench", &p, config, sj_last_error());
    if (cs != SJ_OK) {
        fprintf(stderr, "sparsejit bench: %s\n", sj_last_error());
        return cli_exit_code(cs);
    }
    int rc = 1;
    bench_result r;
    sj_status st;
    if (config && (st = sj_set_config(ctx, &p, config)) != SJ_OK) goto fail;
    if ((st = bench_run(ctx, name, &p, &bo, &r)) != SJ_OK) goto fail;
    if (bo.cublas && r.cublas_error[0]) {
        st = error_set(SJ_ERR_UNSUPPORTED, "%s timed at %.2f us, but its baseline failed: %s", name, r.run.median_us,
                  r.cublas_error);
        goto fail;
    }
    print_row(ctx, name, &p, b, &bo, &r, csv, csv_header, json);
    rc = 0;
fail:
    if (rc) {
        fprintf(stderr, "sparsejit bench: %s\n", sj_last_error());
        rc = cli_exit_code(st);
    }
    sj_context_destroy(ctx);
    return rc;
}
