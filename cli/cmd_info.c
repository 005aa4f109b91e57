/* cmd_info.c: `sparsejit info`: the GPU, arch, SMs, driver, NVRTC and cache path, or why there
 * is no GPU (the library still generates and compiles kernels then). */
#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/cli_context.h"
#include "sparsejit.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv)
{
    int json = 0, device = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: sparsejit info [--json] [--device N]\n\nPrints the GPU sparsejit would use (name, arch kernels are compiled for,\n"
                   "SM count, memory, L2, driver), the NVRTC version and the cache path.\n"
                   "Without a GPU it says why, and exits 0: kernels can still be generated and compiled\n"
                   "(with --device, which names a GPU, it exits 1).\n\n"
                   "  --json             one JSON object\n" CLI_DEVICE_HELP);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            if (!cli_parse_device("info", argv[++i], &device)) return 2;
        }
        else {
            fprintf(stderr, "sparsejit info: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    sj_context_options o;
    cli_context_options_init(&o);
    sj_context *ctx;
    sj_status st = cli_context_create(&o, device, &ctx);
    if (st != SJ_OK) {
        fprintf(stderr, "sparsejit info: %s\n", sj_last_error());
        return cli_exit_code(st);
    }
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    if (json) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        fputc('{', stdout);
        json_kv_string(stdout, 1, "version", sj_version_string());
        json_kv_bool(stdout, 0, "has_gpu", d.has_gpu);
        json_kv_string(stdout, 0, "no_gpu_reason", d.no_gpu_reason);
        json_kv_string(stdout, 0, "name", d.name);
        json_kv_string(stdout, 0, "arch", d.arch);
        json_kv_string(stdout, 0, "compute_capability", cc);
        json_kv_int(stdout, 0, "sm_count", d.sm_count);
        json_kv_int(stdout, 0, "memory_bytes", (long long)d.total_memory);
        json_kv_int(stdout, 0, "l2_bytes", (long long)d.l2_bytes);
        json_kv_int(stdout, 0, "driver_version", d.driver_version);
        json_kv_int(stdout, 0, "nvrtc_version", d.nvrtc_version);
        json_kv_string(stdout, 0, "cache_path", d.cache_path);
        fputs("}\n", stdout);
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
