/* hybrid_harness.c: the harness of hybrid-gate, what the tuner and every bench of the op time,
 * check and count. Inputs: twell_gate_inputs (ops/twell/twell.h: X and Wg random, column 0 of X
 * all ones and of WgT each unit's bias, so H has the problem's sparsity and skew, or W/2
 * non-zeros a row when it is unspecified), written on the device (tuner/random_fill.h). The backup is sized from that law (backup_rows_for):
 * a row overflows W rarely when it expects at most W/2 non-zeros, so rows / 8 rows (at least 16)
 * then; every row otherwise. A launch is the op's: the resets and the kernel. The output is read
 * back through sj_hybrid_download + sj_hybrid_to_dense (which validates it: an unplaced row or
 * any inconsistency is a wrong result) and compared with
 * relu of templates/gemm_reference.lua over the same X and Wg. Its baseline: the one dense GEMM. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"
#include "ops/twell/twell.h"

#include <stdlib.h>
#include <string.h>

typedef struct gate_state {
    sj_hybrid_device H;
    sj_devptr X, WgT, Wg;    /* Wg (K x N) only for the reference */
} gate_state;

static void gate_teardown(harness *h)
{
    gate_state *s = h->state;
    if (!s) return;
    sj_hybrid_device_free(h->ctx, &s->H);
    sj_free(h->ctx, s->X);
    sj_free(h->ctx, s->WgT);
    sj_free(h->ctx, s->Wg);
    free(s);
    h->state = NULL;
}

static int64_t backup_rows_for(const sj_problem *p)
{
    double expected = p->twell_sparsity > 0 ? (1 - p->twell_sparsity) * (double)p->n : p->twell_capacity / 2.0;
    if (expected > p->twell_capacity / 2.0) return p->m;
    int64_t r = p->m / 8 < 16 ? 16 : p->m / 8;
    return r < p->m ? r : p->m;
}

static sj_status gate_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    gate_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_hybrid_layout layout;
    sj_status st = sj_hybrid_layout_init(&layout, p->dtype, p->m, p->n, p->twell_capacity, backup_rows_for(p));
    if (st != SJ_OK) return st;
    twell_gate_law law;
    if ((st = twell_gate_inputs(p, seed, &law)) != SJ_OK) return st;
    if ((st = twell_gate_write(h->ctx, &law, &s->X, &s->WgT, &s->Wg)) == SJ_OK &&
        (st = sj_hybrid_device_alloc(h->ctx, &layout, &s->H)) == SJ_OK) {
        h->out_count = (size_t)(p->m * p->n);
        h->out_rows = p->m;
        h->out_dtype = p->dtype;
    }
    twell_gate_inputs_free(&law);
    return st;
}

static sj_status gate_launch(harness *h, const loaded_kernel *k, void *stream)
{
    gate_state *s = h->state;
    return hybrid_gate_launch(h->ctx, k, &h->problem, s->X, s->WgT, &s->H, stream);
}

/* 0xFF in the ELL and the owners: a slot the kernel should have written reads back as a NaN
 * at column 65535 (past cols, or a repeat), which sj_hybrid_to_dense refuses. The counts, slots,
 * counter and backup are reset by every launch. */
static sj_status gate_poison(harness *h)
{
    gate_state *s = h->state;
    const sj_hybrid_layout *l = &s->H.layout;
    CU_CHECK(cu.cuMemsetD8((CUdeviceptr)s->H.values, 0xFF, l->values_bytes), "poisoning hybrid values");
    CU_CHECK(cu.cuMemsetD8((CUdeviceptr)s->H.columns, 0xFF, l->columns_bytes), "poisoning hybrid columns");
    if (l->backup_rows) CU_CHECK(cu.cuMemsetD8((CUdeviceptr)s->H.owner, 0xFF, l->owner_bytes), "poisoning hybrid owners");
    return SJ_OK;
}

static sj_status gate_read(harness *h, void *host)
{
    gate_state *s = h->state;
    sj_hybrid_host t;
    sj_status st = sj_hybrid_download(h->ctx, &s->H, &t);
    if (st != SJ_OK) return st;
    st = sj_hybrid_to_dense(&t, host, h->problem.n);
    sj_hybrid_host_free(&t);
    return st == SJ_ERR_INVALID_ARGUMENT ? SJ_ERR_VERIFY : st;
}

static sj_status gate_reference(harness *h)
{
    gate_state *s = h->state;
    return twell_gate_reference(h, s->X, &s->Wg);
}

static double gate_flops(const sj_problem *p) { return 2.0 * (double)p->m * (double)p->n * (double)p->k; }

const harness_ops harness_hybrid_gate = {
    .op = SJ_OP_HYBRID_GATE,
    .setup = gate_setup,
    .launch = gate_launch,
    .reference = gate_reference,
    .flops = gate_flops,
    .baseline = harness_baseline_gemm,
    .teardown = gate_teardown,
    .poison = gate_poison,
    .read = gate_read,
};
