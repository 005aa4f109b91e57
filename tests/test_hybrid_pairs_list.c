/* test_hybrid_pairs_list.c: the listing of hybrid-ffn-fwd's and -dx's tensor-core variant (ALGO=2,
 * templates/lib/hybrid_pairs.lua) on the CPU. Its host reference (hybrid_pairs_list_host, what the
 * GPU test compares the device's listing with) against the dense matrix the hybrid one stands for,
 * on fresh random matrices (f16, bf16; unit tiles of 256 and 512, ragged d_ff; every row
 * overflowing, none, a few; units that fire for every token, so whole tiles are full; each row's
 * ELL slots shuffled, as the gate writes them in any order): every non-zero exactly once, in its
 * unit tile, ascending, with its value and a hybrid position that holds it; counts and starts
 * consistent, each row's list inside its own region (its ELL slots, or its backup row's place),
 * no position used twice. An unplaced overflow row lists one NaN pair with no position. And the
 * workspace offsets the template writes into its kernels are those of hybrid_pairs_plan, for the
 * fwd and the dx; the variant's geometry, first candidate and refusals for both. */
#include "test_util.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"
#include "generator/generator.h"
#include "runtime/runtime.h"

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

static double unit01(void) { return 0.5 * (tu_uniform(&rng) + 1.0); }

/* rows x cols, each element non-zero with probability 1 - sparsity, and the first `hot` columns
 * non-zero in every row (units that always fire). */
static uint16_t *random_sparse(sj_dtype dt, int64_t rows, int64_t cols, double sparsity, int64_t hot)
{
    uint16_t *h = calloc((size_t)(rows * cols), sizeof *h);
    assert_non_null(h);
    for (int64_t i = 0; i < rows * cols; i++)
        if (i % cols < hot || unit01() >= sparsity) {
            float v = (float)tu_uniform(&rng);
            h[i] = tu_to16(dt, v == 0.0f ? 0.5f : v);
        }
    return h;
}

/* The ELL slots of every row in a random order (the gate writes them as its blocks arrive). */
static void shuffle_rows(sj_hybrid_host *a)
{
    const int64_t W = a->layout.width;
    for (int64_t t = 0; t < a->layout.rows; t++) {
        const int64_t e = a->nnz[t] < W ? a->nnz[t] : W;
        for (int64_t i = e - 1; i > 0; i--) {
            const int64_t j = (int64_t)(unit01() * (double)(i + 1)) % (i + 1), x = t * W + i, y = t * W + j;
            uint16_t v = a->values[x], c = a->columns[x];
            a->values[x] = a->values[y], a->columns[x] = a->columns[y];
            a->values[y] = v, a->columns[y] = c;
        }
    }
}

typedef struct listing {
    int32_t *counts, *starts;
    uint32_t *list;
    uint8_t *used;   /* per position */
    int64_t nut, positions;
} listing;

/* The host listing of a into arrays poisoned first. */
static listing list_of(const sj_hybrid_host *a, int unit_tile)
{
    const sj_hybrid_layout *l = &a->layout;
    listing s;
    s.nut = (l->cols + unit_tile - 1) / unit_tile;
    s.positions = l->rows * l->width + l->backup_rows * l->cols;
    s.counts = malloc(sizeof *s.counts * (size_t)(l->rows * s.nut));
    s.starts = malloc(sizeof *s.starts * (size_t)(l->rows * s.nut));
    s.list = malloc(sizeof *s.list * (size_t)(2 * s.positions));
    s.used = calloc((size_t)s.positions, 1);
    assert_true(s.counts && s.starts && s.list && s.used);
    memset(s.counts, 0xa5, sizeof *s.counts * (size_t)(l->rows * s.nut));
    memset(s.starts, 0xa5, sizeof *s.starts * (size_t)(l->rows * s.nut));
    memset(s.list, 0xa5, sizeof *s.list * (size_t)(2 * s.positions));
    SJ_ASSERT_OK(hybrid_pairs_list_host(a, unit_tile, s.counts, s.starts, s.list));
    return s;
}

static void listing_free(listing *s) { free(s->counts), free(s->starts), free(s->list), free(s->used); }

