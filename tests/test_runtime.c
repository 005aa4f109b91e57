/* test_runtime.c: the runtime on the CPU: contexts without a GPU, argument checking with clear
 * messages, the log callback, caches that cannot be opened and shared read-only ones, the
 * in-process kernel table, and the thread-local last error. */
#include "test_util.h"
#include "runtime/runtime.h"
#include "core/error.h"
#include "generator/generator.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static sj_problem gemm(int64_t m, int64_t n, int64_t k)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, m, n, k);
    return p;
}

static void test_context_without_gpu(void **state)
{
    sj_context *ctx = NULL;
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = "";
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    sj_device_info d;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &d));
    assert_true(d.nvrtc_version >= 12000);
    assert_string_equal(d.cache_path, "");
    if (!d.has_gpu) {
        assert_true(strlen(d.no_gpu_reason) > 0);
        assert_string_equal(d.arch, "sm_90a");
        sj_devptr p = 0;
        SJ_ASSERT_STATUS(sj_malloc(ctx, 64, &p), SJ_ERR_NO_GPU, "needs a GPU");
        sj_problem pr = gemm(64, 64, 64);
        SJ_ASSERT_STATUS(sj_gemm(ctx, &pr, 0x1000, 0x2000, 0x3000, NULL), SJ_ERR_NO_GPU, "needs a GPU");
        SJ_ASSERT_STATUS(sj_synchronize(ctx), SJ_ERR_NO_GPU, d.no_gpu_reason);
        /* require_gpu turns the compile-only context into a clear failure */
        sj_context *c2 = (sj_context *)0x1;
        o.require_gpu = 1;
        SJ_ASSERT_STATUS(sj_context_create(&o, &c2), SJ_ERR_NO_GPU, "no GPU");
        assert_null(c2);
    }
    SJ_ASSERT_OK(sj_context_destroy(ctx));
}

