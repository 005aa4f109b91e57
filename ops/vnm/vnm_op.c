/* vnm_op.c: the descriptors of the V:N:M ops: vnm-spmm (C = alpha * A_vnm . B + beta * C on
 * sparse tensor cores, tuned) and vnm-compress (dense -> V:N:M on the device, one config).
 * Both read V:N:M from the problem and carry it in the cache key. */
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

static void key_text(const sj_problem *p, char *buf, size_t len)
{
    snprintf(buf, len, "V=%d,NS=%d,MS=%d", p->vnm_v, p->vnm_n, p->vnm_m);
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
    snprintf(buf, len, "%d:%d:%d", p->vnm_v, p->vnm_n, p->vnm_m);
}

const op_desc op_vnm_spmm = {
    .op = SJ_OP_VNM_SPMM,
    .name = "vnm-spmm",
    .template_name = "vnm_spmm",
    .reads = OP_READS_VNM,
    .tunable = 1,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
    .harness = &harness_vnm,
    .bench = &bench_op_vnm,
};

/* A format conversion: no tuning space worth searching, no cuBLAS counterpart to bench. */
const op_desc op_vnm_compress = {
    .op = SJ_OP_VNM_COMPRESS,
    .name = "vnm-compress",
    .template_name = "vnm_compress",
    .reads = OP_READS_VNM,
    .tunable = 0,
    .validate = validate,
    .key_text = key_text,
    .fill_defaults = fill_defaults,
    .label = label,
};
