/* test_twell_format.c: the TwELL format on the CPU. Layout sizes and argument checks; the round
 * trip dense -> TwELL -> dense on fresh random matrices of controlled sparsity (50% to 99.9%,
 * ragged column counts, T from 7 to 256, C from 1 to T, f16 and bf16, ld > cols) against an
 * independent count of every tile; the overflow rule (exactly C non-zeros stay in the entries,
 * C+1 keep their true count, the first C in the entries and the whole tile in the spill); -0 is
 * a zero; the reverse conversion refuses inconsistent data, rule by rule, naming the tile; the
 * problem mapping of the gate and the FFN. */
#include "test_util.h"
#include "ops/twell/twell_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static int setup(void **state)
{
    rng = tu_seed();
    return 0;
}

/* A non-zero 16-bit value of either sign, |v| in [0.25, 1.25): never rounds to +-0. */
static uint16_t random_nonzero(sj_dtype dt)
{
    double u = tu_uniform(&rng);
    float mag = (float)(0.75 + 0.5 * u);
    return tu_to16(dt, u < 0 ? -mag : mag);
}

/* rows x cols dense matrix in a buffer of ld >= cols; each element non-zero with probability
 * 1 - sparsity; the padding columns hold 0x7e00 (a NaN) so a converter that reads them fails. */
static uint16_t *random_sparse(sj_dtype dt, int64_t rows, int64_t cols, int64_t ld, double sparsity)
{
    uint16_t *h = malloc(sizeof *h * (size_t)(rows * ld));
    assert_non_null(h);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++)
            h[r * ld + c] = c >= cols ? 0x7e00 : (0.5 * (tu_uniform(&rng) + 1.0) >= sparsity ? random_nonzero(dt) : 0);
    return h;
}

static void test_layout(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 100, 1000, 128, 16));
    assert_int_equal(l.n_tiles, 8);
    assert_int_equal(l.entries_bytes, 100 * 8 * 16 * 4);
    assert_int_equal(l.counts_bytes, 100 * 8 * 4);
    assert_int_equal(l.spill_bytes, 100 * 1000 * 2);
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_BF16, 1, 1, 1, 1));
    assert_int_equal(l.n_tiles, 1);
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F32, 10, 10, 8, 4), SJ_ERR_INVALID_ARGUMENT, "dtype");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 0, 10, 8, 4), SJ_ERR_INVALID_ARGUMENT, "rows and cols");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 10, -1, 8, 4), SJ_ERR_INVALID_ARGUMENT, "rows and cols");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 10, 10, 0, 1), SJ_ERR_INVALID_ARGUMENT, "tile T = 0");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 10, 10, 65537, 1), SJ_ERR_INVALID_ARGUMENT, "tile T");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 10, 10, 8, 9), SJ_ERR_INVALID_ARGUMENT, "capacity C = 9");
    SJ_ASSERT_STATUS(sj_twell_layout_init(&l, SJ_DTYPE_F16, 10, 10, 8, 0), SJ_ERR_INVALID_ARGUMENT, "capacity");
    SJ_ASSERT_STATUS(sj_twell_layout_init(NULL, SJ_DTYPE_F16, 10, 10, 8, 4), SJ_ERR_INVALID_ARGUMENT, "layout is NULL");
    /* a layout not made by sj_twell_layout_init is refused by every conversion */
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 4, 64, 16, 4));
    l.n_tiles = 3;
    uint16_t dense[4 * 64] = { 0 };
    sj_twell_host h;
    SJ_ASSERT_STATUS(sj_twell_from_dense(&l, dense, 64, &h, NULL), SJ_ERR_INVALID_ARGUMENT, "sj_twell_layout_init");
}

