/* test_tuner_search.c: the tuner on the CPU. The search (tuner/search.c): constraint pruning and
 * the stable order, no duplicate candidates, trial and seconds budgets, seeded determinism that
 * does not depend on the order results arrive in, the tie rule, and the budgeted pick against
 * the exhaustive best on a GEMM-like cost surface. Also sj_tune's argument errors without a GPU,
 * the search over the real gemm_dense space, and the reference template (compiles for sm_80 and
 * sm_90a, plain FFMA with no tensor-core instruction). */
#include "test_util.h"
#include "generator/nvrtc.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/harness.h"
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

typedef double (*cost_fn)(const void *user, const char *config);

/* Runs a search to the end with a pipeline of `lookahead` candidates in flight (the oldest is
 * reported first, its time from cost), as the tuner does. Returns the number issued; order[]
 * (may be NULL) gets the stable indices in issue order. fake_seconds_per_trial advances the clock handed to
 * search_next. */
static int drive_cost(search *s, int lookahead, double fake_seconds_per_trial, uint64_t *order, int max_order,
                      cost_fn cost, const void *user)
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
            if (order && n < max_order) order[n] = c.index;
            n++;
            queue[tail++] = c.id;
        }
        if (tail == head) {
            assert_int_equal(step, SEARCH_DONE); /* WAIT with nothing pending would hang the tuner */
            break;
        }
        int id = queue[head++];
        double us = cost(user, s->entries[id].config);
        assert_true(us > 0);
        SJ_ASSERT_OK(search_report(s, id, us));
        clock += fake_seconds_per_trial;
    }
    free(queue);
    return n;
}

static double gemm_like_cost_fn(const void *user, const char *config) { return gemm_like_cost(config); }

static int drive(search *s, int lookahead, double fake_seconds_per_trial, uint64_t *order, int max_order)
{
    return drive_cost(s, lookahead, fake_seconds_per_trial, order, max_order, gemm_like_cost_fn, NULL);
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
    /* Default: a quarter of the valid space, 16..256. */
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = 3 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int expect = (s.n_valid + 3) / 4 > 256 ? 256 : (s.n_valid + 3) / 4;
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

/* The budgeted search measures the template's default first, so its winner is never slower
 * than an untuned call; a default that is invalid, outside the space or unreadable changes nothing. */
static void test_random_measures_the_default_first(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    uint64_t plain[64], order[64];
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 24, .seed = 5 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    assert_int_equal(drive(&s, 4, 0, plain, 64), 24);
    search_free(&s);

    o.first[0] = "BM=128,BN=128,BK=32,WM=64,WN=32,STAGES=3";   /* any order of the names */
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    search_step step;
    search_candidate c;
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_int_equal(step, SEARCH_CANDIDATE);
    assert_string_equal(c.config, "BK=32,BM=128,BN=128,STAGES=3,WM=64,WN=32");
    SJ_ASSERT_OK(search_report(&s, c.id, gemm_like_cost(c.config)));
    assert_int_equal(drive(&s, 4, 0, order, 64), 23);
    assert_unique_and_valid(&s);
    search_free(&s);

    const char *ignored[] = { "BM=32,BN=128,BK=32,WM=64,WN=32,STAGES=3",   /* WM > BM: invalid */
                              "BM=96,BN=128,BK=32,WM=64,WN=32,STAGES=3",   /* 96 is not a value of BM */
                              "BM=128,BN=128,BK=32,WM=64,WN=32",           /* STAGES missing */
                              "not a config" };
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) {
        o.first[0] = ignored[i];
        SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
        assert_int_equal(drive(&s, 4, 0, order, 64), 24);
        for (int j = 0; j < 24; j++) assert_true(order[j] == plain[j]);
        search_free(&s);
    }
}

/* Several configs measured first, in the order given (the default, then each variant's own):
 * repeats, NULLs and configs outside the space or invalid are skipped, and the sampling goes on
 * from there within the same budget. */
