/* test_tuner_gpu.c: the tuner on the GPU. The reference kernel (templates/gemm_reference.lua)
 * against fp64 on the CPU; the correctness gate passes a right kernel and rejects wrong ones;
 * tuning a GEMM and a V:N:M shape end to end into a fresh cache, after which a second process
 * gets the winner with zero NVRTC compiles and Lua runs (its cold-start and launch-overhead
 * times are printed, not asserted: timings belong to bench/, and the test programs run side by
 * side on the GPU machine); the cuBLAS baseline. */
#include "test_util.h"
#include "generator/nvrtc.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static sj_context *context_on(const char *cache_path)
{
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = cache_path;
    o.require_gpu = 1;
    sj_context *ctx = NULL;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    return ctx;
}

static sj_devptr upload16(sj_context *ctx, const uint16_t *x, size_t n)
{
    sj_devptr d;
    SJ_ASSERT_OK(sj_malloc(ctx, n * 2, &d));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, d, x, n * 2));
    return d;
}

/* ------------------------------------------------------------------ the reference kernel */

static void test_reference_kernel_matches_fp64(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const int64_t shapes[][3] = { { 77, 45, 93 }, { 256, 128, 512 }, { 1, 300, 17 } };
    for (int d = 0; d < 2; d++) {
        sj_dtype dt = d ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            uint16_t *A = malloc((size_t)(m * k) * 2), *B = malloc((size_t)(k * n) * 2);
            double *want = malloc(sizeof *want * (size_t)(m * n));
            float *got = malloc(sizeof *got * (size_t)(m * n));
            tu_fill16(dt, A, (size_t)(m * k), 1.0f, &rng);
            tu_fill16(dt, B, (size_t)(k * n), 1.0f, &rng);
            tu_ref_gemm16(dt, A, B, want, m, n, k);
            for (int64_t i = 0; i < m * n; i++) got[i] = NAN;
            sj_devptr dA = upload16(ctx, A, (size_t)(m * k)), dB = upload16(ctx, B, (size_t)(k * n));
            SJ_ASSERT_OK(harness_reference_gemm(ctx, dt, dA, dB, m, n, k, got));
            double num = 0, den = 0;
            for (int64_t i = 0; i < m * n; i++) {
                num += (got[i] - want[i]) * (got[i] - want[i]);
                den += want[i] * want[i];
            }
            double err = isfinite(num) ? sqrt(num / den) : INFINITY;
            fprintf(stderr, "# reference %s %lldx%lldx%lld: rel err %.2e\n", sj_dtype_name(dt), (long long)m,
                    (long long)n, (long long)k, err);
            if (!(err < 1e-5)) fail_msg("gemm_reference %s %lldx%lldx%lld: relative error %.3e", sj_dtype_name(dt),
                                        (long long)m, (long long)n, (long long)k, err);
            sj_free(ctx, dA);
            sj_free(ctx, dB);
            free(A);
            free(B);
            free(want);
            free(got);
        }
    }
}

/* ------------------------------------------------------------------ the gate */

/* gemm_dense's default kernel for problem q, loaded outside the context's table. */
static void load_dense(sj_context *ctx, const sj_problem *q, loaded_kernel *k)
{
    sj_generated *gen = NULL;
    SJ_ASSERT_OK(rt_generate(ctx, q, "gemm_dense", "", &gen));
    cache_kernel built;
    SJ_ASSERT_OK(build_compile(gen, ctx->arch, &built, NULL));
    SJ_ASSERT_OK(rt_module_load(ctx, q, &built, "gemm_dense", SJ_FROM_COMPILE, k));
    free(built.cubin);
    sj_generated_free(gen);
}

