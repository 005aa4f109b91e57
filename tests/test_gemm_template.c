/* test_gemm_template.c: templates/gemm_dense.lua on the CPU: the default config of every shape
 * and dtype pair is valid and generates; configs of the space that `valid` accepts generate, and
 * a spread sample of them compiles for sm_90a; defaults compile for sm_80; the sm_90a SASS uses
 * tensor cores (HMMA), ldmatrix (LDSM) and cp.async (LDGSTS) and never spills (LDL/STL); bounds
 * checks are emitted only for dimensions the tile does not divide; invalid configs are refused
 * with a reason that names the constraint. */
#include "core/op.h"
#include "test_util.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sj_context *ctx90, *ctx80;

static int setup(void **state)
{
    ctx90 = tu_compile_context("sm_90a");
    ctx80 = tu_compile_context("sm_80");
    if (!ctx90 || !ctx80) {
        fprintf(stderr, "# cannot create compile-only contexts: %s\n", sj_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    sj_context_destroy(ctx90);
    sj_context_destroy(ctx80);
    return 0;
}

static sj_problem gemm(sj_dtype in, sj_dtype out, int64_t m, int64_t n, int64_t k)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, in, m, n, k);
    p.out_dtype = out;
    return p;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Checks what every generated gemm_dense kernel must satisfy, given its config. */
static void check_generated(const sj_problem *p, const sj_generated *g)
{
    int BM = tu_config_value(g->config, "BM"), BN = tu_config_value(g->config, "BN"), BK = tu_config_value(g->config, "BK");
    int WM = tu_config_value(g->config, "WM"), WN = tu_config_value(g->config, "WN"), S = tu_config_value(g->config, "STAGES");
    assert_true(BM > 0 && BN > 0 && BK > 0 && WM > 0 && WN > 0 && S >= 2);
    assert_true(tu_config_value(g->config, "GROUP_M") >= 1);
    int warps = (BM / WM) * (BN / WN);
    assert_true(warps == 4 || warps == 8);
    assert_true(WM * WN / 32 <= 128);
    assert_int_equal(g->block[0], (unsigned)(warps * 32));
    assert_int_equal(g->block[1], 1);
    assert_int_equal(g->grid[0], (unsigned)(cdiv(p->m, BM) * cdiv(p->n, BN)));
    assert_int_equal(g->grid[1], 1);
    int epi = tu_config_value(g->config, "EPI");
    assert_true(epi == 0 || epi == 1);
    /* the pipeline's ring, or the staged C tile (rows padded by 16 bytes, 32 for fp32) if larger */
    int osz = (int)sj_dtype_size(p->out_dtype);
    int pipe = S * (BM * BK + BK * BN) * 2, tile = BM * (BN * osz + (osz == 4 ? 32 : 16));
    assert_int_equal(g->shared_bytes, (unsigned)(epi && tile > pipe ? tile : pipe));
    if (epi) {
        assert_int_equal((p->n * osz) % 16, 0);
        assert_non_null(strstr(g->source, "sj_gemm_st_global_v4(C +"));
    }
    assert_true(g->shared_bytes <= 227 * 1024);
    assert_string_equal(g->template_name, "gemm_dense");
    assert_non_null(strstr(g->source, "mma.sync.aligned.m16n8k16"));
    assert_non_null(strstr(g->source, "ldmatrix.sync.aligned.m8n8.x4.trans"));
    assert_non_null(strstr(g->source, "cp.async.cg.shared.global"));
    assert_non_null(strstr(g->source, "#line"));
    assert_non_null(strstr(g->source, "gemm_dense.lua"));
    assert_non_null(strstr(g->source, "extern \"C\" __global__"));
}

static const sj_dtype outs[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };

/* The default of each shape and dtype pair is valid (sj_generate checks `valid` first), obeys
 * the kernel's constraints, and uses big tiles only where the shape is big. */
static void test_defaults_generate(void **state)
{
    const int64_t shapes[][3] = {
        { 1, 1, 1 }, { 17, 33, 7 }, { 64, 64, 64 }, { 100, 200, 300 }, { 129, 67, 45 }, { 1000, 1000, 1000 },
        { 31, 4095, 130 }, { 2048, 8, 2048 }, { 4096, 4096, 4096 }, { 8192, 8192, 8192 }, { 16, 65536, 64 },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int in = 0; in < 2; in++)
            for (size_t o = 0; o < 3; o++) {
                sj_problem p = gemm(in ? SJ_DTYPE_BF16 : SJ_DTYPE_F16, outs[o], shapes[s][0], shapes[s][1], shapes[s][2]);
                sj_generated *g = NULL;
                SJ_ASSERT_OK(sj_generate(ctx90, &p, NULL, &g));
                check_generated(&p, g);
                int BM = tu_config_value(g->config, "BM"), BN = tu_config_value(g->config, "BN");
                /* never a tile edge over twice the (power-of-two-rounded) extent */
                assert_true(BM <= 32 || BM < 2 * p.m);
                assert_true(BN <= 32 || BN < 2 * p.n);
                if (p.m >= 4096 && p.n >= 4096) assert_true(BM * BN >= 128 * 128);
                sj_generated_free(g);
            }
}

/* Bounds checks only where the tile does not divide the shape; element-wise loads only where
 * an operand's rows are not 16-byte aligned. */
static void test_guards_follow_shape(void **state)
{
    sj_problem p = gemm(SJ_DTYPE_F16, SJ_DTYPE_F16, 4096, 4096, 4096);
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx90, &p, "BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=4,GROUP_M=8", &g));
    assert_null(strstr(g->source, "< 4096"));
    assert_null(strstr(g->source, "sj_gemm_st_shared_v4(s +"));
    sj_generated_free(g);

    p = gemm(SJ_DTYPE_BF16, SJ_DTYPE_F32, 17, 33, 7);
    SJ_ASSERT_OK(sj_generate(ctx90, &p, NULL, &g));
    assert_non_null(strstr(g->source, "< 17"));  /* rows of A and C */
    assert_non_null(strstr(g->source, "< 33"));  /* columns of B and C */
    assert_non_null(strstr(g->source, "< 7"));   /* the k tail */
    assert_non_null(strstr(g->source, "sj_gemm_st_shared_v4(s +")); /* element-wise loader */
    sj_generated_free(g);

    /* K % 8 == 0, N % 8 == 0, ragged: cp.async zero-fill, no element loader */
    p = gemm(SJ_DTYPE_F16, SJ_DTYPE_F16, 1000, 520, 264);
    SJ_ASSERT_OK(sj_generate(ctx90, &p, NULL, &g));
    assert_non_null(strstr(g->source, "< 1000"));
    assert_null(strstr(g->source, "sj_gemm_st_shared_v4(s +"));
    sj_generated_free(g);
}

