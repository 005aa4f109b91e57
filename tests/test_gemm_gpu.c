/* test_gemm_gpu.c: dense GEMM on the GPU against a CPU fp64 reference on fresh random data
 * (square, ragged and tiny shapes, every dtype pair), and the cache path: a second process
 * gets its kernels from SQLite with zero NVRTC compiles, a third from a changed template misses;
 * a cached winner whose cubin does not load falls back to the default config. */
#include "test_util.h"
#include "generator/generator.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng;

static double tolerance(sj_dtype in, sj_dtype out)
{
    /* fp32 accumulation; the output rounding dominates: 2^-8 for bf16, 2^-11 for f16 */
    if (out == SJ_DTYPE_BF16 || in == SJ_DTYPE_BF16) return 1e-2;
    return 2e-3;
}

/* Runs C = A.B for one problem on ctx and returns the relative error against fp64. */
static double run_gemm(sj_context *ctx, const sj_problem *p)
{
    size_t na = (size_t)(p->m * p->k), nb = (size_t)(p->k * p->n), nc = (size_t)(p->m * p->n);
    size_t osz = sj_dtype_size(p->out_dtype);
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
    void *C = malloc(nc * osz);
    double *ref = malloc(nc * sizeof(double));
    assert_true(A && B && C && ref);
    tu_fill16(p->dtype, A, na, 1.0f, &rng);
    tu_fill16(p->dtype, B, nb, 1.0f, &rng);
    tu_ref_gemm16(p->dtype, A, B, ref, p->m, p->n, p->k);
    sj_devptr dA, dB, dC;
    SJ_ASSERT_OK(sj_malloc(ctx, na * 2, &dA));
    SJ_ASSERT_OK(sj_malloc(ctx, nb * 2, &dB));
    SJ_ASSERT_OK(sj_malloc(ctx, nc * osz, &dC));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dA, A, na * 2));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, dB, B, nb * 2));
    SJ_ASSERT_OK(sj_memset_u8(ctx, dC, 0xFF, nc * osz)); /* NaN in every dtype: unwritten outputs fail */
    SJ_ASSERT_OK(sj_gemm(ctx, p, dA, dB, dC, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, C, dC, nc * osz));
    double err = tu_rel_error(p->out_dtype, C, ref, nc);
    sj_free(ctx, dA);
    sj_free(ctx, dB);
    sj_free(ctx, dC);
    free(A);
    free(B);
    free(C);
    free(ref);
    return err;
}

static void test_gemm_matches_fp64(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const int64_t shapes[][3] = {
        { 256, 256, 256 }, { 512, 384, 1024 }, { 1000, 520, 264 }, /* ragged M and N, K % 8 == 0 */
        { 129, 67, 45 },   /* nothing a multiple of anything */
        { 1, 1, 1 }, { 17, 33, 7 }, { 3, 1000, 9 }, { 640, 8, 4096 },
    };
    const sj_dtype pairs[][2] = {
        { SJ_DTYPE_F16, SJ_DTYPE_F16 }, { SJ_DTYPE_F16, SJ_DTYPE_F32 },
        { SJ_DTYPE_BF16, SJ_DTYPE_BF16 }, { SJ_DTYPE_BF16, SJ_DTYPE_F32 }, { SJ_DTYPE_F16, SJ_DTYPE_BF16 },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t d = 0; d < sizeof pairs / sizeof *pairs; d++) {
            sj_problem p;
            sj_problem_init(&p, SJ_OP_GEMM, pairs[d][0], shapes[s][0], shapes[s][1], shapes[s][2]);
            p.out_dtype = pairs[d][1];
            double err = run_gemm(ctx, &p);
            sj_kernel_info ki;
            SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
            char desc[128];
            sj_problem_describe(&p, desc, sizeof desc);
            fprintf(stderr, "# %-36s %-40s rel err %.2e\n", desc, ki.config, err);
            if (!(err < tolerance(pairs[d][0], pairs[d][1])))
                fail_msg("%s config %s: relative error %.3e over %.1e", desc, ki.config, err,
                         tolerance(pairs[d][0], pairs[d][1]));
        }
}

