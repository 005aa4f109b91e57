/* test_hybrid_dw_busy.c: hybrid-ffn-dw's busy units (BUSY > 0, templates/lib/hybrid_busy.lua) on
 * the CPU: the selection rule's host reference (hybrid_dw_busy_select_host, which the GPU test
 * compares the device's stage 4 with) against a brute force on random token counts (none busy,
 * all busy, more busy units than slots, exactly as many, counts at the threshold's edge), the
 * least count, the buffers' plan, and the template's side: BUSY = 0 is the default, the tuning
 * space offers every capacity, refusals name the bound, BUSY > 0's kernel takes slot_of and
 * skips the busy units, BUSY = 0's does neither. The kernels' numerics are checked on a GPU by
 * tests/test_hybrid_ffn_gpu.c, their compilation and SASS by test_op_table's walk. */
#include "test_util.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static int setup(void **state)
{
    (void)state;
    rng = tu_seed();
    return 0;
}

static int64_t random_below(int64_t n) { return (int64_t)((tu_uniform(&rng) + 1.0) * 0.5 * (double)n) % n; }

/* The rule as it reads: unit j is busy when counts[j] * 64 >= tokens (a rate of at least 1/64),
 * and takes a slot when fewer than capacity busy units precede it (counted afresh for each j). */
static void brute_force(const int64_t *counts, int64_t d_ff, int64_t tokens, int capacity, int32_t *slot_of,
                        int32_t *unit_of)
{
    for (int s = 0; s <= capacity; s++) unit_of[s] = -1;
    int32_t busy = 0;
    for (int64_t j = 0; j < d_ff; j++) {
        int64_t before = 0;
        for (int64_t i = 0; i < j; i++) before += counts[i] * 64 >= tokens;
        const int is_busy = counts[j] * 64 >= tokens;
        slot_of[j] = is_busy && before < capacity ? (int32_t)before : -1;
        if (slot_of[j] >= 0) unit_of[slot_of[j]] = (int32_t)j;
        busy += is_busy;
    }
    unit_of[capacity] = busy < capacity ? busy : capacity;
}

/* Counts of d_ff units over tokens: `busy` of them (at random places) at or above the least
 * busy count, the others below it; edges: some exactly at the least count and one below. */
static void random_counts(int64_t *counts, int64_t d_ff, int64_t tokens, int64_t busy)
{
    const int64_t least = (tokens + 63) / 64;
    for (int64_t j = 0; j < d_ff; j++) counts[j] = least > 1 ? random_below(least) : 0;
    for (int64_t placed = 0; placed < busy;) {
        const int64_t j = random_below(d_ff);
        if (counts[j] >= least) continue;
        counts[j] = random_below(4) == 0 ? least : least + random_below(tokens - least + 1);
        placed++;
    }
}

static void check_case(int64_t d_ff, int64_t tokens, int capacity, int64_t busy)
{
    int64_t *counts = malloc(sizeof *counts * (size_t)d_ff);
    int32_t *slot = malloc(sizeof *slot * (size_t)d_ff), *want_slot = malloc(sizeof *want_slot * (size_t)d_ff);
    int32_t *unit = malloc(sizeof *unit * (size_t)(capacity + 1)), *want_unit = malloc(sizeof *want_unit * (size_t)(capacity + 1));
    assert_true(counts && slot && want_slot && unit && want_unit);
    random_counts(counts, d_ff, tokens, busy);
    memset(slot, 0x5a, sizeof *slot * (size_t)d_ff); /* poisoned: every entry must be written */
    memset(unit, 0x5a, sizeof *unit * (size_t)(capacity + 1));
    hybrid_dw_busy_select_host(counts, d_ff, tokens, capacity, slot, unit);
    brute_force(counts, d_ff, tokens, capacity, want_slot, want_unit);
    for (int64_t j = 0; j < d_ff; j++)
        if (slot[j] != want_slot[j])
            fail_msg("d_ff %lld, %lld tokens, capacity %d, %lld busy: slot_of[%lld] = %d, expected %d (count %lld)",
                     (long long)d_ff, (long long)tokens, capacity, (long long)busy, (long long)j, slot[j], want_slot[j],
                     (long long)counts[j]);
    for (int s = 0; s <= capacity; s++)
        if (unit[s] != want_unit[s])
            fail_msg("d_ff %lld, %lld tokens, capacity %d, %lld busy: unit_of[%d] = %d, expected %d", (long long)d_ff,
                     (long long)tokens, capacity, (long long)busy, s, unit[s], want_unit[s]);
    assert_int_equal(unit[capacity], busy < capacity ? busy : capacity);
    free(counts), free(slot), free(want_slot), free(unit), free(want_unit);
}

