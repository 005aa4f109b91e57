/* test_tuner_search.c: the tuner's search on the CPU (tuner/search.c): constraint pruning and the
 * stable order, no duplicate candidates, trial and seconds budgets, seeded determinism that does
 * not depend on the order results arrive in, the tie rule, and the budgeted pick against the
 * exhaustive best on a GEMM-like cost surface. */
#include "test_util.h"
#include "tuner/tuner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ spaces and predicates */

static void add_param(gen_space *s, const char *name, int n, const int *values)
{
    int i = s->n_params++;
    snprintf(s->names[i], sizeof s->names[i], "%s", name);
    s->n_values[i] = n;
    for (int j = 0; j < n; j++) s->values[i][j] = values[j];
}

static int value_of(const gen_config *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name)) return c->values[i];
    fail_msg("config has no %s", name);
    return 0;
}

/* A GEMM-like space: tiles, warp tiles and pipeline depth, 1728 configs before constraints. */
static void gemm_like_space(gen_space *s)
{
    memset(s, 0, sizeof *s);
    add_param(s, "BM", 4, (int[]){ 32, 64, 128, 256 });
    add_param(s, "BN", 4, (int[]){ 32, 64, 128, 256 });
    add_param(s, "BK", 3, (int[]){ 16, 32, 64 });
    add_param(s, "WM", 3, (int[]){ 16, 32, 64 });
    add_param(s, "WN", 3, (int[]){ 16, 32, 64 });
    add_param(s, "STAGES", 4, (int[]){ 2, 3, 4, 5 });
}

typedef struct counter { int calls; } counter;

static int gemm_like_ok(const gen_config *c)
{
    int bm = value_of(c, "BM"), bn = value_of(c, "BN"), bk = value_of(c, "BK");
    int wm = value_of(c, "WM"), wn = value_of(c, "WN"), st = value_of(c, "STAGES");
    int warps = (bm / (wm ? wm : 1)) * (bn / (wn ? wn : 1));
    return wm <= bm && wn <= bn && warps >= 1 && warps <= 16 && (bm + bn) * bk * 2 * st <= 228 * 1024;
}

static sj_status gemm_like_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    counter *k = user;
    if (k) k->calls++;
    *valid = gemm_like_ok(c);
    return SJ_OK;
}

/* A cost surface with one broad optimum and a deterministic +-4% ripple, like measured GEMM
 * times: bigger tiles reuse more, too few blocks or warps underfill the GPU, stages hide latency. */
