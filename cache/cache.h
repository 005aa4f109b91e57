/* cache.h: the SQLite kernel cache. Owns the schema and its migrations (PRAGMA user_version),
 * WAL mode, busy timeout, every write in one BEGIN IMMEDIATE transaction, cubin sha256 checks,
 * tuning trials and winners, and export/import of a tuned database for one GPU model. */
#ifndef SJ_CACHE_H
#define SJ_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "sparsejit.h"

typedef struct cache_db cache_db;

/* Everything a kernel's identity depends on except its config (see docs/architecture.md). */
typedef struct cache_key {
    char gpu[256];           /* device name, e.g. "NVIDIA H200"; "" for a compile-only context */
    char arch[16];           /* "sm_90a" */
    int sm_count;
    int driver_version;
    int nvrtc_version;
    char template_name[64];
    char template_hash[65];  /* hex sha256 of template + lib modules */
    char op[16];             /* sj_op_name() */
    char dtype[8];
    char out_dtype[8];
    int64_t m, n, k;
    char sparsity[64];       /* canonical, e.g. "V=64,NS=2,MS=8" or "T=128,C=16"; "" for dense */
} cache_key;

/* A compiled kernel: config, cubin and launch geometry, so a hit needs no Lua or NVRTC. */
typedef struct cache_kernel {
    char config[256];
    char entry[128];
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    void *cubin;             /* owned by the caller after cache_get_kernel: free() */
    size_t cubin_size;
    double compile_seconds;
} cache_kernel;

/* One measured candidate. status: "ok", "compile-error", "wrong-result", "launch-error", ... */
typedef struct cache_trial {
    char config[256];
    char status[32];
    double median_us, p20_us, p80_us;
    double tflops;
    double compile_seconds;
} cache_trial;

/* The tuned winner of one key. */
typedef struct cache_winner {
    char config[256];
    double median_us;
    double tflops;
    char strategy[32];       /* "exhaustive", "random", ... */
    int64_t tuned_at;        /* unix seconds */
} cache_winner;

/* The default cache path, as sj_context_options.cache_path documents: $SPARSEJIT_CACHE, else
 * $XDG_CACHE_HOME/sparsejit/kernels.db, else ~/.cache/sparsejit/kernels.db (an empty variable,
 * or a relative $XDG_CACHE_HOME, counts as unset). SJ_ERR_INVALID_ARGUMENT when len is too small. */
sj_status cache_default_path(char *buf, size_t len);

/* path "" or NULL is refused; parent directories are created. A file that is not a valid
 * sparsejit database (fails integrity, or its tables are not its version's schema) is moved
 * aside to path + ".corrupt" and recreated, and log (may be NULL) is told so: the cache sits
 * below the context and has no other way up. An existing file this process cannot write (or in
 * a folder it cannot write) is opened read-only instead, and log is told that once. */
sj_status cache_open(const char *path, sj_log_fn log, void *log_user, cache_db **out);
/* Opens an existing, current sparsejit cache read-only (a shared, pre-tuned file): nothing is
 * created, migrated, moved or written; a file that is not one is refused. */
sj_status cache_open_read_only(const char *path, cache_db **out);
/* 1 when db was opened read-only: stores fail with SJ_ERR_CACHE saying so. */
int cache_read_only(const cache_db *db);
void cache_close(cache_db *db);

/* Canonical text of a key, for display and hashing ("gpu=...;arch=...;..."). */
void cache_key_text(const cache_key *key, char *buf, size_t len);

/* A compiled kernel for (key, config). SJ_ERR_NOT_FOUND on miss. A row whose cubin fails its
 * sha256 is deleted and reported as a miss (it is a cache: rebuild). */
sj_status cache_get_kernel(cache_db *db, const cache_key *key, const char *config, cache_kernel *out);
sj_status cache_put_kernel(cache_db *db, const cache_key *key, const cache_kernel *kernel);

/* The tuned winner for key, SJ_ERR_NOT_FOUND when the key was never tuned. */
sj_status cache_get_winner(cache_db *db, const cache_key *key, cache_winner *out);
/* Stores all trials and the winner (and its kernel) in one transaction. The winner row is
 * replaced only when the new median is lower, or when replace_winner is set. winner may be NULL
 * (every candidate failed: trials only); kernel may be NULL, else its config must be the
 * winner's. Trials get the winner's strategy; a non-finite trial time is stored as unknown (NaN
 * when read back). winner->tuned_at 0 means now. */
sj_status cache_put_tuning(cache_db *db, const cache_key *key, const cache_trial *trials,
                           int n_trials, const cache_winner *winner, const cache_kernel *kernel,
                           int replace_winner);

/* Listing: one callback per key with its winner (winner NULL when untuned). */
typedef int (*cache_list_fn)(void *user, const cache_key *key, const cache_winner *winner,
                             int n_kernels, int n_trials);
sj_status cache_list(cache_db *db, cache_list_fn fn, void *user);
/* Trials in order: successful ones fastest first, then the rest; a callback returning nonzero
 * stops either listing. Callbacks run outside the cache's lock and may call the cache. */
typedef int (*cache_trial_fn)(void *user, const cache_trial *trial);
sj_status cache_list_trials(cache_db *db, const cache_key *key, cache_trial_fn fn, void *user);

/* Export every entry whose key matches gpu/arch (NULL: all) into a fresh database file at
 * dst_path (refuses to overwrite). Import merges src_path into db, refusing (and counting in
 * n_refused) entries for another arch, driver or NVRTC version than the given ones. The file is
 * untrusted: it must be a regular file whose tables are exactly sparsejit's (no views, nothing of
 * its schema runs); every field is checked (text printable, numbers of the right type and range,
 * configs NAME=INTEGER pairs, a winner's median > 0, each cubin's sha256), and a key or row that
 * fails is refused, counted in n_invalid, the first with its reason in why. At most 100000 keys,
 * 10000 rows a key and 120 s of reading. */
sj_status cache_export(cache_db *db, const char *dst_path, const char *gpu, const char *arch,
                       int *n_exported);
sj_status cache_import(cache_db *db, const char *src_path, const char *arch, int driver_version,
                       int nvrtc_version, int *n_imported, int *n_refused, int *n_invalid, char *why, size_t why_len);
sj_status cache_clear(cache_db *db);
sj_status cache_vacuum(cache_db *db);

#endif
