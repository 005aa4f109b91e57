/* cache.c: reading and writing cache entries: keys, kernels (cubin + sha256), trials and
 * winners (keep-the-best), listing, clear and vacuum; and the helpers the other cache files
 * share (errors, BEGIN IMMEDIATE transactions, prepared statements, key binding, sha256). */
#include "cache/cache_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "core/error.h"

/* The key columns, bound as ?1 (key_text) .. ?15 (sparsity) wherever a key is matched. */
#define KEY_MATCH \
    "key_text=?1 AND gpu=?2 AND arch=?3 AND sm_count=?4 AND driver_version=?5 AND " \
    "nvrtc_version=?6 AND template_name=?7 AND template_hash=?8 AND op=?9 AND dtype=?10 AND " \
    "out_dtype=?11 AND m=?12 AND n=?13 AND k=?14 AND sparsity=?15"

#define KERNEL_INSERT \
    "INSERT INTO kernels (key_id, config, entry, grid_x, grid_y, grid_z, block_x, block_y, " \
    "block_z, shared_bytes, cubin, cubin_sha256, compile_seconds, created_at) " \
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) "

#define TRIAL_INSERT \
    "INSERT INTO trials (key_id, config, status, median_us, p20_us, p80_us, tflops, " \
    "compile_seconds, strategy, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "

#define WINNER_INSERT \
    "INSERT INTO winners (key_id, config, median_us, tflops, strategy, tuned_at) " \
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key_id) DO UPDATE SET config=excluded.config, " \
    "median_us=excluded.median_us, tflops=excluded.tflops, strategy=excluded.strategy, " \
    "tuned_at=excluded.tuned_at"

static const char *const stmt_sql[ST_COUNT] = {
    [ST_KEY_FIND] = "SELECT id FROM keys WHERE " KEY_MATCH,
    [ST_KEY_INSERT] =
        "INSERT INTO keys (key_text, gpu, arch, sm_count, driver_version, nvrtc_version, "
        "template_name, template_hash, op, dtype, out_dtype, m, n, k, sparsity, created_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    [ST_KERNEL_GET] =
        "SELECT id, entry, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, "
        "cubin, cubin_sha256, compile_seconds FROM kernels WHERE key_id=?1 AND config=?2",
    [ST_KERNEL_DELETE] = "DELETE FROM kernels WHERE id=?1",
    [ST_KERNEL_UPSERT] = KERNEL_INSERT
        "ON CONFLICT (key_id, config) DO UPDATE SET entry=excluded.entry, grid_x=excluded.grid_x, "
        "grid_y=excluded.grid_y, grid_z=excluded.grid_z, block_x=excluded.block_x, "
        "block_y=excluded.block_y, block_z=excluded.block_z, shared_bytes=excluded.shared_bytes, "
        "cubin=excluded.cubin, cubin_sha256=excluded.cubin_sha256, "
        "compile_seconds=excluded.compile_seconds, created_at=excluded.created_at",
    /* import: a kernel built here is kept over an imported one of the same key and config */
    [ST_KERNEL_INSERT_NEW] = KERNEL_INSERT "ON CONFLICT (key_id, config) DO NOTHING",
    [ST_TRIAL_UPSERT] = TRIAL_INSERT
        "ON CONFLICT (key_id, config) DO UPDATE SET status=excluded.status, "
        "median_us=excluded.median_us, p20_us=excluded.p20_us, p80_us=excluded.p80_us, "
        "tflops=excluded.tflops, compile_seconds=excluded.compile_seconds, "
        "strategy=excluded.strategy, created_at=excluded.created_at",
    [ST_TRIAL_INSERT_NEW] = TRIAL_INSERT "ON CONFLICT (key_id, config) DO NOTHING",
    [ST_WINNER_KEEP_BEST] = WINNER_INSERT " WHERE excluded.median_us < winners.median_us",
    [ST_WINNER_REPLACE] = WINNER_INSERT,
    [ST_WINNER_GET] =
        "SELECT config, median_us, tflops, strategy, tuned_at FROM winners WHERE key_id=?1",
    [ST_LIST] =
        "SELECT y.gpu, y.arch, y.sm_count, y.driver_version, y.nvrtc_version, y.template_name, "
        "y.template_hash, y.op, y.dtype, y.out_dtype, y.m, y.n, y.k, y.sparsity, "
        "w.config, w.median_us, w.tflops, w.strategy, w.tuned_at, "
        "(SELECT count(*) FROM kernels x WHERE x.key_id=y.id), "
        "(SELECT count(*) FROM trials t WHERE t.key_id=y.id) "
        "FROM keys y LEFT JOIN winners w ON w.key_id=y.id "
        "ORDER BY y.gpu, y.arch, y.op, y.dtype, y.out_dtype, y.m, y.n, y.k, y.sparsity, "
        "y.template_name, y.id",
    /* successful trials fastest first, then the failed ones; config breaks ties stably */
    [ST_TRIALS] =
        "SELECT config, status, median_us, p20_us, p80_us, tflops, compile_seconds FROM trials "
        "WHERE key_id=?1 ORDER BY status<>'ok', median_us IS NULL, median_us, config",
};