static void test_gate_passes_right_and_rejects_wrong_kernels(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 256, 256, 256);
    harness h;
    SJ_ASSERT_OK(harness_open(ctx, &p, rng, 1, &h));
    loaded_kernel k;
    double err;
    int sticky;
    load_dense(ctx, &p, &k);
    SJ_ASSERT_OK(harness_check(&h, &k, &err, &sticky));
    fprintf(stderr, "# right kernel: rel err %.2e\n", err);
    assert_true(err < harness_tolerance(&p));
    rt_module_unload(&k);
    /* The shape is baked into gemm_dense: a kernel built for K/2 sums half of the products. */
    sj_problem q = p;
    q.k = 128;
    load_dense(ctx, &q, &k);
    SJ_ASSERT_OK(harness_check(&h, &k, &err, &sticky));
    fprintf(stderr, "# half-K kernel: rel err %.2e\n", err);
    assert_true(err > 0.3 && isfinite(err));
    rt_module_unload(&k);
    /* One built for M/2 leaves half of C unwritten: the NaN poison shows it. */
    q = p;
    q.m = 128;
    load_dense(ctx, &q, &k);
    SJ_ASSERT_OK(harness_check(&h, &k, &err, &sticky));
    assert_true(isinf(err));
    assert_int_equal(sticky, 0);
    rt_module_unload(&k);
    harness_close(&h);
}

/* ------------------------------------------------------------------ end to end */

/* The child: a fresh process on cache_path runs the op once and prints what it saw. */
static int child(int argc, char **argv)
{
    const char *cache = argv[2];
    sj_problem p;
    sj_op op;
    if (sj_op_parse(argv[3], &op) != SJ_OK) return 2;
    sj_problem_init(&p, op, SJ_DTYPE_F16, atoll(argv[4]), atoll(argv[5]), atoll(argv[6]));
    if (op == SJ_OP_VNM_SPMM) {
        p.vnm_v = atoi(argv[7]);
        p.vnm_n = atoi(argv[8]);
        p.vnm_m = atoi(argv[9]);
    }
    double t0 = now();
    sj_context *ctx = context_on(cache);
    double ctx_ms = (now() - t0) * 1e3;
    double err = INFINITY, cold_ms = 0, sj_us = 0, raw_us = 0;
    sj_kernel_info ki; /* of the first, cold call */
    if (op == SJ_OP_GEMM) {
        size_t na = (size_t)(p.m * p.k), nb = (size_t)(p.k * p.n), nc = (size_t)(p.m * p.n);
        uint16_t *A = malloc(na * 2), *B = malloc(nb * 2), *C = malloc(nc * 2);
        double *ref = malloc(nc * sizeof *ref);
        tu_fill16(p.dtype, A, na, 1.0f, &rng);
        tu_fill16(p.dtype, B, nb, 1.0f, &rng);
        tu_ref_gemm16(p.dtype, A, B, ref, p.m, p.n, p.k);
        sj_devptr dA = upload16(ctx, A, na), dB = upload16(ctx, B, nb), dC;
        SJ_ASSERT_OK(sj_malloc(ctx, nc * 2, &dC));
        SJ_ASSERT_OK(sj_memset_u8(ctx, dC, 0xFF, nc * 2));
        SJ_ASSERT_OK(sj_synchronize(ctx));
        /* Cold on-demand: table miss -> SQLite winner + cubin -> cuModuleLoadData -> launch. */
        t0 = now();
        SJ_ASSERT_OK(sj_gemm(ctx, &p, dA, dB, dC, NULL));
        cold_ms = (now() - t0) * 1e3;
        SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
        SJ_ASSERT_OK(sj_synchronize(ctx));
        SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, C, dC, nc * 2));
        err = tu_rel_error(p.out_dtype, C, ref, nc);
        /* Launch overhead: host time per call in batches that fit the launch queue, through
         * sj_gemm (validation + table lookup + launch) and through a bare cuLaunchKernel. */
        const loaded_kernel *k;
        SJ_ASSERT_OK(rt_kernel_for(ctx, &p, &k));
        int m = (int)p.m, n = (int)p.n, kk = (int)p.k;
        void *args[] = { &dA, &dB, &dC, &m, &n, &kk };
        double best_sj = INFINITY, best_raw = INFINITY;
        /* sparsejit leaves the caller's context current, not its own: the bare launches need it */
        assert_int_equal(cu.cuCtxSetCurrent(ctx->cu_ctx), CUDA_SUCCESS);
        for (int round = 0; round < 20; round++) {
            SJ_ASSERT_OK(sj_synchronize(ctx));
            t0 = now();
            for (int i = 0; i < 100; i++) SJ_ASSERT_OK(sj_gemm(ctx, &p, dA, dB, dC, NULL));
            double a = (now() - t0) / 100;
            SJ_ASSERT_OK(sj_synchronize(ctx));
            t0 = now();
            for (int i = 0; i < 100; i++)
                assert_int_equal(cu.cuLaunchKernel(k->function, k->grid[0], k->grid[1], k->grid[2], k->block[0],
                                                      k->block[1], k->block[2], k->shared_bytes, NULL, args, NULL),
                                 CUDA_SUCCESS);
            double b = (now() - t0) / 100;
            if (a < best_sj) best_sj = a;
            if (b < best_raw) best_raw = b;
        }
        SJ_ASSERT_OK(sj_synchronize(ctx));
        sj_us = best_sj * 1e6;
        raw_us = best_raw * 1e6;
        sj_free(ctx, dA);
        sj_free(ctx, dB);
        sj_free(ctx, dC);
        free(A);
        free(B);
        free(C);
        free(ref);
    } else {
        /* The sparse op through the runtime's resolution (what sj_vnm_spmm does), launched by
         * the harness and gated against the reference (its cubin is cached too). */
        harness h;
        SJ_ASSERT_OK(harness_open(ctx, &p, rng, 1, &h));
        t0 = now();
        const loaded_kernel *k;
        SJ_ASSERT_OK(rt_kernel_for(ctx, &p, &k));
        cold_ms = (now() - t0) * 1e3;
        SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
        int sticky;
        SJ_ASSERT_OK(harness_check(&h, k, &err, &sticky));
        harness_close(&h);
    }
    sj_stats st;
    SJ_ASSERT_OK(sj_get_stats(ctx, &st));
    printf("compiles=%llu generations=%llu source=%d origin=%d err=%.3e ctx_ms=%.3f cold_ms=%.3f sj_us=%.3f "
           "raw_us=%.3f config=%s\n",
           (unsigned long long)st.nvrtc_compiles, (unsigned long long)st.lua_generations, (int)ki.source,
           (int)ki.origin, err, ctx_ms, cold_ms, sj_us, raw_us, ki.config);
    sj_context_destroy(ctx);
    return 0;
}

