/* c_api.c: the README's C API example as a program: one bf16 GEMM through sparsejit, checked
 * against a CPU reference on a few entries. Build: part of the CMake build (sparsejit_example). */
#include <sparsejit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint16_t to_bf16(float f)
{
    union { float f; uint32_t u; } v = { f };
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

int main(void)
{
    const int64_t m = 1024, n = 1024, k = 1024;
    sj_context *ctx;
    if (sj_context_create(NULL, &ctx) != SJ_OK) {
        fprintf(stderr, "%s\n", sj_last_error());
        return 1;
    }
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_BF16, m, n, k);
    p.out_dtype = SJ_DTYPE_F32;

    uint16_t *a = malloc(m * k * 2), *b = malloc(k * n * 2);
    float *c = malloc(m * n * 4);
    for (int64_t i = 0; i < m * k; i++) a[i] = to_bf16((float)((i * 7919) % 2001 - 1000) / 1000.0f);
    for (int64_t i = 0; i < k * n; i++) b[i] = to_bf16((float)((i * 104729) % 2001 - 1000) / 1000.0f);

    sj_devptr A, B, C;
    sj_status st;
    if ((st = sj_malloc(ctx, m * k * 2, &A)) || (st = sj_malloc(ctx, k * n * 2, &B)) || (st = sj_malloc(ctx, m * n * 4, &C)) ||
        (st = sj_memcpy_htod(ctx, A, a, m * k * 2)) || (st = sj_memcpy_htod(ctx, B, b, k * n * 2)) ||
        (st = sj_gemm(ctx, &p, A, B, C, NULL)) || (st = sj_memcpy_dtoh(ctx, c, C, m * n * 4))) {
        fprintf(stderr, "sparsejit: %s: %s\n", sj_status_name(st), sj_last_error());
        sj_context_destroy(ctx);
        return 1;
    }
    sj_kernel_info ki;
    sj_last_kernel_info(ctx, &ki);
    double worst = 0;
    for (int t = 0; t < 16; t++) {
        int64_t i = (t * 131) % m, j = (t * 977) % n;
        double ref = 0;
        for (int64_t q = 0; q < k; q++) ref += (double)from_bf16(a[i * k + q]) * from_bf16(b[q * n + j]);
        worst = fmax(worst, fabs(ref - c[i * n + j]) / (fabs(ref) + 1.0));
    }
    printf("gemm bf16->f32 %lldx%lldx%lld with %s config %s (%s): worst sampled error %.2e\n", (long long)m,
           (long long)n, (long long)k, ki.template_name, ki.config,
           ki.source == SJ_FROM_COMPILE ? "compiled now" : ki.source == SJ_FROM_CACHE ? "from the cache" : "in memory",
           worst);
    sj_free(ctx, A);
    sj_free(ctx, B);
    sj_free(ctx, C);
    sj_context_destroy(ctx);
    free(a);
    free(b);
    free(c);
    return worst < 1e-2 ? 0 : 1;
}