/* ---------------------------------------------------------------- shared helpers */

sj_status cachei_fail(sqlite3 *db, const char *path, const char *what)
{
    return error_set(SJ_ERR_CACHE, "cache %s: %s: %s", path, what, sqlite3_errmsg(db));
}

sj_status cachei_begin(sqlite3 *db, const char *path, const char *what)
{
    if (sqlite3_db_readonly(db, "main") == 1)
        return error_set(SJ_ERR_CACHE, "cache %s is open read-only: cannot %s", path, what);
    /* IMMEDIATE takes the write lock now, under the busy timeout: a deferred transaction that
     * later upgrades its read lock gets SQLITE_BUSY at once, whatever the timeout. */
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s: BEGIN IMMEDIATE", what);
        return cachei_fail(db, path, msg);
    }
    return SJ_OK;
}

sj_status cachei_commit(sqlite3 *db, const char *path, const char *what)
{
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s: COMMIT", what);
        return cachei_rollback(db, cachei_fail(db, path, msg));
    }
    return SJ_OK;
}

sj_status cachei_rollback(sqlite3 *db, sj_status status)
{
    /* Some errors (SQLITE_FULL, IOERR, ...) already rolled the transaction back. */
    if (!sqlite3_get_autocommit(db) && sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        error_prefix(status, "ROLLBACK failed too (%s) after", sqlite3_errmsg(db));
    return status;
}

sj_status cachei_stmt(cache_db *c, cache_stmt_id id, sqlite3_stmt **out)
{
    if (!c->stmts[id] &&
        sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &c->stmts[id], NULL) != SQLITE_OK) {
        *out = NULL;
        return cachei_fail(c->db, c->path, "prepare statement");
    }
    *out = c->stmts[id];
    return SJ_OK;
}

void cachei_stmt_done(sqlite3_stmt *s)
{
    /* reset's code repeats the last step's, which the caller has handled */
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

sj_status cachei_sha256_hex(const void *data, size_t size, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_Digest(data, size, md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32)
        return error_set(SJ_ERR_CACHE, "cache: sha256 of a %zu-byte cubin failed (OpenSSL EVP_Digest)", size);
    for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return SJ_OK;
}

/* A char array field must hold its NUL; returns nonzero when it does. */
#define TERMINATED(field) (memchr((field), 0, sizeof(field)) != NULL)

sj_status cachei_check_key(const cache_key *key, const char *fn)
{
    struct { const char *name; const char *value; size_t size; int required; } f[] = {
        { "gpu", key->gpu, sizeof key->gpu, 0 },
        { "arch", key->arch, sizeof key->arch, 1 },
        { "template_name", key->template_name, sizeof key->template_name, 1 },
        { "template_hash", key->template_hash, sizeof key->template_hash, 1 },
        { "op", key->op, sizeof key->op, 1 },
        { "dtype", key->dtype, sizeof key->dtype, 1 },
        { "out_dtype", key->out_dtype, sizeof key->out_dtype, 1 },
        { "sparsity", key->sparsity, sizeof key->sparsity, 0 },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!memchr(f[i].value, 0, f[i].size))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: key->%s is not NUL-terminated within its %zu bytes",
                           fn, f[i].name, f[i].size);
        if (f[i].required && !f[i].value[0])
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: key->%s is empty", fn, f[i].name);
    }
    if (key->m < 1 || key->n < 1 || key->k < 1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: key shape must be positive, got m=%lld n=%lld k=%lld",
                       fn, (long long)key->m, (long long)key->n, (long long)key->k);
    return SJ_OK;
}

