/* hybrid_op.c: the descriptor of hybrid-gate (H = relu(X . Wg) written in the hybrid format by
 * the gate's epilogue). Its problem is a TwELL problem whose one tile spans the row: twell_tile =
 * n (d_ff), twell_capacity = W, the ELL width; it reads the activations' law (sparsity, skew),
 * which the cache key carries since timings depend on it. */
#include "core/error.h"
#include "core/op.h"
#include "core/problem.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdio.h>

static sj_status validate(const sj_problem *p)
{
    if (p->n > HYBRID_MAX_COLS)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.n (d_ff) = %lld: hybrid-gate takes 1..%d (16-bit columns)",
                         (long long)p->n, HYBRID_MAX_COLS);
    if (p->twell_tile != p->n)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_tile = %d: hybrid-gate needs it equal to n = %lld (a row is one tile)",
                         p->twell_tile, (long long)p->n);
    if (p->twell_capacity < 1 || p->twell_capacity > p->n)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_capacity (the ELL width W) = %d: expected 1..n (n = %lld)",
                         p->twell_capacity, (long long)p->n);
    if (!(p->twell_sparsity >= 0 && p->twell_sparsity < 1))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_sparsity = %g: expected a fraction of zeros in [0, 1) (0: unspecified)", p->twell_sparsity);
    if (!(p->twell_skew >= 0 && p->twell_skew <= SJ_TWELL_MAX_SKEW) || (p->twell_skew > 0 && !(p->twell_sparsity >= 0.5)))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_skew = %g: expected 0 .. %g, and > 0 only with problem.twell_sparsity >= 0.5 (it is %g)",
                         p->twell_skew, SJ_TWELL_MAX_SKEW, p->twell_sparsity);
    return SJ_OK;
}

static void key_text(const sj_problem *p, char *buf, size_t len)
{
    if (p->twell_sparsity > 0)
        snprintf(buf, len, p->twell_skew > 0 ? "W=%d,S=%.4g,A=%.4g" : "W=%d,S=%.4g", p->twell_capacity,
                 p->twell_sparsity, p->twell_skew);
    else
        snprintf(buf, len, "W=%d", p->twell_capacity);
}

/* W = 128 (the public implementation's width) or the row when narrower, 99% zeros. */
static void fill_defaults(sj_problem *p)
{
    if (!p->twell_tile) p->twell_tile = (int)(p->n < HYBRID_MAX_COLS ? p->n : HYBRID_MAX_COLS);
    if (!p->twell_capacity) p->twell_capacity = p->n < 128 ? (int)p->n : 128;
    if (!p->twell_sparsity) p->twell_sparsity = 0.99;
}

static void label(const sj_problem *p, char *buf, size_t len)
{
    char skew[24] = "";
    if (p->twell_skew > 0) snprintf(skew, sizeof skew, "/A%g", p->twell_skew);
    snprintf(buf, len, "%g%s@W%d", p->twell_sparsity, skew, p->twell_capacity);
}

/* 256 tokens, d_ff 1024, d_model 512, W = 128 at 99% zeros. */
static void example(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_HYBRID_GATE, SJ_DTYPE_BF16, 256, 1024, 512);
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
