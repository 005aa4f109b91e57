/* schema.c: opening a cache database. Owns the default path, mkdir -p of its folder, telling a
 * sparsejit database from an empty, corrupt or foreign file, moving a corrupt one aside, the
 * per-connection pragmas (WAL, busy timeout, synchronous, foreign keys) and the schema
 * migrations keyed on PRAGMA user_version. */
#include "cache/cache_internal.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

/* migrations[v] takes a database from user_version v to v + 1. To add version 2, append its
 * statements here and raise CACHE_SCHEMA_VERSION; never edit a migration that has shipped. */
static const char *const migrations[] = {
    /* v0 -> v1: the first schema. */
    "CREATE TABLE keys ("
    "  id INTEGER PRIMARY KEY,"
    "  key_text TEXT NOT NULL UNIQUE,"
    "  gpu TEXT NOT NULL,"
    "  arch TEXT NOT NULL,"
    "  sm_count INTEGER NOT NULL,"
    "  driver_version INTEGER NOT NULL,"
    "  nvrtc_version INTEGER NOT NULL,"
    "  template_name TEXT NOT NULL,"
    "  template_hash TEXT NOT NULL,"
    "  op TEXT NOT NULL,"
    "  dtype TEXT NOT NULL,"
    "  out_dtype TEXT NOT NULL,"
    "  m INTEGER NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  k INTEGER NOT NULL,"
    "  sparsity TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL);"
    /* export filters on gpu/arch; `cache show` on op and shape */
    "CREATE INDEX keys_by_device ON keys(gpu, arch);"
    "CREATE INDEX keys_by_problem ON keys(op, m, n, k);"
    "CREATE TABLE kernels ("
    "  id INTEGER PRIMARY KEY,"
    "  key_id INTEGER NOT NULL REFERENCES keys(id) ON DELETE CASCADE,"
    "  config TEXT NOT NULL,"
    "  entry TEXT NOT NULL,"
    "  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,"
    "  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,"
    "  shared_bytes INTEGER NOT NULL,"
    "  cubin BLOB NOT NULL,"
    "  cubin_sha256 TEXT NOT NULL,"
    "  compile_seconds REAL NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  UNIQUE (key_id, config));"
    /* one row per (key, config): a re-tune updates it; the primary key serves key_id lookups */
    "CREATE TABLE trials ("
    "  key_id INTEGER NOT NULL REFERENCES keys(id) ON DELETE CASCADE,"
    "  config TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  median_us REAL, p20_us REAL, p80_us REAL, tflops REAL, compile_seconds REAL,"
    "  strategy TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  PRIMARY KEY (key_id, config)) WITHOUT ROWID;"
    "CREATE TABLE winners ("
    "  key_id INTEGER PRIMARY KEY REFERENCES keys(id) ON DELETE CASCADE,"
    "  config TEXT NOT NULL,"
    "  median_us REAL NOT NULL,"
    "  tflops REAL NOT NULL,"
    "  strategy TEXT NOT NULL,"
    "  tuned_at INTEGER NOT NULL);",
};
_Static_assert(sizeof migrations / sizeof migrations[0] == CACHE_SCHEMA_VERSION,
               "one migration per schema version");

sj_status cache_default_path(char *buf, size_t len)
{
    if (!buf) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_default_path: buf is NULL");
    if (len == 0) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_default_path: len is 0");
    buf[0] = 0;
    const char *env = getenv("SPARSEJIT_CACHE");
    int n;
    if (env && *env) {
        n = snprintf(buf, len, "%s", env);
    } else {
        /* XDG: an unset, empty or relative $XDG_CACHE_HOME is ignored */
        const char *xdg = getenv("XDG_CACHE_HOME");
        if (xdg && xdg[0] == '/') {
            n = snprintf(buf, len, "%s/sparsejit/kernels.db", xdg);
        } else {
            const char *home = getenv("HOME");
            if (!home || !*home) {
                struct passwd *pw = getpwuid(getuid());
                home = pw ? pw->pw_dir : NULL;
            }
            if (!home || !*home)
                return error_set(SJ_ERR_CACHE, "cache path: none of $SPARSEJIT_CACHE, $XDG_CACHE_HOME "
                               "or $HOME is set and the user has no home directory");
            n = snprintf(buf, len, "%s/.cache/sparsejit/kernels.db", home);
        }
    }
    if (n < 0 || (size_t)n >= len) {
        buf[0] = 0;
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                       "cache_default_path: len %zu is too small for the %d-byte path", len, n);
    }
    return SJ_OK;
}