static void test_random_measures_every_variant_first(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 24, .seed = 9 };
    o.first[0] = "BM=128,BN=128,BK=32,WM=64,WN=32,STAGES=3";
    o.first[1] = "BM=32,BN=128,BK=32,WM=64,WN=32,STAGES=3";     /* WM > BM: invalid, skipped */
    o.first[2] = "STAGES=3,WN=32,WM=64,BK=32,BN=128,BM=128";     /* the first again: skipped */
    o.first[4] = "BM=64,BN=64,BK=32,WM=32,WN=32,STAGES=2";       /* after a NULL */
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    const char *expect[] = { "BK=32,BM=128,BN=128,STAGES=3,WM=64,WN=32", "BK=32,BM=64,BN=64,STAGES=2,WM=32,WN=32" };
    for (int i = 0; i < 2; i++) {
        search_step step;
        search_candidate c;
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        assert_int_equal(step, SEARCH_CANDIDATE);
        assert_string_equal(c.config, expect[i]);
        SJ_ASSERT_OK(search_report(&s, c.id, gemm_like_cost(c.config)));
    }
    uint64_t order[64];
    assert_int_equal(drive(&s, 4, 0, order, 64), 22);
    assert_unique_and_valid(&s);
    search_free(&s);
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

static int param_distance(const char *a, const char *b)
{
    gen_config x, y;
    SJ_ASSERT_OK(gen_config_parse(a, &x));
    SJ_ASSERT_OK(gen_config_parse(b, &y));
    int differ = 0;
    for (int i = 0; i < x.n; i++) differ += x.values[i] != value_of(&y, x.names[i]);
    return differ;
}

static void test_model_stage_waits_for_results(void **state)
{
    gen_space sp;
    gemm_like_space(&sp);
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = 40, .seed = 9 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    assert_int_equal(s.n_random, 16);
    search_step step;
    search_candidate c;
    for (int i = 0; i < s.n_random; i++) {
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        assert_int_equal(step, SEARCH_CANDIDATE);
    }
    /* The model needs the sample's results. */
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_int_equal(step, SEARCH_WAIT);
    for (int i = 0; i < s.n_random; i++) SJ_ASSERT_OK(search_report(&s, i, gemm_like_cost(s.entries[i].config)));
    int best = search_best(&s, 0);
    char centre[256];
    snprintf(centre, sizeof centre, "%s", s.entries[best].config);
    /* One whole batch, then a wait for its results; half of it near the best sample. */
    int near = 0;
    for (int i = 0; i < SEARCH_BATCH; i++) {
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        assert_int_equal(step, SEARCH_CANDIDATE);
        near += param_distance(centre, c.config) <= SEARCH_NEAR;
    }
    assert_true(near >= SEARCH_BATCH / 2);
    SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
    assert_int_equal(step, SEARCH_WAIT);
    for (int i = s.n_random; i < s.n_entries; i++) SJ_ASSERT_OK(search_report(&s, i, gemm_like_cost(s.entries[i].config)));
    /* The last batch is cut to the budget. */
    int n = 0;
    while (search_next(&s, 0, &step, &c) == SJ_OK && step == SEARCH_CANDIDATE) n++;
    assert_int_equal(n, 40 - 16 - SEARCH_BATCH);
    assert_int_equal(step, SEARCH_DONE);
    search_free(&s);
}

/* V:N:M SpMM spaces measured on an H200 (2026-12-02, vnm-spmm f16 2048x2048x2048 64:2:8, every
 * valid config, 10 ms warm-up and 40 ms of timed runs each), one "config median_us" per line in
 * tests/data: the template's space before (1284 configs) and after (2568) BMAP joined it. The
 * space is rebuilt from the configs, values ascending as the template declares them. */
typedef struct measured_space {
    gen_space space;
    char (*configs)[128];
    double *us;
    int n;
    double best;
} measured_space;

