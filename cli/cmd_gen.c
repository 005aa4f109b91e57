/* cmd_gen.c: `sparsejit gen`: prints the CUDA source (and launch geometry) a template produces,
 * optionally compiling it to a cubin file for inspection with cuobjdump. */
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/commands.h"
#include "core/file_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_gen(int argc, char **argv)
{
    sj_problem p;
    cli_problem_begin(&p, CLI_OPS_ALL);
    const char *config = NULL, *cubin_path = NULL, *arch = NULL;
    int device = -1;
    for (int i = 1; i < argc; i++) {
        int r = cli_problem_option(argc, argv, &i, &p);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--help")) {
            printf("usage: sparsejit gen --op OP --shape MxNxK [options]\n\nPrints the CUDA C the op's template generates, "
                   "with its launch geometry as a leading comment.\n\n%s"
                   "  --config C         tuning config, e.g. BM=128,BN=128 (default: the template's; the\n"
                   "                     rest of a partial one as for bench --config)\n"
                   "  --arch sm_XX       compile for this arch (default: the GPU's, else sm_90a)\n"
                   "  --cubin FILE       also compile with NVRTC and write the cubin to FILE\n" CLI_DEVICE_HELP
                   "                     (gen compiles for its arch)\n",
                   cli_problem_help(CLI_OPS_ALL));
            return 0;
        }
        if (i + 1 < argc && !strcmp(argv[i], "--config")) config = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--cubin")) cubin_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--arch")) arch = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            if (!cli_parse_device("gen", argv[++i], &device)) return 2;
        }
        else {
            fprintf(stderr, "sparsejit gen: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (!cli_problem_finish(&p)) return 2;
    sj_context_options o;
    cli_context_options_init(&o);
    o.arch = arch;
    o.cache_path = "";
    sj_context *ctx;
    sj_status cs = cli_context_create(&o, device, &ctx);
    if (cs != SJ_OK) {
        fprintf(stderr, "sparsejit gen: %s\n", sj_last_error());
        return cli_exit_code(cs);
    }
    sj_generated *g;
    int rc = 0;
    sj_status st = sj_generate(ctx, &p, config, &g);
    if (st != SJ_OK) {
        fprintf(stderr, "sparsejit gen: %s\n", sj_last_error());
        sj_context_destroy(ctx);
        return cli_exit_code(st);
    }
    char desc[256];
    sj_problem_describe(&p, desc, sizeof desc);
    sj_device_info d;
    sj_get_device_info(ctx, &d);
    printf("/* sparsejit %s: %s, template %s, config %s\n * entry %s, grid (%u,%u,%u), block (%u,%u,%u), %u bytes dynamic shared, arch %s */\n",
           sj_version_string(), desc, g->template_name, g->config, g->entry, g->grid[0], g->grid[1], g->grid[2],
           g->block[0], g->block[1], g->block[2], g->shared_bytes, d.arch);
    fputs(g->source, stdout);
    if (cubin_path) {
        void *cubin;
        size_t size;
        char *log = NULL;
        if (sj_compile(ctx, g, &cubin, &size, &log) != SJ_OK) {
            fprintf(stderr, "sparsejit gen: %s\n", sj_last_error());
            rc = 1;
        } else {
            /* complete or not at all: a full disk or a kill leaves the earlier file, if any */
            if (file_write_whole(cubin_path, cubin, size, 1) != SJ_OK) {
                fprintf(stderr, "sparsejit gen: %s\n", sj_last_error());
                rc = 1;
            } else {
                fprintf(stderr, "sparsejit gen: wrote %zu-byte cubin for %s to %s\n", size, d.arch, cubin_path);
            }
            free(cubin);
        }
        free(log);
    }
    sj_generated_free(g);
    sj_context_destroy(ctx);
    return rc;
}
