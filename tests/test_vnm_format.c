/* test_vnm_format.c: the host V:N:M format (ops/vnm/vnm_format.c) on the CPU: exact round trips
 * of matrices that have the pattern, pruning keeps the largest-magnitude pattern, rejection of
 * bad parameters and of matrices without the pattern, and an emulation of the mma.sp m16n8k32
 * fragments, read lane by lane as the PTX ISA describes them, which must reproduce the dense
 * product of the decompressed matrix: this checks the packing the kernel relies on. */
#include "test_util.h"
#include "ops/vnm/vnm_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int VS[] = { 16, 32, 64, 128 };
static const int MS[] = { 4, 5, 6, 7, 8, 12, 16, 31, 32, 64, 100, 128 };
static const sj_dtype DTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };

static uint64_t seed_state(void)
{
    static uint64_t s;
    if (!s) s = tu_seed();
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s | 1;
}

static int64_t urand(uint64_t *st, int64_t n) { return (int64_t)((tu_uniform(st) + 1.0) * 0.5 * (double)n) % n; }

/* A non-zero random value in (-1, -1/8] U [1/8, 1). */
static uint16_t nonzero(sj_dtype dt, uint64_t *st)
{
    double x = tu_uniform(st);
    double v = (0.125 + 0.875 * fabs(x)) * (x < 0 ? -1 : 1);
    return tu_to16(dt, (float)v);
}

/* A random rows x cols matrix (lda) that has the V:N:M pattern: per block 4 random columns,
 * per row 0, 1 or 2 non-zeros among them (mostly 2). */
static uint16_t *random_vnm(const sj_vnm_layout *l, int64_t lda, uint64_t *st)
{
    uint16_t *A = calloc((size_t)(l->rows * lda), 2);
    for (int64_t rb = 0; rb < l->row_blocks; rb++)
        for (int64_t g = 0; g < l->groups; g++) {
            int64_t c0 = g * l->m, w = l->cols - c0 < l->m ? l->cols - c0 : l->m;
            int cols[4], n = 0;
            while (n < 4 && n < w) { /* distinct columns */
                int c = (int)urand(st, w), dup = 0;
                for (int j = 0; j < n; j++) dup |= cols[j] == c;
                if (!dup) cols[n++] = c;
            }
            for (int64_t r = rb * l->v; r < rb * l->v + l->v && r < l->rows; r++) {
                int keep = urand(st, 10) == 0 ? (int)urand(st, 2) : 2;
                for (int k = 0; k < keep && k < n; k++) {
                    int j = (int)urand(st, n);
                    A[r * lda + c0 + cols[j]] = nonzero(l->dtype, st);
                }
            }
        }
    return A;
}

static void layout_ok(sj_vnm_layout *l, sj_dtype dt, int v, int m, int64_t rows, int64_t cols)
{
    SJ_ASSERT_OK(sj_vnm_layout_init(l, dt, v, 2, m, rows, cols));
}

/* Shapes: aligned, ragged in rows (not a multiple of V) and in cols (not a multiple of M). */
static void shape_for(int v, int m, int variant, int64_t *rows, int64_t *cols)
{
    switch (variant) {
    case 0: *rows = 2 * v; *cols = 16 * m; break;
    case 1: *rows = v + 3; *cols = 5 * m + 3; break;
    default: *rows = 17; *cols = m + 1; break;
    }
}

static void test_layout_sizes(void **state)
{
    (void)state;
    sj_vnm_layout l;
    layout_ok(&l, SJ_DTYPE_F16, 64, 8, 100, 1001);
    assert_int_equal(l.row_blocks, 2);
    assert_int_equal(l.groups, 126);
    assert_int_equal(l.k_tiles, 16); /* 126 groups -> 16 k tiles of 8, even */
    assert_int_equal(l.values_bytes, 128 * 128 * 2 * 2);
    assert_int_equal(l.meta_bytes, 128 / 16 * 8 * 32 * 4);
    assert_int_equal(l.index_bytes, 2 * 128 * 4 * 4);
    layout_ok(&l, SJ_DTYPE_BF16, 16, 128, 16, 1);
    assert_int_equal(l.groups, 1);
    assert_int_equal(l.k_tiles, 2);
}

