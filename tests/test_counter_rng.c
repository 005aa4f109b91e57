/* test_counter_rng.c: the benchmarks' counter-based inputs on the CPU: the host generator is a
 * pure function of (seed, stream, element) whose rows, elements and whole matrices agree; its
 * uniform values cover [-1, 1) evenly on their grid and round to the nearest 16-bit value (ties
 * to even); the activations fire at their units' rates (skewed ones too) with values in (0, 1]
 * that never round to zero; the gate's law gives relu(X . Wg) the sparsity a problem asks for;
 * and the generator template (templates/fill_random.lua) generates and compiles for sm_80 and
 * sm_90a into the kernels it promises. tests/test_random_fill_gpu.c checks the device's output
 * against this generator bit for bit. */
#include "test_util.h"
#include "generator/nvrtc.h"
#include "ops/twell/twell.h"
#include "runtime/runtime.h"
#include "tuner/counter_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed;

static void test_pure_function_of_seed_stream_index(void **state)
{
    uint64_t k = crng_key(seed, 3);
    assert_true(k == crng_key(seed, 3));
    assert_true(k != crng_key(seed, 4));
    assert_true(k != crng_key(seed + 1, 3));
    /* no two of 4096 consecutive elements, or of two streams' first elements, share their bits */
    enum { N = 4096 };
    uint64_t *b = malloc(sizeof *b * 2 * N);
    assert_non_null(b);
    for (int i = 0; i < N; i++) {
        b[i] = crng_bits(k, (uint64_t)i);
        b[N + i] = crng_bits(crng_key(seed, 4), (uint64_t)i);
        assert_true(b[i] == crng_bits(k, (uint64_t)i));
    }
    for (int i = 0; i < 2 * N; i++)
        for (int j = i + 1; j < 2 * N; j++)
            if (b[i] == b[j]) fail_msg("elements %d and %d share their bits", i, j);
    free(b);
    /* rows, elements and the whole matrix agree; column 0 comes from its table when there is one */
    uint16_t col0[7] = { 1, 2, 3, 4, 5, 6, 7 };
    for (int withcol = 0; withcol < 2; withcol++) {
        crng_matrix m = { SJ_DTYPE_BF16, k, 7, 13, withcol ? col0 : NULL };
        uint16_t whole[7 * 13], row[13];
        crng_matrix_fill(&m, whole);
        for (int64_t r = 0; r < m.rows; r++) {
            crng_matrix_row(&m, r, row);
            for (int64_t c = 0; c < m.cols; c++) {
                assert_int_equal(row[c], crng_matrix_at(&m, r, c));
                assert_int_equal(whole[r * m.cols + c], row[c]);
            }
            if (withcol) assert_int_equal(row[0], col0[r]);
            else assert_int_equal(row[0], tu_to16(SJ_DTYPE_BF16, crng_uniform(crng_bits(k, (uint64_t)(r * 13)))));
        }
    }
}

static void test_uniform_law(void **state)
{
    enum { N = 1 << 20, BINS = 16 };
    uint64_t k = crng_key(seed, 11);
    double sum = 0, sq = 0, lo = 1, hi = -1;
    int bins[BINS] = { 0 };
    for (int i = 0; i < N; i++) {
        float u = crng_uniform(crng_bits(k, (uint64_t)i));
        double scaled = ((double)u + 1.0) * 0x1p23; /* the grid: an integer in [0, 2^24) */
        if (scaled != floor(scaled) || scaled < 0 || scaled >= 0x1p24) fail_msg("element %d = %.9g is off the grid", i, u);
        sum += u;
        sq += (double)u * u;
        lo = fmin(lo, u);
        hi = fmax(hi, u);
        bins[(int)(((double)u + 1.0) / 2.0 * BINS)]++;
    }
    double mean = sum / N, var = sq / N - mean * mean;
    fprintf(stderr, "# uniform: mean %.5f, variance %.5f, range [%.6f, %.6f]\n", mean, var, lo, hi);
    assert_true(fabs(mean) < 0.005);              /* sd of the mean: 0.00056 */
    assert_true(fabs(var - 1.0 / 3.0) < 0.005);
    assert_true(lo >= -1 && lo < -0.9999 && hi < 1 && hi > 0.9999);
    for (int b = 0; b < BINS; b++)                /* 65536 expected, sd 248 */
        if (abs(bins[b] - N / BINS) > 2000) fail_msg("bin %d holds %d values, expected about %d", b, bins[b], N / BINS);
}