/* Every config of the space that the template accepts for one ragged shape is correct. */
static void test_gemm_configs_match_fp64(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const char *configs[] = { "BM=64,BN=64,BK=32,WM=32,WN=32,STAGES=2", "BM=128,BN=128,BK=32,WM=64,WN=32,STAGES=3",
                              "BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=3", "BM=256,BN=128,BK=64,WM=64,WN=64,STAGES=3" };
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 777, 1000, 520);
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        sj_status st = sj_set_config(ctx, &p, configs[i]);
        SJ_ASSERT_OK(st);
        sj_generated *g = NULL;
        if (sj_generate(ctx, &p, configs[i], &g) != SJ_OK) {
            fprintf(stderr, "# config %s not valid here: %s\n", configs[i], sj_last_error());
            continue;
        }
        sj_generated_free(g);
        double err = run_gemm(ctx, &p);
        fprintf(stderr, "# config %-44s rel err %.2e\n", configs[i], err);
        if (!(err < 2e-3)) fail_msg("config %s: relative error %.3e", configs[i], err);
    }
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
}

/* Child process: one GEMM with a context on cache_path; exits with its NVRTC compile count
 * (+100 if the kernel did not come from where `expect` says). */
static int child_gemm(const char *cache_path, sj_kernel_source expect)
{
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = cache_path;
    o.require_gpu = 1;
    sj_context *ctx;
    if (sj_context_create(&o, &ctx) != SJ_OK) return 200;
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_BF16, 384, 256, 128);
    double err = run_gemm(ctx, &p);
    sj_kernel_info ki;
    sj_stats st;
    if (sj_last_kernel_info(ctx, &ki) != SJ_OK || sj_get_stats(ctx, &st) != SJ_OK || !(err < 1e-2)) return 201;
    int rc = (int)st.nvrtc_compiles + (ki.source == expect ? 0 : 100);
    sj_context_destroy(ctx);
    return rc;
}

/* A fresh process (exec, not a bare fork: CUDA must not be inherited across fork). */
static int run_child(const char *cache_path, sj_kernel_source expect)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char e[8];
        snprintf(e, sizeof e, "%d", (int)expect);
        execl("/proc/self/exe", "test_gemm_gpu", "--child", cache_path, e, (char *)NULL);
        _exit(254);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

static void test_second_process_loads_from_cache(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    char path[512];
    snprintf(path, sizeof path, "%s/kernels.db", tu_tempdir());
    assert_int_equal(run_child(path, SJ_FROM_COMPILE), 1);  /* cold: one compile */
    assert_int_equal(run_child(path, SJ_FROM_CACHE), 0);    /* warm: zero compiles, from SQLite */
    /* a changed template (its hash) must not reuse the stored kernel */
    char tdir[512], cmd[2048];
    snprintf(tdir, sizeof tdir, "%s", tu_tempdir());
    snprintf(cmd, sizeof cmd, "cp -r %s/templates/. %s/ && echo '-- changed' >> %s/gemm_dense.lua", tu_source_dir(), tdir, tdir);
    assert_int_equal(system(cmd), 0);
    setenv("SPARSEJIT_TEMPLATE_DIR", tdir, 1);
    assert_int_equal(run_child(path, SJ_FROM_COMPILE), 1);
    assert_int_equal(run_child(path, SJ_FROM_CACHE), 0);
    unsetenv("SPARSEJIT_TEMPLATE_DIR");
    assert_int_equal(run_child(path, SJ_FROM_CACHE), 0);    /* the original entry is still there */
}

typedef struct log_record { int count; char text[4096]; } log_record;

static void record_log(void *user, const char *message)
{
    log_record *r = user;
    r->count++;
    snprintf(r->text, sizeof r->text, "%s", message);
}

/* A cached winner for a 256^3 gemm, other than the default, that the GPU cannot use: a cubin of
 * garbage with a matching sha256, as a crafted import could carry (it fails to load), or the real cubin with twice the threads per block its
 * __launch_bounds__ allows (it loads and fails to launch). The op must still run, with the
 * template's default, and the log say once what failed. */
