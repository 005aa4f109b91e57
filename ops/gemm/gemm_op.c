/* gemm_op.c: the descriptor of the dense GEMM (C = A.B, row-major): no sparsity parameters, one
 * template, tuned like every kernel op. The reference the other ops are checked against. */
#include "core/op.h"
#include "ops/gemm/gemm.h"

const op_desc op_gemm = {
    .op = SJ_OP_GEMM,
    .name = "gemm",
    .template_name = "gemm_dense",
    .reads = 0,
    .tunable = 1,
    .harness = &harness_gemm,
    .bench = &bench_op_gemm,
};