/* v is the 16-bit value nearest to u, ties to the even one. */
static void expect_nearest(sj_dtype dt, float u, uint16_t v)
{
    double got = tu_from16(dt, v), err = fabs(got - u);
    for (int d = -1; d <= 1; d += 2) {
        uint16_t w = (uint16_t)(v + d);
        if ((w & 0x7fff) == 0x7fff || ((v & 0x7fff) == 0 && d < 0)) continue; /* no neighbour that way */
        double other = fabs(tu_from16(dt, w) - u);
        if (other < err || (other == err && (v & 1)))
            fail_msg("%s: %.9g rounds to 0x%04x (%.9g), but 0x%04x (%.9g) is nearer or the even tie", sj_dtype_name(dt),
                     u, v, got, w, tu_from16(dt, w));
    }
}

static void test_rounding_to_the_dtype(void **state)
{
    for (int d = 0; d < 2; d++) {
        sj_dtype dt = d ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
        crng_matrix m = { dt, crng_key(seed, 21), 1024, 1024, NULL };
        int subnormal = 0;
        for (int64_t i = 0; i < m.rows * m.cols; i++) {
            float u = crng_uniform(crng_bits(m.key, (uint64_t)i));
            uint16_t v = crng_matrix_at(&m, i / m.cols, i % m.cols);
            expect_nearest(dt, u, v);
            subnormal += dt == SJ_DTYPE_F16 && (v & 0x7c00) == 0 && (v & 0x3ff);
        }
        if (dt == SJ_DTYPE_F16) fprintf(stderr, "# f16: %d subnormal values among 2^20\n", subnormal);
        /* hand-picked values: the top of the range, a tie, the smallest grid step */
        const float picks[] = { 1.0f - 0x1p-23f, -1.0f, 0x1p-23f, -0x1p-23f, 1.0f + 0x1p-8f - 2.0f, 0.5f + 0x1p-9f };
        for (size_t i = 0; i < sizeof picks / sizeof *picks; i++) expect_nearest(dt, picks[i], harness_f32_to_16(dt, picks[i]));
    }
}

static void test_activations_fire_at_their_rates(void **state)
{
    assert_true(crng_threshold(0) == 0);
    assert_true(crng_threshold(-1) == 0);
    assert_true(crng_threshold(0.25) == 1u << 30);
    assert_true(crng_threshold(1) == UINT32_MAX);
    enum { ROWS = 512, UNITS = 2048 };
    double rate[UNITS];
    uint32_t thr[UNITS];
    uint16_t row[UNITS];
    for (int skewed = 0; skewed < 2; skewed++) {
        uint64_t rng = seed | 1;
        assert_int_equal(harness_unit_rates(0.01, skewed ? 1.0 : 0.0, 0, UNITS, &rng, rate), SJ_OK);
        for (int j = 0; j < UNITS; j++) thr[j] = crng_threshold(rate[j]);
        for (int d = 0; d < 2; d++) {
            sj_dtype dt = d ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
            crng_activations a = { dt, crng_key(seed, 31), ROWS, UNITS, thr };
            static int fired[UNITS];
            memset(fired, 0, sizeof fired);
            long total = 0;
            for (int r = 0; r < ROWS; r++) {
                crng_activation_row(&a, r, row);
                for (int j = 0; j < UNITS; j++) {
                    assert_int_equal(row[j], crng_activation_at(&a, r, j));
                    if (!row[j]) continue;
                    double v = tu_from16(dt, row[j]);
                    if (!(v > 0 && v <= 1)) fail_msg("%s (%d, %d) = %g: outside (0, 1]", sj_dtype_name(dt), r, j, v);
                    fired[j]++;
                    total++;
                }
            }
            /* expected 10486 non-zeros, sd 102 */
            double density = (double)total / ((double)ROWS * UNITS);
            /* the busiest fifth of the units by their own rate */
            double top = 0, all = 0;
            for (int j = 0; j < UNITS; j++) {
                int above = 0;
                for (int i = 0; i < UNITS; i++) above += rate[i] > rate[j];
                if (above < UNITS / 5) top += fired[j];
                all += fired[j];
            }
            fprintf(stderr, "# activations %s skew %d: density %.5f, busiest fifth %.3f of the non-zeros\n",
                    sj_dtype_name(dt), skewed, density, top / all);
            assert_true(fabs(density - 0.01) < 0.0006);
            if (skewed) assert_true(top / all > 0.6);
        }
    }
}

