/* test_tuner_search.c: the tuner on the CPU. The search (tuner/search.c): constraint pruning and
 * the stable order, no duplicate candidates, trial and seconds budgets, seeded determinism that
 * does not depend on the order results arrive in, the tie rule, and the budgeted pick against
 * the exhaustive best on a GEMM-like cost surface. Also sj_tune's argument errors without a GPU,
 * the search over the real gemm_dense space, and the reference template (compiles for sm_80 and
 * sm_90a, plain FFMA with no tensor-core instruction). */
#include "test_util.h"
#include "generator/nvrtc.h"
#include "runtime/error.h"
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
    /* Default: a quarter of the valid space, 16..128. */
    search s;
    search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = 3 };
    SJ_ASSERT_OK(search_init(&s, &sp, gemm_like_valid, NULL, &o));
    int expect = (s.n_valid + 3) / 4 > 128 ? 128 : (s.n_valid + 3) / 4;
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

/* A V:N:M SpMM space measured on an H200 (2026-12-02: vnm-spmm f16 2048x2048x2048, 64:2:8, every
 * one of its 1284 valid configs, 10 ms warm-up and 40 ms of timed runs each): {stable index over
 * BM, BN, BK, WM, WN, STAGES, GROUP_M below, median ns}. The budgeted search replays it. */
