/* transfer.c: moving tuned entries between machines of one GPU model. Export copies the
 * matching keys with their kernels, trials and winners into a fresh database built in memory,
 * then written with file_write_whole (an unnamed file linked into place once complete and
 * fsynced: a full disk or a kill leaves no partial or temporary file, and nothing is overwritten).
 * Import merges a file into the open cache, refusing entries for another arch, driver or NVRTC
 * version, re-checking every cubin's sha256 and keeping the best winner. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_write.h"
#include "core/number.h"

/* ---------------------------------------------------------------- export */

static sj_status exec_step(cache_db *c, const char *sql, const char *bind1, const char *bind2,
                           const char *what, int *changes)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK && bind1) rc = sqlite3_bind_text(s, 1, bind1, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && bind2) rc = sqlite3_bind_text(s, 2, bind2, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    sj_status st = rc == SQLITE_DONE ? SJ_OK : cachei_fail(c->db, c->path, what);
    if (st == SJ_OK && changes) *changes = sqlite3_changes(c->db);
    sqlite3_finalize(s);
    return st;
}

/* Attaches an initialized, empty sparsejit database, held in memory, to c as "xfer". */
static sj_status attach_export_db(cache_db *c)
{
    sqlite3 *mem = NULL;
    if (sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(mem);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "cache export: cannot open an in-memory database");
    }
    sj_status st = cachei_configure(mem, "(export)", 0);
    if (st == SJ_OK) st = cachei_migrate(mem, "(export)");
    sqlite3_int64 size = 0;
    unsigned char *image = st == SJ_OK ? sqlite3_serialize(mem, "main", &size, 0) : NULL;
    if (st == SJ_OK && !image) st = error_set(SJ_ERR_OUT_OF_MEMORY, "cache export: cannot serialize the new database");
    sqlite3_close(mem);
    if (st == SJ_OK) st = exec_step(c, "ATTACH DATABASE ':memory:' AS xfer", NULL, NULL, "export: attach", NULL);
    if (st != SJ_OK) {
        sqlite3_free(image);
        return st;
    }
    /* FREEONCLOSE: SQLite owns image from here on, failing or not */
    if (sqlite3_deserialize(c->db, "xfer", image, size, size,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) != SQLITE_OK) {
        st = cachei_fail(c->db, c->path, "export: load the new database");
        exec_step(c, "DETACH DATABASE xfer", NULL, NULL, "export: detach", NULL);
    }
    return st;
}

