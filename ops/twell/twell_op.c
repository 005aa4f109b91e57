/* twell_op.c: the descriptors of the two TwELL ops of a ReLU FFN block: twell-gate (H =
 * relu(X . Wg) written as TwELL) and twell-ffn (Y = (H (.) (X . Wu)) . Wd). Both read the TwELL
 * tile and capacity and the law of the activations (sparsity, skew), which the cache key
 * carries since timings depend on it; the FFN also reads d_ff. */
#include "core/error.h"
#include "core/op.h"
#include "core/problem.h"
#include "ops/twell/twell.h"

#include <stdio.h>

static sj_status validate(const sj_problem *p)
{
    if (p->twell_tile <= 0 || p->twell_tile > SJ_TWELL_MAX_TILE)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_tile = %d: expected 1..%d", p->twell_tile,
                         SJ_TWELL_MAX_TILE);
    if (p->twell_capacity <= 0 || p->twell_capacity > p->twell_tile)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_capacity = %d: expected 1..twell_tile (%d)",
                         p->twell_capacity, p->twell_tile);
    if (!(p->twell_sparsity >= 0 && p->twell_sparsity < 1))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_sparsity = %g: expected a fraction of zeros in [0, 1) (0: unspecified)",
                         p->twell_sparsity);
    if (!(p->twell_skew >= 0 && p->twell_skew <= SJ_TWELL_MAX_SKEW))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_skew = %g: expected 0 (units alike) .. %g", p->twell_skew,
                         SJ_TWELL_MAX_SKEW);
    if (p->twell_skew > 0 && !(p->twell_sparsity >= 0.5))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.twell_skew = %g needs problem.twell_sparsity >= 0.5 (it is %g): a unit's rate is "
                         "capped at 0.5", p->twell_skew, p->twell_sparsity);
    return twell_check_dead(p);
}

static sj_status validate_ffn(const sj_problem *p)
{
    sj_status st = validate(p);
    if (st != SJ_OK) return st;
    if (p->d_ff <= 0 || p->d_ff > PROBLEM_MAX_DIM)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.d_ff = %lld: expected 1 .. %lld", (long long)p->d_ff,
                         (long long)PROBLEM_MAX_DIM);
    return SJ_OK;
}

/* An unspecified sparsity (0) keeps the text keys had before the field existed, so entries
 * tuned then still match. */
static void law_text(const sj_problem *p, char *buf, size_t len)
{
    char skew[24] = "", dead[24];
    if (p->twell_skew > 0) snprintf(skew, sizeof skew, ",A=%.4g", p->twell_skew);
    twell_dead_key(p, dead, sizeof dead);
    if (p->twell_sparsity > 0)
        snprintf(buf, len, ",S=%.4g%s%s", p->twell_sparsity, skew, dead);
    else if (len)
        buf[0] = 0;
}

static void key_text_gate(const sj_problem *p, char *buf, size_t len)
{
    char law[48];
    law_text(p, law, sizeof law);
    snprintf(buf, len, "T=%d,C=%d%s", p->twell_tile, p->twell_capacity, law);
}

static void key_text_ffn(const sj_problem *p, char *buf, size_t len)
{
    char law[48];
    law_text(p, law, sizeof law);
    snprintf(buf, len, "T=%d,C=%d,DFF=%lld%s", p->twell_tile, p->twell_capacity, (long long)p->d_ff, law);
}

static void fill_defaults(sj_problem *p)
{
    if (!p->twell_tile) {
        p->twell_tile = 128;
        p->twell_capacity = 16;
    }
    if (!p->twell_sparsity) p->twell_sparsity = TWELL_DEFAULT_SPARSITY;
}

static void label(const sj_problem *p, char *buf, size_t len)
{
    char skew[24] = "", dead[24]; /* the input law, when not iid */
    if (p->twell_skew > 0) snprintf(skew, sizeof skew, "/A%g", p->twell_skew);
    twell_dead_label(p, dead, sizeof dead);
    snprintf(buf, len, "%g%s%s@T%d:C%d", p->twell_sparsity, skew, dead, p->twell_tile, p->twell_capacity);
}

/* 256 tokens, d_ff 1024, d_model 512, TwELL 128:16 at 99% sparsity. */
static void example_gate(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_TWELL_GATE, SJ_DTYPE_BF16, 256, 1024, 512);
    fill_defaults(p);
}

/* 256 tokens, d_model 512, d_ff 1024, TwELL 128:16 at 99% sparsity. */
static void example_ffn(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, 256, 512, 512);
    p->d_ff = 1024;
    fill_defaults(p);
}

