/* cli_problem.c: parsing of the shared problem options (see cli_problem.h). */
#include "cli/cli_problem.h"

#include "core/number.h"
#include "core/problem.h"

#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static const char options_help[] =
    "  --shape MxNxK      C is MxN, reduction over K (vnm-spmm: rows of A x N of B x K;\n"
    "                     vnm-dw, vnm-dx, vnm-train*: rows of W x cols of W x tokens, i.e.\n"
    "                     out x in x T of the layer Y = W . X; vnm-compress, vnm-transpose:\n"
    "                     rows x 1 x cols; twell-gate, hybrid-gate: tokens x d_ff x d_model;\n"
    "                     twell-ffn, twell-ffn-block, hybrid-ffn-*, ffn-train: tokens x d_model x\n"
    "                     d_model)\n"
    "  --dtype T          input dtype: f16 | bf16 (default f16)\n"
    "  --out T            output dtype: f16 | bf16 | f32 (default: the input dtype)\n"
    "  --vnm V:N:M        V:N:M sparsity for the vnm-* ops (default 64:2:8)\n"
    "  --twell T:C        TwELL tile width and capacity (default 128:16); hybrid-* and ffn-train:\n"
    "                     d_ff:W, W the ELL width (default d_ff:128)\n"
    "  --d-ff N           FFN inner size for twell-ffn and the hybrid FFN ops (twell-gate and\n"
    "                     hybrid-gate take it as the shape's N)\n"
    "  --sparsity S       twell-*, hybrid-*, ffn-train: the activations' expected fraction of zeros,\n"
    "                     in (0, 1) (default 0.99); tune and bench generate inputs at it and the\n"
    "                     cache key carries it\n"
    "  --skew A           twell-*, hybrid-*, ffn-train: how unevenly the d_ff units fire in those\n"
    "                     inputs: 0 (default) every unit alike; A > 0: the unit of rank r fires at a\n"
    "                     rate ~ r^-A (max 0.5, mean 1 - S), so tokens share busy units; 0..4, cache\n"
    "                     key carries it\n"
    "  --dead D           twell-*, hybrid-*, ffn-train: the share of d_ff units that never fire in\n"
    "                     those inputs (the others carry the mean 1 - S), 0 (default) .. 0.9, with\n"
    "                     (1 - S) / (1 - D) <= 0.5; the cache key carries it\n"
    "  --rank R           vnm-spmm: add a low-rank term U . Z of rank R (SLoPe's adapters) in the\n"
    "                     same kernel: C = A . B + U . Z, U rows x R, Z R x N; R a multiple of 8 in\n"
    "                     8..128 (default 0: none); the cache key carries it\n"
    "  (an option the op does not read is refused, exit 2)\n";

static int out_set, shape_set;
static unsigned given;             /* OP_READS_* of the options given: each must be read by the op */
/* The OP_READS_* bits an option can set, and per bit the last option that set it. */
static const unsigned option_fields_read[] = { OP_READS_VNM, OP_READS_TWELL, OP_READS_D_FF, OP_READS_LOWRANK };
enum { N_OPTION_FIELDS = sizeof option_fields_read / sizeof *option_fields_read };
static const char *given_name[N_OPTION_FIELDS];
static cli_ops takes;
static const op_bench *bench;

