/* problem.c: op names, and the validation, cache-key text and description of a kernel request
 * (sj_problem). */
#include "core/problem.h"
#include "core/error.h"
#include "core/op.h"

#include <stdio.h>
#include <string.h>

const char *sj_op_name(sj_op op)
{
    const op_desc *d = op_find(op);
    return d ? d->name : NULL;
}

sj_status sj_op_parse(const char *name, sj_op *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_op_parse: out is NULL");
    const op_desc *d = op_find_name(name);
    if (!d) return error_set(SJ_ERR_INVALID_ARGUMENT, "unknown op '%s'; expected one of %s", name ? name : "(null)", op_names());
    *out = d->op;
    return SJ_OK;
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


sj_status sj_problem_validate(const sj_problem *p)
{
    if (!p) return error_set(SJ_ERR_INVALID_ARGUMENT, "problem is NULL");
    const op_desc *d = op_find(p->op);
    if (!d) return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.op %d is not a known op (%s)", (int)p->op, op_names());
    if (p->dtype != SJ_DTYPE_F16 && p->dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.dtype %d: expected f16 or bf16 inputs", (int)p->dtype);
    if (!sj_dtype_name(p->out_dtype))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.out_dtype %d: expected f16, bf16 or f32", (int)p->out_dtype);
    const struct { const char *name; int64_t v; } dims[] = { { "m", p->m }, { "n", p->n }, { "k", p->k } };
    for (int i = 0; i < 3; i++) {
        if (dims[i].v <= 0)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.%s = %lld: sizes must be > 0", dims[i].name, (long long)dims[i].v);
        if (dims[i].v > PROBLEM_MAX_DIM)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.%s = %lld exceeds the limit %lld", dims[i].name,
                           (long long)dims[i].v, (long long)PROBLEM_MAX_DIM);
    }
    /* a rank the op would ignore is a term it would not compute */
    if (p->lowrank_rank && !(d->reads & OP_READS_LOWRANK))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.lowrank_rank = %d: %s takes no low-rank term (expected 0)",
                         p->lowrank_rank, d->name);
    return d->validate ? d->validate(p) : SJ_OK;
}

sj_status sj_workspace_size(const sj_problem *p, size_t *bytes)
{
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_workspace_size: bytes is NULL");
    *bytes = 0;
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return error_prefix(st, "sj_workspace_size");
    const op_desc *d = op_find(p->op);
    if (d->workspace) *bytes = d->workspace(p);
    return SJ_OK;
}

void problem_key_text(const sj_problem *p, char *buf, size_t len)
{
    const op_desc *d = op_find(p->op);
    if (d && d->key_text) d->key_text(p, buf, len);
    else if (len) buf[0] = 0;
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