static void test_context_bad_options(void **state)
{
    sj_context *ctx = NULL;
    SJ_ASSERT_STATUS(sj_context_create(NULL, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = "";
    o.tune_policy = (sj_tune_policy)7;
    SJ_ASSERT_STATUS(sj_context_create(&o, &ctx), SJ_ERR_INVALID_ARGUMENT, "opts.tune_policy 7");
    o.tune_policy = SJ_TUNE_NEVER;
    o.arch = "compute_90";
    SJ_ASSERT_STATUS(sj_context_create(&o, &ctx), SJ_ERR_INVALID_ARGUMENT, "opts.arch 'compute_90'");
    assert_null(ctx);
    /* a negative GPU number is refused on any machine, a GPU or none */
    o.arch = NULL;
    o.device_ordinal = -1;
    SJ_ASSERT_STATUS(sj_context_create(&o, &ctx), SJ_ERR_INVALID_ARGUMENT, "device_ordinal -1: expected a GPU's number, 0 or more");
    assert_null(ctx);
    /* one past the last GPU names the range where there are GPUs; without one it is unused */
    o.device_ordinal = 1 << 20;
    sj_status st = sj_context_create(&o, &ctx);
    if (st == SJ_OK) {
        sj_device_info d;
        SJ_ASSERT_OK(sj_get_device_info(ctx, &d));
        assert_false(d.has_gpu);
        SJ_ASSERT_OK(sj_context_destroy(ctx));
    } else {
        SJ_ASSERT_STATUS(st, SJ_ERR_INVALID_ARGUMENT, "device_ordinal 1048576: out of range; this machine has ");
    }
}

/* A log callback that keeps every message it is handed. */
typedef struct log_record { int count; char text[8192]; } log_record;

static void record_log(void *user, const char *message)
{
    log_record *r = user;
    r->count++;
    size_t used = strlen(r->text);
    snprintf(r->text + used, sizeof r->text - used, "%s\n", message);
}

/* A file that is not an SQLite database, where a context will look for its cache. */
static void write_garbage(const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 512; i++) fputs("not a database ", f);
    assert_int_equal(fclose(f), 0);
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Diagnostics that are not errors reach opts.log (the library writes nothing to stderr); a
 * context without a log drops them and works the same. */
static void test_log_callback(void **state)
{
    const char *tmp = tu_tempdir();
    assert_non_null(tmp);
    char dir[256], path[512], aside[512];
    snprintf(dir, sizeof dir, "%s", tmp);
    snprintf(path, sizeof path, "%s/kernels.db", dir);
    snprintf(aside, sizeof aside, "%s/kernels.db.corrupt", dir);

    write_garbage(path);
    log_record rec = { 0 };
    sj_context_options o;
    sj_context_options_init(&o);
    assert_null(o.log);
    assert_null(o.log_user);
    o.cache_path = path;
    o.log = record_log;
    o.log_user = &rec;
    sj_context *ctx = NULL;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    assert_int_equal(rec.count, 1);
    if (!strstr(rec.text, path) || !strstr(rec.text, "moved it aside"))
        fail_msg("the log message '%s' does not name %s as moved aside", rec.text, path);
    assert_true(file_exists(aside));
    SJ_ASSERT_OK(sj_context_destroy(ctx));

    /* the same without a log: the cache is still moved aside and recreated */
    assert_int_equal(remove(aside), 0);
    write_garbage(path);
    o.log = NULL;
    o.log_user = NULL;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    sj_device_info d;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &d));
    assert_string_equal(d.cache_path, path);
    assert_true(file_exists(aside));
    SJ_ASSERT_OK(sj_context_destroy(ctx));
    assert_int_equal(rec.count, 1);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A cache is an optimization: one that cannot be opened (a path that cannot be created, a newer
 * schema, another application's file) leaves a working context without a cache, said once
 * through the log and never on stderr; the file is left as it was. */
static void test_cache_never_disables_the_library(void **state)
{
    const char *tmp = tu_tempdir();
    assert_non_null(tmp);
    char newer[512], foreign[512], cmd[1200];
    snprintf(newer, sizeof newer, "%s/newer.db", tmp);
    snprintf(foreign, sizeof foreign, "%s/foreign.db", tmp);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(newer, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA application_id=1397377364; PRAGMA user_version=99; CREATE TABLE t(x)",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(sqlite3_open(foreign, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE notes(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    const struct { const char *path, *says; } cases[] = {
        { "/proc/sparsejit-no/kernels.db", "/proc/sparsejit-no" },
        { newer, "newer sparsejit" },
        { foreign, "another application" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        log_record rec = { 0 };
        sj_context_options o;
        sj_context_options_init(&o);
        o.cache_path = cases[i].path;
        o.log = record_log;
        o.log_user = &rec;
        sj_context *ctx = NULL;
        SJ_ASSERT_OK(sj_context_create(&o, &ctx));
        assert_int_equal(rec.count, 1);
        if (!strstr(rec.text, "running without a kernel cache") || !strstr(rec.text, cases[i].says))
            fail_msg("%s: log '%s'", cases[i].path, rec.text);
        sj_device_info d;
        SJ_ASSERT_OK(sj_get_device_info(ctx, &d));
        assert_string_equal(d.cache_path, "");
        sj_problem p = gemm(64, 64, 64);
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(ctx, &p, NULL, &g)); /* the library works */
        sj_generated_free(g);
        SJ_ASSERT_OK(sj_context_destroy(ctx));
    }
    assert_int_equal(sqlite3_open(newer, &db), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 99);
    sqlite3_finalize(s);
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

/* A winner stored under key in a new cache file at path. */
static void store_winner(const char *path, const cache_key *key, const char *config, double median_us)
{
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_winner w = { .median_us = median_us, .tflops = 1 };
    snprintf(w.config, sizeof w.config, "%s", config);
    snprintf(w.strategy, sizeof w.strategy, "random");
    SJ_ASSERT_OK(cache_put_tuning(db, key, NULL, 0, &w, NULL, 0));
    cache_close(db);
}

/* $SPARSEJIT_CACHE_RO: shared read-only caches under the user's own, which wins where both
 * have an entry; a shared file is never written, a bad entry in the list is skipped and said. */
static void test_shared_read_only_caches(void **state)
{
    const char *tmp = tu_tempdir();
    assert_non_null(tmp);
    char own[512], shared1[512], shared2[512], list[1700], cmd[600];
    snprintf(own, sizeof own, "%s/own.db", tmp);
    snprintf(shared1, sizeof shared1, "%s/shared1.db", tmp);
    snprintf(shared2, sizeof shared2, "%s/shared2.db", tmp);
    cache_key a = { .gpu = "G", .arch = "sm_90a", .sm_count = 132, .driver_version = 13000, .nvrtc_version = 13000,
                    .template_name = "gemm", .op = "gemm", .dtype = "f16", .out_dtype = "f16", .m = 64, .n = 64, .k = 64 };
    memset(a.template_hash, 'a', 64);
    cache_key b = a, c = a;
    b.m = 128;
    c.m = 256;
    store_winner(shared1, &a, "BM=1", 5.0);
    store_winner(shared1, &b, "BM=2", 5.0);
    store_winner(shared2, &c, "BM=3", 5.0);
    store_winner(own, &b, "BM=4", 9.0); /* the user's own, though slower: it was tuned here */
    snprintf(list, sizeof list, "%s:%s/missing.db:%s", shared1, tmp, shared2);
    setenv("SPARSEJIT_CACHE_RO", list, 1);
    log_record rec = { 0 };
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = own;
    o.log = record_log;
    o.log_user = &rec;
    sj_context *ctx = NULL;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    unsetenv("SPARSEJIT_CACHE_RO");
    assert_int_equal(rec.count, 1);
    if (!strstr(rec.text, "skipped a shared cache") || !strstr(rec.text, "missing.db")) fail_msg("log '%s'", rec.text);
    cache_winner w;
    SJ_ASSERT_OK(rt_cached_winner(ctx, &a, &w));
    assert_string_equal(w.config, "BM=1");
    SJ_ASSERT_OK(rt_cached_winner(ctx, &b, &w));
    assert_string_equal(w.config, "BM=4");
    SJ_ASSERT_OK(rt_cached_winner(ctx, &c, &w));
    assert_string_equal(w.config, "BM=3");
    cache_key none = a;
    none.m = 512;
    SJ_ASSERT_STATUS(rt_cached_winner(ctx, &none, &w), SJ_ERR_NOT_FOUND, "");
    assert_true(cache_read_only(ctx->shared[0]));
    assert_false(cache_read_only(ctx->cache));
    SJ_ASSERT_OK(sj_context_destroy(ctx));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

static void test_gemm_bad_arguments(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_problem p = gemm(128, 128, 128);
    SJ_ASSERT_STATUS(sj_gemm(NULL, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    SJ_ASSERT_STATUS(sj_gemm(ctx, NULL, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem is NULL");
    p = gemm(0, 128, 128);
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem.m = 0");
    p = gemm(128, -5, 128);
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem.n = -5");
    p = gemm(128, 128, (int64_t)1 << 40);
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "exceeds the limit");
    p = gemm(128, 128, 128);
    p.dtype = (sj_dtype)42;
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem.dtype 42");
    p.dtype = SJ_DTYPE_F32;
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "expected f16 or bf16");
    p = gemm(128, 128, 128);
    p.out_dtype = (sj_dtype)0;
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "problem.out_dtype");
    p = gemm(128, 128, 128);
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 0, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "A is a null device pointer");
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 18, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "B = 0x12 is not 16-byte aligned");
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 8, NULL), SJ_ERR_INVALID_ARGUMENT, "C = 0x8 is not 16-byte aligned");
    p.op = SJ_OP_VNM_SPMM;
    p.vnm_v = 64; p.vnm_n = 2; p.vnm_m = 8;
    SJ_ASSERT_STATUS(sj_gemm(ctx, &p, 16, 16, 16, NULL), SJ_ERR_INVALID_ARGUMENT, "expected gemm");
    sj_context_destroy(ctx);
}

static void test_problem_validation(void **state)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_VNM_SPMM, SJ_DTYPE_BF16, 256, 256, 256);
    p.vnm_v = 48; p.vnm_n = 2; p.vnm_m = 8;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "V must be 16, 32, 64 or 128");
    p.vnm_v = 64; p.vnm_m = 3;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "M must be in 4..128");
    p.vnm_m = 8; p.vnm_n = 3;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "only N = 2");
    p.vnm_n = 2;
    SJ_ASSERT_OK(sj_problem_validate(&p));
    char d[128];
    SJ_ASSERT_OK(sj_problem_describe(&p, d, sizeof d));
    assert_string_equal(d, "vnm-spmm bf16->bf16 256x256x256 V=64,NS=2,MS=8");
    sj_problem_init(&p, SJ_OP_TWELL_FFN, SJ_DTYPE_F16, 64, 64, 64);
    p.twell_tile = 64; p.twell_capacity = 65;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "twell_capacity = 65: expected 1..twell_tile (64)");
    /* a tile wider than an entry's 16 index bits address */
    p.twell_tile = 1 << 20; p.twell_capacity = 8;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "problem.twell_tile = 1048576: expected 1..65536");
    p.twell_tile = 64;
    SJ_ASSERT_STATUS(sj_problem_validate(&p), SJ_ERR_INVALID_ARGUMENT, "problem.d_ff");
    sj_dtype dt;
    SJ_ASSERT_STATUS(sj_dtype_parse("f8", &dt), SJ_ERR_INVALID_ARGUMENT, "unknown dtype 'f8'");
    SJ_ASSERT_OK(sj_dtype_parse("bf16", &dt));
    assert_int_equal(dt, SJ_DTYPE_BF16);
    sj_op op;
    SJ_ASSERT_STATUS(sj_op_parse("conv", &op), SJ_ERR_INVALID_ARGUMENT, "unknown op 'conv'");
}

