/* vnm_format.c: the host side of the V:N:M format: layout sizes, magnitude pruning, lossless
 * compression of a matrix that already has the pattern (and the pattern check), and
 * decompression with consistency checks. The compressed order is in vnm_format.h. */
#include "ops/vnm/vnm_format.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sj_status sj_vnm_layout_init(sj_vnm_layout *l, sj_dtype dtype, int v, int n, int m, int64_t rows, int64_t cols)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_layout_init: layout is NULL");
    memset(l, 0, sizeof *l);
    if (dtype != SJ_DTYPE_F16 && dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M dtype %d: expected f16 or bf16", (int)dtype);
    if (v != 16 && v != 32 && v != 64 && v != 128)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M V = %d: V must be 16, 32, 64 or 128", v);
    if (n != 2) return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M N = %d: only N = 2 is supported", n);
    if (m < 4 || m > 128) return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M M = %d: M must be in 4..128", m);
    /* Kernel offsets are 64-bit, but rows and the gathered k are int kernel arguments. */
    const int64_t max_dim = (int64_t)1 << 30;
    if (rows <= 0 || rows > max_dim)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M rows = %lld: expected 1..%lld", (long long)rows, (long long)max_dim);
    if (cols <= 0 || cols > max_dim)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "V:N:M cols = %lld: expected 1..%lld", (long long)cols, (long long)max_dim);
    l->dtype = dtype;
    l->v = v;
    l->n = n;
    l->m = m;
    l->rows = rows;
    l->cols = cols;
    l->row_blocks = (rows + v - 1) / v;
    l->groups = (cols + m - 1) / m;
    int64_t kt = (l->groups + 7) / 8;
    l->k_tiles = kt + kt % 2;
    int64_t rp = vnm_rows_padded(l), gp = vnm_groups_padded(l);
    l->values_bytes = (size_t)(rp * gp * 2 * 2);
    l->meta_bytes = (size_t)(rp / 16 * (l->k_tiles / 2) * 32 * 4);
    l->index_bytes = (size_t)(l->row_blocks * gp * 4 * 4);
    return SJ_OK;
}

sj_status vnm_layout_check(const sj_vnm_layout *l, const char *what)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout is NULL", what);
    sj_vnm_layout again;
    if (sj_vnm_layout_init(&again, l->dtype, l->v, l->n, l->m, l->rows, l->cols) != SJ_OK)
        return error_prefix(SJ_ERR_INVALID_ARGUMENT, "%s", what);
    if (memcmp(&again, l, sizeof again))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout was not made by sj_vnm_layout_init", what);
    return SJ_OK;
}

static int is_zero(uint16_t x) { return (x & 0x7fffu) == 0; }

