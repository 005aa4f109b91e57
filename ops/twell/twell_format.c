/* twell_format.c: the TwELL layout, the host conversion dense <-> TwELL with its overflow rule
 * (a tile of more than C non-zeros keeps its true count and goes whole into the spill), the
 * consistency checks of the reverse conversion, device buffers and the two problems. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/twell/twell_format.h"

#include <stdlib.h>
#include <string.h>

static int mul_size(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out); }

sj_status sj_twell_layout_init(sj_twell_layout *l, sj_dtype dtype, int64_t rows, int64_t cols, int tile,
                               int capacity)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_layout_init: layout is NULL");
    memset(l, 0, sizeof *l);
    if (dtype != SJ_DTYPE_F16 && dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL dtype %d: expected f16 or bf16", (int)dtype);
    if (rows <= 0 || cols <= 0)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL shape %lld x %lld: rows and cols must be > 0",
                       (long long)rows, (long long)cols);
    if (rows > ((int64_t)1 << 30) || cols > ((int64_t)1 << 30))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL shape %lld x %lld: each dimension must be <= 2^30",
                       (long long)rows, (long long)cols);
    if (tile < 1 || tile > SJ_TWELL_MAX_TILE)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL tile T = %d: expected 1..%d", tile, SJ_TWELL_MAX_TILE);
    if (capacity < 1 || capacity > tile)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL capacity C = %d: expected 1..T (T = %d)", capacity, tile);
    l->dtype = dtype;
    l->rows = rows;
    l->cols = cols;
    l->tile = tile;
    l->capacity = capacity;
    l->n_tiles = (cols + tile - 1) / tile;
    size_t cells, slots, spill;
    if (mul_size((size_t)rows, (size_t)l->n_tiles, &cells) || mul_size(cells, (size_t)capacity, &slots) ||
        mul_size(slots, sizeof(uint32_t), &l->entries_bytes) || mul_size(cells, sizeof(int32_t), &l->counts_bytes) ||
        mul_size((size_t)rows, (size_t)cols, &spill) || mul_size(spill, sizeof(uint16_t), &l->spill_bytes))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL %lld x %lld with T = %d, C = %d: sizes overflow",
                       (long long)rows, (long long)cols, tile, capacity);
    return SJ_OK;
}

static sj_status check_layout(const sj_twell_layout *l, const char *what)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout is NULL", what);
    sj_twell_layout ref;
    if (sj_twell_layout_init(&ref, l->dtype, l->rows, l->cols, l->tile, l->capacity) != SJ_OK)
        return error_prefix(SJ_ERR_INVALID_ARGUMENT, "%s", what);
    if (ref.n_tiles != l->n_tiles || ref.entries_bytes != l->entries_bytes || ref.counts_bytes != l->counts_bytes ||
        ref.spill_bytes != l->spill_bytes)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout was not filled by sj_twell_layout_init", what);
    return SJ_OK;
}

void sj_twell_host_free(sj_twell_host *h)
{
    if (!h) return;
    free(h->entries);
    free(h->counts);
    free(h->spill);
    memset(h, 0, sizeof *h);
}

static sj_status host_alloc(const sj_twell_layout *l, sj_twell_host *out)
{
    memset(out, 0, sizeof *out);
    out->layout = *l;
    out->entries = calloc(1, l->entries_bytes);
    out->counts = calloc(1, l->counts_bytes);
    out->spill = calloc(1, l->spill_bytes);
    if (!out->entries || !out->counts || !out->spill) {
        sj_twell_host_free(out);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "TwELL host arrays: out of memory (%zu + %zu + %zu bytes)",
                       l->entries_bytes, l->counts_bytes, l->spill_bytes);
    }
    return SJ_OK;
}

sj_status sj_twell_from_dense(const sj_twell_layout *l, const void *H, int64_t ld, sj_twell_host *out,
                              int64_t *n_overflow)
{
    sj_status st = check_layout(l, "sj_twell_from_dense");
    if (st != SJ_OK) return st;
    if (!H || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_from_dense: H and out must not be NULL");
    if (ld < l->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_from_dense: ld = %lld is less than cols = %lld",
                       (long long)ld, (long long)l->cols);
    if ((st = host_alloc(l, out)) != SJ_OK) return st;
    const uint16_t *src = H;
    int64_t overflow = 0;
    for (int64_t r = 0; r < l->rows; r++) {
        const uint16_t *row = src + r * ld;
        for (int64_t t = 0; t < l->n_tiles; t++) {
            const uint16_t *tv = row + t * l->tile;
            int width = twell_tile_width(l, t), count = 0;
            uint32_t *slots = out->entries + twell_slot_at(l, r, t);
            for (int c = 0; c < width; c++) {
                if (!twell_nonzero(tv[c])) continue;
                if (count < l->capacity) slots[count] = twell_entry(c, tv[c]);
                count++;
            }
            out->counts[twell_count_at(l, r, t)] = count;
            if (count > l->capacity) {
                /* Overflow: the whole tile goes to the spill, so nothing is lost. */
                uint16_t *sp = out->spill + r * l->cols + t * l->tile;
                for (int c = 0; c < width; c++) sp[c] = twell_nonzero(tv[c]) ? tv[c] : 0;
                overflow++;
            }
        }
    }
    if (n_overflow) *n_overflow = overflow;
    return SJ_OK;
}