static void test_generate_and_compile_errors(void **state)
{
    sj_context *ctx = tu_compile_context("sm_80");
    assert_non_null(ctx);
    sj_problem p = gemm(64, 64, 64);
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "NOPE=1", &g), SJ_ERR_INVALID_ARGUMENT, "no parameter 'NOPE'");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=abc", &g), SJ_ERR_INVALID_ARGUMENT, "not an integer");
    /* too large for an int: refused with the text given, never narrowed to another value */
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "BM=4294967360", &g), SJ_ERR_INVALID_ARGUMENT,
                     "BM = '4294967360' is out of range; expected an integer in -2147483648..2147483647");
    SJ_ASSERT_STATUS(sj_generate(ctx, &p, "STAGES=3888888888888888888", &g), SJ_ERR_INVALID_ARGUMENT,
                     "STAGES = '3888888888888888888' is out of range");
    assert_null(g);
    /* sj_set_config refuses what the op could not run, at once */
    SJ_ASSERT_STATUS(sj_set_config(ctx, &p, "garbage;;;"), SJ_ERR_INVALID_ARGUMENT, "expected NAME=INTEGER pairs");
    SJ_ASSERT_STATUS(sj_set_config(ctx, &p, "BM=99999999999,XX=1"), SJ_ERR_INVALID_ARGUMENT, "out of range");
    SJ_ASSERT_STATUS(sj_set_config(ctx, &p, "XX=1"), SJ_ERR_INVALID_ARGUMENT, "no parameter 'XX'");
    SJ_ASSERT_STATUS(sj_set_config(ctx, &p, "STAGES=99"), SJ_ERR_INVALID_ARGUMENT, "not valid for this problem");
    SJ_ASSERT_OK(sj_generate(ctx, &p, NULL, &g));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, g->config)); /* the default is a valid config */
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    void *cubin = NULL;
    size_t size = 0;
    SJ_ASSERT_STATUS(sj_compile(ctx, g, NULL, &size, NULL), SJ_ERR_INVALID_ARGUMENT, "must be non-NULL");
    /* a corrupted source is an NVRTC error with the log in the message */
    char *saved = g->source;
    g->source = "extern \"C\" __global__ void k() { this is not cuda; }";
    SJ_ASSERT_STATUS(sj_compile(ctx, g, &cubin, &size, NULL), SJ_ERR_NVRTC, "error");
    g->source = saved;
    sj_generated_free(g);
    sj_stats st;
    SJ_ASSERT_OK(sj_get_stats(ctx, &st));
    assert_int_equal(st.nvrtc_compiles, 1);
    assert_int_equal(st.lua_generations, 1);
    sj_context_destroy(ctx);
}

