/* vnm_double_prune.c: double pruning (SLoPe) on the host, the reference of the device path
 * (vnm-transpose + vnm-compress): from a V:N:M W (out x in) the second copy WT2 of W^T (in x out),
 * pruned again to the same V:N:M along its own rows, which dX = W^T . dY runs on.
 *
 * The rule (also in sparsejit.h and docs/training.md): WT2 = sj_vnm_compress(D^T, SJ_VNM_PRUNE_L2)
 * where D is the dense matrix W stands for (zeros where W prunes). So, per block of V rows of W^T
 * (V columns of W) and M columns of W^T (M rows of W):
 *   1. the 4 columns of largest sum of squares over the block's rows (fp64, summed in row
 *      order); ties: the lower column; real columns (even all zero) before padding columns;
 *   2. per row, of those 4, the 2 of largest |value| (compared as 16-bit magnitudes); ties: the
 *      lower position; a row with fewer than 2 non-zeros there keeps zeros in its free slots.
 * Every value of WT2 is W's value at the transposed place and WT2's non-zeros are a subset of
 * W^T's: double pruning drops values, it never moves or rescales one. The same magnitude rule as
 * the forward copy's pruning is used on purpose: one rule, one device compressor, and the
 * device path (dense W^T on the device, then the existing compressor) is byte-identical to this. */
#include "ops/vnm/vnm_format.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

sj_status sj_vnm_transpose_layout(const sj_vnm_layout *W, sj_vnm_layout *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_transpose_layout: out is NULL");
    sj_status st = vnm_layout_check(W, "sj_vnm_transpose_layout");
    if (st != SJ_OK) return st;
    return sj_vnm_layout_init(out, W->dtype, W->v, W->n, W->m, W->cols, W->rows);
}

sj_status sj_vnm_double_prune_host(const sj_vnm_host *W, sj_vnm_host *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_double_prune_host: out is NULL");
    memset(out, 0, sizeof *out);
    if (!W || !W->values || !W->meta || !W->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_double_prune_host: W or its arrays are NULL");
    sj_vnm_layout lt;
    sj_status st = sj_vnm_transpose_layout(&W->layout, &lt);
    if (st != SJ_OK) return error_prefix(st, "sj_vnm_double_prune_host");
    const int64_t rows = W->layout.rows, cols = W->layout.cols;
    uint16_t *D = malloc((size_t)(rows * cols) * 2), *T = malloc((size_t)(rows * cols) * 2);
    if (!D || !T) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "sj_vnm_double_prune_host: cannot allocate 2 x %lld x %lld values",
                       (long long)rows, (long long)cols);
        goto done;
    }
    if ((st = sj_vnm_decompress(W, D, cols)) != SJ_OK) goto done;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) T[c * rows + r] = D[r * cols + c];
    st = sj_vnm_compress(&lt, T, rows, SJ_VNM_PRUNE_L2, out);
done:
    free(D);
    free(T);
    return st;
}