/* Copies the matching entries into the database attached as "xfer". */
static sj_status copy_to_attached(cache_db *c, const char *gpu, const char *arch, int *n_keys)
{
    /* A deferred transaction on purpose: it writes only to the private temporary file, which no
     * other connection knows, so its write lock cannot be contended; the live cache is only
     * read, from one consistent snapshot, and other processes keep writing meanwhile. */
    if (sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return cachei_fail(c->db, c->path, "export: BEGIN");
    static const char *const copies[] = {
        "INSERT INTO xfer.kernels (id, key_id, config, entry, grid_x, grid_y, grid_z, block_x, block_y, "
        "block_z, shared_bytes, cubin, cubin_sha256, compile_seconds, created_at) "
        "SELECT id, key_id, config, entry, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
        "shared_bytes, cubin, cubin_sha256, compile_seconds, created_at FROM main.kernels "
        "WHERE key_id IN (SELECT id FROM xfer.keys)",
        "INSERT INTO xfer.trials (key_id, config, status, median_us, p20_us, p80_us, tflops, "
        "compile_seconds, strategy, created_at) SELECT key_id, config, status, median_us, p20_us, "
        "p80_us, tflops, compile_seconds, strategy, created_at FROM main.trials "
        "WHERE key_id IN (SELECT id FROM xfer.keys)",
        "INSERT INTO xfer.winners (key_id, config, median_us, tflops, strategy, tuned_at) "
        "SELECT key_id, config, median_us, tflops, strategy, tuned_at FROM main.winners "
        "WHERE key_id IN (SELECT id FROM xfer.keys)",
    };
    /* ids are kept: the file is fresh, and the other tables refer to them */
    sj_status st = exec_step(c,
        "INSERT INTO xfer.keys (id, key_text, gpu, arch, sm_count, driver_version, nvrtc_version, "
        "template_name, template_hash, op, dtype, out_dtype, m, n, k, sparsity, created_at) "
        "SELECT id, key_text, gpu, arch, sm_count, driver_version, nvrtc_version, template_name, "
        "template_hash, op, dtype, out_dtype, m, n, k, sparsity, created_at FROM main.keys "
        "WHERE (?1 IS NULL OR gpu=?1) AND (?2 IS NULL OR arch=?2)",
        gpu, arch, "export keys", n_keys);
    for (size_t i = 0; i < sizeof copies / sizeof copies[0] && st == SJ_OK; i++)
        st = exec_step(c, copies[i], NULL, NULL, "export rows", NULL);
    return st == SJ_OK ? cachei_commit(c->db, c->path, "export") : cachei_rollback(c->db, st);
}

/* Writes the database attached as "xfer" to dst, complete or not at all (file_write.h). */
static sj_status write_export(cache_db *c, const char *dst)
{
    sqlite3_int64 size = 0;
    unsigned char *copy = NULL, *image = sqlite3_serialize(c->db, "xfer", &size, SQLITE_SERIALIZE_NOCOPY);
    if (!image && !(image = copy = sqlite3_serialize(c->db, "xfer", &size, 0)))
        return error_set(SJ_ERR_OUT_OF_MEMORY, "cache export: cannot serialize the export");
    sj_status st = file_write_whole(dst, image, (size_t)size, 0);
    sqlite3_free(copy);
    if (st == SJ_OK) return SJ_OK;
    char why[1024];
    snprintf(why, sizeof why, "%s", sj_last_error());
    return error_set(st, "cache export: %s", why);
}

sj_status cache_export(cache_db *c, const char *dst_path, const char *gpu, const char *arch, int *n_exported)
{
    if (n_exported) *n_exported = 0;
    if (!c) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_export: db is NULL");
    if (!dst_path) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_export: dst_path is NULL");
    if (!*dst_path) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_export: dst_path is \"\" (expected a file path)");
    struct stat sb;
    if (lstat(dst_path, &sb) == 0)
        return error_set(SJ_ERR_IO, "cache export: %s already exists; refusing to overwrite it", dst_path);
    sj_status st = cachei_make_parent_dirs(dst_path);
    if (st != SJ_OK) return st;
    int n = 0;
    pthread_mutex_lock(&c->lock);
    st = attach_export_db(c);
    if (st == SJ_OK) {
        st = copy_to_attached(c, gpu, arch, &n);
        if (st == SJ_OK) st = write_export(c, dst_path);
        sj_status dt = exec_step(c, "DETACH DATABASE xfer", NULL, NULL, "export: detach", NULL);
        if (st == SJ_OK) st = dt;
    }
    pthread_mutex_unlock(&c->lock);
    if (st == SJ_OK && n_exported) *n_exported = n;
    return st;
}

/* ---------------------------------------------------------------- import */

/* Copies a text column into dst; returns 0 when it does not fit (a malformed row). */
static int column_fits(sqlite3_stmt *s, int i, char *dst, size_t len)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    int n = sqlite3_column_bytes(s, i);
    if (!t || (size_t)n >= len || memchr(t, 0, (size_t)n)) return 0;
    memcpy(dst, t, (size_t)n);
    dst[n] = 0;
    return 1;
}

/* What an import takes at the most: a file beyond these is refused, not merged piecemeal. */
#define IMPORT_MAX_KEYS 100000
#define IMPORT_MAX_ROWS_PER_KEY 10000
#define IMPORT_MAX_SECONDS 120
/* The opt-in shared memory of the largest GPU sparsejit targets (sm_90: 227 KiB). */
#define IMPORT_MAX_SHARED_BYTES 232448

typedef struct import_src {
    sqlite3 *db;
    const char *path;
    sqlite3_stmt *keys, *kernels, *trials, *winner;
    time_t deadline;
    int other_device, invalid; /* refused keys for another device; refused keys and rows */
    char why[512];             /* the first invalid one and why */
} import_src;

