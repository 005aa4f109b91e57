/* cli_problem.c: parsing of the shared problem options (see cli_problem.h). */
#include "cli/cli_problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char options_help[] =
    "  --shape MxNxK      C is MxN, reduction over K (vnm-spmm: rows of A x N of B x K;\n"
    "                     vnm-dw: rows of W x cols of W x tokens; vnm-compress, vnm-transpose:\n"
    "                     rows x 1 x cols; twell-gate: tokens x d_ff x d_model; twell-ffn and\n"
    "                     twell-ffn-block: tokens x d_model x d_model)\n"
    "  --dtype T          input dtype: f16 | bf16 (default f16)\n"
    "  --out T            output dtype: f16 | bf16 | f32 (default: the input dtype)\n"
    "  --vnm V:N:M        V:N:M sparsity for the vnm-* ops (default 64:2:8)\n"
    "  --twell T:C        TwELL tile width and capacity (default 128:16)\n"
    "  --d-ff N           FFN inner size for twell-ffn / the n of twell-gate\n"
    "  --sparsity S       twell-*: the activations' expected fraction of zeros, in (0, 1) (default\n"
    "                     0.99); tune and bench generate inputs at it and the cache key carries it\n"
    "  --skew A           twell-*: how unevenly the d_ff units fire in those inputs: 0 (default)\n"
    "                     every unit alike; A > 0: the unit of rank r fires at a rate ~ r^-A (max\n"
    "                     0.5, mean 1 - S), so tokens share busy units; 0..4, cache key carries it\n";

static int out_set, shape_set;
static cli_ops takes;
static const op_bench *bench;

const char *cli_problem_help(cli_ops ops)
{
    static char text[2048];
    int n = snprintf(text, sizeof text, "  --op OP            %s %s (default gemm)\n", ops == CLI_OPS_ALL ? "one of" : "an op:",
                     ops == CLI_OPS_ALL ? op_names() : op_tunable_names());
    if (ops == CLI_OPS_BENCH)
        n += snprintf(text + n, sizeof text - (size_t)n, "                     or a benchmark of several kernels: %s\n",
                      op_bench_names());
    snprintf(text + n, sizeof text - (size_t)n, "%s", options_help);
    return text;
}

void cli_problem_begin(sj_problem *p, cli_ops ops)
{
    sj_problem_init(p, SJ_OP_GEMM, SJ_DTYPE_F16, 0, 0, 0);
    out_set = 0;
    shape_set = 0;
    takes = ops;
    bench = NULL;
}

const op_bench *cli_problem_bench(void) { return bench; }

/* --op NAME: an op the command takes, or (bench) a benchmark; prints why not. */
static int parse_op(const char *name, sj_problem *p)
{
    const op_bench *b = op_bench_find_name(name);
    if (b && takes == CLI_OPS_BENCH) {
        p->op = b->op;
        bench = b;
        return 1;
    }
    if (b) {
        fprintf(stderr, "sparsejit: --op %s is a benchmark of %s, not an op: `sparsejit bench` runs it; %s its parts, "
                "one of %s\n", name, b->parts, takes == CLI_OPS_TUNABLE ? "tune" : "generate",
                takes == CLI_OPS_TUNABLE ? op_tunable_names() : op_names());
        return 0;
    }
    const op_desc *d = op_find_name(name);
    if (!d && takes == CLI_OPS_BENCH) {
        fprintf(stderr, "sparsejit: --op: unknown op '%s'; expected an op (%s) or a benchmark (%s)\n", name,
                op_tunable_names(), op_bench_names());
        return 0;
    }
    if (!d) {
        fprintf(stderr, "sparsejit: --op: unknown op '%s'; expected one of %s\n", name, op_names());
        return 0;
    }
    if (takes != CLI_OPS_ALL && !d->harness) {
        fprintf(stderr, "sparsejit: --op %s is a conversion with one config: nothing to %s; expected one of %s\n", name,
                takes == CLI_OPS_TUNABLE ? "tune" : "time against a dense baseline", op_tunable_names());
        return 0;
    }
    p->op = d->op;
    bench = NULL;
    return 1;
}

