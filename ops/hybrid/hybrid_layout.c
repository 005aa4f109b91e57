/* hybrid_layout.c: the hybrid format's layout: the parameters' ranges and the byte size of each
 * array (sj_hybrid_layout_init), and the check that a layout handed in is one it filled. */
#include "core/error.h"
#include "ops/hybrid/hybrid_format.h"

#include <string.h>

sj_status sj_hybrid_layout_init(sj_hybrid_layout *l, sj_dtype dtype, int64_t rows, int64_t cols, int width,
                                int64_t backup_rows)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_layout_init: layout is NULL");
    memset(l, 0, sizeof *l);
    if (dtype != SJ_DTYPE_F16 && dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid dtype %d: expected f16 or bf16", (int)dtype);
    if (rows < 1 || rows > ((int64_t)1 << 30))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid rows = %lld: expected 1..2^30", (long long)rows);
    if (cols < 1 || cols > HYBRID_MAX_COLS)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid cols = %lld: expected 1..%d (16-bit column indices)",
                         (long long)cols, HYBRID_MAX_COLS);
    if (width < 1 || width > cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid width W = %d: expected 1..cols (cols = %lld)", width,
                         (long long)cols);
    if (backup_rows < 0 || backup_rows > rows)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid backup_rows = %lld: expected 0..rows (rows = %lld)",
                         (long long)backup_rows, (long long)rows);
    l->dtype = dtype;
    l->rows = rows;
    l->cols = cols;
    l->width = width;
    l->backup_rows = backup_rows;
    /* rows <= 2^30, W and cols <= 2^16: no product below overflows 64 bits */
    size_t slots = (size_t)rows * (size_t)width, backup = (size_t)backup_rows * (size_t)cols;
    l->values_bytes = slots * sizeof(uint16_t);
    l->columns_bytes = slots * sizeof(uint16_t);
    l->nnz_bytes = (size_t)rows * sizeof(int32_t);
    l->slot_bytes = (size_t)rows * sizeof(int32_t);
    l->owner_bytes = (size_t)backup_rows * sizeof(int32_t);
    l->backup_bytes = backup * sizeof(uint16_t);
    l->counter_bytes = sizeof(int32_t);
    l->total_bytes = l->values_bytes + l->columns_bytes + l->nnz_bytes + l->slot_bytes + l->owner_bytes +
                     l->backup_bytes + l->counter_bytes;
    return SJ_OK;
}

sj_status hybrid_layout_check(const sj_hybrid_layout *l, const char *what)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout is NULL", what);
    sj_hybrid_layout ref;
    if (sj_hybrid_layout_init(&ref, l->dtype, l->rows, l->cols, l->width, l->backup_rows) != SJ_OK)
        return error_prefix(SJ_ERR_INVALID_ARGUMENT, "%s", what);
    /* field by field: a copied struct need not carry the padding memset cleared */
    if (ref.values_bytes != l->values_bytes || ref.columns_bytes != l->columns_bytes || ref.nnz_bytes != l->nnz_bytes ||
        ref.slot_bytes != l->slot_bytes || ref.owner_bytes != l->owner_bytes || ref.backup_bytes != l->backup_bytes ||
        ref.counter_bytes != l->counter_bytes || ref.total_bytes != l->total_bytes)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: layout was not filled by sj_hybrid_layout_init", what);
    return SJ_OK;
}