/* Appends "name=value;" with ';' and '\' escaped, so that distinct keys give distinct texts. */
static size_t put_field(char *buf, size_t len, size_t at, const char *name, const char *value, int last)
{
    for (const char *p = name; *p; p++, at++) if (at + 1 < len) buf[at] = *p;
    if (at + 1 < len) buf[at] = '=';
    at++;
    for (const char *p = value; *p; p++) {
        if (*p == ';' || *p == '\\') { if (at + 1 < len) buf[at] = '\\'; at++; }
        if (at + 1 < len) buf[at] = *p;
        at++;
    }
    if (!last) { if (at + 1 < len) buf[at] = ';'; at++; }
    if (len) buf[at < len ? at : len - 1] = 0;
    return at;
}

void cache_key_text(const cache_key *key, char *buf, size_t len)
{
    if (!buf || len == 0) return;
    buf[0] = 0;
    if (!key) return;
    char num[96];
    size_t at = 0;
    at = put_field(buf, len, at, "gpu", key->gpu, 0);
    at = put_field(buf, len, at, "arch", key->arch, 0);
    snprintf(num, sizeof num, "%d", key->sm_count);
    at = put_field(buf, len, at, "sms", num, 0);
    snprintf(num, sizeof num, "%d", key->driver_version);
    at = put_field(buf, len, at, "driver", num, 0);
    snprintf(num, sizeof num, "%d", key->nvrtc_version);
    at = put_field(buf, len, at, "nvrtc", num, 0);
    at = put_field(buf, len, at, "template", key->template_name, 0);
    at = put_field(buf, len, at, "hash", key->template_hash, 0);
    at = put_field(buf, len, at, "op", key->op, 0);
    at = put_field(buf, len, at, "dtype", key->dtype, 0);
    at = put_field(buf, len, at, "out", key->out_dtype, 0);
    snprintf(num, sizeof num, "%lldx%lldx%lld", (long long)key->m, (long long)key->n, (long long)key->k);
    at = put_field(buf, len, at, "shape", num, 0);
    put_field(buf, len, at, "sparsity", key->sparsity, 1);
}

/* Binds ?1..?15 of KEY_MATCH / ST_KEY_INSERT. */
static int bind_key(sqlite3_stmt *s, const cache_key *key, const char *text)
{
    int rc = sqlite3_bind_text(s, 1, text, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 2, key->gpu, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 3, key->arch, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 4, key->sm_count);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 5, key->driver_version);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 6, key->nvrtc_version);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 7, key->template_name, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 8, key->template_hash, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 9, key->op, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 10, key->dtype, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 11, key->out_dtype, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 12, key->m);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 13, key->n);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 14, key->k);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 15, key->sparsity, -1, SQLITE_STATIC);
    return rc;
}

sj_status cachei_key_id(cache_db *c, const cache_key *key, int create, sqlite3_int64 *id)
{
    char text[CACHE_KEY_TEXT_MAX];
    cache_key_text(key, text, sizeof text);
    *id = 0;
    sqlite3_stmt *s;
    sj_status st = cachei_stmt(c, ST_KEY_FIND, &s);
    if (st != SJ_OK) return st;
    /* Every key column is compared, not only key_text: a hit matches each field exactly. */
    int rc = bind_key(s, key, text);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(s, 0);
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "find key");
    cachei_stmt_done(s);
    if (st != SJ_OK || *id || !create) return st;

    if ((st = cachei_stmt(c, ST_KEY_INSERT, &s)) != SJ_OK) return st;
    rc = bind_key(s, key, text);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 16, (sqlite3_int64)time(NULL));
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) *id = sqlite3_last_insert_rowid(c->db);
    else st = cachei_fail(c->db, c->path, "insert key");
    cachei_stmt_done(s);
    return st;
}

/* ---------------------------------------------------------------- argument checks */

#define CHECK_DB(fn, c) \
    do { if (!(c)) return error_set(SJ_ERR_INVALID_ARGUMENT, fn ": db is NULL"); } while (0)
#define CHECK_KEY(fn, key) \
    do { if (!(key)) return error_set(SJ_ERR_INVALID_ARGUMENT, fn ": key is NULL"); \
         sj_status ck_ = cachei_check_key((key), fn); if (ck_ != SJ_OK) return ck_; } while (0)

static sj_status check_config(const char *fn, const char *config)
{
    if (!config) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    if (strlen(config) >= sizeof(((cache_kernel *)0)->config))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: config '%.40s...' is longer than %zu bytes",
                       fn, config, sizeof(((cache_kernel *)0)->config) - 1);
    return SJ_OK;
}