static void measured_space_load(measured_space *m, const char *file)
{
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/tests/data/%s", tu_source_dir(), file);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    memset(m, 0, sizeof *m);
    int cap = 4096;
    m->configs = malloc(sizeof *m->configs * (size_t)cap);
    m->us = malloc(sizeof *m->us * (size_t)cap);
    assert_non_null(m->configs);
    assert_non_null(m->us);
    while (fgets(line, sizeof line, f)) {
        assert_true(m->n < cap);
        char *cfg = m->configs[m->n];
        if (sscanf(line, "%127s %lf", cfg, &m->us[m->n]) != 2) fail_msg("%s: bad line '%s'", path, line);
        assert_true(m->us[m->n] > 0);
        if (m->best == 0 || m->us[m->n] < m->best) m->best = m->us[m->n];
        char buf[128];
        snprintf(buf, sizeof buf, "%s", cfg);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            char *eq = strchr(tok, '=');
            assert_non_null(eq);
            *eq = 0;
            int v = atoi(eq + 1), p = 0, k = 0;
            gen_space *sp = &m->space;
            while (p < sp->n_params && strcmp(sp->names[p], tok)) p++;
            if (p == sp->n_params) {
                assert_true(p < GEN_MAX_PARAMS);
                snprintf(sp->names[sp->n_params++], sizeof sp->names[p], "%s", tok);
            }
            while (k < sp->n_values[p] && sp->values[p][k] < v) k++;
            if (k < sp->n_values[p] && sp->values[p][k] == v) continue;
            assert_true(sp->n_values[p] < GEN_MAX_VALUES);
            memmove(&sp->values[p][k + 1], &sp->values[p][k], sizeof(int) * (size_t)(sp->n_values[p] - k));
            sp->values[p][k] = v;
            sp->n_values[p]++;
        }
        m->n++;
    }
    fclose(f);
    assert_true(m->n > 0);
}

static void measured_space_free(measured_space *m)
{
    free(m->configs);
    free(m->us);
}

/* The search formats configs in the space's param order; the files list them as the tuner
 * printed them, which is the same order: a lookup by text. */
static double measured_time(const measured_space *m, const char *config)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->configs[i], config)) return m->us[i];
    return -1;
}

static double measured_cost(const void *user, const char *config) { return measured_time(user, config); }

static sj_status measured_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    *valid = measured_time(user, text) > 0;
    return SJ_OK;
}

static void replay_measured_space(const char *file, int expect_valid)
{
    measured_space m;
    measured_space_load(&m, file);
    int runs = 40, within = 0;
    double worst = 0, sum = 0;
    for (int seed = 1; seed <= runs; seed++) {
        search s;
        search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = (uint64_t)seed };
        SJ_ASSERT_OK(search_init(&s, &m.space, measured_valid, &m, &o));
        assert_int_equal(s.n_valid, expect_valid);
        assert_int_equal(search_planned(&s), 256);
        drive_cost(&s, 30, 0, NULL, 0, measured_cost, &m); /* the tuner's pipeline depth */
        double got = s.entries[search_best(&s, 0.005)].time_us / m.best;
        within += got <= 1.03;
        sum += got;
        if (got > worst) worst = got;
        search_free(&s);
    }
    fprintf(stderr, "# %s, default budget 256 of %d: %d/%d seeds within 3%% of the best, mean %.4fx, worst %.3fx\n",
            file, expect_valid, within, runs, sum / runs, worst);
    measured_space_free(&m);
    assert_true(within >= 38); /* 95% */
    assert_true(sum / runs < 1.01);
    assert_true(worst < 1.05);
}