/* The kernel table against a plain list, through growth and forgets. */
/* A cached winner whose config the template rejects (a crafted import, a template that changed
 * its parameters) gives way to the default config, said once through the log; a valid one is
 * used. The request path that loads it needs a GPU: test_gemm_gpu plants a corrupt cubin. */
static void test_rejected_winner_falls_back(void **state)
{
    const char *tmp = tu_tempdir();
    assert_non_null(tmp);
    char path[512];
    snprintf(path, sizeof path, "%s/kernels.db", tmp);
    remove(path);
    log_record rec = { 0 };
    sj_context_options o;
    sj_context_options_init(&o);
    o.cache_path = path;
    o.arch = "sm_90a";
    o.log = record_log;
    o.log_user = &rec;
    sj_context *ctx = NULL;
    SJ_ASSERT_OK(sj_context_create(&o, &ctx));
    assert_non_null(ctx->cache);
    const char *bad[] = { "XX=1", "BM=99999999", "STAGES=99" };
    for (int i = 0; i < 4; i++) {
        sj_problem p = gemm(256, 256, 64 * (i + 1));
        cache_key key;
        SJ_ASSERT_OK(rt_cache_key(ctx, &p, NULL, &key));
        gen_state *g;
        SJ_ASSERT_OK(rt_generator(ctx, &g));
        char valid[256];
        SJ_ASSERT_OK(gen_canonical_config(g, key.template_name, &p, "", valid, sizeof valid));
        cache_winner w = { .median_us = 1.0, .tflops = 1.0, .tuned_at = 1700000000 };
        snprintf(w.config, sizeof w.config, "%s", i < 3 ? bad[i] : valid);
        snprintf(w.strategy, sizeof w.strategy, "exhaustive");
        SJ_ASSERT_OK(cache_put_tuning(ctx->cache, &key, NULL, 0, &w, NULL, 0));
        char config[256] = "untouched";
        sj_config_origin origin = SJ_CONFIG_EXPLICIT;
        int before = rec.count;
        SJ_ASSERT_OK(rt_cached_config(ctx, &p, config, sizeof config, &origin));
        if (i < 3) {
            assert_string_equal(config, "");
            assert_int_equal(origin, SJ_CONFIG_DEFAULT);
            assert_int_equal(rec.count, before + 1);
            if (!strstr(rec.text, bad[i]) || !strstr(rec.text, "using the template's default config"))
                fail_msg("the log '%s' does not name %s and the fallback", rec.text, bad[i]);
        } else {
            assert_string_equal(config, valid);
            assert_int_equal(origin, SJ_CONFIG_TUNED);
            assert_int_equal(rec.count, before);
        }
    }
    SJ_ASSERT_OK(sj_context_destroy(ctx));
    remove(path);
}

