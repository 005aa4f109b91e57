/* test_hybrid_ffn_workspace.c: on the CPU, the workspace of each hybrid FFN kernel
 * (hybrid_ffn_workspace_of: what sj_hybrid_ffn_workspace answers for the kernel it resolves, what
 * the entry points require and the harnesses allocate) for configs as the templates complete them
 * (sj_generate's canonical config, so the parameter names and values are the templates' own):
 * the per-token and L2-blocked fwd and dx need none, ALGO=2 hybrid_pairs_plan's total (its slots
 * twice for the dx), the dw the transpose's plan and for BUSY = 128, 256, 512 the busy units'
 * plan on top, for ragged shapes, backups of every size and gradients of every dtype; the bound
 * sj_workspace_size gives is the largest of these over the shape (a backup row for every token,
 * the template's largest BUSY, which must be HYBRID_DW_MAX_BUSY); a layout past the transpose's
 * 32-bit positions is refused; config values are read by name. Resolving the kernel needs a GPU:
 * tests/test_hybrid_ffn_gpu.c checks the query itself. */
#include "test_util.h"
#include "generator/generator.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"

#include <stdio.h>
#include <string.h>

static sj_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = tu_compile_context("sm_90a");
    return ctx ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sj_context_destroy(ctx);
    return 0;
}

/* The canonical config the op's template completes config to for p. */
static void canonical(const sj_problem *p, const char *config, char *out, size_t len)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, p, config, &g));
    snprintf(out, len, "%s", g->config);
    sj_generated_free(g);
}

/* hybrid_ffn_workspace_of of p's kernel of config over layout l. */
static size_t bytes_of(const sj_problem *p, const char *config, const sj_hybrid_layout *l)
{
    char full[256];
    canonical(p, config, full, sizeof full);
    size_t bytes = 12345;
    SJ_ASSERT_OK(hybrid_ffn_workspace_of(p, full, l, &bytes));
    return bytes;
}

typedef struct shape {
    sj_dtype dt;
    int64_t tokens, d_ff, d_model;
    int w;
    int64_t backup;
} shape;

static const shape shapes[] = {
    { SJ_DTYPE_BF16, 256, 1024, 512, 128, 32 },
    { SJ_DTYPE_F16, 130, 768, 264, 32, 130 },   /* every row in the backup */
    { SJ_DTYPE_BF16, 77, 3001, 1032, 64, 0 },    /* ragged, no backup */
    { SJ_DTYPE_F16, 700, 1500, 520, 64, 9 },
};

static void test_fwd_dx(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, s->dt, s->tokens, s->d_ff, s->w, s->backup));
        for (int halves = 1; halves <= 2; halves++) {
            sj_problem p;
            SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, halves == 1 ? SJ_OP_HYBRID_FFN_FWD : SJ_OP_HYBRID_FFN_DX, s->d_model,
                                               &p));
            assert_int_equal(bytes_of(&p, NULL, &l), 0);
            assert_int_equal(bytes_of(&p, "ALGO=0", &l), 0);
            if (s->d_model >= 4 * 32 * 8) /* a column slice of SPLIT=4 takes at least a warp's 16-byte pieces */
                assert_int_equal(bytes_of(&p, "SPLIT=4", &l), 0);
            hybrid_pairs_ws w;
            hybrid_pairs_plan(s->tokens, s->d_ff, s->w, s->backup, halves, &w);
            assert_int_equal(bytes_of(&p, "ALGO=2", &l), w.total);
            assert_int_equal(bytes_of(&p, "ALGO=2,UT=256,WARPS=16", &l), w.total);
            /* the list holds a pair per position, 8 bytes each */
            assert_true(w.total >= 8 * (size_t)(s->tokens * s->w + s->backup * s->d_ff));
            /* a backup row for every token and ALGO=2: the bound */
            hybrid_pairs_plan(s->tokens, s->d_ff, s->w, s->tokens, halves, &w);
            assert_int_equal(hybrid_ffn_workspace_bound(&p), w.total);
        }
    }
}

