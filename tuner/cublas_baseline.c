/* cublas_baseline.c: the dense cuBLAS GEMM that sparse kernels are compared against, timed with
 * the tuner's method (measure.c) on random row-major data. libcublas.so.13 is dlopen'ed on first
 * use, so the library loads and works without it and only this call reports its absence. */
#include "tuner/tuner.h"
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"

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

typedef struct gemm_buffers { sj_devptr A, B, C; int m, n, k; } gemm_buffers;

typedef struct seq_run {
    cublasHandle_t handle;
    cudaDataType type;
    int n;
    gemm_buffers *g;
} seq_run;

static sj_status run_seq(void *user)
{
    seq_run *r = user;
    const float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < r->n; i++) {
        const gemm_buffers *g = &r->g[i];
        /* Row-major C = A.B is column-major C^T = B^T.A^T: swap the operands, keep the data. */
        cublasStatus_t s = cb.cublasGemmEx(r->handle, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, &alpha,
                                           (const void *)(uintptr_t)g->B, r->type, g->n,
                                           (const void *)(uintptr_t)g->A, r->type, g->k, &beta,
                                           (void *)(uintptr_t)g->C, r->type, g->n, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) return cublas_fail(s, "cublasGemmEx");
    }
    return SJ_OK;
}

sj_status cublas_gemm_seq_time(sj_context *ctx, sj_dtype dtype, int n_gemms, const int64_t shapes[][3],
                                  const measure_options *opts, measure_result *out)
{
    if (!ctx || !shapes || !out || n_gemms < 1 || n_gemms > 16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cublas_gemm_seq_time: ctx, shapes and out must be set and "
                                                "n_gemms in 1..16 (got %d)", n_gemms);
    if (dtype != SJ_DTYPE_F16 && dtype != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cuBLAS baseline: dtype must be f16 or bf16");
    for (int i = 0; i < n_gemms; i++)
        for (int d = 0; d < 3; d++)
            if (shapes[i][d] < 1 || shapes[i][d] > INT32_MAX)
                return error_set(SJ_ERR_INVALID_ARGUMENT, "cuBLAS baseline: GEMM %d has dimension %lld, expected 1..2^31-1",
                               i, (long long)shapes[i][d]);
    sj_status st = rt_require_gpu(ctx, "the cuBLAS baseline");
    if (st != SJ_OK) return st;
    cublasHandle_t handle = NULL;
    if ((st = get_handle(ctx, &handle)) != SJ_OK) return st;
    cublasStatus_t cs = cb.cublasSetStream_v2(handle, NULL);
    if (cs != CUBLAS_STATUS_SUCCESS) return cublas_fail(cs, "cublasSetStream");

    gemm_buffers g[16];
    memset(g, 0, sizeof g);
    uint64_t rng = 0x243f6a8885a308d3ull;
    for (int i = 0; i < n_gemms && st == SJ_OK; i++) {
        g[i].m = (int)shapes[i][0];
        g[i].n = (int)shapes[i][1];
        g[i].k = (int)shapes[i][2];
        if ((st = harness_random_device16(ctx, dtype, (size_t)g[i].m * (size_t)g[i].k, &rng, &g[i].A)) != SJ_OK ||
            (st = harness_random_device16(ctx, dtype, (size_t)g[i].k * (size_t)g[i].n, &rng, &g[i].B)) != SJ_OK)
            break;
        st = sj_malloc(ctx, (size_t)g[i].m * (size_t)g[i].n * 2, &g[i].C);
    }
    measure_session ms;
    int session = 0;
    if (st == SJ_OK && (st = measure_begin(ctx, &ms)) == SJ_OK) session = 1;
    if (st == SJ_OK) {
        measure_options mo;
        if (opts) mo = *opts;
        else measure_options_init(&mo);
        seq_run r = { handle, dtype == SJ_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F, n_gemms, g };
        st = measure_run(&ms, &mo, run_seq, &r, out);
    }
    if (session) measure_end(&ms);
    for (int i = 0; i < n_gemms; i++) {
        sj_free(ctx, g[i].A);
        sj_free(ctx, g[i].B);
        sj_free(ctx, g[i].C);
    }
    return st;
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
