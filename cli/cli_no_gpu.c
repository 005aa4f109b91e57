/* cli_no_gpu.c: tune and bench without a GPU (cli_no_gpu.h): generate and compile, time nothing. */
#include "cli/cli_no_gpu.h"
#include "cli/cli_context.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int cli_no_gpu(const char *cmd, const sj_problem *p, const char *config, const char *reason)
{
    char why[512];   /* reason may be sj_last_error()'s buffer, which the next call rewrites */
    snprintf(why, sizeof why, "%s", reason);
    sj_context_options o;
    cli_context_options_init(&o);
    o.cache_path = "";   /* nothing to store: a compile-only context tunes nothing */
    sj_context *ctx;
    sj_status st = sj_context_create(&o, &ctx);
    if (st != SJ_OK) {
        fprintf(stderr, "sparsejit %s: %s\n", cmd, sj_last_error());
        return cli_exit_code(st);
    }
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sj_generated *g = NULL;
    void *cubin = NULL;
    size_t cubin_size = 0;
    char *log = NULL;
    if ((st = sj_generate(ctx, p, config, &g)) == SJ_OK) st = sj_compile(ctx, g, &cubin, &cubin_size, &log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int rc = 0;
    if (st != SJ_OK) {
        fprintf(stderr, "sparsejit %s: %s%s%s\n", cmd, sj_last_error(), log ? "\n" : "", log ? log : "");
        rc = cli_exit_code(st);
    } else {
        char described[256];
        sj_problem_describe(p, described, sizeof described);
        printf("no GPU (%s): nothing was timed.\n"
               "  %s: %s, config %s (%s), generated and compiled with NVRTC for %s in %.0f ms (%zu bytes of cubin)\n"
               "  on a GPU, `sparsejit %s` would %s\n",
               why, described, g->entry, g->config, config && config[0] ? "given" : "the template's default", d.arch,
               (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, cubin_size, cmd,
               cmd[0] == 't' ? "measure the template's tuning space against a reference and store the fastest config"
                             : "time this kernel against its dense cuBLAS baseline");
    }
    free(cubin);
    free(log);
    sj_generated_free(g);
    sj_context_destroy(ctx);
    return rc;
}