typedef struct child_report {
    unsigned long long compiles, generations;
    int source, origin;
    double err, ctx_ms, cold_ms, sj_us, raw_us;
    char config[256];
} child_report;

/* Runs this test binary again as a child (exec: CUDA state must not cross a fork). */
static void run_child(const char *cache, const sj_problem *p, child_report *r)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --child '%s' %s %lld %lld %lld %d %d %d", self, cache, sj_op_name(p->op),
             (long long)p->m, (long long)p->n, (long long)p->k, p->vnm_v, p->vnm_n, p->vnm_m);
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[1024] = "";
    int got = fgets(line, sizeof line, f) != NULL;
    int status = pclose(f);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("child failed (status %d): %s", status, line);
    memset(r, 0, sizeof *r);
    if (sscanf(line, "compiles=%llu generations=%llu source=%d origin=%d err=%lf ctx_ms=%lf cold_ms=%lf sj_us=%lf "
                     "raw_us=%lf config=%255s",
               &r->compiles, &r->generations, &r->source, &r->origin, &r->err, &r->ctx_ms, &r->cold_ms, &r->sj_us,
               &r->raw_us, r->config) != 10)
        fail_msg("child printed '%s'", line);
}

/* Tunes p into a fresh cache, checks the result's invariants and that this process now uses
 * the winner; then a second process. */
