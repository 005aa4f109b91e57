/* lua_sparsejit.c: the `sparsejit` Lua module that `sparsejit run script.lua` gives user scripts
 * (sweeps): device info, tune, bench (with the cuBLAS baseline), V:N:M layout sizes and CSV
 * writing, with results as plain Lua tables. Errors from the library are raised as Lua errors
 * carrying the sparsejit message. One context per Lua state, created on first use.
 * Every function and every field of its option table is described once, in `docs` below: an
 * option table with another field is refused naming the accepted ones, sparsejit.reference()
 * returns the descriptions, and docs/lua.md is generated from them (tools/lua_reference.lua;
 * cli_smoke fails when the page differs). */
#include "core/op.h"
#include "core/problem.h"
#include "tuner/bench.h"
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/cli_progress.h"
#include "cli/lua_sparsejit.h"
#include "ops/twell/twell.h"
#include "sparsejit.h"
#include "tuner/tuner.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CTX_KEY "sparsejit.context"
#define LUA_MAX_SECONDS 604800.0 /* a week: the largest budget or timing field */

typedef struct lua_ctx {
    sj_context *ctx;
    char cache[1024];
    int cache_set;
    char template_dir[1024];
    int device;              /* -1: not chosen (cli_context_create) */
} lua_ctx;

/* ------------------------------------------------------------------ the reference */

typedef struct lua_field {
    const char *name, *type, *dflt, *what;
} lua_field;

typedef struct lua_fn_doc {
    const char *name;        /* sparsejit.<name> */
    const char *call;        /* how it is called */
    const char *what;        /* what it does and returns */
    const char *errors;      /* when it raises */
    const lua_field *fields; /* the option table's fields (NULL: it takes none) */
} lua_fn_doc;

#define PROBLEM_FIELDS \
    { "op", "string", "\"gemm\"", "the op, as the command's `--op` (its `--help` lists them; bench also takes " \
      "benchmarks of several kernels: twell-ffn-block, vnm-train, vnm-train-exact, vnm-train-sparse-dx, ffn-train)" }, \
    { "dtype", "string", "\"f16\"", "input dtype: f16 or bf16" }, \
    { "out_dtype", "string", "dtype", "output dtype: f16, bf16 or f32" }, \
    { "shape", "table", "-", "{m, n, k}: the shape as `--shape MxNxK`, each in 1..2^30; or give m, n and k" }, \
    { "m", "integer", "-", "the shape's M when shape is not given (1..2^30)" }, \
    { "n", "integer", "-", "the shape's N when shape is not given (1..2^30)" }, \
    { "k", "integer", "-", "the shape's K when shape is not given (1..2^30)" }, \
    { "vnm", "string", "\"64:2:8\"", "V:N:M sparsity of the vnm-* ops, as `--vnm`" }, \
    { "twell", "string", "\"128:16\"", "TwELL tile width and capacity T:C of the twell-* ops, as `--twell`" }, \
    { "d_ff", "integer", "-", "FFN inner size of the ops that take one (twell-ffn, hybrid-ffn-*), 1..2^30, as `--d-ff`" }, \
    { "sparsity", "number", "0.99", "twell-* and hybrid-*: the activations' fraction of zeros, in (0, 1), as " \
      "`--sparsity` (other ops do not read it)" }, \
    { "skew", "number", "0", "twell-* and hybrid-*: how unevenly the units fire, 0..4, as `--skew`" }, \
    { "dead", "number", "0", "twell-* and hybrid-*: the share of units that never fire, 0..0.9, as `--dead`" }, \
    { "rank", "integer", "0", "vnm-spmm: the rank of a low-rank term U . Z added in the same kernel, a multiple " \
      "of 8 in 8..128, as `--rank` (other ops refuse it)" }

/* What tune (per candidate) and bench both time with; defaults: sj_tune_options_init's. */
#define TIMING_FIELDS \
    { "warmup_ms", "number", "25", "warm-up budget in ms (tune: per candidate), 0..604800000 (a week)" }, \
    { "rep_ms", "number", "100", "timing budget in ms (tune: per candidate), 0..604800000" }

