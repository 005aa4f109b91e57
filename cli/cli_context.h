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

/* --device N of the commands that use a GPU (info, gen, tune, bench, run, cache import). */
#define CLI_DEVICE_HELP \
    "  --device N         the GPU to use, 0..GPUs-1 (default 0); without a GPU it is an error\n"
/* The largest N --device parses; the library then checks it against the GPUs there are. */
#define CLI_MAX_DEVICE 1023
/* Parses --device's value into *device; 0 after printing why not ("sparsejit <cmd>: --device 'x' is
 * not an integer; expected an integer in 0..1023"). */
int cli_parse_device(const char *cmd, const char *val, int *device);
/* sj_context_create(o) on the GPU --device chose; device < 0: none chosen (the library's default,
 * a compile-only context without a GPU). A chosen GPU is required: where there is none it fails
 * with SJ_ERR_NO_GPU, and with SJ_ERR_INVALID_ARGUMENT past the last GPU, the last error naming
 * --device and the GPUs there are. */
sj_status cli_context_create(sj_context_options *o, int device, sj_context **ctx);

#endif