/* Counts an invalid key or row of the source and keeps the first reason. */
static void refuse(import_src *src, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(import_src *src, const char *fmt, ...)
{
    if (src->invalid++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(src->why, sizeof src->why, fmt, ap);
        va_end(ap);
    }
}

/* Text fields are shown by `cache list`: printable ASCII only, so no escape sequence reaches a
 * terminal. */
static int printable(const char *t)
{
    for (; *t; t++)
        if (*t < 0x20 || *t > 0x7e) return 0;
    return 1;
}

static int column_text_ok(sqlite3_stmt *s, int i, char *dst, size_t len)
{
    return sqlite3_column_type(s, i) == SQLITE_TEXT && column_fits(s, i, dst, len) && printable(dst);
}

/* An INTEGER column in lo..hi (a text or real one is refused: SQLite would convert 'abc' to 0). */
static int column_int_in(sqlite3_stmt *s, int i, long long lo, long long hi, long long *out)
{
    if (sqlite3_column_type(s, i) != SQLITE_INTEGER) return 0;
    long long v = sqlite3_column_int64(s, i);
    if (v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* A REAL (or INTEGER) column, finite and >= lo; NULL too when null_ok (stored as NaN). */
static int column_real_ok(sqlite3_stmt *s, int i, double lo, int null_ok, double *out)
{
    int type = sqlite3_column_type(s, i);
    if (type == SQLITE_NULL && null_ok) { *out = NAN; return 1; }
    if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) return 0;
    double v = sqlite3_column_double(s, i);
    if (!isfinite(v) || v < lo) return 0;
    *out = v;
    return 1;
}

/* A config as sparsejit writes it: NAME=INTEGER pairs, names of letters, digits and '_', values
 * that fit an int. The template checks its own parameters when the config is used. */
static int config_ok(const char *c)
{
    if (!*c) return 0;
    while (*c) {
        size_t name = strspn(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
        if (name == 0 || name >= 16 || c[name] != '=') return 0;
        const char *v = c + name + 1;
        size_t len = strcspn(v, ",");
        long long x;
        if (number_parse(v, len, INT_MIN, INT_MAX, &x) != NUMBER_OK) return 0;
        c = v + len + (v[len] == ',');
        if (v[len] == ',' && !*c) return 0;
    }
    return 1;
}

/* Stops a statement of the source that runs past the import's deadline. */
static int past_deadline(void *user)
{
    return time(NULL) > ((import_src *)user)->deadline;
}

static sj_status open_import_src(import_src *src, const char *path)
{
    memset(src, 0, sizeof *src);
    src->path = path;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return error_set(SJ_ERR_IO, "cache import: cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) /* a FIFO or a device would block the open or never end */
        return error_set(SJ_ERR_IO, "cache import: %s is not a regular file", path);
    cache_file_kind kind;
    int version;
    char why[320];
    sj_status st = cachei_open_conn(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, &src->db, &kind,
                                    &version, why, sizeof why);
    if (st != SJ_OK) return st;
    /* The file is untrusted: its schema may name functions or views; take tables only (the
     * schema check of cachei_open_conn refuses anything but our own tables) and run nothing
     * of its. */
    int off = 0, on = 1;
    if (sqlite3_db_config(src->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, off, NULL) != SQLITE_OK ||
        sqlite3_db_config(src->db, SQLITE_DBCONFIG_DEFENSIVE, on, NULL) != SQLITE_OK)
        return cachei_fail(src->db, path, "import: set trusted_schema=OFF and defensive mode");
    src->deadline = time(NULL) + IMPORT_MAX_SECONDS;
    sqlite3_progress_handler(src->db, 10000, past_deadline, src);
    if (kind == CACHE_FILE_EMPTY)
        st = error_set(SJ_ERR_CACHE, "cache import: %s is empty, not a sparsejit cache export", path);
    else if (kind != CACHE_FILE_OURS)
        st = error_set(SJ_ERR_CACHE, "cache import: %s is not a valid sparsejit database (%s)", path, why);
    else if (version != CACHE_SCHEMA_VERSION)
        st = error_set(SJ_ERR_CACHE, "cache import: %s has schema version %d, this sparsejit reads version %d; %s",
                     path, version, CACHE_SCHEMA_VERSION,
                     version > CACHE_SCHEMA_VERSION ? "import it with the newer sparsejit that wrote it"
                     : "open it once with `sparsejit cache --db FILE list` to migrate it, then import it");
    static const char *const sql[4] = {
        "SELECT id, gpu, arch, sm_count, driver_version, nvrtc_version, template_name, template_hash, "
        "op, dtype, out_dtype, m, n, k, sparsity FROM keys ORDER BY id",
        "SELECT config, entry, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, cubin, "
        "cubin_sha256, compile_seconds, created_at FROM kernels WHERE key_id=?1",
        "SELECT config, status, median_us, p20_us, p80_us, tflops, compile_seconds, strategy, created_at "
        "FROM trials WHERE key_id=?1",
        "SELECT config, median_us, tflops, strategy, tuned_at FROM winners WHERE key_id=?1",
    };
    sqlite3_stmt **stmts[4] = { &src->keys, &src->kernels, &src->trials, &src->winner };
    for (int i = 0; i < 4 && st == SJ_OK; i++)
        if (sqlite3_prepare_v2(src->db, sql[i], -1, stmts[i], NULL) != SQLITE_OK)
            st = cachei_fail(src->db, path, "import: prepare");
    return st;
}

static void close_import_src(import_src *src)
{
    sqlite3_finalize(src->keys);
    sqlite3_finalize(src->kernels);
    sqlite3_finalize(src->trials);
    sqlite3_finalize(src->winner);
    sqlite3_close(src->db); /* read-only, statements finalized: nothing can be pending */
}

/* Reads the key at the keys cursor; returns 0 when a field is not what sparsejit writes. */
static int read_src_key(sqlite3_stmt *s, cache_key *k)
{
    memset(k, 0, sizeof *k);
    long long sm, drv, nv, m, n, kk;
    if (!column_int_in(s, 3, 0, 100000, &sm) || !column_int_in(s, 4, 0, INT_MAX, &drv) ||
        !column_int_in(s, 5, 0, INT_MAX, &nv) || !column_int_in(s, 11, 1, (long long)1 << 30, &m) ||
        !column_int_in(s, 12, 1, (long long)1 << 30, &n) || !column_int_in(s, 13, 1, (long long)1 << 30, &kk))
        return 0;
    k->sm_count = (int)sm;
    k->driver_version = (int)drv;
    k->nvrtc_version = (int)nv;
    k->m = m;
    k->n = n;
    k->k = kk;
    return column_text_ok(s, 1, k->gpu, sizeof k->gpu) && column_text_ok(s, 2, k->arch, sizeof k->arch) &&
           column_text_ok(s, 6, k->template_name, sizeof k->template_name) &&
           column_text_ok(s, 7, k->template_hash, sizeof k->template_hash) &&
           column_text_ok(s, 8, k->op, sizeof k->op) && column_text_ok(s, 9, k->dtype, sizeof k->dtype) &&
           column_text_ok(s, 10, k->out_dtype, sizeof k->out_dtype) &&
           column_text_ok(s, 14, k->sparsity, sizeof k->sparsity);
}

/* Kernels of one source key; a row with a field out of range or a cubin that fails its sha256 is
 * refused. */
static sj_status import_kernels(cache_db *c, import_src *src, sqlite3_int64 src_id, sqlite3_int64 key_id)
{
    sqlite3_stmt *s = src->kernels;
    sj_status st = SJ_OK;
    int rc = sqlite3_bind_int64(s, 1, src_id), rows = 0;
    while (st == SJ_OK && rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (++rows > IMPORT_MAX_ROWS_PER_KEY) {
            refuse(src, "key %lld has more than %d kernels", (long long)src_id, IMPORT_MAX_ROWS_PER_KEY);
            break;
        }
        cache_kernel k;
        memset(&k, 0, sizeof k);
        char stored[65], sha[65];
        long long g[3], b[3], shared, created;
        int ok = column_text_ok(s, 0, k.config, sizeof k.config) && config_ok(k.config) &&
                 column_text_ok(s, 1, k.entry, sizeof k.entry) && column_text_ok(s, 10, stored, sizeof stored) &&
                 column_int_in(s, 8, 0, IMPORT_MAX_SHARED_BYTES, &shared) && column_int_in(s, 12, 0, LLONG_MAX, &created) &&
                 column_real_ok(s, 11, 0, 0, &k.compile_seconds) && sqlite3_column_type(s, 9) == SQLITE_BLOB;
        for (int i = 0; i < 3 && ok; i++)
            ok = column_int_in(s, 2 + i, 1, INT_MAX, &g[i]) && column_int_in(s, 5 + i, 1, 1024, &b[i]);
        if (!ok) {
            refuse(src, "a kernel of key %lld has a field out of range (config, entry, grid, block, shared memory, "
                   "times)", (long long)src_id);
            continue;
        }
        for (int i = 0; i < 3; i++) {
            k.grid[i] = (unsigned)g[i];
            k.block[i] = (unsigned)b[i];
        }
        k.shared_bytes = (unsigned)shared;
        k.cubin = (void *)sqlite3_column_blob(s, 9);
        k.cubin_size = (size_t)sqlite3_column_bytes(s, 9);
        if (!k.cubin || k.cubin_size == 0) {
            refuse(src, "a kernel of key %lld (config %s) has no cubin", (long long)src_id, k.config);
            continue;
        }
        if ((st = cachei_sha256_hex(k.cubin, k.cubin_size, sha)) != SJ_OK) break;
        if (strcmp(sha, stored) != 0) {
            refuse(src, "the cubin of key %lld, config %s fails its sha256", (long long)src_id, k.config);
            continue;
        }
        st = cachei_put_kernel_row(c, key_id, &k, sha, created);
    }
    if (st == SJ_OK && rc != SQLITE_DONE && rc != SQLITE_OK) st = cachei_fail(src->db, src->path, "import: read kernels");
    sqlite3_reset(s); /* repeats the step's code, handled above */
    return st;
}

static sj_status import_trials(cache_db *c, import_src *src, sqlite3_int64 src_id, sqlite3_int64 key_id)
{
    sqlite3_stmt *s = src->trials;
    sj_status st = SJ_OK;
    int rc = sqlite3_bind_int64(s, 1, src_id), rows = 0;
    while (st == SJ_OK && rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (++rows > IMPORT_MAX_ROWS_PER_KEY) {
            refuse(src, "key %lld has more than %d trials", (long long)src_id, IMPORT_MAX_ROWS_PER_KEY);
            break;
        }
        cache_trial t;
        char strategy[32];
        long long created;
        memset(&t, 0, sizeof t);
        if (!column_text_ok(s, 0, t.config, sizeof t.config) || !config_ok(t.config) ||
            !column_text_ok(s, 1, t.status, sizeof t.status) || !t.status[0] ||
            !column_text_ok(s, 7, strategy, sizeof strategy) || !column_real_ok(s, 2, 0, 1, &t.median_us) ||
            !column_real_ok(s, 3, 0, 1, &t.p20_us) || !column_real_ok(s, 4, 0, 1, &t.p80_us) ||
            !column_real_ok(s, 5, 0, 1, &t.tflops) || !column_real_ok(s, 6, 0, 1, &t.compile_seconds) ||
            !column_int_in(s, 8, 0, LLONG_MAX, &created)) {
            refuse(src, "a trial of key %lld has a field out of range (config, status, times, strategy)", (long long)src_id);
            continue;
        }
        st = cachei_put_trial_row(c, key_id, &t, strategy, created);
    }
    if (st == SJ_OK && rc != SQLITE_DONE && rc != SQLITE_OK) st = cachei_fail(src->db, src->path, "import: read trials");
    sqlite3_reset(s);
    return st;
}

static sj_status import_winner(cache_db *c, import_src *src, sqlite3_int64 src_id, sqlite3_int64 key_id)
{
    sqlite3_stmt *s = src->winner;
    sj_status st = SJ_OK;
    int rc = sqlite3_bind_int64(s, 1, src_id);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        cache_winner w;
        long long tuned_at;
        memset(&w, 0, sizeof w);
        /* a winner of 0 us would hold its key forever: no tune could beat it */
        if (column_text_ok(s, 0, w.config, sizeof w.config) && config_ok(w.config) &&
            column_real_ok(s, 1, 0, 0, &w.median_us) && w.median_us > 0 && column_real_ok(s, 2, 0, 0, &w.tflops) &&
            column_text_ok(s, 3, w.strategy, sizeof w.strategy) && column_int_in(s, 4, 0, LLONG_MAX, &tuned_at)) {
            w.tuned_at = tuned_at;
            st = cachei_put_winner_row(c, key_id, &w, 0);
        } else {
            refuse(src, "the winner of key %lld has a field out of range (config, median_us > 0, tflops, strategy, "
                   "tuned_at)", (long long)src_id);
        }
    } else if (rc != SQLITE_DONE) {
        st = cachei_fail(src->db, src->path, "import: read winner");
    }
    sqlite3_reset(s);
    return st;
}

static sj_status import_all(cache_db *c, import_src *src, const char *arch, int driver_version,
                            int nvrtc_version, int *n_imported)
{
    sqlite3_stmt *s = src->keys;
    sj_status st = SJ_OK;
    int rc = SQLITE_DONE, keys = 0;
    while (st == SJ_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (++keys > IMPORT_MAX_KEYS) {
            st = error_set(SJ_ERR_CACHE, "cache import: %s has more than %d keys; refusing it", src->path, IMPORT_MAX_KEYS);
            break;
        }
        cache_key key;
        sqlite3_int64 src_id = sqlite3_column_int64(s, 0), key_id;
        /* a malformed key cannot be trusted to be exact */
        if (!read_src_key(s, &key) || cachei_check_key(&key, "cache_import") != SJ_OK) {
            refuse(src, "key %lld has a field out of range or unprintable", (long long)src_id);
            continue;
        }
        if (strcmp(key.arch, arch) != 0 || key.driver_version != driver_version || key.nvrtc_version != nvrtc_version) {
            src->other_device++;
            continue;
        }
        st = cachei_key_id(c, &key, 1, &key_id);
        if (st == SJ_OK) st = import_kernels(c, src, src_id, key_id);
        if (st == SJ_OK) st = import_trials(c, src, src_id, key_id);
        if (st == SJ_OK) st = import_winner(c, src, src_id, key_id);
        if (st == SJ_OK) (*n_imported)++;
    }
    if (st == SJ_OK && rc == SQLITE_INTERRUPT)
        st = error_set(SJ_ERR_CACHE, "cache import: reading %s took more than %d s; nothing imported", src->path,
                       IMPORT_MAX_SECONDS);
    else if (st == SJ_OK && rc != SQLITE_DONE)
        st = cachei_fail(src->db, src->path, "import: read keys");
    sqlite3_reset(s);
    return st;
}

sj_status cache_import(cache_db *c, const char *src_path, const char *arch, int driver_version,
                       int nvrtc_version, int *n_imported, int *n_refused, int *n_invalid, char *why, size_t why_len)
{
    const char *fn = "cache_import";
    if (n_imported) *n_imported = 0;
    if (n_refused) *n_refused = 0;
    if (n_invalid) *n_invalid = 0;
    if (why && why_len) why[0] = 0;
    if (!c) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: db is NULL", fn);
    if (!src_path) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: src_path is NULL", fn);
    if (!*src_path) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: src_path is \"\" (expected a file path)", fn);
    if (!arch || !*arch)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: arch is %s (expected the device's arch, e.g. sm_90a)",
                       fn, arch ? "\"\"" : "NULL");
    if (driver_version <= 0 || nvrtc_version <= 0)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: driver_version %d / nvrtc_version %d must be > 0 "
                       "(the device's versions, e.g. 13000)", fn, driver_version, nvrtc_version);
    import_src src;
    sj_status st = open_import_src(&src, src_path);
    int imported = 0;
    if (st == SJ_OK) {
        pthread_mutex_lock(&c->lock);
        st = cachei_begin(c->db, c->path, "import");
        if (st == SJ_OK) {
            st = import_all(c, &src, arch, driver_version, nvrtc_version, &imported);
            st = st == SJ_OK ? cachei_commit(c->db, c->path, "import") : cachei_rollback(c->db, st);
        }
        pthread_mutex_unlock(&c->lock);
    }
    close_import_src(&src);
    if (st != SJ_OK) return st;
    if (n_imported) *n_imported = imported;
    if (n_refused) *n_refused = src.other_device;
    if (n_invalid) *n_invalid = src.invalid;
    if (why && why_len) snprintf(why, why_len, "%s", src.why);
    return SJ_OK;
}
