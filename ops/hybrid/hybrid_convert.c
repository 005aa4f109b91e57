/* hybrid_convert.c: the host conversions dense <-> hybrid with the row partition rule (a row of
 * at most W non-zeros lives in the ELL only; a row of more keeps its first W in the ELL and the
 * rest in a backup row, and the backup grows so that no row is dropped), the consistency checks
 * of the reverse conversion, and the report of where the rows went. */
#include "core/error.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdlib.h>
#include <string.h>

void sj_hybrid_host_free(sj_hybrid_host *h)
{
    if (!h) return;
    free(h->values);
    free(h->columns);
    free(h->nnz);
    free(h->slot);
    free(h->owner);
    free(h->backup);
    memset(h, 0, sizeof *h);
}

sj_status hybrid_host_alloc(const sj_hybrid_layout *l, sj_hybrid_host *out)
{
    memset(out, 0, sizeof *out);
    out->layout = *l;
    out->values = calloc(1, l->values_bytes);
    out->columns = calloc(1, l->columns_bytes);
    out->nnz = calloc(1, l->nnz_bytes);
    out->slot = calloc(1, l->slot_bytes);
    out->owner = calloc(1, l->owner_bytes ? l->owner_bytes : 1);
    out->backup = calloc(1, l->backup_bytes ? l->backup_bytes : 1);
    if (!out->values || !out->columns || !out->nnz || !out->slot || !out->owner || !out->backup) {
        sj_hybrid_host_free(out);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "hybrid host arrays: out of memory (%zu bytes)", l->total_bytes);
    }
    return SJ_OK;
}

sj_status sj_hybrid_from_dense(const sj_hybrid_layout *layout, const void *H, int64_t ld, sj_hybrid_host *out,
                               sj_hybrid_report *report)
{
    sj_status st = hybrid_layout_check(layout, "sj_hybrid_from_dense");
    if (st != SJ_OK) return st;
    if (!H || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_from_dense: H and out must not be NULL");
    if (ld < layout->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_from_dense: ld = %lld is less than cols = %lld",
                         (long long)ld, (long long)layout->cols);
    const uint16_t *src = H;
    const int64_t rows = layout->rows, cols = layout->cols, W = layout->width;
    /* The partition first: the backup grows to every overflow row before anything is written. */
    int64_t overflow = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t nz = 0;
        for (int64_t c = 0; c < cols; c++) nz += hybrid_nonzero(src[r * ld + c]);
        overflow += nz > W;
    }
    sj_hybrid_layout l = *layout;
    if (overflow > l.backup_rows &&
        (st = sj_hybrid_layout_init(&l, l.dtype, rows, cols, l.width, overflow)) != SJ_OK)
        return st;
    if ((st = hybrid_host_alloc(&l, out)) != SJ_OK) return st;
    int32_t next = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *row = src + r * ld;
        uint16_t *vals = out->values + hybrid_ell_at(&l, r), *colidx = out->columns + hybrid_ell_at(&l, r);
        uint16_t *spill = NULL;
        int32_t nz = 0;
        out->slot[r] = -1;
        for (int64_t c = 0; c < cols; c++) {
            if (!hybrid_nonzero(row[c])) continue;
            if (nz < W) {
                vals[nz] = row[c];
                colidx[nz] = (uint16_t)c;
            } else {
                if (!spill) {
                    out->slot[r] = next;
                    out->owner[next] = (int32_t)r;
                    spill = out->backup + (size_t)next++ * (size_t)cols;
                }
                spill[c] = row[c];
            }
            nz++;
        }
        out->nnz[r] = nz;
    }
    out->counter = next;
    return report ? sj_hybrid_report_host(out, report) : SJ_OK;
}

static sj_status check_host(const sj_hybrid_host *h, const char *what)
{
    if (!h) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: h is NULL", what);
    sj_status st = hybrid_layout_check(&h->layout, what);
    if (st != SJ_OK) return st;
    if (!h->values || !h->columns || !h->nnz || !h->slot || (h->layout.backup_rows && (!h->owner || !h->backup)))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: h has a NULL array", what);
    return SJ_OK;
}

