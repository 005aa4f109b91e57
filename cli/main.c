/* main.c: the sparsejit command line; dispatches to one subcommand per file (commands.h). */
#include "cli/commands.h"
#include "sparsejit.h"

#include <stdio.h>
#include <string.h>

static const struct { const char *name; int (*fn)(int, char **); const char *what; } commands[] = {
    { "info", cmd_info, "GPU, arch, driver, NVRTC, cache path (or why there is no GPU)" },
    { "gen", cmd_gen, "print the CUDA source a template produces for an op, shape and config" },
    { "bench", cmd_bench, "time an op at a shape against cuBLAS dense, measured in the same run" },
    { "tune", cmd_tune, "search a template's space for the fastest correct config and cache it" },
    { "cache", cmd_cache, "list, show, export, import, clear or vacuum the kernel cache" },
    { "run", cmd_run, "run a Lua script with the sparsejit module (sweeps)" },
};

static void usage(FILE *f)
{
    fprintf(f, "sparsejit %s: JIT-generated, autotuned sparse GPU kernels\n\nusage: sparsejit <command> [options]\n\ncommands:\n",
            sj_version_string());
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\n'sparsejit <command> --help' describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("sparsejit %s\n", sj_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sparsejit: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