static sj_status check_kernel(const char *fn, const cache_kernel *k)
{
    if (!TERMINATED(k->config) || !TERMINATED(k->entry))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel->config or kernel->entry is not NUL-terminated", fn);
    if (!k->entry[0]) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel->entry is empty", fn);
    if (!k->cubin || k->cubin_size == 0)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel->cubin is %s (expected the cubin bytes)",
                       fn, k->cubin ? "0 bytes" : "NULL");
    if (k->cubin_size > INT32_MAX)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel->cubin_size %zu exceeds the 2 GiB SQLite blob limit",
                       fn, k->cubin_size);
    return SJ_OK;
}

/* ---------------------------------------------------------------- kernels */

static sj_status get_kernel_locked(cache_db *c, const cache_key *key, const char *config, cache_kernel *out)
{
    char text[CACHE_KEY_TEXT_MAX];
    sqlite3_int64 key_id;
    sj_status st = cachei_key_id(c, key, 0, &key_id);
    if (st != SJ_OK) return st;
    if (!key_id) {
        cache_key_text(key, text, sizeof text);
        return error_set(SJ_ERR_NOT_FOUND, "cache %s: no entry for key %s", c->path, text);
    }
    sqlite3_stmt *s;
    if ((st = cachei_stmt(c, ST_KERNEL_GET, &s)) != SJ_OK) return st;
    int rc = sqlite3_bind_int64(s, 1, key_id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 2, config, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        cachei_stmt_done(s);
        cache_key_text(key, text, sizeof text);
        return error_set(SJ_ERR_NOT_FOUND, "cache %s: no kernel for config '%s' of key %s", c->path, config, text);
    }
    if (rc != SQLITE_ROW) {
        st = cachei_fail(c->db, c->path, "read kernel");
        cachei_stmt_done(s);
        return st;
    }
    sqlite3_int64 row = sqlite3_column_int64(s, 0);
    const void *blob = sqlite3_column_blob(s, 9);
    size_t size = (size_t)sqlite3_column_bytes(s, 9);
    const unsigned char *stored = sqlite3_column_text(s, 10);
    char sha[65];
    int intact = 0;
    if (blob && size > 0 && (st = cachei_sha256_hex(blob, size, sha)) == SJ_OK)
        intact = stored && strcmp(sha, (const char *)stored) == 0;
    if (st == SJ_OK && intact) {
        memset(out, 0, sizeof *out);
        snprintf(out->config, sizeof out->config, "%s", config);
        const unsigned char *entry = sqlite3_column_text(s, 1);
        snprintf(out->entry, sizeof out->entry, "%s", entry ? (const char *)entry : "");
        for (int i = 0; i < 3; i++) {
            out->grid[i] = (unsigned)sqlite3_column_int64(s, 2 + i);
            out->block[i] = (unsigned)sqlite3_column_int64(s, 5 + i);
        }
        out->shared_bytes = (unsigned)sqlite3_column_int64(s, 8);
        out->compile_seconds = sqlite3_column_double(s, 11);
        out->cubin = malloc(size);
        if (!out->cubin) st = error_set(SJ_ERR_OUT_OF_MEMORY, "cache_get_kernel: out of memory for a %zu-byte cubin", size);
        else { memcpy(out->cubin, blob, size); out->cubin_size = size; }
    }
    cachei_stmt_done(s);
    if (st != SJ_OK || intact) return st;

    cache_key_text(key, text, sizeof text);
    if (c->read_only) /* a shared file is not ours to repair: this process rebuilds the kernel */
        return error_set(SJ_ERR_NOT_FOUND, "cache %s (read-only): the kernel for config '%s' of key %s is corrupt "
                         "(cubin sha256 mismatch); it will be rebuilt", c->path, config, text);
    /* Corrupt: drop the row so the kernel is rebuilt and stored afresh. */
    if ((st = cachei_begin(c->db, c->path, "delete corrupt kernel")) != SJ_OK) return st;
    if ((st = cachei_stmt(c, ST_KERNEL_DELETE, &s)) != SJ_OK) return cachei_rollback(c->db, st);
    rc = sqlite3_bind_int64(s, 1, row);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "delete corrupt kernel");
    cachei_stmt_done(s);
    if (st != SJ_OK) return cachei_rollback(c->db, st);
    if ((st = cachei_commit(c->db, c->path, "delete corrupt kernel")) != SJ_OK) return st;
    return error_set(SJ_ERR_NOT_FOUND, "cache %s: the kernel for config '%s' of key %s was corrupt "
                   "(cubin sha256 mismatch); deleted it, it will be rebuilt", c->path, config, text);
}