/* Checks h against an independent reading of the dense matrix; returns overflowing tiles. */
static int64_t check_against_dense(const sj_twell_host *h, const uint16_t *H, int64_t ld)
{
    const sj_twell_layout *l = &h->layout;
    int64_t overflow = 0;
    for (int64_t r = 0; r < l->rows; r++)
        for (int64_t t = 0; t < l->n_tiles; t++) {
            int64_t c0 = t * l->tile, c1 = c0 + l->tile < l->cols ? c0 + l->tile : l->cols;
            int nz = 0;
            const uint32_t *slots = h->entries + twell_slot_at(l, r, t);
            for (int64_t c = c0; c < c1; c++) {
                uint16_t v = H[r * ld + c];
                if ((v & 0x7fff) == 0) continue;
                if (nz < l->capacity) {
                    /* entries: the first C non-zeros, ascending, (local column << 16) | bits */
                    assert_int_equal(slots[nz] >> 16, c - c0);
                    assert_int_equal(slots[nz] & 0xffff, v);
                }
                nz++;
            }
            assert_int_equal(h->counts[twell_count_at(l, r, t)], nz);
            if (nz > l->capacity) {
                overflow++;
                for (int64_t c = c0; c < c1; c++) {
                    uint16_t v = H[r * ld + c];
                    assert_int_equal(h->spill[r * l->cols + c], (v & 0x7fff) ? v : 0);
                }
            }
        }
    return overflow;
}

static void test_round_trip(void **state)
{
    const struct { sj_dtype dt; int64_t rows, cols; int T, C; double sparsity; int64_t pad; } cases[] = {
        { SJ_DTYPE_F16, 37, 1000, 64, 8, 0.50, 3 },    /* ragged last tile, almost every tile overflows */
        { SJ_DTYPE_BF16, 64, 1024, 128, 16, 0.90, 0 },
        { SJ_DTYPE_F16, 50, 777, 128, 16, 0.95, 5 },
        { SJ_DTYPE_BF16, 20, 5632, 128, 4, 0.99, 1 },
        { SJ_DTYPE_F16, 9, 3000, 256, 1, 0.999, 0 },
        { SJ_DTYPE_BF16, 13, 100, 7, 3, 0.70, 2 },     /* T not a power of two */
        { SJ_DTYPE_F16, 5, 64, 64, 64, 0.50, 0 },      /* C = T: never overflows */
        { SJ_DTYPE_BF16, 3, 5, 8, 2, 0.20, 0 },        /* fewer columns than one tile */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t rows = cases[i].rows, cols = cases[i].cols, ld = cols + cases[i].pad;
        uint16_t *H = random_sparse(cases[i].dt, rows, cols, ld, cases[i].sparsity);
        sj_twell_layout l;
        SJ_ASSERT_OK(sj_twell_layout_init(&l, cases[i].dt, rows, cols, cases[i].T, cases[i].C));
        sj_twell_host h;
        int64_t n_overflow = -1;
        SJ_ASSERT_OK(sj_twell_from_dense(&l, H, ld, &h, &n_overflow));
        int64_t expected = check_against_dense(&h, H, ld);
        assert_int_equal(n_overflow, expected);
        assert_int_equal(sj_twell_overflow_tiles(&h), expected);
        if (cases[i].C == cases[i].T) assert_int_equal(expected, 0);
        if (cases[i].sparsity == 0.50 && cases[i].C < cases[i].T) assert_true(expected > l.rows * l.n_tiles / 2);
        /* back to dense, into a poisoned buffer with another ld */
        int64_t ld2 = cols + 4;
        uint16_t *back = malloc(sizeof *back * (size_t)(rows * ld2));
        assert_non_null(back);
        memset(back, 0xAB, sizeof *back * (size_t)(rows * ld2));
        SJ_ASSERT_OK(sj_twell_to_dense(&h, back, ld2));
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++) assert_int_equal(back[r * ld2 + c], H[r * ld + c]);
            for (int64_t c = cols; c < ld2; c++) assert_int_equal(back[r * ld2 + c], 0xABAB); /* untouched */
        }
        free(back);
        free(H);
        sj_twell_host_free(&h);
        assert_null(h.entries);
    }
}