/* Row t's listing against the dense row H[t] and the hybrid arrays a. */
static void check_row(const sj_hybrid_host *a, const uint16_t *dense, int unit_tile, listing *s, int64_t t)
{
    const sj_hybrid_layout *l = &a->layout;
    const int64_t F = l->cols, W = l->width, mw = l->rows * W, n = a->nnz[t];
    const int64_t sl = n > W ? a->slot[t] : -1;
    const int64_t base = sl >= 0 ? mw + sl * F : t * W, room = sl >= 0 ? F : W;
    int64_t next = base, found = 0;
    for (int64_t ut = 0; ut < s->nut; ut++) {
        const int32_t c = s->counts[t * s->nut + ut], st = s->starts[t * s->nut + ut];
        if (st != next || c < 0) fail_msg("row %lld tile %lld: start %d, count %d; expected start %lld", (long long)t,
                                          (long long)ut, st, c, (long long)next);
        int prev = -1;
        for (int64_t q = st; q < st + c; q++) {
            if (q - base >= room) fail_msg("row %lld: its list passes its %lld positions", (long long)t, (long long)room);
            if (s->used[q]++) fail_msg("row %lld: list position %lld used twice", (long long)t, (long long)q);
            const uint32_t entry = s->list[2 * q], pos = s->list[2 * q + 1];
            const int local = (int)(entry >> 16);
            const int64_t col = ut * unit_tile + local;
            const uint16_t v = (uint16_t)(entry & 0xffffu);
            if (local <= prev || local >= unit_tile || col >= F)
                fail_msg("row %lld tile %lld: column %d after %d (tile of %d)", (long long)t, (long long)ut, local, prev, unit_tile);
            prev = local;
            if (v != dense[t * F + col] || !hybrid_nonzero(v))
                fail_msg("row %lld col %lld: value %04x, the matrix holds %04x", (long long)t, (long long)col, v, dense[t * F + col]);
            if ((int64_t)pos < mw) {
                if ((int64_t)(pos / W) != t || a->columns[pos] != col || a->values[pos] != v || (int64_t)(pos % W) >= (n < W ? n : W))
                    fail_msg("row %lld col %lld: position %u is not its ELL slot", (long long)t, (long long)col, pos);
            } else if (sl < 0 || (int64_t)pos - mw != sl * F + col) {
                fail_msg("row %lld col %lld: position %u is not its backup place", (long long)t, (long long)col, pos);
            }
            found++;
        }
        next = st + c;
    }
    if (found != n) fail_msg("row %lld: %lld pairs listed, %lld non-zeros", (long long)t, (long long)found, (long long)n);
}

typedef struct list_case {
    sj_dtype dt;
    int64_t rows, cols;
    int W;
    int64_t backup;
    double sparsity;
    int64_t hot;       /* columns every row activates */
    int unit_tile;
} list_case;

static void test_listing_holds_every_pair(void **state)
{
    (void)state;
    const list_case cases[] = {
        { SJ_DTYPE_BF16, 64, 1024, 128, 8, 0.99, 0, 512 },     /* a few overflow, most not */
        { SJ_DTYPE_F16, 33, 3001, 16, 0, 0.95, 0, 256 },       /* ragged d_ff; the backup grows */
        { SJ_DTYPE_F16, 40, 1100, 32, 40, 0.50, 0, 512 },      /* every row overflows */
        { SJ_DTYPE_BF16, 50, 2048, 2048, 0, 0.90, 0, 256 },    /* none overflows (W = d_ff) */
        { SJ_DTYPE_BF16, 30, 1500, 64, 0, 0.999, 600, 256 },   /* units that always fire: full tiles */
        { SJ_DTYPE_F16, 17, 700, 600, 0, 0.999, 600, 512 },    /* full tiles within the ELL */
        { SJ_DTYPE_BF16, 20, 300, 1, 0, 0.99, 0, 512 },        /* W = 1, one partial tile */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const list_case *c = &cases[i];
        uint16_t *dense = random_sparse(c->dt, c->rows, c->cols, c->sparsity, c->hot);
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, c->dt, c->rows, c->cols, c->W, c->backup));
        sj_hybrid_host a;
        sj_hybrid_report rep;
        SJ_ASSERT_OK(sj_hybrid_from_dense(&l, dense, c->cols, &a, &rep));
        if (c->sparsity == 0.50) assert_int_equal(rep.rows_backup, c->rows);
        if (c->W == c->cols) assert_int_equal(rep.rows_backup, 0);
        shuffle_rows(&a);
        listing s = list_of(&a, c->unit_tile);
        for (int64_t t = 0; t < c->rows; t++) check_row(&a, dense, c->unit_tile, &s, t);
        listing_free(&s);
        sj_hybrid_host_free(&a);
        free(dense);
    }
}