sj_status cache_get_kernel(cache_db *c, const cache_key *key, const char *config, cache_kernel *out)
{
    CHECK_DB("cache_get_kernel", c);
    CHECK_KEY("cache_get_kernel", key);
    sj_status st = check_config("cache_get_kernel", config);
    if (st != SJ_OK) return st;
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_get_kernel: out is NULL");
    out->cubin = NULL;
    out->cubin_size = 0;
    pthread_mutex_lock(&c->lock);
    st = get_kernel_locked(c, key, config, out);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* Stores one kernel row inside the caller's transaction; sha: its cubin's hex sha256.
 * insert_only keeps an existing row (import); otherwise the row is replaced. */
static sj_status put_kernel_row(cache_db *c, sqlite3_int64 key_id, const cache_kernel *k, const char *sha,
                                int64_t created_at, int insert_only)
{
    sqlite3_stmt *s;
    sj_status st = cachei_stmt(c, insert_only ? ST_KERNEL_INSERT_NEW : ST_KERNEL_UPSERT, &s);
    if (st != SJ_OK) return st;
    int rc = sqlite3_bind_int64(s, 1, key_id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 2, k->config, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 3, k->entry, -1, SQLITE_STATIC);
    for (int i = 0; i < 3 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(s, 4 + i, k->grid[i]);
    for (int i = 0; i < 3 && rc == SQLITE_OK; i++) rc = sqlite3_bind_int64(s, 7 + i, k->block[i]);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 10, k->shared_bytes);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(s, 11, k->cubin, k->cubin_size, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 12, sha, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 13, isfinite(k->compile_seconds) ? k->compile_seconds : 0.0);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 14, created_at);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "store kernel");
    cachei_stmt_done(s);
    return st;
}

sj_status cachei_put_kernel_row(cache_db *c, sqlite3_int64 key_id, const cache_kernel *k, const char *sha,
                                int64_t created_at)
{
    return put_kernel_row(c, key_id, k, sha, created_at, 1);
}

sj_status cache_put_kernel(cache_db *c, const cache_key *key, const cache_kernel *kernel)
{
    CHECK_DB("cache_put_kernel", c);
    CHECK_KEY("cache_put_kernel", key);
    if (!kernel) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_put_kernel: kernel is NULL");
    sj_status st = check_kernel("cache_put_kernel", kernel);
    if (st != SJ_OK) return st;
    char sha[65];
    /* hash before taking the lock: the write transaction stays short */
    if ((st = cachei_sha256_hex(kernel->cubin, kernel->cubin_size, sha)) != SJ_OK) return st;
    pthread_mutex_lock(&c->lock);
    sqlite3_int64 key_id;
    st = cachei_begin(c->db, c->path, "store kernel");
    if (st == SJ_OK) {
        st = cachei_key_id(c, key, 1, &key_id);
        if (st == SJ_OK) st = put_kernel_row(c, key_id, kernel, sha, (int64_t)time(NULL), 0);
        st = st == SJ_OK ? cachei_commit(c->db, c->path, "store kernel") : cachei_rollback(c->db, st);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---------------------------------------------------------------- trials and winners */

static int bind_real_or_null(sqlite3_stmt *s, int i, double v)
{
    return isfinite(v) ? sqlite3_bind_double(s, i, v) : sqlite3_bind_null(s, i);
}

static double column_real_or_nan(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static sj_status put_trial_row(cache_db *c, sqlite3_int64 key_id, const cache_trial *t, const char *strategy,
                               int64_t created_at, int insert_only)
{
    sqlite3_stmt *s;
    sj_status st = cachei_stmt(c, insert_only ? ST_TRIAL_INSERT_NEW : ST_TRIAL_UPSERT, &s);
    if (st != SJ_OK) return st;
    int rc = sqlite3_bind_int64(s, 1, key_id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 2, t->config, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 3, t->status, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = bind_real_or_null(s, 4, t->median_us);
    if (rc == SQLITE_OK) rc = bind_real_or_null(s, 5, t->p20_us);
    if (rc == SQLITE_OK) rc = bind_real_or_null(s, 6, t->p80_us);
    if (rc == SQLITE_OK) rc = bind_real_or_null(s, 7, t->tflops);
    if (rc == SQLITE_OK) rc = bind_real_or_null(s, 8, t->compile_seconds);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 9, strategy, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 10, created_at);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "store trial");
    cachei_stmt_done(s);
    return st;
}

sj_status cachei_put_trial_row(cache_db *c, sqlite3_int64 key_id, const cache_trial *t, const char *strategy,
                               int64_t created_at)
{
    return put_trial_row(c, key_id, t, strategy, created_at, 1);
}

sj_status cachei_put_winner_row(cache_db *c, sqlite3_int64 key_id, const cache_winner *w, int replace)
{
    sqlite3_stmt *s;
    sj_status st = cachei_stmt(c, replace ? ST_WINNER_REPLACE : ST_WINNER_KEEP_BEST, &s);
    if (st != SJ_OK) return st;
    int rc = sqlite3_bind_int64(s, 1, key_id);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 2, w->config, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 3, w->median_us);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 4, isfinite(w->tflops) ? w->tflops : 0.0);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(s, 5, w->strategy, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s, 6, w->tuned_at ? w->tuned_at : (int64_t)time(NULL));
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "store winner");
    cachei_stmt_done(s);
    return st;
}