static void test_budgeted_pick_on_measured_h200_spaces(void **state)
{
    replay_measured_space("tune_space_vnm_h200_1284.txt", 1284);
    replay_measured_space("tune_space_vnm_h200_2568.txt", 2568);
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
    int within = 0, runs = 20, budget = 0;
    double worst = 0;
    for (int seed = 1; seed <= runs; seed++) {
        search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = (uint64_t)seed * 7919 };
        SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
        budget = search_planned(&s);
        drive(&s, 6, 0, order, 4096);
        double got = s.entries[search_best(&s, 0)].time_us;
        within += got <= best * 1.03;
        if (got / best > worst) worst = got / best;
        search_free(&s);
    }
    fprintf(stderr, "# default budget %d of %d valid: %d/%d seeds within 3%%, worst %.3fx\n", budget, n_valid, within, runs, worst);
    assert_int_equal(within, runs);
    /* Smaller budgets, for the record (the local stage is what makes them work). */
    for (int budget = 24; budget <= 96; budget *= 2) {
        int ok = 0;
        for (int seed = 1; seed <= runs; seed++) {
            search_options o = { .strategy = SJ_TUNE_RANDOM, .budget_trials = budget, .seed = (uint64_t)seed * 7919 };
            SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
            drive(&s, 6, 0, order, 4096);
            ok += s.entries[search_best(&s, 0)].time_us <= best * 1.03;
            search_free(&s);
        }
        fprintf(stderr, "# budget %d: %d/%d seeds within 3%%\n", budget, ok, runs);
    }
}

/* The run-off's rule: the median round decides (one fast or slow outlier does not), near-ties go
 * to the stable order, and the round returned is the one whose timing was the score. */
static void test_runoff_pick(void **state)
{
    const double times[] = {
        10.0, 13.0, 10.4,  /* A: median 10.4 (its 13.0 outlier does not count)            */
        9.0, 10.6, 10.7,   /* B: median 10.6, though its fastest round is the fastest of all */
        10.3, 10.35, 10.2, /* C: median 10.3: the fastest finalist                          */
    };
    const uint64_t index[] = { 7, 3, 9 };
    int round = -1;
    assert_int_equal(search_runoff_pick(3, 3, times, index, 0.0, &round), 2);
    assert_int_equal(round, 0);
    /* A (10.4) is within 1% of C (10.3) and earlier in the stable order. */
    assert_int_equal(search_runoff_pick(3, 3, times, index, 0.01, &round), 0);
    assert_int_equal(round, 2);
    /* With 3% every finalist ties and B has the smallest index. */
    assert_int_equal(search_runoff_pick(3, 3, times, index, 0.03, &round), 1);
    assert_int_equal(round, 1);
    /* Even rounds: the upper median, a value that was measured. */
    const double two[] = { 5.0, 6.0, 5.5, 5.4 };
    const uint64_t idx2[] = { 0, 1 };
    assert_int_equal(search_runoff_pick(2, 2, two, idx2, 0.0, &round), 1);
    assert_int_equal(round, 0);
    assert_int_equal(search_runoff_pick(0, 3, times, index, 0.0, &round), -1);
    assert_int_equal(search_runoff_pick(3, 17, times, index, 0.0, &round), -1);
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
    times[0] = 10.03; times[1] = 10.0; times[2] = 0; times[3] = 12.0; /* by stable index; A=3 rejected */
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
    /* 10.03 is within 0.5% of 10.0 and comes first in stable order: it wins the tie. */
    assert_string_equal(s.entries[search_best(&s, 0.005)].config, "A=1");
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
    return error_set(SJ_ERR_TEMPLATE, "templates/x.lua:3: boom in valid(%s)", text);
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
    /* The normal quantile that sets TwELL inputs' sparsity (values from standard tables). */
    assert_true(fabs(harness_normal_quantile(0.5)) < 1e-9);
    assert_true(fabs(harness_normal_quantile(0.99) - 2.326348) < 1e-5);
    assert_true(fabs(harness_normal_quantile(0.001) + 3.090232) < 1e-5);
}


/* ------------------------------------------------------------------ the real template spaces */

typedef struct template_valid { gen_state *g; const char *name; const sj_problem *p; } template_valid;

static sj_status template_valid_cb(void *user, const gen_config *c, const char *text, int *valid)
{
    template_valid *t = user;
    char reason[256];
    return gen_config_valid(t->g, t->name, t->p, text, valid, reason, sizeof reason);
}

