/* vnm_dw_harness.c: the harness of the sampled weight gradient (vnm-dw: dW = dY . X^T at W's
 * kept slots, into W's value layout), the tuner's and every bench's (baseline: the dense GEMM
 * dY . X^T it samples, m x n over k tokens): a random W pruned to V:N:M on the host (its
 * metadata and index on the device), random dY (m x k) and X (n x k) written on the device
 * (tuner/random_fill.h), a launch of a given kernel with the vnm-dw ABI (dY, X, meta, index,
 * dW values, M, N, K), and the reference:
 * templates/gemm_reference.lua's dense dY . X^T (with X^T, k x n, generated transposed for it
 * alone), gathered into the value layout on the host through the host's compressed form.
 * It shares neither the gathering of X nor the epilogue's slot choice with the kernel. The output
 * is every value slot (padding ones are 0), so the poisoned buffer catches any slot not written. */
#include "tuner/harness.h"
#include "core/error.h"
#include "ops/vnm/vnm.h"
#include "ops/vnm/vnm_format.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"

#include <stdlib.h>
#include <string.h>

typedef struct dw_state {
    sj_vnm_host w;           /* host copy of W: the slots the reference gathers */
    sj_devptr meta, index, dY, X, dW;
    sj_devptr Xt;            /* X^T (k x n), for the reference only */
} dw_state;

static void dw_teardown(harness *h)
{
    dw_state *s = h->state;
    if (!s) return;
    sj_devptr ptrs[] = { s->meta, s->index, s->dY, s->X, s->dW, s->Xt };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) sj_free(h->ctx, ptrs[i]);
    sj_vnm_host_free(&s->w);
    free(s);
    h->state = NULL;
}

sj_status vnm_harness_weight(const sj_problem *p, uint64_t seed, sj_vnm_host *w)
{
    sj_vnm_layout layout;
    sj_status st = sj_vnm_layout_init(&layout, p->dtype, p->vnm_v, p->vnm_n, p->vnm_m, p->m, p->n);
    if (st != SJ_OK) return st;
    const crng_matrix Wg = { p->dtype, crng_key(seed, 1), p->m, p->n, NULL };
    uint16_t *W = malloc((size_t)(p->m * p->n) * sizeof *W);
    if (!W)
        return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for a %lldx%lld V:N:M weight", (long long)p->m,
                         (long long)p->n);
    crng_matrix_fill(&Wg, W);
    st = sj_vnm_compress(&layout, W, p->n, SJ_VNM_PRUNE_L2, w);
    free(W);
    return st;
}

static sj_status dw_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    dw_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    /* W is pruned and compressed on the host; dY, X and X^T are written on the device */
    const crng_matrix dYg = { p->dtype, crng_key(seed, 2), p->m, p->k, NULL };
    const crng_matrix Xg = { p->dtype, crng_key(seed, 3), p->n, p->k, NULL };
    sj_status st = vnm_harness_weight(p, seed, &s->w);
    if (st != SJ_OK) return st;
    const sj_vnm_layout layout = s->w.layout;
    if ((st = harness_upload(h->ctx, s->w.meta, layout.meta_bytes, &s->meta)) != SJ_OK ||
        (st = harness_upload(h->ctx, s->w.index, layout.index_bytes, &s->index)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &dYg, 0, &s->dY)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &Xg, 0, &s->X)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &Xg, 1, &s->Xt)) != SJ_OK)
        return st;
    h->out_count = layout.values_bytes / 2;
    h->out_rows = vnm_rows_padded(&layout);
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->dW)) != SJ_OK) return st;
    h->out = s->dW;
    return SJ_OK;
}

static sj_status dw_launch(harness *h, const loaded_kernel *k, void *stream)
{
    dw_state *s = h->state;
    return vnm_dw_launch(h->ctx, k, &h->problem, s->dY, s->X, s->meta, s->index, s->dW, stream);
}

static sj_status dw_reference(harness *h)
{
    dw_state *s = h->state;
    const sj_problem *p = &h->problem;
    const sj_vnm_layout *l = &s->w.layout;
    float *full = malloc((size_t)(p->m * p->n) * sizeof *full);
    h->reference = malloc(h->out_count * sizeof *h->reference);
    if (!full || !h->reference) {
        free(full);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the reference");
    }
    sj_status st = harness_reference_gemm(h->ctx, p->dtype, s->dY, s->Xt, p->m, p->n, p->k, full);
    if (st == SJ_OK) {
        for (int64_t r = 0; r < vnm_rows_padded(l); r++)
            for (int64_t g = 0; g < vnm_groups_padded(l); g++)
                for (int half = 0; half < 2; half++) {
                    int32_t c = r < l->rows && g < l->groups ? vnm_slot_column(l, s->w.meta, s->w.index, r, g, half) : -1;
                    h->reference[vnm_value_at(l, r, g, half)] = c >= 0 ? full[r * p->n + c] : 0.0f;
                }
    }
    free(full);
    /* X^T is needed no longer: give its memory back for the timing. */
    sj_free(h->ctx, s->Xt);
    s->Xt = 0;
    return st;
}

/* Useful work: the 2 kept slots of every M columns of every row, over the tokens. */
static double dw_flops(const sj_problem *p)
{
    return 2.0 * (double)p->m * (double)p->n * (double)p->k * p->vnm_n / p->vnm_m;
}

const harness_ops harness_vnm_dw = {
    .op = SJ_OP_VNM_DW,
    .setup = dw_setup,
    .launch = dw_launch,
    .reference = dw_reference,
    .flops = dw_flops,
    .baseline = harness_baseline_gemm,
    .teardown = dw_teardown,
};