static sj_status check_tuning(const cache_trial *trials, int n_trials, const cache_winner *winner,
                              const cache_kernel *kernel)
{
    const char *fn = "cache_put_tuning";
    if (n_trials < 0) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: n_trials is %d (expected >= 0)", fn, n_trials);
    if (n_trials > 0 && !trials)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: trials is NULL with n_trials = %d", fn, n_trials);
    for (int i = 0; i < n_trials; i++)
        if (!TERMINATED(trials[i].config) || !TERMINATED(trials[i].status) || !trials[i].status[0])
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: trials[%d] has an unterminated config/status or an "
                           "empty status", fn, i);
    if (winner) {
        if (!TERMINATED(winner->config) || !TERMINATED(winner->strategy))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: winner->config or winner->strategy is not "
                           "NUL-terminated", fn);
        if (!isfinite(winner->median_us) || winner->median_us < 0)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: winner->median_us is %g (expected a finite time >= 0)",
                           fn, winner->median_us);
    }
    if (kernel) {
        if (!winner)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel given without a winner (it is the winner's kernel)", fn);
        sj_status st = check_kernel(fn, kernel);
        if (st != SJ_OK) return st;
        if (strcmp(kernel->config, winner->config) != 0)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: kernel->config '%s' differs from winner->config '%s'",
                           fn, kernel->config, winner->config);
    }
    return SJ_OK;
}

