/* cublas_baseline.c: the dense work that sparse kernels are compared against, timed with the
 * tuner's method (measure.c) on random row-major data: cuBLAS GEMMs and, between a dense FFN's
 * GEMMs, its element-wise product (templates/ewise_product.lua; cuBLAS has none). The data is
 * written on the device by the counter-based generator (random_fill.h) once per baseline opened,
 * and a bench's rounds time the same buffers again. libcublas.so.13
 * is dlopen'ed on first use, so the library loads and works without it and only this call
 * reports its absence. */
#include "tuner/tuner.h"
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"

#include <cublas_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUBLAS_FUNCTIONS(X) X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasGemmEx) \
    X(cublasGetStatusString)

static struct {
#define CUBLAS_MEMBER(name) __typeof__(&name) name;
    CUBLAS_FUNCTIONS(CUBLAS_MEMBER)
#undef CUBLAS_MEMBER
} cb;

static pthread_once_t cb_once = PTHREAD_ONCE_INIT;
static char cb_error[512];
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
/* One handle for the process, bound to the primary context of the device it was made on. */
static cublasHandle_t cb_handle;
static CUdevice cb_device = -1;

static void load_cublas(void)
{
    const char *names[] = { "libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so" };
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cb_error, sizeof cb_error, "the cuBLAS baseline needs libcublas.so.13 (CUDA 13 toolkit): %s", dlerror());
        return;
    }
#define CUBLAS_RESOLVE(name)                                                             \
    if (!(cb.name = (__typeof__(cb.name))dlsym(h, #name))) {                             \
        snprintf(cb_error, sizeof cb_error, "libcublas.so.13 lacks %s", #name);          \
        return;                                                                          \
    }
    CUBLAS_FUNCTIONS(CUBLAS_RESOLVE)
#undef CUBLAS_RESOLVE
}

static sj_status cublas_fail(cublasStatus_t s, const char *what)
{
    return error_set(SJ_ERR_CUDA, "%s: %s (cuBLAS status %d)", what, cb.cublasGetStatusString(s), (int)s);
}

static sj_status get_handle(sj_context *ctx, cublasHandle_t *out)
{
    pthread_once(&cb_once, load_cublas);
    if (cb_error[0]) return error_set(SJ_ERR_UNSUPPORTED, "%s", cb_error);
    sj_status st = SJ_OK;
    pthread_mutex_lock(&cb_mu);
    if (cb_handle && cb_device != ctx->device) {
        cb.cublasDestroy_v2(cb_handle);
        cb_handle = NULL;
    }
    if (!cb_handle) {
        cublasStatus_t s = cb.cublasCreate_v2(&cb_handle);
        if (s != CUBLAS_STATUS_SUCCESS) {
            cb_handle = NULL;
            st = cublas_fail(s, "cublasCreate");
        } else {
            cb_device = ctx->device;
        }
    }
    *out = cb_handle;
    pthread_mutex_unlock(&cb_mu);
    return st;
}

/* One step's buffers (random inputs, its own output) and, for a product, its kernel. */
typedef struct step_buffers {
    baseline_step s;
    sj_devptr A, B, C;
    const loaded_kernel *k;
} step_buffers;

typedef struct seq_run {
    sj_context *ctx;
    cublasHandle_t handle;
    cudaDataType type;
    int n;
    step_buffers *b;
} seq_run;

static sj_status run_seq(void *user)
{
    seq_run *r = user;
    const float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < r->n; i++) {
        step_buffers *b = &r->b[i];
        if (b->s.kind != BASELINE_GEMM) {
            long long count = (long long)(b->s.m * b->s.n);
            int relu = b->s.kind == BASELINE_RELU_PRODUCT;
            void *args[] = { &b->A, &b->B, &b->C, &count, &relu };
            sj_status st = rt_launch(r->ctx, b->k, RT_ARGS(args), NULL);
            if (st != SJ_OK) return st;
            continue;
        }
        /* Row-major C = A.B is column-major C^T = B^T.A^T: swap the operands, keep the data. */
        int m = (int)b->s.m, n = (int)b->s.n, k = (int)b->s.k;
        cublasStatus_t s = cb.cublasGemmEx(r->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                           (const void *)(uintptr_t)b->B, r->type, n,
                                           (const void *)(uintptr_t)b->A, r->type, k, &beta,
                                           (void *)(uintptr_t)b->C, r->type, n, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) return cublas_fail(s, "cublasGemmEx");
    }
    return SJ_OK;
}

/* NULL when the step is well formed, else what is wrong with it. */
static const char *step_problem(const baseline_step *s)
{
    if (s->kind != BASELINE_GEMM && s->kind != BASELINE_PRODUCT && s->kind != BASELINE_RELU_PRODUCT)
        return "an unknown kind (expected a GEMM or an element-wise product)";
    if (s->m < 1 || s->m > INT32_MAX || s->n < 1 || s->n > INT32_MAX ||
        (s->kind == BASELINE_GEMM && (s->k < 1 || s->k > INT32_MAX)))
        return "a dimension outside 1..2^31-1";
    return NULL;
}

/* Allocates a step's buffers, writes its inputs on the device and, for a product, builds its
 * kernel (through the request path, under its own template: compiled once per shape, then from
 * the cache). */
static sj_status step_open(sj_context *ctx, sj_dtype dtype, int i, step_buffers *b)
{
    const baseline_step *s = &b->s;
    int gemm = s->kind == BASELINE_GEMM;
    const crng_matrix A = { dtype, crng_key(0x243f6a8885a308d3ull, (uint64_t)(2 * i)), s->m, gemm ? s->k : s->n, NULL };
    const crng_matrix B = { dtype, crng_key(0x243f6a8885a308d3ull, (uint64_t)(2 * i + 1)), gemm ? s->k : s->m, s->n,
                            NULL };
    sj_status st;
    if ((st = random_device_matrix(ctx, &A, 0, &b->A)) != SJ_OK ||
        (st = random_device_matrix(ctx, &B, 0, &b->B)) != SJ_OK ||
        (st = sj_malloc(ctx, (size_t)s->m * (size_t)s->n * 2, &b->C)) != SJ_OK || gemm)
        return st;
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, dtype, s->m, s->n, 1);
    st = rt_kernel_with_config(ctx, &p, "ewise_product", "", &b->k);
    return st == SJ_OK ? SJ_OK : error_prefix(st, "the baseline's element-wise product");
}