static double gemm_like_cost(const char *text)
{
    gen_config c;
    if (gen_config_parse(text, &c) != SJ_OK) fail_msg("bad config text '%s'", text);
    double bm = value_of(&c, "BM"), bn = value_of(&c, "BN"), bk = value_of(&c, "BK");
    double wm = value_of(&c, "WM"), wn = value_of(&c, "WN"), st = value_of(&c, "STAGES");
    double blocks = (4096.0 / bm) * (4096.0 / bn), waves = ceil(blocks / 132.0);
    double reuse = 1.0 / bm + 1.0 / bn;
    double warps = (bm / wm) * (bn / wn);
    double t = 100.0 * waves / (blocks / 132.0) * (1.0 + 40.0 * reuse) * (1.0 + 2.0 / st) *
               (1.0 + fabs(log2(warps) - 3.0) * 0.15) * (1.0 + fabs(log2(bk) - 5.0) * 0.1) *
               (1.0 + 8.0 / (wm * wn / 64.0 + 4.0));
    uint64_t h = 1469598103934665603ull;
    for (const char *p = text; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return t * (0.96 + 0.08 * (double)(h % 1000) / 1000.0);
}

/* Runs a search to the end with a pipeline of `lookahead` candidates in flight (the oldest is
 * reported first), as the tuner does. Returns the number issued; ids[] gets the stable indices
 * in issue order. fake_seconds_per_trial advances the clock handed to search_next. */
static int drive(search *s, int lookahead, double fake_seconds_per_trial, uint64_t *order, int max_order)
{
    int *queue = malloc(sizeof *queue * 100000);
    int head = 0, tail = 0, n = 0;
    double clock = 0;
    for (;;) {
        search_step step = SEARCH_DONE;
        search_candidate c;
        while (tail - head < lookahead) {
            SJ_ASSERT_OK(search_next(s, clock, &step, &c));
            if (step != SEARCH_CANDIDATE) break;
            if (n < max_order) order[n] = c.index;
            n++;
            queue[tail++] = c.id;
        }
        if (tail == head) {
            assert_int_equal(step, SEARCH_DONE); /* WAIT with nothing pending would hang the tuner */
            break;
        }
        int id = queue[head++];
        SJ_ASSERT_OK(search_report(s, id, gemm_like_cost(s->entries[id].config)));
        clock += fake_seconds_per_trial;
    }
    free(queue);
    return n;
}

static void assert_unique_and_valid(const search *s)
{
    for (int i = 0; i < s->n_entries; i++) {
        gen_config c;
        SJ_ASSERT_OK(gen_config_parse(s->entries[i].config, &c));
        assert_true(gemm_like_ok(&c));
        for (int j = 0; j < i; j++) {
            if (s->entries[i].index == s->entries[j].index || !strcmp(s->entries[i].config, s->entries[j].config))
                fail_msg("candidate %d (%s) issued twice (also #%d)", i, s->entries[i].config, j);
        }
    }
}

/* ------------------------------------------------------------------ tests */

static void test_exhaustive_prunes_and_keeps_stable_order(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    counter k = { 0 };
    search s;
    search_options o = { .strategy = SJ_TUNE_EXHAUSTIVE };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, &k, &o));
    assert_int_equal(s.total, 1728);
    assert_int_equal(k.calls, 1728);

    /* The independent count: nested loops in params order, values in declared order. */
    char expect[1728][256];
    int n_expect = 0, pruned = 0;
    for (int a = 0; a < 4; a++) for (int b = 0; b < 4; b++) for (int c = 0; c < 3; c++)
    for (int d = 0; d < 3; d++) for (int e = 0; e < 3; e++) for (int f = 0; f < 4; f++) {
        gen_config cfg = { .n = 6 };
        const int idx[6] = { a, b, c, d, e, f };
        for (int i = 0; i < 6; i++) {
            snprintf(cfg.names[i], 16, "%s", sp.names[i]);
            cfg.values[i] = sp.values[i][idx[i]];
        }
        if (!gemm_like_ok(&cfg)) { pruned++; continue; }
        gen_config_format(&cfg, expect[n_expect++], 256);
    }
    assert_true(pruned > 100 && n_expect > 100); /* the constraints do bite */
    assert_int_equal(s.n_valid, n_expect);
    assert_int_equal(s.pruned, pruned);
    assert_int_equal(search_planned(&s), n_expect);

    int n = 0;
    for (;;) {
        search_step step;
        search_candidate c;
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        if (step == SEARCH_DONE) break;
        assert_int_equal(step, SEARCH_CANDIDATE);
        assert_int_equal(c.id, n);
        assert_string_equal(c.config, expect[n]);
        SJ_ASSERT_OK(search_report(&s, c.id, 1.0 + n));
        n++;
    }
    assert_int_equal(n, n_expect);
    assert_unique_and_valid(&s);
    /* A reported candidate cannot be reported again, nor an id never issued. */
    SJ_ASSERT_STATUS(search_report(&s, 0, 1.0), SJ_ERR_INVALID_ARGUMENT, "twice");
    SJ_ASSERT_STATUS(search_report(&s, n, 1.0), SJ_ERR_INVALID_ARGUMENT, "not an issued");
    search_free(&s);
}

static sj_status all_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    *valid = 1;
    return SJ_OK;
}

static void test_duplicate_values_give_no_duplicate_candidates(void **state)
{
    gen_space sp = { 0 };
    add_param(&sp, "BM", 5, (int[]){ 64, 128, 64, 256, 128 });
    add_param(&sp, "BN", 3, (int[]){ 32, 32, 32 });
    for (int strategy = 0; strategy < 2; strategy++) {
        search s;
        search_options o = { .strategy = (sj_tune_strategy)strategy, .budget_trials = 100, .seed = 7 };
        SJ_ASSERT_OK(search_init(&s, &sp, all_valid, NULL, &o));
        assert_int_equal(s.total, 3);
        for (;;) {
            search_step step;
            search_candidate c;
            SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
            if (step == SEARCH_DONE) break;
            if (step == SEARCH_WAIT) fail_msg("WAIT with nothing pending");
            SJ_ASSERT_OK(search_report(&s, c.id, 10.0 - c.id));
        }
        assert_int_equal(s.n_entries, 3);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < i; j++) assert_string_not_equal(s.entries[i].config, s.entries[j].config);
        if (strategy == SJ_TUNE_EXHAUSTIVE) {
            assert_string_equal(s.entries[0].config, "BM=64,BN=32");
            assert_string_equal(s.entries[1].config, "BM=128,BN=32");
            assert_string_equal(s.entries[2].config, "BM=256,BN=32");
        }
        search_free(&s);
    }
}

