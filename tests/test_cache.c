/* test_cache.c: the SQLite kernel cache (cache/cache.h), all on the CPU: round trips, exact-key
 * invalidation, keep-the-best, corruption handling, concurrent processes and threads, a writer
 * killed mid-transaction, export/import, the default path and argument checks. */
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache/cache.h"

static uint64_t rng;

/* ---------------------------------------------------------------- helpers */

static uint64_t rnd(void)
{
    return (uint64_t)((tu_uniform(&rng) + 1.0) * 0.5 * 4294967296.0);
}

static char *fresh_dir(void)
{
    const char *d = tu_tempdir();
    assert_non_null(d);
    return strdup(d);
}

static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static void remove_dir(char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* A key with random shape and template hash, for an H200. */
static cache_key random_key(void)
{
    cache_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "NVIDIA H200");
    snprintf(k.arch, sizeof k.arch, "sm_90a");
    k.sm_count = 132;
    k.driver_version = 13000;
    k.nvrtc_version = 13000;
    snprintf(k.template_name, sizeof k.template_name, "vnm_spmm");
    for (int i = 0; i < 64; i++) k.template_hash[i] = "0123456789abcdef"[rnd() % 16];
    snprintf(k.op, sizeof k.op, "vnm-spmm");
    snprintf(k.dtype, sizeof k.dtype, "f16");
    snprintf(k.out_dtype, sizeof k.out_dtype, "f16");
    k.m = 64 + (int64_t)(rnd() % 8192);
    k.n = 64 + (int64_t)(rnd() % 8192);
    k.k = 64 + (int64_t)(rnd() % 8192);
    snprintf(k.sparsity, sizeof k.sparsity, "V=64,NS=2,MS=%d", 4 + (int)(rnd() % 8));
    return k;
}

/* A kernel with random geometry and random cubin bytes (free k->cubin). */
static cache_kernel random_kernel(const char *config, size_t size)
{
    cache_kernel k;
    memset(&k, 0, sizeof k);
    snprintf(k.config, sizeof k.config, "%s", config);
    snprintf(k.entry, sizeof k.entry, "sj_kernel_%08x", (unsigned)rnd());
    for (int i = 0; i < 3; i++) {
        k.grid[i] = 1 + (unsigned)(rnd() % 4096);
        k.block[i] = 1 + (unsigned)(rnd() % 256);
    }
    k.shared_bytes = (unsigned)(rnd() % 232448);
    k.cubin_size = size;
    k.cubin = malloc(size);
    for (size_t i = 0; i < size; i++) ((unsigned char *)k.cubin)[i] = (unsigned char)rnd();
    k.compile_seconds = 0.1 + (double)(rnd() % 1000) / 1000.0;
    return k;
}

static void random_config(char *buf, size_t len)
{
    snprintf(buf, len, "BM=%d,BN=%d,BK=%d,STAGES=%d", 16 << (rnd() % 4), 16 << (rnd() % 4),
             16 << (rnd() % 3), 2 + (int)(rnd() % 4));
}

static void assert_kernel_equal(const cache_kernel *a, const cache_kernel *b)
{
    assert_string_equal(a->config, b->config);
    assert_string_equal(a->entry, b->entry);
    assert_memory_equal(a->grid, b->grid, sizeof a->grid);
    assert_memory_equal(a->block, b->block, sizeof a->block);
    assert_int_equal(a->shared_bytes, b->shared_bytes);
    assert_int_equal(a->cubin_size, b->cubin_size);
    assert_memory_equal(a->cubin, b->cubin, a->cubin_size);
    assert_true(fabs(a->compile_seconds - b->compile_seconds) < 1e-12);
}

/* Reads kernel (key, config) and compares it with expected. */
static void assert_kernel_hit(cache_db *db, const cache_key *key, const cache_kernel *expected)
{
    cache_kernel got;
    memset(&got, 0xFF, sizeof got);
    SJ_ASSERT_OK(cache_get_kernel(db, key, expected->config, &got));
    assert_kernel_equal(&got, expected);
    free(got.cubin);
}

static cache_trial random_trial(const char *config, int ok)
{
    cache_trial t;
    memset(&t, 0, sizeof t);
    snprintf(t.config, sizeof t.config, "%s", config);
    snprintf(t.status, sizeof t.status, "%s", ok ? "ok" : "compile-error");
    t.compile_seconds = 0.2 + (double)(rnd() % 1000) / 997.0;
    if (ok) {
        t.median_us = 10.0 + (double)(rnd() % 100000) / 7.0;
        t.p20_us = t.median_us * 0.97;
        t.p80_us = t.median_us * 1.04;
        t.tflops = 1000.0 / t.median_us;
    } else {
        t.median_us = t.p20_us = t.p80_us = t.tflops = NAN;
    }
    return t;
}

static int same_real(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

typedef struct trial_list { cache_trial *t; int n, cap; } trial_list;

static int collect_trial(void *user, const cache_trial *t)
{
    trial_list *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    l->t[l->n++] = *t;
    return 0;
}

static trial_list trials_of(cache_db *db, const cache_key *key)
{
    trial_list l = { 0 };
    SJ_ASSERT_OK(cache_list_trials(db, key, collect_trial, &l));
    return l;
}

static const cache_trial *find_trial(const trial_list *l, const char *config)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].config, config) == 0) return &l->t[i];
    return NULL;
}

static void assert_trial_equal(const cache_trial *a, const cache_trial *b)
{
    assert_string_equal(a->config, b->config);
    assert_string_equal(a->status, b->status);
    assert_true(same_real(a->median_us, b->median_us));
    assert_true(same_real(a->p20_us, b->p20_us));
    assert_true(same_real(a->p80_us, b->p80_us));
    assert_true(same_real(a->tflops, b->tflops));
    assert_true(same_real(a->compile_seconds, b->compile_seconds));
}

typedef struct key_count { int keys, kernels, trials, winners; } key_count;

static int count_key(void *user, const cache_key *k, const cache_winner *w, int n_kernels, int n_trials)
{
    key_count *c = user;
    c->keys++;
    c->kernels += n_kernels;
    c->trials += n_trials;
    c->winners += w != NULL;
    return 0;
}

static key_count count_all(cache_db *db)
{
    key_count c = { 0 };
    SJ_ASSERT_OK(cache_list(db, count_key, &c));
    return c;
}

/* A one-value query through a separate raw connection. */
static sqlite3_int64 raw_int(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    sqlite3_int64 v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
    sqlite3_close(db);
}

static void assert_integrity_ok(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* ---------------------------------------------------------------- round trips */

static void test_kernel_round_trip(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "sub/dir/kernels.db");
    cache_db *db = NULL;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db)); /* creates sub/dir */
    assert_int_equal(raw_int(path, "PRAGMA application_id"), 0x534A4954);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), 1);

    cache_key key = random_key();
    cache_kernel ks[5];
    for (int i = 0; i < 5; i++) {
        char config[64];
        snprintf(config, sizeof config, "BM=%d,BN=%d", 32 << i, (int)(rnd() % 1000));
        ks[i] = random_kernel(config, 1 + (size_t)(rnd() % 70000));
        SJ_ASSERT_OK(cache_put_kernel(db, &key, &ks[i]));
    }
    for (int i = 0; i < 5; i++) assert_kernel_hit(db, &key, &ks[i]);
    /* another config of the same key is a miss */
    cache_kernel got;
    SJ_ASSERT_STATUS(cache_get_kernel(db, &key, "BM=1,BN=1", &got), SJ_ERR_NOT_FOUND, "no kernel");
    assert_null(got.cubin);

    /* putting (key, config) again replaces it, and survives reopening */
    cache_kernel again = random_kernel(ks[2].config, 1 + (size_t)(rnd() % 5000));
    SJ_ASSERT_OK(cache_put_kernel(db, &key, &again));
    cache_close(db);
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    assert_kernel_hit(db, &key, &again);
    assert_kernel_hit(db, &key, &ks[4]);
    key_count c = count_all(db);
    assert_int_equal(c.keys, 1);
    assert_int_equal(c.kernels, 5);
    assert_int_equal(c.winners, 0);
    cache_close(db);
    for (int i = 0; i < 5; i++) free(ks[i].cubin);
    free(again.cubin);
    free(path);
    remove_dir(dir);
}