static void spoiled_winner_falls_back(int unlaunchable)
{
    sj_context *gpu;
    TU_REQUIRE_GPU(gpu);
    char path[512];
    snprintf(path, sizeof path, "%s/kernels%d.db", tu_tempdir(), unlaunchable);
    log_record rec = { 0 };
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = path;
    o.log = record_log;
    o.log_user = &rec;
    sj_context *ctx;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 256, 256, 256);
    cache_key key;
    SJ_ASSERT_OK(rt_cache_key(ctx, &p, NULL, &key));
    gen_state *g;
    SJ_ASSERT_OK(rt_generator(ctx, &g));
    char def[256], config[256] = "";
    SJ_ASSERT_OK(gen_default_config(g, key.template_name, &p, def, sizeof def));
    const char *candidates[] = { "BM=64", "BM=128", "BN=64", "BN=128" };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !config[0]; i++) {
        char canon[256], why[256];
        int valid = 0;
        SJ_ASSERT_OK(gen_canonical_config(g, key.template_name, &p, candidates[i], canon, sizeof canon));
        SJ_ASSERT_OK(gen_config_valid(g, key.template_name, &p, canon, &valid, why, sizeof why));
        if (valid && strcmp(canon, def)) snprintf(config, sizeof config, "%s", canon);
    }
    assert_true(config[0]);
    sj_generated *gen;
    SJ_ASSERT_OK(sj_generate(ctx, &p, config, &gen));
    static unsigned char garbage[4096];
    memset(garbage, 0x5A, sizeof garbage);
    cache_kernel k = { .cubin = garbage, .cubin_size = sizeof garbage, .shared_bytes = gen->shared_bytes };
    void *cubin = NULL;
    if (unlaunchable) {
        char *log = NULL;
        SJ_ASSERT_OK(sj_compile(ctx, gen, &cubin, &k.cubin_size, &log));
        free(log);
        k.cubin = cubin;
    }
    snprintf(k.config, sizeof k.config, "%s", config);
    snprintf(k.entry, sizeof k.entry, "%s", gen->entry);
    memcpy(k.grid, gen->grid, sizeof k.grid);
    memcpy(k.block, gen->block, sizeof k.block);
    if (unlaunchable) {
        assert_true(k.block[0] * k.block[1] * k.block[2] <= 512);
        k.block[0] *= 2;
    }
    sj_generated_free(gen);
    cache_winner w = { .median_us = 1.0, .tflops = 1.0, .tuned_at = 1700000000 };
    snprintf(w.config, sizeof w.config, "%s", config);
    snprintf(w.strategy, sizeof w.strategy, "exhaustive");
    SJ_ASSERT_OK(cache_put_tuning(ctx->cache, &key, NULL, 0, &w, &k, 0));
    free(cubin);
    for (int i = 0; i < 2; i++) assert_true(run_gemm(ctx, &p) < tolerance(p.dtype, p.out_dtype));
    assert_int_equal(rec.count, 1);
    const char *said = unlaunchable ? "failed to launch" : "failed to load";
    if (!strstr(rec.text, config) || !strstr(rec.text, said))
        fail_msg("the log '%s' does not name %s as having %s", rec.text, config, said);
    sj_kernel_info info;
    SJ_ASSERT_OK(sj_last_kernel_info(ctx, &info));
    assert_int_equal(info.origin, SJ_CONFIG_DEFAULT);
    assert_string_equal(info.config, def);
    SJ_ASSERT_OK(sj_context_destroy(ctx));
}

static void test_corrupt_winner_falls_back(void **state)
{
    (void)state;
    spoiled_winner_falls_back(0);
}

static void test_unlaunchable_winner_falls_back(void **state)
{
    (void)state;
    spoiled_winner_falls_back(1);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--child")) {
        rng = 12345;
        return child_gemm(argv[2], (sj_kernel_source)atoi(argv[3]));
    }
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_matches_fp64),
        cmocka_unit_test(test_gemm_configs_match_fp64),
        cmocka_unit_test(test_second_process_loads_from_cache),
        cmocka_unit_test(test_corrupt_winner_falls_back),
        cmocka_unit_test(test_unlaunchable_winner_falls_back),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
