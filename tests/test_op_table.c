/* test_op_table.c: the walk over the op table (core/op_table.c). Every op it names must keep the
 * promises of its descriptor: a unique name that sj_op_parse and sj_op_name map both ways, an
 * example problem that validates and that op_normalize leaves alone, and per variant a kernel
 * that generates and compiles with NVRTC for each target from the variant's arch up, is refused
 * below it, takes no more parameters than the op launches with (n_args), and whose SASS holds the instructions the variant promises and no local memory.
 * An op added to the table (docs/adding-an-op.md) is walked with no change here. No GPU needed;
 * without cuobjdump the SASS checks skip visibly while generation and compilation still run. */
#include "test_util.h"
#include "core/op.h"
#include "generator/generator.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The targets a variant's arch may name, lowest first. */
static const char *const targets[] = { "sm_80", "sm_90a" };
enum { N_TARGETS = sizeof targets / sizeof *targets };
static sj_context *ctx_of[N_TARGETS];

static int setup(void **state)
{
    for (int t = 0; t < N_TARGETS; t++)
        if (!(ctx_of[t] = tu_compile_context(targets[t]))) return -1;
    return 0;
}

static int teardown(void **state)
{
    for (int t = 0; t < N_TARGETS; t++) sj_context_destroy(ctx_of[t]);
    return 0;
}