static void tune_then_second_process(const sj_problem *p, int budget, int check_overhead)
{
    sj_context *gpu;
    TU_REQUIRE_GPU(gpu);
    (void)gpu;
    char cache[512];
    snprintf(cache, sizeof cache, "%s/tuned.db", tu_tempdir());
    sj_context *ctx = context_on(cache);
    sj_tune_options o;
    sj_tune_options_init(&o);
    o.strategy = SJ_TUNE_RANDOM;
    o.budget_trials = budget;
    o.seed = rng;
    o.warmup_ms = 5;
    o.rep_ms = 20;
    sj_tune_result r;
    SJ_ASSERT_OK(sj_tune(ctx, p, &o, &r));
    char desc[128];
    sj_problem_describe(p, desc, sizeof desc);
    fprintf(stderr, "# tuned %s: %s %.2f us (p20 %.2f, p80 %.2f) %.1f TFLOP/s, %d trials (%d rejected) of %d, %.1f s\n",
            desc, r.config, r.median_us, r.p20_us, r.p80_us, r.tflops, r.trials_done, r.trials_rejected, r.space_size,
            r.seconds);
    assert_true(r.saved);
    assert_int_equal(r.n_trials, r.trials_done);
    assert_true(r.trials_done == budget || (r.space_size >= 0 && r.trials_done == r.space_size));
    assert_true(r.trials_rejected < r.trials_done);
    assert_true(r.median_us > 0 && r.p20_us <= r.median_us && r.median_us <= r.p80_us && r.tflops > 0);
    /* The winner is a measured trial among the sweep's four fastest, named by their run-off. */
    int found = 0, passing = 0, faster = 0;
    double winner_sweep_us = 0;
    for (int i = 0; i < r.n_trials; i++) {
        const sj_tune_trial *t = &r.trials[i];
        if (!strcmp(t->config, r.config)) {
            found = 1;
            winner_sweep_us = t->median_us;
            assert_true(!strcmp(t->status, "ok") || !strcmp(t->status, "noisy"));
            assert_true(t->rel_error >= 0 && t->rel_error < harness_tolerance(p));
        }
        for (int j = 0; j < i; j++) assert_string_not_equal(t->config, r.trials[j].config);
    }
    for (int i = 0; i < r.n_trials; i++) {
        const sj_tune_trial *t = &r.trials[i];
        if (strcmp(t->status, "ok") && strcmp(t->status, "noisy")) continue;
        passing++;
        faster += t->median_us < winner_sweep_us;
    }
    assert_true(faster < 4);
    assert_int_equal(r.finalists, passing < 2 ? 0 : passing < 4 ? passing : 4);
    assert_true(found);
    /* This process: the next resolution is the tuned winner, from the cache. */
    const loaded_kernel *k;
    SJ_ASSERT_OK(rt_kernel_for(ctx, p, &k));
    sj_kernel_info ki;
    SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
    assert_int_equal(ki.origin, SJ_CONFIG_TUNED);
    assert_string_equal(ki.config, r.config);
    sj_bench_result b;
    SJ_ASSERT_OK(sj_bench(ctx, p, &o, &b));
    assert_string_equal(b.config, r.config);
    assert_int_equal(b.origin, SJ_CONFIG_TUNED);
    fprintf(stderr, "# sj_bench of the winner: %.2f us (tuned %.2f us), rel error %.2e\n", b.median_us, r.median_us,
            b.rel_error);
    assert_true(b.rel_error >= 0 && b.rel_error <= harness_tolerance(p)); /* checked before it was timed */
    assert_true(b.median_us > 0.5 * r.median_us && b.median_us < 2.0 * r.median_us);
    sj_context_destroy(ctx);

    child_report c;
    run_child(cache, p, &c);
    fprintf(stderr, "# second process: %llu compiles, %llu Lua runs, context %.2f ms, cold kernel %.3f ms, err %.2e",
            c.compiles, c.generations, c.ctx_ms, c.cold_ms, c.err);
    if (check_overhead)
        fprintf(stderr, ", per call sj_gemm %.3f us vs bare launch %.3f us (+%.3f us)", c.sj_us, c.raw_us,
                c.sj_us - c.raw_us);
    fprintf(stderr, "\n");
    assert_int_equal(c.compiles, 0);
    assert_int_equal(c.generations, 0);
    assert_int_equal(c.source, SJ_FROM_CACHE);
    assert_int_equal(c.origin, SJ_CONFIG_TUNED);
    assert_string_equal(c.config, r.config);
    assert_true(c.err < harness_tolerance(p));
    sj_tune_result_free(&r);
}

static void test_tune_gemm_end_to_end(void **state)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 1024, 1024, 1024);
    tune_then_second_process(&p, 12, 1);
}

static void test_tune_vnm_end_to_end(void **state)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_VNM_SPMM, SJ_DTYPE_F16, 2048, 2048, 2048);
    p.vnm_v = 64;
    p.vnm_n = 2;
    p.vnm_m = 8;
    tune_then_second_process(&p, 12, 0);
}

/* TwELL: the gate (TwELL output read back and validated) and the fused FFN (host fp64
 * reference) tune to a passing winner. */