static const lua_field configure_fields[] = {
    { "cache", "string", "$SPARSEJIT_CACHE, else ~/.cache/sparsejit/kernels.db",
      "the kernel cache file; \"\" runs without one" },
    { "template_dir", "string", "$SPARSEJIT_TEMPLATE_DIR, else the built-in templates", "templates to use instead" },
    { "device", "integer", "`run --device N`, else 0", "the GPU, 0..1023 (past the last GPU, or without a GPU: "
      "the first call that needs the context raises)" },
    { NULL, NULL, NULL, NULL },
};
static const lua_field tune_fields[] = {
    PROBLEM_FIELDS,
    { "strategy", "string", "\"random\"", "exhaustive or random, as `--strategy`" },
    { "budget_trials", "integer", "0", "candidates to measure, 0..1000000; 0: the strategy's own (random: a quarter "
      "of the space, 16..256)" },
    { "budget_seconds", "number", "0", "stop starting candidates after this many seconds, 0..604800; 0: no limit" },
    { "seed", "integer", "1", "seed of the random strategy, 0..2^63-1" },
    TIMING_FIELDS,
    { "threads", "integer", "0", "NVRTC compile threads, 0..64; 0: CPUs - 1" },
    { "save", "boolean", "true", "store the trials and the winner in the cache" },
    { "progress", "boolean or function", "true on a terminal (stderr), else false",
      "true: print progress on stderr (a redrawn bar on a terminal, else a line per candidate); a "
      "function(p) gets each candidate's {done, total, rejected, config, status, median_us, best_config, "
      "best_us, elapsed_s, eta_s} and stops the tune by returning true" },
    { NULL, NULL, NULL, NULL },
};
static const lua_field bench_fields[] = {
    PROBLEM_FIELDS,
    { "config", "string", "the tuned winner, else the template's default", "force this config, e.g. \"BM=128,BN=128\"" },
    { "rounds", "integer", "1", "interleaved rounds of the op and its baseline, 1..100" },
    { "seed", "integer", "1", "seed of the random inputs, 0..2^63-1" },
    { "cublas", "boolean", "true", "time the dense cuBLAS baseline too" },
    TIMING_FIELDS,
    { NULL, NULL, NULL, NULL },
};
static const lua_field vnm_layout_fields[] = {
    { "vnm", "string", "\"64:2:8\"", "V:N:M, as `--vnm`" },
    { "rows", "integer", "-", "rows of the dense matrix, 1..2^30 (required)" },
    { "cols", "integer", "-", "columns of the dense matrix, 1..2^30 (required)" },
    { "dtype", "string", "\"f16\"", "f16 or bf16" },
    { NULL, NULL, NULL, NULL },
};

static const lua_fn_doc docs[] = {
    { "configure", "sparsejit.configure{...}",
      "Sets up the module's context; call it before any other function (the context is made on the first call "
      "that needs it). Returns nothing.",
      "after the context exists; a path of 1024 characters or more; a field not listed or of the wrong type",
      configure_fields },
    { "info", "sparsejit.info()",
      "The device: {version, has_gpu, no_gpu_reason, name, arch, compute_capability, sm_count, driver_version, "
      "nvrtc_version, memory_bytes, l2_bytes, max_shared_per_block, cache_path}. Works without a GPU (has_gpu false).",
      "when the context cannot be made (configure's device past the last GPU, or device given without a GPU)",
      NULL },
    { "stats", "sparsejit.stats()",
      "The context's counters: {lua_generations, nvrtc_compiles, cache_hits, cache_misses, table_hits, launches, "
      "nvrtc_seconds, lua_seconds}.",
      "when the context cannot be made", NULL },
    { "tune", "sparsejit.tune{...}",
      "Tunes one problem as `sparsejit tune` does and stores the winner (save). Returns {config, template, strategy, "
      "median_us, p20_us, p80_us, tflops, space_size, trials_done, trials_rejected, seconds, compile_seconds, saved, "
      "finalists, trials}, trials a list of {config, status, median_us, p20_us, p80_us, tflops, compile_seconds, "
      "rel_error}.",
      "a field not listed, of the wrong type or out of its range; a problem the op refuses; no GPU; the progress "
      "function's own error", tune_fields },
    { "bench", "sparsejit.bench{...}",
      "Times an op (or a benchmark of several kernels, as `sparsejit bench --op`) against its dense baseline, "
      "after checking its output. Returns {median_us, p20_us, p80_us, tflops, reps, rel_error, config, origin, "
      "source} and, with cublas, {cublas_us, cublas_tflops, speedup}, or cublas_error when the baseline failed; a "
      "benchmark that times its parts alone adds parts_us (name -> us) and, with cublas, dense_parts_us for its "
      "baseline's parts; a training step (ffn-train) adds saved_bytes and dense_saved_bytes, the activations each "
      "step keeps for its backward.",
      "a field not listed, of the wrong type or out of its range; a problem or config the op refuses; no GPU; an "
      "output that disagrees with the reference", bench_fields },
    { "vnm_layout", "sparsejit.vnm_layout{...}",
      "The compressed sizes of a V:N:M matrix: {v, n, m, rows, cols, row_blocks, groups, k_tiles, values_bytes, "
      "meta_bytes, index_bytes, bytes, dense_bytes, density, compression}. Needs no GPU.",
      "a field not listed, of the wrong type or out of its range; a V:N:M the format refuses", vnm_layout_fields },
    { "write_csv", "sparsejit.write_csv(path, rows [, columns])",
      "Writes rows (a list of tables) as CSV to path (\"-\": stdout), one column per name in columns, default every "
      "key of any row, sorted; quotes a field with a comma, quote, line break or edge space. Returns the row count.",
      "a row that is not a table, a key that is not a string, a value that is a table or function; a file that "
      "cannot be written (nothing is written when a value is refused)", NULL },
    { "reference", "sparsejit.reference()",
      "This reference: a list of {name, call, what, errors, fields}, fields a list of {name, type, default, what} "
      "(empty for a function that takes no option table).",
      "never", NULL },
};

static const lua_fn_doc *doc_of(const char *name)
{
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        if (!strcmp(docs[i].name, name)) return &docs[i];
    return NULL;
}

