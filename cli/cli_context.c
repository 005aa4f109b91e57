/* cli_context.c: the CLI's log callback and context options (cli_context.h). */
#include "cli/cli_context.h"

#include <stdio.h>

void cli_warning(void *user, const char *message)
{
    fprintf(stderr, "sparsejit: warning: %s\n", message);
}

void cli_context_options_init(sj_context_options *o)
{
    sj_context_options_init(o);
    o->log = cli_warning;
}