/* |x| as a number, for the column norms (both formats are sign-magnitude). */
static double magnitude(sj_dtype dt, uint16_t x)
{
    uint32_t bits;
    float f;
    if (dt == SJ_DTYPE_BF16) {
        bits = (uint32_t)(x & 0x7fffu) << 16;
    } else {
        uint32_t e = (x >> 10) & 0x1f, mant = x & 0x3ffu;
        if (e == 0) return ldexp((double)mant, -24);
        bits = e == 31 ? 0x7f800000u | (mant << 13) : ((e - 15 + 127) << 23) | (mant << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Per-element magnitude order: the bits without the sign compare like |x| in both formats. */
static uint16_t mag_key(uint16_t x) { return x & 0x7fffu; }

typedef struct block_ctx {
    const sj_vnm_layout *l;
    const uint16_t *A;
    int64_t lda;
    int64_t rb, g;         /* row block and column group */
    int64_t r0, r1;        /* real rows [r0, r1) */
    int64_t c0, width;     /* first column and real width of the group */
} block_ctx;

static uint16_t at(const block_ctx *b, int64_t row, int64_t off)
{
    return b->A[row * b->lda + b->c0 + off];
}

/* Chooses the block's 4 columns (ascending offsets; padding columns are offsets >= width). */
static sj_status select_columns(const block_ctx *b, sj_vnm_select select, int sel[4])
{
    const int m = b->l->m;
    int chosen[128] = { 0 }, n = 0;
    if (select == SJ_VNM_EXACT) {
        int used = 0, cols_nz[128];
        for (int c = 0; c < b->width; c++) {
            int nz = 0;
            for (int64_t r = b->r0; r < b->r1 && !nz; r++) nz = !is_zero(at(b, r, c));
            if (nz) {
                if (used < 4) chosen[c] = 1;
                cols_nz[used++] = c;
            }
        }
        if (used > 4)
            return error_set(SJ_ERR_PATTERN,
                           "not V:%d:%d: rows %lld..%lld, columns %lld..%lld (row block %lld, group %lld) have "
                           "non-zeros in %d columns (first five at %lld, %lld, %lld, %lld, %lld); a block keeps at most 4",
                           b->l->n, m, (long long)b->r0, (long long)b->r1 - 1, (long long)b->c0,
                           (long long)(b->c0 + b->width - 1), (long long)b->rb, (long long)b->g, used,
                           (long long)(b->c0 + cols_nz[0]), (long long)(b->c0 + cols_nz[1]), (long long)(b->c0 + cols_nz[2]),
                           (long long)(b->c0 + cols_nz[3]), (long long)(b->c0 + cols_nz[4]));
        n = used;
    } else {
        double norm[128];
        for (int c = 0; c < m; c++) {
            norm[c] = 0.0;
            if (c >= b->width) continue;
            for (int64_t r = b->r0; r < b->r1; r++) {
                double x = magnitude(b->l->dtype, at(b, r, c));
                norm[c] += select == SJ_VNM_PRUNE_L1 ? x : x * x;
            }
        }
        /* Four passes of "largest not yet chosen"; the strict > keeps the lower column on ties,
           and real columns (even of norm 0) come before padding. */
        for (; n < 4; n++) {
            int best = -1;
            for (int c = 0; c < m; c++)
                if (!chosen[c] && (best < 0 || norm[c] > norm[best])) best = c;
            chosen[best] = 1;
        }
    }
    /* Fill up to 4 with the lowest unused offsets (EXACT blocks with < 4 non-zero columns). */
    for (int c = 0; n < 4 && c < m; c++)
        if (!chosen[c]) { chosen[c] = 1; n++; }
    for (int c = 0, j = 0; c < m; c++)
        if (chosen[c]) sel[j++] = c;
    return SJ_OK;
}

/* Packs one row of one group: the 2 kept values and their positions in the 4 columns. */
static void put(sj_vnm_host *h, int64_t row, int64_t g, int p0, int p1, uint16_t v0, uint16_t v1)
{
    const sj_vnm_layout *l = &h->layout;
    h->values[vnm_value_at(l, row, g, 0)] = v0;
    h->values[vnm_value_at(l, row, g, 1)] = v1;
    int shift;
    size_t w = vnm_meta_at(l, row, g, &shift);
    h->meta[w] = (h->meta[w] & ~(0xfu << shift)) | ((uint32_t)(p0 | p1 << 2) << shift);
}

/* The row's 2 kept positions of the 4 selected columns (ascending), or a pattern error. */
static sj_status select_pair(const block_ctx *b, sj_vnm_select select, int64_t row, const int sel[4],
                             uint16_t v[4], int *p0, int *p1)
{
    for (int j = 0; j < 4; j++) v[j] = sel[j] < b->width ? at(b, row, sel[j]) : 0;
    int a = -1, c = -1;
    if (select == SJ_VNM_EXACT) {
        int nz = 0;
        for (int j = 0; j < 4; j++) {
            if (is_zero(v[j])) continue;
            if (nz == 0) a = j; else if (nz == 1) c = j;
            nz++;
        }
        if (nz > 2)
            return error_set(SJ_ERR_PATTERN,
                           "not V:%d:%d: row %lld has %d non-zeros in columns %lld..%lld (group %lld); 2:4 keeps at most 2 "
                           "of the block's 4 columns",
                           b->l->n, b->l->m, (long long)row, nz, (long long)b->c0, (long long)(b->c0 + b->width - 1),
                           (long long)b->g);
    } else {
        /* Largest |v| first; strict > keeps the lower position on ties. */
        for (int j = 0; j < 4; j++)
            if (a < 0 || mag_key(v[j]) > mag_key(v[a])) a = j;
        for (int j = 0; j < 4; j++)
            if (j != a && (c < 0 || mag_key(v[j]) > mag_key(v[c]))) c = j;
    }
    /* Fewer than 2 non-zeros: complete with the lowest free positions (metadata needs 2). */
    for (int j = 0; a < 0 && j < 4; j++) if (j != c) a = j;
    for (int j = 0; c < 0 && j < 4; j++) if (j != a) c = j;
    *p0 = a < c ? a : c;
    *p1 = a < c ? c : a;
    return SJ_OK;
}

/* Walks every block of A; with h NULL it only checks the pattern (EXACT). */
static sj_status walk(const sj_vnm_layout *l, const uint16_t *A, int64_t lda, sj_vnm_select select, sj_vnm_host *h)
{
    const int64_t gp = vnm_groups_padded(l);
    for (int64_t rb = 0; rb < l->row_blocks; rb++) {
        block_ctx b = { l, A, lda, rb, 0, rb * l->v, rb * l->v + l->v, 0, 0 };
        if (b.r1 > l->rows) b.r1 = l->rows;
        for (int64_t g = 0; g < gp; g++) {
            if (g >= l->groups) {
                /* Padding groups: zeros at positions 0, 1, columns past the matrix. */
                if (!h) break;
                for (int j = 0; j < 4; j++) h->index[vnm_index_at(l, rb, g, j)] = -1;
                for (int64_t r = rb * l->v; r < rb * l->v + l->v; r++) put(h, r, g, 0, 1, 0, 0);
                continue;
            }
            b.g = g;
            b.c0 = g * l->m;
            b.width = l->cols - b.c0 < l->m ? l->cols - b.c0 : l->m;
            int sel[4];
            sj_status st = select_columns(&b, select, sel);
            if (st != SJ_OK) return st;
            if (h)
                for (int j = 0; j < 4; j++)
                    h->index[vnm_index_at(l, rb, g, j)] = sel[j] < b.width ? (int32_t)(b.c0 + sel[j]) : -1;
            for (int64_t r = rb * l->v; r < rb * l->v + l->v; r++) {
                if (r >= l->rows) {
                    if (h) put(h, r, g, 0, 1, 0, 0);
                    continue;
                }
                uint16_t v[4];
                int p0 = 0, p1 = 1;
                if ((st = select_pair(&b, select, r, sel, v, &p0, &p1)) != SJ_OK) return st;
                if (h) put(h, r, g, p0, p1, v[p0], v[p1]);
            }
        }
    }
    return SJ_OK;
}

static sj_status check_matrix_args(const sj_vnm_layout *l, const void *A, int64_t lda, const char *what)
{
    sj_status st = vnm_layout_check(l, what);
    if (st != SJ_OK) return st;
    if (!A) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: A is NULL", what);
    if (lda < l->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: lda = %lld is less than cols = %lld", what, (long long)lda,
                       (long long)l->cols);
    return SJ_OK;
}

sj_status sj_vnm_check(const sj_vnm_layout *l, const void *A, int64_t lda)
{
    sj_status st = check_matrix_args(l, A, lda, "sj_vnm_check");
    if (st != SJ_OK) return st;
    return walk(l, A, lda, SJ_VNM_EXACT, NULL);
}

void sj_vnm_host_free(sj_vnm_host *h)
{
    if (!h) return;
    free(h->values);
    free(h->meta);
    free(h->index);
    memset(h, 0, sizeof *h);
}

sj_status sj_vnm_compress(const sj_vnm_layout *l, const void *A, int64_t lda, sj_vnm_select select, sj_vnm_host *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_compress: out is NULL");
    memset(out, 0, sizeof *out);
    sj_status st = check_matrix_args(l, A, lda, "sj_vnm_compress");
    if (st != SJ_OK) return st;
    if (select != SJ_VNM_EXACT && select != SJ_VNM_PRUNE_L2 && select != SJ_VNM_PRUNE_L1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_compress: select = %d is not an sj_vnm_select", (int)select);
    out->layout = *l;
    out->values = malloc(l->values_bytes);
    out->meta = calloc(1, l->meta_bytes);
    out->index = malloc(l->index_bytes);
    if (!out->values || !out->meta || !out->index) {
        sj_vnm_host_free(out);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_vnm_compress: cannot allocate %zu bytes",
                       l->values_bytes + l->meta_bytes + l->index_bytes);
    }
    if ((st = walk(l, A, lda, select, out)) != SJ_OK) sj_vnm_host_free(out);
    return st;
}

/* Reads back (row, group): positions and values; fails on metadata mma.sp cannot take. */
static sj_status get(const sj_vnm_host *h, int64_t row, int64_t g, int *p0, int *p1, uint16_t *v0, uint16_t *v1)
{
    const sj_vnm_layout *l = &h->layout;
    int shift;
    size_t w = vnm_meta_at(l, row, g, &shift); /* sets shift: a statement of its own */
    uint32_t nib = (h->meta[w] >> shift) & 0xfu;
    *p0 = (int)(nib & 3u);
    *p1 = (int)(nib >> 2);
    if (*p0 >= *p1)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                       "sj_vnm_decompress: row %lld, group %lld: metadata 0x%x is not two ascending positions",
                       (long long)row, (long long)g, nib);
    *v0 = h->values[vnm_value_at(l, row, g, 0)];
    *v1 = h->values[vnm_value_at(l, row, g, 1)];
    return SJ_OK;
}

sj_status sj_vnm_decompress(const sj_vnm_host *h, void *A, int64_t lda)
{
    if (!h || !h->values || !h->meta || !h->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_decompress: h or its arrays are NULL");
    const sj_vnm_layout *l = &h->layout;
    sj_status st = check_matrix_args(l, A, lda, "sj_vnm_decompress");
    if (st != SJ_OK) return st;
    uint16_t *out = A;
    for (int64_t r = 0; r < l->rows; r++) memset(out + r * lda, 0, (size_t)l->cols * 2);
    for (int64_t rb = 0; rb < l->row_blocks; rb++) {
        for (int64_t g = 0; g < l->groups; g++) {
            int64_t c0 = g * l->m;
            int64_t end = c0 + l->m < l->cols ? c0 + l->m : l->cols;
            int32_t col[4];
            for (int j = 0; j < 4; j++) {
                col[j] = h->index[vnm_index_at(l, rb, g, j)];
                /* Ascending real columns of the group, then -1 for padding columns only. */
                int ok = col[j] == -1 ? end - c0 < 4
                                      : col[j] >= c0 && col[j] < end && (j == 0 || (col[j - 1] != -1 && col[j - 1] < col[j]));
                if (!ok)
                    return error_set(SJ_ERR_INVALID_ARGUMENT,
                                   "sj_vnm_decompress: row block %lld, group %lld: column index %d = %d is not an "
                                   "ascending column of %lld..%lld",
                                   (long long)rb, (long long)g, j, (int)col[j], (long long)c0,
                                   (long long)(c0 + l->m - 1));
            }
            for (int64_t r = rb * l->v; r < rb * l->v + l->v && r < l->rows; r++) {
                int p[2] = { 0, 1 };
                uint16_t v[2] = { 0, 0 };
                if ((st = get(h, r, g, &p[0], &p[1], &v[0], &v[1])) != SJ_OK) return st;
                for (int k = 0; k < 2; k++) {
                    if (col[p[k]] >= 0) out[r * lda + col[p[k]]] = v[k];
                    else if (!is_zero(v[k]))
                        return error_set(SJ_ERR_INVALID_ARGUMENT,
                                       "sj_vnm_decompress: row %lld, group %lld: a non-zero value in a padding column",
                                       (long long)r, (long long)g);
                }
            }
        }
    }
    return SJ_OK;
}