/* Raises "sparsejit.<fn>: unknown field '<key>'; it takes <the fields>" for a key of table t that
 * fn's reference does not list. */
static void check_fields(lua_State *L, int t, const char *fn)
{
    const lua_field *fields = doc_of(fn)->fields;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (const lua_field *f = fields; f->name && !known; f++) known = !strcmp(f->name, lua_tostring(L, -1));
        if (known) continue;
        luaL_Buffer b;
        const char *key = luaL_tolstring(L, -1, NULL);
        luaL_buffinit(L, &b);
        for (const lua_field *f = fields; f->name; f++) {
            if (f != fields) luaL_addstring(&b, ", ");
            luaL_addstring(&b, f->name);
        }
        luaL_pushresult(&b);
        luaL_error(L, "sparsejit.%s: unknown field '%s'; it takes %s", fn, key, lua_tostring(L, -1));
    }
}

static lua_ctx *state_of(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY);
    lua_ctx *c = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return c;
}

static int ctx_gc(lua_State *L)
{
    lua_ctx *c = lua_touserdata(L, 1);
    if (c && c->ctx) sj_context_destroy(c->ctx);
    if (c) c->ctx = NULL;
    return 0;
}

/* Raises "sparsejit.<fn>: <last error>" at the caller's line. */
static int raise(lua_State *L, const char *fn)
{
    return luaL_error(L, "sparsejit.%s: %s", fn, sj_last_error());
}

static sj_context *context(lua_State *L, const char *fn)
{
    lua_ctx *c = state_of(L);
    if (!c->ctx) {
        sj_context_options o;
        cli_context_options_init(&o);
        if (c->cache_set) o.cache_path = c->cache;
        if (c->template_dir[0]) o.template_dir = c->template_dir;
        if (cli_context_create(&o, c->device, &c->ctx) != SJ_OK) raise(L, fn);
    }
    return c->ctx;
}

/* ------------------------------------------------------------------ reading option tables */

/* The readers of option fields raise "sparsejit.<fn>: field '<key>' ..." naming the type or
 * range expected; an absent (nil) field takes dflt. */
static const char *opt_string(lua_State *L, int t, const char *fn, const char *key, const char *dflt)
{
    lua_getfield(L, t, key);
    const char *s = dflt;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "sparsejit.%s: field '%s' must be a string", fn, key);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1); /* the string stays alive: it is also referenced by the table */
    return s;
}

/* An integer field in lo..hi, dflt when absent: checked here, before any caller narrows it to an
 * int, so 2^32 + 1 trials is refused rather than taken as 1. */
static lua_Integer opt_integer(lua_State *L, int t, const char *fn, const char *key, lua_Integer dflt, lua_Integer lo,
                               lua_Integer hi)
{
    lua_getfield(L, t, key);
    lua_Integer v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "sparsejit.%s: field '%s' must be an integer in %I..%I", fn, key, lo, hi);
        if (v < lo || v > hi)
            luaL_error(L, "sparsejit.%s: field '%s' = %I is out of range; expected an integer in %I..%I", fn, key, v, lo, hi);
    }
    lua_pop(L, 1);
    return v;
}

/* A number field in lo..hi (NaN refused), dflt when absent; lo = -HUGE_VAL and hi = HUGE_VAL: any
 * number, the caller checks it (in the CLI's words). */
static double opt_number(lua_State *L, int t, const char *fn, const char *key, double dflt, double lo, double hi)
{
    lua_getfield(L, t, key);
    double v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tonumberx(L, -1, &ok);
        int ranged = lo > -HUGE_VAL || hi < HUGE_VAL;
        if (!ok || (ranged && !(v >= lo && v <= hi))) {
            char range[64];
            snprintf(range, sizeof range, "[%.15g, %.15g]", lo, hi);
            luaL_error(L, "sparsejit.%s: field '%s' must be a number%s%s", fn, key, ranged ? " in " : "", ranged ? range : "");
        }
    }
    lua_pop(L, 1);
    return v;
}