static void test_tune_twell_ops(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_problem probs[2];
    sj_problem_init(&probs[0], SJ_OP_TWELL_GATE, SJ_DTYPE_F16, 512, 2048, 1024);
    sj_problem_init(&probs[1], SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, 256, 1024, 1024);
    probs[1].d_ff = 4096;
    for (int i = 0; i < 2; i++) {
        probs[i].twell_tile = 128;
        probs[i].twell_capacity = 16;
        sj_tune_options o;
        sj_tune_options_init(&o);
        o.budget_trials = 6;
        o.warmup_ms = 2;
        o.rep_ms = 10;
        o.save = 0;
        o.seed = rng;
        sj_tune_result r;
        SJ_ASSERT_OK(sj_tune(ctx, &probs[i], &o, &r));
        char desc[160];
        sj_problem_describe(&probs[i], desc, sizeof desc);
        fprintf(stderr, "# tuned %s: %s %.2f us, %.1f TFLOP/s useful, %d/%d rejected, %.1f s\n", desc, r.config,
                r.median_us, r.tflops, r.trials_rejected, r.trials_done, r.seconds);
        for (int t = 0; t < r.n_trials; t++)
            fprintf(stderr, "#   %-48s %-13s %9.2f us  rel err %.2e\n", r.trials[t].config, r.trials[t].status,
                    r.trials[t].median_us, r.trials[t].rel_error);
        assert_true(r.median_us > 0);
        sj_tune_result_free(&r);
    }
}

/* A progress callback that stops the search after 3 candidates: the best of those wins. */
static int stop_after_3(void *user, const sj_tune_progress *pr)
{
    int *calls = user;
    ++*calls;
    assert_true(pr->done == *calls && pr->total > 0 && pr->elapsed_s > 0);
    return pr->done >= 3;
}

static void test_progress_can_stop_the_search(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_BF16, 512, 256, 384);
    sj_tune_options o;
    sj_tune_options_init(&o);
    o.strategy = SJ_TUNE_EXHAUSTIVE;
    o.warmup_ms = 2;
    o.rep_ms = 5;
    o.save = 0;
    int calls = 0;
    o.progress = stop_after_3;
    o.progress_user = &calls;
    sj_tune_result r;
    SJ_ASSERT_OK(sj_tune(ctx, &p, &o, &r));
    assert_int_equal(calls, 3);
    assert_int_equal(r.trials_done, 3);
    assert_int_equal(r.saved, 0);
    assert_true(r.space_size > 3);
    sj_tune_result_free(&r);
}

static void test_cublas_baseline(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    double us = 0;
    SJ_ASSERT_OK(cublas_gemm_time(ctx, SJ_DTYPE_BF16, 2048, 2048, 2048, &us));
    double tflops = 2.0 * 2048 * 2048 * 2048 / (us * 1e-6) / 1e12;
    fprintf(stderr, "# cuBLAS bf16 2048^3: %.2f us, %.1f TFLOP/s\n", us, tflops);
    assert_true(tflops > 50 && tflops < 2000);
    /* Three GEMMs back to back take about the sum of their times. */
    const int64_t shapes[3][3] = { { 2048, 2048, 2048 }, { 2048, 2048, 2048 }, { 2048, 2048, 2048 } };
    measure_result mr;
    SJ_ASSERT_OK(cublas_gemm_seq_time(ctx, SJ_DTYPE_BF16, 3, shapes, NULL, &mr));
    fprintf(stderr, "# three back to back: %.2f us\n", mr.median_us);
    assert_true(mr.median_us > 2.0 * us && mr.median_us < 4.0 * us);
    SJ_ASSERT_STATUS(cublas_gemm_time(ctx, SJ_DTYPE_F32, 64, 64, 64, &us), SJ_ERR_INVALID_ARGUMENT, "f16 or bf16");
}

int main(int argc, char **argv)
{
    if (argc >= 10 && !strcmp(argv[1], "--child")) {
        rng = 777;
        return child(argc, argv);
    }
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_kernel_matches_fp64),
        cmocka_unit_test(test_gate_passes_right_and_rejects_wrong_kernels),
        cmocka_unit_test(test_tune_gemm_end_to_end),
        cmocka_unit_test(test_tune_vnm_end_to_end),
        cmocka_unit_test(test_tune_twell_ops),
        cmocka_unit_test(test_progress_can_stop_the_search),
        cmocka_unit_test(test_cublas_baseline),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