sj_status cache_put_tuning(cache_db *c, const cache_key *key, const cache_trial *trials, int n_trials,
                           const cache_winner *winner, const cache_kernel *kernel, int replace_winner)
{
    CHECK_DB("cache_put_tuning", c);
    CHECK_KEY("cache_put_tuning", key);
    sj_status st = check_tuning(trials, n_trials, winner, kernel);
    if (st != SJ_OK) return st;
    char sha[65];
    if (kernel && (st = cachei_sha256_hex(kernel->cubin, kernel->cubin_size, sha)) != SJ_OK) return st;
    /* trials carry the strategy that measured them; the struct has none, the winner does */
    const char *strategy = winner ? winner->strategy : "";
    int64_t now = (int64_t)time(NULL);
    pthread_mutex_lock(&c->lock);
    sqlite3_int64 key_id = 0;
    st = cachei_begin(c->db, c->path, "store tuning");
    if (st == SJ_OK) {
        st = cachei_key_id(c, key, 1, &key_id);
        for (int i = 0; i < n_trials && st == SJ_OK; i++)
            st = put_trial_row(c, key_id, &trials[i], strategy, now, 0);
        if (st == SJ_OK && kernel) st = put_kernel_row(c, key_id, kernel, sha, now, 0);
        if (st == SJ_OK && winner) st = cachei_put_winner_row(c, key_id, winner, replace_winner);
        st = st == SJ_OK ? cachei_commit(c->db, c->path, "store tuning") : cachei_rollback(c->db, st);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static sj_status get_winner_locked(cache_db *c, const cache_key *key, cache_winner *out)
{
    char text[CACHE_KEY_TEXT_MAX];
    sqlite3_int64 key_id;
    sj_status st = cachei_key_id(c, key, 0, &key_id);
    if (st != SJ_OK) return st;
    sqlite3_stmt *s = NULL;
    int rc = SQLITE_DONE;
    if (key_id) {
        if ((st = cachei_stmt(c, ST_WINNER_GET, &s)) != SJ_OK) return st;
        rc = sqlite3_bind_int64(s, 1, key_id);
        if (rc == SQLITE_OK) rc = sqlite3_step(s);
    }
    if (rc == SQLITE_ROW) {
        memset(out, 0, sizeof *out);
        const unsigned char *config = sqlite3_column_text(s, 0), *strategy = sqlite3_column_text(s, 3);
        snprintf(out->config, sizeof out->config, "%s", config ? (const char *)config : "");
        out->median_us = sqlite3_column_double(s, 1);
        out->tflops = sqlite3_column_double(s, 2);
        snprintf(out->strategy, sizeof out->strategy, "%s", strategy ? (const char *)strategy : "");
        out->tuned_at = sqlite3_column_int64(s, 4);
    } else if (rc == SQLITE_DONE) {
        cache_key_text(key, text, sizeof text);
        st = error_set(SJ_ERR_NOT_FOUND, "cache %s: key %s was never tuned", c->path, text);
    } else {
        st = cachei_fail(c->db, c->path, "read winner");
    }
    if (s) cachei_stmt_done(s);
    return st;
}

sj_status cache_get_winner(cache_db *c, const cache_key *key, cache_winner *out)
{
    CHECK_DB("cache_get_winner", c);
    CHECK_KEY("cache_get_winner", key);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_get_winner: out is NULL");
    pthread_mutex_lock(&c->lock);
    sj_status st = get_winner_locked(c, key, out);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---------------------------------------------------------------- listing */

static void column_str(sqlite3_stmt *s, int i, char *dst, size_t len)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    snprintf(dst, len, "%s", t ? (const char *)t : "");
}

typedef struct list_row {
    cache_key key;
    cache_winner winner;
    int has_winner, n_kernels, n_trials;
} list_row;

/* Rows are collected first and handed to the callback after the lock is released, so a callback
 * may call back into the cache (e.g. cache_list_trials per key). */
static sj_status collect_keys(cache_db *c, list_row **rows, size_t *count)
{
    *rows = NULL;
    *count = 0;
    sqlite3_stmt *s;
    sj_status st = cachei_stmt(c, ST_LIST, &s);
    if (st != SJ_OK) return st;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*count == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            list_row *nr = realloc(*rows, ncap * sizeof *nr);
            if (!nr) { st = error_set(SJ_ERR_OUT_OF_MEMORY, "cache_list: out of memory"); break; }
            *rows = nr;
            cap = ncap;
        }
        list_row *r = &(*rows)[(*count)++];
        memset(r, 0, sizeof *r);
        cache_key *k = &r->key;
        column_str(s, 0, k->gpu, sizeof k->gpu);
        column_str(s, 1, k->arch, sizeof k->arch);
        k->sm_count = sqlite3_column_int(s, 2);
        k->driver_version = sqlite3_column_int(s, 3);
        k->nvrtc_version = sqlite3_column_int(s, 4);
        column_str(s, 5, k->template_name, sizeof k->template_name);
        column_str(s, 6, k->template_hash, sizeof k->template_hash);
        column_str(s, 7, k->op, sizeof k->op);
        column_str(s, 8, k->dtype, sizeof k->dtype);
        column_str(s, 9, k->out_dtype, sizeof k->out_dtype);
        k->m = sqlite3_column_int64(s, 10);
        k->n = sqlite3_column_int64(s, 11);
        k->k = sqlite3_column_int64(s, 12);
        column_str(s, 13, k->sparsity, sizeof k->sparsity);
        r->has_winner = sqlite3_column_type(s, 14) != SQLITE_NULL;
        if (r->has_winner) {
            column_str(s, 14, r->winner.config, sizeof r->winner.config);
            r->winner.median_us = sqlite3_column_double(s, 15);
            r->winner.tflops = sqlite3_column_double(s, 16);
            column_str(s, 17, r->winner.strategy, sizeof r->winner.strategy);
            r->winner.tuned_at = sqlite3_column_int64(s, 18);
        }
        r->n_kernels = sqlite3_column_int(s, 19);
        r->n_trials = sqlite3_column_int(s, 20);
    }
    if (st == SJ_OK && rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "list keys");
    cachei_stmt_done(s);
    if (st != SJ_OK) { free(*rows); *rows = NULL; *count = 0; }
    return st;
}