sj_status cachei_make_parent_dirs(const char *path)
{
    char dir[1024];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cache path '%s' is longer than %zu bytes",
                       path, sizeof dir - 1);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return SJ_OK; /* in the working directory or in / */
    *slash = 0;
    for (char *p = dir + 1; ; p++) {
        int last = *p == 0;
        if (*p == '/' || last) {
            *p = 0;
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                return error_set(SJ_ERR_IO, "cache: cannot create directory '%s': %s", dir, strerror(errno));
            struct stat st;
            if (stat(dir, &st) != 0)
                return error_set(SJ_ERR_IO, "cache: cannot stat '%s': %s", dir, strerror(errno));
            if (!S_ISDIR(st.st_mode))
                return error_set(SJ_ERR_IO, "cache: '%s' exists and is not a directory", dir);
            if (last) break;
            *p = '/';
        }
    }
    return SJ_OK;
}

static int is_bad_file(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT;
}

/* Runs a one-row integer query; returns the SQLite code. */
static int query_int(sqlite3 *db, const char *sql, int *value)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            *value = sqlite3_column_int(s, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_ERROR;
        }
    }
    sqlite3_finalize(s); /* its code repeats the step's, handled above */
    return rc;
}

/* PRAGMA quick_check: SQLITE_OK with msg "ok", or the first problem it reports in msg. */
static int quick_check(sqlite3 *db, char *msg, size_t len)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &s, NULL);
    int rows = 0;
    snprintf(msg, len, "quick_check returned no rows");
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        if (rows++ == 0) snprintf(msg, len, "%s", t ? (const char *)t : "(null)");
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    if (rc == SQLITE_OK && (rows != 1 || strcmp(msg, "ok") != 0)) rc = SQLITE_CORRUPT;
    else if (rc != SQLITE_OK) snprintf(msg, len, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(s);
    return rc;
}

/* The schema text of a connection's main database: one line per table and index (SQLite's own
 * automatic indexes aside), in name order. "" when it cannot be read. */
static void schema_text(sqlite3 *db, char *buf, size_t len)
{
    sqlite3_stmt *s = NULL;
    size_t off = 0;
    buf[0] = 0;
    if (sqlite3_prepare_v2(db, "SELECT type, name, tbl_name, sql FROM sqlite_schema "
                           "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name", -1, &s, NULL) == SQLITE_OK)
        while (sqlite3_step(s) == SQLITE_ROW && off < len) {
            int n = snprintf(buf + off, len - off, "%s %s %s %s\n", sqlite3_column_text(s, 0), sqlite3_column_text(s, 1),
                             sqlite3_column_text(s, 2), sqlite3_column_text(s, 3));
            off = n < 0 ? len : off + (size_t)n;
        }
    sqlite3_finalize(s);
}

/* 1 when db's tables are not exactly those the migrations create (a dropped or altered table),
 * naming the first difference in why. The reference is built in memory from the same
 * migrations, so it cannot fall behind them. */
static int schema_drifted(sqlite3 *db, char *why, size_t why_len)
{
    static char want[8192], have[8192];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the two buffers above */
    sqlite3 *ref = NULL;
    int drift = 0;
    pthread_mutex_lock(&lock);
    if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
        for (int v = 0; v < CACHE_SCHEMA_VERSION; v++) sqlite3_exec(ref, migrations[v], NULL, NULL, NULL);
        schema_text(ref, want, sizeof want);
        schema_text(db, have, sizeof have);
        drift = strcmp(want, have) != 0;
        if (drift) {
            size_t i = 0;
            while (want[i] && want[i] == have[i]) i++;
            while (i > 0 && want[i - 1] != '\n') i--;
            snprintf(why, why_len, "its tables differ from schema version %d's, first at '%.48s'", CACHE_SCHEMA_VERSION,
                     want + i);
        }
    }
    sqlite3_close(ref);
    pthread_mutex_unlock(&lock);
    return drift;
}

/* 1 when a database without our application_id holds a table of ours: a sparsejit file whose
 * header was lost or never written, not another application's. */