static void test_bad_parameters(void **state)
{
    (void)state;
    sj_vnm_layout l;
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 8, 2, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "V = 8");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 48, 2, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "V = 48");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 256, 2, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "V = 256");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 3, 64, 64), SJ_ERR_INVALID_ARGUMENT, "M = 3");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 129, 64, 64), SJ_ERR_INVALID_ARGUMENT, "M = 129");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 3, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "N = 3");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 8, 0, 64), SJ_ERR_INVALID_ARGUMENT, "rows = 0");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F16, 64, 2, 8, 64, -5), SJ_ERR_INVALID_ARGUMENT, "cols = -5");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(&l, SJ_DTYPE_F32, 64, 2, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "dtype");
    SJ_ASSERT_STATUS(sj_vnm_layout_init(NULL, SJ_DTYPE_F16, 64, 2, 8, 64, 64), SJ_ERR_INVALID_ARGUMENT, "NULL");

    layout_ok(&l, SJ_DTYPE_F16, 64, 8, 64, 64);
    uint16_t *A = calloc(64 * 64, 2);
    sj_vnm_host h;
    SJ_ASSERT_STATUS(sj_vnm_compress(&l, A, 63, SJ_VNM_EXACT, &h), SJ_ERR_INVALID_ARGUMENT, "lda = 63");
    SJ_ASSERT_STATUS(sj_vnm_compress(&l, NULL, 64, SJ_VNM_EXACT, &h), SJ_ERR_INVALID_ARGUMENT, "A is NULL");
    SJ_ASSERT_STATUS(sj_vnm_compress(&l, A, 64, (sj_vnm_select)7, &h), SJ_ERR_INVALID_ARGUMENT, "select = 7");
    sj_vnm_layout forged = l;
    forged.k_tiles = 3;
    SJ_ASSERT_STATUS(sj_vnm_compress(&forged, A, 64, SJ_VNM_EXACT, &h), SJ_ERR_INVALID_ARGUMENT, "sj_vnm_layout_init");
    free(A);
}

/* Exact compression of a V:N:M matrix, then decompression, gives back the same bits. */
static void test_exact_round_trip(void **state)
{
    (void)state;
    uint64_t st = seed_state();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 4; vi++)
            for (size_t mi = 0; mi < sizeof MS / sizeof *MS; mi++)
                for (int var = 0; var < 3; var++) {
                    int64_t rows, cols;
                    shape_for(VS[vi], MS[mi], var, &rows, &cols);
                    sj_vnm_layout l;
                    layout_ok(&l, DTS[d], VS[vi], MS[mi], rows, cols);
                    int64_t lda = cols + (var == 1 ? 5 : 0);
                    uint16_t *A = random_vnm(&l, lda, &st);
                    SJ_ASSERT_OK(sj_vnm_check(&l, A, lda));
                    sj_vnm_host h;
                    SJ_ASSERT_OK(sj_vnm_compress(&l, A, lda, SJ_VNM_EXACT, &h));
                    uint16_t *back = malloc((size_t)(rows * lda) * 2);
                    memset(back, 0xff, (size_t)(rows * lda) * 2); /* poison, also the lda gap */
                    SJ_ASSERT_OK(sj_vnm_decompress(&h, back, lda));
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++)
                            if (back[r * lda + c] != A[r * lda + c])
                                fail_msg("V=%d M=%d %lldx%lld: (%lld, %lld) is 0x%04x, expected 0x%04x", VS[vi], MS[mi],
                                         (long long)rows, (long long)cols, (long long)r, (long long)c,
                                         back[r * lda + c], A[r * lda + c]);
                    sj_vnm_host_free(&h);
                    free(back);
                    free(A);
                }
}

static double mag(sj_dtype dt, uint16_t x) { return fabs((double)tu_from16(dt, x)); }

/* Pruning a dense random matrix: the result has the pattern, keeps the original values, and
 * per block keeps columns whose norm is at least that of every dropped column, and per row the
 * 2 largest |a| of the 4 kept columns. */
