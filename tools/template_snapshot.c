/* template_snapshot.c: what the templates generate, as a text to diff before and after a refactor
 * of templates/ (a split into variant files, a shared lib/ module). For every op in the table,
 * its example problem on sm_80 and sm_90a (132 SMs), every valid config of the template's space
 * (the first SNAPSHOT_MAX_CONFIGS), one line each: op, target, config, entry, grid, block, shared
 * bytes and an FNV-1a hash of the source without its #line directives and blank lines (they move
 * with the code and mean nothing to the compiler); then the default and the variants' configs,
 * and each invalid config's reason.
 *
 *   build/sparsejit_template_snapshot [TEMPLATE_DIR] > after.txt     (default: the built-in set)
 *
 * Identical output means identical kernels; where only the order of functions changed, compare
 * the SASS of a few configs (`sparsejit gen --config ... --cubin`, cuobjdump -sass). */
#include "core/op.h"
#include "generator/generator.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SNAPSHOT_MAX_CONFIGS 50000

static uint64_t source_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    int line_start = 1;
    for (; *s; s++) {
        if (line_start && *s == '\n') continue;                /* blank line */
        if (line_start && !strncmp(s, "#line ", 6)) {          /* #line directive */
            while (*s && *s != '\n') s++;
            if (!*s) break;
            continue;
        }
        line_start = *s == '\n';
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    }
    return h;
}

static void walk(gen_state *g, const char *tname, const sj_problem *p, const char *tag)
{
    gen_space sp;
    if (gen_space_of(g, tname, p, &sp) != SJ_OK) {
        printf("%s %s space-error %s\n", tname, tag, sj_last_error());
        return;
    }
    int idx[GEN_MAX_PARAMS] = { 0 };
    for (long n = 0; n < SNAPSHOT_MAX_CONFIGS; n++) {
        char cfg[256] = "";
        size_t used = 0;
        for (int i = 0; i < sp.n_params; i++)
            used += (size_t)snprintf(cfg + used, sizeof cfg - used, "%s%s=%d", i ? "," : "", sp.names[i], sp.values[i][idx[i]]);
        int valid = 0;
        char why[256] = "";
        if (gen_config_valid(g, tname, p, cfg, &valid, why, sizeof why) != SJ_OK) {
            printf("%s %s %s valid-error %s\n", tname, tag, cfg, sj_last_error());
        } else if (!valid) {
            printf("%s %s %s invalid %s\n", tname, tag, cfg, why);
        } else {
            sj_generated *o = NULL;
            if (gen_generate(g, tname, p, cfg, &o) != SJ_OK) {
                printf("%s %s %s generate-error %s\n", tname, tag, cfg, sj_last_error());
            } else {
                printf("%s %s %s %s %u,%u,%u %u,%u,%u %u %016llx\n", tname, tag, o->config, o->entry, o->grid[0], o->grid[1],
                       o->grid[2], o->block[0], o->block[1], o->block[2], o->shared_bytes,
                       (unsigned long long)source_hash(o->source));
                sj_generated_free(o);
            }
        }
        int i = sp.n_params - 1;   /* the next config, last parameter fastest */
        while (i >= 0 && ++idx[i] == sp.n_values[i]) idx[i--] = 0;
        if (i < 0) break;
    }
    char d[256];
    if (gen_default_config(g, tname, p, d, sizeof d) == SJ_OK) printf("%s %s default %s\n", tname, tag, d);
    else printf("%s %s default-error %s\n", tname, tag, sj_last_error());
    char v[GEN_MAX_VARIANTS][256];
    int nv = 0;
    if (gen_variant_configs(g, tname, p, v, GEN_MAX_VARIANTS, &nv) == SJ_OK)
        for (int i = 0; i < nv; i++) printf("%s %s variant %s\n", tname, tag, v[i]);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && !strcmp(argv[1], "--help"))) {
        fprintf(stderr, "usage: sparsejit_template_snapshot [TEMPLATE_DIR]  (see tools/template_snapshot.c)\n");
        return 2;
    }
    gen_state *g;
    if (gen_open(argc == 2 ? argv[1] : NULL, &g) != SJ_OK) {
        fprintf(stderr, "template_snapshot: %s\n", sj_last_error());
        return 1;
    }
    const char *archs[] = { "sm_80", "sm_90a" };
    for (int a = 0; a < 2; a++) {
        gen_set_target(g, archs[a], gen_arch_max_shared(archs[a]), 132);
        for (int i = 0; i < op_count(); i++) {
            const op_desc *d = op_at(i);
            if (!d->example) continue;
            sj_problem p;
            d->example(&p);
            char tag[128];
            snprintf(tag, sizeof tag, "%s:%s", d->name, archs[a]);
            walk(g, d->template_name, &p, tag);
        }
    }
    gen_close(g);
    return 0;
}