static void test_tuning_round_trip(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_key key = random_key();
    cache_winner none;
    SJ_ASSERT_STATUS(cache_get_winner(db, &key, &none), SJ_ERR_NOT_FOUND, "never tuned");

    enum { N = 40 };
    cache_trial trials[N];
    int best = -1;
    for (int i = 0; i < N; i++) {
        char config[64];
        snprintf(config, sizeof config, "BM=%d,BN=%d,T=%d", 64, 128, i);
        trials[i] = random_trial(config, i % 7 != 3);
        if (!isnan(trials[i].median_us) && (best < 0 || trials[i].median_us < trials[best].median_us)) best = i;
    }
    cache_winner w = { .median_us = trials[best].median_us, .tflops = trials[best].tflops, .tuned_at = 1700000000 };
    snprintf(w.config, sizeof w.config, "%s", trials[best].config);
    snprintf(w.strategy, sizeof w.strategy, "exhaustive");
    cache_kernel k = random_kernel(w.config, 4096 + (size_t)(rnd() % 4096));
    SJ_ASSERT_OK(cache_put_tuning(db, &key, trials, N, &w, &k, 0));

    cache_winner got;
    memset(&got, 0xFF, sizeof got);
    SJ_ASSERT_OK(cache_get_winner(db, &key, &got));
    assert_string_equal(got.config, w.config);
    assert_true(got.median_us == w.median_us);
    assert_true(got.tflops == w.tflops);
    assert_string_equal(got.strategy, "exhaustive");
    assert_int_equal(got.tuned_at, 1700000000);
    assert_kernel_hit(db, &key, &k);

    trial_list l = trials_of(db, &key);
    assert_int_equal(l.n, N);
    for (int i = 0; i < N; i++) {
        const cache_trial *t = find_trial(&l, trials[i].config);
        assert_non_null(t);
        assert_trial_equal(t, &trials[i]);
    }
    /* ok trials come first, fastest first */
    assert_string_equal(l.t[0].config, trials[best].config);
    for (int i = 1; i < l.n; i++)
        if (!strcmp(l.t[i].status, "ok")) {
            assert_string_equal(l.t[i - 1].status, "ok");
            assert_true(l.t[i - 1].median_us <= l.t[i].median_us);
        }
    free(l.t);

    key_count c = count_all(db);
    assert_int_equal(c.keys, 1);
    assert_int_equal(c.kernels, 1);
    assert_int_equal(c.trials, N);
    assert_int_equal(c.winners, 1);

    /* a re-tune updates the (key, config) rows instead of adding rows */
    cache_trial again = random_trial(trials[5].config, 1);
    SJ_ASSERT_OK(cache_put_tuning(db, &key, &again, 1, NULL, NULL, 0));
    l = trials_of(db, &key);
    assert_int_equal(l.n, N);
    assert_trial_equal(find_trial(&l, again.config), &again);
    free(l.t);

    /* clear empties everything; vacuum works afterwards */
    SJ_ASSERT_OK(cache_clear(db));
    c = count_all(db);
    assert_int_equal(c.keys + c.kernels + c.trials + c.winners, 0);
    SJ_ASSERT_STATUS(cache_get_winner(db, &key, &got), SJ_ERR_NOT_FOUND, NULL);
    SJ_ASSERT_OK(cache_vacuum(db));
    cache_close(db);
    free(k.cubin);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- the key is never stale */

static void test_key_invalidation(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_key key = random_key();
    char config[128];
    random_config(config, sizeof config);
    cache_kernel k = random_kernel(config, 2000);
    cache_trial t = random_trial(config, 1);
    cache_winner w = { .median_us = t.median_us, .tflops = t.tflops };
    snprintf(w.config, sizeof w.config, "%s", config);
    snprintf(w.strategy, sizeof w.strategy, "random");
    SJ_ASSERT_OK(cache_put_tuning(db, &key, &t, 1, &w, &k, 0));

    for (int field = 0; field < 14; field++) {
        cache_key other = key;
        const char *name = "";
        switch (field) {
        case 0: name = "template_hash"; other.template_hash[rnd() % 64] ^= 1; break;
        case 1: name = "template_name"; snprintf(other.template_name, sizeof other.template_name, "vnm_spmm2"); break;
        case 2: name = "driver"; other.driver_version += 10; break;
        case 3: name = "nvrtc"; other.nvrtc_version += 10; break;
        case 4: name = "gpu"; snprintf(other.gpu, sizeof other.gpu, "NVIDIA H100 80GB HBM3"); break;
        case 5: name = "sm_count"; other.sm_count = 114; break;
        case 6: name = "arch"; snprintf(other.arch, sizeof other.arch, "sm_90"); break;
        case 7: name = "m"; other.m += 1; break;
        case 8: name = "n"; other.n *= 2; break;
        case 9: name = "k"; other.k += 64; break;
        case 10: name = "sparsity"; snprintf(other.sparsity, sizeof other.sparsity, "V=128,NS=2,MS=8"); break;
        case 11: name = "dtype"; snprintf(other.dtype, sizeof other.dtype, "bf16"); break;
        case 12: name = "out_dtype"; snprintf(other.out_dtype, sizeof other.out_dtype, "f32"); break;
        case 13: name = "op"; snprintf(other.op, sizeof other.op, "gemm"); break;
        }
        cache_kernel got;
        cache_winner gw;
        sj_status st = cache_get_kernel(db, &other, config, &got);
        if (st != SJ_ERR_NOT_FOUND) fail_msg("changed %s: cache_get_kernel -> %s, expected a miss", name, sj_status_name(st));
        st = cache_get_winner(db, &other, &gw);
        if (st != SJ_ERR_NOT_FOUND) fail_msg("changed %s: cache_get_winner -> %s, expected a miss", name, sj_status_name(st));
        trial_list l = trials_of(db, &other);
        assert_int_equal(l.n, 0);
        free(l.t);
    }
    /* the unchanged key still hits */
    assert_kernel_hit(db, &key, &k);
    cache_winner gw;
    SJ_ASSERT_OK(cache_get_winner(db, &key, &gw));
    assert_string_equal(gw.config, config);

    /* key texts are escaped: field values containing separators cannot collide */
    cache_key a = key, b = key;
    snprintf(a.gpu, sizeof a.gpu, "G;arch=sm_90a");
    snprintf(a.arch, sizeof a.arch, "X");
    snprintf(b.gpu, sizeof b.gpu, "G");
    snprintf(b.arch, sizeof b.arch, "sm_90a;arch=X");
    char ta[2048], tb[2048];
    cache_key_text(&a, ta, sizeof ta);
    cache_key_text(&b, tb, sizeof tb);
    assert_string_not_equal(ta, tb);
    assert_non_null(strstr(ta, "gpu=G\\;arch=sm_90a;arch=X;"));
    cache_kernel ka = random_kernel(config, 100), kb = random_kernel(config, 200);
    SJ_ASSERT_OK(cache_put_kernel(db, &a, &ka));
    SJ_ASSERT_OK(cache_put_kernel(db, &b, &kb));
    assert_kernel_hit(db, &a, &ka);
    assert_kernel_hit(db, &b, &kb);
    /* a short buffer is truncated, still terminated */
    char small[8];
    cache_key_text(&key, small, sizeof small);
    assert_string_equal(small, "gpu=NVI");

    cache_close(db);
    free(k.cubin);
    free(ka.cubin);
    free(kb.cubin);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- keep the best */

static void put_winner(cache_db *db, const cache_key *key, const char *config, double median, int replace,
                       cache_kernel *kernel_out)
{
    cache_trial t = random_trial(config, 1);
    t.median_us = median;
    cache_winner w = { .median_us = median, .tflops = 1000.0 / median };
    snprintf(w.config, sizeof w.config, "%s", config);
    snprintf(w.strategy, sizeof w.strategy, "random");
    *kernel_out = random_kernel(config, 300 + (size_t)(rnd() % 300));
    SJ_ASSERT_OK(cache_put_tuning(db, key, &t, 1, &w, kernel_out, replace));
}

static void assert_winner(cache_db *db, const cache_key *key, const char *config, double median)
{
    cache_winner w;
    SJ_ASSERT_OK(cache_get_winner(db, key, &w));
    assert_string_equal(w.config, config);
    assert_true(w.median_us == median);
}

static void test_keep_the_best(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_key key = random_key();
    double base = 50.0 + (double)(rnd() % 1000);
    cache_kernel ka, kb, kt, kc, kd;
    put_winner(db, &key, "CFG=A", base, 0, &ka);
    assert_winner(db, &key, "CFG=A", base);
    put_winner(db, &key, "CFG=B", base * 1.2, 0, &kb); /* slower: the winner stays */
    assert_winner(db, &key, "CFG=A", base);
    put_winner(db, &key, "CFG=A2", base, 0, &kt);      /* a tie is not better */
    assert_winner(db, &key, "CFG=A", base);
    put_winner(db, &key, "CFG=C", base * 0.8, 0, &kc); /* faster: replaces */
    assert_winner(db, &key, "CFG=C", base * 0.8);
    put_winner(db, &key, "CFG=D", base * 3.0, 1, &kd); /* replace_winner: replaces although slower */
    assert_winner(db, &key, "CFG=D", base * 3.0);
    /* every trial and every kernel was stored, winner or not */
    trial_list l = trials_of(db, &key);
    assert_int_equal(l.n, 5);
    free(l.t);
    assert_kernel_hit(db, &key, &ka);
    assert_kernel_hit(db, &key, &kc);
    assert_kernel_hit(db, &key, &kd);
    cache_close(db);
    free(ka.cubin); free(kb.cubin); free(kt.cubin); free(kc.cubin); free(kd.cubin);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- corruption */

static void test_corrupt_cubin(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_key key = random_key();
    cache_kernel k, other = random_kernel("CFG=other", 900);
    put_winner(db, &key, "CFG=win", 77.0, 0, &k);
    SJ_ASSERT_OK(cache_put_kernel(db, &key, &other));

    /* flip one byte of the stored cubin behind the cache's back */
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    sqlite3_busy_timeout(raw, 5000);
    unsigned char *bad = malloc(k.cubin_size);
    memcpy(bad, k.cubin, k.cubin_size);
    bad[rnd() % k.cubin_size] ^= (unsigned char)(1 + rnd() % 255);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(raw, "UPDATE kernels SET cubin=?1 WHERE config='CFG=win'", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_bind_blob(s, 1, bad, (int)k.cubin_size, SQLITE_STATIC), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    assert_int_equal(sqlite3_changes(raw), 1);
    sqlite3_finalize(s);
    sqlite3_close(raw);
    free(bad);

    cache_kernel got;
    SJ_ASSERT_STATUS(cache_get_kernel(db, &key, "CFG=win", &got), SJ_ERR_NOT_FOUND, "corrupt");
    assert_non_null(strstr(sj_last_error(), "rebuilt"));
    assert_null(got.cubin);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM kernels WHERE config='CFG=win'"), 0);
    /* now an ordinary miss; the other kernel and the winner row are untouched */
    SJ_ASSERT_STATUS(cache_get_kernel(db, &key, "CFG=win", &got), SJ_ERR_NOT_FOUND, "no kernel");
    assert_kernel_hit(db, &key, &other);
    assert_winner(db, &key, "CFG=win", 77.0);
    /* a rebuilt kernel is stored and read again */
    SJ_ASSERT_OK(cache_put_kernel(db, &key, &k));
    assert_kernel_hit(db, &key, &k);
    cache_close(db);
    free(k.cubin);
    free(other.cubin);
    free(path);
    remove_dir(dir);
}

static void write_random_file(const char *path, size_t size, size_t offset)
{
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    unsigned char *buf = malloc(size);
    for (size_t i = 0; i < size; i++) buf[i] = (unsigned char)rnd();
    assert_int_equal(pwrite(fd, buf, size, (off_t)offset), (ssize_t)size);
    close(fd);
    free(buf);
}

static void assert_fresh_and_working(const char *path)
{
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    key_count c = count_all(db);
    assert_int_equal(c.keys, 0);
    cache_key key = random_key();
    cache_kernel k = random_kernel("CFG=1", 1234);
    SJ_ASSERT_OK(cache_put_kernel(db, &key, &k));
    assert_kernel_hit(db, &key, &k);
    cache_close(db);
    free(k.cubin);
    assert_integrity_ok(path);
}

/* The file once at another path (same inode) is at `aside`, whole. */
static void assert_moved_to(const char *aside, const struct stat *was, off_t size)
{
    struct stat now;
    assert_int_equal(stat(aside, &now), 0);
    assert_int_equal(now.st_ino, was->st_ino);
    assert_int_equal(now.st_size, size);
}

static void test_garbage_file_moved_aside(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *aside = path_in(dir, "kernels.db.corrupt");
    write_random_file(path, 65536, 0);
    struct stat before;
    assert_int_equal(stat(path, &before), 0);
    assert_fresh_and_working(path);
    assert_moved_to(aside, &before, 65536);
    free(path);
    free(aside);
    remove_dir(dir);
}

/* A second corrupt file goes to kernels.db.corrupt.1: the first, maybe the only copy of
 * someone's tuning, is not overwritten. */
static void test_second_corrupt_kept(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *aside = path_in(dir, "kernels.db.corrupt"),
         *aside1 = path_in(dir, "kernels.db.corrupt.1");
    write_random_file(path, 65536, 0);
    struct stat first, second;
    assert_int_equal(stat(path, &first), 0);
    assert_fresh_and_working(path);
    assert_int_equal(unlink(path), 0);
    write_random_file(path, 32768, 0);
    assert_int_equal(stat(path, &second), 0);
    assert_fresh_and_working(path);
    assert_moved_to(aside, &first, 65536);
    assert_moved_to(aside1, &second, 32768);
    free(path);
    free(aside);
    free(aside1);
    remove_dir(dir);
}

static void test_damaged_pages_moved_aside(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *aside = path_in(dir, "kernels.db.corrupt");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    for (int i = 0; i < 20; i++) {
        cache_key key = random_key();
        cache_kernel k = random_kernel("CFG=x", 20000);
        SJ_ASSERT_OK(cache_put_kernel(db, &key, &k));
        free(k.cubin);
    }
    cache_close(db); /* checkpoints the WAL into the file */
    char *wal = path_in(dir, "kernels.db-wal");
    assert_false(file_exists(wal));
    free(wal);
    /* garble the b-tree pages right after the header page: a valid header, broken contents */
    long page = (long)raw_int(path, "PRAGMA page_size");
    write_random_file(path, (size_t)page * 4, (size_t)page);
    assert_fresh_and_working(path);
    assert_true(file_exists(aside));
    free(path);
    free(aside);
    remove_dir(dir);
}

static void test_newer_and_foreign_refused(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *aside = path_in(dir, "kernels.db.corrupt");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_key key = random_key();
    cache_kernel k = random_kernel("CFG=1", 777);
    SJ_ASSERT_OK(cache_put_kernel(db, &key, &k));
    cache_close(db);
    raw_exec(path, "PRAGMA user_version=7");
    db = (cache_db *)&db; /* poison: must come back NULL */
    SJ_ASSERT_STATUS(cache_open(path, NULL, NULL, &db), SJ_ERR_CACHE, "newer sparsejit");
    assert_null(db);
    /* nothing was touched */
    assert_false(file_exists(aside));
    assert_int_equal(raw_int(path, "PRAGMA user_version"), 7);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM kernels"), 1);

    /* an SQLite database of another application is not ours to move or change */
    char *foreign = path_in(dir, "other.db");
    raw_exec(foreign, "CREATE TABLE notes(x); INSERT INTO notes VALUES (42)");
    SJ_ASSERT_STATUS(cache_open(foreign, NULL, NULL, &db), SJ_ERR_CACHE, "another application");
    assert_int_equal(raw_int(foreign, "SELECT x FROM notes"), 42);
    char *foreign_aside = path_in(dir, "other.db.corrupt");
    assert_false(file_exists(foreign_aside));
    free(foreign_aside);
    free(k.cubin);
    free(foreign);
    free(path);
    free(aside);
    remove_dir(dir);
}

/* A log callback that keeps the last message and counts them. */
typedef struct log_seen { int count; char last[4096]; } log_seen;

static void seen_log(void *user, const char *message)
{
    log_seen *l = user;
    l->count++;
    snprintf(l->last, sizeof l->last, "%s", message);
}

/* sha256-free fingerprint of a file: size and bytes, to show nothing wrote it. */
static char *file_bytes_of(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* A cache with one kernel, one winner and a trial for key, closed (no -wal or -shm left). */
static void make_tuned_cache(const char *path, const cache_key *key, const cache_kernel *k, double median)
{
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    cache_winner w = { .median_us = median, .tflops = 1 };
    snprintf(w.config, sizeof w.config, "%s", k->config);
    snprintf(w.strategy, sizeof w.strategy, "random");
    cache_trial t = random_trial(k->config, 1);
    SJ_ASSERT_OK(cache_put_tuning(db, key, &t, 1, &w, k, 0));
    cache_close(db);
}

/* Read-only: every read works, every write is refused naming the cause, and the file's bytes do
 * not change. (Reading a WAL file may leave SQLite's -wal/-shm beside it where the folder is
 * writable; where it is not, the immutable fallback runs: test_unwritable_opens_read_only.) */
static void test_read_only_open(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "shared.db");
    cache_key key = random_key();
    cache_kernel k = random_kernel("CFG=3", 999);
    make_tuned_cache(path, &key, &k, 12.5);
    size_t n0, n1;
    char *before = file_bytes_of(path, &n0);

    cache_db *db = NULL;
    SJ_ASSERT_OK(cache_open_read_only(path, &db));
    assert_true(cache_read_only(db));
    assert_kernel_hit(db, &key, &k);
    cache_winner w;
    SJ_ASSERT_OK(cache_get_winner(db, &key, &w));
    assert_string_equal(w.config, "CFG=3");
    key_count kc = count_all(db);
    assert_int_equal(kc.keys, 1);
    cache_kernel k2 = random_kernel("CFG=4", 64);
    SJ_ASSERT_STATUS(cache_put_kernel(db, &key, &k2), SJ_ERR_CACHE, "is open read-only: cannot store kernel");
    SJ_ASSERT_STATUS(cache_clear(db), SJ_ERR_CACHE, "read-only");
    SJ_ASSERT_STATUS(cache_vacuum(db), SJ_ERR_CACHE, "read-only");
    cache_close(db);
    char *after = file_bytes_of(path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);

    /* what is not a current sparsejit cache is refused, and left alone */
    char *missing = path_in(dir, "missing.db");
    SJ_ASSERT_STATUS(cache_open_read_only(missing, &db), SJ_ERR_CACHE, "missing.db");
    assert_null(db);
    assert_false(file_exists(missing));
    char *garbage = path_in(dir, "garbage.db");
    write_random_file(garbage, 4096, 0);
    SJ_ASSERT_STATUS(cache_open_read_only(garbage, &db), SJ_ERR_CACHE, "left as it is");
    char *aside = path_in(dir, "garbage.db.corrupt");
    assert_false(file_exists(aside));
    free(before); free(after); free(missing); free(garbage); free(aside); free(k.cubin); free(k2.cubin);
    free(path);
    remove_dir(dir);
}

/* Runs fn(path) in a child that cannot write path's file or folder (as root: a child that drops
 * to nobody, whom the modes below then bind, so the test means the same for root and a user).
 * Returns the child's exit code; 77 when the privilege drop is not possible here. */
static int as_unprivileged(const char *dir, const char *path, int (*fn)(const char *))
{
    assert_int_equal(chmod(path, 0444), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(77);
        _exit(fn(path));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(chmod(dir, 0755), 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

static int child_opens_read_only(const char *path)
{
    log_seen seen = { 0 };
    cache_db *db = NULL;
    if (cache_open(path, seen_log, &seen, &db) != SJ_OK) { fprintf(stderr, "open: %s\n", sj_last_error()); return 1; }
    if (!cache_read_only(db) || seen.count != 1 || !strstr(seen.last, "not writable") ||
        !strstr(seen.last, "opened it read-only")) { fprintf(stderr, "log: %d '%s'\n", seen.count, seen.last); return 2; }
    key_count kc = count_all(db);
    cache_kernel k = random_kernel("CFG=9", 64);
    cache_key key = random_key();
    int refused = cache_put_kernel(db, &key, &k) == SJ_ERR_CACHE && strstr(sj_last_error(), "read-only");
    free(k.cubin);
    cache_close(db);
    return kc.keys == 1 && refused ? 0 : 3;
}

/* A cache file this process cannot write opens read-only, says so once, and reads. */
static void test_unwritable_opens_read_only(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    assert_int_equal(chmod(dir, 0755), 0);
    cache_key key = random_key();
    cache_kernel k = random_kernel("CFG=3", 512);
    make_tuned_cache(path, &key, &k, 3.0);
    int rc = as_unprivileged(dir, path, child_opens_read_only);
    if (rc == 77) skip();
    assert_int_equal(rc, 0);
    char *shm = path_in(dir, "kernels.db-shm");
    assert_false(file_exists(shm)); /* read as immutable: nothing created beside it */
    free(shm); free(k.cubin); free(path);
    remove_dir(dir);
}

/* Schema drift: our file whose tables are not its version's (a dropped table, tables at version
 * 0, our tables without our header) is moved aside and recreated like a corrupt one. */
static void test_schema_drift_moved_aside(void **state)
{
    const char *drifts[] = {
        "DROP TABLE winners",
        "PRAGMA user_version=0",
        "PRAGMA application_id=0; PRAGMA user_version=0",
        "ALTER TABLE trials ADD COLUMN extra",
    };
    for (size_t i = 0; i < sizeof drifts / sizeof *drifts; i++) {
        char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *aside = path_in(dir, "kernels.db.corrupt");
        cache_key key = random_key();
        cache_kernel k = random_kernel("CFG=1", 100);
        make_tuned_cache(path, &key, &k, 2.0);
        raw_exec(path, drifts[i]);
        log_seen seen = { 0 };
        cache_db *db = NULL;
        SJ_ASSERT_OK(cache_open(path, seen_log, &seen, &db));
        if (seen.count != 1 || !strstr(seen.last, "moved it aside"))
            fail_msg("%s: log %d '%s'", drifts[i], seen.count, seen.last);
        assert_true(file_exists(aside));
        assert_int_equal(count_all(db).keys, 0);
        cache_kernel k2 = random_kernel("CFG=2", 100);
        SJ_ASSERT_OK(cache_put_kernel(db, &key, &k2)); /* a working cache again */
        cache_close(db);
        free(k.cubin); free(k2.cubin); free(path); free(aside);
        remove_dir(dir);
    }
}

/* ---------------------------------------------------------------- several processes */

enum { PROCS = 4, ITERS = 240, SHARED_KEYS = 6, TRIALS_PER = 3 };

static cache_key proc_key(int shared, int c, int i)
{
    cache_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "NVIDIA H200");
    snprintf(k.arch, sizeof k.arch, "sm_90a");
    k.sm_count = 132;
    k.driver_version = 13000;
    k.nvrtc_version = 13000;
    snprintf(k.template_name, sizeof k.template_name, "gemm_dense");
    memset(k.template_hash, 'a', 64);
    snprintf(k.op, sizeof k.op, "gemm");
    snprintf(k.dtype, sizeof k.dtype, "f16");
    snprintf(k.out_dtype, sizeof k.out_dtype, "f32");
    k.m = shared ? 100 + i : 100000 + c * ITERS + i;
    k.n = 4096;
    k.k = 4096;
    return k;
}

/* Deterministic data, so the parent can check what every child wrote. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static cache_kernel proc_kernel(const char *config, uint64_t seed)
{
    cache_kernel k;
    memset(&k, 0, sizeof k);
    snprintf(k.config, sizeof k.config, "%s", config);
    snprintf(k.entry, sizeof k.entry, "entry_%llu", (unsigned long long)(seed % 100000));
    k.grid[0] = (unsigned)(seed % 1000) + 1; k.grid[1] = k.grid[2] = 1;
    k.block[0] = 128; k.block[1] = k.block[2] = 1;
    k.cubin_size = 200 + (size_t)(seed % 3000);
    k.cubin = malloc(k.cubin_size);
    uint64_t x = seed;
    for (size_t i = 0; i < k.cubin_size; i++) { x = mix(x); ((unsigned char *)k.cubin)[i] = (unsigned char)x; }
    k.compile_seconds = 0.5;
    return k;
}

static double proc_median(int c, int i, int t)
{
    return 1.0 + (double)(mix((uint64_t)(c * 1000003 + i * 101 + t)) % 1000000) / 1000.0;
}

static int child_writer(const char *path, int c)
{
    cache_db *db;
    sj_status st = cache_open(path, NULL, NULL, &db);
    for (int i = 0; i < ITERS && st == SJ_OK; i++) {
        char config[64];
        snprintf(config, sizeof config, "CHILD=%d,I=%d", c, i);
        cache_key own = proc_key(0, c, i);
        cache_kernel k = proc_kernel(config, mix((uint64_t)(c * ITERS + i)));
        st = cache_put_kernel(db, &own, &k);
        free(k.cubin);
        if (st != SJ_OK) break;
        /* contended keys: every child tunes the same few */
        cache_key shared = proc_key(1, 0, i % SHARED_KEYS);
        cache_trial trials[TRIALS_PER];
        int best = 0;
        for (int t = 0; t < TRIALS_PER; t++) {
            memset(&trials[t], 0, sizeof trials[t]);
            snprintf(trials[t].config, sizeof trials[t].config, "C=%d,I=%d,T=%d", c, i, t);
            snprintf(trials[t].status, sizeof trials[t].status, "ok");
            trials[t].median_us = proc_median(c, i, t);
            trials[t].p20_us = trials[t].p80_us = trials[t].median_us;
            trials[t].tflops = 1.0 / trials[t].median_us;
            if (trials[t].median_us < trials[best].median_us) best = t;
        }
        cache_winner w = { .median_us = trials[best].median_us, .tflops = trials[best].tflops };
        snprintf(w.config, sizeof w.config, "%s", trials[best].config);
        snprintf(w.strategy, sizeof w.strategy, "random");
        cache_kernel wk = proc_kernel(w.config, mix((uint64_t)(7 + c * ITERS + i)));
        st = cache_put_tuning(db, &shared, trials, TRIALS_PER, &w, &wk, 0);
        free(wk.cubin);
        if (st == SJ_OK && i % 17 == 0) {
            /* reads interleave with the other writers */
            cache_winner gw;
            st = cache_get_winner(db, &shared, &gw);
        }
    }
    if (st != SJ_OK) {
        fprintf(stderr, "child %d: %s: %s\n", c, sj_status_name(st), sj_last_error());
        return 1;
    }
    cache_close(db);
    return 0;
}

static void test_concurrent_processes(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "shared/kernels.db");
    pid_t pids[PROCS];
    /* the children also race to create the database */
    for (int c = 0; c < PROCS; c++) {
        pids[c] = fork();
        assert_true(pids[c] >= 0);
        if (pids[c] == 0) _exit(child_writer(path, c));
    }
    for (int c = 0; c < PROCS; c++) {
        int status = 0;
        assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("child %d failed (status 0x%x); see its message above", c, status);
    }
    assert_integrity_ok(path);
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    for (int c = 0; c < PROCS; c++)
        for (int i = 0; i < ITERS; i++) {
            char config[64];
            snprintf(config, sizeof config, "CHILD=%d,I=%d", c, i);
            cache_key own = proc_key(0, c, i);
            cache_kernel k = proc_kernel(config, mix((uint64_t)(c * ITERS + i)));
            assert_kernel_hit(db, &own, &k);
            free(k.cubin);
        }
    for (int s = 0; s < SHARED_KEYS; s++) {
        cache_key shared = proc_key(1, 0, s);
        double best = INFINITY;
        int bc = -1, bi = -1, bt = -1;
        for (int c = 0; c < PROCS; c++)
            for (int i = s; i < ITERS; i += SHARED_KEYS)
                for (int t = 0; t < TRIALS_PER; t++)
                    if (proc_median(c, i, t) < best) { best = proc_median(c, i, t); bc = c; bi = i; bt = t; }
        trial_list l = trials_of(db, &shared);
        assert_int_equal(l.n, PROCS * (ITERS / SHARED_KEYS) * TRIALS_PER);
        free(l.t);
        char config[64];
        snprintf(config, sizeof config, "C=%d,I=%d,T=%d", bc, bi, bt);
        assert_winner(db, &shared, config, best);
        cache_kernel wk = proc_kernel(config, mix((uint64_t)(7 + bc * ITERS + bi)));
        assert_kernel_hit(db, &shared, &wk);
        free(wk.cubin);
    }
    key_count cnt = count_all(db);
    assert_int_equal(cnt.keys, PROCS * ITERS + SHARED_KEYS);
    cache_close(db);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- threads sharing one cache_db */

typedef struct thread_arg { cache_db *db; int id; int failed; char msg[512]; } thread_arg;

static void *thread_writer(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 100 && !a->failed; i++) {
        char config[64];
        snprintf(config, sizeof config, "THREAD=%d,I=%d", a->id, i);
        cache_key key = proc_key(0, 10 + a->id, i);
        cache_kernel k = proc_kernel(config, mix((uint64_t)(a->id * 1000 + i)));
        cache_kernel got;
        sj_status st = cache_put_kernel(a->db, &key, &k);
        if (st == SJ_OK) st = cache_get_kernel(a->db, &key, config, &got);
        if (st == SJ_OK) {
            if (got.cubin_size != k.cubin_size || memcmp(got.cubin, k.cubin, k.cubin_size)) {
                a->failed = 1;
                snprintf(a->msg, sizeof a->msg, "thread %d: kernel %d read back different bytes", a->id, i);
            }
            free(got.cubin);
        } else {
            a->failed = 1;
            snprintf(a->msg, sizeof a->msg, "thread %d: %s", a->id, sj_last_error());
        }
        free(k.cubin);
    }
    return NULL;
}

static void test_threads_share_one_db(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){ .db = db, .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, thread_writer, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) if (args[i].failed) fail_msg("%s", args[i].msg);
    assert_int_equal(count_all(db).kernels, 400);
    cache_close(db);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- a writer killed mid-transaction */

enum { BIG_TRIALS = 20000 };

static void child_long_writer(const char *path, int ready_fd)
{
    cache_db *db;
    if (cache_open(path, NULL, NULL, &db) != SJ_OK) _exit(1);
    cache_trial *trials = calloc(BIG_TRIALS, sizeof *trials);
    for (int t = 0; t < BIG_TRIALS; t++) {
        snprintf(trials[t].config, sizeof trials[t].config, "T=%d", t);
        snprintf(trials[t].status, sizeof trials[t].status, "ok");
        trials[t].median_us = 1.0 + t;
    }
    cache_key first = proc_key(1, 0, 0);
    cache_winner w = { .median_us = 1.0 };
    snprintf(w.config, sizeof w.config, "T=0");
    snprintf(w.strategy, sizeof w.strategy, "exhaustive");
    cache_kernel k = proc_kernel("T=0", 4242);
    if (cache_put_tuning(db, &first, trials, 100, &w, &k, 0) != SJ_OK) _exit(1);
    if (write(ready_fd, "c", 1) != 1) _exit(1);
    /* long transactions back to back, until killed */
    for (int i = 1; ; i++) {
        cache_key key = proc_key(1, 0, i);
        if (cache_put_tuning(db, &key, trials, BIG_TRIALS, &w, NULL, 0) != SJ_OK) _exit(1);
    }
}

/* Whether another connection holds the write lock: BEGIN IMMEDIATE without waiting. */
static int write_lock_held(sqlite3 *probe)
{
    int rc = sqlite3_exec(probe, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_BUSY) return 1;
    if (rc != SQLITE_OK) fail_msg("probe BEGIN IMMEDIATE: %s", sqlite3_errmsg(probe));
    assert_int_equal(sqlite3_exec(probe, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    return 0;
}

static void test_killed_writer(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_long_writer(path, fds[1]);
    }
    close(fds[1]);
    char byte;
    assert_int_equal(read(fds[0], &byte, 1), 1);
    close(fds[0]);
    usleep((useconds_t)(rnd() % 400000)); /* let a random number of long transactions commit */

    /* kill it the moment its write lock is seen held: BEGIN IMMEDIATE with no busy wait */
    sqlite3 *probe;
    assert_int_equal(sqlite3_open(path, &probe), SQLITE_OK);
    int held = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (write_lock_held(probe)) {
            /* a few ms later, so the child is well inside a long transaction */
            usleep(1000 + (useconds_t)(rnd() % 5000));
            if (write_lock_held(probe)) {
                kill(pid, SIGKILL);
                held = 1;
                break;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 20) break;
        usleep(500);
    }
    sqlite3_close(probe);
    if (!held) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("never saw the writer hold its write lock");
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    cache_db *db;
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db)); /* recovers the WAL */
    assert_integrity_ok(path);
    /* the transaction committed before the kill is whole */
    cache_key first = proc_key(1, 0, 0);
    trial_list l = trials_of(db, &first);
    assert_int_equal(l.n, 100);
    free(l.t);
    assert_winner(db, &first, "T=0", 1.0);
    cache_kernel k = proc_kernel("T=0", 4242);
    assert_kernel_hit(db, &first, &k);
    free(k.cubin);
    /* and every other key is all or nothing: the killed transaction left no trace */
    int keys = 0;
    for (int i = 1; i < 100000; i++) {
        cache_key key = proc_key(1, 0, i);
        cache_winner w;
        sj_status st = cache_get_winner(db, &key, &w);
        if (st == SJ_ERR_NOT_FOUND) {
            trial_list none = trials_of(db, &key);
            assert_int_equal(none.n, 0);
            free(none.t);
            break;
        }
        SJ_ASSERT_OK(st);
        trial_list all = trials_of(db, &key);
        assert_int_equal(all.n, BIG_TRIALS);
        free(all.t);
        keys++;
    }
    assert_int_equal(count_all(db).keys, 1 + keys);
    fprintf(stderr, "# killed writer: %d long transactions committed before the kill\n", keys);
    cache_close(db);
    free(path);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- export and import */

typedef struct entry {
    cache_key key;
    cache_kernel kernel;
    cache_trial trials[4];
    cache_winner winner;
} entry;

static void make_entry(cache_db *db, entry *e, const char *gpu, const char *arch, int driver, int nvrtc)
{
    e->key = random_key();
    snprintf(e->key.gpu, sizeof e->key.gpu, "%s", gpu);
    snprintf(e->key.arch, sizeof e->key.arch, "%s", arch);
    e->key.driver_version = driver;
    e->key.nvrtc_version = nvrtc;
    int best = 0;
    for (int t = 0; t < 4; t++) {
        char config[128];
        random_config(config, sizeof config);
        snprintf(config + strlen(config), sizeof config - strlen(config), ",T=%d", t);
        e->trials[t] = random_trial(config, t != 2);
        if (t != 2 && e->trials[t].median_us < e->trials[best].median_us) best = t;
    }
    e->winner = (cache_winner){ .median_us = e->trials[best].median_us, .tflops = e->trials[best].tflops,
                                .tuned_at = 1700000000 + (int64_t)(rnd() % 1000) };
    snprintf(e->winner.config, sizeof e->winner.config, "%s", e->trials[best].config);
    snprintf(e->winner.strategy, sizeof e->winner.strategy, "exhaustive");
    e->kernel = random_kernel(e->winner.config, 1000 + (size_t)(rnd() % 20000));
    SJ_ASSERT_OK(cache_put_tuning(db, &e->key, e->trials, 4, &e->winner, &e->kernel, 0));
}

/* Entries in dir other than . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* An export that hits a full disk (RLIMIT_FSIZE stands in for it: EFBIG with SIGXFSZ ignored)
 * fails with nothing left; one killed mid-write (SIGXFSZ's default action) leaves no temporary
 * file either (12 of 20 killed exports used to leave one). */
static void test_export_full_disk_or_killed(void **state)
{
    char *dir = fresh_dir(), *p = path_in(dir, "one.db"), *exports = path_in(dir, "exports");
    char *out = path_in(exports, "out.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(p, NULL, NULL, &db));
    entry e;
    for (int i = 0; i < 40; i++) {
        make_entry(db, &e, "NVIDIA H200", "sm_90a", 13000, 13000);
        free(e.kernel.cubin);
    }
    cache_close(db);
    assert_int_equal(mkdir(exports, 0777), 0);
    for (int killed = 0; killed < 2; killed++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            cache_db *c;
            if (cache_open(p, NULL, NULL, &c) != SJ_OK) _exit(3);
            signal(SIGXFSZ, killed ? SIG_DFL : SIG_IGN);
            struct rlimit lim = { 96 * 1024, 96 * 1024 }; /* the export is ~450 KB */
            if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(4);
            int n;
            sj_status st = cache_export(c, out, NULL, NULL, &n);
            _exit(st == SJ_ERR_IO && strstr(sj_last_error(), out) ? 0 : 5);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (killed) {
            assert_true(WIFSIGNALED(status));
            assert_int_equal(WTERMSIG(status), SIGXFSZ);
        } else {
            assert_true(WIFEXITED(status));
            assert_int_equal(WEXITSTATUS(status), 0);
        }
        assert_int_equal(count_entries(exports), 0);
    }
    /* and with room, the same export works */
    SJ_ASSERT_OK(cache_open(p, NULL, NULL, &db));
    int n = 0;
    SJ_ASSERT_OK(cache_export(db, out, NULL, NULL, &n));
    assert_int_equal(n, 40);
    struct stat sb;
    assert_int_equal(stat(out, &sb), 0);
    assert_true(sb.st_size > 96 * 1024);
    cache_close(db);
    free(dir); free(p); free(exports); free(out);
}

/* local_trials: trials the target database had for the key before the import */
static void assert_entry_present(cache_db *db, const entry *e, int local_trials, int check_winner)
{
    assert_kernel_hit(db, &e->key, &e->kernel);
    trial_list l = trials_of(db, &e->key);
    assert_int_equal(l.n, 4 + local_trials);
    for (int t = 0; t < 4; t++) assert_trial_equal(find_trial(&l, e->trials[t].config), &e->trials[t]);
    free(l.t);
    if (check_winner) {
        cache_winner w;
        SJ_ASSERT_OK(cache_get_winner(db, &e->key, &w));
        assert_string_equal(w.config, e->winner.config);
        assert_true(w.median_us == e->winner.median_us);
        assert_true(w.tflops == e->winner.tflops);
        assert_string_equal(w.strategy, e->winner.strategy);
        assert_int_equal(w.tuned_at, e->winner.tuned_at);
    }
}

static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) if (strstr(de->d_name, ".tmp-")) n++;
    closedir(d);
    return n;
}

static void test_export_import(void **state)
{
    char *dir = fresh_dir(), *p1 = path_in(dir, "one.db"), *p2 = path_in(dir, "two.db");
    char *out = path_in(dir, "exports/h200.db"), *out90 = path_in(dir, "exports/sm90.db");
    char *outgpu = path_in(dir, "exports/h100.db");
    cache_db *db1, *db2;
    SJ_ASSERT_OK(cache_open(p1, NULL, NULL, &db1));
    enum { E = 6 };
    entry e[E];
    make_entry(db1, &e[0], "NVIDIA H200", "sm_90a", 13000, 13000);
    make_entry(db1, &e[1], "NVIDIA H200", "sm_90a", 13000, 13000);
    make_entry(db1, &e[2], "NVIDIA H100 80GB HBM3", "sm_90a", 13000, 13000);
    make_entry(db1, &e[3], "NVIDIA A100-SXM4-80GB", "sm_80", 13000, 13000); /* other arch */
    make_entry(db1, &e[4], "NVIDIA H200", "sm_90a", 12080, 13000);          /* other driver */
    make_entry(db1, &e[5], "NVIDIA H200", "sm_90a", 13000, 12090);          /* other NVRTC */

    int n = -1;
    SJ_ASSERT_OK(cache_export(db1, out, NULL, NULL, &n));
    assert_int_equal(n, E);
    /* never overwrites, and leaves no temporary file behind */
    struct stat before, after;
    assert_int_equal(stat(out, &before), 0);
    n = -1;
    SJ_ASSERT_STATUS(cache_export(db1, out, NULL, NULL, &n), SJ_ERR_IO, "refusing to overwrite");
    assert_int_equal(n, 0);
    assert_int_equal(stat(out, &after), 0);
    assert_int_equal(before.st_ino, after.st_ino);
    assert_int_equal(before.st_size, after.st_size);
    SJ_ASSERT_OK(cache_export(db1, out90, NULL, "sm_90a", &n));
    assert_int_equal(n, 5);
    SJ_ASSERT_OK(cache_export(db1, outgpu, "NVIDIA H100 80GB HBM3", "sm_90a", &n));
    assert_int_equal(n, 1);
    char *exports = path_in(dir, "exports");
    assert_int_equal(count_temp_files(exports), 0);
    assert_int_equal(count_temp_files(dir), 0);
    /* an export is a self-contained sparsejit database */
    char *out_wal = path_in(exports, "h200.db-wal");
    assert_false(file_exists(out_wal));
    free(out_wal);
    assert_int_equal(raw_int(out, "PRAGMA application_id"), 0x534A4954);
    assert_integrity_ok(out);
    assert_int_equal(raw_int(outgpu, "SELECT count(*) FROM keys"), 1);
    assert_int_equal(raw_int(outgpu, "SELECT count(*) FROM trials"), 4);

    /* db2 already knows e[0] with a faster winner and e[1] with a slower one */
    SJ_ASSERT_OK(cache_open(p2, NULL, NULL, &db2));
    cache_kernel k0, k1;
    put_winner(db2, &e[0].key, "LOCAL=fast", e[0].winner.median_us * 0.5, 0, &k0);
    put_winner(db2, &e[1].key, "LOCAL=slow", e[1].winner.median_us * 2.0, 0, &k1);

    int imported = -1, refused = -1;
    SJ_ASSERT_OK(cache_import(db2, out, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0));
    assert_int_equal(imported, 3);
    assert_int_equal(refused, 3);
    assert_entry_present(db2, &e[0], 1, 0);
    assert_winner(db2, &e[0].key, "LOCAL=fast", e[0].winner.median_us * 0.5); /* kept: faster */
    assert_entry_present(db2, &e[1], 1, 1);                                       /* replaced: slower */
    assert_entry_present(db2, &e[2], 0, 1);
    assert_kernel_hit(db2, &e[0].key, &k0);
    for (int i = 3; i < E; i++) {
        cache_winner w;
        SJ_ASSERT_STATUS(cache_get_winner(db2, &e[i].key, &w), SJ_ERR_NOT_FOUND, NULL);
    }
    key_count c = count_all(db2);
    assert_int_equal(c.keys, 3);
    /* importing again changes nothing */
    SJ_ASSERT_OK(cache_import(db2, out, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0));
    assert_int_equal(imported, 3);
    assert_int_equal(refused, 3);
    key_count c2 = count_all(db2);
    assert_memory_equal(&c, &c2, sizeof c);

    /* an A100 machine takes only the A100 entry */
    char *p3 = path_in(dir, "three.db");
    cache_db *db3;
    SJ_ASSERT_OK(cache_open(p3, NULL, NULL, &db3));
    SJ_ASSERT_OK(cache_import(db3, out, "sm_80", 13000, 13000, &imported, &refused, NULL, NULL, 0));
    assert_int_equal(imported, 1);
    assert_int_equal(refused, 5);
    assert_entry_present(db3, &e[3], 0, 1);

    /* a corrupt cubin in the file is not imported; the rest of the entry is */
    raw_exec(out90, "UPDATE kernels SET cubin = zeroblob(length(cubin))");
    char *p4 = path_in(dir, "four.db");
    cache_db *db4;
    SJ_ASSERT_OK(cache_open(p4, NULL, NULL, &db4));
    SJ_ASSERT_OK(cache_import(db4, out90, "sm_90a", 12080, 13000, &imported, &refused, NULL, NULL, 0));
    assert_int_equal(imported, 1);
    assert_int_equal(refused, 4);
    assert_int_equal(count_all(db4).kernels, 0);
    assert_int_equal(count_all(db4).trials, 4);
    assert_winner(db4, &e[4].key, e[4].winner.config, e[4].winner.median_us);

    /* files that are not exports */
    char *garbage = path_in(dir, "garbage.db"), *missing = path_in(dir, "missing.db");
    write_random_file(garbage, 8192, 0);
    SJ_ASSERT_STATUS(cache_import(db4, garbage, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0), SJ_ERR_CACHE,
                     "not a valid sparsejit database");
    assert_true(file_exists(garbage)); /* an import source is never moved aside */
    SJ_ASSERT_STATUS(cache_import(db4, missing, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0), SJ_ERR_IO,
                     "missing.db");
    assert_false(file_exists(missing));
    raw_exec(outgpu, "PRAGMA user_version=9");
    SJ_ASSERT_STATUS(cache_import(db4, outgpu, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0), SJ_ERR_CACHE,
                     "schema version 9");
    assert_int_equal(raw_int(outgpu, "PRAGMA user_version"), 9);

    cache_close(db1);
    cache_close(db2);
    cache_close(db3);
    cache_close(db4);
    for (int i = 0; i < E; i++) free(e[i].kernel.cubin);
    free(k0.cubin); free(k1.cubin);
    free(p1); free(p2); free(p3); free(p4); free(out); free(out90); free(outgpu); free(exports);
    free(garbage); free(missing);
    remove_dir(dir);
}

/* ---------------------------------------------------------------- default path */

/* Copies a file byte for byte. */
static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = file_bytes_of(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(b);
}

/* cache import does not trust the file: crafted exports are refused, field by field or whole,
 * with the reason; nothing of the file's schema runs; a FIFO is refused without blocking. */
static void test_import_refuses_crafted_files(void **state)
{
    char *dir = fresh_dir(), *src = path_in(dir, "src.db"), *crafted = path_in(dir, "crafted.db");
    cache_db *db;
    SJ_ASSERT_OK(cache_open(src, NULL, NULL, &db));
    entry e;
    make_entry(db, &e, "NVIDIA H200", "sm_90a", 13000, 13000);
    cache_close(db);
    const struct { const char *sql, *why; int keys, invalid, winner, kernel; } cases[] = {
        { "UPDATE winners SET median_us='abc'", "the winner of key", 1, 1, 0, 1 },
        { "UPDATE winners SET median_us=0", "median_us > 0", 1, 1, 0, 1 },
        { "UPDATE winners SET config='BM=99999999999,XX=1'", "the winner of key", 1, 1, 0, 1 },
        { "UPDATE kernels SET grid_x=4294967295", "a kernel of key", 1, 1, 1, 0 },
        { "UPDATE kernels SET shared_bytes=4294967295", "a kernel of key", 1, 1, 1, 0 },
        { "UPDATE kernels SET cubin=zeroblob(16)", "fails its sha256", 1, 1, 1, 0 },
        { "UPDATE trials SET median_us='abc' WHERE config=(SELECT min(config) FROM trials)", "a trial of key", 1, 1, 1, 1 },
        { "UPDATE keys SET gpu='NVIDIA H200' || char(27) || '[31m'", "unprintable", 0, 1, 0, 0 },
        { "UPDATE keys SET m=-5", "out of range", 0, 1, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *dst = path_in(dir, "dst.db");
        copy_file(src, crafted);
        raw_exec(crafted, cases[i].sql);
        SJ_ASSERT_OK(cache_open(dst, NULL, NULL, &db));
        int imported = -1, refused = -1, invalid = -1;
        char why[512];
        SJ_ASSERT_OK(cache_import(db, crafted, "sm_90a", 13000, 13000, &imported, &refused, &invalid, why, sizeof why));
        if (imported != cases[i].keys || invalid != cases[i].invalid || refused != 0 || !strstr(why, cases[i].why))
            fail_msg("%s: imported %d, refused %d, invalid %d, why '%s'", cases[i].sql, imported, refused, invalid, why);
        cache_winner w;
        cache_kernel k;
        assert_int_equal(cache_get_winner(db, &e.key, &w) == SJ_OK, cases[i].winner);
        sj_status st = cache_get_kernel(db, &e.key, e.kernel.config, &k);
        assert_int_equal(st == SJ_OK, cases[i].kernel);
        if (st == SJ_OK) free(k.cubin);
        cache_close(db);
        assert_int_equal(remove(dst), 0);
        free(dst);
    }

    /* a keys VIEW that recurses forever: refused at once as not our tables, nothing runs */
    const char *views[] = {
        "ALTER TABLE keys RENAME TO k0; CREATE VIEW keys AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
        "FROM r) SELECT x AS id, 'g' AS gpu, 'sm_90a' AS arch, 1 AS sm_count, 13000 AS driver_version, 13000 AS "
        "nvrtc_version, 't' AS template_name, 'h' AS template_hash, 'gemm' AS op, 'f16' AS dtype, 'f16' AS out_dtype, "
        "1 AS m, 1 AS n, 1 AS k, '' AS sparsity FROM r",
        "DROP TABLE trials",
    };
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) {
        char *dst = path_in(dir, "dst.db");
        copy_file(src, crafted);
        raw_exec(crafted, views[i]);
        SJ_ASSERT_OK(cache_open(dst, NULL, NULL, &db));
        time_t t0 = time(NULL);
        int imported = -1, refused = -1;
        SJ_ASSERT_STATUS(cache_import(db, crafted, "sm_90a", 13000, 13000, &imported, &refused, NULL, NULL, 0), SJ_ERR_CACHE,
                         "is not a valid sparsejit database");
        assert_true(time(NULL) - t0 < 5);
        assert_int_equal(count_all(db).keys, 0);
        cache_close(db);
        assert_int_equal(remove(dst), 0);
        free(dst);
    }

    /* a FIFO nobody writes: refused at once instead of blocking in open() */
    char *fifo = path_in(dir, "fifo.db"), *dst = path_in(dir, "dst.db");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    SJ_ASSERT_OK(cache_open(dst, NULL, NULL, &db));
    int n1, n2;
    SJ_ASSERT_STATUS(cache_import(db, fifo, "sm_90a", 13000, 13000, &n1, &n2, NULL, NULL, 0), SJ_ERR_IO,
                     "is not a regular file");
    cache_close(db);
    free(fifo); free(dst); free(e.kernel.cubin); free(src); free(crafted);
    remove_dir(dir);
}

static void set_env(const char *name, const char *value)
{
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

/* A cache path that is not a regular file is refused, read-write or read-only, and nothing is
 * created beside it (`--db /dev/null` used to leave /dev/null-journal; a FIFO blocked). */
static void test_not_a_regular_file(void **state)
{
    char *dir = fresh_dir(), *fifo = path_in(dir, "fifo"), *sub = path_in(dir, "sub");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    int journal_before = access("/dev/null-journal", F_OK) == 0;
    cache_db *db = (cache_db *)1;
    SJ_ASSERT_STATUS(cache_open("/dev/null", NULL, NULL, &db), SJ_ERR_INVALID_ARGUMENT, "/dev/null is not a regular file (a device)");
    assert_null(db);
    SJ_ASSERT_STATUS(cache_open_read_only("/dev/null", &db), SJ_ERR_INVALID_ARGUMENT, "not a regular file");
    assert_int_equal(access("/dev/null-journal", F_OK) == 0, journal_before);
    SJ_ASSERT_STATUS(cache_open(fifo, NULL, NULL, &db), SJ_ERR_INVALID_ARGUMENT, "is not a regular file (a FIFO)");
    SJ_ASSERT_STATUS(cache_open_read_only(fifo, &db), SJ_ERR_INVALID_ARGUMENT, "(a FIFO)");
    SJ_ASSERT_STATUS(cache_open(sub, NULL, NULL, &db), SJ_ERR_INVALID_ARGUMENT, "is not a regular file (a directory)");
    assert_int_equal(count_entries(dir), 2);
    assert_int_equal(count_entries(sub), 0);
    free(dir); free(fifo); free(sub);
}

static void test_default_path(void **state)
{
    const char *names[] = { "SPARSEJIT_CACHE", "XDG_CACHE_HOME", "HOME" };
    char *saved[3];
    for (int i = 0; i < 3; i++) saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
    char buf[1024];

    set_env("SPARSEJIT_CACHE", "/srv/sj/k.db");
    set_env("XDG_CACHE_HOME", "/xdg");
    SJ_ASSERT_OK(cache_default_path(buf, sizeof buf));
    assert_string_equal(buf, "/srv/sj/k.db");
    set_env("SPARSEJIT_CACHE", "");
    SJ_ASSERT_OK(cache_default_path(buf, sizeof buf));
    assert_string_equal(buf, "/xdg/sparsejit/kernels.db");
    set_env("SPARSEJIT_CACHE", NULL);
    set_env("HOME", "/home/someone");
    SJ_ASSERT_OK(cache_default_path(buf, sizeof buf));
    assert_string_equal(buf, "/xdg/sparsejit/kernels.db");
    set_env("XDG_CACHE_HOME", "relative/dir"); /* XDG: relative paths are ignored */
    SJ_ASSERT_OK(cache_default_path(buf, sizeof buf));
    assert_string_equal(buf, "/home/someone/.cache/sparsejit/kernels.db");
    set_env("XDG_CACHE_HOME", NULL);
    SJ_ASSERT_OK(cache_default_path(buf, sizeof buf));
    assert_string_equal(buf, "/home/someone/.cache/sparsejit/kernels.db");
    char small[10];
    memset(small, 'x', sizeof small);
    SJ_ASSERT_STATUS(cache_default_path(small, sizeof small), SJ_ERR_INVALID_ARGUMENT, "too small");
    assert_string_equal(small, "");
    SJ_ASSERT_STATUS(cache_default_path(NULL, 10), SJ_ERR_INVALID_ARGUMENT, "buf is NULL");
    SJ_ASSERT_STATUS(cache_default_path(buf, 0), SJ_ERR_INVALID_ARGUMENT, "len");

    for (int i = 0; i < 3; i++) { set_env(names[i], saved[i]); free(saved[i]); }
}

/* ---------------------------------------------------------------- bad arguments */

static void test_bad_arguments(void **state)
{
    char *dir = fresh_dir(), *path = path_in(dir, "kernels.db"), *other = path_in(dir, "x.db");
    cache_db *db, *none = NULL;
    SJ_ASSERT_STATUS(cache_open(NULL, NULL, NULL, &db), SJ_ERR_INVALID_ARGUMENT, "path is NULL");
    SJ_ASSERT_STATUS(cache_open("", NULL, NULL, &db), SJ_ERR_INVALID_ARGUMENT, "path is \"\"");
    SJ_ASSERT_STATUS(cache_open(path, NULL, NULL, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    assert_false(file_exists(path));
    SJ_ASSERT_OK(cache_open(path, NULL, NULL, &db));

    cache_key key = random_key();
    cache_kernel k = random_kernel("CFG=1", 64), got;
    cache_winner w = { .median_us = 1.0 };
    snprintf(w.config, sizeof w.config, "CFG=1");
    cache_trial t = random_trial("CFG=1", 1);

    SJ_ASSERT_STATUS(cache_get_kernel(none, &key, "CFG=1", &got), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_get_kernel(db, NULL, "CFG=1", &got), SJ_ERR_INVALID_ARGUMENT, "key is NULL");
    SJ_ASSERT_STATUS(cache_get_kernel(db, &key, NULL, &got), SJ_ERR_INVALID_ARGUMENT, "config is NULL");
    SJ_ASSERT_STATUS(cache_get_kernel(db, &key, "CFG=1", NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    SJ_ASSERT_STATUS(cache_put_kernel(none, &key, &k), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_put_kernel(db, NULL, &k), SJ_ERR_INVALID_ARGUMENT, "key is NULL");
    SJ_ASSERT_STATUS(cache_put_kernel(db, &key, NULL), SJ_ERR_INVALID_ARGUMENT, "kernel is NULL");
    cache_kernel nocubin = k;
    nocubin.cubin = NULL;
    SJ_ASSERT_STATUS(cache_put_kernel(db, &key, &nocubin), SJ_ERR_INVALID_ARGUMENT, "kernel->cubin");
    nocubin = k;
    nocubin.cubin_size = 0;
    SJ_ASSERT_STATUS(cache_put_kernel(db, &key, &nocubin), SJ_ERR_INVALID_ARGUMENT, "kernel->cubin");
    cache_key bad = key;
    bad.arch[0] = 0;
    SJ_ASSERT_STATUS(cache_put_kernel(db, &bad, &k), SJ_ERR_INVALID_ARGUMENT, "key->arch is empty");
    bad = key;
    memset(bad.op, 'x', sizeof bad.op);
    SJ_ASSERT_STATUS(cache_get_kernel(db, &bad, "CFG=1", &got), SJ_ERR_INVALID_ARGUMENT, "key->op");
    bad = key;
    bad.m = 0;
    SJ_ASSERT_STATUS(cache_put_kernel(db, &bad, &k), SJ_ERR_INVALID_ARGUMENT, "m=0");
    SJ_ASSERT_STATUS(cache_get_winner(none, &key, &w), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_get_winner(db, NULL, &w), SJ_ERR_INVALID_ARGUMENT, "key is NULL");
    SJ_ASSERT_STATUS(cache_get_winner(db, &key, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    SJ_ASSERT_STATUS(cache_put_tuning(none, &key, &t, 1, &w, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_put_tuning(db, NULL, &t, 1, &w, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "key is NULL");
    SJ_ASSERT_STATUS(cache_put_tuning(db, &key, NULL, 1, &w, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "trials is NULL");
    SJ_ASSERT_STATUS(cache_put_tuning(db, &key, &t, -1, &w, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "n_trials");
    SJ_ASSERT_STATUS(cache_put_tuning(db, &key, &t, 1, NULL, &k, 0), SJ_ERR_INVALID_ARGUMENT, "without a winner");
    cache_winner nan_w = w;
    nan_w.median_us = NAN;
    SJ_ASSERT_STATUS(cache_put_tuning(db, &key, &t, 1, &nan_w, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "median_us");
    cache_kernel wrong = k;
    snprintf(wrong.config, sizeof wrong.config, "CFG=2");
    SJ_ASSERT_STATUS(cache_put_tuning(db, &key, &t, 1, &w, &wrong, 0), SJ_ERR_INVALID_ARGUMENT, "differs");
    SJ_ASSERT_STATUS(cache_list(none, count_key, NULL), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_list(db, NULL, NULL), SJ_ERR_INVALID_ARGUMENT, "fn is NULL");
    SJ_ASSERT_STATUS(cache_list_trials(db, NULL, collect_trial, NULL), SJ_ERR_INVALID_ARGUMENT, "key is NULL");
    SJ_ASSERT_STATUS(cache_list_trials(db, &key, NULL, NULL), SJ_ERR_INVALID_ARGUMENT, "fn is NULL");
    int n1, n2;
    SJ_ASSERT_STATUS(cache_export(none, other, NULL, NULL, &n1), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_export(db, NULL, NULL, NULL, &n1), SJ_ERR_INVALID_ARGUMENT, "dst_path is NULL");
    SJ_ASSERT_STATUS(cache_export(db, "", NULL, NULL, &n1), SJ_ERR_INVALID_ARGUMENT, "dst_path is \"\"");
    SJ_ASSERT_STATUS(cache_import(none, other, "sm_90a", 1, 1, &n1, &n2, NULL, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_import(db, NULL, "sm_90a", 1, 1, &n1, &n2, NULL, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "src_path is NULL");
    SJ_ASSERT_STATUS(cache_import(db, "", "sm_90a", 1, 1, &n1, &n2, NULL, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "src_path is \"\"");
    SJ_ASSERT_STATUS(cache_import(db, other, NULL, 1, 1, &n1, &n2, NULL, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "arch is NULL");
    SJ_ASSERT_STATUS(cache_import(db, other, "sm_90a", 0, 1, &n1, &n2, NULL, NULL, 0), SJ_ERR_INVALID_ARGUMENT, "driver_version");
    SJ_ASSERT_STATUS(cache_clear(none), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    SJ_ASSERT_STATUS(cache_vacuum(none), SJ_ERR_INVALID_ARGUMENT, "db is NULL");
    assert_false(file_exists(other));
    /* nothing was written by the refused calls */
    assert_int_equal(count_all(db).keys, 0);
    cache_close(db);
    cache_close(NULL);
    free(k.cubin);
    free(path);
    free(other);
    remove_dir(dir);
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_round_trip),
        cmocka_unit_test(test_tuning_round_trip),
        cmocka_unit_test(test_key_invalidation),
        cmocka_unit_test(test_keep_the_best),
        cmocka_unit_test(test_corrupt_cubin),
        cmocka_unit_test(test_garbage_file_moved_aside),
        cmocka_unit_test(test_second_corrupt_kept),
        cmocka_unit_test(test_damaged_pages_moved_aside),
        cmocka_unit_test(test_newer_and_foreign_refused),
        cmocka_unit_test(test_read_only_open),
        cmocka_unit_test(test_unwritable_opens_read_only),
        cmocka_unit_test(test_schema_drift_moved_aside),
        cmocka_unit_test(test_concurrent_processes),
        cmocka_unit_test(test_threads_share_one_db),
        cmocka_unit_test(test_killed_writer),
        cmocka_unit_test(test_export_import),
        cmocka_unit_test(test_export_full_disk_or_killed),
        cmocka_unit_test(test_import_refuses_crafted_files),
        cmocka_unit_test(test_not_a_regular_file),
        cmocka_unit_test(test_default_path),
        cmocka_unit_test(test_bad_arguments),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