static void test_random_respects_trial_budget_and_default(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    uint64_t order[4096];
    for (int budget = 1; budget <= 64; budget += 21) {
        search s;
        search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = budget, .seed = 42 };
        SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
        int n = drive(&s, 4, 0, order, 4096);
        assert_int_equal(n, budget);
        assert_int_equal(s.n_entries, budget);
        assert_unique_and_valid(&s);
        search_free(&s);
    }
    /* Default: a quarter of the valid space. */
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = 3 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int expect = (s.n_valid + 3) / 4;
    assert_int_equal(search_planned(&s), expect);
    assert_int_equal(drive(&s, 8, 0, order, 4096), expect);
    assert_unique_and_valid(&s);
    search_free(&s);
    /* A budget above the space is the space; exhaustive with a budget takes the first N. */
    gen_space small = { 0 };
    add_param(&small, "X", 3, (int[]){ 1, 2, 3 });
    search t;
    search_options ot = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 50, .seed = 3 };
    SJ_ASSERT_OK(search_init(&t, &small, all_valid, NULL, &ot));
    assert_int_equal(search_planned(&t), 3);
    search_free(&t);
    search_options oe = { .strategy = SJ_TUNE_EXHAUSTIVE, .budget_trials = 5 };
    SJ_ASSERT_OK(search_init(&t, &sp, gemm_like_valid, NULL, &oe));
    assert_int_equal(drive(&t, 3, 0, order, 4096), 5);
    for (int i = 1; i < 5; i++) assert_true(order[i] > order[i - 1]);
    search_free(&t);
}

static void test_seconds_budget_stops_issuing(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    uint64_t order[4096];
    for (int strategy = 0; strategy < 2; strategy++) {
        search s;
        search_options o = { .strategy = (sj_tune_strategy)strategy, .budget_seconds = 10.0, .seed = 1 };
        SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
        /* 0.5 fake seconds per finished trial, 4 in flight: 4 issued at 0 s, one more after each
         * of the first 19 results; the 20th result brings the clock to 10 s and issuing stops. */
        int n = drive(&s, 4, 0.5, order, 4096);
        assert_int_equal(n, 23);
        for (int i = 0; i < s.n_entries; i++) assert_true(s.entries[i].finished);
        search_free(&s);
    }
}

static void test_random_is_deterministic_for_a_seed(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    static uint64_t a[256], b[256], c[256];
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 60, .seed = 12345 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int na = drive(&s, 1, 0, a, 256);
    search_free(&s);
    /* Same seed, more candidates in flight: results arrive in another interleaving, yet the
     * local stage waits for them, so the walk is identical. */
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int nb = drive(&s, 7, 0, b, 256);
    search_free(&s);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, sizeof a[0] * (size_t)na);
    o.seed = 54321;
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int nc = drive(&s, 1, 0, c, 256);
    search_free(&s);
    assert_int_equal(nc, na);
    assert_true(memcmp(a, c, sizeof a[0] * (size_t)na) != 0);
}

static void test_local_stage_waits_for_results(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 20, .seed = 9 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    search_step step;
    search_candidate c;
    for (int i = 0; i < s.n_random; i++) {
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        assert_int_equal(step, SEARCH_CANDIDATE);
    }
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_int_equal(step, SEARCH_WAIT);
    for (int i = 0; i < s.n_random; i++) SJ_ASSERT_OK(search_report(&s, i, gemm_like_cost(s.entries[i].config)));
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_int_equal(step, SEARCH_CANDIDATE);
    /* The first refinement is a neighbour of the best sample: one param one step away. */
    int best = search_best(&s, 0);
    gen_config x, y;
    SJ_ASSERT_OK(gen_config_parse(s.entries[best].config, &x));
    SJ_ASSERT_OK(gen_config_parse(c.config, &y));
    int differ = 0;
    for (int i = 0; i < x.n; i++) differ += x.values[i] != value_of(&y, x.names[i]);
    assert_int_equal(differ, 1);
    search_free(&s);
}