struct cublas_baseline {
    seq_run run;
    step_buffers b[BASELINE_MAX];
};

void cublas_baseline_close(cublas_baseline *bl)
{
    if (!bl) return;
    for (int i = 0; i < bl->run.n; i++) {
        sj_free(bl->run.ctx, bl->b[i].A);
        sj_free(bl->run.ctx, bl->b[i].B);
        sj_free(bl->run.ctx, bl->b[i].C);
    }
    free(bl);
}

sj_status cublas_baseline_open(sj_context *ctx, sj_dtype dtype, int n_steps, const baseline_step *steps,
                               cublas_baseline **out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_baseline_open: out is NULL");
    *out = NULL;
    if (!ctx || !steps || n_steps < 1 || n_steps > BASELINE_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cuBLAS baseline: ctx and steps must be set and n_steps in 1..%d "
                                                "(got %d)", BASELINE_MAX, n_steps);
    if (dtype != SJ_DTYPE_F16 && dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cuBLAS baseline: dtype must be f16 or bf16");
    for (int i = 0; i < n_steps; i++) {
        const char *why = step_problem(&steps[i]);
        if (why)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "cuBLAS baseline: step %d (%lld x %lld x %lld) has %s", i,
                             (long long)steps[i].m, (long long)steps[i].n, (long long)steps[i].k, why);
    }
    sj_status st = rt_require_gpu(ctx, "the cuBLAS baseline");
    if (st != SJ_OK) return st;
    cublasHandle_t handle = NULL;
    if ((st = get_handle(ctx, &handle)) != SJ_OK) return st;
    cublas_baseline *bl = calloc(1, sizeof *bl);
    if (!bl) return error_set(SJ_ERR_OUT_OF_MEMORY, "cuBLAS baseline: out of host memory");
    bl->run = (seq_run){ ctx, handle, dtype == SJ_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F, 0, bl->b };
    for (int i = 0; i < n_steps && st == SJ_OK; i++) {
        bl->b[i].s = steps[i];
        bl->run.n = i + 1; /* what close frees */
        st = step_open(ctx, dtype, i, &bl->b[i]);
    }
    if (st != SJ_OK) {
        cublas_baseline_close(bl);
        return st;
    }
    *out = bl;
    return SJ_OK;
}