static void test_selection_matches_brute_force(void **state)
{
    (void)state;
    const struct { int64_t d_ff, tokens; int capacity; int64_t busy; } cases[] = {
        { 1024, 8192, 128, 0 },     /* none busy */
        { 1024, 8192, 128, 1024 },  /* every unit busy, far past the capacity */
        { 1024, 8192, 512, 300 },   /* fewer than the slots */
        { 1024, 8192, 256, 256 },   /* exactly the slots */
        { 1024, 8192, 128, 129 },   /* one past them */
        { 128, 64, 128, 128 },      /* every unit busy and placed */
        { 3001, 77, 256, 700 },     /* ragged: the least count is 2 */
        { 11008, 8192, 512, 900 },
        { 200, 1, 128, 150 },       /* one token: any active unit is busy */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int rep = 0; rep < 3; rep++)
            check_case(cases[i].d_ff, cases[i].tokens, cases[i].capacity, cases[i].busy);
}

/* ceil(tokens / 64): a busy unit's rate is at least 1/64. */
static void test_least_count(void **state)
{
    (void)state;
    for (int64_t tokens = 1; tokens <= 70000; tokens += 1 + random_below(97)) {
        const int64_t least = hybrid_dw_busy_threshold(tokens);
        assert_true(least * 64 >= tokens);
        assert_true((least - 1) * 64 < tokens);
    }
}

/* The buffers lie 16-byte aligned, in order, without overlap, each as large as its contents;
 * the second GEMM's A and C rows start 16-byte aligned too (2 capacity rows in). */
static void test_plan(void **state)
{
    (void)state;
    const struct { int64_t tokens, d_ff, d_model; int capacity; size_t in, out; } cases[] = {
        { 8192, 11008, 4096, 512, 2, 2 }, { 77, 3001, 1032, 256, 2, 4 }, { 130, 128, 264, 128, 2, 2 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hybrid_dw_busy_ws w;
        hybrid_dw_busy_plan(cases[i].tokens, cases[i].d_ff, cases[i].d_model, cases[i].capacity, cases[i].in,
                            cases[i].out, &w);
        const size_t cap = (size_t)cases[i].capacity;
        assert_int_equal(w.slot_of, 0);
        assert_true(w.unit_of >= 4 * (size_t)cases[i].d_ff);
        assert_true(w.a >= w.unit_of + 4 * (cap + 1));
        assert_int_equal(w.a_bytes, 3 * cap * (size_t)cases[i].tokens * cases[i].in);
        assert_true(w.c >= w.a + w.a_bytes);
        assert_true(w.total >= w.c + 3 * cap * (size_t)cases[i].d_model * cases[i].out);
        const size_t offsets[] = { w.unit_of, w.a, w.c, w.total, w.a_bytes / 3 * 2,
                                   2 * cap * (size_t)cases[i].d_model * cases[i].out };
        for (size_t k = 0; k < sizeof offsets / sizeof *offsets; k++) assert_int_equal(offsets[k] % 16, 0);
    }
}

/* hybrid-ffn-dw over a bf16 matrix of tokens x d_ff, W = 128, no backup. */
static sj_problem dw_problem(int64_t tokens, int64_t d_model, int64_t d_ff)
{
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, tokens, d_ff, 128, 0));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, d_model, &p));
    return p;
}

static void test_template(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    if (!ctx) fail_msg("cannot create a compile-only context: %s", sj_last_error());
    sj_problem p = dw_problem(8192, 4096, 11008);
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, &p, NULL, &g));
    assert_int_equal(tu_config_value(g->config, "BUSY"), 0);
    assert_null(strstr(g->source, "slot_of"));
    sj_generated_free(g);
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(ctx, &gs));
    gen_space space;
    SJ_ASSERT_OK(gen_space_of(gs, "hybrid_ffn_dw", &p, &space));
    int busy_values = 0;
    for (int k = 0; k < space.n_params; k++)
        if (!strcmp(space.names[k], "BUSY")) busy_values = space.n_values[k];
    assert_int_equal(busy_values, 4);
    const int capacities[] = { 128, 256, 512 };
    for (size_t i = 0; i < 3; i++) {
        char config[32];
        snprintf(config, sizeof config, "BUSY=%d", capacities[i]);
        SJ_ASSERT_OK(sj_generate(ctx, &p, config, &g));
        assert_non_null(strstr(g->source, "const int* __restrict__ slot_of)"));
        assert_int_equal(tu_count_lines(g->source, "if (slot_of[j] >= 0) continue;"), 1);
        sj_generated_free(g);
    }
    tu_expect_refused(ctx, &p, "BUSY=64", "BUSY=64 must be 0");
    sj_problem small = dw_problem(256, 512, 200);
    tu_expect_refused(ctx, &small, "BUSY=256", "more busy-unit slots than d_ff 200");
    sj_problem t;
    sj_problem_init(&t, SJ_OP_HYBRID_TRANSPOSE, SJ_DTYPE_BF16, 256, 1024, 1);
    t.twell_tile = 1024;
    t.twell_capacity = 128;
    tu_expect_refused(ctx, &t, "STAGE=7", "STAGE=7 must be 0..3");
    sj_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_matches_brute_force),
        cmocka_unit_test(test_least_count),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_template),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
