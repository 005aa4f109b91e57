/* test_context_gpu.c: sparsejit leaves the calling thread's current CUDA context as it found it
 * (runtime/runtime.h, RT_USE_CONTEXT): none current before a call, none after; a context
 * of the caller's own (cuCtxCreate) current before, the same one after, also across creating and
 * destroying a second sparsejit context. The work done meanwhile (a GEMM on the primary context)
 * is checked against fp64 so a call that skipped its work cannot pass. The caller's context and
 * the driver calls it needs come from libcuda directly, as a caller's would. */
#include "test_util.h"
#include "runtime/cuda_driver.h"

#include <dlfcn.h>
#include <stdlib.h>

static uint64_t rng;

static CUcontext current(void)
{
    CUcontext c = (CUcontext)(uintptr_t)1; /* not a context: a failed query cannot pass */
    assert_int_equal(cu.cuCtxGetCurrent(&c), CUDA_SUCCESS);
    return c;
}

#define ASSERT_KEPT(call, expected)                                                           \
    do {                                                                                      \
        SJ_ASSERT_OK(call);                                                                   \
        if (current() != (expected)) fail_msg("%s changed the caller's current context", #call); \
    } while (0)

/* A 200 x 136 x 72 f16 GEMM through every kind of entry point (memory, op, sync), each checked to
 * leave `expected` current; the result against fp64. */
static void gemm_keeping(sj_context *ctx, CUcontext expected)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 200, 136, 72);
    size_t na = (size_t)(p.m * p.k), nb = (size_t)(p.k * p.n), nc = (size_t)(p.m * p.n);
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2), *C = malloc(nc * 2);
    double *ref = malloc(nc * sizeof(double));
    assert_true(A && B && C && ref);
    tu_fill16(p.dtype, A, na, 1.0f, &rng);
    tu_fill16(p.dtype, B, nb, 1.0f, &rng);
    tu_ref_gemm16(p.dtype, A, B, ref, p.m, p.n, p.k);
    sj_devptr dA, dB, dC;
    ASSERT_KEPT(sj_malloc(ctx, na * 2, &dA), expected);
    ASSERT_KEPT(sj_malloc(ctx, nb * 2, &dB), expected);
    ASSERT_KEPT(sj_malloc(ctx, nc * 2, &dC), expected);
    ASSERT_KEPT(sj_memcpy_htod(ctx, dA, A, na * 2), expected);
    ASSERT_KEPT(sj_memcpy_htod(ctx, dB, B, nb * 2), expected);
    ASSERT_KEPT(sj_memset_u8(ctx, dC, 0xFF, nc * 2), expected);
    ASSERT_KEPT(sj_gemm(ctx, &p, dA, dB, dC, NULL), expected);
    ASSERT_KEPT(sj_synchronize(ctx), expected);
    ASSERT_KEPT(sj_memcpy_dtoh(ctx, C, dC, nc * 2), expected);
    double err = tu_rel_error(SJ_DTYPE_F16, C, ref, nc);
    if (!(err < 2e-3)) fail_msg("GEMM relative error %.3g (limit 2e-3)", err);
    ASSERT_KEPT(sj_free(ctx, dA), expected);
    ASSERT_KEPT(sj_free(ctx, dB), expected);
    ASSERT_KEPT(sj_free(ctx, dC), expected);
    /* A refused call keeps it too (the restore runs on every return path). */
    SJ_ASSERT_STATUS(sj_memset_u8(ctx, 0, 0, 16), SJ_ERR_INVALID_ARGUMENT, "dst");
    assert_ptr_equal(current(), expected);
    free(A);
    free(B);
    free(C);
    free(ref);
}

static void test_none_current_stays_none(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    assert_int_equal(cu.cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    gemm_keeping(ctx, NULL);
}

static void test_callers_context_stays_current(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    /* cuda.h maps cuCtxCreate and cuCtxDestroy to their current versions: resolve those names */
    __typeof__(&cuCtxCreate) create = (__typeof__(&cuCtxCreate))dlsym(lib, "cuCtxCreate_v4");
    __typeof__(&cuCtxDestroy) destroy = (__typeof__(&cuCtxDestroy))dlsym(lib, "cuCtxDestroy_v2");
    assert_true(create && destroy);
    CUdevice dev;
    assert_int_equal(cu.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CUcontext own = NULL;
    assert_int_equal(create(&own, NULL, 0, dev), CUDA_SUCCESS); /* makes it current */
    assert_ptr_equal(current(), own);
    gemm_keeping(ctx, own);

    sj_context_options opts;
    sj_context_options_init(&opts);
    opts.cache_path = "";
    sj_context *second = NULL;
    ASSERT_KEPT(sj_context_create(&opts, &second), own);
    sj_device_info info;
    ASSERT_KEPT(sj_get_device_info(second, &info), own);
    ASSERT_KEPT(sj_context_destroy(second), own);

    assert_int_equal(cu.cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(destroy(own), CUDA_SUCCESS);
    dlclose(lib);
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_current_stays_none),
        cmocka_unit_test(test_callers_context_stays_current),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