static void test_search_over_gemm_dense_space(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    gen_state *g;
    SJ_ASSERT_OK(rt_generator(ctx, &g));
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 4096, 4096, 4096);
    gen_space sp;
    SJ_ASSERT_OK(gen_space_of(g, "gemm_dense", &p, &sp));
    template_valid tv = { g, "gemm_dense", &p };
    search s;
    search_options o = { .strategy = SJ_TUNE_EXHAUSTIVE };
    SJ_ASSERT_OK(search_init(&s, &sp, template_valid_cb, &tv, &o));
    fprintf(stderr, "# gemm_dense 4096^3: %llu configs, %d valid, %d pruned\n", (unsigned long long)s.total, s.n_valid,
            s.pruned);
    assert_true(s.n_valid > 10 && s.pruned > 0);
    /* The template's default is among the candidates, and every candidate generates. */
    char dflt[256];
    SJ_ASSERT_OK(gen_default_config(g, "gemm_dense", &p, dflt, sizeof dflt));
    int has_default = 0, n = 0;
    for (;;) {
        search_step step;
        search_candidate c;
        SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
        if (step == SEARCH_DONE) break;
        has_default |= !strcmp(c.config, dflt);
        if (n++ % 16 == 0) { /* a sample: generating all would only repeat test_gemm_template */
            sj_generated *gen = NULL;
            SJ_ASSERT_OK(gen_generate(g, "gemm_dense", &p, c.config, &gen));
            assert_string_equal(gen->config, c.config);
            sj_generated_free(gen);
        }
        SJ_ASSERT_OK(search_report(&s, c.id, 1.0));
    }
    assert_int_equal(n, s.n_valid);
    assert_true(has_default);
    search_free(&s);
    sj_context_destroy(ctx);
}

static void test_tune_refuses_without_gpu_or_harness(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_device_info d;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &d));
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 256, 256, 256);
    sj_tune_result r;
    memset(&r, 0xAB, sizeof r);
    SJ_ASSERT_STATUS(sj_tune(ctx, NULL, NULL, &r), SJ_ERR_INVALID_ARGUMENT, "problem is NULL");
    sj_problem bad = p;
    bad.m = 0;
    SJ_ASSERT_STATUS(sj_tune(ctx, &bad, NULL, &r), SJ_ERR_INVALID_ARGUMENT, "problem.m");
    sj_tune_options o;
    sj_tune_options_init(&o);
    o.strategy = (sj_tune_strategy)7;
    SJ_ASSERT_STATUS(sj_tune(ctx, &p, &o, &r), SJ_ERR_INVALID_ARGUMENT, "strategy 7");
    sj_tune_options_init(&o);
    o.threads = 1000;
    SJ_ASSERT_STATUS(sj_tune(ctx, &p, &o, &r), SJ_ERR_INVALID_ARGUMENT, "threads 1000");
    assert_null(r.trials);
    sj_bench_result b;
    if (!d.has_gpu) {
        SJ_ASSERT_STATUS(sj_tune(ctx, &p, NULL, &r), SJ_ERR_NO_GPU, "tuning needs a GPU");
        SJ_ASSERT_STATUS(sj_bench(ctx, &p, NULL, &b), SJ_ERR_NO_GPU, "needs a GPU");
        double us;
        SJ_ASSERT_STATUS(cublas_gemm_time(ctx, SJ_DTYPE_F16, 64, 64, 64, &us), SJ_ERR_NO_GPU, "needs a GPU");
    }
    /* Every op has a harness with the op's launch, reference and flops. */
    const sj_op ops[] = { SJ_OP_GEMM, SJ_OP_VNM_SPMM, SJ_OP_TWELL_GATE, SJ_OP_TWELL_FFN };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        const harness_ops *h;
        sj_problem q = p;
        q.op = ops[i];
        SJ_ASSERT_OK(harness_for(&q, &h));
        assert_int_equal(h->op, ops[i]);
        assert_true(h->setup && h->launch && h->reference && h->flops && h->teardown);
        assert_true(!h->poison == !h->read);
    }
    const harness_ops *h;
    sj_problem none = p;
    none.op = (sj_op)99;
    SJ_ASSERT_STATUS(harness_for(&none, &h), SJ_ERR_INVALID_ARGUMENT, "no harness for op 99");
    sj_context_destroy(ctx);
}