static sj_status check_host(const sj_twell_host *h, const char *what)
{
    if (!h) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: h is NULL", what);
    sj_status st = check_layout(&h->layout, what);
    if (st != SJ_OK) return st;
    if (!h->entries || !h->counts || !h->spill)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: h has a NULL array (entries, counts or spill)", what);
    return SJ_OK;
}

/* Checks one tile and writes it into dst (width values). */
static sj_status tile_to_dense(const sj_twell_host *h, int64_t r, int64_t t, uint16_t *dst)
{
    const sj_twell_layout *l = &h->layout;
    int width = twell_tile_width(l, t);
    int32_t count = h->counts[twell_count_at(l, r, t)];
    const uint32_t *slots = h->entries + twell_slot_at(l, r, t);
    if (count < 0 || count > width)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL row %lld tile %lld: count %d outside 0..%d", (long long)r,
                       (long long)t, count, width);
    int kept = count < l->capacity ? count : l->capacity, prev = -1;
    for (int i = 0; i < kept; i++) {
        int c = twell_entry_col(slots[i]);
        if (c >= width)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL row %lld tile %lld entry %d: column %d outside the tile's %d",
                           (long long)r, (long long)t, i, c, width);
        if (c <= prev)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL row %lld tile %lld entry %d: column %d not after %d",
                           (long long)r, (long long)t, i, c, prev);
        if (!twell_nonzero(twell_entry_bits(slots[i])))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL row %lld tile %lld entry %d: stored value is zero",
                           (long long)r, (long long)t, i);
        prev = c;
    }
    memset(dst, 0, (size_t)width * sizeof *dst);
    if (count <= l->capacity) {
        for (int i = 0; i < kept; i++) dst[twell_entry_col(slots[i])] = twell_entry_bits(slots[i]);
        return SJ_OK;
    }
    /* Overflowing tile: the spill is the truth; the entries must be its first C non-zeros. */
    const uint16_t *sp = h->spill + r * l->cols + t * l->tile;
    int nz = 0;
    for (int c = 0; c < width; c++) {
        if (!twell_nonzero(sp[c])) continue;
        if (nz < kept && (twell_entry_col(slots[nz]) != c || twell_entry_bits(slots[nz]) != sp[c]))
            return error_set(SJ_ERR_INVALID_ARGUMENT,
                           "TwELL row %lld tile %lld: entry %d is not the spill's non-zero %d (column %d)",
                           (long long)r, (long long)t, nz, nz, c);
        dst[c] = sp[c];
        nz++;
    }
    if (nz != count)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "TwELL row %lld tile %lld: count %d but the spill holds %d non-zeros",
                       (long long)r, (long long)t, count, nz);
    return SJ_OK;
}

sj_status sj_twell_to_dense(const sj_twell_host *h, void *H, int64_t ld)
{
    sj_status st = check_host(h, "sj_twell_to_dense");
    if (st != SJ_OK) return st;
    const sj_twell_layout *l = &h->layout;
    if (!H) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_to_dense: H is NULL");
    if (ld < l->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_to_dense: ld = %lld is less than cols = %lld",
                       (long long)ld, (long long)l->cols);
    uint16_t *dst = H;
    for (int64_t r = 0; r < l->rows; r++)
        for (int64_t t = 0; t < l->n_tiles; t++)
            if ((st = tile_to_dense(h, r, t, dst + r * ld + t * l->tile)) != SJ_OK) return st;
    return SJ_OK;
}

int64_t sj_twell_overflow_tiles(const sj_twell_host *h)
{
    if (!h || !h->counts) return 0;
    int64_t n = 0, cells = h->layout.rows * h->layout.n_tiles;
    for (int64_t i = 0; i < cells; i++) n += h->counts[i] > h->layout.capacity;
    return n;
}

sj_status sj_twell_device_alloc(sj_context *ctx, const sj_twell_layout *l, sj_twell_device *out)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_device_alloc: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_device_alloc: ctx is NULL");
    sj_status st = check_layout(l, "sj_twell_device_alloc");
    if (st != SJ_OK) return st;
    out->layout = *l;
    if ((st = sj_malloc(ctx, l->entries_bytes, &out->entries)) != SJ_OK ||
        (st = sj_malloc(ctx, l->counts_bytes, &out->counts)) != SJ_OK ||
        (st = sj_malloc(ctx, l->spill_bytes, &out->spill)) != SJ_OK) {
        sj_twell_device_free(ctx, out);
        return error_prefix(st, "allocating a TwELL matrix");
    }
    return SJ_OK;
}