static const int vnm_h200[][2] = {
    {0, 63680}, {1, 63680}, {2, 62208}, {3, 61664}, {4, 64704}, {5, 64384}, {6, 64448}, {7, 64320},
    {8, 65344}, {9, 65120}, {10, 65440}, {11, 64704}, {12, 71552}, {13, 71936}, {14, 71680}, {15, 71520},
    {16, 83488}, {17, 83104}, {18, 82880}, {19, 82976}, {180, 65632}, {181, 64096}, {182, 63168},
    {183, 61184}, {184, 69600}, {185, 68672}, {186, 68608}, {187, 68576}, {188, 80320}, {189, 79728},
    {190, 79584}, {191, 79616}, {192, 80960}, {193, 80192}, {194, 80032}, {195, 80032}, {196, 124544},
    {197, 124768}, {198, 124064}, {199, 124320}, {360, 65824}, {361, 65856}, {362, 65280}, {363, 64192},
    {364, 66528}, {365, 66528}, {366, 67136}, {367, 66496}, {368, 68224}, {369, 68256}, {370, 68160},
    {371, 68096}, {372, 76768}, {373, 77280}, {374, 77056}, {375, 76960}, {376, 78336}, {377, 78304},
    {378, 78016}, {379, 77568}, {380, 57440}, {381, 56256}, {382, 54976}, {383, 54944}, {384, 60032},
    {385, 59264}, {386, 59488}, {387, 59456}, {388, 63072}, {389, 62496}, {390, 62336}, {391, 62208},
    {392, 76448}, {393, 76960}, {394, 76672}, {395, 76576}, {396, 75840}, {397, 75840}, {398, 76256},
    {399, 75616}, {540, 64192}, {541, 62720}, {542, 62112}, {543, 62176}, {544, 69664}, {545, 70176},
    {546, 69184}, {547, 69776}, {548, 92160}, {549, 91648}, {550, 92224}, {551, 91776}, {552, 89792},
    {553, 89568}, {554, 90048}, {555, 89664}, {556, 89856}, {557, 88992}, {558, 89504}, {559, 89120},
    {560, 63072}, {561, 61248}, {562, 59680}, {563, 59232}, {564, 65312}, {565, 64384}, {566, 63840},
    {567, 63296}, {568, 88832}, {569, 88864}, {570, 88224}, {571, 88288}, {572, 88832}, {573, 89248},
    {574, 89184}, {575, 88224}, {576, 86912}, {577, 86880}, {578, 87264}, {579, 86368}, {740, 59008},
    {741, 59296}, {742, 58304}, {743, 57888}, {744, 63232}, {745, 63648}, {746, 62912}, {747, 62784},
    {748, 82048}, {749, 81824}, {750, 82112}, {751, 81200}, {752, 87136}, {753, 86208}, {754, 86304},
    {755, 85536}, {756, 85888}, {757, 85056}, {758, 84608}, {759, 84320}, {760, 61632}, {761, 61984},
    {762, 61376}, {763, 60512}, {764, 61184}, {765, 61664}, {766, 60960}, {767, 60768}, {768, 87808},
    {769, 87440}, {770, 87136}, {771, 87456}, {772, 87424}, {773, 87808}, {774, 87472}, {775, 86528},
    {776, 87392}, {777, 86416}, {778, 86176}, {779, 85920}, {920, 80288}, {921, 79040}, {922, 79328},
    {923, 78624}, {924, 77056}, {925, 76576}, {926, 75744}, {927, 76128}, {940, 87360}, {941, 86144},
    {942, 86688}, {943, 86240}, {944, 85216}, {945, 84832}, {946, 84704}, {947, 84640}, {1080, 54880},
    {1081, 54688}, {1082, 54880}, {1083, 56416}, {1084, 54704}, {1085, 54592}, {1086, 55264}, {1087, 55328},
    {1088, 54080}, {1089, 53312}, {1090, 53376}, {1091, 53408}, {1092, 55968}, {1093, 56512}, {1094, 55744},
    {1095, 55840}, {1096, 59808}, {1097, 59584}, {1098, 59392}, {1099, 59488}, {1100, 43072}, {1101, 43136},
    {1102, 43072}, {1103, 42464}, {1104, 45216}, {1105, 45856}, {1106, 45088}, {1107, 45216}, {1108, 48576},
    {1109, 47808}, {1110, 48512}, {1111, 48640}, {1112, 50304}, {1113, 49376}, {1114, 49936}, {1115, 49760},
    {1116, 57344}, {1117, 58016}, {1118, 57280}, {1119, 57760}, {1140, 43520}, {1141, 44384}, {1142, 43392},
    {1143, 45248}, {1144, 42304}, {1145, 42976}, {1146, 42912}, {1147, 42176}, {1148, 43264}, {1149, 43168},
    {1150, 42960}, {1151, 42400}, {1152, 46240}, {1153, 46080}, {1154, 45952}, {1155, 45216}, {1156, 51104},
    {1157, 51072}, {1158, 50784}, {1159, 50784}, {1260, 50240}, {1261, 49440}, {1262, 49440}, {1263, 50016},
    {1264, 52640}, {1265, 53088}, {1266, 52896}, {1267, 52944}, {1268, 57856}, {1269, 57632}, {1270, 57696},
    {1271, 57504}, {1272, 59072}, {1273, 59488}, {1274, 59232}, {1275, 58656}, {1276, 78880}, {1277, 78912},
    {1278, 78464}, {1279, 79712}, {1280, 43712}, {1281, 43232}, {1282, 43024}, {1283, 44096}, {1284, 52320},
    {1285, 52288}, {1286, 52160}, {1287, 51968}, {1288, 55200}, {1289, 54304}, {1290, 54784}, {1291, 53984},
    {1292, 55072}, {1293, 54784}, {1294, 54720}, {1295, 53696}, {1296, 76416}, {1297, 77568}, {1298, 76448},
    {1299, 77088}, {1320, 42496}, {1321, 42432}, {1322, 41024}, {1323, 40960}, {1324, 46048}, {1325, 46016},
    {1326, 45184}, {1327, 44896}, {1328, 50784}, {1329, 50496}, {1330, 50400}, {1331, 50336}, {1332, 50048},
    {1333, 49728}, {1334, 49664}, {1335, 49728}, {1336, 71104}, {1337, 70240}, {1338, 70656}, {1339, 70880},
    {1460, 43872}, {1461, 43968}, {1462, 44144}, {1463, 44832}, {1464, 47872}, {1465, 47872}, {1466, 47168},
    {1467, 47456}, {1468, 47328}, {1469, 46624}, {1470, 46592}, {1471, 47168}, {1472, 52128}, {1473, 51872},
    {1474, 51744}, {1475, 51200}, {1476, 51680}, {1477, 52032}, {1478, 52000}, {1479, 51904}, {1480, 42016},
    {1481, 41152}, {1482, 41568}, {1483, 41408}, {1484, 51840}, {1485, 51360}, {1486, 52000}, {1487, 52064},
    {1488, 49824}, {1489, 49792}, {1490, 49760}, {1491, 49472}, {1492, 57792}, {1493, 57728}, {1494, 57376},
    {1495, 57184}, {1496, 56672}, {1497, 57152}, {1498, 56288}, {1499, 56160}, {1500, 41792}, {1501, 41120},
    {1502, 41248}, {1503, 42400}, {1504, 45056}, {1505, 45088}, {1506, 44416}, {1507, 45040}, {1508, 43360},
    {1509, 42720}, {1510, 43264}, {1511, 43232}, {1512, 48896}, {1513, 48224}, {1514, 48544}, {1515, 48032},
    {1516, 48416}, {1517, 48928}, {1518, 48128}, {1519, 48128}, {1520, 38656}, {1521, 37088}, {1522, 36512},
    {1523, 36896}, {1524, 43072}, {1525, 43136}, {1526, 43712}, {1527, 42400}, {1528, 40928}, {1529, 41632},
    {1530, 41552}, {1531, 40736}, {1532, 48512}, {1533, 48384}, {1534, 48224}, {1535, 47488}, {1536, 48256},
    {1537, 47488}, {1538, 47872}, {1539, 47776}, {1640, 43264}, {1641, 43776}, {1642, 43808}, {1643, 43904},
    {1644, 49920}, {1645, 49504}, {1646, 48704}, {1647, 48960}, {1648, 62048}, {1649, 61056}, {1650, 61888},
    {1651, 61664}, {1652, 60512}, {1653, 60896}, {1654, 60960}, {1655, 59904}, {1656, 60352}, {1657, 60064},
    {1658, 59968}, {1659, 60128}, {1660, 43648}, {1661, 43744}, {1662, 42496}, {1663, 40992}, {1664, 46096},
    {1665, 46048}, {1666, 46304}, {1667, 46080}, {1668, 60928}, {1669, 60608}, {1670, 60768}, {1671, 60128},
    {1672, 60768}, {1673, 60512}, {1674, 60064}, {1675, 60576}, {1676, 60384}, {1677, 60096}, {1678, 59872},
    {1679, 59808}, {1680, 40768}, {1681, 40576}, {1682, 40544}, {1683, 39904}, {1684, 44608}, {1685, 43424},
    {1686, 43264}, {1687, 43968}, {1688, 55904}, {1689, 56096}, {1690, 55488}, {1691, 56640}, {1692, 55104},
    {1693, 55456}, {1694, 55424}, {1695, 55520}, {1696, 54368}, {1697, 54048}, {1698, 53344}, {1699, 53664},
    {1700, 39840}, {1701, 39840}, {1702, 39360}, {1703, 37440}, {1704, 41728}, {1705, 40992}, {1706, 40768},
    {1707, 41184}, {1708, 55136}, {1709, 54208}, {1710, 54624}, {1711, 53888}, {1712, 53248}, {1713, 53088},
    {1714, 52736}, {1715, 52128}, {1716, 53120}, {1717, 52896}, {1718, 53008}, {1719, 52384}, {1840, 46784},
    {1841, 46624}, {1842, 46176}, {1843, 46016}, {1844, 48064}, {1845, 47552}, {1846, 48144}, {1847, 47520},
    {1848, 57664}, {1849, 56992}, {1850, 57440}, {1851, 56384}, {1852, 61152}, {1853, 61152}, {1854, 60896},
    {1855, 60160}, {1856, 60448}, {1857, 59776}, {1858, 59584}, {1859, 59808}, {1880, 41760}, {1881, 41120},
    {1882, 40960}, {1883, 40096}, {1884, 40160}, {1885, 40096}, {1886, 40032}, {1887, 40128}, {1888, 51776},
    {1889, 51040}, {1890, 51488}, {1891, 51136}, {1892, 51648}, {1893, 51472}, {1894, 51328}, {1895, 51264},
    {1896, 51328}, {1897, 50528}, {1898, 50336}, {1899, 50224}, {1900, 42848}, {1901, 42688}, {1902, 37248},
    {1903, 39424}, {1904, 39136}, {1905, 38528}, {1906, 39008}, {1907, 38464}, {1908, 48928}, {1909, 48256},
    {1910, 48736}, {1911, 48064}, {1912, 52384}, {1913, 51776}, {1914, 52288}, {1915, 51584}, {1916, 51648},
    {1917, 51616}, {1918, 51552}, {1919, 52192}, {2020, 54464}, {2021, 53792}, {2022, 54080}, {2023, 53248},
    {2024, 53728}, {2025, 54080}, {2026, 53376}, {2027, 53536}, {2060, 47936}, {2061, 47360}, {2062, 46384},
    {2063, 46336}, {2064, 46272}, {2065, 45920}, {2066, 46112}, {2067, 45856}, {2080, 48352}, {2081, 47120},
    {2082, 46752}, {2083, 47232}, {2084, 48544}, {2085, 48528}, {2086, 47904}, {2087, 48480}, {2180, 41568},
    {2181, 40960}, {2182, 40960}, {2183, 40960}, {2184, 42000}, {2185, 41408}, {2186, 41504}, {2187, 41504},
    {2188, 41824}, {2189, 41056}, {2190, 41088}, {2191, 41120}, {2192, 44800}, {2193, 44160}, {2194, 44576},
    {2195, 44544}, {2196, 49184}, {2197, 48512}, {2198, 48464}, {2199, 48448}, {2200, 36576}, {2201, 36768},
    {2202, 36896}, {2203, 37536}, {2204, 35872}, {2205, 36512}, {2206, 36544}, {2207, 36480}, {2208, 37216},
    {2209, 36592}, {2210, 36512}, {2211, 36544}, {2212, 40448}, {2213, 41632}, {2214, 40640}, {2215, 40640},
    {2216, 43360}, {2217, 43200}, {2218, 43040}, {2219, 42976}, {2220, 37440}, {2221, 37472}, {2222, 38144},
    {2223, 38144}, {2224, 37696}, {2225, 38336}, {2226, 38272}, {2227, 37696}, {2228, 38144}, {2229, 38160},
    {2230, 38144}, {2231, 37568}, {2232, 39072}, {2233, 38976}, {2234, 39552}, {2235, 39456}, {2236, 42784},
    {2237, 43104}, {2238, 42432}, {2239, 42976}, {2240, 34048}, {2241, 34208}, {2242, 33760}, {2243, 34464},
    {2244, 32000}, {2245, 32096}, {2246, 32064}, {2247, 31424}, {2248, 31520}, {2249, 32192}, {2250, 31456},
    {2251, 32128}, {2252, 35360}, {2253, 36080}, {2254, 36032}, {2255, 36000}, {2256, 39648}, {2257, 38912},
    {2258, 38752}, {2259, 38752}, {2280, 34080}, {2281, 34336}, {2282, 34432}, {2283, 34496}, {2284, 31744},
    {2285, 31808}, {2286, 31744}, {2287, 31744}, {2288, 32192}, {2289, 32192}, {2290, 32192}, {2291, 31584},
    {2292, 35040}, {2293, 36288}, {2294, 35008}, {2295, 34912}, {2296, 39968}, {2297, 39168}, {2298, 39488},
    {2299, 38880}, {2360, 40192}, {2361, 40256}, {2362, 40768}, {2363, 40224}, {2364, 44992}, {2365, 44800},
    {2366, 45328}, {2367, 45280}, {2368, 44000}, {2369, 43968}, {2370, 43648}, {2371, 43680}, {2372, 56608},
    {2373, 56576}, {2374, 56800}, {2375, 56832}, {2376, 55808}, {2377, 55776}, {2378, 55648}, {2379, 55776},
    {2380, 35776}, {2381, 35872}, {2382, 36416}, {2383, 35808}, {2384, 40896}, {2385, 40864}, {2386, 40640},
    {2387, 40672}, {2388, 40896}, {2389, 40896}, {2390, 40672}, {2391, 41280}, {2392, 54368}, {2393, 55072},
    {2394, 54720}, {2395, 54704}, {2396, 72032}, {2397, 71840}, {2398, 71840}, {2399, 71808}, {2400, 36192},
    {2401, 35616}, {2402, 35616}, {2403, 36192}, {2404, 40640}, {2405, 39936}, {2406, 40576}, {2407, 39904},
    {2408, 40160}, {2409, 40096}, {2410, 40000}, {2411, 39968}, {2412, 52160}, {2413, 51584}, {2414, 51584},
    {2415, 52128}, {2416, 50880}, {2417, 50944}, {2418, 50752}, {2419, 51296}, {2420, 32256}, {2421, 32256},
    {2422, 31488}, {2423, 31424}, {2424, 36640}, {2425, 36448}, {2426, 36608}, {2427, 35968}, {2428, 39392},
    {2429, 39232}, {2430, 38432}, {2431, 39008}, {2432, 55744}, {2433, 56480}, {2434, 56192}, {2435, 56128},
    {2436, 54976}, {2437, 54944}, {2438, 55200}, {2439, 55200}, {2460, 30976}, {2461, 31040}, {2462, 30976},
    {2463, 30944}, {2464, 36480}, {2465, 35776}, {2466, 36448}, {2467, 35840}, {2468, 36416}, {2469, 35616},
    {2470, 35680}, {2471, 35712}, {2472, 48000}, {2473, 47552}, {2474, 48384}, {2475, 47776}, {2476, 47392},
    {2477, 47264}, {2478, 47392}, {2479, 46880}, {2560, 39776}, {2561, 39680}, {2562, 39776}, {2563, 39888},
    {2564, 40384}, {2565, 39680}, {2566, 40256}, {2567, 39616}, {2568, 41152}, {2569, 40992}, {2570, 41088},
    {2571, 41152}, {2572, 41664}, {2573, 41520}, {2574, 41216}, {2575, 41248}, {2576, 52128}, {2577, 52448},
    {2578, 52288}, {2579, 51648}, {2600, 35360}, {2601, 35040}, {2602, 35104}, {2603, 35040}, {2604, 34208},
    {2605, 33568}, {2606, 34112}, {2607, 34112}, {2608, 33488}, {2609, 32960}, {2610, 32768}, {2611, 32768},
    {2612, 34496}, {2613, 34912}, {2614, 34720}, {2615, 34752}, {2616, 45504}, {2617, 45216}, {2618, 44608},
    {2619, 43984}, {2620, 36128}, {2621, 35712}, {2622, 35520}, {2623, 36128}, {2624, 35488}, {2625, 35136},
    {2626, 35328}, {2627, 35808}, {2628, 32704}, {2629, 32864}, {2630, 32736}, {2631, 32128}, {2632, 32832},
    {2633, 33568}, {2634, 32624}, {2635, 33200}, {2636, 44960}, {2637, 45360}, {2638, 45344}, {2639, 45312},
    {2640, 35936}, {2641, 35456}, {2642, 34592}, {2643, 34592}, {2644, 34048}, {2645, 34048}, {2646, 33920},
    {2647, 33952}, {2648, 33280}, {2649, 33376}, {2650, 34016}, {2651, 33312}, {2652, 34464}, {2653, 34304},
    {2654, 34592}, {2655, 34496}, {2656, 44992}, {2657, 44736}, {2658, 45248}, {2659, 44704}, {2660, 35456},
    {2661, 35264}, {2662, 35008}, {2663, 34880}, {2664, 33792}, {2665, 33760}, {2666, 33792}, {2667, 34304},
    {2668, 30368}, {2669, 30896}, {2670, 30880}, {2671, 30896}, {2672, 30944}, {2673, 30784}, {2674, 30624},
    {2675, 31200}, {2676, 41120}, {2677, 40832}, {2678, 41696}, {2679, 41728}, {2740, 38224}, {2741, 38176},
    {2742, 37536}, {2743, 37504}, {2744, 48064}, {2745, 47840}, {2746, 48288}, {2747, 48224}, {2748, 47264},
    {2749, 46880}, {2750, 46528}, {2751, 45984}, {2752, 46720}, {2753, 45856}, {2754, 45568}, {2755, 46272},
    {2780, 32768}, {2781, 32800}, {2782, 33472}, {2783, 33472}, {2784, 41760}, {2785, 42080}, {2786, 41184},
    {2787, 41216}, {2788, 39936}, {2789, 40192}, {2790, 40128}, {2791, 40096}, {2792, 38272}, {2793, 38656},
    {2794, 38368}, {2795, 38400}, {2800, 31536}, {2801, 31264}, {2802, 30336}, {2803, 30304}, {2804, 39744},
    {2805, 39552}, {2806, 39456}, {2807, 38800}, {2808, 36832}, {2809, 36512}, {2810, 36544}, {2811, 37120},
    {2812, 37504}, {2813, 37280}, {2814, 37248}, {2815, 37824}, {2820, 31840}, {2821, 31904}, {2822, 31904},
    {2823, 31904}, {2824, 41184}, {2825, 40992}, {2826, 40832}, {2827, 41536}, {2828, 39680}, {2829, 39360},
    {2830, 38848}, {2831, 38848}, {2832, 39872}, {2833, 39392}, {2834, 39200}, {2835, 38528}, {2840, 29856},
    {2841, 29632}, {2842, 29600}, {2843, 29728}, {2844, 38496}, {2845, 37568}, {2846, 37440}, {2847, 38112},
    {2848, 36960}, {2849, 36160}, {2850, 36704}, {2851, 36736}, {2852, 36768}, {2853, 36416}, {2854, 36384},
    {2855, 35680}, {2980, 40864}, {2981, 39968}, {2982, 39680}, {2983, 40288}, {2984, 39520}, {2985, 39520},
    {2986, 38912}, {2987, 39456}, {2988, 38528}, {2989, 37952}, {2990, 37856}, {2991, 38432}, {2992, 38304},
    {2993, 38848}, {2994, 38240}, {2995, 38272}, {2996, 37568}, {2997, 37568}, {2998, 37696}, {2999, 37664},
    {3020, 38112}, {3021, 38368}, {3022, 37408}, {3023, 38080}, {3024, 35872}, {3025, 35872}, {3026, 35936},
    {3027, 35296}, {3028, 35344}, {3029, 34784}, {3030, 34560}, {3031, 35168}, {3032, 34976}, {3033, 35136},
    {3034, 34304}, {3035, 34912}, {3036, 35264}, {3037, 34592}, {3038, 33888}, {3039, 33888}, {3040, 29888},
    {3041, 29280}, {3042, 29344}, {3043, 30016}, {3044, 28800}, {3045, 29376}, {3046, 28800}, {3047, 29440},
    {3048, 36416}, {3049, 36992}, {3050, 37120}, {3051, 36544}, {3052, 36832}, {3053, 36800}, {3054, 36800},
    {3055, 36800}, {3056, 37536}, {3057, 36960}, {3058, 36960}, {3059, 37600}, {3160, 34592}, {3161, 34560},
    {3162, 35232}, {3163, 35264}, {3164, 35168}, {3165, 34528}, {3166, 34272}, {3167, 34848}, {3200, 32608},
    {3201, 32576}, {3202, 33088}, {3203, 32480}, {3204, 32192}, {3205, 32096}, {3206, 32864}, {3207, 32224},
    {3220, 44288}, {3221, 43680}, {3222, 44032}, {3223, 43520}, {3224, 43008}, {3225, 42976}, {3226, 42976},
    {3227, 43584}, {3280, 42688}, {3281, 42016}, {3282, 41952}, {3283, 41920}, {3284, 41248}, {3285, 41120},
    {3286, 41088}, {3287, 41728}, {3288, 42112}, {3289, 41472}, {3290, 42112}, {3291, 41408}, {3292, 54304},
    {3293, 54272}, {3294, 54304}, {3295, 54336}, {3296, 54016}, {3297, 53248}, {3298, 53824}, {3299, 53920},
    {3320, 36736}, {3321, 37088}, {3322, 37728}, {3323, 37088}, {3324, 34752}, {3325, 35360}, {3326, 34720},
    {3327, 34720}, {3328, 35232}, {3329, 35456}, {3330, 35648}, {3331, 35488}, {3332, 46432}, {3333, 46304},
    {3334, 45664}, {3335, 46304}, {3336, 46304}, {3337, 45952}, {3338, 45888}, {3339, 45856}, {3340, 37024},
    {3341, 38560}, {3342, 38624}, {3343, 38016}, {3344, 34208}, {3345, 34240}, {3346, 34176}, {3347, 33600},
    {3348, 33184}, {3349, 33568}, {3350, 32992}, {3351, 33600}, {3352, 45088}, {3353, 45376}, {3354, 45344},
    {3355, 45920}, {3356, 45280}, {3357, 44816}, {3358, 45440}, {3359, 44864}, {3360, 35872}, {3361, 37056},
    {3362, 37056}, {3363, 36480}, {3364, 34400}, {3365, 35136}, {3366, 35136}, {3367, 34560}, {3368, 35200},
    {3369, 35072}, {3370, 35872}, {3371, 35680}, {3372, 45536}, {3373, 46144}, {3374, 46176}, {3375, 45504},
    {3376, 45536}, {3377, 45088}, {3378, 45744}, {3379, 45632}, {3380, 36896}, {3381, 38240}, {3382, 37664},
    {3383, 37696}, {3384, 32928}, {3385, 32416}, {3386, 32416}, {3387, 32416}, {3388, 31392}, {3389, 31840},
    {3390, 31872}, {3391, 31328}, {3392, 42896}, {3393, 42688}, {3394, 42720}, {3395, 43168}, {3396, 41824},
    {3397, 42144}, {3398, 42048}, {3399, 42048}, {3460, 39520}, {3461, 39616}, {3462, 39616}, {3463, 40192},
    {3464, 50784}, {3465, 50688}, {3466, 50720}, {3467, 50688}, {3468, 48096}, {3469, 48512}, {3470, 47936},
    {3471, 48480}, {3500, 32672}, {3501, 33440}, {3502, 32800}, {3503, 33472}, {3504, 44032}, {3505, 44512},
    {3506, 43936}, {3507, 43872}, {3508, 42240}, {3509, 42048}, {3510, 42016}, {3511, 42016}, {3520, 32608},
    {3521, 32256}, {3522, 32288}, {3523, 31712}, {3524, 40448}, {3525, 41344}, {3526, 40736}, {3527, 40800},
    {3528, 40160}, {3529, 40192}, {3530, 40160}, {3531, 39648}, {3540, 32992}, {3541, 33568}, {3542, 33504},
    {3543, 33536}, {3544, 43616}, {3545, 43456}, {3546, 43488}, {3547, 44128}, {3548, 42048}, {3549, 41664},
    {3550, 42208}, {3551, 41664}, {3560, 31040}, {3561, 30720}, {3562, 30656}, {3563, 30720}, {3564, 39392},
    {3565, 39584}, {3566, 39008}, {3567, 39648}, {3568, 39008}, {3569, 38912}, {3570, 38304}, {3571, 38880},
    {3700, 42400}, {3701, 41696}, {3702, 41728}, {3703, 42336}, {3704, 39680}, {3705, 40416}, {3706, 40480},
    {3707, 39808}, {3708, 38400}, {3709, 37888}, {3710, 37888}, {3711, 38496}, {3712, 39552}, {3713, 39616},
    {3714, 38976}, {3715, 38944}, {3740, 40032}, {3741, 40064}, {3742, 40000}, {3743, 40032}, {3744, 36768},
    {3745, 36736}, {3746, 36736}, {3747, 36736}, {3748, 34880}, {3749, 34304}, {3750, 34912}, {3751, 34272},
    {3752, 35360}, {3753, 35936}, {3754, 35328}, {3755, 35936}, {3760, 29440}, {3761, 29920}, {3762, 29312},
    {3763, 29280}, {3764, 37920}, {3765, 37392}, {3766, 37408}, {3767, 38016}, {3768, 36800}, {3769, 36928},
    {3770, 36896}, {3771, 36960}, {3772, 37664}, {3773, 37792}, {3774, 37696}, {3775, 37184}, {3880, 35712},
    {3881, 35840}, {3882, 35808}, {3883, 36448}, {3920, 33600}, {3921, 32928}, {3922, 32928}, {3923, 32992},
    {3940, 47168}, {3941, 47296}, {3942, 46688}, {3943, 47264}, {4120, 33536}, {4121, 33376}, {4122, 33408},
    {4123, 33344}, {4124, 34368}, {4125, 33728}, {4126, 34240}, {4127, 34304}, {4420, 45184}, {4421, 45184},
    {4422, 45056}, {4423, 45120}, {4424, 43168}, {4425, 43200}, {4426, 43712}, {4427, 43200}, {4428, 41440},
    {4429, 42048}, {4430, 41984}, {4431, 41984}, {4460, 42720}, {4461, 42720}, {4462, 42144}, {4463, 42720},
    {4464, 39168}, {4465, 39232}, {4466, 39744}, {4467, 39200}, {4468, 38880}, {4469, 38848}, {4470, 39488},
    {4471, 39392}, {4480, 30880}, {4481, 30272}, {4482, 30240}, {4483, 30848}, {4484, 39232}, {4485, 39232},
    {4486, 39232}, {4487, 39200}, {4488, 38400}, {4489, 38400}, {4490, 39008}, {4491, 38400}, {4600, 40128},
    {4601, 40704}, {4602, 40128}, {4603, 40096}, {4640, 37024}, {4641, 36416}, {4642, 36416}, {4643, 37088},
    {4660, 51936}, {4661, 51360}, {4662, 51264}, {4663, 51872}, {4840, 34400}, {4841, 35040}, {4842, 35040},
    {4843, 35104},
};

