/* vnm_op.c: the descriptors of the V:N:M ops: vnm-spmm (C = alpha * A_vnm . B + beta * C on
 * sparse tensor cores, with an optional low-rank term U . Z in the same kernel, tuned), vnm-compress (dense -> V:N:M on the device, one config), and for
 * training vnm-dw (the sampled weight gradient into W's value layout, tuned) and vnm-transpose
 * (compressed W -> dense masked W^T, one config; docs/training.md), vnm-dx (the exact input
 * gradient W^T . dY from W's compressed form, tuned; a candidate, not the default), and gmp-prune (one GMP
 * pruning step of a dense W and its mask, a kernel per stage). All read V:N:M from the
 * problem and carry it in the cache key. */
#include "core/error.h"
#include "core/op.h"
#include "ops/vnm/vnm.h"

#include <stdio.h>

static sj_status validate(const sj_problem *p)
{
    if (p->vnm_v != 16 && p->vnm_v != 32 && p->vnm_v != 64 && p->vnm_v != 128)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_v = %d: V must be 16, 32, 64 or 128", p->vnm_v);
    if (p->vnm_n != 2)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_n = %d: only N = 2 is supported", p->vnm_n);
    if (p->vnm_m < 4 || p->vnm_m > 128)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_m = %d: M must be in 4..128", p->vnm_m);
    return SJ_OK;
}

/* vnm-spmm also takes the rank of a low-rank term: whole 16-byte rows of U (rows x r), at most
 * the 128 the kernel's shared-memory tile is sized for. */
static sj_status validate_spmm(const sj_problem *p)
{
    sj_status st = validate(p);
    if (st != SJ_OK) return st;
    int r = p->lowrank_rank;
    if (r && (r < SJ_LOWRANK_MIN_RANK || r > SJ_LOWRANK_MAX_RANK || r % 8))
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "problem.lowrank_rank = %d: expected 0 (none) or a multiple of 8 in %d..%d", r,
                         SJ_LOWRANK_MIN_RANK, SJ_LOWRANK_MAX_RANK);
    return SJ_OK;
}

/* vnm-dw and vnm-dx also need whole 16-byte rows of their token-major operands (k = tokens). */
static sj_status validate_tokens(const sj_problem *p)
{
    sj_status st = validate(p);
    if (st != SJ_OK) return st;
    if (p->k % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.k = %lld (tokens) must be a multiple of 8 (16-byte token rows)",
                         (long long)p->k);
    return SJ_OK;
}

/* Only vnm-spmm takes a rank (sj_problem_validate refuses one elsewhere); without one the text
 * is what it always was, so the cached kernels of problems without a rank keep their keys. */
static void key_text(const sj_problem *p, char *buf, size_t len)
{
    if (p->lowrank_rank) snprintf(buf, len, "V=%d,NS=%d,MS=%d,R=%d", p->vnm_v, p->vnm_n, p->vnm_m, p->lowrank_rank);
    else snprintf(buf, len, "V=%d,NS=%d,MS=%d", p->vnm_v, p->vnm_n, p->vnm_m);
}

static void fill_defaults(sj_problem *p)
{
    if (p->vnm_v) return;
    p->vnm_v = 64;
    p->vnm_n = 2;
    p->vnm_m = 8;
}

static void label(const sj_problem *p, char *buf, size_t len)
{
    if (p->lowrank_rank) snprintf(buf, len, "%d:%d:%d+r%d", p->vnm_v, p->vnm_n, p->vnm_m, p->lowrank_rank);
    else snprintf(buf, len, "%d:%d:%d", p->vnm_v, p->vnm_n, p->vnm_m);
}

static void example_spmm(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_SPMM, SJ_DTYPE_F16, 256, 256, 256);
    fill_defaults(p);
}

/* The same with a rank-40 low-rank term: 40 is not a multiple of 16, so the tail's last k16
 * step is the padded one. */
static void example_spmm_lowrank(sj_problem *p)
{
    example_spmm(p);
    p->lowrank_rank = 40;
}

/* A 256 x 256 matrix to compress (n is unused; sj_vnm_compress_device asks for 1). */
static void example_compress(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_COMPRESS, SJ_DTYPE_F16, 256, 1, 256);
    fill_defaults(p);
}

/* dW (m = rows of W, n = cols of W, k = tokens): 256 x 256 over 256 tokens. */
static void example_dw(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_DW, SJ_DTYPE_F16, 256, 256, 256);
    fill_defaults(p);
}

/* dX of a 256 x 256 W (m = rows of W, n = cols of W, k = tokens) over 256 tokens. */
static void example_dx(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_DX, SJ_DTYPE_F16, 256, 256, 256);
    fill_defaults(p);
}