static int target_index(const char *arch)
{
    for (int t = 0; arch && t < N_TARGETS; t++)
        if (!strcmp(targets[t], arch)) return t;
    return -1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_names_and_fields(void **state)
{
    assert_true(op_count() > 0);
    assert_null(op_at(-1));
    assert_null(op_at(op_count()));
    for (int i = 0; i < op_count(); i++) {
        const op_desc *d = op_at(i);
        assert_non_null(d);
        assert_non_null(d->name);
        for (int j = 0; j < i; j++) {
            if (!strcmp(op_at(j)->name, d->name)) fail_msg("ops %d and %d are both named %s", j, i, d->name);
            if (op_at(j)->op == d->op) fail_msg("%s and %s are both sj_op %d", op_at(j)->name, d->name, (int)d->op);
        }
        assert_ptr_equal(op_find(d->op), d);
        assert_ptr_equal(op_find_name(d->name), d);
        assert_string_equal(sj_op_name(d->op), d->name);
        sj_op parsed = 0;
        SJ_ASSERT_OK(sj_op_parse(d->name, &parsed));
        assert_int_equal(parsed, d->op);
        const char *template_name = NULL;
        SJ_ASSERT_OK(op_template(d->op, &template_name));
        assert_string_equal(template_name, d->template_name);
        if (!strstr(op_names(), d->name)) fail_msg("op_names() '%s' lacks %s", op_names(), d->name);
        if (d->reads & ~(unsigned)(OP_READS_VNM | OP_READS_TWELL | OP_READS_D_FF | OP_READS_LOWRANK))
            fail_msg("%s: reads 0x%x has bits no OP_READS_* names", d->name, d->reads);
        if (d->tunable && !d->harness) fail_msg("%s is tunable but has no harness", d->name);
        /* what the walk below needs */
        if (!d->example) fail_msg("%s has no example problem", d->name);
        if (!d->variants || d->n_variants < 1) fail_msg("%s lists no variants", d->name);
        for (int v = 0; v < d->n_variants; v++) {
            const op_variant *var = &d->variants[v];
            assert_non_null(var->name);
            if (target_index(var->arch) < 0) fail_msg("%s/%s: arch '%s' is none of sm_80, sm_90a", d->name, var->name,
                                                      var->arch ? var->arch : "(null)");
            for (int w = 0; w < v; w++)
                if (!strcmp(d->variants[w].name, var->name)) fail_msg("%s: two variants named %s", d->name, var->name);
        }
    }
    sj_op parsed_none;
    SJ_ASSERT_STATUS(sj_op_parse("no-such-op", &parsed_none), SJ_ERR_INVALID_ARGUMENT, "no-such-op");
}

/* A field op_normalize keeps when the op reads it and zeroes when it does not. */
static void expect_field(const char *op, const char *field, int read, double given, double kept)
{
    if (kept != (read ? given : 0))
        fail_msg("%s: op_normalize gave %s = %g from %g, but the op %s it", op, field, kept, given,
                 read ? "reads" : "does not read");
}

static void test_examples(void **state)
{
    for (int i = 0; i < op_count(); i++) {
        const op_desc *d = op_at(i);
        sj_problem p;
        d->example(&p);
        assert_int_equal(p.op, d->op);
        SJ_ASSERT_OK(sj_problem_validate(&p));
        char text[256], prefix[64];
        SJ_ASSERT_OK(sj_problem_describe(&p, text, sizeof text));
        snprintf(prefix, sizeof prefix, "%s ", d->name);
        if (strncmp(text, prefix, strlen(prefix))) fail_msg("%s: described as '%s'", d->name, text);
        fprintf(stderr, "# %s\n", text);

        /* every field set: the op's own survive, the rest are zeroed */
        sj_problem full = p, norm;
        full.vnm_v = 32, full.vnm_n = 2, full.vnm_m = 16;
        full.twell_tile = 64, full.twell_capacity = 8, full.twell_sparsity = 0.9, full.twell_skew = 1;
        full.twell_dead = 0.2;
        full.d_ff = 4096;
        full.lowrank_rank = 32;
        op_normalize(&full, &norm);
#define EXPECT(read, f) expect_field(d->name, #f, (read) != 0, (double)full.f, (double)norm.f)
        EXPECT(1, op), EXPECT(1, dtype), EXPECT(1, out_dtype), EXPECT(1, m), EXPECT(1, n), EXPECT(1, k);
        EXPECT(d->reads & OP_READS_VNM, vnm_v), EXPECT(d->reads & OP_READS_VNM, vnm_n);
        EXPECT(d->reads & OP_READS_VNM, vnm_m);
        EXPECT(d->reads & OP_READS_TWELL, twell_tile), EXPECT(d->reads & OP_READS_TWELL, twell_capacity);
        EXPECT(d->reads & OP_READS_TWELL, twell_sparsity), EXPECT(d->reads & OP_READS_TWELL, twell_skew);
        EXPECT(d->reads & OP_READS_TWELL, twell_dead);
        EXPECT(d->reads & OP_READS_D_FF, d_ff);
        EXPECT(d->reads & OP_READS_LOWRANK, lowrank_rank);
        /* the example sets nothing its op ignores: normalizing it changes nothing */
        full = p;
        op_normalize(&full, &norm);
        EXPECT(1, vnm_v), EXPECT(1, vnm_n), EXPECT(1, vnm_m), EXPECT(1, twell_tile), EXPECT(1, twell_capacity);
        EXPECT(1, twell_sparsity), EXPECT(1, twell_skew), EXPECT(1, twell_dead), EXPECT(1, d_ff);
        EXPECT(1, lowrank_rank);
#undef EXPECT
    }
}

/* Whether every name=value of a variant's config holds in cfg (a NULL config: any cfg). */
static int selects(const char *variant_config, const char *cfg)
{
    gen_config want;
    SJ_ASSERT_OK(gen_config_parse(variant_config, &want));
    for (int i = 0; i < want.n; i++)
        if (tu_config_value(cfg, want.names[i]) != want.values[i]) return 0;
    return 1;
}

/* The template's own variants (gen_variant_configs) for the example are all listed: an
 * algorithm a template gains cannot escape the walk. */
static void test_template_variants_listed(void **state)
{
    for (int i = 0; i < op_count(); i++) {
        const op_desc *d = op_at(i);
        sj_problem p;
        d->example(&p);
        for (int t = 0; t < N_TARGETS; t++) {
            gen_state *gen = NULL;
            SJ_ASSERT_OK(rt_generator(ctx_of[t], &gen));
            char configs[GEN_MAX_VARIANTS][256];
            int n = 0;
            SJ_ASSERT_OK(gen_variant_configs(gen, d->template_name, &p, configs, GEN_MAX_VARIANTS, &n));
            for (int c = 0; c < n; c++) {
                int listed = 0;
                for (int v = 0; v < d->n_variants && !listed; v++)
                    listed = target_index(d->variants[v].arch) <= t && selects(d->variants[v].config, configs[c]);
                if (!listed) fail_msg("%s on %s: the template's variant %s is none of the descriptor's", d->name,
                                      targets[t], configs[c]);
            }
        }
    }
}

/* Fails unless each item of the comma-separated list occurs in sass (present) or none does. */
static void expect_in_sass(const char *sass, const char *list, int present, const char *where)
{
    char items[256];
    snprintf(items, sizeof items, "%s", list ? list : "");
    char *save = NULL;
    for (char *item = strtok_r(items, ",", &save); item; item = strtok_r(NULL, ",", &save))
        if ((strstr(sass, item) != NULL) != present)
            fail_msg("%s: the SASS %s %s", where, present ? "lacks" : "has", item);
}

static void check_sass(const op_variant *v, const void *cubin, size_t size, const char *where)
{
    static int no_disassembler; /* tu_sass said why once (and noted the skip); the rest skip quietly */
    if (no_disassembler) return;
    char *sass = tu_sass(cubin, size);
    if (!sass) {
        no_disassembler = 1;
        return;
    }
    expect_in_sass(sass, v->sass, 1, where);
    expect_in_sass(sass, v->sass_absent, 0, where);
    /* local memory is a register spill unless the variant keeps arrays there by design; one that
     * claims so and has none carries a stale flag */
    int local = strstr(sass, "LDL") || strstr(sass, "STL");
    if (local && !v->local_arrays) fail_msg("%s: the SASS uses local memory (LDL/STL): a spill", where);
    if (!local && v->local_arrays) fail_msg("%s: no local memory left: clear the variant's local_arrays", where);
    free(sass);
}

/* Generates and compiles v for the example p on target t and checks its SASS. */
/* The parameters of entry's definition in source (the commas at depth 1 of its list), -1 when
 * the source defines no __global__ entry of that name. */
static int entry_params(const char *source, const char *entry)
{
    size_t len = strlen(entry);
    for (const char *at = strstr(source, entry); at; at = strstr(at + 1, entry)) {
        const char *open = at + len;
        while (*open == ' ' || *open == '\n') open++;
        if (*open != '(' || at == source || (at[-1] != ' ' && at[-1] != '\n')) continue;
        const char *line = at;
        while (line > source && line[-1] != ';' && line[-1] != '}') line--;
        if (!strstr(line, "__global__") || strstr(line, "__global__") > at) continue;
        int depth = 0, commas = 0, any = 0;
        for (const char *c = open; *c; c++) {
            if (*c == '(') depth++;
            else if (*c == ')' && --depth == 0) return any ? commas + 1 : 0;
            else if (*c == ',' && depth == 1) commas++;
            else if (depth == 1 && *c != ' ' && *c != '\n') any = 1;
        }
        return -1;
    }
    return -1;
}

static void compile_variant(const op_desc *d, const op_variant *v, const sj_problem *p, int t)
{
    char where[128];
    snprintf(where, sizeof where, "%s/%s on %s", d->name, v->name, targets[t]);
    double start = now();
    sj_generated *g = NULL;
    if (sj_generate(ctx_of[t], p, v->config, &g) != SJ_OK) fail_msg("%s: sj_generate: %s", where, sj_last_error());
    assert_string_equal(g->template_name, d->template_name);
    if (!selects(v->config, g->config)) fail_msg("%s: config %s does not select '%s'", where, g->config, v->config);
    /* The launch passes the op's n_args: a kernel taking more would have the driver read past
     * them (test_hybrid_ffn_gpu's segfault on the H100, 2026-12-07: 15 parameters, 12 passed). */
    const int params = entry_params(g->source, g->entry);
    if (params < 0) fail_msg("%s: no __global__ definition of %s in the generated source", where, g->entry);
    if (d->n_args && (unsigned)params > d->n_args)
        fail_msg("%s: %s takes %d parameters; the op launches with %u (templates/README.md)", where, g->entry, params,
                 d->n_args);
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    if (sj_compile(ctx_of[t], g, &cubin, &size, &log) != SJ_OK)
        fail_msg("%s: sj_compile: %s\n%.2000s", where, sj_last_error(), log ? log : "");
    free(log);
    fprintf(stderr, "# %s: %s, %.1f s\n", where, g->config, now() - start);
    check_sass(v, cubin, size, where);
    free(cubin);
    sj_generated_free(g);
}

/* A variant below its arch is refused before any compilation, naming the arch it needs. */
static void expect_refused(const op_desc *d, const op_variant *v, const sj_problem *p, int t)
{
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx_of[t], p, v->config, &g), SJ_ERR_INVALID_ARGUMENT, v->arch);
    assert_null(g);
    fprintf(stderr, "# %s/%s on %s: refused (%s)\n", d->name, v->name, targets[t], sj_last_error());
}

static void test_variants_compile(void **state)
{
    for (int i = 0; i < op_count(); i++) {
        const op_desc *d = op_at(i);
        for (int v = 0; v < d->n_variants; v++) {
            const op_variant *var = &d->variants[v];
            sj_problem p;
            if (var->example) {
                var->example(&p);
                assert_int_equal(p.op, d->op);
                SJ_ASSERT_OK(sj_problem_validate(&p));
            } else {
                d->example(&p);
            }
            for (int t = 0; t < N_TARGETS; t++) {
                if (t < target_index(var->arch)) expect_refused(d, var, &p, t);
                else compile_variant(d, var, &p, t);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_fields),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_template_variants_listed),
        cmocka_unit_test(test_variants_compile),
    };
    return TU_RUN_TESTS(tests, setup, teardown);
}
