/* cli_problem.h: the problem options every CLI command shares (--op --shape --dtype --out
 * --vnm --twell --d-ff --sparsity --skew --dead), parsed into an sj_problem with messages that name the
 * option, and the integer options of the commands. What --op takes depends on the command: every op (gen), the tunable ones (tune), or
 * those and the benchmarks that are not one op (bench: core/op.h's op_bench). */
#ifndef SJ_CLI_PROBLEM_H
#define SJ_CLI_PROBLEM_H

#include "sparsejit.h"
#include "core/op.h"

typedef enum cli_ops {
    CLI_OPS_ALL,             /* gen: every op */
    CLI_OPS_TUNABLE,         /* tune: the ops with a harness */
    CLI_OPS_BENCH            /* bench: the ops with a harness and the benchmarks */
} cli_ops;

/* Options text for --help, its --op line listing what the command takes. */
const char *cli_problem_help(cli_ops ops);

/* Starts a problem: gemm, f16, no shape; --op takes what ops says. */
void cli_problem_begin(sj_problem *p, cli_ops ops);
/* If argv[*i] is a problem option, consumes it (and its value), returns 1; 0 if it is not one;
 * -1 after printing an error to stderr. */
int cli_problem_option(int argc, char **argv, int *i, sj_problem *p);
/* Fills defaults that depend on the op (V:N:M 64:2:8, TwELL 128:16) and validates; prints why not. */
int cli_problem_finish(sj_problem *p);
/* An integer option of command cmd ("tune", NULL for a shared option) in lo..hi into *out; 0
 * after printing why not. */
int cli_parse_int(const char *cmd, const char *opt, const char *val, long long lo, long long hi, long long *out);
/* A value of several integer fields ("64:2:8"): how it is written, an example, the separator, and
 * each field's name and accepted range. The CLI and the Lua module read V:N:M, T:C and shapes
 * through these, so both refuse the same values with the same words. */
typedef struct cli_fields {
    const char *form, *example;
    char sep;
    int n;
    struct { const char *name; long long lo, hi; } fields[3];
} cli_fields;
extern const cli_fields cli_shape_fields, cli_vnm_fields, cli_twell_fields;
/* Parses val into v[0 .. f->n - 1]; 0 with why ("<opt> '<val>': V = '0' is out of range; expected
 * an integer in 1..2147483647") when it is not f's form or a field is out of its range. */
int cli_parse_fields(const char *opt, const char *val, const cli_fields *f, long long *v, char *why, size_t len);
/* The benchmark --op named (its op is the problem's), NULL when it named an op. */
const op_bench *cli_problem_bench(void);

#endif