/* One row, T = 8, C = 3: tiles of exactly C, C + 1 and T non-zeros. */
static void test_overflow_rule(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 1, 24, 8, 3));
    uint16_t H[24] = { 0 };
    const int tile0[] = { 1, 4, 7 }, tile1[] = { 0, 2, 3, 6 };
    for (int i = 0; i < 3; i++) H[tile0[i]] = tu_to16(SJ_DTYPE_F16, 1.0f + (float)i);
    for (int i = 0; i < 4; i++) H[8 + tile1[i]] = tu_to16(SJ_DTYPE_F16, -2.0f - (float)i);
    for (int c = 16; c < 24; c++) H[c] = tu_to16(SJ_DTYPE_F16, 0.5f * (float)(c - 15));
    sj_twell_host h;
    int64_t n_overflow;
    SJ_ASSERT_OK(sj_twell_from_dense(&l, H, 24, &h, &n_overflow));
    assert_int_equal(n_overflow, 2);
    assert_int_equal(h.counts[0], 3);   /* exactly C: entries only */
    assert_int_equal(h.counts[1], 4);   /* C + 1: the true count */
    assert_int_equal(h.counts[2], 8);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(h.entries[i], twell_entry(tile0[i], H[tile0[i]]));
        assert_int_equal(h.entries[3 + i], twell_entry(tile1[i], H[8 + tile1[i]])); /* the first C */
        assert_int_equal(h.entries[6 + i], twell_entry(i, H[16 + i]));
    }
    for (int c = 0; c < 8; c++) assert_int_equal(h.spill[c], 0); /* not an overflowing tile */
    for (int c = 8; c < 24; c++) assert_int_equal(h.spill[c], H[c]);
    uint16_t back[24];
    memset(back, 0xFF, sizeof back);
    SJ_ASSERT_OK(sj_twell_to_dense(&h, back, 24));
    assert_memory_equal(back, H, sizeof H);
    sj_twell_host_free(&h);
}

static void test_negative_zero_is_zero(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_BF16, 2, 16, 16, 2));
    uint16_t H[32] = { 0 };
    for (int c = 0; c < 16; c++) H[c] = 0x8000;                      /* -0 everywhere in row 0 */
    H[16 + 5] = tu_to16(SJ_DTYPE_BF16, 3.0f);
    H[16 + 9] = 0x8000;
    sj_twell_host h;
    SJ_ASSERT_OK(sj_twell_from_dense(&l, H, 16, &h, NULL));
    assert_int_equal(h.counts[0], 0);
    assert_int_equal(h.counts[1], 1);
    assert_int_equal(h.entries[2], twell_entry(5, H[21]));
    uint16_t back[32];
    memset(back, 0xFF, sizeof back);
    SJ_ASSERT_OK(sj_twell_to_dense(&h, back, 16));
    for (int c = 0; c < 32; c++) assert_int_equal(back[c], c == 21 ? H[21] : 0); /* +0, not -0 */
    sj_twell_host_free(&h);
}

/* Every rule of the reverse conversion, one corruption at a time. */
static void test_to_dense_refuses_inconsistent(void **state)
{
    sj_twell_layout l;
    /* 2 rows, cols 20 with T = 8: tiles of 8, 8 and 4 columns; C = 2 */
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 2, 20, 8, 2));
    uint16_t H[40] = { 0 };
    H[1] = tu_to16(SJ_DTYPE_F16, 1.0f);
    H[3] = tu_to16(SJ_DTYPE_F16, 2.0f);                              /* row 0 tile 0: 2 = C */
    for (int c = 8; c < 13; c++) H[c] = tu_to16(SJ_DTYPE_F16, (float)c); /* row 0 tile 1: 5 > C */
    H[20 + 17] = tu_to16(SJ_DTYPE_F16, -1.0f);                      /* row 1 tile 2 (ragged) */
    sj_twell_host h;
    SJ_ASSERT_OK(sj_twell_from_dense(&l, H, 20, &h, NULL));
    uint16_t out[40];
    SJ_ASSERT_OK(sj_twell_to_dense(&h, out, 20));
    assert_memory_equal(out, H, sizeof H);

    int32_t c_save = h.counts[0];
    h.counts[0] = 9;
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "row 0 tile 0: count 9");
    h.counts[0] = -1;
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "count -1");
    h.counts[0] = c_save;

    size_t ragged = twell_slot_at(&l, 1, 2);                         /* 4 columns wide */
    uint32_t e_save = h.entries[ragged];
    h.entries[ragged] = twell_entry(4, H[37]);
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "outside the tile");
    h.entries[ragged] = twell_entry(1, 0x8000);
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "stored value is zero");
    h.entries[ragged] = e_save;

    uint32_t a = h.entries[0], b = h.entries[1];
    h.entries[0] = b;
    h.entries[1] = a;
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "not after");
    h.entries[1] = a;                                                /* a column twice */
    h.entries[0] = a;
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "column 1 not after 1");
    h.entries[1] = b;

    size_t over = twell_slot_at(&l, 0, 1);
    e_save = h.entries[over + 1];
    h.entries[over + 1] = twell_entry(1, tu_to16(SJ_DTYPE_F16, 7.0f)); /* not the spill's value */
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "not the spill's non-zero 1");
    h.entries[over + 1] = e_save;
    h.counts[twell_count_at(&l, 0, 1)] = 4;
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, "the spill holds 5");
    h.counts[twell_count_at(&l, 0, 1)] = 5;

    SJ_ASSERT_OK(sj_twell_to_dense(&h, out, 20));
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 19), SJ_ERR_INVALID_ARGUMENT, "ld = 19");
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, NULL, 20), SJ_ERR_INVALID_ARGUMENT, "H is NULL");
    SJ_ASSERT_STATUS(sj_twell_to_dense(NULL, out, 20), SJ_ERR_INVALID_ARGUMENT, "h is NULL");
    SJ_ASSERT_STATUS(sj_twell_from_dense(&l, H, 19, &h, NULL), SJ_ERR_INVALID_ARGUMENT, "ld = 19");
    sj_twell_host_free(&h);
    SJ_ASSERT_STATUS(sj_twell_to_dense(&h, out, 20), SJ_ERR_INVALID_ARGUMENT, NULL);
}

