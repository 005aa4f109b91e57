/* lua_sparsejit.c: the `sparsejit` Lua module that `sparsejit run script.lua` gives user scripts
 * (sweeps): device info, tune, bench (with the cuBLAS baseline), V:N:M layout sizes and CSV
 * writing, with results as plain Lua tables. Errors from the library are raised as Lua errors
 * carrying the sparsejit message. One context per Lua state, created on first use. */
#include "core/op.h"
#include "core/problem.h"
#include "tuner/bench.h"
#include "cli/cli_problem.h"
#include "cli/cli_context.h"
#include "cli/lua_sparsejit.h"
#include "ops/twell/twell.h"
#include "sparsejit.h"
#include "tuner/tuner.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX_KEY "sparsejit.context"

typedef struct lua_ctx {
    sj_context *ctx;
    char cache[1024];
    int cache_set;
    char template_dir[1024];
    int device;              /* -1: not chosen (cli_context_create) */
} lua_ctx;

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

static const char *opt_string(lua_State *L, int t, const char *key, const char *dflt)
{
    lua_getfield(L, t, key);
    const char *s = dflt;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "field '%s' must be a string", key);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1); /* the string stays alive: it is also referenced by the table */
    return s;
}

/* An integer field in lo..hi, dflt when absent: checked here, before any caller narrows it to an
 * int, so 2^32 + 1 trials is refused rather than taken as 1. */
static lua_Integer opt_integer(lua_State *L, int t, const char *key, lua_Integer dflt, lua_Integer lo, lua_Integer hi)
{
    lua_getfield(L, t, key);
    lua_Integer v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "field '%s' must be an integer in %I..%I", key, lo, hi);
        if (v < lo || v > hi) luaL_error(L, "field '%s' = %I is out of range; expected an integer in %I..%I", key, v, lo, hi);
    }
    lua_pop(L, 1);
    return v;
}

static double opt_number(lua_State *L, int t, const char *key, double dflt)
{
    lua_getfield(L, t, key);
    double v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tonumberx(L, -1, &ok);
        if (!ok) luaL_error(L, "field '%s' must be a number", key);
    }
    lua_pop(L, 1);
    return v;
}