typedef struct cfg_list { int n, cap; char **items; } cfg_list;

/* Every combination of the space that `valid` accepts, as config strings. */
static void valid_configs(const sj_problem *p, cfg_list *out)
{
    gen_state *gs = NULL;
    SJ_ASSERT_OK(rt_generator(ctx90, &gs));
    const char *tname = NULL;
    SJ_ASSERT_OK(op_template(SJ_OP_GEMM, &tname));
    gen_space sp;
    SJ_ASSERT_OK(gen_space_of(gs, tname, p, &sp));
    assert_true(sp.n_params >= 6);
    memset(out, 0, sizeof *out);
    int idx[GEN_MAX_PARAMS] = { 0 };
    for (;;) {
        char cfg[256] = "";
        for (int i = 0; i < sp.n_params; i++) {
            char part[40];
            snprintf(part, sizeof part, "%s%s=%d", i ? "," : "", sp.names[i], sp.values[i][idx[i]]);
            strncat(cfg, part, sizeof cfg - strlen(cfg) - 1);
        }
        int valid = 0;
        char reason[256];
        SJ_ASSERT_OK(gen_config_valid(gs, tname, p, cfg, &valid, reason, sizeof reason));
        if (valid) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 64;
                out->items = realloc(out->items, sizeof *out->items * (size_t)out->cap);
                assert_non_null(out->items);
            }
            out->items[out->n++] = strdup(cfg);
        } else {
            assert_true(reason[0] != 0);
        }
        int i = 0;
        while (i < sp.n_params && ++idx[i] == sp.n_values[i]) idx[i++] = 0;
        if (i == sp.n_params) break;
    }
}