static void check_prune(const sj_vnm_layout *l, const uint16_t *A, sj_vnm_select sel)
{
    sj_vnm_host h;
    SJ_ASSERT_OK(sj_vnm_compress(l, A, l->cols, sel, &h));
    uint16_t *P = malloc((size_t)(l->rows * l->cols) * 2);
    memset(P, 0xff, (size_t)(l->rows * l->cols) * 2);
    SJ_ASSERT_OK(sj_vnm_decompress(&h, P, l->cols));
    SJ_ASSERT_OK(sj_vnm_check(l, P, l->cols));
    for (int64_t rb = 0; rb < l->row_blocks; rb++)
        for (int64_t g = 0; g < l->groups; g++) {
            int64_t c0 = g * l->m, w = l->cols - c0 < l->m ? l->cols - c0 : l->m;
            int64_t r0 = rb * l->v, r1 = r0 + l->v < l->rows ? r0 + l->v : l->rows;
            int kept[128] = { 0 }, nk = 0;
            for (int j = 0; j < 4; j++) {
                int32_t c = h.index[vnm_index_at(l, rb, g, j)];
                if (c >= 0) { kept[c - c0] = 1; nk++; }
            }
            assert_int_equal(nk, w < 4 ? w : 4);
            double norm[128], min_kept = INFINITY, max_dropped = 0;
            for (int c = 0; c < w; c++) {
                norm[c] = 0;
                for (int64_t r = r0; r < r1; r++) {
                    double x = mag(l->dtype, A[r * l->cols + c0 + c]);
                    norm[c] += sel == SJ_VNM_PRUNE_L1 ? x : x * x;
                }
                if (kept[c]) min_kept = fmin(min_kept, norm[c]);
                else max_dropped = fmax(max_dropped, norm[c]);
            }
            if (max_dropped > min_kept * (1 + 1e-12))
                fail_msg("block (%lld, %lld): a dropped column has norm %g > kept %g", (long long)rb, (long long)g,
                         max_dropped, min_kept);
            for (int64_t r = r0; r < r1; r++) {
                double kmin = INFINITY, dmax = 0;
                int nz = 0;
                for (int c = 0; c < w; c++) {
                    uint16_t o = A[r * l->cols + c0 + c], p = P[r * l->cols + c0 + c];
                    if (p != 0 && p != o) fail_msg("row %lld col %lld: kept 0x%04x, original 0x%04x", (long long)r,
                                                   (long long)(c0 + c), p, o);
                    if (!kept[c]) {
                        if (p != 0) fail_msg("row %lld col %lld: value in a dropped column", (long long)r, (long long)(c0 + c));
                        continue;
                    }
                    if (p != 0) { kmin = fmin(kmin, mag(l->dtype, o)); nz++; }
                    else dmax = fmax(dmax, mag(l->dtype, o));
                }
                if (nz > 2) fail_msg("row %lld group %lld keeps %d values", (long long)r, (long long)g, nz);
                if (nz == 2 && dmax > kmin) fail_msg("row %lld group %lld dropped |%g| > kept |%g|", (long long)r,
                                                     (long long)g, dmax, kmin);
            }
        }
    sj_vnm_host_free(&h);
    free(P);
}

static void test_prune_keeps_largest(void **state)
{
    (void)state;
    uint64_t st = seed_state();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 4; vi++)
            for (size_t mi = 0; mi < sizeof MS / sizeof *MS; mi++)
                for (int var = 0; var < 3; var++) {
                    int64_t rows, cols;
                    shape_for(VS[vi], MS[mi], var, &rows, &cols);
                    sj_vnm_layout l;
                    layout_ok(&l, DTS[d], VS[vi], MS[mi], rows, cols);
                    uint16_t *A = malloc((size_t)(rows * cols) * 2);
                    tu_fill16(DTS[d], A, (size_t)(rows * cols), 1.0f, &st);
                    check_prune(&l, A, var == 2 ? SJ_VNM_PRUNE_L1 : SJ_VNM_PRUNE_L2);
                    free(A);
                }
}

