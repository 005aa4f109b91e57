/* vnm_spmm_host.c: the host reference of vnm-spmm, C = A . B + U . Z (the low-rank term of
 * SLoPe's adapters, rank 0 without one), in fp64 from A's compressed form: it walks the kept
 * slots (each value v = A[r][c] adds v * B[c][:] to C[r][:], rows and groups in order) rather
 * than a dense A, so it shares neither the decompressor nor the kernel's tiling, then adds the
 * rank terms U[r][j] * Z[j][:] per row. The GPU tests compare the device product with it. */
#include "ops/vnm/vnm_spmm_host.h"
#include "ops/vnm/vnm_format.h"
#include "core/error.h"
#include "tuner/harness.h"

#include <string.h>

sj_status vnm_spmm_host(const sj_vnm_host *A, const uint16_t *B, int64_t n, int rank, const uint16_t *U,
                        const uint16_t *Z, double *C)
{
    if (!A || !A->values || !A->meta || !A->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_spmm_host: A or its arrays are NULL");
    const sj_vnm_layout *l = &A->layout;
    sj_status st = vnm_layout_check(l, "vnm_spmm_host");
    if (st != SJ_OK) return st;
    if (!B || !C) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_spmm_host: B or C is NULL");
    if (n < 1) return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_spmm_host: n = %lld: expected >= 1", (long long)n);
    if (rank < 0 || (rank && (!U || !Z)))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "vnm_spmm_host: rank = %d needs U and Z (rank 0: none)", rank);
    const sj_dtype dt = l->dtype;
    memset(C, 0, (size_t)(l->rows * n) * sizeof *C);
    for (int64_t r = 0; r < l->rows; r++) {
        double *c = C + r * n;
        for (int64_t g = 0; g < l->groups; g++)
            for (int h = 0; h < 2; h++) {
                int32_t col = vnm_slot_column(l, A->meta, A->index, r, g, h);
                double v = harness_16_to_f64(dt, A->values[vnm_value_at(l, r, g, h)]);
                if (col < 0 || v == 0.0) continue;
                const uint16_t *b = B + (int64_t)col * n;
                for (int64_t j = 0; j < n; j++) c[j] += v * harness_16_to_f64(dt, b[j]);
            }
        for (int q = 0; q < rank; q++) {
            double u = harness_16_to_f64(dt, U[r * rank + q]);
            const uint16_t *z = Z + (int64_t)q * n;
            for (int64_t j = 0; j < n; j++) c[j] += u * harness_16_to_f64(dt, z[j]);
        }
    }
    return SJ_OK;
}
