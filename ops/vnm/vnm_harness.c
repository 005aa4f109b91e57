/* vnm_harness.c: the harness of V:N:M SpMM (C = alpha * (A_vnm . B + U . Z) + beta * C, the
 * low-rank term only with problem.lowrank_rank = r > 0), the tuner's and every bench's
 * (baseline: the dense GEMM of the same shape, and with a rank the m x n over r GEMM U . Z): a
 * random dense A pruned to V:N:M by magnitude and compressed on the host, random B (and U, Z)
 * written on the device, a launch of a given kernel with the vnm-spmm ABI (values, meta, B
 * rows, B, C, M, N, K, alpha, beta, U, Z; a kernel without a rank takes the first ten), and the
 * reference: templates/gemm_reference.lua over the *decompressed* dense A, plus its U . Z, so
 * the gate shares neither the format's device path nor the sparse kernel's arithmetic. beta = 0
 * (C not read), so the NaN-poisoned output catches unwritten elements; alpha != 1 checks the
 * scaling. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"

#include <stdlib.h>
#include <string.h>

#define VNM_ALPHA 0.75f /* exact in every dtype: the reference scales by it without rounding */

typedef struct vnm_state {
    sj_devptr values, meta, index, B, C;
    sj_devptr U, Z;          /* the low-rank term's operands; 0 without a rank */
    sj_devptr A_dense;       /* the pruned A, for the reference only */
    float alpha, beta;
} vnm_state;

static void vnm_teardown(harness *h)
{
    vnm_state *s = h->state;
    if (!s) return;
    sj_free(h->ctx, s->values);
    sj_free(h->ctx, s->meta);
    sj_free(h->ctx, s->index);
    sj_free(h->ctx, s->B);
    sj_free(h->ctx, s->C);
    sj_free(h->ctx, s->U);
    sj_free(h->ctx, s->Z);
    sj_free(h->ctx, s->A_dense);
    free(s);
    h->state = NULL;
}

static sj_status vnm_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    vnm_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    s->alpha = VNM_ALPHA;
    s->beta = 0.0f;
    sj_vnm_layout layout;
    sj_status st = sj_vnm_layout_init(&layout, p->dtype, p->vnm_v, p->vnm_n, p->vnm_m, p->m, p->k);
    if (st != SJ_OK) return st;
    /* A is pruned and compressed on the host; B goes straight to the device */
    const crng_matrix Ag = { p->dtype, crng_key(seed, 1), p->m, p->k, NULL };
    const crng_matrix Bg = { p->dtype, crng_key(seed, 2), p->k, p->n, NULL };
    size_t a_count = (size_t)(p->m * p->k);
    uint16_t *A = malloc(a_count * sizeof *A);
    sj_vnm_host packed;
    memset(&packed, 0, sizeof packed);
    if (!A) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for a %lldx%lld V:N:M problem", (long long)p->m,
                     (long long)p->k);
        goto done;
    }
    crng_matrix_fill(&Ag, A);
    if ((st = sj_vnm_compress(&layout, A, p->k, SJ_VNM_PRUNE_L2, &packed)) != SJ_OK) goto done;
    /* A now becomes the pruned dense matrix the compressed form stands for. */
    if ((st = sj_vnm_decompress(&packed, A, p->k)) != SJ_OK) goto done;
    if ((st = harness_upload(h->ctx, packed.values, layout.values_bytes, &s->values)) != SJ_OK ||
        (st = harness_upload(h->ctx, packed.meta, layout.meta_bytes, &s->meta)) != SJ_OK ||
        (st = harness_upload(h->ctx, packed.index, layout.index_bytes, &s->index)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &Bg, 0, &s->B)) != SJ_OK ||
        (st = harness_upload(h->ctx, A, a_count * sizeof *A, &s->A_dense)) != SJ_OK)
        goto done;
    if (p->lowrank_rank) {
        const crng_matrix Ug = { p->dtype, crng_key(seed, 3), p->m, p->lowrank_rank, NULL };
        const crng_matrix Zg = { p->dtype, crng_key(seed, 4), p->lowrank_rank, p->n, NULL };
        if ((st = random_device_matrix(h->ctx, &Ug, 0, &s->U)) != SJ_OK ||
            (st = random_device_matrix(h->ctx, &Zg, 0, &s->Z)) != SJ_OK)
            goto done;
    }
    h->out_count = (size_t)(p->m * p->n);
    h->out_rows = p->m;
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->C)) != SJ_OK) goto done;
    h->out = s->C;
done:
    sj_vnm_host_free(&packed);
    free(A);
    return st;
}

static sj_status vnm_launch(harness *h, const loaded_kernel *k, void *stream)
{
    vnm_state *s = h->state;
    int m = (int)h->problem.m, n = (int)h->problem.n, kk = (int)h->problem.k;
    void *args[] = { &s->values, &s->meta, &s->index, &s->B, &s->C, &m, &n, &kk, &s->alpha, &s->beta, &s->U, &s->Z };
    return rt_launch(h->ctx, k, RT_ARGS(args), stream);
}

static sj_status vnm_reference(harness *h)
{
    vnm_state *s = h->state;
    const sj_problem *p = &h->problem;
    h->reference = malloc(h->out_count * sizeof *h->reference);
    if (!h->reference) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the reference");
    sj_status st = harness_reference_gemm(h->ctx, p->dtype, s->A_dense, s->B, p->m, p->n, p->k, h->reference);
    if (st != SJ_OK) return st;
    if (p->lowrank_rank) {
        /* the low-rank term on its own, added in fp32 (a rounding far below the gate) */
        float *uz = malloc(h->out_count * sizeof *uz);
        if (!uz) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the low-rank reference");
        st = harness_reference_gemm(h->ctx, p->dtype, s->U, s->Z, p->m, p->n, p->lowrank_rank, uz);
        for (size_t i = 0; st == SJ_OK && i < h->out_count; i++) h->reference[i] += uz[i];
        free(uz);
        if (st != SJ_OK) return st;
    }
    for (size_t i = 0; i < h->out_count; i++) h->reference[i] *= s->alpha; /* rounding ~6e-8: far below the gate */
    /* The dense copy is needed no longer: give its memory back for the timing. */
    sj_free(h->ctx, s->A_dense);
    s->A_dense = 0;
    return SJ_OK;
}

/* Useful work: the kept N of every M columns, and the low-rank term's r columns. */
static double vnm_flops(const sj_problem *p)
{
    return 2.0 * (double)p->m * (double)p->n * (double)p->k * p->vnm_n / p->vnm_m +
           2.0 * (double)p->m * (double)p->n * p->lowrank_rank;
}

/* The dense layer with its adapters as cuBLAS runs it, given Z: W . X, then U . Z (Z = V . X is
 * the caller's in both). */
static int vnm_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    int n = harness_baseline_gemm(p, steps);
    if (p->lowrank_rank) steps[n++] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->lowrank_rank };
    return n;
}

const harness_ops harness_vnm = {
    .op = SJ_OP_VNM_SPMM,
    .setup = vnm_setup,
    .launch = vnm_launch,
    .reference = vnm_reference,
    .flops = vnm_flops,
    .baseline = vnm_baseline,
    .teardown = vnm_teardown,
};