sj_status cache_list(cache_db *c, cache_list_fn fn, void *user)
{
    CHECK_DB("cache_list", c);
    if (!fn) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_list: fn is NULL");
    list_row *rows;
    size_t count;
    pthread_mutex_lock(&c->lock);
    sj_status st = collect_keys(c, &rows, &count);
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < count && st == SJ_OK; i++)
        if (fn(user, &rows[i].key, rows[i].has_winner ? &rows[i].winner : NULL,
               rows[i].n_kernels, rows[i].n_trials))
            break; /* the callback asked to stop */
    free(rows);
    return st;
}

static sj_status collect_trials(cache_db *c, const cache_key *key, cache_trial **rows, size_t *count)
{
    *rows = NULL;
    *count = 0;
    sqlite3_int64 key_id;
    sj_status st = cachei_key_id(c, key, 0, &key_id);
    if (st != SJ_OK || !key_id) return st;
    sqlite3_stmt *s;
    if ((st = cachei_stmt(c, ST_TRIALS, &s)) != SJ_OK) return st;
    size_t cap = 0;
    int rc = sqlite3_bind_int64(s, 1, key_id);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (*count == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            cache_trial *nr = realloc(*rows, ncap * sizeof *nr);
            if (!nr) { st = error_set(SJ_ERR_OUT_OF_MEMORY, "cache_list_trials: out of memory"); break; }
            *rows = nr;
            cap = ncap;
        }
        cache_trial *t = &(*rows)[(*count)++];
        memset(t, 0, sizeof *t);
        column_str(s, 0, t->config, sizeof t->config);
        column_str(s, 1, t->status, sizeof t->status);
        t->median_us = column_real_or_nan(s, 2);
        t->p20_us = column_real_or_nan(s, 3);
        t->p80_us = column_real_or_nan(s, 4);
        t->tflops = column_real_or_nan(s, 5);
        t->compile_seconds = column_real_or_nan(s, 6);
    }
    if (st == SJ_OK && rc != SQLITE_DONE) st = cachei_fail(c->db, c->path, "list trials");
    cachei_stmt_done(s);
    if (st != SJ_OK) { free(*rows); *rows = NULL; *count = 0; }
    return st;
}

sj_status cache_list_trials(cache_db *c, const cache_key *key, cache_trial_fn fn, void *user)
{
    CHECK_DB("cache_list_trials", c);
    CHECK_KEY("cache_list_trials", key);
    if (!fn) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_list_trials: fn is NULL");
    cache_trial *rows;
    size_t count;
    pthread_mutex_lock(&c->lock);
    sj_status st = collect_trials(c, key, &rows, &count);
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < count && st == SJ_OK; i++)
        if (fn(user, &rows[i])) break;
    free(rows);
    return st;
}

/* ---------------------------------------------------------------- maintenance */

sj_status cache_clear(cache_db *c)
{
    CHECK_DB("cache_clear", c);
    pthread_mutex_lock(&c->lock);
    sj_status st = cachei_begin(c->db, c->path, "clear");
    if (st == SJ_OK) {
        if (sqlite3_exec(c->db, "DELETE FROM winners; DELETE FROM trials; DELETE FROM kernels; "
                         "DELETE FROM keys", NULL, NULL, NULL) != SQLITE_OK)
            st = cachei_rollback(c->db, cachei_fail(c->db, c->path, "clear"));
        else
            st = cachei_commit(c->db, c->path, "clear");
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

sj_status cache_vacuum(cache_db *c)
{
    CHECK_DB("cache_vacuum", c);
    pthread_mutex_lock(&c->lock);
    sj_status st = SJ_OK;
    /* VACUUM cannot run inside a transaction (so no BEGIN IMMEDIATE); it waits for the write
     * lock under the busy timeout. The checkpoint then shrinks the WAL file back to zero. */
    if (c->read_only)
        st = error_set(SJ_ERR_CACHE, "cache %s is open read-only: cannot vacuum it", c->path);
    else if (sqlite3_exec(c->db, "VACUUM", NULL, NULL, NULL) != SQLITE_OK)
        st = cachei_fail(c->db, c->path, "VACUUM");
    else if (sqlite3_exec(c->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
        st = cachei_fail(c->db, c->path, "wal_checkpoint");
    pthread_mutex_unlock(&c->lock);
    return st;
}