static int opt_boolean(lua_State *L, int t, const char *fn, const char *key, int dflt)
{
    lua_getfield(L, t, key);
    int type = lua_type(L, -1);
    if (type != LUA_TNIL && type != LUA_TBOOLEAN)
        luaL_error(L, "sparsejit.%s: field '%s' must be true or false, not a %s", fn, key, lua_typename(L, type));
    int v = type == LUA_TNIL ? dflt : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* A "V:N:M" or "T:C" field through the CLI's parser (same ranges, same words), as the fn's error. */
static void read_fields(lua_State *L, const char *fn, const char *key, const char *val, const cli_fields *f, long long *v)
{
    char why[512];
    if (!cli_parse_fields(key, val, f, v, why, sizeof why)) luaL_error(L, "sparsejit.%s: %s", fn, why);
}

/* The problem fields of table t: op, dtype, out_dtype, shape = {m, n, k} (or m, n, k),
 * vnm = "V:N:M", twell = "T:C", d_ff, sparsity (TwELL ops, default 0.99 as on the CLI). */
/* The problem of table t; its op may name a benchmark of several kernels (core/op.h's op_bench)
 * when benches is set, which is returned (NULL for an op). */
static const op_bench *read_problem(lua_State *L, int t, const char *fn, int benches, sj_problem *p)
{
    sj_op op;
    sj_dtype dt, out;
    const char *name = opt_string(L, t, fn, "op", "gemm");
    const op_bench *b = op_bench_find_name(name);
    if (b && !benches)
        luaL_error(L, "sparsejit.%s: op '%s' is a benchmark of %s, not an op: sparsejit.bench runs it; sparsejit.%s "
                   "takes its parts, one of %s", fn, name, b->parts, fn, op_tunable_names());
    if (b) op = b->op;
    else if (sj_op_parse(name, &op) != SJ_OK) raise(L, fn);
    if (sj_dtype_parse(opt_string(L, t, fn, "dtype", "f16"), &dt) != SJ_OK) raise(L, fn);
    const char *od = opt_string(L, t, fn, "out_dtype", NULL);
    out = dt;
    if (od && sj_dtype_parse(od, &out) != SJ_OK) raise(L, fn);
    int64_t m = 0, n = 0, k = 0;
    if (lua_getfield(L, t, "shape") == LUA_TTABLE) {
        for (const char *const *d = (const char *const[]){ "m", "n", "k", NULL }; *d; d++)
            if (lua_getfield(L, t, *d) != LUA_TNIL) luaL_error(L, "sparsejit.%s: give shape or m, n and k, not both", fn);
            else lua_pop(L, 1);
        if (luaL_len(L, -1) != 3) luaL_error(L, "sparsejit.%s: shape must be {m, n, k}: 3 integers", fn);
        int64_t *dims[3] = { &m, &n, &k };
        for (int i = 0; i < 3; i++) {
            lua_geti(L, -1, i + 1);
            int ok;
            *dims[i] = lua_tointegerx(L, -1, &ok);
            if (!ok) luaL_error(L, "sparsejit.%s: shape must be {m, n, k} integers", fn);
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "sparsejit.%s: shape must be a table {m, n, k}", fn);
    } else {
        m = opt_integer(L, t, fn, "m", 0, 1, PROBLEM_MAX_DIM);
        n = opt_integer(L, t, fn, "n", 0, 1, PROBLEM_MAX_DIM);
        k = opt_integer(L, t, fn, "k", 0, 1, PROBLEM_MAX_DIM);
    }
    lua_pop(L, 1);
    sj_problem_init(p, op, dt, m, n, k);
    p->out_dtype = out;
    const char *vnm = opt_string(L, t, fn, "vnm", NULL);
    long long v[3];
    if (vnm) {
        read_fields(L, fn, "vnm", vnm, &cli_vnm_fields, v);
        p->vnm_v = (int)v[0];
        p->vnm_n = (int)v[1];
        p->vnm_m = (int)v[2];
    }
    const char *tw = opt_string(L, t, fn, "twell", NULL);
    if (tw) {
        read_fields(L, fn, "twell", tw, &cli_twell_fields, v);
        p->twell_tile = (int)v[0];
        p->twell_capacity = (int)v[1];
    }
    p->d_ff = opt_integer(L, t, fn, "d_ff", 0, 1, PROBLEM_MAX_DIM);
    /* sj_problem_validate names a rank that is no multiple of 8, or one the op does not take */
    p->lowrank_rank = (int)opt_integer(L, t, fn, "rank", 0, SJ_LOWRANK_MIN_RANK, SJ_LOWRANK_MAX_RANK);
    const op_desc *d = op_find(op);
    if (d->reads & OP_READS_TWELL) {
        p->twell_sparsity = opt_number(L, t, fn, "sparsity", TWELL_DEFAULT_SPARSITY, -HUGE_VAL, HUGE_VAL);
        if (!(p->twell_sparsity > 0 && p->twell_sparsity < 1))
            luaL_error(L, "sparsejit.%s: sparsity %f: expected a fraction of zeros in (0, 1), e.g. 0.99", fn,
                       p->twell_sparsity);
        p->twell_skew = opt_number(L, t, fn, "skew", 0, -HUGE_VAL, HUGE_VAL); /* sj_problem_validate names a bad one */
        p->twell_dead = opt_number(L, t, fn, "dead", 0, -HUGE_VAL, HUGE_VAL);
    }
    if (d->fill_defaults) d->fill_defaults(p);
    if (sj_problem_validate(p) != SJ_OK) raise(L, fn);
    return b;
}

static void set_number(lua_State *L, const char *k, double v) { lua_pushnumber(L, v); lua_setfield(L, -2, k); }
static void set_integer(lua_State *L, const char *k, lua_Integer v) { lua_pushinteger(L, v); lua_setfield(L, -2, k); }
static void set_string(lua_State *L, const char *k, const char *v) { lua_pushstring(L, v); lua_setfield(L, -2, k); }
static void set_boolean(lua_State *L, const char *k, int v) { lua_pushboolean(L, v); lua_setfield(L, -2, k); }

/* ------------------------------------------------------------------ configure, info, stats */

static int l_configure(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    check_fields(L, 1, "configure");
    lua_ctx *c = state_of(L);
    if (c->ctx) return luaL_error(L, "sparsejit.configure: call it before any other sparsejit function");
    const char *cache = opt_string(L, 1, "configure", "cache", NULL), *tdir = opt_string(L, 1, "configure", "template_dir", NULL);
    if ((cache && strlen(cache) >= sizeof c->cache) || (tdir && strlen(tdir) >= sizeof c->template_dir))
        return luaL_error(L, "sparsejit.configure: path longer than %d characters", (int)sizeof c->cache - 1);
    if (cache) {
        snprintf(c->cache, sizeof c->cache, "%s", cache);
        c->cache_set = 1;
    }
    if (tdir) snprintf(c->template_dir, sizeof c->template_dir, "%s", tdir);
    lua_getfield(L, 1, "device");
    int given = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (given) c->device = (int)opt_integer(L, 1, "configure", "device", 0, 0, CLI_MAX_DEVICE);
    return 0;
}

static int l_info(lua_State *L)
{
    sj_context *ctx = context(L, "info");
    sj_device_info d;
    if (sj_get_device_info(ctx, &d) != SJ_OK) return raise(L, "info");
    lua_newtable(L);
    set_string(L, "version", sj_version_string());
    set_boolean(L, "has_gpu", d.has_gpu);
    set_string(L, "no_gpu_reason", d.no_gpu_reason);
    set_string(L, "name", d.name);
    set_string(L, "arch", d.arch);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    set_string(L, "compute_capability", cc);
    set_integer(L, "sm_count", d.sm_count);
    set_integer(L, "driver_version", d.driver_version);
    set_integer(L, "nvrtc_version", d.nvrtc_version);
    set_integer(L, "memory_bytes", (lua_Integer)d.total_memory);
    set_integer(L, "l2_bytes", (lua_Integer)d.l2_bytes);
    set_integer(L, "max_shared_per_block", (lua_Integer)d.max_shared_per_block_optin);
    set_string(L, "cache_path", d.cache_path);
    return 1;
}

static int l_stats(lua_State *L)
{
    sj_stats s;
    if (sj_get_stats(context(L, "stats"), &s) != SJ_OK) return raise(L, "stats");
    lua_newtable(L);
    set_integer(L, "lua_generations", (lua_Integer)s.lua_generations);
    set_integer(L, "nvrtc_compiles", (lua_Integer)s.nvrtc_compiles);
    set_integer(L, "cache_hits", (lua_Integer)s.cache_hits);
    set_integer(L, "cache_misses", (lua_Integer)s.cache_misses);
    set_integer(L, "table_hits", (lua_Integer)s.table_hits);
    set_integer(L, "launches", (lua_Integer)s.launches);
    set_number(L, "nvrtc_seconds", s.nvrtc_seconds);
    set_number(L, "lua_seconds", s.lua_seconds);
    return 1;
}

/* ------------------------------------------------------------------ tune */

typedef struct lua_progress {
    lua_State *L;
    int fn;                  /* registry ref of the callback, LUA_NOREF: print (bar) */
    int failed;              /* the callback raised: its message is on the stack top */
    cli_progress bar;        /* the printed progress, as `sparsejit tune`'s */
} lua_progress;

/* Runs under lua_pcall, so no Lua error (not even out of memory) unwinds through sj_tune. */
static int call_progress(lua_State *L)
{
    const sj_tune_progress *p = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)lua_tointeger(L, 2));
    lua_newtable(L);
    set_integer(L, "done", p->done);
    set_integer(L, "total", p->total);
    set_integer(L, "rejected", p->rejected);
    set_string(L, "config", p->config);
    set_string(L, "status", p->status);
    set_number(L, "median_us", p->median_us);
    set_string(L, "best_config", p->best_config);
    set_number(L, "best_us", p->best_us);
    set_number(L, "elapsed_s", p->elapsed_s);
    set_number(L, "eta_s", p->eta_s);
    lua_call(L, 1, 1);
    return 1;
}