/* A dense matrix fails the exact check and names the block; so does a row with 3 of 4. */
static void test_rejects_non_pattern(void **state)
{
    (void)state;
    uint64_t st = seed_state();
    sj_vnm_layout l;
    layout_ok(&l, SJ_DTYPE_F16, 32, 8, 64, 64);
    uint16_t *A = random_vnm(&l, 64, &st);
    SJ_ASSERT_OK(sj_vnm_check(&l, A, 64));
    /* A fifth column in block (row block 1, group 2). */
    int64_t r = 40, c0 = 16;
    int used[8] = { 0 }, n = 0;
    for (int64_t rr = 32; rr < 64; rr++)
        for (int c = 0; c < 8; c++) if (A[rr * 64 + c0 + c]) used[c] = 1;
    for (int c = 0; c < 8; c++) n += used[c];
    for (int c = 0; c < 8 && n < 5; c++)
        if (!used[c]) { A[r * 64 + c0 + c] = nonzero(SJ_DTYPE_F16, &st); used[c] = 1; n++; }
    sj_vnm_host h;
    SJ_ASSERT_STATUS(sj_vnm_compress(&l, A, 64, SJ_VNM_EXACT, &h), SJ_ERR_PATTERN, "rows 32..63, columns 16..23");
    assert_null(h.values);
    SJ_ASSERT_STATUS(sj_vnm_check(&l, A, 64), SJ_ERR_PATTERN, "at most 4");
    free(A);

    /* Three non-zeros of a row in one block's columns. */
    uint16_t *B = calloc(64 * 64, 2);
    B[5 * 64 + 8] = B[5 * 64 + 9] = B[5 * 64 + 11] = tu_to16(SJ_DTYPE_F16, 0.5f);
    SJ_ASSERT_STATUS(sj_vnm_check(&l, B, 64), SJ_ERR_PATTERN, "row 5 has 3 non-zeros in columns 8..15");
    free(B);
}

/* Inconsistent compressed data is refused on decompression. */
static void test_decompress_rejects_corruption(void **state)
{
    (void)state;
    uint64_t st = seed_state();
    sj_vnm_layout l;
    layout_ok(&l, SJ_DTYPE_BF16, 16, 8, 16, 64);
    uint16_t *A = random_vnm(&l, 64, &st), *out = malloc(16 * 64 * 2);
    sj_vnm_host h;
    SJ_ASSERT_OK(sj_vnm_compress(&l, A, 64, SJ_VNM_EXACT, &h));
    int shift;
    size_t w = vnm_meta_at(&l, 3, 2, &shift);
    uint32_t keep = h.meta[w];
    h.meta[w] = (h.meta[w] & ~(0xfu << shift)) | (0x5u << shift); /* positions 1, 1 */
    SJ_ASSERT_STATUS(sj_vnm_decompress(&h, out, 64), SJ_ERR_INVALID_ARGUMENT, "row 3, group 2");
    h.meta[w] = keep;
    int32_t t = h.index[vnm_index_at(&l, 0, 4, 1)];
    h.index[vnm_index_at(&l, 0, 4, 1)] = h.index[vnm_index_at(&l, 0, 4, 0)];
    SJ_ASSERT_STATUS(sj_vnm_decompress(&h, out, 64), SJ_ERR_INVALID_ARGUMENT, "group 4");
    h.index[vnm_index_at(&l, 0, 4, 1)] = t;
    SJ_ASSERT_OK(sj_vnm_decompress(&h, out, 64));
    sj_vnm_host_free(&h);
    free(A);
    free(out);
}

/* ---- mma.sp emulation, written from the PTX ISA's fragment description (lane view) ---- */

/* One warp-level mma.sp.m16n8k32 over gathered B rows, as the kernel issues it: A registers
 * of lane L = values[(mt, kt)][L][0..3], metadata register = meta[(mt, kt/2)][L], selector
 * kt % 2, B fragment rows = the gathered rows of k tile kt. Adds into D (16 x 8, row-major). */
static void emulate_mma_sp(const sj_vnm_host *h, int64_t mt, int64_t kt, const double *Bg, int64_t n0, int64_t ldb,
                           double D[16][8])
{
    const sj_vnm_layout *l = &h->layout;
    const uint16_t *vals = h->values + ((mt * l->k_tiles + kt) * 32) * 8;
    const uint32_t *meta = h->meta + (mt * (l->k_tiles / 2) + kt / 2) * 32;
    const int sel = (int)(kt % 2);
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, t = lane & 3;
        for (int reg = 0; reg < 4; reg++) {
            /* PTX: a0,a1: row g, cols 2t..; a2,a3: row g+8; a4..a7: +8 compressed columns, i.e.
               chunk t for regs 0, 1 and chunk t + 4 for regs 2, 3. */
            int row = g + 8 * (reg & 1), chunk = t + 4 * (reg >> 1);
            /* Metadata of (row, chunk): lane 4*(row%8) + 2*sel + chunk/4, bits 16*(row/8) + 4*(chunk%4). */
            uint32_t e = meta[4 * (row % 8) + 2 * sel + chunk / 4];
            uint32_t nib = (e >> (16 * (row / 8) + 4 * (chunk % 4))) & 0xfu;
            int idx[2] = { (int)(nib & 3u), (int)(nib >> 2) };
            assert_true(idx[0] < idx[1]); /* ordered_metadata */
            for (int half = 0; half < 2; half++) {
                double a = tu_from16(l->dtype, vals[lane * 8 + reg * 2 + half]);
                int k = 4 * chunk + idx[half]; /* logical k of the 32 */
                for (int c = 0; c < 8; c++) D[row][c] += a * Bg[(kt * 32 + k) * ldb + n0 + c];
            }
        }
    }
}

