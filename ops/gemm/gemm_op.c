/* gemm_op.c: the descriptor of the dense GEMM (C = A.B, row-major): no sparsity parameters, one
 * template, tuned like every kernel op. The reference the other ops are checked against. */
#include "core/op.h"
#include "ops/gemm/gemm.h"

static void example(sj_problem *p) { sj_problem_init(p, SJ_OP_GEMM, SJ_DTYPE_F16, 256, 256, 256); }

/* ldmatrix + mma.sync fed by cp.async, on every target. */
static const op_variant variants[] = {
    { .name = "mma-sync", .arch = "sm_80", .sass = "HMMA.16816.F32,LDSM.16.M88.4,LDGSTS" },
};

const op_desc op_gemm = {
    .op = SJ_OP_GEMM,
    .name = "gemm",
    .template_name = "gemm_dense",
    .reads = 0,
    .n_args = 6,
    .tunable = 1,
    .harness = &harness_gemm,
    .baseline_help = "the same GEMM",
    .example = example,
    .variants = variants,
    .n_variants = sizeof variants / sizeof *variants,
};