static int opt_boolean(lua_State *L, int t, const char *key, int dflt)
{
    lua_getfield(L, t, key);
    int v = lua_isnil(L, -1) ? dflt : lua_toboolean(L, -1);
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
    luaL_checktype(L, t, LUA_TTABLE);
    sj_op op;
    sj_dtype dt, out;
    const char *name = opt_string(L, t, "op", "gemm");
    const op_bench *b = op_bench_find_name(name);
    if (b && !benches)
        luaL_error(L, "sparsejit.%s: op '%s' is a benchmark of %s, not an op: sparsejit.bench runs it; sparsejit.%s "
                   "takes its parts, one of %s", fn, name, b->parts, fn, op_tunable_names());
    if (b) op = b->op;
    else if (sj_op_parse(name, &op) != SJ_OK) raise(L, fn);
    if (sj_dtype_parse(opt_string(L, t, "dtype", "f16"), &dt) != SJ_OK) raise(L, fn);
    const char *od = opt_string(L, t, "out_dtype", NULL);
    out = dt;
    if (od && sj_dtype_parse(od, &out) != SJ_OK) raise(L, fn);
    int64_t m = 0, n = 0, k = 0;
    if (lua_getfield(L, t, "shape") == LUA_TTABLE) {
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
        m = opt_integer(L, t, "m", 0, 1, PROBLEM_MAX_DIM);
        n = opt_integer(L, t, "n", 0, 1, PROBLEM_MAX_DIM);
        k = opt_integer(L, t, "k", 0, 1, PROBLEM_MAX_DIM);
    }
    lua_pop(L, 1);
    sj_problem_init(p, op, dt, m, n, k);
    p->out_dtype = out;
    const char *vnm = opt_string(L, t, "vnm", NULL);
    long long v[3];
    if (vnm) {
        read_fields(L, fn, "vnm", vnm, &cli_vnm_fields, v);
        p->vnm_v = (int)v[0];
        p->vnm_n = (int)v[1];
        p->vnm_m = (int)v[2];
    }
    const char *tw = opt_string(L, t, "twell", NULL);
    if (tw) {
        read_fields(L, fn, "twell", tw, &cli_twell_fields, v);
        p->twell_tile = (int)v[0];
        p->twell_capacity = (int)v[1];
    }
    p->d_ff = opt_integer(L, t, "d_ff", 0, 1, PROBLEM_MAX_DIM);
    const op_desc *d = op_find(op);
    if (d->reads & OP_READS_TWELL) {
        p->twell_sparsity = opt_number(L, t, "sparsity", TWELL_DEFAULT_SPARSITY);
        if (!(p->twell_sparsity > 0 && p->twell_sparsity < 1))
            luaL_error(L, "sparsejit.%s: sparsity %f: expected a fraction of zeros in (0, 1), e.g. 0.99", fn,
                       p->twell_sparsity);
        p->twell_skew = opt_number(L, t, "skew", 0); /* sj_problem_validate names a bad one */
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
    lua_ctx *c = state_of(L);
    if (c->ctx) return luaL_error(L, "sparsejit.configure: call it before any other sparsejit function");
    const char *cache = opt_string(L, 1, "cache", NULL), *tdir = opt_string(L, 1, "template_dir", NULL);
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
    if (given) c->device = (int)opt_integer(L, 1, "device", 0, 0, CLI_MAX_DEVICE);
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
    int fn;                  /* registry ref of the callback, LUA_NOREF: print lines */
    int failed;              /* the callback raised: its message is on the stack top */
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
    if (lp->fn == LUA_NOREF) {
        fprintf(stderr, "tune: %d/%d %-13s %9.2f us  %s  (best %.2f us)\n", p->done, p->total, p->status, p->median_us,
                p->config, p->best_us);
        return 0;
    }
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
    sj_problem p;
    read_problem(L, 1, "tune", 0, &p);
    sj_tune_options o;
    sj_tune_options_init(&o);
    if (sj_tune_strategy_parse(opt_string(L, 1, "strategy", "random"), &o.strategy) != SJ_OK) return raise(L, "tune");
    o.budget_trials = (int)opt_integer(L, 1, "budget_trials", 0, 0, 1000000);
    o.budget_seconds = opt_number(L, 1, "budget_seconds", 0);
    o.seed = (uint64_t)opt_integer(L, 1, "seed", (lua_Integer)o.seed, 0, INT64_MAX);
    o.warmup_ms = opt_number(L, 1, "warmup_ms", o.warmup_ms);
    o.rep_ms = opt_number(L, 1, "rep_ms", o.rep_ms);
    o.threads = (int)opt_integer(L, 1, "threads", 0, 0, 64);
    o.save = opt_boolean(L, 1, "save", 1);
    sj_context *ctx = context(L, "tune");
    lua_progress lp = { L, LUA_NOREF, 0 };
    lua_getfield(L, 1, "progress");
    if (lua_isfunction(L, -1)) {
        lp.fn = luaL_ref(L, LUA_REGISTRYINDEX);
        o.progress = progress_cb;
    } else {
        if (lua_toboolean(L, -1)) o.progress = progress_cb;
        lua_pop(L, 1);
    }
    o.progress_user = &lp;
    sj_tune_result r;
    sj_status st = sj_tune(ctx, &p, &o, &r);
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
    sj_problem p;
    const op_bench *b = read_problem(L, 1, "bench", 1, &p);
    bench_options o;
    bench_options_init(&o);
    sj_tune_options t;
    sj_tune_options_init(&t);
    t.warmup_ms = opt_number(L, 1, "warmup_ms", t.warmup_ms);
    t.rep_ms = opt_number(L, 1, "rep_ms", t.rep_ms);
    measure_options_from_tune(&t, &o.measure);
    o.rounds = (int)opt_integer(L, 1, "rounds", 1, 1, 100);
    o.seed = (uint64_t)opt_integer(L, 1, "seed", (lua_Integer)o.seed, 0, INT64_MAX);
    o.cublas = opt_boolean(L, 1, "cublas", 1);
    const char *config = opt_string(L, 1, "config", NULL);
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
    if (r.cublas_error[0]) {
        /* The benchmark's own timing stands; say why there is no baseline instead of failing. */
        set_string(L, "cublas_error", r.cublas_error);
    } else if (o.cublas) {
        set_number(L, "cublas_us", r.cublas_us);
        set_number(L, "cublas_tflops", r.cublas_tflops);
        set_number(L, "speedup", r.speedup);
    }
    return 1;
}

/* ------------------------------------------------------------------ formats */

static int l_vnm_layout(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    sj_dtype dt;
    if (sj_dtype_parse(opt_string(L, 1, "dtype", "f16"), &dt) != SJ_OK) return raise(L, "vnm_layout");
    const char *spec = opt_string(L, 1, "vnm", "64:2:8");
    long long v[3];
    read_fields(L, "vnm_layout", "vnm", spec, &cli_vnm_fields, v);
    int64_t rows = opt_integer(L, 1, "rows", 0, 1, PROBLEM_MAX_DIM), cols = opt_integer(L, 1, "cols", 0, 1, PROBLEM_MAX_DIM);
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
        { "bench", l_bench }, { "vnm_layout", l_vnm_layout }, { "write_csv", l_write_csv }, { NULL, NULL },
    };
    luaL_newlib(L, fns);
    set_string(L, "version", sj_version_string());
    return 1;
}

void lua_sparsejit_set_device(lua_State *L, int device) { state_of(L)->device = device; }