/* templates/twell_gate.lua's WG. The default's CLUSTER=2 pairs CTAs over TMA multicast, so the
 * other two name CLUSTER=1. */
static const op_variant variants_gate[] = {
    { .name = "mma-sync", .config = "WG=0,CLUSTER=1", .arch = "sm_80", .sass = "HMMA.16816.F32,LDSM.16.M88.4,LDGSTS",
      .sass_absent = "HGMMA" },
    { .name = "wgmma-cp-async", .config = "WG=1,CLUSTER=1", .arch = "sm_90a", .sass = "HGMMA,LDGSTS",
      .sass_absent = "HMMA,UTMALDG" },
    /* a producer warpgroup issues TMA loads, consumers wait on mbarriers (the sm_90a default) */
    { .name = "wgmma-tma", .config = "WG=2", .arch = "sm_90a", .sass = "HGMMA,UTMALDG.2D,SYNCS.PHASECHK",
      .sass_absent = "HMMA,LDGSTS" },
};

/* templates/twell_ffn.lua's ALGO. The pairs algorithms fix the token blocks' parameters at
 * values of their own, so completed from the (token blocks') default they are invalid: they are
 * given whole, as the template's pairs_config would choose them with 8 warps (its variants()
 * leaves them out of a problem this small, which fills too few SMs for them to pay). */
static const op_variant variants_ffn[] = {
    { .name = "token-blocks", .config = "ALGO=0", .arch = "sm_80", .sass = "HMMA.16816.F32,LDGSTS",
      .sass_absent = "HGMMA,UTMALDG" },
    { .name = "pairs-cuda-cores", .arch = "sm_80", .sass = "FFMA,LDGSTS", .sass_absent = "HMMA,HGMMA",
      .config = "ALGO=1,WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=3,PIPE=0,PERSIST=0,UT=512,SLOTS=16" },
    { .name = "pairs-tensor-cores", .arch = "sm_90a", .sass = "HMMA.16816.F32,UTMALDG.2D,SYNCS.PHASECHK",
      .sass_absent = "HGMMA", .config = "ALGO=2,WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=3,PIPE=0,PERSIST=0,UT=512,SLOTS=16" },
};

/* templates/lib/twell_pairs.lua: the counters (ticket, finished CTAs, phase-A items done per
 * 256-token tile) take list_offset(M) u32 words; then ALGO=1's pair list (d_ff entries per token)
 * or ALGO=2's slot counts (per 8 tokens and unit tile of 256 or more) and slots (8 * UT per 8
 * tokens and unit tile), with tokens and d_ff rounded up to 512. */
size_t twell_ffn_counter_words(const sj_problem *p) { return (size_t)((2 + (p->m + 255) / 256 + 63) / 64 * 64); }

size_t twell_ffn_workspace(const sj_problem *p)
{
    size_t m512 = (size_t)(p->m + 511) / 512 * 512, f512 = (size_t)(p->d_ff + 511) / 512 * 512;
    size_t counts = (m512 / 8 * (size_t)((p->d_ff + 255) / 256) + 63) / 64 * 64;
    return 4 * (twell_ffn_counter_words(p) + counts + m512 * f512);
}

const op_desc op_twell_gate = {
    .op = SJ_OP_TWELL_GATE,
    .name = "twell-gate",
    .template_name = "twell_gate",
    .reads = OP_READS_TWELL,
    .n_args = 10,
    .tunable = 1,
    .validate = validate,
    .key_text = key_text_gate,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_twell_gate,
    .baseline_help = "the dense GEMM of the same shape (no ReLU)",
    .example = example_gate,
    .variants = variants_gate,
    .n_variants = sizeof variants_gate / sizeof *variants_gate,
};

const op_desc op_twell_ffn = {
    .op = SJ_OP_TWELL_FFN,
    .name = "twell-ffn",
    .template_name = "twell_ffn",
    .reads = OP_READS_TWELL | OP_READS_D_FF,
    .n_args = 14,
    .tunable = 1,
    .validate = validate_ffn,
    .key_text = key_text_ffn,
    .fill_defaults = fill_defaults,
    .label = label,
    .workspace = twell_ffn_workspace,
    .harness = &harness_twell_ffn,
    .baseline_help = "the fused FFN alone (H given as TwELL): up GEMM, H (.) up, down GEMM",
    .example = example_ffn,
    .variants = variants_ffn,
    .n_variants = sizeof variants_ffn / sizeof *variants_ffn,
};