sj_status cublas_baseline_run(cublas_baseline *bl, const measure_options *opts, measure_result *out)
{
    if (!bl || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_baseline_run: baseline and out must be set");
    return cublas_baseline_run_steps(bl, 0, bl->run.n, opts, out);
}

sj_status cublas_baseline_run_steps(cublas_baseline *bl, int first, int count, const measure_options *opts,
                                    measure_result *out)
{
    if (!bl || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_baseline_run_steps: baseline and out must be set");
    if (first < 0 || count < 1 || first + count > bl->run.n)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_baseline_run_steps: steps %d..%d: expected a range within "
                         "0..%d", first, first + count - 1, bl->run.n - 1);
    seq_run part = bl->run;
    part.b += first;
    part.n = count;
    /* the handle is the process's: bind it to the default stream again, as another user may not have */
    cublasStatus_t cs = cb.cublasSetStream_v2(bl->run.handle, NULL);
    if (cs != CUBLAS_STATUS_SUCCESS) return cublas_fail(cs, "cublasSetStream");
    measure_session ms;
    sj_status st = measure_begin(bl->run.ctx, &ms);
    if (st != SJ_OK) return st;
    measure_options mo;
    if (opts) mo = *opts;
    else measure_options_init(&mo);
    st = measure_run(&ms, &mo, run_seq, &part, out);
    measure_end(&ms);
    return st;
}

sj_status cublas_baseline_time(sj_context *ctx, sj_dtype dtype, int n_steps, const baseline_step *steps,
                               const measure_options *opts, measure_result *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_baseline_time: out is NULL");
    cublas_baseline *bl;
    sj_status st = cublas_baseline_open(ctx, dtype, n_steps, steps, &bl);
    if (st != SJ_OK) return st;
    st = cublas_baseline_run(bl, opts, out);
    cublas_baseline_close(bl);
    return st;
}

sj_status cublas_gemm_seq_time(sj_context *ctx, sj_dtype dtype, int n_gemms, const int64_t shapes[][3],
                                  const measure_options *opts, measure_result *out)
{
    if (!shapes || n_gemms < 1 || n_gemms > BASELINE_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_gemm_seq_time: shapes must be set and n_gemms in 1..%d "
                                                "(got %d)", BASELINE_MAX, n_gemms);
    baseline_step steps[BASELINE_MAX];
    for (int i = 0; i < n_gemms; i++) steps[i] = (baseline_step){ BASELINE_GEMM, shapes[i][0], shapes[i][1], shapes[i][2] };
    return cublas_baseline_time(ctx, dtype, n_gemms, steps, opts, out);
}

sj_status cublas_gemm_time(sj_context *ctx, sj_dtype dtype, int64_t m, int64_t n, int64_t k, double *median_us)
{
    if (!median_us) return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_gemm_time: median_us is NULL");
    const int64_t shape[1][3] = { { m, n, k } };
    measure_result r;
    sj_status st = cublas_gemm_seq_time(ctx, dtype, 1, shape, NULL, &r);
    if (st == SJ_OK) *median_us = r.median_us;
    return st;
}