static void test_budgeted_pick_within_3_percent_of_exhaustive(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    uint64_t order[4096];
    search s;
    search_options oe = { .strategy = SJ_TUNE_EXHAUSTIVE };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &oe));
    drive(&s, 4, 0, order, 4096);
    double best = s.entries[search_best(&s, 0)].time_us;
    int n_valid = s.n_valid;
    search_free(&s);
    int within = 0, runs = 20;
    double worst = 0;
    for (int seed = 1; seed <= runs; seed++) {
        search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = (uint64_t)seed * 7919 };
        SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
        drive(&s, 6, 0, order, 4096);
        double got = s.entries[search_best(&s, 0)].time_us;
        within += got <= best * 1.03;
        if (got / best > worst) worst = got / best;
        search_free(&s);
    }
    fprintf(stderr, "# default budget %d of %d valid: %d/%d seeds within 3%%, worst %.3fx\n", (n_valid + 3) / 4,
            n_valid, within, runs, worst);
    assert_int_equal(within, runs);
}

static void test_ties_go_to_stable_order(void **state)
{
    gen_space sp = { 0 };
    add_param(&sp, "A", 4, (int[]){ 1, 2, 3, 4 });
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 4, .seed = 5 };
    SJ_ASSERT_OK(search_init(&s, &sp, all_valid, NULL, &o));
    search_step step;
    search_candidate c;
    double times[4] = { 0 };
    times[0] = 10.05; times[1] = 10.0; times[2] = 0; times[3] = 12.0; /* by stable index; A=3 rejected */
    int issued = 0;
    while (1) {
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        if (step == SEARCH_DONE) break;
        if (step == SEARCH_WAIT) {
            for (int i = 0; i < s.n_entries; i++)
                if (!s.entries[i].finished) SJ_ASSERT_OK(search_report(&s, i, times[s.entries[i].index]));
            continue;
        }
        issued++;
    }
    for (int i = 0; i < s.n_entries; i++)
        if (!s.entries[i].finished) SJ_ASSERT_OK(search_report(&s, i, times[s.entries[i].index]));
    assert_int_equal(issued, 4);
    /* 10.05 is within 1% of 10.0 and comes first in stable order: it wins the tie. */
    assert_string_equal(s.entries[search_best(&s, 0.01)].config, "A=1");
    assert_string_equal(s.entries[search_best(&s, 0.0)].config, "A=2");
    search_free(&s);
    /* Nothing measured: no winner. */
    SJ_ASSERT_OK(search_init(&s, &sp, all_valid, NULL, &o));
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    SJ_ASSERT_OK(search_report(&s, c.id, 0));
    assert_int_equal(search_best(&s, 0.01), -1);
    search_free(&s);
}

/* 16 params x 4 values = 2^32 configs: too many to list, so random samples by rejection and
 * exhaustive walks lazily. */
static sj_status sum_even(void *user, const gen_config *c, const char *text, int *valid)
{
    int sum = 0;
    for (int i = 0; i < c->n; i++) sum += c->values[i];
    *valid = sum % 2 == 0;
    return SJ_OK;
}

static void test_large_space_is_not_enumerated(void **state)
{
    gen_space sp = { 0 };
    for (int i = 0; i < 16; i++) {
        char name[8];
        snprintf(name, sizeof name, "P%d", i);
        add_param(&sp, name, 4, (int[]){ 1, 2, 3, 4 });
    }
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 30, .seed = 77 };
    SJ_ASSERT_OK(search_init(&s, &sp, sum_even, NULL, &o));
    assert_int_equal(s.n_valid, -1);
    assert_int_equal(search_planned(&s), 30);
    int n = 0;
    for (;;) {
        search_step step;
        search_candidate c;
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        if (step == SEARCH_DONE) break;
        if (step == SEARCH_WAIT) {
            for (int i = 0; i < s.n_entries; i++)
                if (!s.entries[i].finished) SJ_ASSERT_OK(search_report(&s, i, 1.0 + (double)(s.entries[i].index % 97)));
            continue;
        }
        gen_config cfg;
        SJ_ASSERT_OK(gen_config_parse(c.config, &cfg));
        int valid;
        SJ_ASSERT_OK(sum_even(NULL, &cfg, c.config, &valid));
        assert_true(valid);
        n++;
    }
    assert_int_equal(n, 30);
    for (int i = 0; i < s.n_entries; i++)
        for (int j = 0; j < i; j++) assert_true(s.entries[i].index != s.entries[j].index);
    search_free(&s);

    search_options oe = { .strategy = SJ_TUNE_EXHAUSTIVE, .budget_trials = 3 };
    SJ_ASSERT_OK(search_init(&s, &sp, sum_even, NULL, &oe));
    search_step step;
    search_candidate c;
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_string_equal(c.config, "P0=1,P1=1,P10=1,P11=1,P12=1,P13=1,P14=1,P15=1,P2=1,P3=1,P4=1,P5=1,P6=1,P7=1,P8=1,P9=1");
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c)); /* ...P15=2 is odd: pruned; P15=3 next */
    assert_int_equal(c.index, 2);
    search_free(&s);
}

