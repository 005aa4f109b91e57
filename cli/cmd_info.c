/* cmd_info.c: `sparsejit info`: the GPU, arch, SMs, driver, NVRTC and cache path, or why there
 * is no GPU (the library still generates and compiles kernels then). */
#include "cli/commands.h"
#include "cli/cli_context.h"
#include "sparsejit.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: sparsejit info [--json]\n\nPrints the GPU sparsejit would use (name, arch kernels are compiled for,\n"
                   "SM count, memory, L2, driver), the NVRTC version and the cache path.\n"
                   "Without a GPU it says why, and exits 0: kernels can still be generated and compiled.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "sparsejit info: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    sj_context_options o;
    cli_context_options_init(&o);
    sj_context *ctx;
    if (sj_context_create(&o, &ctx) != SJ_OK) {
        fprintf(stderr, "sparsejit info: %s\n", sj_last_error());
        return 1;
    }
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    if (json) {
        printf("{\"version\":\"%s\",\"has_gpu\":%s,\"no_gpu_reason\":\"%s\",\"name\":\"%s\",\"arch\":\"%s\","
               "\"compute_capability\":\"%d.%d\",\"sm_count\":%d,\"memory_bytes\":%zu,\"l2_bytes\":%zu,"
               "\"driver_version\":%d,\"nvrtc_version\":%d,\"cache_path\":\"%s\"}\n",
               sj_version_string(), d.has_gpu ? "true" : "false", d.no_gpu_reason, d.name, d.arch, d.cc_major,
               d.cc_minor, d.sm_count, d.total_memory, d.l2_bytes, d.driver_version, d.nvrtc_version, d.cache_path);
    } else {
        printf("sparsejit %s\n", sj_version_string());
        if (d.has_gpu) {
            printf("GPU:      %s (compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB)\n", d.name, d.cc_major,
                   d.cc_minor, d.sm_count, d.total_memory / 1073741824.0, d.l2_bytes / 1048576.0);
            printf("driver:   CUDA %d.%d\n", d.driver_version / 1000, d.driver_version % 1000 / 10);
        } else {
            printf("GPU:      none (%s)\n", d.no_gpu_reason);
        }
        printf("arch:     %s%s\n", d.arch, d.has_gpu ? "" : " (compile only)");
        printf("NVRTC:    %d.%d\n", d.nvrtc_version / 1000, d.nvrtc_version % 1000 / 10);
        printf("cache:    %s\n", d.cache_path[0] ? d.cache_path : "(disabled)");
    }
    sj_context_destroy(ctx);
    return 0;
}