const char *cli_problem_help(cli_ops ops)
{
    static char text[4096];
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
    given = 0;
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

const cli_fields cli_shape_fields = { "MxNxK", "4096x4096x4096", 'x', 3,
                                      { { "M", 1, PROBLEM_MAX_DIM }, { "N", 1, PROBLEM_MAX_DIM }, { "K", 1, PROBLEM_MAX_DIM } } };
/* 0 is refused: the ops read a zero V or T as "unset" and fill in their defaults. The op's
 * validation then names the values it supports. */
const cli_fields cli_vnm_fields = { "V:N:M", "64:2:8", ':', 3, { { "V", 1, INT_MAX }, { "N", 1, INT_MAX }, { "M", 1, INT_MAX } } };
const cli_fields cli_twell_fields = { "T:C", "128:16", ':', 2,
                                      { { "T", 1, SJ_TWELL_MAX_TILE }, { "C", 1, SJ_TWELL_MAX_TILE } } };

int cli_parse_fields(const char *opt, const char *val, const cli_fields *f, long long *v, char *why, size_t len)
{
    const char *p = val;
    for (int i = 0; i < f->n; i++) {
        const char *end = i < f->n - 1 ? strchr(p, f->sep) : p + strlen(p);
        if (!end || (i == f->n - 1 && strchr(p, f->sep))) {
            snprintf(why, len, "%s '%s': expected %s, e.g. %s", opt, val, f->form, f->example);
            return 0;
        }
        number_result r = number_parse(p, (size_t)(end - p), f->fields[i].lo, f->fields[i].hi, &v[i]);
        if (r != NUMBER_OK) {
            snprintf(why, len, "%s '%s': %s = '%.*s' is %s; expected an integer in %lld..%lld", opt, val, f->fields[i].name,
                     (int)(end - p), p, number_problem(r), f->fields[i].lo, f->fields[i].hi);
            return 0;
        }
        p = end + 1;
    }
    return 1;
}

static void note_given(unsigned field, const char *opt)
{
    given |= field;
    for (int f = 0; f < N_OPTION_FIELDS; f++)
        if (option_fields_read[f] == field) given_name[f] = opt;
}

/* Parses one separated option value, printing why not. */
static int option_fields(const char *opt, const char *val, const cli_fields *f, long long *v)
{
    char why[512];
    if (cli_parse_fields(opt, val, f, v, why, sizeof why)) return 1;
    fprintf(stderr, "sparsejit: %s\n", why);
    return 0;
}

int cli_problem_option(int argc, char **argv, int *i, sj_problem *p)
{
    const char *opt = argv[*i];
    static const char *const names[] = { "--op", "--shape", "--dtype", "--out", "--vnm", "--twell", "--d-ff", "--sparsity", "--skew",
                                         "--dead", "--rank", NULL };
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
        if (!option_fields(opt, val, &cli_shape_fields, v)) return -1;
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
        if (!option_fields(opt, val, &cli_vnm_fields, v)) return -1;
        p->vnm_v = (int)v[0];
        p->vnm_n = (int)v[1];
        p->vnm_m = (int)v[2];
        note_given(OP_READS_VNM, opt);
    } else if (!strcmp(opt, "--twell")) {
        if (!option_fields(opt, val, &cli_twell_fields, v)) return -1;
        p->twell_tile = (int)v[0];
        p->twell_capacity = (int)v[1];
        note_given(OP_READS_TWELL, opt);
    } else if (!strcmp(opt, "--sparsity")) {
        char *end;
        double s = strtod(val, &end);
        if (end == val || *end || !(s > 0 && s < 1)) {
            fprintf(stderr, "sparsejit: --sparsity '%s': expected a fraction of zeros in (0, 1), e.g. 0.99\n", val);
            return -1;
        }
        p->twell_sparsity = s;
        note_given(OP_READS_TWELL, opt);
    } else if (!strcmp(opt, "--skew")) {
        char *end;
        double a = strtod(val, &end);
        if (end == val || *end || !(a >= 0 && a <= SJ_TWELL_MAX_SKEW)) {
            fprintf(stderr, "sparsejit: --skew '%s': expected a number in [0, %g], e.g. 1\n", val, SJ_TWELL_MAX_SKEW);
            return -1;
        }
        p->twell_skew = a;
        note_given(OP_READS_TWELL, opt);
    } else if (!strcmp(opt, "--dead")) {
        /* the range only: sj_problem_validate names a share the sparsity cannot carry */
        char *end;
        double d = strtod(val, &end);
        if (end == val || *end || !(d >= 0 && d <= SJ_TWELL_MAX_DEAD)) {
            fprintf(stderr, "sparsejit: --dead '%s': expected a share of units in [0, %g], e.g. 0.2\n", val,
                    SJ_TWELL_MAX_DEAD);
            return -1;
        }
        p->twell_dead = d;
        note_given(OP_READS_TWELL, opt);
    } else if (!strcmp(opt, "--rank")) {
        /* the range only: sj_problem_validate names a rank that is not a multiple of 8 */
        if (!cli_parse_int(NULL, opt, val, SJ_LOWRANK_MIN_RANK, SJ_LOWRANK_MAX_RANK, &v[0])) return -1;
        p->lowrank_rank = (int)v[0];
        note_given(OP_READS_LOWRANK, opt);
    } else {
        if (!cli_parse_int(NULL, opt, val, 1, PROBLEM_MAX_DIM, &v[0])) return -1;
        p->d_ff = v[0];
        note_given(OP_READS_D_FF, opt);
    }
    return 1;
bad:
    fprintf(stderr, "sparsejit: %s: %s\n", opt, sj_last_error());
    return -1;
}

int cli_parse_int(const char *cmd, const char *opt, const char *val, long long lo, long long hi, long long *out)
{
    long long v;
    number_result r = number_parse(val, strlen(val), lo, hi, &v);
    if (r != NUMBER_OK) {
        fprintf(stderr, "sparsejit%s%s: %s '%s' is %s; expected an integer in %lld..%lld\n", cmd ? " " : "", cmd ? cmd : "",
                opt, val, number_problem(r), lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* An option the op does not read would be ignored: refused instead, naming the ops that read it. */
static int options_read(const op_desc *d)
{
    for (int f = 0; f < N_OPTION_FIELDS; f++) {
        unsigned field = option_fields_read[f];
        if (!(given & field) || (d->reads & field)) continue;
        char readers[512] = "";
        size_t n = 0;
        for (int i = 0; i < op_count(); i++)
            if ((op_at(i)->reads & field) && n < sizeof readers)
                n += (size_t)snprintf(readers + n, sizeof readers - n, "%s%s", n ? ", " : "", op_at(i)->name);
        fprintf(stderr, "sparsejit: %s does not apply to --op %s (ops that read it: %s)\n", given_name[f],
                bench ? bench->name : d->name, readers);
        return 0;
    }
    return 1;
}

int cli_problem_finish(sj_problem *p)
{
    if (!out_set) p->out_dtype = p->dtype;
    const op_desc *d = op_find(p->op);
    if (d && !options_read(d)) return 0;
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
