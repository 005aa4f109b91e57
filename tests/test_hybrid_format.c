/* test_hybrid_format.c: the hybrid ELL + dense-backup format on the CPU. Layout sizes and
 * argument checks; the round trip dense -> hybrid -> dense on fresh random matrices at 50% to
 * 99.9% zeros (ragged column counts, W from 1 to cols, ld > cols, f16 and bf16) against an
 * independent reading of every row (the first W non-zeros ascending in the ELL, the rest in the
 * row's backup row, the report's counts); every row overflowing into an empty backup that grows,
 * none overflowing, a backup that grows past its given capacity; every non-zero 16-bit pattern
 * (NaNs, infinities, subnormals) kept bit for bit and -0 taken as a zero; the reverse conversion
 * refusing inconsistent data, rule by rule, naming the row. */
#include "test_util.h"
#include "ops/hybrid/hybrid_format.h"

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

/* Any 16-bit pattern that is not +-0: NaN payloads, infinities and subnormals included. */
static uint16_t random_bits(void)
{
    for (;;) {
        uint16_t b = (uint16_t)(0.5 * (tu_uniform(&rng) + 1.0) * 65536.0);
        if (b & 0x7fff) return b;
    }
}

/* rows x cols in a buffer of ld >= cols: each element non-zero with probability 1 - sparsity,
 * otherwise +0 or -0; padding columns hold a NaN so a converter that reads them fails. */
static uint16_t *random_sparse(int64_t rows, int64_t cols, int64_t ld, double sparsity)
{
    uint16_t *h = malloc(sizeof *h * (size_t)(rows * ld));
    assert_non_null(h);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) {
            uint16_t zero = tu_uniform(&rng) < 0 ? 0x8000 : 0;
            h[r * ld + c] = c >= cols ? 0x7e00 : (0.5 * (tu_uniform(&rng) + 1.0) >= sparsity ? random_bits() : zero);
        }
    return h;
}

static void test_layout(void **state)
{
    (void)state;
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 100, 1000, 64, 10));
    assert_int_equal(l.values_bytes, 100 * 64 * 2);
    assert_int_equal(l.columns_bytes, 100 * 64 * 2);
    assert_int_equal(l.nnz_bytes, 400);
    assert_int_equal(l.slot_bytes, 400);
    assert_int_equal(l.owner_bytes, 40);
    assert_int_equal(l.backup_bytes, 10 * 1000 * 2);
    assert_int_equal(l.counter_bytes, 4);
    assert_int_equal(l.total_bytes, 2 * 12800 + 800 + 40 + 20000 + 4);
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 1, 65536, 65536, 0));
    assert_int_equal(l.backup_bytes, 0);
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F32, 4, 4, 2, 0), SJ_ERR_INVALID_ARGUMENT, "dtype");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 0, 4, 2, 0), SJ_ERR_INVALID_ARGUMENT, "rows = 0");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 65537, 2, 0), SJ_ERR_INVALID_ARGUMENT, "cols = 65537");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 0, 0), SJ_ERR_INVALID_ARGUMENT, "width W = 0");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 9, 0), SJ_ERR_INVALID_ARGUMENT, "1..cols");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 2, 5), SJ_ERR_INVALID_ARGUMENT, "backup_rows = 5");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 2, -1), SJ_ERR_INVALID_ARGUMENT, "backup_rows");
    SJ_ASSERT_STATUS(sj_hybrid_layout_init(NULL, SJ_DTYPE_F16, 4, 8, 2, 0), SJ_ERR_INVALID_ARGUMENT, "layout is NULL");
    /* a layout not made by sj_hybrid_layout_init is refused */
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 2, 1));
    l.backup_bytes = 0;
    uint16_t dense[32] = { 0 };
    sj_hybrid_host h;
    SJ_ASSERT_STATUS(sj_hybrid_from_dense(&l, dense, 8, &h, NULL), SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_layout_init");
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, 4, 8, 2, 1));
    SJ_ASSERT_STATUS(sj_hybrid_from_dense(&l, dense, 7, &h, NULL), SJ_ERR_INVALID_ARGUMENT, "ld = 7");
    SJ_ASSERT_STATUS(sj_hybrid_from_dense(&l, NULL, 8, &h, NULL), SJ_ERR_INVALID_ARGUMENT, "NULL");
}

/* Checks h against an independent reading of the dense H and the report against the counts
 * read there; returns the number of overflow rows. */
