/* cli_context.c: the CLI's log callback and context options (cli_context.h). */
#include "cli/cli_context.h"
#include "cli/cli_problem.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

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

int cli_parse_device(const char *cmd, const char *val, int *device)
{
    long long v;
    if (!cli_parse_int(cmd, "--device", val, 0, CLI_MAX_DEVICE, &v)) return 0;
    *device = (int)v;
    return 1;
}

sj_status cli_context_create(sj_context_options *o, int device, sj_context **ctx)
{
    if (device >= 0) {
        o->device_ordinal = device;
        o->require_gpu = 1;
    }
    sj_status st = sj_context_create(o, ctx);
    if (st == SJ_OK || device < 0) return st;
    char why[1024]; /* the library's text, before error_set rewrites it */
    snprintf(why, sizeof why, "%s", sj_last_error());
    if (st == SJ_ERR_NO_GPU) /* the library's "no GPU: <reason>" */
        return error_set(st, "--device %d names a GPU, and this machine has none: %s", device,
                         strncmp(why, "no GPU: ", 8) ? why : why + 8);
    /* "device_ordinal N: out of range; this machine has 2 GPUs: expected 0..1" */
    const char *rest = strstr(why, ": ");
    if (st == SJ_ERR_INVALID_ARGUMENT && !strncmp(why, "device_ordinal ", 15) && rest)
        return error_set(st, "--device %d: %s", device, rest + 2);
    return st;
}
