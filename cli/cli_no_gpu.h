/* cli_no_gpu.h: what `tune` and `bench` do on a machine without a GPU: the part that needs none
 * (the kernel generated and compiled for the default arch), then a clear line that timing needs
 * a GPU, so a script that goes on to its next step (the README's main job) still runs it. */
#ifndef SJ_CLI_NO_GPU_H
#define SJ_CLI_NO_GPU_H

#include "sparsejit.h"

/* Called after a context with require_gpu failed with SJ_ERR_NO_GPU (reason: its text).
 * Generates and compiles the problem's kernel (config, or the default) for the default arch and
 * says what `cmd` would have timed. Returns the command's exit code: 0 when the kernel compiled,
 * else the failure's (cli_exit_code). */
int cli_no_gpu(const char *cmd, const sj_problem *p, const char *config, const char *reason);

#endif