/* relu(X . Wg) of the gate's law: the fraction of zeros the problem asks for. */
/* The share of zeros of the gate's activations for p's generated inputs; *silent (may be NULL):
 * the share of units (columns) that fire for no token. */
static double gate_sparsity_of(const sj_problem *p, uint64_t s, double *silent)
{
    twell_gate_law law;
    assert_int_equal(twell_gate_inputs(p, s, &law), SJ_OK);
    const float *lut = harness_lut16(p->dtype);
    int64_t K = p->k, zeros = 0;
    uint16_t *x = malloc(sizeof *x * (size_t)(p->m * K)), *w = malloc(sizeof *w * (size_t)K);
    assert_true(x && w);
    crng_matrix_fill(&law.X, x);
    for (int64_t r = 0; r < p->m; r++) assert_int_equal(x[r * K], harness_f32_to_16(p->dtype, 1.0f));
    int64_t silent_units = 0;
    for (int64_t j = 0; j < p->n; j++) {
        crng_matrix_row(&law.WgT, j, w);
        int64_t fired = 0;
        for (int64_t r = 0; r < p->m; r++) {
            double pre = 0;
            for (int64_t k = 0; k < K; k++) pre += (double)lut[x[r * K + k]] * lut[w[k]];
            zeros += !(pre > 0);
            fired += pre > 0;
        }
        silent_units += fired == 0;
    }
    free(x);
    free(w);
    twell_gate_inputs_free(&law);
    if (silent) *silent = (double)silent_units / (double)p->n;
    return (double)zeros / ((double)p->m * p->n);
}

static double gate_sparsity(const sj_problem *p, uint64_t s) { return gate_sparsity_of(p, s, NULL); }

static void test_gate_law_gives_the_sparsity(void **state)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_TWELL_GATE, SJ_DTYPE_BF16, 256, 1024, 256);
    p.twell_tile = 128;
    p.twell_capacity = 16;
    const double asked[] = { 0.9, 0.99 }, skews[] = { 0, 1 };
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < 2; s++) {
            p.twell_sparsity = asked[a];
            p.twell_skew = skews[s];
            double got = gate_sparsity(&p, seed);
            fprintf(stderr, "# gate law: sparsity %.4f asked, %.4f given (skew %g)\n", asked[a], got, skews[s]);
            assert_true(fabs(got - asked[a]) < 0.2 * (1 - asked[a]));
        }
    p.twell_sparsity = 0.99; /* a third of the units dead: the others carry the same non-zeros */
    p.twell_skew = 1;
    p.twell_dead = 0.3;
    double silent;
    double dead_got = gate_sparsity_of(&p, seed, &silent);
    fprintf(stderr, "# gate law: sparsity 0.9900 asked, %.4f given (skew 1, 30%% of the units dead: %.3f silent)\n",
            dead_got, silent);
    assert_true(fabs(dead_got - 0.99) < 0.2 * 0.01);
    assert_true(silent >= 307.0 / 1024); /* round(0.3 x 1024) units never fire, others may not in 256 tokens */
    p.twell_dead = 0;
    p.twell_sparsity = 0; /* unspecified: C / (2T) non-zeros */
    p.twell_skew = 0;
    double got = gate_sparsity(&p, seed);
    assert_true(fabs((1 - got) - 16.0 / 256) < 0.01);
}

