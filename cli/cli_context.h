/* cli_context.h: what every CLI context and cache shares: the library reports diagnostics that
 * are not errors through a callback instead of stderr, and the CLI prints them as warnings. */
#ifndef SJ_CLI_CONTEXT_H
#define SJ_CLI_CONTEXT_H

#include "sparsejit.h"

/* An sj_log_fn that prints "sparsejit: warning: <message>" to stderr. */
void cli_warning(void *user, const char *message);
/* The exit code of a command whose library call failed with st: 2 when the user's arguments were
 * refused (SJ_ERR_INVALID_ARGUMENT: a config, a problem), 1 for every other failure; the same 2
 * the option parsers return. */
int cli_exit_code(sj_status st);
/* sj_context_options_init plus cli_warning as the log. */
void cli_context_options_init(sj_context_options *o);

#endif