static int progress_cb(void *user, const sj_tune_progress *p)
{
    lua_progress *lp = user;
    if (lp->failed) return 1;
    if (lp->fn == LUA_NOREF) return cli_progress_print(&lp->bar, p);
    lua_State *L = lp->L;
    if (!lua_checkstack(L, 4)) {
        lp->failed = 1;
        lua_pushliteral(L, "sparsejit.tune: no Lua stack left for the progress callback");
        return 1;
    }
    lua_pushcfunction(L, call_progress);
    lua_pushlightuserdata(L, (void *)p);
    lua_pushinteger(L, lp->fn);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        lp->failed = 1; /* the message stays on the stack for l_tune to raise */
        return 1;
    }
    int stop = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return stop;
}

static void push_tune_result(lua_State *L, const sj_tune_result *r)
{
    lua_newtable(L);
    set_string(L, "config", r->config);
    set_string(L, "template", r->template_name);
    set_string(L, "strategy", r->strategy);
    set_number(L, "median_us", r->median_us);
    set_number(L, "p20_us", r->p20_us);
    set_number(L, "p80_us", r->p80_us);
    set_number(L, "tflops", r->tflops);
    set_integer(L, "space_size", r->space_size);
    set_integer(L, "trials_done", r->trials_done);
    set_integer(L, "trials_rejected", r->trials_rejected);
    set_number(L, "seconds", r->seconds);
    set_number(L, "compile_seconds", r->compile_seconds);
    set_boolean(L, "saved", r->saved);
    set_integer(L, "finalists", r->finalists);
    lua_createtable(L, r->n_trials, 0);
    for (int i = 0; i < r->n_trials; i++) {
        const sj_tune_trial *t = &r->trials[i];
        lua_newtable(L);
        set_string(L, "config", t->config);
        set_string(L, "status", t->status);
        set_number(L, "median_us", t->median_us);
        set_number(L, "p20_us", t->p20_us);
        set_number(L, "p80_us", t->p80_us);
        set_number(L, "tflops", t->tflops);
        set_number(L, "compile_seconds", t->compile_seconds);
        set_number(L, "rel_error", t->rel_error);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "trials");
}

