/* gemm_bench.c: bench_op_gemm, what `sparsejit bench --op gemm` times: C = A.B through sj_gemm on
 * random A and B (uniform [-1, 1), never zeros, which would run faster than real data), against
 * the same GEMM through cuBLAS; the first launch's C is checked element by element against the
 * tuner's reference kernel (templates/gemm_reference.lua, fp32) before anything is timed. */
#include "tuner/harness.h"
#include "core/error.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct bench_case {
    sj_problem p;
    sj_devptr A, B, C;
};

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    if (c->A) sj_free(ctx, c->A);
    if (c->B) sj_free(ctx, c->B);
    if (c->C) sj_free(ctx, c->C);
    free(c);
}

static sj_status setup(sj_context *ctx, const sj_problem *p, bench_case **out)
{
    *out = NULL;
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_GEMM) return error_set(SJ_ERR_INVALID_ARGUMENT, "bench gemm: problem op is %s, expected gemm", sj_op_name(p->op));
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench gemm: no host memory");
    c->p = *p;
    uint64_t rng = ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)getpid();
    if (!rng) rng = 1;
    size_t out_bytes = (size_t)(p->m * p->n) * sj_dtype_size(p->out_dtype);
    if ((st = harness_random_device16(ctx, p->dtype, (size_t)(p->m * p->k), &rng, &c->A)) != SJ_OK ||
        (st = harness_random_device16(ctx, p->dtype, (size_t)(p->k * p->n), &rng, &c->B)) != SJ_OK ||
        (st = sj_malloc(ctx, out_bytes, &c->C)) != SJ_OK ||
        (st = sj_memset_u8(ctx, c->C, 0xFF, out_bytes)) != SJ_OK) { /* NaN: an unwritten element fails the check */
        teardown(ctx, c);
        return st;
    }
    *out = c;
    return SJ_OK;
}

static sj_status launch(sj_context *ctx, bench_case *c)
{
    return sj_gemm(ctx, &c->p, c->A, c->B, c->C, NULL);
}

/* Every element of C against the reference kernel's fp32 C for the same A and B. */
static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    const sj_problem *p = &c->p;
    size_t n = (size_t)(p->m * p->n), out_bytes = n * sj_dtype_size(p->out_dtype);
    float *ref = malloc(n * sizeof *ref);
    void *got = malloc(out_bytes);
    sj_status st = ref && got ? SJ_OK : error_set(SJ_ERR_OUT_OF_MEMORY, "bench gemm: no host memory for the check");
    if (st == SJ_OK) st = harness_reference_gemm(ctx, p->dtype, c->A, c->B, p->m, p->n, p->k, ref);
    if (st == SJ_OK) st = sj_memcpy_dtoh(ctx, got, c->C, out_bytes);
    if (st == SJ_OK) *rel_error = harness_rel_error(p->out_dtype, got, ref, n);
    free(ref);
    free(got);
    return st;
}

static double flops(const sj_problem *p) { return 2.0 * (double)p->m * (double)p->n * (double)p->k; }

static int baseline(const sj_problem *p, int64_t shapes[4][3])
{
    shapes[0][0] = p->m;
    shapes[0][1] = p->n;
    shapes[0][2] = p->k;
    return 1;
}

const bench_op bench_op_gemm = {
    .op = SJ_OP_GEMM,
    .setup = setup,
    .launch = launch,
    .flops = flops,
    .baseline = baseline,
    .check = check,
    .teardown = teardown,
};