static void test_generator_template(void **state)
{
    for (int a = 0; a < 2; a++) {
        const char *arch = a ? "sm_80" : "sm_90a";
        sj_context *ctx = tu_compile_context(arch);
        assert_non_null(ctx);
        gen_state *g;
        assert_int_equal(rt_generator(ctx, &g), SJ_OK);
        sj_problem p;
        sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_BF16, 1, 1, 1);
        int valid = 1;
        char reason[256] = "";
        assert_int_equal(gen_config_valid(g, "fill_random", &p, "DIST=2", &valid, reason, sizeof reason), SJ_OK);
        assert_false(valid);
        assert_non_null(strstr(reason, "DIST must be 0"));
        for (int d = 0; d < 2; d++) {
            p.dtype = p.out_dtype = d ? SJ_DTYPE_F16 : SJ_DTYPE_BF16;
            for (int dist = 0; dist < 2; dist++) {
                sj_generated *gen = NULL;
                assert_int_equal(gen_generate(g, "fill_random", &p, dist ? "DIST=1" : "DIST=0", &gen), SJ_OK);
                assert_int_equal(gen->block[0] * gen->block[1] * gen->block[2], 256);
                /* 8 blocks per SM where the context knows the GPU, else 1024 */
                sj_device_info info;
                assert_int_equal(sj_get_device_info(ctx, &info), SJ_OK);
                assert_int_equal(gen->grid[0], info.has_gpu ? 8 * info.sm_count : 1024);
                void *cubin = NULL;
                size_t size = 0;
                char *log = NULL;
                double secs;
                if (nvrtc_compile(gen->source, gen->entry, arch, &cubin, &size, &log, &secs) != SJ_OK)
                    fail_msg("fill_random DIST=%d %s for %s: %s\n%s", dist, sj_dtype_name(p.dtype), arch, sj_last_error(),
                             log ? log : "");
                free(log);
                char *sass = tu_sass(cubin, size);
                if (sass) {
                    int local = tu_count_lines(sass, "LDL") + tu_count_lines(sass, "STL");
                    int stores16 = tu_count_lines(sass, "STG.E.U16"), vote = tu_count_lines(sass, "VOTE.ANY"),
                        popc = tu_count_lines(sass, "POPC");
                    fprintf(stderr, "# fill_random DIST=%d %s %s SASS: %d STG.E.U16, %d VOTE.ANY, %d POPC\n", dist,
                            sj_dtype_name(p.dtype), arch, stores16, vote, popc);
                    assert_int_equal(local, 0);
                    assert_true(stores16 >= 1); /* the matrix, or the spill */
                    if (dist) assert_true(vote >= 1 && popc >= 1); /* the ballots that order a tile's entries */
                    free(sass);
                }
                free(cubin);
                sj_generated_free(gen);
            }
        }
        p.dtype = p.out_dtype = SJ_DTYPE_F32;
        assert_int_equal(gen_config_valid(g, "fill_random", &p, "DIST=0", &valid, reason, sizeof reason), SJ_OK);
        assert_false(valid);
        assert_non_null(strstr(reason, "f16 or bf16"));
        sj_context_destroy(ctx);
    }
}

int main(void)
{
    seed = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pure_function_of_seed_stream_index),
        cmocka_unit_test(test_uniform_law),
        cmocka_unit_test(test_rounding_to_the_dtype),
        cmocka_unit_test(test_activations_fire_at_their_rates),
        cmocka_unit_test(test_gate_law_gives_the_sparsity),
        cmocka_unit_test(test_generator_template),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