static int l_tune(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    check_fields(L, 1, "tune");
    sj_problem p;
    read_problem(L, 1, "tune", 0, &p);
    sj_tune_options o;
    sj_tune_options_init(&o);
    if (sj_tune_strategy_parse(opt_string(L, 1, "tune", "strategy", "random"), &o.strategy) != SJ_OK)
        return raise(L, "tune");
    o.budget_trials = (int)opt_integer(L, 1, "tune", "budget_trials", 0, 0, 1000000);
    o.budget_seconds = opt_number(L, 1, "tune", "budget_seconds", 0, 0, LUA_MAX_SECONDS);
    o.seed = (uint64_t)opt_integer(L, 1, "tune", "seed", (lua_Integer)o.seed, 0, INT64_MAX);
    o.warmup_ms = opt_number(L, 1, "tune", "warmup_ms", o.warmup_ms, 0, LUA_MAX_SECONDS * 1e3);
    o.rep_ms = opt_number(L, 1, "tune", "rep_ms", o.rep_ms, 0, LUA_MAX_SECONDS * 1e3);
    o.threads = (int)opt_integer(L, 1, "tune", "threads", 0, 0, 64);
    o.save = opt_boolean(L, 1, "tune", "save", 1);
    sj_context *ctx = context(L, "tune");
    /* progress: a function gets each candidate; true prints it; absent: printed on a terminal */
    lua_progress lp = { L, LUA_NOREF, 0, { 0, 0 } };
    cli_progress_begin(&lp.bar, isatty(2));
    int ptype = lua_getfield(L, 1, "progress");
    if (ptype == LUA_TFUNCTION) {
        lp.fn = luaL_ref(L, LUA_REGISTRYINDEX);
        o.progress = progress_cb;
    } else {
        if (ptype != LUA_TNIL && ptype != LUA_TBOOLEAN)
            return luaL_error(L, "sparsejit.tune: field 'progress' must be true, false or a function, not a %s",
                              lua_typename(L, ptype));
        if (ptype == LUA_TNIL ? lp.bar.tty : lua_toboolean(L, -1)) o.progress = progress_cb;
        lua_pop(L, 1);
    }
    o.progress_user = &lp;
    sj_tune_result r;
    sj_status st = sj_tune(ctx, &p, &o, &r);
    cli_progress_end(&lp.bar);
    if (lp.fn != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, lp.fn);
    if (lp.failed) {
        if (st == SJ_OK) sj_tune_result_free(&r);
        return lua_error(L); /* the callback's own error, with its file:line */
    }
    if (st != SJ_OK) return raise(L, "tune");
    push_tune_result(L, &r);
    sj_tune_result_free(&r);
    return 1;
}

/* ------------------------------------------------------------------ bench */