static void test_fragment_emulation(void **state)
{
    (void)state;
    uint64_t st = seed_state();
    const int64_t n = 16;
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 4; vi++)
            for (size_t mi = 0; mi < sizeof MS / sizeof *MS; mi += 2) {
                int64_t rows, cols;
                shape_for(VS[vi], MS[mi], 1, &rows, &cols);
                sj_vnm_layout l;
                layout_ok(&l, DTS[d], VS[vi], MS[mi], rows, cols);
                uint16_t *A = malloc((size_t)(rows * cols) * 2), *P = malloc((size_t)(rows * cols) * 2);
                uint16_t *B = malloc((size_t)(cols * n) * 2);
                tu_fill16(DTS[d], A, (size_t)(rows * cols), 1.0f, &st);
                tu_fill16(DTS[d], B, (size_t)(cols * n), 1.0f, &st);
                sj_vnm_host h;
                SJ_ASSERT_OK(sj_vnm_compress(&l, A, cols, SJ_VNM_PRUNE_L2, &h));
                SJ_ASSERT_OK(sj_vnm_decompress(&h, P, cols));
                double *ref = malloc(sizeof(double) * (size_t)(rows * n));
                tu_ref_gemm16(DTS[d], P, B, ref, rows, n, cols);

                /* The gathered B of every row block, as the kernel's cp.async fills it. */
                int64_t kg = l.k_tiles * 32;
                double *Bg = malloc(sizeof(double) * (size_t)(kg * n));
                double max_err = 0, max_ref = 0;
                for (int64_t rb = 0; rb < l.row_blocks; rb++) {
                    for (int64_t k = 0; k < kg; k++) {
                        int32_t brow = h.index[vnm_index_at(&l, rb, k / 4, (int)(k % 4))];
                        if (l.m == 4) /* the 2:4 kernel reads B rows in order, without the index */
                            assert_int_equal(brow, k < cols ? k : -1);
                        for (int64_t c = 0; c < n; c++)
                            Bg[k * n + c] = brow >= 0 ? tu_from16(DTS[d], B[brow * n + c]) : 0.0;
                    }
                    for (int64_t mt = rb * l.v / 16; mt < (rb + 1) * l.v / 16; mt++)
                        for (int64_t n0 = 0; n0 < n; n0 += 8) {
                            double D[16][8] = { { 0 } };
                            for (int64_t kt = 0; kt < l.k_tiles; kt++) emulate_mma_sp(&h, mt, kt, Bg, n0, n, D);
                            for (int r = 0; r < 16; r++) {
                                int64_t row = mt * 16 + r;
                                for (int c = 0; c < 8; c++) {
                                    double want = row < rows ? ref[row * n + n0 + c] : 0.0;
                                    max_err = fmax(max_err, fabs(D[r][c] - want));
                                    max_ref = fmax(max_ref, fabs(want));
                                }
                            }
                        }
                }
                assert_true(max_ref > 0.1); /* not vacuous */
                if (max_err > 1e-9 * max_ref)
                    fail_msg("V=%d M=%d: emulated mma.sp differs from the dense product by %g", VS[vi], MS[mi], max_err);
                sj_vnm_host_free(&h);
                free(A); free(P); free(B); free(ref); free(Bg);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_sizes),
        cmocka_unit_test(test_bad_parameters),
        cmocka_unit_test(test_exact_round_trip),
        cmocka_unit_test(test_prune_keeps_largest),
        cmocka_unit_test(test_rejects_non_pattern),
        cmocka_unit_test(test_decompress_rejects_corruption),
        cmocka_unit_test(test_fragment_emulation),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