static int64_t check_against_dense(const sj_hybrid_host *h, const sj_hybrid_report *rep, const uint16_t *H, int64_t ld)
{
    const sj_hybrid_layout *l = &h->layout;
    int64_t overflow = 0, ell_rows = 0, nnz_all = 0, nnz_ell = 0;
    for (int64_t r = 0; r < l->rows; r++) {
        int32_t nz = 0;
        const uint16_t *spill = h->slot[r] >= 0 ? h->backup + (size_t)h->slot[r] * (size_t)l->cols : NULL;
        for (int64_t c = 0; c < l->cols; c++) {
            uint16_t v = H[r * ld + c];
            if (!(v & 0x7fff)) {
                if (spill) assert_int_equal(spill[c], 0);
                continue;
            }
            if (nz < l->width) {
                assert_int_equal(h->columns[r * l->width + nz], c);
                assert_int_equal(h->values[r * l->width + nz], v);
                if (spill) assert_int_equal(spill[c], 0); /* an ELL column is not in the backup */
            } else {
                assert_non_null(spill);
                assert_int_equal(spill[c], v);
            }
            nz++;
        }
        assert_int_equal(h->nnz[r], nz);
        nnz_all += nz;
        nnz_ell += nz < l->width ? nz : l->width;
        if (nz > l->width) {
            assert_true(h->slot[r] >= 0 && h->slot[r] < l->backup_rows);
            assert_int_equal(h->owner[h->slot[r]], r);
            assert_int_equal(h->slot[r], overflow); /* rows in order take the next backup row */
            overflow++;
        } else {
            assert_int_equal(h->slot[r], -1);
            ell_rows++;
        }
    }
    assert_int_equal(h->counter, overflow);
    assert_int_equal(rep->rows_ell, ell_rows);
    assert_int_equal(rep->rows_backup, overflow);
    assert_int_equal(rep->rows_unplaced, 0);
    assert_int_equal(rep->backup_needed, overflow);
    assert_int_equal(rep->nnz, nnz_all);
    assert_int_equal(rep->nnz_ell, nnz_ell);
    assert_int_equal(rep->nnz_backup, nnz_all - nnz_ell);
    return overflow;
}

/* Round trip of one random matrix; returns its overflow rows. */
static int64_t round_trip(sj_dtype dt, int64_t rows, int64_t cols, int64_t pad, int width, int64_t backup,
                          double sparsity)
{
    int64_t ld = cols + pad;
    uint16_t *H = random_sparse(rows, cols, ld, sparsity);
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, dt, rows, cols, width, backup));
    sj_hybrid_host h;
    sj_hybrid_report rep;
    memset(&rep, 0xff, sizeof rep);
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, H, ld, &h, &rep));
    int64_t overflow = check_against_dense(&h, &rep, H, ld);
    /* the backup grows to the overflow rows when they exceed the capacity, never shrinks */
    assert_int_equal(h.layout.backup_rows, overflow > backup ? overflow : backup);
    int64_t ld2 = cols + 3;
    uint16_t *back = malloc(sizeof *back * (size_t)(rows * ld2));
    assert_non_null(back);
    memset(back, 0xAB, sizeof *back * (size_t)(rows * ld2));
    SJ_ASSERT_OK(sj_hybrid_to_dense(&h, back, ld2));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            uint16_t v = H[r * ld + c];
            assert_int_equal(back[r * ld2 + c], (v & 0x7fff) ? v : 0); /* -0 comes back as +0 */
        }
        for (int64_t c = cols; c < ld2; c++) assert_int_equal(back[r * ld2 + c], 0xABAB);
    }
    free(back);
    free(H);
    sj_hybrid_host_free(&h);
    assert_null(h.values);
    return overflow;
}

static void test_round_trip(void **state)
{
    (void)state;
    const struct { sj_dtype dt; int64_t rows, cols, pad; int W; int64_t backup; double sparsity; } cases[] = {
        { SJ_DTYPE_F16, 37, 1000, 3, 128, 0, 0.50 },     /* every row overflows an empty backup */
        { SJ_DTYPE_BF16, 64, 1024, 0, 128, 64, 0.90 },
        { SJ_DTYPE_F16, 50, 777, 5, 32, 8, 0.95 },
        { SJ_DTYPE_BF16, 40, 5632, 1, 64, 4, 0.99 },      /* about 56 a row: some overflow 64 */
        { SJ_DTYPE_F16, 9, 11008, 0, 8, 0, 0.999 },
        { SJ_DTYPE_BF16, 13, 100, 2, 100, 0, 0.50 },      /* W = cols: nothing overflows */
        { SJ_DTYPE_F16, 3, 5, 0, 1, 3, 0.20 },
        { SJ_DTYPE_BF16, 1, 65536, 0, 16, 1, 0.999 },     /* the widest row */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t of = round_trip(cases[i].dt, cases[i].rows, cases[i].cols, cases[i].pad, cases[i].W, cases[i].backup,
                                cases[i].sparsity);
        if (cases[i].W == cases[i].cols) assert_int_equal(of, 0);
        if (i == 0) assert_int_equal(of, cases[i].rows);
    }
}

/* The partition rule at its edges: rows of exactly W non-zeros stay in the ELL, W + 1 overflow;
 * every row overflowing; none; and a backup of 2 that must grow to 5. */