static sj_status failing_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    return sj_fail(SJ_ERR_TEMPLATE, "templates/x.lua:3: boom in valid(%s)", text);
}

static sj_status none_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    *valid = 0;
    return SJ_OK;
}

static void test_errors_are_reported(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    search s;
    search_options o = { .strategy = SJ_TUNE_EXHAUSTIVE };
    SJ_ASSERT_STATUS(search_init(&s, &sp, failing_valid, NULL, &o), SJ_ERR_TEMPLATE, "x.lua:3: boom");
    SJ_ASSERT_STATUS(search_init(&s, &sp, none_valid, NULL, &o), SJ_ERR_UNSUPPORTED, "none of the 1728");
    o.strategy = (sj_tune_strategy)9;
    SJ_ASSERT_STATUS(search_init(&s, &sp, all_valid, NULL, &o), SJ_ERR_INVALID_ARGUMENT, "strategy");
    o.strategy = SJ_TUNE_RANDOM;
    o.budget_trials = -1;
    SJ_ASSERT_STATUS(search_init(&s, &sp, all_valid, NULL, &o), SJ_ERR_INVALID_ARGUMENT, "budget");
    sp.n_values[2] = 0;
    o.budget_trials = 0;
    SJ_ASSERT_STATUS(search_init(&s, &sp, all_valid, NULL, &o), SJ_ERR_INVALID_ARGUMENT, "BK has 0 values");
}

static void test_strategy_names(void **state)
{
    sj_tune_strategy s;
    SJ_ASSERT_OK(sj_tune_strategy_parse("exhaustive", &s));
    assert_int_equal(s, SJ_TUNE_EXHAUSTIVE);
    SJ_ASSERT_OK(sj_tune_strategy_parse("random", &s));
    assert_int_equal(s, SJ_TUNE_RANDOM);
    assert_string_equal(sj_tune_strategy_name(SJ_TUNE_RANDOM), "random");
    SJ_ASSERT_STATUS(sj_tune_strategy_parse("genetic", &s), SJ_ERR_INVALID_ARGUMENT, "exhaustive or random");
    sj_tune_options t;
    memset(&t, 0xAB, sizeof t);
    sj_tune_options_init(&t);
    assert_int_equal(t.strategy, SJ_TUNE_RANDOM);
    assert_true(t.warmup_ms == 25 && t.rep_ms == 100 && t.min_reps == 10 && t.save == 1);
    assert_null(t.progress);
}

static void test_quantiles(void **state)
{
    const double v[5] = { 1, 2, 3, 4, 5 };
    assert_true(measure_quantile(v, 5, 0.5) == 3);
    assert_true(fabs(measure_quantile(v, 5, 0.2) - 1.8) < 1e-12);
    assert_true(fabs(measure_quantile(v, 5, 0.8) - 4.2) < 1e-12);
    assert_true(measure_quantile(v, 1, 0.8) == 1);
    const double w[4] = { 10, 20, 30, 40 };
    assert_true(measure_quantile(w, 4, 0.5) == 25);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_prunes_and_keeps_stable_order),
        cmocka_unit_test(test_duplicate_values_give_no_duplicate_candidates),
        cmocka_unit_test(test_random_respects_trial_budget_and_default),
        cmocka_unit_test(test_seconds_budget_stops_issuing),
        cmocka_unit_test(test_random_is_deterministic_for_a_seed),
        cmocka_unit_test(test_local_stage_waits_for_results),
        cmocka_unit_test(test_budgeted_pick_within_3_percent_of_exhaustive),
        cmocka_unit_test(test_ties_go_to_stable_order),
        cmocka_unit_test(test_large_space_is_not_enumerated),
        cmocka_unit_test(test_errors_are_reported),
        cmocka_unit_test(test_strategy_names),
        cmocka_unit_test(test_quantiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