static void free_list(cfg_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
}

/* Every valid config of the space generates; a spread sample compiles for sm_90a. */
static void test_space_generates_and_compiles(void **state)
{
    const int64_t shapes[][3] = { { 4096, 4096, 4096 }, { 257, 129, 65 }, { 1000, 1000, 1000 } };
    const sj_dtype ins[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F16 };
    const sj_dtype os[] = { SJ_DTYPE_F16, SJ_DTYPE_F32, SJ_DTYPE_BF16 };
    const int samples[] = { 4, 2, 2 };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        sj_problem p = gemm(ins[s], os[s], shapes[s][0], shapes[s][1], shapes[s][2]);
        cfg_list l;
        valid_configs(&p, &l);
        fprintf(stderr, "# %lldx%lldx%lld: %d valid configs\n", (long long)p.m, (long long)p.n, (long long)p.k, l.n);
        assert_true(l.n >= 10);
        for (int i = 0; i < l.n; i++) {
            sj_generated *g = NULL;
            SJ_ASSERT_OK(sj_generate(ctx90, &p, l.items[i], &g));
            check_generated(&p, g);
            sj_generated_free(g);
        }
        for (int j = 0; j < samples[s]; j++) {
            int i = samples[s] > 1 ? j * (l.n - 1) / (samples[s] - 1) : 0;
            sj_generated *g = NULL;
            SJ_ASSERT_OK(sj_generate(ctx90, &p, l.items[i], &g));
            void *cubin = NULL;
            size_t size = 0;
            char *log = NULL;
            sj_status st = sj_compile(ctx90, g, &cubin, &size, &log);
            if (st != SJ_OK) fail_msg("%s does not compile for sm_90a: %s\n%s", g->config, sj_last_error(), log ? log : "");
            assert_true(size > 1000);
            free(cubin);
            free(log);
            sj_generated_free(g);
        }
        free_list(&l);
    }
}

static void test_defaults_compile_sm80(void **state)
{
    const int64_t shapes[][3] = { { 4096, 4096, 4096 }, { 17, 33, 7 }, { 1000, 520, 264 } };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        sj_problem p = gemm(s == 1 ? SJ_DTYPE_BF16 : SJ_DTYPE_F16, outs[s], shapes[s][0], shapes[s][1], shapes[s][2]);
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(ctx80, &p, NULL, &g));
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        sj_status st = sj_compile(ctx80, g, &cubin, &size, &log);
        if (st != SJ_OK) fail_msg("%s does not compile for sm_80: %s\n%s", g->config, sj_last_error(), log ? log : "");
        assert_true(size > 1000);
        free(cubin);
        free(log);
        sj_generated_free(g);
    }
}

/* Counts lines of `text` containing `needle`. */
static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *s = text; (s = strstr(s, needle)); s += strlen(needle)) n++;
    return n;
}

/* Disassembles an sm_90a build of p's kernel with cfg; NULL (after skip()) when it cannot. */
static char *sass_of(const sj_problem *p, const char *cfg)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx90, p, cfg, &g));
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    SJ_ASSERT_OK(sj_compile(ctx90, g, &cubin, &size, &log));
    free(log);
    sj_generated_free(g);
    char *text = tu_sass(cubin, size);
    free(cubin);
    return text;
}