static int has_our_tables(sqlite3 *db)
{
    int n = 0;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema WHERE type='table' AND "
                           "name IN ('keys', 'kernels', 'trials', 'winners')", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return n > 0;
}

/* "file:" URI of path with mode=ro (and immutable=1), every byte a URI could misread escaped. */
static int read_only_uri(const char *path, int immutable, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (off + 4 >= len) return 0;
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("/-._~", *p);
        off += (size_t)snprintf(buf + off, len - off, plain ? "%c" : "%%%02X", *p);
    }
    int n = snprintf(buf + off, len - off, "?mode=ro%s", immutable ? "&immutable=1" : "");
    return n >= 0 && (size_t)n < len - off;
}

sj_status cachei_open_conn(const char *path, int flags, sqlite3 **out, cache_file_kind *kind,
                           int *version, char *why, size_t why_len)
{
    *out = NULL;
    *version = 0;
    why[0] = 0;
    sqlite3 *db = NULL;
    const char *name = path;
    char uri[3200];
    int read_only = (flags & SQLITE_OPEN_READONLY) != 0, immutable = (flags & CACHEI_OPEN_IMMUTABLE) != 0;
    if (read_only) {
        if (!read_only_uri(path, immutable, uri, sizeof uri))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "cache %s: path too long to open read-only", path);
        name = uri;
        flags = (flags & ~CACHEI_OPEN_IMMUTABLE) | SQLITE_OPEN_URI;
    }
    int rc = sqlite3_open_v2(name, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        sj_status st = error_set(SJ_ERR_CACHE, "cache %s: open: %s", path,
                               db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return st;
    }
    if ((rc = sqlite3_extended_result_codes(db, 1)) != SQLITE_OK ||
        (rc = sqlite3_busy_timeout(db, CACHE_BUSY_TIMEOUT_MS)) != SQLITE_OK) {
        sj_status st = cachei_fail(db, path, "set busy timeout");
        sqlite3_close(db);
        return st;
    }
    /* One statement, so one snapshot: another process may be initializing the file right now,
     * and a mix of its before and after would look like a foreign database. */
    int app = 0, objects = 0;
    sqlite3_stmt *s = NULL;
    rc = sqlite3_prepare_v2(db, "SELECT (SELECT application_id FROM pragma_application_id), "
                            "(SELECT user_version FROM pragma_user_version), "
                            "(SELECT count(*) FROM sqlite_master)", -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        app = sqlite3_column_int(s, 0);
        *version = sqlite3_column_int(s, 1);
        objects = sqlite3_column_int(s, 2);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s); /* repeats the step's code, handled above */
    if (read_only && !immutable && ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY)) {
        /* A WAL file with no -shm beside it, in a folder this process cannot write: SQLite can
         * read it only as immutable (no one may be writing it: a shared, pre-tuned cache). */
        sqlite3_close(db);
        return cachei_open_conn(path, SQLITE_OPEN_READONLY | CACHEI_OPEN_IMMUTABLE | (flags & SQLITE_OPEN_NOMUTEX), out,
                                kind, version, why, why_len);
    }
    if (rc == SQLITE_OK) {
        if (app == 0 && *version == 0 && objects == 0) {
            *kind = CACHE_FILE_EMPTY;
        } else if (app != CACHE_APPLICATION_ID && app == 0 && *version == 0 && has_our_tables(db)) {
            *kind = CACHE_FILE_DRIFT;
            snprintf(why, why_len, "it holds sparsejit tables but no sparsejit header (user_version 0)");
        } else if (app != CACHE_APPLICATION_ID) {
            *kind = CACHE_FILE_FOREIGN;
            snprintf(why, why_len, "its application_id is 0x%08X, not sparsejit's 0x%08X",
                     (unsigned)app, (unsigned)CACHE_APPLICATION_ID);
        } else {
            char msg[256];
            rc = quick_check(db, msg, sizeof msg);
            if (rc == SQLITE_OK) {
                *kind = CACHE_FILE_OURS;
                if (*version == 0 && objects > 0) {
                    *kind = CACHE_FILE_DRIFT;
                    snprintf(why, why_len, "it has tables at schema version 0");
                } else if (*version == CACHE_SCHEMA_VERSION && schema_drifted(db, why, why_len)) {
                    *kind = CACHE_FILE_DRIFT;
                }
            } else if (is_bad_file(rc)) {
                *kind = CACHE_FILE_CORRUPT;
                snprintf(why, why_len, "quick_check: %s", msg);
                rc = SQLITE_OK;
            }
        }
    } else if (is_bad_file(rc)) {
        *kind = CACHE_FILE_CORRUPT;
        snprintf(why, why_len, "%s", sqlite3_errmsg(db));
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        sj_status st = cachei_fail(db, path, "read header");
        sqlite3_close(db);
        return st;
    }
    *out = db;
    return SJ_OK;
}