/* W^T of a 256 x 256 W (n is unused; the entry points ask for 1). */
static void example_transpose(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_TRANSPOSE, SJ_DTYPE_F16, 256, 1, 256);
    fill_defaults(p);
}

/* mma.sp on sparse tensor cores, on every target (WG=0), with a low-rank term its dense m16n8k16
 * tail (HMMA.16816) on U and Z after the sparse loop; on sm_90a wgmma.sp from the same cp.async
 * ring, one warpgroup per 64 rows (WG=1, the default at V = 128; no low-rank tail). */
static const op_variant variants_spmm[] = {
    { .name = "sparse-mma-sync", .config = "WG=0", .arch = "sm_80", .sass = "HMMA.SP.16832.F32,LDGSTS",
      .sass_absent = "HGMMA,HMMA.16816" },
    { .name = "sparse-mma-sync-lowrank", .config = "WG=0", .arch = "sm_80",
      .sass = "HMMA.SP.16832.F32,HMMA.16816.F32,LDGSTS,LDSM", .example = example_spmm_lowrank },
    { .name = "sparse-wgmma", .config = "WG=1,BM=64,BN=256,WM=64,WN=256", .arch = "sm_90a",
      .sass = "HGMMA.SP.64x256x32.F32,LDGSTS", .sass_absent = "HMMA.SP" },
};

/* No matrix instruction: the column norms are summed in fp64 so the choice is the host's to
 * the bit (DFMA for L2, DADD for L1). The selection indexes per-thread arrays by data (a flag
 * per column of a group, M up to 128; the 4 candidates of a row, by the positions it picks), so
 * they live in local memory; the kernel runs once per weight matrix. */
static const op_variant variants_compress[] = {
    { .name = "compressor", .arch = "sm_80", .sass = "DFMA,DADD", .sass_absent = "HMMA", .local_arrays = 1 },
};

/* Dense tensor cores over the gathered columns: mma.sync m16n8k16 with cp.async + ldmatrix on
 * every target (WG=0); on sm_90a wgmma from the same cp.async ring, every warpgroup loading
 * (WG=1), or a producer warpgroup feeding consumers through mbarriers (WG=2). */
static const op_variant variants_dw[] = {
    { .name = "sampled-mma-sync", .config = "WG=0", .arch = "sm_80", .sass = "HMMA.16816.F32,LDGSTS,LDSM",
      .sass_absent = "HMMA.SP" },
    { .name = "sampled-wgmma", .config = "WG=1,WM=64,WN=128", .arch = "sm_90a", .sass = "HGMMA.64x128x16.F32,LDGSTS",
      .sass_absent = "HMMA.16816,SYNCS" },
    { .name = "sampled-wgmma-producer", .config = "WG=2,WM=64,WN=128", .arch = "sm_90a",
      .sass = "HGMMA.64x128x16.F32,LDGSTS,SYNCS.ARRIVE,SYNCS.PHASECHK", .sass_absent = "HMMA.16816" },
    { .name = "sampled-wgmma-tma", .config = "WG=1,WM=64,WN=128,TMA=1", .arch = "sm_90a",
      .sass = "HGMMA.64x128x16.F32,LDGSTS,UTMALDG.2D,SYNCS.PHASECHK", .sass_absent = "HMMA.16816" },
};

/* Dense tensor cores on the compact rows: both operands reduction-major in shared memory
 * (ldmatrix.trans), dY through a cp.async ring, W's pairs stored as 8-byte rows of 4. */
static const op_variant variants_dx[] = {
    { .name = "compact-mma-sync", .arch = "sm_80", .sass = "HMMA.16816.F32,LDGSTS,LDSM.16.MT88.4,STS.64",
      .sass_absent = "HMMA.SP,HGMMA" },
};

/* A gather per element: loads and 16-bit stores, no matrix instruction. */
static const op_variant variants_transpose[] = {
    { .name = "gather", .arch = "sm_80", .sass = "LDG.E.128,STG.E.U16", .sass_absent = "HMMA" },
};

const op_desc op_vnm_spmm = {
    .op = SJ_OP_VNM_SPMM,
    .name = "vnm-spmm",
    .template_name = "vnm_spmm",
    .reads = OP_READS_VNM | OP_READS_LOWRANK,
    .n_args = 12, /* the 10 of sj_vnm_spmm, then U and Z: a kernel without a rank takes the prefix */
    .tunable = 1,
    .validate = validate_spmm,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_vnm,
    .baseline_help = "the dense GEMM of the same shape; with --rank R also cuBLAS's m x n over R GEMM U . Z",
    .example = example_spmm,
    .variants = variants_spmm,
    .n_variants = sizeof variants_spmm / sizeof *variants_spmm,
};