static void test_sass_uses_tensor_cores(void **state)
{
    struct { sj_problem p; const char *cfg; } cases[] = {
        { gemm(SJ_DTYPE_F16, SJ_DTYPE_F16, 4096, 4096, 4096), NULL },
        { gemm(SJ_DTYPE_BF16, SJ_DTYPE_F32, 1000, 1000, 1000), "BM=128,BN=128,BK=64,WM=64,WN=64,STAGES=3,GROUP_M=8" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *sass = sass_of(&cases[i].p, cases[i].cfg);
        if (!sass) {
            tu_note_skip(); /* visible in ctest: no cuobjdump */
            skip();
            return;
        }
        assert_true(count(sass, "HMMA.16816.F32") >= 16);
        assert_true(count(sass, "LDSM.16.M88.4") >= 2);
        assert_true(count(sass, "LDSM.16.MT88.4") >= 2);
        assert_true(count(sass, "LDGSTS") >= 2);
        /* register spills would show as local-memory traffic */
        assert_int_equal(count(sass, "LDL"), 0);
        assert_int_equal(count(sass, "STL"), 0);
        free(sass);
    }
}

static void test_invalid_configs_rejected(void **state)
{
    sj_problem big = gemm(SJ_DTYPE_F16, SJ_DTYPE_F16, 4096, 4096, 4096);
    sj_problem tiny = gemm(SJ_DTYPE_F16, SJ_DTYPE_F16, 17, 33, 30);
    struct { const sj_problem *p; const char *cfg, *reason; } cases[] = {
        { &big, "BM=96,WM=64", "BM=96 is not a multiple of WM=64" },
        { &big, "BM=96,WM=32", "BM=96 must be" },
        { &big, "BM=64,BN=64,WM=64,WN=64", "warps" },
        { &big, "BM=256,BN=256,WM=64,WN=64", "warps" },
        { &big, "BM=128,BN=128,WM=128,WN=32", "WM=128" },
        { &big, "BK=16", "BK=16" },
        { &big, "BM=256,BN=128,BK=64,STAGES=5,WM=64,WN=64", "shared memory" },
        { &big, "STAGES=1", "STAGES=1" },
        { &big, "GROUP_M=0", "GROUP_M=0" },
        { &tiny, "BM=64,BN=32,WM=32,WN=16", "too large for M=17" },
        { &tiny, "BM=32,BN=128,WM=16,WN=64", "too large for N=33" },
        { &tiny, "BK=64", "too large for K=30" },
        { &tiny, "STAGES=4", "STAGES=4 exceeds" },
        { &tiny, "EPI=1", "N=33 is not a multiple of 8" },
        { &big, "EPI=2", "EPI=2 must be 0 or 1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_generated *g = NULL;
        SJ_ASSERT_STATUS(sj_generate(ctx90, cases[i].p, cases[i].cfg, &g), SJ_ERR_INVALID_ARGUMENT, cases[i].reason);
        assert_null(g);
    }
    /* an input dtype the mma cannot take */
    sj_problem f32in = gemm(SJ_DTYPE_F32, SJ_DTYPE_F32, 64, 64, 64);
    sj_generated *g = NULL;
    sj_status st = sj_generate(ctx90, &f32in, NULL, &g);
    assert_int_not_equal(st, SJ_OK);
    assert_null(g);
}

static void test_flops(void **state)
{
    gen_state *gs = NULL;
    SJ_ASSERT_OK(rt_generator(ctx90, &gs));
    sj_problem p = gemm(SJ_DTYPE_BF16, SJ_DTYPE_F32, 300, 200, 100);
    assert_true(gen_problem_flops(gs, "gemm_dense", &p) == 2.0 * 300 * 200 * 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_generate),
        cmocka_unit_test(test_guards_follow_shape),
        cmocka_unit_test(test_space_generates_and_compiles),
        cmocka_unit_test(test_defaults_compile_sm80),
        cmocka_unit_test(test_sass_uses_tensor_cores),
        cmocka_unit_test(test_invalid_configs_rejected),
        cmocka_unit_test(test_flops),
    };
    return TU_RUN_TESTS(tests, setup, teardown);
}
