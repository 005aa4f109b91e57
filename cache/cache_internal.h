/* cache_internal.h: what the cache's source files share: the cache_db struct with its cached
 * prepared statements, the schema version, connection opening (schema.c), and the helpers for
 * errors, transactions, key binding and sha256 (cache.c). Not for use outside cache/. */
#ifndef SJ_CACHE_INTERNAL_H
#define SJ_CACHE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include "cache/cache.h"

/* "SJIT": PRAGMA application_id of every sparsejit cache database. */
#define CACHE_APPLICATION_ID 0x534A4954
/* The schema version this code writes; migrations in schema.c lead up to it. */
#define CACHE_SCHEMA_VERSION 1
/* Every connection waits this long for another process's write lock. */
#define CACHE_BUSY_TIMEOUT_MS 10000
/* Room for the escaped canonical key text (every field escaped at worst doubles). */
#define CACHE_KEY_TEXT_MAX 2048

/* Statements prepared once per connection, on first use. */
typedef enum cache_stmt_id {
    ST_KEY_FIND,
    ST_KEY_INSERT,
    ST_KERNEL_GET,
    ST_KERNEL_DELETE,
    ST_KERNEL_UPSERT,
    ST_KERNEL_INSERT_NEW,
    ST_TRIAL_UPSERT,
    ST_TRIAL_INSERT_NEW,
    ST_WINNER_KEEP_BEST,
    ST_WINNER_REPLACE,
    ST_WINNER_GET,
    ST_LIST,
    ST_TRIALS,
    ST_COUNT
} cache_stmt_id;

/* A cache_db may be shared by threads: every public call holds `lock`, so the connection is
 * opened SQLITE_OPEN_NOMUTEX and its statements are used by one call at a time. */
struct cache_db {
    sqlite3 *db;
    int read_only;  /* opened read-only: every write is refused before it reaches SQLite */
    char path[1024];
    pthread_mutex_t lock;
    sqlite3_stmt *stmts[ST_COUNT];
};

/* How an opened file looked before any change was made to it. */
typedef enum cache_file_kind {
    CACHE_FILE_OURS,     /* a sparsejit database that passes quick_check */
    CACHE_FILE_EMPTY,    /* a new or empty SQLite file: initialize it */
    CACHE_FILE_CORRUPT,  /* not an SQLite database, or fails quick_check */
    CACHE_FILE_FOREIGN,  /* a valid SQLite database of another application */
    CACHE_FILE_DRIFT     /* ours (our application_id, or our tables at user_version 0), but its
                            tables are not the schema its version promises: a dropped table, a
                            v0 file with tables. Moved aside like a corrupt one. */
} cache_file_kind;

/* schema.c */
/* Opens path with flags (SQLITE_OPEN_*), sets the busy timeout and classifies the file; *why
 * says what is wrong for CORRUPT/FOREIGN/DRIFT. *version: its user_version. Errors other than a
 * bad file (I/O, permissions) fail with SJ_ERR_CACHE and leave *out NULL. With
 * SQLITE_OPEN_READONLY the file is opened as mode=ro, and as immutable when SQLite cannot read
 * a WAL database read-only otherwise (no -shm beside it and a folder it cannot write): a
 * shared cache on a read-only mount. */
/* With SQLITE_OPEN_READONLY in cachei_open_conn's flags: open as immutable at once. A bit
 * SQLite's open flags leave unused. */
#define CACHEI_OPEN_IMMUTABLE 0x40000000
sj_status cachei_open_conn(const char *path, int flags, sqlite3 **out, cache_file_kind *kind,
                           int *version, char *why, size_t why_len);
/* Brings a connection's schema up to CACHE_SCHEMA_VERSION in one BEGIN IMMEDIATE transaction;
 * refuses a database newer than this code. */
sj_status cachei_migrate(sqlite3 *db, const char *path);
/* Sets WAL, synchronous=NORMAL and foreign keys on an opened cache connection. */
sj_status cachei_configure(sqlite3 *db, const char *path, int wal);
/* mkdir -p of the directory part of path. */
sj_status cachei_make_parent_dirs(const char *path);

/* cache.c */
sj_status cachei_fail(sqlite3 *db, const char *path, const char *what);
sj_status cachei_begin(sqlite3 *db, const char *path, const char *what);
sj_status cachei_commit(sqlite3 *db, const char *path, const char *what);
/* Rolls back after a failure whose message is already set; returns status. */
sj_status cachei_rollback(sqlite3 *db, sj_status status);
sj_status cachei_stmt(cache_db *c, cache_stmt_id id, sqlite3_stmt **out);
void cachei_stmt_done(sqlite3_stmt *s);
sj_status cachei_check_key(const cache_key *key, const char *fn);
/* Finds the key's row id; creates it when create is set (inside a write transaction).
 * *id = 0 with SJ_OK when absent and not created. */
sj_status cachei_key_id(cache_db *c, const cache_key *key, int create, sqlite3_int64 *id);
/* Row writers inside the caller's write transaction, for import: a kernel or trial already
 * present for (key, config) is kept; the winner is kept-the-best unless replace is set. */
sj_status cachei_put_kernel_row(cache_db *c, sqlite3_int64 key_id, const cache_kernel *k, const char *sha,
                                int64_t created_at);
sj_status cachei_put_trial_row(cache_db *c, sqlite3_int64 key_id, const cache_trial *t, const char *strategy,
                               int64_t created_at);
sj_status cachei_put_winner_row(cache_db *c, sqlite3_int64 key_id, const cache_winner *w, int replace);
/* Lowercase hex sha256 of data (65 bytes with the NUL). */
sj_status cachei_sha256_hex(const void *data, size_t size, char hex[65]);

#endif