/* The compressor's workspace: its 64-bit pattern-violation word (templates/vnm_compress.lua),
 * padded to 16 bytes so that whatever follows it in a caller's buffer stays aligned. */
static size_t compress_workspace(const sj_problem *p) { return 16; }

/* A format conversion: no tuning space worth searching, no cuBLAS counterpart to bench. */
const op_desc op_vnm_compress = {
    .op = SJ_OP_VNM_COMPRESS,
    .name = "vnm-compress",
    .template_name = "vnm_compress",
    .reads = OP_READS_VNM,
    .n_args = 7,
    .tunable = 0,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .workspace = compress_workspace,
    .example = example_compress,
    .variants = variants_compress,
    .n_variants = sizeof variants_compress / sizeof *variants_compress,
};

const op_desc op_vnm_dw = {
    .op = SJ_OP_VNM_DW,
    .name = "vnm-dw",
    .template_name = "vnm_dw",
    .reads = OP_READS_VNM,
    .n_args = 9,
    .tunable = 1,
    .validate = validate_tokens,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_vnm_dw,
    .baseline_help = "the dense GEMM dY . X^T (m x n over k tokens) that it samples",
    .example = example_dw,
    .variants = variants_dw,
    .n_variants = sizeof variants_dw / sizeof *variants_dw,
};

const op_desc op_vnm_dx = {
    .op = SJ_OP_VNM_DX,
    .name = "vnm-dx",
    .template_name = "vnm_dx",
    .reads = OP_READS_VNM,
    .n_args = 8,
    .tunable = 1,
    .validate = validate_tokens,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_vnm_dx,
    .baseline_help = "the dense GEMM W^T . dY (n x k over m: in x tokens over out) that it replaces",
    .example = example_dx,
    .variants = variants_dx,
    .n_variants = sizeof variants_dx / sizeof *variants_dx,
};

/* A format conversion like vnm-compress: one config, nothing to bench it against. */
const op_desc op_vnm_transpose = {
    .op = SJ_OP_VNM_TRANSPOSE,
    .name = "vnm-transpose",
    .template_name = "vnm_transpose",
    .reads = OP_READS_VNM,
    .n_args = 5,
    .tunable = 0,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .example = example_transpose,
    .variants = variants_transpose,
    .n_variants = sizeof variants_transpose / sizeof *variants_transpose,
};

/* The stages of one GMP step on a 256 x 256 W, pattern V:2:8 (n is unused; the entry point asks
 * for 1). */
static void example_gmp(sj_problem *p)
{
    sj_problem_init(p, SJ_OP_GMP_PRUNE, SJ_DTYPE_F16, 256, 1, 256);
    fill_defaults(p);
}

/* One kernel per stage of templates/gmp_prune.lua, none a matrix instruction: element-wise
 * gathers, global atomics for the histogram, block scans in shared memory. */
static const op_variant variants_gmp[] = {
    { .name = "survivors", .config = "STAGE=0", .arch = "sm_80", .sass = "LDG.E.U8,STG.E.U16", .sass_absent = "HMMA" },
    { .name = "pattern", .config = "STAGE=1", .arch = "sm_80", .sass = "LDG.E.128,STG.E.U8", .sass_absent = "HMMA" },
    { .name = "histogram", .config = "STAGE=2", .arch = "sm_80", .sass = ".E.ADD.STRONG.GPU,VOTE.ANY,POPC", .sass_absent = "HMMA" },
    { .name = "select", .config = "STAGE=3,THREADS=1024", .arch = "sm_80", .sass = "BAR.SYNC,LDS.64,STS.64", .sass_absent = "HMMA" },
    { .name = "ties", .config = "STAGE=4", .arch = "sm_80", .sass = "SHFL.BFLY,LDG.E.U16,BAR.SYNC", .sass_absent = "HMMA" },
    { .name = "scan", .config = "STAGE=5,THREADS=1024", .arch = "sm_80", .sass = "BAR.SYNC,LDS,STS", .sass_absent = "HMMA" },
    { .name = "apply", .config = "STAGE=6", .arch = "sm_80", .sass = "VOTE.ANY,POPC,STG.E.U8,STG.E.U16", .sass_absent = "HMMA" },
};

/* Pruning, not a product: one kernel per stage, nothing to tune or bench it against. The
 * problem carries the pattern M' (the pattern stage reads it; the API keys the other stages on
 * the schedule's final M so that they compile once per weight shape). */
const op_desc op_gmp_prune = {
    .op = SJ_OP_GMP_PRUNE,
    .name = "gmp-prune",
    .template_name = "gmp_prune",
    .reads = OP_READS_VNM,
    .n_args = 0,
    .tunable = 0,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .example = example_gmp,
    .variants = variants_gmp,
    .n_variants = sizeof variants_gmp / sizeof *variants_gmp,
};