static void test_dw(void **state)
{
    (void)state;
    const sj_dtype outs[] = { SJ_DTYPE_F32, SJ_DTYPE_BF16, SJ_DTYPE_F16, SJ_DTYPE_F32 };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, s->dt, s->tokens, s->d_ff, s->w, s->backup));
        sj_problem p;
        SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, s->d_model, &p));
        p.out_dtype = outs[i];
        hybrid_dw_ws w;
        hybrid_dw_plan(s->tokens, s->d_ff, s->w, s->backup, &w);
        size_t transpose;
        SJ_ASSERT_OK(sj_hybrid_ffn_dw_workspace(&l, &transpose));
        assert_int_equal(transpose, w.total);
        assert_int_equal(bytes_of(&p, NULL, &l), w.total);
        assert_int_equal(bytes_of(&p, "BUSY=0", &l), w.total);
        const int capacities[] = { 128, 256, 512 };
        for (size_t c = 0; c < 3 && capacities[c] <= s->d_ff; c++) {
            char config[32];
            snprintf(config, sizeof config, "BUSY=%d", capacities[c]);
            hybrid_dw_busy_ws b;
            hybrid_dw_busy_plan(s->tokens, s->d_ff, s->d_model, capacities[c], sj_dtype_size(s->dt),
                                sj_dtype_size(outs[i]), &b);
            assert_int_equal(bytes_of(&p, config, &l), w.total + b.total);
            /* the busy buffers start 16-byte aligned after the transpose's */
            assert_int_equal(w.total % 16, 0);
        }
        /* a backup row for every token and the largest BUSY */
        hybrid_dw_plan(s->tokens, s->d_ff, s->w, s->tokens, &w);
        hybrid_dw_busy_ws b;
        hybrid_dw_busy_plan(s->tokens, s->d_ff, s->d_model, HYBRID_DW_MAX_BUSY, sj_dtype_size(s->dt),
                            sj_dtype_size(outs[i]), &b);
        assert_int_equal(hybrid_ffn_workspace_bound(&p), w.total + b.total);
    }
    /* fewer units than the largest BUSY: the bound takes d_ff slots, the most the template allows */
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 130, 200, 32, 0));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, 264, &p));
    tu_expect_refused(ctx, &p, "BUSY=256", "more busy-unit slots than d_ff 200");
    hybrid_dw_ws w;
    hybrid_dw_plan(130, 200, 32, 130, &w);
    hybrid_dw_busy_ws b;
    hybrid_dw_busy_plan(130, 200, 264, 200, 2, 2, &b);
    assert_int_equal(hybrid_ffn_workspace_bound(&p), w.total + b.total);
    /* past the list's 32-bit positions: refused, as sj_hybrid_ffn_dw_workspace refuses it */
    sj_hybrid_layout big;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&big, SJ_DTYPE_F16, 70000, 65536, 128, 70000));
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&big, SJ_OP_HYBRID_FFN_DW, 64, &p));
    size_t bytes;
    SJ_ASSERT_STATUS(hybrid_ffn_workspace_of(&p, "BUSY=0,PF=4,THREADS=128,UB=4,VPT=1", &big, &bytes),
                     SJ_ERR_INVALID_ARGUMENT, "2^32 - 1");
}

/* HYBRID_DW_MAX_BUSY is the largest BUSY of the template's tuning space. */
static void test_largest_busy(void **state)
{
    (void)state;
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 8192, 11008, 128, 0));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, 4096, &p));
    gen_state *g;
    SJ_ASSERT_OK(rt_generator(ctx, &g));
    gen_space space;
    SJ_ASSERT_OK(gen_space_of(g, "hybrid_ffn_dw", &p, &space));
    int largest = -1;
    for (int k = 0; k < space.n_params; k++)
        if (!strcmp(space.names[k], "BUSY"))
            for (int v = 0; v < space.n_values[k]; v++) largest = space.values[k][v] > largest ? space.values[k][v] : largest;
    assert_int_equal(largest, HYBRID_DW_MAX_BUSY);
    char config[32];
    snprintf(config, sizeof config, "BUSY=%d", 2 * HYBRID_DW_MAX_BUSY);
    tu_expect_refused(ctx, &p, config, "must be 0");
}

static void test_config_value(void **state)
{
    (void)state;
    int v = 7;
    SJ_ASSERT_OK(hybrid_config_value("ALGO=2,STAGE=0,UT=256", "UT", &v));
    assert_int_equal(v, 256);
    SJ_ASSERT_OK(hybrid_config_value("ALGO=2,STAGE=0,UT=256", "BUSY", &v));
    assert_int_equal(v, 0);
    SJ_ASSERT_OK(hybrid_config_value("", "ALGO", &v));
    assert_int_equal(v, 0);
    assert_int_not_equal(hybrid_config_value("ALGO=two", "ALGO", &v), SJ_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwd_dx),
        cmocka_unit_test(test_dw),
        cmocka_unit_test(test_largest_busy),
        cmocka_unit_test(test_config_value),
    };
    return TU_RUN_TESTS(tests, setup, teardown);
}