static void test_unplaced_row_lists_one_nan(void **state)
{
    (void)state;
    const sj_dtype dts[] = { SJ_DTYPE_BF16, SJ_DTYPE_F16 };
    for (int d = 0; d < 2; d++) {
        uint16_t *dense = random_sparse(dts[d], 12, 900, 0.6, 0);
        sj_hybrid_layout l;
        SJ_ASSERT_OK(sj_hybrid_layout_init(&l, dts[d], 12, 900, 64, 12));
        sj_hybrid_host a;
        SJ_ASSERT_OK(sj_hybrid_from_dense(&l, dense, 900, &a, NULL));
        assert_true(a.nnz[5] > 64);
        a.slot[5] = -1; /* row 5 overflowed a backup that was full */
        listing s = list_of(&a, 256);
        for (int64_t ut = 0; ut < s.nut; ut++) {
            assert_int_equal(s.counts[5 * s.nut + ut], ut == 0);
            assert_int_equal(s.starts[5 * s.nut + ut], 5 * 64);
        }
        assert_int_equal(s.list[2 * 5 * 64], dts[d] == SJ_DTYPE_BF16 ? 0x7fc0u : 0x7e00u);
        assert_int_equal(s.list[2 * 5 * 64 + 1], HYBRID_PAIRS_NO_POSITION);
        for (int64_t t = 0; t < 12; t++)
            if (t != 5) check_row(&a, dense, 256, &s, t);
        listing_free(&s);
        sj_hybrid_host_free(&a);
        free(dense);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    uint16_t *dense = random_sparse(SJ_DTYPE_BF16, 4, 300, 0.9, 0);
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 4, 300, 16, 0));
    sj_hybrid_host a;
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, dense, 300, &a, NULL));
    int32_t counts[8], starts[8];
    uint32_t list[2 * 4 * 16];
    assert_int_equal(hybrid_pairs_list_host(&a, 128, counts, starts, list), SJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(sj_last_error(), "unit_tile"));
    sj_hybrid_host_free(&a);
    free(dense);
}

/* The value of "#define name V" in src, or -1. */
static long long define_of(const char *src, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "#define %s ", name);
    const char *at = strstr(src, key);
    return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

/* The problem of op (hybrid-ffn-fwd or -dx) over tokens x d_ff, d_model, ELL width W at 99% zeros. */
static sj_problem ffn_problem(sj_op op, int64_t tokens, int64_t d_model, int64_t d_ff, int W)
{
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, tokens, d_ff, W, 0));
    sj_problem p;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, op, d_model, &p));
    p.twell_sparsity = 0.99;
    return p;
}

/* The offsets the template writes into both kernels of both ops are hybrid_pairs_plan's (bytes /
 * 4; the dx's pairs kernel keeps its slots twice: halves = 2), and the dx's workspace is the
 * larger by one more copy of the slots. */
static void test_plan_matches_template(void **state)
{
    (void)state;
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    const struct { int64_t M, D, F; int W; } shapes[] = { { 256, 2048, 1024, 128 }, { 8192, 4096, 11008, 128 },
                                                          { 777, 1032, 3001, 64 }, { 4096, 2048, 5632, 16 } };
    const sj_op ops[] = { SJ_OP_HYBRID_FFN_FWD, SJ_OP_HYBRID_FFN_DX };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        hybrid_pairs_ws w[2];
        for (int halves = 1; halves <= 2; halves++) {
            hybrid_pairs_plan(shapes[i].M, shapes[i].F, shapes[i].W, 3, halves, &w[halves - 1]);
            assert_int_equal(w[halves - 1].positions, shapes[i].M * shapes[i].W + 3 * shapes[i].F);
            assert_int_equal(w[halves - 1].total, w[halves - 1].list + 8 * (size_t)w[halves - 1].positions);
        }
        assert_true(w[1].counts >= w[0].counts + 4 * (size_t)((shapes[i].M + 511) / 512 * 512) * (size_t)shapes[i].F);
        for (int o = 0; o < 2; o++)
            for (int stage = 0; stage < 2; stage++) {
                sj_problem p = ffn_problem(ops[o], shapes[i].M, shapes[i].D, shapes[i].F, shapes[i].W);
                char config[96];
                snprintf(config, sizeof config, "ALGO=2,WARPS=8,UT=256,STAGES=3,STAGE=%d", stage);
                sj_generated *g = NULL;
                SJ_ASSERT_OK(sj_generate(ctx, &p, config, &g));
                assert_int_equal(define_of(g->source, "CNT_OFF"), (long long)(w[o].counts / 4));
                assert_int_equal(define_of(g->source, "ST_OFF"), (long long)(w[o].starts / 4));
                assert_int_equal(define_of(g->source, "LIST_OFF"), (long long)(w[o].list / 4));
                assert_int_equal(define_of(g->source, "MW"), (long long)(p.m * shapes[i].W));
                sj_generated_free(g);
            }
    }
    sj_context_destroy(ctx);
}