static int parse_ints(const char *s, char sep, long long *v, int n)
{
    const char *p = s;
    for (int i = 0; i < n; i++) {
        char *end;
        v[i] = strtoll(p, &end, 10);
        if (end == p) return 0;
        if (i < n - 1) {
            if (*end != sep) return 0;
            p = end + 1;
        } else if (*end) {
            return 0;
        }
    }
    return 1;
}

int cli_problem_option(int argc, char **argv, int *i, sj_problem *p)
{
    const char *opt = argv[*i];
    static const char *const names[] = { "--op", "--shape", "--dtype", "--out", "--vnm", "--twell", "--d-ff", "--sparsity", "--skew", NULL };
    int known = 0;
    for (const char *const *n = names; *n; n++) known |= !strcmp(opt, *n);
    if (!known) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "sparsejit: %s needs a value\n", opt);
        return -1;
    }
    const char *val = argv[++*i];
    long long v[3];
    if (!strcmp(opt, "--op")) {
        if (!parse_op(val, p)) return -1;
    } else if (!strcmp(opt, "--shape")) {
        if (!parse_ints(val, 'x', v, 3)) {
            fprintf(stderr, "sparsejit: --shape '%s': expected MxNxK, e.g. 4096x4096x4096\n", val);
            return -1;
        }
        p->m = v[0];
        p->n = v[1];
        p->k = v[2];
        shape_set = 1;
    } else if (!strcmp(opt, "--dtype") || !strcmp(opt, "--out")) {
        sj_dtype d;
        if (sj_dtype_parse(val, &d) != SJ_OK) goto bad;
        if (!strcmp(opt, "--dtype")) p->dtype = d;
        else {
            p->out_dtype = d;
            out_set = 1;
        }
    } else if (!strcmp(opt, "--vnm")) {
        if (!parse_ints(val, ':', v, 3)) {
            fprintf(stderr, "sparsejit: --vnm '%s': expected V:N:M, e.g. 64:2:8\n", val);
            return -1;
        }
        p->vnm_v = (int)v[0];
        p->vnm_n = (int)v[1];
        p->vnm_m = (int)v[2];
    } else if (!strcmp(opt, "--twell")) {
        if (!parse_ints(val, ':', v, 2)) {
            fprintf(stderr, "sparsejit: --twell '%s': expected T:C, e.g. 128:16\n", val);
            return -1;
        }
        p->twell_tile = (int)v[0];
        p->twell_capacity = (int)v[1];
    } else if (!strcmp(opt, "--sparsity")) {
        char *end;
        double s = strtod(val, &end);
        if (end == val || *end || !(s > 0 && s < 1)) {
            fprintf(stderr, "sparsejit: --sparsity '%s': expected a fraction of zeros in (0, 1), e.g. 0.99\n", val);
            return -1;
        }
        p->twell_sparsity = s;
    } else if (!strcmp(opt, "--skew")) {
        char *end;
        double a = strtod(val, &end);
        if (end == val || *end || !(a >= 0 && a <= SJ_TWELL_MAX_SKEW)) {
            fprintf(stderr, "sparsejit: --skew '%s': expected a number in [0, %g], e.g. 1\n", val, SJ_TWELL_MAX_SKEW);
            return -1;
        }
        p->twell_skew = a;
    } else {
        if (!parse_ints(val, 0, v, 1)) {
            fprintf(stderr, "sparsejit: --d-ff '%s': expected an integer\n", val);
            return -1;
        }
        p->d_ff = v[0];
    }
    return 1;
bad:
    fprintf(stderr, "sparsejit: %s: %s\n", opt, sj_last_error());
    return -1;
}

int cli_parse_int(const char *cmd, const char *opt, const char *val, long long lo, long long hi, long long *out)
{
    char *end;
    long long v = strtoll(val, &end, 10);
    if (end == val || *end || v < lo || v > hi) {
        fprintf(stderr, "sparsejit %s: %s '%s': expected an integer in %lld..%lld\n", cmd, opt, val, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_problem_finish(sj_problem *p)
{
    if (!out_set) p->out_dtype = p->dtype;
    const op_desc *d = op_find(p->op);
    if (d && d->fill_defaults) d->fill_defaults(p);
    if (!shape_set) {
        fprintf(stderr, "sparsejit: --shape MxNxK is required\n");
        return 0;
    }
    if (sj_problem_validate(p) != SJ_OK) {
        fprintf(stderr, "sparsejit: %s\n", sj_last_error());
        return 0;
    }
    return 1;
}
