/* cli_problem.h: the problem options every CLI command shares (--op --shape --dtype --out
 * --vnm --twell --d-ff), parsed into an sj_problem with messages that name the option. */
#ifndef SJ_CLI_PROBLEM_H
#define SJ_CLI_PROBLEM_H

#include "sparsejit.h"


/* Options text for --help. */
extern const char cli_problem_help[];

/* Starts a problem: gemm, f16, no shape. */
void cli_problem_begin(sj_problem *p);
/* If argv[*i] is a problem option, consumes it (and its value), returns 1; 0 if it is not one;
 * -1 after printing an error to stderr. */
int cli_problem_option(int argc, char **argv, int *i, sj_problem *p);
/* Fills defaults that depend on the op (V:N:M 64:2:8, TwELL 128:16) and validates; prints why not. */
int cli_problem_finish(sj_problem *p);

#endif