sj_status sj_twell_upload(sj_context *ctx, const sj_twell_host *h, sj_twell_device *out)
{
    RT_USE_CONTEXT(ctx);
    sj_status st = check_host(h, "sj_twell_upload");
    if (st != SJ_OK) return st;
    if ((st = sj_twell_device_alloc(ctx, &h->layout, out)) != SJ_OK) return st;
    const sj_twell_layout *l = &h->layout;
    if ((st = sj_memcpy_htod(ctx, out->entries, h->entries, l->entries_bytes)) != SJ_OK ||
        (st = sj_memcpy_htod(ctx, out->counts, h->counts, l->counts_bytes)) != SJ_OK ||
        (st = sj_memcpy_htod(ctx, out->spill, h->spill, l->spill_bytes)) != SJ_OK) {
        sj_twell_device_free(ctx, out);
        return st;
    }
    return SJ_OK;
}

sj_status sj_twell_download(sj_context *ctx, const sj_twell_device *d, sj_twell_host *out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !d || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_download: ctx, d and out must not be NULL");
    sj_status st = check_layout(&d->layout, "sj_twell_download");
    if (st != SJ_OK) return st;
    if ((st = host_alloc(&d->layout, out)) != SJ_OK) return st;
    const sj_twell_layout *l = &d->layout;
    if ((st = sj_memcpy_dtoh(ctx, out->entries, d->entries, l->entries_bytes)) != SJ_OK ||
        (st = sj_memcpy_dtoh(ctx, out->counts, d->counts, l->counts_bytes)) != SJ_OK ||
        (st = sj_memcpy_dtoh(ctx, out->spill, d->spill, l->spill_bytes)) != SJ_OK) {
        sj_twell_host_free(out);
        return st;
    }
    return SJ_OK;
}

sj_status sj_twell_device_free(sj_context *ctx, sj_twell_device *d)
{
    RT_USE_CONTEXT(ctx);
    if (!d) return SJ_OK;
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_device_free: ctx is NULL");
    sj_status st = SJ_OK, s;
    sj_devptr *ptrs[] = { &d->entries, &d->counts, &d->spill };
    for (int i = 0; i < 3; i++) {
        if (*ptrs[i] && (s = sj_free(ctx, *ptrs[i])) != SJ_OK && st == SJ_OK) st = s;
        *ptrs[i] = 0;
    }
    return st;
}

sj_status sj_twell_gate_problem(const sj_twell_layout *l, int64_t d_model, sj_problem *out)
{
    sj_status st = check_layout(l, "sj_twell_gate_problem");
    if (st != SJ_OK) return st;
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_gate_problem: out is NULL");
    sj_problem_init(out, SJ_OP_TWELL_GATE, l->dtype, l->rows, l->cols, d_model);
    out->twell_tile = l->tile;
    out->twell_capacity = l->capacity;
    return sj_problem_validate(out);
}

sj_status sj_twell_ffn_problem(const sj_twell_layout *l, int64_t d_model, sj_dtype out_dtype, sj_problem *out)
{
    sj_status st = check_layout(l, "sj_twell_ffn_problem");
    if (st != SJ_OK) return st;
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_twell_ffn_problem: out is NULL");
    sj_problem_init(out, SJ_OP_TWELL_FFN, l->dtype, l->rows, d_model, d_model);
    out->out_dtype = out_dtype;
    out->twell_tile = l->tile;
    out->twell_capacity = l->capacity;
    out->d_ff = l->cols;
    return sj_problem_validate(out);
}

sj_status twell_check_device(const sj_twell_device *H, const sj_problem *p, const char *what)
{
    if (!H) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: H is NULL", what);
    sj_status st = check_layout(&H->layout, what);
    if (st != SJ_OK) return st;
    const sj_twell_layout *l = &H->layout;
    int64_t cols = p->op == SJ_OP_TWELL_FFN ? p->d_ff : p->n;
    if (l->rows != p->m || l->cols != cols || l->tile != p->twell_tile || l->capacity != p->twell_capacity ||
        l->dtype != p->dtype)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                       "%s: H is %s %lld x %lld T=%d C=%d, the problem expects %s %lld x %lld T=%d C=%d", what,
                       sj_dtype_name(l->dtype), (long long)l->rows, (long long)l->cols, l->tile, l->capacity,
                       sj_dtype_name(p->dtype), (long long)p->m, (long long)cols, p->twell_tile, p->twell_capacity);
    const struct { const char *name; sj_devptr p; } ptrs[] = {
        { "H.entries", H->entries }, { "H.counts", H->counts }, { "H.spill", H->spill } };
    for (int i = 0; i < 3; i++)
        if ((st = rt_check_ptr(ptrs[i].name, ptrs[i].p, 16)) != SJ_OK) return st;
    return SJ_OK;
}