static void test_partition_rule(void **state)
{
    (void)state;
    const int64_t rows = 8, cols = 40;
    const int W = 6;
    uint16_t H[8 * 40];
    sj_hybrid_layout l;
    sj_hybrid_host h;
    sj_hybrid_report rep;
    /* row r has W - 1 + (r % 3) non-zeros: W - 1, W, W + 1 */
    memset(H, 0, sizeof H);
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < W - 1 + (int)(r % 3); i++) H[r * cols + (i * 7 + r) % cols] = random_bits();
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, rows, cols, W, 0));
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, H, cols, &h, &rep));
    for (int64_t r = 0; r < rows; r++) assert_int_equal(h.slot[r] >= 0, r % 3 == 2);
    assert_int_equal(rep.rows_backup, 2);
    assert_int_equal(rep.rows_ell, 6);
    assert_int_equal(h.layout.backup_rows, 2);
    sj_hybrid_host_free(&h);
    /* every row overflowing, with a capacity of 2 given: it grows to all 8 */
    for (size_t i = 0; i < sizeof H / sizeof *H; i++) H[i] = random_bits();
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, rows, cols, W, 2));
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, H, cols, &h, &rep));
    assert_int_equal(rep.rows_backup, rows);
    assert_int_equal(rep.rows_ell, 0);
    assert_int_equal(h.layout.backup_rows, rows);
    assert_int_equal(rep.nnz_backup, rows * (cols - W));
    sj_hybrid_host_free(&h);
    /* none overflowing: all zeros but one value per row, a full backup capacity left unused */
    memset(H, 0, sizeof H);
    for (int64_t r = 0; r < rows; r++) H[r * cols + r] = random_bits();
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, rows, cols, 1, rows));
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, H, cols, &h, &rep));
    assert_int_equal(rep.rows_ell, rows);
    assert_int_equal(rep.backup_needed, 0);
    assert_int_equal(h.counter, 0);
    assert_int_equal(h.layout.backup_rows, rows);
    sj_hybrid_host_free(&h);
}

/* The reverse conversion refuses each inconsistency, naming the row. */
static void test_to_dense_refuses(void **state)
{
    (void)state;
    const int64_t rows = 6, cols = 50;
    uint16_t *H = random_sparse(rows, cols, cols, 0.8);
    for (int64_t c = 0; c < cols; c++) H[2 * cols + c] = random_bits(); /* row 2 overflows */
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_F16, rows, cols, 20, 1));
    sj_hybrid_host h;
    uint16_t out[6 * 50];
    SJ_ASSERT_OK(sj_hybrid_from_dense(&l, H, cols, &h, NULL));
    assert_int_equal(h.slot[2], 0);
    /* find an ELL row with two entries */
    int64_t e = -1;
    for (int64_t r = 0; r < rows && e < 0; r++)
        if (r != 2 && h.nnz[r] >= 2) e = r;
    assert_true(e >= 0);
    const size_t at = hybrid_ell_at(&l, e);
    char row_e[32];
    snprintf(row_e, sizeof row_e, "row %lld", (long long)e);
#define CORRUPT(field, value, needle)                                                   \
    do {                                                                               \
        __typeof__(field) saved_ = (field);                                            \
        (field) = (value);                                                             \
        SJ_ASSERT_STATUS(sj_hybrid_to_dense(&h, out, cols), SJ_ERR_INVALID_ARGUMENT, needle); \
        (field) = saved_;                                                              \
    } while (0)
    CORRUPT(h.nnz[e], (int32_t)cols + 1, row_e);
    CORRUPT(h.nnz[e], -1, "outside 0..50");
    CORRUPT(h.columns[at], (uint16_t)cols, "past cols");
    CORRUPT(h.columns[at + 1], h.columns[at], "appears twice");
    CORRUPT(h.values[at], 0x8000, "stored value is zero");
    CORRUPT(h.slot[e], 0, "fits W");
    CORRUPT(h.slot[2], -1, "unplaced");
    CORRUPT(h.slot[2], 1, "unplaced"); /* past the backup: as the gate kernel leaves it */
    CORRUPT(h.owner[0], 3, "not a backup row it owns");
    CORRUPT(h.backup[h.columns[hybrid_ell_at(&l, 2)]], 0x3c00, "an ELL column");
    CORRUPT(h.backup[cols - 1], 0, "not nnz - W");
#undef CORRUPT
    SJ_ASSERT_OK(sj_hybrid_to_dense(&h, out, cols)); /* every corruption undone */
    sj_hybrid_report rep;
    h.slot[2] = 1; /* an unplaced row, as the gate kernel leaves it past a full backup */
    SJ_ASSERT_OK(sj_hybrid_report_host(&h, &rep));
    assert_int_equal(rep.rows_unplaced, 1);
    assert_int_equal(rep.rows_backup, 0);
    h.slot[2] = -1;
    SJ_ASSERT_OK(sj_hybrid_report_host(&h, &rep));
    assert_int_equal(rep.rows_unplaced, 1);
    assert_int_equal(rep.rows_backup, 0);
    assert_int_equal(rep.backup_needed, 1);
    sj_hybrid_host_free(&h);
    free(H);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_partition_rule),
        cmocka_unit_test(test_to_dense_refuses),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
