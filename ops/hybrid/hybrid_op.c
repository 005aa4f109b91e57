/* hybrid_op.c: the descriptors of the hybrid family: hybrid-gate (H = relu(X . Wg) written in the
 * hybrid format by the gate's epilogue), hybrid-ffn-fwd (u at H's active pairs, Y),
 * hybrid-ffn-dx (dh, dg, du at H's active pairs, dX), hybrid-ffn-dw (the three weight gradients
 * from the per-pair values) and hybrid-transpose (the per-unit token lists hybrid-ffn-dw reads,
 * and its busy units' selection, scatter and copy; one kernel per stage; a problem of the gate's
 * shape). Their problems are TwELL problems whose one
 * tile spans the row: twell_tile = d_ff, twell_capacity = W, the ELL width; they read the
 * activations' law (sparsity, skew), which the cache key carries since timings depend on it. The
 * FFN ops take d_ff in problem.d_ff and d_model in n = k, as twell-ffn does. */
#include "core/error.h"
#include "core/op.h"
#include "core/problem.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"
#include "ops/twell/twell.h"

#include <stdio.h>

/* The checks of a hybrid matrix of d_ff columns (named field) and of the activations' law. */
static sj_status validate_rows(const sj_problem *p, int64_t d_ff, const char *field)
{
    if (d_ff < 1 || d_ff > HYBRID_MAX_COLS)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.%s (d_ff) = %lld: %s takes 1..%d (16-bit columns)", field,
                         (long long)d_ff, sj_op_name(p->op), HYBRID_MAX_COLS);
    if (p->twell_tile != d_ff)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_tile = %d: %s needs it equal to %s = %lld (a row is one tile)",
                         p->twell_tile, sj_op_name(p->op), field, (long long)d_ff);
    if (p->twell_capacity < 1 || p->twell_capacity > d_ff)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_capacity (the ELL width W) = %d: expected 1..%s (%lld)",
                         p->twell_capacity, field, (long long)d_ff);
    if (!(p->twell_sparsity >= 0 && p->twell_sparsity < 1))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_sparsity = %g: expected a fraction of zeros in [0, 1) (0: unspecified)", p->twell_sparsity);
    if (!(p->twell_skew >= 0 && p->twell_skew <= SJ_TWELL_MAX_SKEW) || (p->twell_skew > 0 && !(p->twell_sparsity >= 0.5)))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_skew = %g: expected 0 .. %g, and > 0 only with problem.twell_sparsity >= 0.5 (it is %g)",
                         p->twell_skew, SJ_TWELL_MAX_SKEW, p->twell_sparsity);
    return twell_check_dead(p);
}

static sj_status validate(const sj_problem *p) { return validate_rows(p, p->n, "n"); }

static sj_status validate_ffn(const sj_problem *p)
{
    sj_status st = validate_rows(p, p->d_ff, "d_ff");
    if (st != SJ_OK) return st;
    if (p->n != p->k || p->n % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.n = %lld, k = %lld: %s needs both d_model, a multiple of 8",
                         (long long)p->n, (long long)p->k, sj_op_name(p->op));
    return SJ_OK;
}

static void key_text(const sj_problem *p, char *buf, size_t len)
{
    char skew[24] = "", dead[24];
    if (p->twell_skew > 0) snprintf(skew, sizeof skew, ",A=%.4g", p->twell_skew);
    twell_dead_key(p, dead, sizeof dead);
    if (p->twell_sparsity > 0)
        snprintf(buf, len, "W=%d,S=%.4g%s%s", p->twell_capacity, p->twell_sparsity, skew, dead);
    else
        snprintf(buf, len, "W=%d", p->twell_capacity);
}

static void key_text_ffn(const sj_problem *p, char *buf, size_t len)
{
    char law[64];
    key_text(p, law, sizeof law);
    snprintf(buf, len, "%s,DFF=%lld", law, (long long)p->d_ff);
}

/* W = 128 (the public implementation's width) or the row when narrower, 99% zeros. */
static void fill_rows(sj_problem *p, int64_t d_ff)
{
    if (!p->twell_tile) p->twell_tile = (int)(d_ff < HYBRID_MAX_COLS ? d_ff : HYBRID_MAX_COLS);
    if (!p->twell_capacity) p->twell_capacity = d_ff < 128 ? (int)d_ff : 128;
    if (!p->twell_sparsity) p->twell_sparsity = 0.99;
}

static void fill_defaults(sj_problem *p) { fill_rows(p, p->n); }

/* d_ff defaults as twell-ffn's (the CLI's --d-ff), then the rows' parameters. */
static void fill_defaults_ffn(sj_problem *p)
{
    if (!p->d_ff) p->d_ff = 4 * p->n;
    fill_rows(p, p->d_ff);
}

static void label(const sj_problem *p, char *buf, size_t len)
{
    char skew[24] = "", dead[24];
    if (p->twell_skew > 0) snprintf(skew, sizeof skew, "/A%g", p->twell_skew);
    twell_dead_label(p, dead, sizeof dead);
    snprintf(buf, len, "%g%s%s@W%d", p->twell_sparsity, skew, dead, p->twell_capacity);
}

