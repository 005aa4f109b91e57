/* vnm_bench.c: bench_op_vnm, what `sparsejit bench --op vnm-spmm --vnm V:N:M` times: C = A.B
 * through sj_vnm_spmm, with A a random dense rows x K matrix (uniform [-1, 1), never zeros)
 * pruned to V:N:M by magnitude on the GPU (sj_vnm_compress_device), against the dense GEMM of
 * the same shape through cuBLAS; the first launch's C is checked element by element against the
 * tuner's reference kernel on the dense matrix the compressed A stands for. */
#include "tuner/harness.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct bench_case {
    sj_problem p;
    sj_vnm_device A;
    sj_devptr B, C;
};

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    if (c->A.values) sj_vnm_device_free(ctx, &c->A);
    if (c->B) sj_free(ctx, c->B);
    if (c->C) sj_free(ctx, c->C);
    free(c);
}

static sj_status setup(sj_context *ctx, const sj_problem *p, bench_case **out)
{
    *out = NULL;
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_VNM_SPMM)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench vnm-spmm: problem op is %s, expected vnm-spmm", sj_op_name(p->op));
    sj_vnm_layout l;
    if ((st = sj_vnm_layout_init(&l, p->dtype, p->vnm_v, p->vnm_n, p->vnm_m, p->m, p->k)) != SJ_OK) return st;
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench vnm-spmm: no host memory");
    c->p = *p;
    uint64_t rng = ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)getpid();
    if (!rng) rng = 1;
    sj_devptr dense = 0;
    size_t out_bytes = (size_t)(p->m * p->n) * sj_dtype_size(p->out_dtype);
    if ((st = harness_random_device16(ctx, p->dtype, (size_t)(p->m * p->k), &rng, &dense)) != SJ_OK ||
        (st = sj_vnm_compress_device(ctx, &l, dense, p->k, SJ_VNM_PRUNE_L2, &c->A, NULL)) != SJ_OK ||
        (st = harness_random_device16(ctx, p->dtype, (size_t)(p->k * p->n), &rng, &c->B)) != SJ_OK ||
        (st = sj_malloc(ctx, out_bytes, &c->C)) != SJ_OK ||
        (st = sj_memset_u8(ctx, c->C, 0xFF, out_bytes)) != SJ_OK) { /* NaN: an unwritten element fails the check */
        if (dense) sj_free(ctx, dense);
        teardown(ctx, c);
        return st;
    }
    if ((st = sj_free(ctx, dense)) != SJ_OK) {
        teardown(ctx, c);
        return st;
    }
    *out = c;
    return SJ_OK;
}

static sj_status launch(sj_context *ctx, bench_case *c)
{
    return sj_vnm_spmm(ctx, &c->p, &c->A, c->B, c->C, 1.0f, 0.0f, NULL);
}

/* Every element of C against the reference kernel's fp32 C for the same B and the dense A that
 * the compressed A stands for: downloaded and expanded on the host by sj_vnm_decompress, which
 * shares no code with the SpMM kernel or the GPU compressor. */
static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    const sj_problem *p = &c->p;
    size_t na = (size_t)(p->m * p->k), n = (size_t)(p->m * p->n);
    size_t a_bytes = na * sj_dtype_size(p->dtype), out_bytes = n * sj_dtype_size(p->out_dtype);
    sj_vnm_host h = { 0 };
    sj_devptr dense_dev = 0;
    void *dense = malloc(a_bytes), *got = malloc(out_bytes);
    float *ref = malloc(n * sizeof *ref);
    sj_status st = dense && got && ref ? SJ_OK : error_set(SJ_ERR_OUT_OF_MEMORY, "bench vnm-spmm: no host memory for the check");
    if (st == SJ_OK) st = sj_vnm_download(ctx, &c->A, &h);
    if (st == SJ_OK) st = sj_vnm_decompress(&h, dense, p->k);
    if (st == SJ_OK) st = sj_malloc(ctx, a_bytes, &dense_dev);
    if (st == SJ_OK) st = sj_memcpy_htod(ctx, dense_dev, dense, a_bytes);
    if (st == SJ_OK) st = harness_reference_gemm(ctx, p->dtype, dense_dev, c->B, p->m, p->n, p->k, ref);
    if (st == SJ_OK) st = sj_memcpy_dtoh(ctx, got, c->C, out_bytes);
    if (st == SJ_OK) *rel_error = harness_rel_error(p->out_dtype, got, ref, n);
    if (dense_dev) {
        sj_status fs = sj_free(ctx, dense_dev);
        if (st == SJ_OK) st = fs;
    }
    sj_vnm_host_free(&h);
    free(dense);
    free(got);
    free(ref);
    return st;
}

/* Useful work: the kept N of every M columns. */
static double flops(const sj_problem *p)
{
    return 2.0 * (double)p->m * (double)p->n * (double)p->k * p->vnm_n / p->vnm_m;
}

static int baseline(const sj_problem *p, int64_t shapes[4][3])
{
    shapes[0][0] = p->m;
    shapes[0][1] = p->n;
    shapes[0][2] = p->k;
    return 1;
}

const bench_op bench_op_vnm = {
    .op = SJ_OP_VNM_SPMM,
    .setup = setup,
    .launch = launch,
    .flops = flops,
    .baseline = baseline,
    .check = check,
    .teardown = teardown,
};