static int l_bench(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    check_fields(L, 1, "bench");
    sj_problem p;
    const op_bench *b = read_problem(L, 1, "bench", 1, &p);
    bench_options o;
    bench_options_init(&o);
    sj_tune_options t;
    sj_tune_options_init(&t);
    t.warmup_ms = opt_number(L, 1, "bench", "warmup_ms", t.warmup_ms, 0, LUA_MAX_SECONDS * 1e3);
    t.rep_ms = opt_number(L, 1, "bench", "rep_ms", t.rep_ms, 0, LUA_MAX_SECONDS * 1e3);
    measure_options_from_tune(&t, &o.measure);
    o.rounds = (int)opt_integer(L, 1, "bench", "rounds", 1, 1, 100);
    o.seed = (uint64_t)opt_integer(L, 1, "bench", "seed", (lua_Integer)o.seed, 0, INT64_MAX);
    o.cublas = opt_boolean(L, 1, "bench", "cublas", 1);
    const char *config = opt_string(L, 1, "bench", "config", NULL);
    sj_context *ctx = context(L, "bench");
    if (config && sj_set_config(ctx, &p, config) != SJ_OK) return raise(L, "bench");
    bench_result r;
    sj_status st = bench_run(ctx, b ? b->name : sj_op_name(p.op), &p, &o, &r);
    if (config) sj_set_config(ctx, &p, ""); /* the forced config was for this call only */
    if (st != SJ_OK) return raise(L, "bench");
    const sj_bench_result *k = &r.run;
    lua_newtable(L);
    set_number(L, "median_us", k->median_us);
    set_number(L, "p20_us", k->p20_us);
    set_number(L, "p80_us", k->p80_us);
    set_number(L, "tflops", k->tflops);
    set_integer(L, "reps", k->reps);
    set_number(L, "rel_error", k->rel_error);
    set_string(L, "config", k->config);
    set_string(L, "origin", k->origin == SJ_CONFIG_TUNED ? "tuned" : k->origin == SJ_CONFIG_EXPLICIT ? "explicit" : "default");
    set_string(L, "source", k->source == SJ_FROM_COMPILE ? "compiled" : k->source == SJ_FROM_CACHE ? "cache" : "table");
    if (r.n_parts) { /* a benchmark's parts, each timed alone: parts_us.forward, ... */
        lua_newtable(L);
        for (int i = 0; i < r.n_parts; i++) set_number(L, r.part_names[i], r.part_us[i]);
        lua_setfield(L, -2, "parts_us");
    }
    if (r.saved_bytes >= 0) {
        set_integer(L, "saved_bytes", r.saved_bytes);
        set_integer(L, "dense_saved_bytes", r.dense_saved_bytes);
    }
    if (r.cublas_error[0]) {
        /* The benchmark's own timing stands; say why there is no baseline instead of failing. */
        set_string(L, "cublas_error", r.cublas_error);
    } else if (o.cublas) {
        set_number(L, "cublas_us", r.cublas_us);
        set_number(L, "cublas_tflops", r.cublas_tflops);
        set_number(L, "speedup", r.speedup);
        if (r.n_dense_parts) { /* the baseline's parts, each timed alone: dense_parts_us.forward, ... */
            lua_newtable(L);
            for (int i = 0; i < r.n_dense_parts; i++) set_number(L, r.dense_part_names[i], r.dense_part_us[i]);
            lua_setfield(L, -2, "dense_parts_us");
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ formats */

static int l_vnm_layout(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    check_fields(L, 1, "vnm_layout");
    sj_dtype dt;
    if (sj_dtype_parse(opt_string(L, 1, "vnm_layout", "dtype", "f16"), &dt) != SJ_OK) return raise(L, "vnm_layout");
    const char *spec = opt_string(L, 1, "vnm_layout", "vnm", "64:2:8");
    long long v[3];
    read_fields(L, "vnm_layout", "vnm", spec, &cli_vnm_fields, v);
    int64_t rows = opt_integer(L, 1, "vnm_layout", "rows", 0, 1, PROBLEM_MAX_DIM);
    int64_t cols = opt_integer(L, 1, "vnm_layout", "cols", 0, 1, PROBLEM_MAX_DIM);
    sj_vnm_layout l;
    if (sj_vnm_layout_init(&l, dt, (int)v[0], (int)v[1], (int)v[2], rows, cols) != SJ_OK) return raise(L, "vnm_layout");
    size_t compressed = l.values_bytes + l.meta_bytes + l.index_bytes, dense = (size_t)(rows * cols) * sj_dtype_size(dt);
    lua_newtable(L);
    set_integer(L, "v", l.v);
    set_integer(L, "n", l.n);
    set_integer(L, "m", l.m);
    set_integer(L, "rows", l.rows);
    set_integer(L, "cols", l.cols);
    set_integer(L, "row_blocks", l.row_blocks);
    set_integer(L, "groups", l.groups);
    set_integer(L, "k_tiles", l.k_tiles);
    set_integer(L, "values_bytes", (lua_Integer)l.values_bytes);
    set_integer(L, "meta_bytes", (lua_Integer)l.meta_bytes);
    set_integer(L, "index_bytes", (lua_Integer)l.index_bytes);
    set_integer(L, "bytes", (lua_Integer)compressed);
    set_integer(L, "dense_bytes", (lua_Integer)dense);
    set_number(L, "density", (double)l.n / l.m);
    set_number(L, "compression", (double)dense / (double)compressed);
    return 1;
}

/* ------------------------------------------------------------------ CSV */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Pushes the CSV text of the value at idx: "" for nil, tostring() otherwise, quoted (with
 * doubled quotes) when it holds a comma, quote or line break or starts or ends with a space. */
static void push_csv_field(lua_State *L, int idx, lua_Integer row, const char *col)
{
    int t = lua_type(L, idx);
    if (t == LUA_TNIL) {
        lua_pushliteral(L, "");
        return;
    }
    if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA || t == LUA_TTHREAD)
        luaL_error(L, "sparsejit.write_csv: row %d, column '%s': a %s cannot be written to CSV", (int)row, col,
                   lua_typename(L, t));
    size_t len;
    const char *s = luaL_tolstring(L, idx, &len);
    if (!strpbrk(s, ",\"\r\n") && !(len && (s[0] == ' ' || s[len - 1] == ' '))) return;
    luaL_Buffer b; /* s stays below the buffer on the stack, untouched while the buffer is in use */
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '"');
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"') luaL_addchar(&b, '"');
        luaL_addchar(&b, s[i]);
    }
    luaL_addchar(&b, '"');
    luaL_pushresult(&b);
    lua_remove(L, -2);
}

