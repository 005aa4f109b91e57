/* gemm_harness.c: the harness of dense GEMM (C = A.B, row-major), the tuner's and every bench's:
 * random A and B written on the device (tuner/random_fill.h), a launch of a given kernel with
 * the gemm ABI (A, B, C, M, N, K), the reference from templates/gemm_reference.lua over the
 * same inputs, and the same GEMM on cuBLAS as the baseline. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"

#include <stdlib.h>
#include <string.h>

typedef struct gemm_state {
    sj_devptr A, B, C;
} gemm_state;

static void gemm_teardown(harness *h)
{
    gemm_state *s = h->state;
    if (!s) return;
    sj_free(h->ctx, s->A);
    sj_free(h->ctx, s->B);
    sj_free(h->ctx, s->C);
    free(s);
    h->state = NULL;
}

static sj_status gemm_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    gemm_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    const crng_matrix A = { p->dtype, crng_key(seed, 1), p->m, p->k, NULL };
    const crng_matrix B = { p->dtype, crng_key(seed, 2), p->k, p->n, NULL };
    sj_status st;
    if ((st = random_device_matrix(h->ctx, &A, 0, &s->A)) != SJ_OK) return st;
    if ((st = random_device_matrix(h->ctx, &B, 0, &s->B)) != SJ_OK) return st;
    h->out_count = (size_t)(p->m * p->n);
    h->out_rows = p->m;
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->C)) != SJ_OK) return st;
    h->out = s->C;
    return SJ_OK;
}

static sj_status gemm_launch(harness *h, const loaded_kernel *k, void *stream)
{
    gemm_state *s = h->state;
    int m = (int)h->problem.m, n = (int)h->problem.n, kk = (int)h->problem.k;
    void *args[] = { &s->A, &s->B, &s->C, &m, &n, &kk };
    return rt_launch(h->ctx, k, RT_ARGS(args), stream);
}

static sj_status gemm_reference(harness *h)
{
    gemm_state *s = h->state;
    const sj_problem *p = &h->problem;
    h->reference = malloc(h->out_count * sizeof *h->reference);
    if (!h->reference) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the reference");
    return harness_reference_gemm(h->ctx, p->dtype, s->A, s->B, p->m, p->n, p->k, h->reference);
}

static double gemm_flops(const sj_problem *p) { return 2.0 * (double)p->m * (double)p->n * (double)p->k; }

const harness_ops harness_gemm = {
    .op = SJ_OP_GEMM,
    .setup = gemm_setup,
    .launch = gemm_launch,
    .reference = gemm_reference,
    .flops = gemm_flops,
    .baseline = harness_baseline_gemm,
    .teardown = gemm_teardown,
};
