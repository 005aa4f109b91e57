/* cmd_bench.c: `sparsejit bench`: times one op at one shape with the tuner's method (events,
 * L2 flush, median of many) and the dense cuBLAS work it replaces, interleaved in rounds so
 * clock drift under load hits both alike; prints a row (table, CSV or JSON). */
#include "tuner/harness.h"
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/op.h"
#include "runtime/runtime.h"
#include "tuner/tuner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct launch_ctx { sj_context *ctx; const bench_op *op; bench_case *c; } launch_ctx;

static sj_status launch_once(void *user)
{
    launch_ctx *l = user;
    return l->op->launch(l->ctx, l->c);
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

static void help(void)
{
    printf("usage: sparsejit bench --op OP --shape MxNxK [options]\n\n"
           "Times the op's kernel (tuned winner if cached, else the template default) and the dense\n"
           "cuBLAS GEMM(s) it replaces, interleaved over rounds, and prints time, TFLOP/s of useful\n"
           "work and the speedup over cuBLAS.\n\n%s"
           "  --config C         force a tuning config (e.g. BM=128,BN=128)\n"
           "  --rounds N         interleaved rounds of op and cuBLAS timing (default 5)\n"
           "  --no-cublas        skip the cuBLAS baseline\n"
           "  --csv | --json     machine-readable output (--csv-header prints the header first)\n",
           cli_problem_help);
}

int cmd_bench(int argc, char **argv)
{
    sj_problem p;
    cli_problem_begin(&p);
    const char *config = NULL;
    int rounds = 5, cublas = 1, csv = 0, json = 0, csv_header = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_problem_option(argc, argv, &i, &p);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--help")) {
            help();
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--config")) config = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-cublas")) cublas = 0;
        else if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--csv-header")) csv = csv_header = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "sparsejit bench: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (!cli_problem_finish(&p)) return 2;
    if (rounds < 1 || rounds > 100) {
        fprintf(stderr, "sparsejit bench: --rounds %d: expected 1..100\n", rounds);
        return 2;
    }
    const op_desc *desc = op_find(p.op);
    const bench_op *op = desc->bench;
    if (!op) {
        fprintf(stderr, "sparsejit bench: op %s has no benchmark\n", sj_op_name(p.op));
        return 2;
    }
    sj_context_options o;
    cli_context_options_init(&o);
    o.require_gpu = 1;
    sj_context *ctx;
    if (sj_context_create(&o, &ctx) != SJ_OK) {
        fprintf(stderr, "sparsejit bench: %s\n", sj_last_error());
        return 1;
    }
    int rc = 1;
    bench_case *c = NULL;
    measure_session ms;
    int session = 0;
    if (config && sj_set_config(ctx, &p, config) != SJ_OK) goto fail;
    if (op->setup(ctx, &p, &c) != SJ_OK) goto fail;

    /* First call: kernel lookup/compile/load plus one launch, timed on the host. */
    double t0 = rt_seconds();
    if (op->launch(ctx, c) != SJ_OK || sj_synchronize(ctx) != SJ_OK) goto fail;
    double first_ms = (rt_seconds() - t0) * 1e3;
    sj_kernel_info ki;
    if (sj_last_kernel_info(ctx, &ki) != SJ_OK) goto fail;
    double check_err = NAN;
    if (op->check) {
        if (op->check(ctx, c, &check_err) != SJ_OK) goto fail;
        if (!(check_err <= harness_tolerance(&p))) {
            error_set(SJ_ERR_VERIFY, "config %s computes the wrong result: relative error %.3g against the reference "
                    "(tolerance %.3g); not timed", ki.config, check_err, harness_tolerance(&p));
            goto fail;
        }
    }

    if (measure_begin(ctx, &ms) != SJ_OK) goto fail;
    session = 1;
    measure_options mo;
    measure_options_init(&mo);
    mo.warmup_ms = 10;
    mo.rep_ms = 40;
    int64_t shapes[4][3];
    int n_base = op->baseline(&p, shapes);
    double op_us[100], op_p20[100], op_p80[100], cb_us[100];
    for (int r = 0; r < rounds; r++) {
        launch_ctx l = { ctx, op, c };
        measure_result mr;
        if (measure_run(&ms, &mo, launch_once, &l, &mr) != SJ_OK) goto fail;
        op_us[r] = mr.median_us;
        op_p20[r] = mr.p20_us;
        op_p80[r] = mr.p80_us;
        if (cublas) {
            measure_result cr;
            if (cublas_gemm_seq_time(ctx, p.dtype, n_base, (const int64_t(*)[3])shapes, &mo, &cr) != SJ_OK) goto fail;
            cb_us[r] = cr.median_us;
        }
    }
    double t_op = median_of(op_us, rounds), p20 = median_of(op_p20, rounds), p80 = median_of(op_p80, rounds);
    double t_cb = cublas ? median_of(cb_us, rounds) : NAN;
    double flops = op->flops(&p), dense_flops = 0;
    for (int i = 0; i < n_base; i++) dense_flops += 2.0 * shapes[i][0] * shapes[i][1] * shapes[i][2];
    double tf = flops / (t_op * 1e-6) / 1e12, tf_cb = dense_flops / (t_cb * 1e-6) / 1e12;
    char described[256], sp[64] = "";
    sj_problem_describe(&p, described, sizeof described);
    if (desc->label) desc->label(&p, sp, sizeof sp);
    const char *origin = ki.origin == SJ_CONFIG_TUNED ? "tuned" : ki.origin == SJ_CONFIG_EXPLICIT ? "explicit" : "default";
    const char *source = ki.source == SJ_FROM_COMPILE ? "compiled" : ki.source == SJ_FROM_CACHE ? "cache" : "table";
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    if (json) {
        printf("{\"gpu\":\"%s\",\"op\":\"%s\",\"dtype\":\"%s\",\"out_dtype\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
               "\"sparsity\":\"%s\",\"config\":\"%s\",\"config_origin\":\"%s\",\"first_call_ms\":%.3f,\"first_call_source\":\"%s\","
               "\"median_us\":%.3f,\"p20_us\":%.3f,\"p80_us\":%.3f,\"tflops\":%.2f,\"cublas_us\":%.3f,\"cublas_tflops\":%.2f,"
               "\"speedup\":%.3f,\"check_rel_err\":%.3g}\n",
               d.name, sj_op_name(p.op), sj_dtype_name(p.dtype), sj_dtype_name(p.out_dtype), (long long)p.m,
               (long long)p.n, (long long)p.k, sp, ki.config, origin, first_ms, source, t_op, p20, p80, tf,
               cublas ? t_cb : -1.0, cublas ? tf_cb : -1.0, cublas ? t_cb / t_op : -1.0, isnan(check_err) ? -1.0 : check_err);
    } else if (csv) {
        if (csv_header)
            printf("gpu,op,dtype,out_dtype,m,n,k,sparsity,config,origin,first_call_ms,source,median_us,p20_us,p80_us,tflops,"
                   "cublas_us,cublas_tflops,speedup,check_rel_err\n");
        printf("%s,%s,%s,%s,%lld,%lld,%lld,%s,\"%s\",%s,%.3f,%s,%.3f,%.3f,%.3f,%.2f,%.3f,%.2f,%.3f,%.3g\n", d.name,
               sj_op_name(p.op), sj_dtype_name(p.dtype), sj_dtype_name(p.out_dtype), (long long)p.m, (long long)p.n,
               (long long)p.k, sp, ki.config, origin, first_ms, source, t_op, p20, p80, tf, t_cb, tf_cb, t_cb / t_op,
               isnan(check_err) ? -1.0 : check_err);
    } else {
        printf("%s on %s\n", described, d.name);
        printf("  kernel   %s %s config %s\n", ki.template_name, origin, ki.config);
        printf("  first    %.2f ms (%s, incl. one launch)\n", first_ms, source);
        if (!isnan(check_err)) printf("  checked  against the reference: relative error %.2e\n", check_err);
        printf("  time     %.2f us median (p20 %.2f, p80 %.2f) over %d rounds, %.1f TFLOP/s useful\n", t_op, p20, p80,
               rounds, tf);
        if (cublas)
            printf("  cuBLAS   %.2f us dense (%d GEMM%s), %.1f TFLOP/s\n  speedup  %.3fx vs cuBLAS dense\n", t_cb, n_base,
                   n_base > 1 ? "s" : "", tf_cb, t_cb / t_op);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "sparsejit bench: %s\n", sj_last_error());
    if (session) measure_end(&ms);
    if (c) op->teardown(ctx, c);
    sj_context_destroy(ctx);
    return rc;
}