static gen_space h200_space; /* BM, BN, BK, WM, WN, STAGES, GROUP_M as the template lists them */

static uint64_t h200_index(const gen_config *c)
{
    uint64_t index = 0;
    for (int p = 0; p < h200_space.n_params; p++) {
        int v = value_of(c, h200_space.names[p]), d = 0;
        while (h200_space.values[p][d] != v) d++;
        index = index * (uint64_t)h200_space.n_values[p] + (uint64_t)d;
    }
    return index;
}

static sj_status vnm_h200_valid(void *user, const gen_config *c, const char *text, int *valid)
{
    uint64_t index = h200_index(c);
    *valid = 0;
    for (size_t i = 0; i < sizeof vnm_h200 / sizeof *vnm_h200; i++) *valid |= (uint64_t)vnm_h200[i][0] == index;
    return SJ_OK;
}

static double vnm_h200_time(uint64_t index)
{
    for (size_t i = 0; i < sizeof vnm_h200 / sizeof *vnm_h200; i++)
        if ((uint64_t)vnm_h200[i][0] == index) return vnm_h200[i][1] * 1e-3;
    fail_msg("index %llu is not in the measured space", (unsigned long long)index);
    return 0;
}

static void test_budgeted_pick_on_a_measured_h200_space(void **state)
{
    gen_space *sp = &h200_space;
    memset(sp, 0, sizeof *sp);
    add_param(sp, "BM", 5, (int[]){ 16, 32, 64, 128, 256 });
    add_param(sp, "BN", 3, (int[]){ 64, 128, 256 });
    add_param(sp, "BK", 2, (int[]){ 64, 128 });
    add_param(sp, "WM", 3, (int[]){ 16, 32, 64 });
    add_param(sp, "WN", 3, (int[]){ 16, 32, 64 });
    add_param(sp, "STAGES", 5, (int[]){ 2, 3, 4, 5, 6 });
    add_param(sp, "GROUP_M", 4, (int[]){ 8, 16, 32, 64 });
    double best = 1e30;
    for (size_t i = 0; i < sizeof vnm_h200 / sizeof *vnm_h200; i++)
        if (vnm_h200[i][1] * 1e-3 < best) best = vnm_h200[i][1] * 1e-3;
    int runs = 40, within = 0;
    double worst = 0, sum = 0;
    for (int seed = 1; seed <= runs; seed++) {
        search s;
        search_options o = { .strategy = SJ_TUNE_RANDOM, .seed = (uint64_t)seed };
        SJ_ASSERT_OK(search_init(&s, sp, vnm_h200_valid, NULL, &o));
        assert_int_equal(s.n_valid, (int)(sizeof vnm_h200 / sizeof *vnm_h200));
        assert_int_equal(search_planned(&s), 128);
        int q[4096], head = 0, tail = 0;
        for (;;) { /* the tuner's pipeline: 30 candidates in flight, oldest reported first */
            search_step step = SEARCH_DONE;
            search_candidate c;
            while (tail - head < 30) {
                SJ_ASSERT_OK(search_next(&s, 0, &step, &c));
                if (step != SEARCH_CANDIDATE) break;
                q[tail++] = c.id;
            }
            if (tail == head) break;
            int id = q[head++];
            SJ_ASSERT_OK(search_report(&s, id, vnm_h200_time(s.entries[id].index)));
        }
        double got = s.entries[search_best(&s, 0.005)].time_us / best;
        within += got <= 1.03;
        sum += got;
        if (got > worst) worst = got;
        search_free(&s);
    }
    fprintf(stderr, "# measured H200 V:N:M space, default budget 128 of 1284: %d/%d seeds within 3%% of the best, "
            "mean %.4fx, worst %.3fx\n", within, runs, sum / runs, worst);
    assert_true(within >= 36); /* 90% */
    assert_true(sum / runs < 1.015);
    assert_true(worst < 1.06);
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
        SJ_ASSERT_STATUS(sj_cublas_gemm_time(ctx, SJ_DTYPE_F16, 64, 64, 64, &us), SJ_ERR_NO_GPU, "needs a GPU");
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
            int ffma = 0, hmma = 0;
            for (const char *line = sass; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                const char *end = strchr(line, '\n');
                size_t n = end ? (size_t)(end - line) : strlen(line);
                ffma += memmem(line, n, "FFMA", 4) != NULL;
                hmma += memmem(line, n, "HMMA", 4) != NULL || memmem(line, n, "HGMMA", 5) != NULL;
            }
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
        cmocka_unit_test(test_seconds_budget_stops_issuing),
        cmocka_unit_test(test_random_is_deterministic_for_a_seed),
        cmocka_unit_test(test_model_stage_waits_for_results),
        cmocka_unit_test(test_budgeted_pick_on_a_measured_h200_space),
        cmocka_unit_test(test_budgeted_pick_within_3_percent_of_exhaustive),
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
