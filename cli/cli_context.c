/* cli_context.c: the CLI's log callback and context options (cli_context.h). */
#include "cli/cli_context.h"

#include <stdio.h>

void cli_warning(void *user, const char *message)
{
    fprintf(stderr, "sparsejit: warning: %s\n", message);
}

int cli_exit_code(sj_status st) { return st == SJ_ERR_INVALID_ARGUMENT ? 2 : 1; }

void cli_context_options_init(sj_context_options *o)
{
    sj_context_options_init(o);
    o->log = cli_warning;
}