static void test_reference_template_is_plain_fp32(void **state)
{
    for (int a = 0; a < 2; a++) {
        const char *arch = a ? "sm_80" : "sm_90a";
        sj_context *ctx = tu_compile_context(arch);
        assert_non_null(ctx);
        gen_state *g;
        SJ_ASSERT_OK(rt_generator(ctx, &g));
        sj_problem p;
        sj_problem_init(&p, SJ_OP_GEMM, a ? SJ_DTYPE_BF16 : SJ_DTYPE_F16, 1000, 77, 300);
        p.out_dtype = SJ_DTYPE_F32;
        sj_generated *gen = NULL;
        SJ_ASSERT_OK(gen_generate(g, "gemm_reference", &p, "", &gen));
        assert_string_equal(gen->config, "TX=32,TY=8");
        assert_int_equal(gen->grid[0], 3);   /* ceil(77 / 32) */
        assert_int_equal(gen->grid[1], 125); /* ceil(1000 / 8) */
        assert_int_equal(gen->block[0] * gen->block[1], 256);
        assert_int_equal(gen->shared_bytes, 0);
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        double secs;
        SJ_ASSERT_OK(nvrtc_compile(gen->source, gen->entry, arch, &cubin, &size, &log, &secs));
        free(log);
        char *sass = tu_sass(cubin, size);
        if (sass) {
            /* HGMMA lines contain no "HMMA": counted apart */
            int ffma = tu_count_lines(sass, "FFMA"), hmma = tu_count_lines(sass, "HMMA") + tu_count_lines(sass, "HGMMA");
            free(sass);
            fprintf(stderr, "# gemm_reference %s SASS: %d FFMA, %d HMMA\n", arch, ffma, hmma);
            assert_true(ffma > 0);
            assert_int_equal(hmma, 0);
        }
        free(cubin);
        /* The reference refuses configs other than its one. */
        int valid = 1;
        char reason[256];
        SJ_ASSERT_OK(gen_config_valid(g, "gemm_reference", &p, "TX=16", &valid, reason, sizeof reason));
        assert_int_equal(valid, 0);
        sj_generated_free(gen);
        sj_context_destroy(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_prunes_and_keeps_stable_order),
        cmocka_unit_test(test_duplicate_values_give_no_duplicate_candidates),
        cmocka_unit_test(test_random_respects_trial_budget_and_default),
        cmocka_unit_test(test_random_measures_the_default_first),
        cmocka_unit_test(test_random_measures_every_variant_first),
        cmocka_unit_test(test_seconds_budget_stops_issuing),
        cmocka_unit_test(test_random_is_deterministic_for_a_seed),
        cmocka_unit_test(test_model_stage_waits_for_results),
        cmocka_unit_test(test_budgeted_pick_on_measured_h200_spaces),
        cmocka_unit_test(test_budgeted_pick_within_3_percent_of_exhaustive),
        cmocka_unit_test(test_runoff_pick),
        cmocka_unit_test(test_ties_go_to_stable_order),
        cmocka_unit_test(test_large_space_is_not_enumerated),
        cmocka_unit_test(test_errors_are_reported),
        cmocka_unit_test(test_strategy_names),
        cmocka_unit_test(test_quantiles),
        cmocka_unit_test(test_search_over_gemm_dense_space),
        cmocka_unit_test(test_tune_refuses_without_gpu_or_harness),
        cmocka_unit_test(test_reference_template_is_plain_fp32),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