static void test_kernel_table(void **state)
{
    kernel_table t;
    kernel_table_init(&t);
    enum { N = 700 };
    static loaded_kernel ks[N];
    for (int i = 0; i < N; i++) {
        sj_problem p = gemm(64 + i, 64, 64);
        char cfg[32];
        snprintf(cfg, sizeof cfg, i % 2 ? "BM=%d" : "", i);
        SJ_ASSERT_OK(kernel_table_put(&t, &p, cfg, &ks[i]));
    }
    assert_int_equal(t.count, N);
    for (int i = 0; i < N; i++) {
        sj_problem p = gemm(64 + i, 64, 64);
        char cfg[32];
        snprintf(cfg, sizeof cfg, i % 2 ? "BM=%d" : "", i);
        assert_ptr_equal(kernel_table_get(&t, &p, cfg), &ks[i]);
        assert_null(kernel_table_get(&t, &p, "BM=999999"));
    }
    /* fields that do not select a kernel (vnm_* of a gemm) do not change the key */
    sj_problem q = gemm(64, 64, 64);
    q.vnm_v = 99;
    assert_ptr_equal(kernel_table_get(&t, &q, ""), &ks[0]);
    /* a TwELL problem's sparsity and skew select its tuned winner: they are part of the key */
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 256, 1024, 128, 16));
    sj_problem tw[3];
    SJ_ASSERT_OK(sj_twell_ffn_problem(&l, 512, SJ_DTYPE_F16, &tw[0]));
    tw[0].twell_sparsity = 0.99;
    tw[1] = tw[0];
    tw[1].twell_sparsity = 0.999;
    tw[2] = tw[0];
    tw[2].twell_skew = 1;
    for (int i = 0; i < 3; i++) SJ_ASSERT_OK(kernel_table_put(&t, &tw[i], "", &ks[i]));
    for (int i = 0; i < 3; i++) assert_ptr_equal(kernel_table_get(&t, &tw[i], ""), &ks[i]);
    for (int i = 0; i < 3; i++) kernel_table_forget(&t, &tw[i]);
    for (int i = 0; i < N; i += 2) {
        sj_problem p = gemm(64 + i, 64, 64);
        kernel_table_forget(&t, &p);
    }
    for (int i = 0; i < N; i++) {
        sj_problem p = gemm(64 + i, 64, 64);
        char cfg[32];
        snprintf(cfg, sizeof cfg, i % 2 ? "BM=%d" : "", i);
        if (i % 2) assert_ptr_equal(kernel_table_get(&t, &p, cfg), &ks[i]);
        else assert_null(kernel_table_get(&t, &p, cfg));
    }
    assert_int_equal(t.count, N / 2);
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    SJ_ASSERT_STATUS(kernel_table_put(&t, &q, big, &ks[0]), SJ_ERR_INVALID_ARGUMENT, "longer than");
    kernel_table_free(&t);
}

static void *other_thread(void *arg)
{
    *(int *)arg = sj_last_error()[0] == 0;
    return NULL;
}

static void test_last_error_is_thread_local(void **state)
{
    error_set(SJ_ERR_IO, "main thread failure");
    int clean = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &clean), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(clean, 1);
    assert_string_equal(sj_last_error(), "main thread failure");
    assert_string_equal(sj_status_name(SJ_ERR_NVRTC), "NVRTC error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_without_gpu),
        cmocka_unit_test(test_context_bad_options),
        cmocka_unit_test(test_log_callback),
        cmocka_unit_test(test_cache_never_disables_the_library),
        cmocka_unit_test(test_shared_read_only_caches),
        cmocka_unit_test(test_gemm_bad_arguments),
        cmocka_unit_test(test_problem_validation),
        cmocka_unit_test(test_generate_and_compile_errors),
        cmocka_unit_test(test_rejected_winner_falls_back),
        cmocka_unit_test(test_kernel_table),
        cmocka_unit_test(test_last_error_is_thread_local),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
