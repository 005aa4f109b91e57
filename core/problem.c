/* problem.c: op names, and the validation, cache-key text and description of a kernel request
 * (sj_problem). */
#include "core/problem.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

const char *sj_op_name(sj_op op)
{
    switch (op) {
    case SJ_OP_GEMM: return "gemm";
    case SJ_OP_VNM_SPMM: return "vnm-spmm";
    case SJ_OP_TWELL_GATE: return "twell-gate";
    case SJ_OP_TWELL_FFN: return "twell-ffn";
    case SJ_OP_VNM_COMPRESS: return "vnm-compress";
    }
    return NULL;
}

sj_status sj_op_parse(const char *name, sj_op *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_op_parse: out is NULL");
    const sj_op ops[] = { SJ_OP_GEMM, SJ_OP_VNM_SPMM, SJ_OP_TWELL_GATE, SJ_OP_TWELL_FFN, SJ_OP_VNM_COMPRESS };
    for (size_t i = 0; name && i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(name, sj_op_name(ops[i]))) { *out = ops[i]; return SJ_OK; }
    return error_set(SJ_ERR_INVALID_ARGUMENT,
                   "unknown op '%s'; expected gemm, vnm-spmm, twell-gate, twell-ffn or vnm-compress", name ? name : "(null)");
}

void sj_problem_init(sj_problem *p, sj_op op, sj_dtype dtype, int64_t m, int64_t n, int64_t k)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->op = op;
    p->dtype = dtype;
    p->out_dtype = dtype;
    p->m = m;
    p->n = n;
    p->k = k;
}

/* Dimensions are kernel int arguments, and products like m*k index 64-bit, so cap each. */
#define SJ_MAX_DIM ((int64_t)1 << 30)

sj_status sj_problem_validate(const sj_problem *p)
{
    if (!p) return error_set(SJ_ERR_INVALID_ARGUMENT, "problem is NULL");
    if (!sj_op_name(p->op)) return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.op %d is not a known op", (int)p->op);
    if (p->dtype != SJ_DTYPE_F16 && p->dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.dtype %d: expected f16 or bf16 inputs", (int)p->dtype);
    if (!sj_dtype_name(p->out_dtype))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.out_dtype %d: expected f16, bf16 or f32", (int)p->out_dtype);
    const struct { const char *name; int64_t v; } dims[] = { { "m", p->m }, { "n", p->n }, { "k", p->k } };
    for (int i = 0; i < 3; i++) {
        if (dims[i].v <= 0)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.%s = %lld: sizes must be > 0", dims[i].name, (long long)dims[i].v);
        if (dims[i].v > SJ_MAX_DIM)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.%s = %lld exceeds the limit %lld", dims[i].name,
                           (long long)dims[i].v, (long long)SJ_MAX_DIM);
    }
    if (p->op == SJ_OP_VNM_SPMM || p->op == SJ_OP_VNM_COMPRESS) {
        if (p->vnm_v != 16 && p->vnm_v != 32 && p->vnm_v != 64 && p->vnm_v != 128)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_v = %d: V must be 16, 32, 64 or 128", p->vnm_v);
        if (p->vnm_n != 2)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_n = %d: only N = 2 is supported", p->vnm_n);
        if (p->vnm_m < 4 || p->vnm_m > 128)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.vnm_m = %d: M must be in 4..128", p->vnm_m);
    }
    if (p->op == SJ_OP_TWELL_GATE || p->op == SJ_OP_TWELL_FFN) {
        if (p->twell_tile <= 0 || p->twell_capacity <= 0 || p->twell_capacity > p->twell_tile)
            return error_set(SJ_ERR_INVALID_ARGUMENT,
                           "problem.twell_tile = %d, twell_capacity = %d: expected 0 < capacity <= tile",
                           p->twell_tile, p->twell_capacity);
        if (!(p->twell_sparsity >= 0 && p->twell_sparsity < 1))
            return error_set(SJ_ERR_INVALID_ARGUMENT,
                           "problem.twell_sparsity = %g: expected a fraction of zeros in [0, 1) (0: unspecified)",
                           p->twell_sparsity);
        if (!(p->twell_skew >= 0 && p->twell_skew <= SJ_TWELL_MAX_SKEW))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_skew = %g: expected 0 (units alike) .. %g",
                           p->twell_skew, SJ_TWELL_MAX_SKEW);
        if (p->twell_skew > 0 && !(p->twell_sparsity >= 0.5))
            return error_set(SJ_ERR_INVALID_ARGUMENT,
                           "problem.twell_skew = %g needs problem.twell_sparsity >= 0.5 (it is %g): a unit's rate is "
                           "capped at 0.5", p->twell_skew, p->twell_sparsity);
        if (p->op == SJ_OP_TWELL_FFN && (p->d_ff <= 0 || p->d_ff > SJ_MAX_DIM))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.d_ff = %lld: expected > 0", (long long)p->d_ff);
    }
    return SJ_OK;
}

void problem_key_text(const sj_problem *p, char *buf, size_t len)
{
    /* An unspecified TwELL sparsity keeps the text it had before the field existed, so entries
     * tuned then still match. */
    char s[48] = "";
    if ((p->op == SJ_OP_TWELL_GATE || p->op == SJ_OP_TWELL_FFN) && p->twell_sparsity > 0)
        snprintf(s, sizeof s, p->twell_skew > 0 ? ",S=%.4g,A=%.4g" : ",S=%.4g", p->twell_sparsity, p->twell_skew);
    switch (p->op) {
    case SJ_OP_VNM_SPMM:
    case SJ_OP_VNM_COMPRESS:
        snprintf(buf, len, "V=%d,NS=%d,MS=%d", p->vnm_v, p->vnm_n, p->vnm_m);
        break;
    case SJ_OP_TWELL_GATE:
        snprintf(buf, len, "T=%d,C=%d%s", p->twell_tile, p->twell_capacity, s);
        break;
    case SJ_OP_TWELL_FFN:
        snprintf(buf, len, "T=%d,C=%d,DFF=%lld%s", p->twell_tile, p->twell_capacity, (long long)p->d_ff, s);
        break;
    default:
        if (len) buf[0] = 0;
    }
}

sj_status sj_problem_describe(const sj_problem *p, char *buf, size_t len)
{
    if (!buf || !len) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_problem_describe: buf is NULL or len is 0");
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    char sp[64];
    problem_key_text(p, sp, sizeof sp);
    snprintf(buf, len, "%s %s->%s %lldx%lldx%lld%s%s", sj_op_name(p->op), sj_dtype_name(p->dtype),
             sj_dtype_name(p->out_dtype), (long long)p->m, (long long)p->n, (long long)p->k,
             sp[0] ? " " : "", sp);
    return SJ_OK;
}