sj_status sj_hybrid_report_host(const sj_hybrid_host *h, sj_hybrid_report *report)
{
    sj_status st = check_host(h, "sj_hybrid_report_host");
    if (st != SJ_OK) return st;
    if (!report) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_report_host: report is NULL");
    memset(report, 0, sizeof *report);
    const int64_t W = h->layout.width;
    for (int64_t r = 0; r < h->layout.rows; r++) {
        int64_t nz = h->nnz[r];
        report->nnz += nz;
        report->nnz_ell += nz < W ? nz : W;
        if (nz <= W) report->rows_ell++;
        else if (h->slot[r] >= 0 && h->slot[r] < h->layout.backup_rows) report->rows_backup++, report->nnz_backup += nz - W;
        else report->rows_unplaced++;
    }
    report->backup_needed = report->rows_backup + report->rows_unplaced;
    return SJ_OK;
}

/* Checks row r and writes it into dst (cols values); mark is a cols-long scratch of row tags. */
static sj_status row_to_dense(const sj_hybrid_host *h, int64_t r, uint16_t *dst, int64_t *mark)
{
    const sj_hybrid_layout *l = &h->layout;
    const int64_t cols = l->cols, W = l->width;
    const int32_t nz = h->nnz[r], slot = h->slot[r];
    if (nz < 0 || nz > cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld: nnz %d outside 0..%lld", (long long)r, nz,
                         (long long)cols);
    if (nz > W && (slot < 0 || slot >= l->backup_rows))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "hybrid row %lld: %d non-zeros overflow W = %lld but the row has no backup slot (unplaced: "
                         "the backup of %lld rows was full; the counter says %d rows overflowed)",
                         (long long)r, nz, (long long)W, (long long)l->backup_rows, h->counter);
    if (nz <= W && slot != -1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld: nnz %d fits W = %lld but slot is %d, not -1",
                         (long long)r, nz, (long long)W, slot);
    if (nz > W && h->owner[slot] != r)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld: slot %d is not a backup row it owns (backup_rows %lld)",
                         (long long)r, slot, (long long)l->backup_rows);
    memset(dst, 0, (size_t)cols * sizeof *dst);
    const int64_t kept = nz < W ? nz : W;
    const uint16_t *vals = h->values + hybrid_ell_at(l, r), *colidx = h->columns + hybrid_ell_at(l, r);
    for (int64_t i = 0; i < kept; i++) {
        if (colidx[i] >= cols)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld entry %lld: column %d past cols = %lld",
                             (long long)r, (long long)i, colidx[i], (long long)cols);
        if (mark[colidx[i]] == r)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld entry %lld: column %d appears twice", (long long)r,
                             (long long)i, colidx[i]);
        if (!hybrid_nonzero(vals[i]))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld entry %lld: stored value is zero", (long long)r,
                             (long long)i);
        mark[colidx[i]] = r;
        dst[colidx[i]] = vals[i];
    }
    if (nz <= W) return SJ_OK;
    const uint16_t *spill = h->backup + (size_t)slot * (size_t)cols;
    int64_t rest = 0;
    for (int64_t c = 0; c < cols; c++) {
        if (!hybrid_nonzero(spill[c])) continue;
        if (mark[c] == r)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid row %lld: backup row %d holds column %lld, an ELL column",
                             (long long)r, slot, (long long)c);
        dst[c] = spill[c];
        rest++;
    }
    if (rest != nz - W)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "hybrid row %lld: nnz %d but backup row %d holds %lld non-zeros, not nnz - W = %lld",
                         (long long)r, nz, slot, (long long)rest, (long long)(nz - W));
    return SJ_OK;
}

sj_status sj_hybrid_to_dense(const sj_hybrid_host *h, void *H, int64_t ld)
{
    sj_status st = check_host(h, "sj_hybrid_to_dense");
    if (st != SJ_OK) return st;
    const sj_hybrid_layout *l = &h->layout;
    if (!H) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_to_dense: H is NULL");
    if (ld < l->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_to_dense: ld = %lld is less than cols = %lld", (long long)ld,
                         (long long)l->cols);
    int64_t *mark = malloc(sizeof *mark * (size_t)l->cols);
    if (!mark) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_hybrid_to_dense: out of memory");
    for (int64_t c = 0; c < l->cols; c++) mark[c] = -1;
    uint16_t *dst = H;
    for (int64_t r = 0; r < l->rows && st == SJ_OK; r++) st = row_to_dense(h, r, dst + r * ld, mark);
    free(mark);
    return st;
}