/* One attempt at PRAGMA journal_mode=WAL: the SQLite code, and whether the mode is now WAL. */
static int try_wal(sqlite3 *db, int *is_wal)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
    *is_wal = 0;
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *mode = sqlite3_column_text(s, 0);
        *is_wal = mode && strcmp((const char *)mode, "wal") == 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s); /* repeats the step's code, handled above */
    return rc;
}

sj_status cachei_configure(sqlite3 *db, const char *path, int wal)
{
    if (wal) {
        /* Switching a new file to WAL upgrades a read lock to an exclusive one, and SQLite does
         * not wait in its busy handler for that (another process may be creating the same
         * file): retry here, for as long as the busy timeout. A file already in WAL returns at
         * once, with no lock. */
        int is_wal = 0, rc = SQLITE_OK, waited_ms = 0;
        for (int delay_ms = 1; ; delay_ms = delay_ms < 64 ? delay_ms * 2 : 64) {
            rc = try_wal(db, &is_wal);
            int busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
            if ((rc == SQLITE_OK && is_wal) || (rc != SQLITE_OK && !busy) || waited_ms >= CACHE_BUSY_TIMEOUT_MS)
                break;
            sqlite3_sleep(delay_ms);
            waited_ms += delay_ms;
        }
        if (rc != SQLITE_OK) return cachei_fail(db, path, "set journal_mode=WAL");
        if (!is_wal)
            return error_set(SJ_ERR_CACHE, "cache %s: the journal mode stays other than WAL after %d ms of "
                           "asking (a file system without shared-memory locks?)", path, waited_ms);
    }
    if (sqlite3_exec(db, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", NULL, NULL, NULL) != SQLITE_OK)
        return cachei_fail(db, path, "set synchronous/foreign_keys");
    return SJ_OK;
}

static sj_status newer_schema(const char *path, int version)
{
    return error_set(SJ_ERR_CACHE, "cache %s: schema version %d was written by a newer sparsejit "
                   "(this build knows versions up to %d); refusing to touch it: use that newer "
                   "sparsejit, or point SPARSEJIT_CACHE / --db at another file",
                   path, version, CACHE_SCHEMA_VERSION);
}

sj_status cachei_migrate(sqlite3 *db, const char *path)
{
    int version = 0;
    /* Cheap check first, so that opening an up-to-date cache takes no write lock. */
    if (query_int(db, "PRAGMA user_version", &version) != SQLITE_OK)
        return cachei_fail(db, path, "read user_version");
    if (version == CACHE_SCHEMA_VERSION) return SJ_OK;
    if (version > CACHE_SCHEMA_VERSION) return newer_schema(path, version);

    sj_status st = cachei_begin(db, path, "migrate");
    if (st != SJ_OK) return st;
    /* Another process may have migrated between the check and the lock: read it again. */
    if (query_int(db, "PRAGMA user_version", &version) != SQLITE_OK)
        return cachei_rollback(db, cachei_fail(db, path, "read user_version"));
    if (version > CACHE_SCHEMA_VERSION) return cachei_rollback(db, newer_schema(path, version));
    for (int v = version; v < CACHE_SCHEMA_VERSION; v++) {
        if (sqlite3_exec(db, migrations[v], NULL, NULL, NULL) != SQLITE_OK) {
            char what[64];
            snprintf(what, sizeof what, "migrate schema v%d -> v%d", v, v + 1);
            return cachei_rollback(db, cachei_fail(db, path, what));
        }
    }
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d",
             CACHE_APPLICATION_ID, CACHE_SCHEMA_VERSION);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return cachei_rollback(db, cachei_fail(db, path, "set user_version"));
    return cachei_commit(db, path, "migrate");
}

#define CACHE_MAX_ASIDE 100 /* path.corrupt, path.corrupt.1 .. path.corrupt.99 */

/* Moves src to dst unless dst exists: link() fails with EEXIST rather than replace it. */
static int move_no_replace(const char *src, const char *dst)
{
    if (link(src, dst) != 0) return -1;
    return unlink(src);
}

/* Renames a corrupt cache (and its WAL) to path.corrupt, or path.corrupt.N when earlier ones
 * are there (each may be the only copy of someone's tuning), dropping its shared-memory file. */
static sj_status move_aside(const char *path, const char *why, sj_log_fn log, void *log_user)
{
    char dst[1100], wal[1100], dst_wal[1100], shm[1100];
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    int moved = -1;
    for (int n = 0; n < CACHE_MAX_ASIDE && moved != 0; n++) {
        if (n == 0)
            snprintf(dst, sizeof dst, "%s.corrupt", path);
        else
            snprintf(dst, sizeof dst, "%s.corrupt.%d", path, n);
        snprintf(dst_wal, sizeof dst_wal, "%s-wal", dst);
        if (access(dst_wal, F_OK) == 0) continue; /* a WAL of an earlier one: leave the pair alone */
        moved = move_no_replace(path, dst);
        if (moved != 0 && errno != EEXIST) break;
    }
    if (moved != 0)
        return error_set(SJ_ERR_IO, "cache %s is corrupt (%s) and cannot be moved aside to %s: %s",
                       path, why, dst, errno == EEXIST ? "too many earlier copies are there" : strerror(errno));
    if (move_no_replace(wal, dst_wal) != 0 && errno != ENOENT)
        return error_set(SJ_ERR_IO, "cache: cannot move %s aside to %s: %s", wal, dst_wal, strerror(errno));
    if (unlink(shm) != 0 && errno != ENOENT)
        return error_set(SJ_ERR_IO, "cache: cannot remove %s: %s", shm, strerror(errno));
    /* The caller cannot tell a recreated cache from a new one, so say it once here. */
    if (log) {
        char msg[4096];
        snprintf(msg, sizeof msg, "cache %s was not a valid database (%s); moved it aside to %s "
                 "and started a new one", path, why, dst);
        log(log_user, msg);
    }
    return SJ_OK;
}

static int same_file(const struct stat *a, int a_ok, const char *path)
{
    struct stat b;
    int b_ok = stat(path, &b) == 0;
    if (!a_ok || !b_ok) return a_ok == b_ok;
    return a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

/* Whether this process may change the existing file at path and create files beside it (its
 * -wal, -shm and .corrupt): why not in why. Root passes access() everywhere but on a read-only
 * mount, which is then what this finds. */
static int may_write(const char *path, char *why, size_t len)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    const char *what = access(path, W_OK) != 0 ? path : access(dir, W_OK) != 0 ? dir : NULL;
    if (what) snprintf(why, len, "%s: %s", what, strerror(errno));
    return !what;
}

static sj_status new_handle(const char *path, cache_db **out)
{
    *out = NULL;
    cache_db *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "cache_open: out of memory");
    /* room for the ".corrupt.99-wal" suffix of move_aside */
    if (strlen(path) + 16 >= sizeof c->path) {
        free(c);
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open: path '%s' is longer than %zu bytes",
                       path, sizeof c->path - 16);
    }
    /* SQLite would open a device or FIFO (blocking on a FIFO) and create its -journal/-wal beside
     * it: /dev/null-journal. A symbolic link to a regular file is fine. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        free(c);
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cache %s is not a regular file (%s); refusing to open it: point "
                         "SPARSEJIT_CACHE / --db at a file", path, S_ISDIR(sb.st_mode) ? "a directory" :
                         S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" :
                         "not a plain file");
    }
    snprintf(c->path, sizeof c->path, "%s", path);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return error_set(SJ_ERR_CACHE, "cache %s: cannot create its mutex", path);
    }
    *out = c;
    return SJ_OK;
}

sj_status cache_open_read_only(const char *path, cache_db **out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open_read_only: out is NULL");
    *out = NULL;
    if (!path || !*path) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open_read_only: path is %s", path ? "\"\"" : "NULL");
    cache_db *c;
    sj_status st = new_handle(path, &c);
    if (st != SJ_OK) return st;
    cache_file_kind kind;
    int version;
    char why[320];
    sqlite3 *db = NULL;
    st = cachei_open_conn(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, &db, &kind, &version, why, sizeof why);
    if (st == SJ_OK && kind == CACHE_FILE_EMPTY)
        st = error_set(SJ_ERR_CACHE, "cache %s (read-only) is empty", path);
    else if (st == SJ_OK && kind != CACHE_FILE_OURS)
        st = error_set(SJ_ERR_CACHE, "cache %s (read-only) is not a valid sparsejit database (%s); left as it is", path, why);
    else if (st == SJ_OK && version > CACHE_SCHEMA_VERSION)
        st = newer_schema(path, version);
    else if (st == SJ_OK && version < CACHE_SCHEMA_VERSION)
        st = error_set(SJ_ERR_CACHE, "cache %s (read-only) has schema version %d; this sparsejit reads %d once a writable "
                       "open has migrated it", path, version, CACHE_SCHEMA_VERSION);
    if (st == SJ_OK) st = cachei_configure(db, path, 0);
    if (st != SJ_OK) {
        sqlite3_close(db);
        cache_close(c);
        return st;
    }
    c->db = db;
    c->read_only = 1;
    *out = c;
    return SJ_OK;
}

int cache_read_only(const cache_db *c) { return c && c->read_only; }

sj_status cache_open(const char *path, sj_log_fn log, void *log_user, cache_db **out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open: out is NULL");
    *out = NULL;
    if (!path) return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open: path is NULL (expected a file path)");
    if (!*path)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "cache_open: path is \"\" (expected a file path; "
                       "an empty cache path means the cache is disabled)");
    char why_ro[1100];
    if (access(path, F_OK) == 0 && !may_write(path, why_ro, sizeof why_ro)) {
        /* A shared or protected file: still worth reading. Said once, here: every store
         * would otherwise fail with its own message. */
        sj_status st = cache_open_read_only(path, out);
        if (st == SJ_OK && log) {
            char msg[2400];
            snprintf(msg, sizeof msg, "cache %s is not writable (%s); opened it read-only: its kernels and winners "
                     "are used, nothing new is stored", path, why_ro);
            log(log_user, msg);
        }
        return st;
    }
    cache_db *c;
    sj_status st = new_handle(path, &c);
    if (st != SJ_OK) return st;
    st = cachei_make_parent_dirs(path);
    sqlite3 *db = NULL;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    /* A corrupt file is moved aside once; if another process replaced the file while we looked
     * at it (it found the corruption first), look again instead of moving its fresh database. */
    for (int attempt = 0; st == SJ_OK; attempt++) {
        struct stat before;
        int before_ok = stat(path, &before) == 0;
        cache_file_kind kind;
        int version;
        char why[320];
        st = cachei_open_conn(path, flags, &db, &kind, &version, why, sizeof why);
        if (st != SJ_OK) break;
        if (kind == CACHE_FILE_FOREIGN) {
            st = error_set(SJ_ERR_CACHE, "cache %s is an SQLite database of another application (%s); "
                         "refusing to touch it: point SPARSEJIT_CACHE / --db at another file", path, why);
        } else if (kind == CACHE_FILE_OURS && version > CACHE_SCHEMA_VERSION) {
            st = newer_schema(path, version);
        } else if (kind == CACHE_FILE_CORRUPT || kind == CACHE_FILE_DRIFT) {
            sqlite3_close(db);
            db = NULL;
            if (attempt >= 2)
                st = error_set(SJ_ERR_CACHE, "cache %s is still corrupt after recreating it (%s)", path, why);
            else if (same_file(&before, before_ok, path))
                st = move_aside(path, why, log, log_user);
            continue;
        }
        break;
    }
    if (st == SJ_OK) st = cachei_configure(db, path, 1);
    if (st == SJ_OK) st = cachei_migrate(db, path);
    if (st != SJ_OK) {
        sqlite3_close(db);
        cache_close(c);
        return st;
    }
    c->db = db;
    *out = c;
    return SJ_OK;
}

void cache_close(cache_db *c)
{
    if (!c) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(c->stmts[i]);
    /* close_v2 cannot fail for a pending statement; all are finalized above */
    sqlite3_close_v2(c->db);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