static void test_problems(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_BF16, 8192, 11008, 128, 16));
    sj_problem p;
    SJ_ASSERT_OK(sj_twell_gate_problem(&l, 4096, &p));
    assert_int_equal(p.op, SJ_OP_TWELL_GATE);
    assert_int_equal(p.dtype, SJ_DTYPE_BF16);
    assert_int_equal(p.out_dtype, SJ_DTYPE_BF16);
    assert_int_equal(p.m, 8192);    /* tokens */
    assert_int_equal(p.n, 11008);   /* d_ff */
    assert_int_equal(p.k, 4096);    /* d_model */
    assert_int_equal(p.twell_tile, 128);
    assert_int_equal(p.twell_capacity, 16);
    SJ_ASSERT_OK(sj_twell_ffn_problem(&l, 4096, SJ_DTYPE_F32, &p));
    assert_int_equal(p.op, SJ_OP_TWELL_FFN);
    assert_int_equal(p.out_dtype, SJ_DTYPE_F32);
    assert_int_equal(p.m, 8192);
    assert_int_equal(p.n, 4096);    /* d_model out */
    assert_int_equal(p.k, 4096);    /* d_model in */
    assert_int_equal(p.d_ff, 11008);
    assert_int_equal(p.twell_tile, 128);
    char desc[256];
    SJ_ASSERT_OK(sj_problem_describe(&p, desc, sizeof desc));
    assert_non_null(strstr(desc, "T=128,C=16,DFF=11008"));
    /* The sparsity: unspecified by default (the text stays as before), else part of the text the
     * cache key is made of, and a fraction of zeros in [0, 1). */
    assert_true(p.twell_sparsity == 0);
    assert_null(strstr(desc, "S="));
    p.twell_sparsity = 0.999;
    SJ_ASSERT_OK(sj_problem_describe(&p, desc, sizeof desc));
    assert_non_null(strstr(desc, "T=128,C=16,DFF=11008,S=0.999"));
    sj_problem g;
    SJ_ASSERT_OK(sj_twell_gate_problem(&l, 4096, &g));
    g.twell_sparsity = 0.95;
    SJ_ASSERT_OK(sj_problem_describe(&g, desc, sizeof desc));
    assert_non_null(strstr(desc, "T=128,C=16,S=0.95"));
    const double bad[] = { 1.0, -0.25, 1.5, NAN };
    for (int i = 0; i < 4; i++) {
        g.twell_sparsity = bad[i];
        SJ_ASSERT_STATUS(sj_problem_validate(&g), SJ_ERR_INVALID_ARGUMENT, "problem.twell_sparsity");
    }
    SJ_ASSERT_STATUS(sj_twell_ffn_problem(&l, 0, SJ_DTYPE_F16, &p), SJ_ERR_INVALID_ARGUMENT, "problem.n");
    SJ_ASSERT_STATUS(sj_twell_device_alloc(NULL, &l, &(sj_twell_device){ 0 }), SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_overflow_rule),
        cmocka_unit_test(test_negative_zero_is_zero),
        cmocka_unit_test(test_to_dense_refuses_inconsistent),
        cmocka_unit_test(test_problems),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
