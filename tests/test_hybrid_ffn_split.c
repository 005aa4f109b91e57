/* test_hybrid_ffn_split.c: the L2-blocked configs of hybrid-ffn-fwd and hybrid-ffn-dx
 * (lib/hybrid_rows.lua's SPLIT and STAGE) on the CPU: the default stays the one kernel per token
 * while the tuner tries the L2-blocked pair first where the shape allows it (fwd SPLIT=4, dx
 * SPLIT=8), the tuning space never offers STAGE=1 (the op launches it), the two kernels' geometry (SPLIT x
 * tokens CTAs; the slice kernel's block a warp multiple covering its slice), and the refusals of
 * what does not divide, each naming the bound, and the tuner's first candidates. The kernels' numerics are checked on a GPU by
 * tests/test_hybrid_ffn_gpu.c; their compilation and SASS by test_op_table's walk. */
#include "test_util.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

static sj_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = tu_compile_context("sm_90a");
    if (!ctx) fprintf(stderr, "# cannot create a compile-only context: %s\n", sj_last_error());
    return ctx ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sj_context_destroy(ctx);
    return 0;
}

/* tokens x d_model, d_ff, ELL width W at 99% zeros. */
static sj_problem ffn(sj_op op, int64_t tokens, int64_t d_model, int64_t d_ff, int W)
{
    sj_problem p;
    sj_problem_init(&p, op, SJ_DTYPE_BF16, tokens, d_model, d_model);
    p.d_ff = d_ff;
    p.twell_tile = (int)d_ff;
    p.twell_capacity = W;
    p.twell_sparsity = 0.99;
    return p;
}

static sj_generated *generate(const sj_problem *p, const char *config)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, p, config, &g));
    return g;
}

static void test_default_is_one_kernel_per_token(void **state)
{
    (void)state;
    const sj_op ops[] = { SJ_OP_HYBRID_FFN_FWD, SJ_OP_HYBRID_FFN_DX };
    const char *templates[] = { "hybrid_ffn_fwd", "hybrid_ffn_dx" };
    for (int i = 0; i < 2; i++) {
        sj_problem p = ffn(ops[i], 8192, 4096, 11008, 128);
        sj_generated *g = generate(&p, NULL);
        assert_int_equal(tu_config_value(g->config, "SPLIT"), 0);
        assert_int_equal(tu_config_value(g->config, "STAGE"), 0);
        assert_int_equal(g->grid[0], 8192);
        sj_generated_free(g);
        gen_state *gs;
        SJ_ASSERT_OK(rt_generator(ctx, &gs));
        gen_space space;
        SJ_ASSERT_OK(gen_space_of(gs, templates[i], &p, &space));
        int has_split = 0, stage_values = -1;
        for (int k = 0; k < space.n_params; k++) {
            if (!strcmp(space.names[k], "SPLIT")) has_split = space.n_values[k] > 1;
            if (!strcmp(space.names[k], "STAGE")) stage_values = space.n_values[k] == 1 ? space.values[k][0] : -1;
        }
        assert_true(has_split);
        assert_int_equal(stage_values, 0);
    }
}

/* d_model 4096, d_ff 11008, 8192 tokens: ranges of 1376 units at SPLIT=8; slices of 512
 * columns (64 pieces: two warps) at SPLIT=8, 1024 at SPLIT=4 (a block of THREADS=128). */
