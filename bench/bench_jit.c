/* bench_jit.c: what the JIT path costs. For a GEMM shape: cold (template + NVRTC + load +
 * launch, empty cache), warm (a new context: SQLite lookup + cuModuleLoadData + launch), and the
 * in-process launch overhead of sj_gemm over a bare cuLaunchKernel of the same function.
 * Prints one table (or --csv). Needs a GPU. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        sj_status st_ = (call);                                                           \
        if (st_ != SJ_OK) {                                                               \
            fprintf(stderr, "bench_jit: %s: %s (%s)\n", #call, sj_last_error(), sj_status_name(st_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef struct buffers { sj_devptr a, b, c; } buffers;

static sj_context *open_ctx(const char *cache)
{
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = cache;
    o.require_gpu = 1;
    sj_context *ctx;
    CHECK(sj_context_create(&o, &ctx));
    return ctx;
}

static buffers alloc(sj_context *ctx, const sj_problem *p)
{
    buffers b;
    size_t na = (size_t)(p->m * p->k), nb = (size_t)(p->k * p->n), nc = (size_t)(p->m * p->n);
    CHECK(sj_malloc(ctx, na * 2, &b.a));
    CHECK(sj_malloc(ctx, nb * 2, &b.b));
    CHECK(sj_malloc(ctx, nc * sj_dtype_size(p->out_dtype), &b.c));
    uint16_t *h = malloc((na > nb ? na : nb) * 2);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (na > nb ? na : nb); i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        h[i] = (uint16_t)(0x3800 + (x & 0x3ff)); /* f16 in [0.5, 1) */
    }
    CHECK(sj_memcpy_htod(ctx, b.a, h, na * 2));
    CHECK(sj_memcpy_htod(ctx, b.b, h, nb * 2));
    free(h);
    return b;
}

static void release(sj_context *ctx, buffers *b)
{
    sj_free(ctx, b->a);
    sj_free(ctx, b->b);
    sj_free(ctx, b->c);
}

/* Host milliseconds of the first sj_gemm (until its result is complete), less the same call
 * once the kernel is loaded: what getting the kernel cost. */
static double first_call_ms(sj_context *ctx, const sj_problem *p, buffers *b, sj_kernel_info *ki)
{
    double t0 = rt_seconds();
    CHECK(sj_gemm(ctx, p, b->a, b->b, b->c, NULL));
    CHECK(sj_synchronize(ctx));
    double t1 = rt_seconds();
    CHECK(sj_last_kernel_info(ctx, ki));
    CHECK(sj_gemm(ctx, p, b->a, b->b, b->c, NULL));
    CHECK(sj_synchronize(ctx));
    double t2 = rt_seconds();
    return ((t1 - t0) - (t2 - t1)) * 1e3;
}

int main(int argc, char **argv)
{
    int csv = argc > 1 && !strcmp(argv[1], "--csv");
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 4096, 4096, 4096);
    char dir[] = "/tmp/sparsejit-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char cache[128];
    snprintf(cache, sizeof cache, "%s/kernels.db", dir);

    sj_context *cold = open_ctx(cache);
    buffers b = alloc(cold, &p);
    sj_kernel_info ki;
    double cold_ms = first_call_ms(cold, &p, &b, &ki);
    sj_stats st;
    CHECK(sj_get_stats(cold, &st));
    if (ki.source != SJ_FROM_COMPILE) fprintf(stderr, "bench_jit: expected a compile on the cold call\n");
    release(cold, &b);
    sj_context_destroy(cold);

    sj_context *warm = open_ctx(cache);
    b = alloc(warm, &p);
    double warm_ms = first_call_ms(warm, &p, &b, &ki);
    sj_stats ws;
    CHECK(sj_get_stats(warm, &ws));
    if (ki.source != SJ_FROM_CACHE || ws.nvrtc_compiles)
        fprintf(stderr, "bench_jit: expected the warm call to come from SQLite with no compile\n");
    release(warm, &b);

    /* Launch overhead on a small shape, host time of the launch calls only. */
    sj_problem small;
    sj_problem_init(&small, SJ_OP_GEMM, SJ_DTYPE_F16, 128, 128, 128);
    b = alloc(warm, &small);
    CHECK(sj_gemm(warm, &small, b.a, b.b, b.c, NULL));
    CHECK(sj_synchronize(warm));
    const loaded_kernel *k;
    CHECK(rt_kernel_for(warm, &small, &k));
    int m = 128, n = 128, kk = 128;
    void *args[] = { &b.a, &b.b, &b.c, &m, &n, &kk };
    enum { BATCH = 200, ROUNDS = 25 };
    /* sparsejit leaves the caller's context current, not its own: the bare launches need it */
    if (cu.cuCtxSetCurrent(warm->cu_ctx) != CUDA_SUCCESS) return 1;
    double api = 0, raw = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = rt_seconds();
        for (int i = 0; i < BATCH; i++) CHECK(sj_gemm(warm, &small, b.a, b.b, b.c, NULL));
        api += rt_seconds() - t0;
        CHECK(sj_synchronize(warm));
        t0 = rt_seconds();
        for (int i = 0; i < BATCH; i++)
            if (cu.cuLaunchKernel(k->function, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1],
                                     k->block[2], k->shared_bytes, NULL, args, NULL) != CUDA_SUCCESS) return 1;
        raw += rt_seconds() - t0;
        CHECK(sj_synchronize(warm));
    }
    double api_us = api / (BATCH * ROUNDS) * 1e6, raw_us = raw / (BATCH * ROUNDS) * 1e6;
    sj_device_info d;
    sj_get_device_info(warm, &d);
    release(warm, &b);
    sj_context_destroy(warm);
    unlink(cache);
    char side[160];
    snprintf(side, sizeof side, "%s-wal", cache); unlink(side);
    snprintf(side, sizeof side, "%s-shm", cache); unlink(side);
    rmdir(dir);

    if (csv) {
        printf("gpu,shape,cold_ms,cold_lua_ms,cold_nvrtc_ms,warm_sqlite_ms,sj_gemm_launch_us,cuLaunchKernel_us,overhead_us\n");
        printf("%s,4096x4096x4096,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f\n", d.name, cold_ms, st.lua_seconds * 1e3,
               st.nvrtc_seconds * 1e3, warm_ms, api_us, raw_us, api_us - raw_us);
    } else {
        printf("JIT path on %s, gemm f16 4096x4096x4096 (first call less a loaded call)\n", d.name);
        printf("  %-44s %10.2f ms  (Lua %.2f ms, NVRTC %.2f ms)\n", "cold: template + NVRTC + load", cold_ms,
               st.lua_seconds * 1e3, st.nvrtc_seconds * 1e3);
        printf("  %-44s %10.3f ms\n", "warm: SQLite lookup + load (new context)", warm_ms);
        printf("  %-44s %10.3f us\n", "sj_gemm launch (host, 128^3, table hit)", api_us);
        printf("  %-44s %10.3f us\n", "bare cuLaunchKernel of the same kernel", raw_us);
        printf("  %-44s %10.3f us\n", "sparsejit overhead per launch", api_us - raw_us);
    }
    return 0;
}
