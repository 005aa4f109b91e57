/* vnm_dx_harness.c: the harness of the exact input gradient from W's compressed form (vnm-dx:
 * dX = W^T . dY, n x k over m), the tuner's and every bench's (baseline: the dense GEMM W^T . dY
 * it replaces, n x k over m): a random W pruned to V:N:M on the host (its values, metadata and
 * index on the device), random dY (m x k) written on the device (tuner/random_fill.h), a launch
 * of a given kernel with the vnm-dx ABI (values, meta, index, dY, dX, M, N, K), and the reference:
 * for the tuner's gate (every element) templates/gemm_reference.lua over the decompressed W^T
 * and the device's dY; for the benches the fp64 host product of only the sampled rows of dX
 * (vnm_step_reference_dx, the exact rule), which generates only the dY rows they read. Neither
 * builds the compact rows or reads the index as the kernel does. The output is every element of
 * dX, so the poisoned buffer catches any element not written. */
#include "tuner/harness.h"
#include "core/error.h"
#include "ops/vnm/vnm.h"
#include "ops/vnm/vnm_step_reference.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"

#include <stdlib.h>
#include <string.h>

typedef struct dx_state {
    sj_vnm_host w;           /* host copy of W: what the reference walks */
    crng_matrix dYg;         /* dY's law */
    sj_devptr values, meta, index, dY, dX;
} dx_state;

static void dx_teardown(harness *h)
{
    dx_state *s = h->state;
    if (!s) return;
    sj_devptr ptrs[] = { s->values, s->meta, s->index, s->dY, s->dX };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) sj_free(h->ctx, ptrs[i]);
    sj_vnm_host_free(&s->w);
    free(s);
    h->state = NULL;
}

static sj_status dx_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    dx_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    s->dYg = (crng_matrix){ p->dtype, crng_key(seed, 2), p->m, p->k, NULL };
    sj_status st = vnm_harness_weight(p, seed, &s->w);
    if (st != SJ_OK) return st;
    const sj_vnm_layout layout = s->w.layout;
    if ((st = harness_upload(h->ctx, s->w.values, layout.values_bytes, &s->values)) != SJ_OK ||
        (st = harness_upload(h->ctx, s->w.meta, layout.meta_bytes, &s->meta)) != SJ_OK ||
        (st = harness_upload(h->ctx, s->w.index, layout.index_bytes, &s->index)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &s->dYg, 0, &s->dY)) != SJ_OK)
        return st;
    h->out_count = (size_t)(p->n * p->k);
    h->out_rows = p->n;
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->dX)) != SJ_OK) return st;
    h->out = s->dX;
    return SJ_OK;
}

static sj_status dx_launch(harness *h, const loaded_kernel *k, void *stream)
{
    dx_state *s = h->state;
    int m = (int)h->problem.m, n = (int)h->problem.n, kk = (int)h->problem.k;
    void *args[] = { &s->values, &s->meta, &s->index, &s->dY, &s->dX, &m, &n, &kk };
    return rt_launch(h->ctx, k, RT_ARGS(args), stream);
}

/* Every element (the tuner's gate): templates/gemm_reference.lua over W^T, decompressed and
 * transposed on the host, and the dY on the device. An fp64 host product would take minutes at
 * the layer shapes (n k m multiply-adds on one core); the reference kernel shares no code with
 * vnm-dx, so it stays independent of what it checks. */
static sj_status whole_reference(harness *h)
{
    dx_state *s = h->state;
    const sj_problem *p = &h->problem;
    const size_t count = (size_t)(p->m * p->n);
    uint16_t *w = malloc(count * sizeof *w), *wt = malloc(count * sizeof *wt);
    h->reference = malloc(h->out_count * sizeof *h->reference);
    sj_status st = SJ_OK;
    if (!w || !wt || !h->reference)
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the vnm-dx reference");
    if (st == SJ_OK) st = sj_vnm_decompress(&s->w, w, p->n);
    if (st == SJ_OK)
        for (int64_t r = 0; r < p->m; r++)
            for (int64_t c = 0; c < p->n; c++) wt[c * p->m + r] = w[r * p->n + c];
    sj_devptr Wt = 0;
    if (st == SJ_OK && (st = harness_upload(h->ctx, wt, count * sizeof *wt, &Wt)) == SJ_OK)
        st = harness_reference_gemm(h->ctx, p->dtype, Wt, s->dY, p->n, p->k, p->m, h->reference);
    if (Wt) sj_free(h->ctx, Wt);
    free(w);
    free(wt);
    return st;
}

/* The sampled rows of dX, one after the other. */
static sj_status sampled_reference(harness *h)
{
    dx_state *s = h->state;
    vnm_step_sample sample;
    sj_status st = vnm_step_reference_dx(&s->w, &s->dYg, VNM_DX_EXACT, &sample);
    if (st != SJ_OK) return st;
    const size_t count = (size_t)(sample.dx_rows * sample.tokens);
    if ((h->reference = malloc(count * sizeof *h->reference))) memcpy(h->reference, sample.dx, count * sizeof *h->reference);
    vnm_step_sample_free(&sample);
    if (!h->reference) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the vnm-dx reference");
    h->ref_sampled = 1;
    return SJ_OK;
}

static sj_status dx_reference(harness *h)
{
    return h->mode == HARNESS_REFERENCE_SAMPLED ? sampled_reference(h) : whole_reference(h);
}

/* Useful work: the 2 kept values of every M columns of every row of W, over the tokens. */
static double dx_flops(const sj_problem *p)
{
    return 2.0 * (double)p->m * (double)p->n * (double)p->k * p->vnm_n / p->vnm_m;
}

/* The dense dX it replaces: W^T . dY, in x tokens over out. */
static int dx_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->n, p->k, p->m };
    return 1;
}

const harness_ops harness_vnm_dx = {
    .op = SJ_OP_VNM_DX,
    .setup = dx_setup,
    .launch = dx_launch,
    .reference = dx_reference,
    .flops = dx_flops,
    .baseline = dx_baseline,
    .teardown = dx_teardown,
};