static void test_geometry(void **state)
{
    (void)state;
    sj_problem p = ffn(SJ_OP_HYBRID_FFN_DX, 8192, 4096, 11008, 128);
    sj_generated *g = generate(&p, "THREADS=256,SPLIT=8");
    assert_int_equal(g->grid[0], 8 * 8192);
    assert_int_equal(g->block[0], 256);
    assert_non_null(strstr(g->source, "#define RANGE 1376"));
    sj_generated_free(g);
    g = generate(&p, "THREADS=256,SPLIT=8,STAGE=1");
    assert_int_equal(g->grid[0], 8 * 8192);
    assert_int_equal(g->block[0], 64);
    assert_non_null(strstr(g->source, "#define SLICE 512"));
    sj_generated_free(g);
    g = generate(&p, "THREADS=128,SPLIT=4,STAGE=1");
    assert_int_equal(g->block[0], 128);
    assert_non_null(strstr(g->source, "#define SLICE 1024"));
    sj_generated_free(g);
    /* ragged: 1032 columns are 129 pieces, slices of 33 (264 columns) on a block of 64 threads */
    sj_problem r = ffn(SJ_OP_HYBRID_FFN_FWD, 77, 1032, 3001, 64);
    g = generate(&r, "THREADS=128,SPLIT=4,STAGE=1");
    assert_int_equal(g->grid[0], 4 * 77);
    assert_int_equal(g->block[0], 64);
    assert_non_null(strstr(g->source, "#define SLICE 264"));
    sj_generated_free(g);
}

/* The tuner's first candidates: the L2-blocked form (SPLIT fwd 4, dx 8) where it fits, then the
 * per-token kernel of the same tile, then ALGO=2 on sm_90a; a d_ff too small for any range leaves
 * the per-token kernel and ALGO=2. */
static void test_variants(void **state)
{
    (void)state;
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(ctx, &gs));
    const sj_op ops[] = { SJ_OP_HYBRID_FFN_FWD, SJ_OP_HYBRID_FFN_DX };
    const char *templates[] = { "hybrid_ffn_fwd", "hybrid_ffn_dx" };
    const int splits[] = { 4, 8 };
    char configs[GEN_MAX_VARIANTS][256];
    for (int i = 0; i < 2; i++) {
        sj_problem p = ffn(ops[i], 8192, 4096, 11008, 128);
        int n = 0;
        /* then, on sm_90a, their tensor-core variant (test_hybrid_pairs_list checks it) */
        SJ_ASSERT_OK(gen_variant_configs(gs, templates[i], &p, configs, GEN_MAX_VARIANTS, &n));
        assert_int_equal(n, 3);
        assert_int_equal(tu_config_value(configs[0], "SPLIT"), splits[i]);
        assert_int_equal(tu_config_value(configs[0], "STAGE"), 0);
        assert_int_equal(tu_config_value(configs[1], "SPLIT"), 0);
        assert_int_equal(tu_config_value(configs[1], "THREADS"), tu_config_value(configs[0], "THREADS"));
        assert_int_equal(tu_config_value(configs[2], "ALGO"), 2);
        sj_problem small = ffn(ops[i], 64, 4096, 500, 64);
        SJ_ASSERT_OK(gen_variant_configs(gs, templates[i], &small, configs, GEN_MAX_VARIANTS, &n));
        assert_int_equal(n, 2);
        assert_int_equal(tu_config_value(configs[0], "SPLIT"), 0);
    }
}

static void expect_refused(const sj_problem *p, const char *config, const char *needle)
{
    tu_expect_refused(ctx, p, config, needle);
}

static void test_refusals(void **state)
{
    (void)state;
    sj_problem p = ffn(SJ_OP_HYBRID_FFN_FWD, 8192, 4096, 11008, 128);
    expect_refused(&p, "SPLIT=2", "must be 0 (one kernel per token), 4, 8 or 16");
    expect_refused(&p, "ALGO=0,SPLIT=0,STAGE=1", "second kernel of SPLIT > 0");
    expect_refused(&p, "SPLIT=4,STAGE=2", "STAGE=2 must be 0");
    sj_problem narrow = ffn(SJ_OP_HYBRID_FFN_DX, 256, 2048, 11008, 128);
    expect_refused(&narrow, "SPLIT=16", "256 16-byte pieces; a column slice needs at least 32 (a warp's), so SPLIT <= 8");
    sj_problem few = ffn(SJ_OP_HYBRID_FFN_FWD, 256, 4096, 1000, 128);
    expect_refused(&few, "SPLIT=8", "d_ff 1000 makes unit ranges of fewer than 128 units, so SPLIT <= 7");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_one_kernel_per_token),
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