/* Replaces the columns argument (index 3) by the sorted names of every key of every row. */
static void default_columns(lua_State *L, lua_Integer n_rows)
{
    lua_newtable(L); /* set of names */
    int set = lua_gettop(L);
    for (lua_Integer r = 1; r <= n_rows; r++) {
        if (lua_geti(L, 2, r) != LUA_TTABLE) luaL_error(L, "sparsejit.write_csv: row %d is not a table", (int)r);
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pop(L, 1);
            if (lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "sparsejit.write_csv: row %d has a key that is not a string", (int)r);
            lua_pushvalue(L, -1);
            lua_pushboolean(L, 1);
            lua_settable(L, set);
        }
        lua_pop(L, 1);
    }
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, set)) {
        lua_pop(L, 1);
        n++;
    }
    const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)(n ? n : 1), 0);
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, set)) {
        lua_pop(L, 1);
        names[i++] = lua_tostring(L, -1); /* the set table keeps each name alive */
    }
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    lua_createtable(L, n, 0);
    for (i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_replace(L, 3);
    lua_settop(L, 3);
}

/* write_csv(path, rows [, columns]): rows is a list of tables; columns defaults to every key
 * that appears in any row, sorted. path "-" writes to stdout. Returns the row count. The text
 * is built first, so a bad value raises before the file is touched. */
static int l_write_csv(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n_rows = luaL_len(L, 2);
    lua_settop(L, 3);
    if (lua_isnil(L, 3)) default_columns(L, n_rows);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer n_cols = luaL_len(L, 3);
    for (lua_Integer c = 1; c <= n_cols; c++) {
        if (lua_geti(L, 3, c) != LUA_TSTRING) luaL_error(L, "sparsejit.write_csv: columns[%d] is not a string", (int)c);
        lua_pop(L, 1);
    }
    luaL_checkstack(L, (int)(2 * n_cols + 8), "sparsejit.write_csv: too many columns");
    lua_createtable(L, (int)n_rows + 1, 0); /* lines */
    int lines = lua_gettop(L);
    for (lua_Integer r = 0; r <= n_rows; r++) { /* r = 0: the header */
        int row = 0;
        if (r > 0) {
            if (lua_geti(L, 2, r) != LUA_TTABLE) luaL_error(L, "sparsejit.write_csv: row %d is not a table", (int)r);
            row = lua_gettop(L);
        }
        int base = lua_gettop(L);
        for (lua_Integer c = 1; c <= n_cols; c++) {
            if (c > 1) lua_pushliteral(L, ",");
            lua_geti(L, 3, c);
            const char *col = lua_tostring(L, -1);
            if (r > 0) {
                lua_getfield(L, row, col);
                push_csv_field(L, lua_gettop(L), r, col);
                lua_replace(L, -3);
                lua_pop(L, 1);
            } else {
                push_csv_field(L, lua_gettop(L), r, col);
                lua_remove(L, -2);
            }
        }
        lua_pushliteral(L, "\n");
        lua_concat(L, lua_gettop(L) - base);
        lua_rawseti(L, lines, r + 1);
        if (r > 0) lua_pop(L, 1);
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (lua_Integer r = 0; r <= n_rows; r++) {
        lua_rawgeti(L, lines, r + 1);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!f) return luaL_error(L, "sparsejit.write_csv: cannot open '%s' for writing: %s", path, strerror(errno));
    int ok = fwrite(text, 1, len, f) == len;
    if (f != stdout) ok = fclose(f) == 0 && ok;
    else ok = fflush(f) == 0 && ok;
    if (!ok) return luaL_error(L, "sparsejit.write_csv: writing '%s' failed: %s", path, strerror(errno));
    lua_pushinteger(L, n_rows);
    return 1;
}

/* ------------------------------------------------------------------ reference */

/* Pushes a table of n string fields, kv[i] = { key, value }. */
static void push_strings(lua_State *L, const char *const kv[][2], int n)
{
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) set_string(L, kv[i][0], kv[i][1]);
}

static int l_reference(lua_State *L)
{
    lua_createtable(L, (int)(sizeof docs / sizeof docs[0]), 0);
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        const lua_fn_doc *d = &docs[i];
        push_strings(L, (const char *const[][2]){ { "name", d->name }, { "call", d->call }, { "what", d->what },
                                                  { "errors", d->errors } }, 4);
        lua_newtable(L);
        for (int j = 0; d->fields && d->fields[j].name; j++) {
            const lua_field *f = &d->fields[j];
            push_strings(L, (const char *const[][2]){ { "name", f->name }, { "type", f->type }, { "default", f->dflt },
                                                      { "what", f->what } }, 4);
            lua_rawseti(L, -2, j + 1);
        }
        lua_setfield(L, -2, "fields");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

int luaopen_sparsejit(lua_State *L)
{
    lua_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->device = -1;
    lua_newtable(L);
    lua_pushcfunction(L, ctx_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, CTX_KEY);
    static const luaL_Reg fns[] = {
        { "configure", l_configure }, { "info", l_info }, { "stats", l_stats }, { "tune", l_tune },
        { "bench", l_bench }, { "vnm_layout", l_vnm_layout }, { "write_csv", l_write_csv },
        { "reference", l_reference }, { NULL, NULL },
    };
    luaL_newlib(L, fns);
    set_string(L, "version", sj_version_string());
    return 1;
}

void lua_sparsejit_set_device(lua_State *L, int device) { state_of(L)->device = device; }
