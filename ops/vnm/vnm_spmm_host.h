/* vnm_spmm_host.h: the fp64 host reference of vnm-spmm with its optional low-rank term
 * (vnm_spmm_host.c). */
#ifndef SJ_OPS_VNM_SPMM_HOST_H
#define SJ_OPS_VNM_SPMM_HOST_H

#include <stdint.h>
#include "sparsejit.h"

/* C = A . B + U . Z in fp64, C rows x n row-major: B cols x n, U rows x rank and Z rank x n,
 * row-major 16-bit values of A's dtype; rank 0: no low-rank term (U and Z unread, may be NULL). */
sj_status vnm_spmm_host(const sj_vnm_host *A, const uint16_t *B, int64_t n, int rank, const uint16_t *U,
                        const uint16_t *Z, double *C);

#endif