/* 256 tokens, d_ff 1024, d_model 512, W = 128 at 99% zeros. */
static void example(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_HYBRID_GATE, SJ_DTYPE_BF16, 256, 1024, 512);
    fill_defaults(p);
}

/* 256 tokens, d_model 2048, d_ff 1024, W = 128 at 99% zeros (op: fwd or dx). d_model 2048: at
 * one 16-byte piece a thread (d_model <= 1024) ptxas keeps two scalars in an 8-byte stack frame,
 * which the walk would take for a spill; two pieces compile without one. */
static void example_ffn(sj_problem *p, sj_op op)
{
    sj_problem_init(p, op, SJ_DTYPE_BF16, 256, 2048, 2048);
    p->d_ff = 1024;
    fill_defaults_ffn(p);
}
static void example_fwd(sj_problem *p) { example_ffn(p, SJ_OP_HYBRID_FFN_FWD); }
static void example_dx(sj_problem *p) { example_ffn(p, SJ_OP_HYBRID_FFN_DX); }
static void example_dw(sj_problem *p) { example_ffn(p, SJ_OP_HYBRID_FFN_DW); }

/* The transpose of the gate's example matrix: 256 tokens x d_ff 1024, W = 128. */
static void example_transpose(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_HYBRID_TRANSPOSE, SJ_DTYPE_BF16, 256, 1024, 1);
    fill_defaults(p);
}

/* templates/hybrid_gate.lua's WG: the main loop of twell_gate.lua's WG=0 and WG=1; the epilogue
 * reserves row positions and backup rows with atomics (ATOMG/RED in SASS). */
static const op_variant variants[] = {
    { .name = "mma-sync", .config = "WG=0", .arch = "sm_80", .sass = "HMMA.16816.F32,LDSM.16.M88.4,LDGSTS,ATOMG",
      .sass_absent = "HGMMA" },
    { .name = "wgmma-cp-async", .config = "WG=1", .arch = "sm_90a", .sass = "HGMMA,LDGSTS,ATOMG",
      .sass_absent = "HMMA,UTMALDG" },
};

const op_desc op_hybrid_gate = {
    .op = SJ_OP_HYBRID_GATE,
    .name = "hybrid-gate",
    .template_name = "hybrid_gate",
    .reads = OP_READS_TWELL,
    .n_args = 13,
    .tunable = 1,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_hybrid_gate,
    .baseline_help = "the dense GEMM of the same shape (no ReLU)",
    .example = example,
    .variants = variants,
    .n_variants = sizeof variants / sizeof *variants,
};

/* lib/hybrid_rows.lua: CUDA cores (FFMA, 16-byte loads, warp ballots), no MMA. The default, one
 * kernel per token; SPLIT > 0, the L2-blocked pair the op launches in order: the sampled products
 * by unit range (STAGE=0), then the updates by column slice (STAGE=1). On sm_90a the tensor-core
 * variant (ALGO=2, lib/hybrid_pairs.lua), also two kernels: the listing of H's pairs (a shared
 * bitmap per token: shared atomics, popcounts, a warp scan) and the TwELL FFN's pairs kernel over
 * the list (mma.sync fed by TMA, mbarriers). The fwd and the dx alike. */
static const op_variant ffn_variants[] = {
    { .name = "token-rows", .config = NULL, .arch = "sm_80", .sass = "FFMA,LDG.E.128,VOTE", .sass_absent = "HMMA,HGMMA" },
    { .name = "range-products", .config = "SPLIT=4,STAGE=0", .arch = "sm_80", .sass = "FFMA,LDG.E.128,VOTE,SHFL.BFLY",
      .sass_absent = "HMMA,HGMMA" },
    { .name = "slice-updates", .config = "SPLIT=4,STAGE=1", .arch = "sm_80", .sass = "FFMA,LDG.E.128,VOTE",
      .sass_absent = "HMMA,HGMMA,SHFL" },
    { .name = "pairs-listing", .config = "ALGO=2,WARPS=8,UT=512,STAGES=3,STAGE=0", .arch = "sm_90a",
      .sass = "ATOMS.OR,POPC,SHFL.UP", .sass_absent = "HMMA,HGMMA" },
    { .name = "pairs-tensor-cores", .config = "ALGO=2,WARPS=8,UT=512,STAGES=3,STAGE=1", .arch = "sm_90a",
      .sass = "HMMA.16816.F32,UTMALDG.2D,SYNCS.PHASECHK", .sass_absent = "HGMMA" },
};

const op_desc op_hybrid_ffn_fwd = {
    .op = SJ_OP_HYBRID_FFN_FWD,
    .name = "hybrid-ffn-fwd",
    .template_name = "hybrid_ffn_fwd",
    .reads = OP_READS_TWELL | OP_READS_D_FF,
    .n_args = 16,
    .tunable = 1,
    .validate = validate_ffn,
    .key_text = key_text_ffn,
    .fill_defaults = fill_defaults_ffn,
    .label = label,
    .workspace = hybrid_ffn_workspace_bound,
    .harness = &harness_hybrid_ffn_fwd,
    .baseline_help = "the up GEMM (tokens x d_ff over d_model), relu(gate) (.) up and the down GEMM",
    .example = example_fwd,
    .variants = ffn_variants,
    .n_variants = sizeof ffn_variants / sizeof *ffn_variants,
};