/* ALGO=2's two kernels, of both ops: the listing one CTA per token, the pairs kernel its work
 * items (16 warps at 8192 tokens, the tuner's first candidate; not the default); its refusals name
 * what they need. */
static void test_variant_geometry_and_refusals(void **state)
{
    (void)state;
    sj_context *hopper = tu_compile_context("sm_90a"), *ampere = tu_compile_context("sm_80");
    assert_true(hopper && ampere);
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(hopper, &gs));
    const sj_op ops[] = { SJ_OP_HYBRID_FFN_FWD, SJ_OP_HYBRID_FFN_DX };
    const char *templates[] = { "hybrid_ffn_fwd", "hybrid_ffn_dx" };
    for (int o = 0; o < 2; o++) {
        sj_problem p = ffn_problem(ops[o], 8192, 4096, 11008, 128);
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(hopper, &p, "ALGO=2,WARPS=16,UT=512,STAGES=3,STAGE=0", &g));
        assert_int_equal(g->grid[0], 8192);
        assert_int_equal(g->block[0], 256);
        sj_generated_free(g);
        SJ_ASSERT_OK(sj_generate(hopper, &p, "ALGO=2,WARPS=16,UT=512,STAGES=3,STAGE=1", &g));
        assert_int_equal(g->grid[0], 16 * (22 + 64));   /* token tiles x (unit tiles + 64-column blocks) */
        assert_int_equal(g->block[0], 512);
        sj_generated_free(g);
        char configs[GEN_MAX_VARIANTS][256];
        int n = 0;
        SJ_ASSERT_OK(gen_variant_configs(gs, templates[o], &p, configs, GEN_MAX_VARIANTS, &n));
        assert_int_equal(tu_config_value(configs[n - 1], "ALGO"), 2);
        assert_int_equal(tu_config_value(configs[n - 1], "WARPS"), 16);
        assert_int_equal(tu_config_value(configs[n - 1], "STAGE"), 0);
        SJ_ASSERT_OK(sj_generate(hopper, &p, NULL, &g));
        assert_int_equal(tu_config_value(g->config, "ALGO"), 0);
        sj_generated_free(g);
        /* "ALGO=2" alone: the default's SPLIT belongs to the rows, so the rest comes from the
         * tuner's ALGO=2 candidate (sj_set_config's rule) */
        SJ_ASSERT_OK(sj_generate(hopper, &p, "ALGO=2", &g));
        assert_int_equal(tu_config_value(g->config, "ALGO"), 2);
        assert_int_equal(tu_config_value(g->config, "SPLIT"), 0);
        assert_int_equal(tu_config_value(g->config, "WARPS"), 16);
        sj_generated_free(g);
        tu_expect_refused(ampere, &p, "ALGO=2,WARPS=16,UT=512,STAGES=3", "needs sm_90a");
        tu_expect_refused(hopper, &p, "ALGO=2,WARPS=16,UT=512,STAGES=3,SPLIT=4", "ALGO=2 takes SPLIT=0");
        tu_expect_refused(hopper, &p, "ALGO=0,WARPS=8", "ALGO=0 takes WARPS=16");
        tu_expect_refused(hopper, &p, "ALGO=2,WARPS=16,UT=1024,STAGES=3", "UT=256 or 512");
        tu_expect_refused(hopper, &p, "ALGO=1", "ALGO=1 must be 0");
    }
    sj_context_destroy(hopper);
    sj_context_destroy(ampere);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing_holds_every_pair),
        cmocka_unit_test(test_unplaced_row_lists_one_nan),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_plan_matches_template),
        cmocka_unit_test(test_variant_geometry_and_refusals),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