const op_desc op_hybrid_ffn_dx = {
    .op = SJ_OP_HYBRID_FFN_DX,
    .name = "hybrid-ffn-dx",
    .template_name = "hybrid_ffn_dx",
    .reads = OP_READS_TWELL | OP_READS_D_FF,
    .n_args = 22,
    .tunable = 1,
    .validate = validate_ffn,
    .key_text = key_text_ffn,
    .fill_defaults = fill_defaults_ffn,
    .label = label,
    .workspace = hybrid_ffn_workspace_bound,
    .harness = &harness_hybrid_ffn_dx,
    .baseline_help = "dH = dY . Wd^T, the two element-wise products of dG and dU, and dX's two GEMMs",
    .example = example_dx,
    .variants = ffn_variants,
    .n_variants = sizeof ffn_variants / sizeof *ffn_variants,
};

/* templates/hybrid_ffn_dw.lua: CUDA cores (FFMA over 16-byte gathers of X and dY rows), no MMA
 * (docs/training.md says why); with BUSY > 0 the same kernel skipping the busy units, whose rows
 * the gemm op's kernels compute (hybrid_dw_launch.c). */
static const op_variant dw_variants[] = {
    { .name = "unit-gather", .config = NULL, .arch = "sm_80", .sass = "FFMA,LDG.E.128.CONSTANT,STS.128,LDS.128",
      .sass_absent = "HMMA,HGMMA" },
    { .name = "unit-gather-skipping-busy", .config = "BUSY=128", .arch = "sm_80",
      .sass = "FFMA,LDG.E.128.CONSTANT,STS.128,LDS.128", .sass_absent = "HMMA,HGMMA" },
};

const op_desc op_hybrid_ffn_dw = {
    .op = SJ_OP_HYBRID_FFN_DW,
    .name = "hybrid-ffn-dw",
    .template_name = "hybrid_ffn_dw",
    .reads = OP_READS_TWELL | OP_READS_D_FF,
    .n_args = 19,
    .tunable = 1,
    .validate = validate_ffn,
    .key_text = key_text_ffn,
    .fill_defaults = fill_defaults_ffn,
    .label = label,
    .workspace = hybrid_ffn_workspace_bound,
    .harness = &harness_hybrid_ffn_dw,
    .baseline_help = "the three dense weight-gradient GEMMs (d_ff x d_model over tokens)",
    .example = example_dw,
    .variants = dw_variants,
    .n_variants = sizeof dw_variants / sizeof *dw_variants,
};

/* templates/hybrid_transpose.lua: one kernel per stage, none a matrix instruction: bitmap
 * atomics, warp popcount scans, a block scan, the ranked fill; then hybrid-ffn-dw's busy units
 * (lib/hybrid_busy.lua): the selection's warp and block scan, the scatter of 16-bit coefficients
 * (the a u product converted), the 16-byte row copy. */
static const op_variant transpose_variants[] = {
    { .name = "mark", .config = "STAGE=0", .arch = "sm_80", .sass = "E.OR.STRONG.GPU", .sass_absent = "HMMA" },
    { .name = "count", .config = "STAGE=1", .arch = "sm_80", .sass = "POPC,SHFL.UP", .sass_absent = "HMMA" },
    { .name = "scan", .config = "STAGE=2", .arch = "sm_80", .sass = "BAR.SYNC,LDS,STS", .sass_absent = "HMMA" },
    { .name = "fill", .config = "STAGE=3", .arch = "sm_80", .sass = "POPC,STG.E", .sass_absent = "HMMA,E.OR.STRONG" },
    { .name = "busy-select", .config = "STAGE=4", .arch = "sm_80", .sass = "SHFL.UP,BAR.SYNC,LDS,STS", .sass_absent = "HMMA" },
    { .name = "busy-scatter", .config = "STAGE=5", .arch = "sm_80", .sass = "LDG.E.U16.CONSTANT,FMUL,STG.E.U16",
      .sass_absent = "HMMA" },
    { .name = "busy-copy", .config = "STAGE=6", .arch = "sm_80", .sass = "LDG.E.128.CONSTANT,STG.E.128", .sass_absent = "HMMA" },
};

/* A conversion of the layout, not a product: nothing to tune or bench it against. Keyed on the
 * matrix's shape only (the API leaves the activations' law unspecified). */
const op_desc op_hybrid_transpose = {
    .op = SJ_OP_HYBRID_TRANSPOSE,
    .name = "hybrid-transpose",
    .template_name = "hybrid_transpose",
    .reads = OP_READS_TWELL,
    .n_args = 0,
    .tunable = 0,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .example = example_transpose,
    .variants = transpose_variants,
    .n_variants = sizeof transpose_variants / sizeof *transpose_variants,
};
