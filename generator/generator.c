/* generator.c: turns (template, problem, config) into CUDA source and launch geometry by calling
 * the template's Lua functions in the sandbox; also the template hash of the cache key and the
 * config-string format shared by the CLI, cache and tuner. */
#include "generator/generator.h"
#include "generator/lua_sandbox.h"
#include "core/error.h"
#include "core/number.h"

#include <dirent.h>
#include <limits.h>
#include <lauxlib.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; const char *text; size_t len; } embedded_file;
extern const embedded_file embedded_templates[];

#define GEN_MAX_FILES 64

struct gen_state {
    sandbox *sb;
    char dir[1024];          /* "" = embedded templates */
    struct { char name[64]; char *text; size_t len; } files[GEN_MAX_FILES]; /* read from dir */
    int n_files;
    struct { char name[64]; char hash[65]; } hashes[GEN_MAX_FILES];
    int n_hashes;
    char arch[16];
    int max_shared;
    int sm_count; /* 0: unknown (no GPU) */
    size_t memory_limit;                  /* the sandbox's limits; 0: its defaults */
    unsigned long long instruction_limit;
    unsigned wall_limit_ms;
};

void gen_set_target(gen_state *g, const char *arch, int max_shared_bytes, int sm_count)
{
    snprintf(g->arch, sizeof g->arch, "%s", arch);
    g->max_shared = max_shared_bytes;
    g->sm_count = sm_count;
}

int gen_arch_max_shared(const char *arch)
{
    /* CUDA C Programming Guide, "Technical Specifications per Compute Capability" */
    static const struct { const char *prefix; int bytes; } table[] = {
        { "sm_80", 166912 }, { "sm_87", 166912 }, { "sm_86", 101376 }, { "sm_89", 101376 },
        { "sm_90", 232448 }, { "sm_100", 232448 }, { "sm_120", 101376 },
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strncmp(arch, table[i].prefix, strlen(table[i].prefix))) return table[i].bytes;
    return 101376;
}

/* ------------------------------------------------------------------ template files */

static const char *read_whole_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static const char *gen_file(void *user, const char *name, size_t *len)
{
    gen_state *g = user;
    if (!g->dir[0]) {
        for (const embedded_file *f = embedded_templates; f->name; f++)
            if (!strcmp(f->name, name)) {
                *len = f->len;
                return f->text;
            }
        return NULL;
    }
    for (int i = 0; i < g->n_files; i++)
        if (!strcmp(g->files[i].name, name)) {
            *len = g->files[i].len;
            return g->files[i].text;
        }
    if (g->n_files == GEN_MAX_FILES || strlen(name) >= sizeof g->files[0].name) return NULL;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.lua", g->dir, name);
    size_t n = 0;
    const char *text = read_whole_file(path, &n);
    if (!text) return NULL;
    /* Keep the text for the state's lifetime: one consistent version per generator. */
    snprintf(g->files[g->n_files].name, sizeof g->files[0].name, "%s", name);
    g->files[g->n_files].text = (char *)text;
    g->files[g->n_files].len = n;
    g->n_files++;
    *len = n;
    return text;
}

/* A fresh sandbox with the generator's limits; g->sb stays NULL (err says why) on failure. */
static void open_sandbox(gen_state *g, char *err, size_t errlen)
{
    g->sb = sandbox_open(gen_file, g, err, errlen);
    if (g->sb) sandbox_set_limits(g->sb, g->memory_limit, g->instruction_limit, g->wall_limit_ms);
}

void gen_set_limits(gen_state *g, size_t memory_bytes, unsigned long long instructions, unsigned wall_ms)
{
    g->memory_limit = memory_bytes;
    g->instruction_limit = instructions;
    g->wall_limit_ms = wall_ms;
    if (g->sb) sandbox_set_limits(g->sb, memory_bytes, instructions, wall_ms);
}

sj_status gen_open(const char *template_dir, gen_state **out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "gen_open: out is NULL");
    *out = NULL;
    gen_state *g = calloc(1, sizeof *g);
    if (!g) return error_set(SJ_ERR_OUT_OF_MEMORY, "gen_open: out of memory");
    if (template_dir && template_dir[0]) {
        if (strlen(template_dir) >= sizeof g->dir) {
            free(g);
            return error_set(SJ_ERR_INVALID_ARGUMENT, "template_dir is longer than %zu characters", sizeof g->dir - 1);
        }
        snprintf(g->dir, sizeof g->dir, "%s", template_dir);
    }
    char err[512];
    open_sandbox(g, err, sizeof err);
    if (!g->sb) {
        free(g);
        return error_set(SJ_ERR_TEMPLATE, "%s", err);
    }
    gen_set_target(g, "sm_90a", gen_arch_max_shared("sm_90a"), 0);
    *out = g;
    return SJ_OK;
}

void gen_close(gen_state *g)
{
    if (!g) return;
    sandbox_close(g->sb);
    for (int i = 0; i < g->n_files; i++) free(g->files[i].text);
    free(g);
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

/* Names of the lib/ modules, sorted, so the hash is over a stable sequence. */
static int list_modules(gen_state *g, char names[][64], int max)
{
    int n = 0;
    if (!g->dir[0]) {
        for (const embedded_file *f = embedded_templates; f->name && n < max; f++)
            if (!strncmp(f->name, "lib/", 4)) snprintf(names[n++], 64, "%s", f->name);
        return n; /* the embedding script sorts them */
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/lib", g->dir);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && l < 56 && !strcmp(e->d_name + l - 4, ".lua"))
            snprintf(names[n++], 64, "lib/%.*s", (int)(l - 4), e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, cmp_names);
    return n;
}

sj_status gen_template_hash(gen_state *g, const char *name, char hex[65])
{
    for (int i = 0; i < g->n_hashes; i++)
        if (!strcmp(g->hashes[i].name, name)) {
            memcpy(hex, g->hashes[i].hash, 65);
            return SJ_OK;
        }
    size_t len;
    const char *text = gen_file(g, name, &len);
    if (!text) return error_set(SJ_ERR_NOT_FOUND, "no template named '%s'", name);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "sha256 init failed");
    }
    int ok = EVP_DigestUpdate(md, name, strlen(name) + 1) == 1 && EVP_DigestUpdate(md, text, len) == 1;
    char mods[GEN_MAX_FILES][64];
    int n = list_modules(g, mods, GEN_MAX_FILES);
    for (int i = 0; i < n && ok; i++) {
        size_t ml;
        const char *mt = gen_file(g, mods[i], &ml);
        if (!mt) continue;
        ok = EVP_DigestUpdate(md, mods[i], strlen(mods[i]) + 1) == 1 && EVP_DigestUpdate(md, mt, ml) == 1;
    }
    unsigned char digest[32];
    unsigned int dlen = 0;
    ok = ok && EVP_DigestFinal_ex(md, digest, &dlen) == 1 && dlen == 32;
    EVP_MD_CTX_free(md);
    if (!ok) return error_set(SJ_ERR_TEMPLATE, "sha256 of template '%s' failed", name);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    if (g->n_hashes < GEN_MAX_FILES) {
        snprintf(g->hashes[g->n_hashes].name, sizeof g->hashes[0].name, "%s", name);
        memcpy(g->hashes[g->n_hashes].hash, hex, 65);
        g->n_hashes++;
    }
    return SJ_OK;
}

/* ------------------------------------------------------------------ config strings */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= 16) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 1;
}

sj_status gen_config_parse(const char *text, gen_config *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "gen_config_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!text) return SJ_OK;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        const char *eq = strchr(p, '=');
        const char *end = p + strcspn(p, ",");
        if (!eq || eq > end || !name_ok(p, (size_t)(eq - p)))
            return error_set(SJ_ERR_INVALID_ARGUMENT, "config '%s': expected NAME=INTEGER pairs separated by commas", text);
        long long v;
        number_result r = number_parse(eq + 1, (size_t)(end - eq - 1), INT_MIN, INT_MAX, &v);
        if (r != NUMBER_OK) /* the text as given: a narrowed value would name another number */
            return error_set(SJ_ERR_INVALID_ARGUMENT, "config '%s': %.*s = '%.*s' is %s; expected an integer in %d..%d",
                             text, (int)(eq - p), p, (int)(end - eq - 1), eq + 1, number_problem(r), INT_MIN, INT_MAX);
        for (int i = 0; i < out->n; i++)
            if ((size_t)(eq - p) == strlen(out->names[i]) && !strncmp(out->names[i], p, (size_t)(eq - p)))
                return error_set(SJ_ERR_INVALID_ARGUMENT, "config '%s': '%s' given twice", text, out->names[i]);
        if (out->n == GEN_MAX_PARAMS)
            return error_set(SJ_ERR_INVALID_ARGUMENT, "config '%s': more than %d parameters", text, GEN_MAX_PARAMS);
        snprintf(out->names[out->n], sizeof out->names[0], "%.*s", (int)(eq - p), p);
        out->values[out->n++] = (int)v;
        p = end;
    }
    return SJ_OK;
}

void gen_config_format(const gen_config *c, char *buf, size_t len)
{
    int order[GEN_MAX_PARAMS];
    for (int i = 0; i < c->n; i++) order[i] = i;
    for (int i = 1; i < c->n; i++) /* insertion sort by name: canonical order */
        for (int j = i; j > 0 && strcmp(c->names[order[j - 1]], c->names[order[j]]) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t off = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < c->n && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s=%d", i ? "," : "", c->names[order[i]], c->values[order[i]]);
}

/* ------------------------------------------------------------------ calling the template */

/* One generator operation: what it reads and what it gives back. It runs inside the sandbox's
 * lua_pcall (gen_run), so every access to a template value, metamethods and allocation
 * included, fails as an error; failures of the host's own are raised with their status. */
typedef struct gen_call {
    gen_state *g;
    const char *name;
    const sj_problem *p;
    gen_config given;  /* config values named by the caller, over the default */
    gen_config cfg;    /* the resolved config */
    int valid;
    char reason[512];
    gen_space *space;
    char (*configs)[256];
    int max, n;
    sj_generated *out; /* owned by the caller from the moment it is allocated */
    double flops;
} gen_call;

static sj_status gen_run(gen_state *g, lua_CFunction fn, gen_call *c)
{
    char err[4096];
    if (!g->sb) {
        open_sandbox(g, err, sizeof err);
        if (!g->sb) return error_set(SJ_ERR_TEMPLATE, "%s", err);
    }
    int code = 0;
    int rc = sandbox_run(g->sb, fn, c, &code, err, sizeof err);
    if (sandbox_spoiled(g->sb)) { /* the next operation starts from a fresh state */
        sandbox_close(g->sb);
        g->sb = NULL;
    }
    if (rc == 0) return SJ_OK;
    return error_set(code ? (sj_status)code : SJ_ERR_TEMPLATE, "%s", err);
}

/* Pushes the template table of c->name, running the template the first time. */
static void push_template(lua_State *L, gen_call *c)
{
    const char *name = c->name;
    if (lua_getfield(L, LUA_REGISTRYINDEX, "sj.templates") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "sj.templates");
    }
    if (lua_getfield(L, -1, name) == LUA_TTABLE) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 1);
    size_t len;
    if (!gen_file(c->g, name, &len))
        sandbox_raise(L, SJ_ERR_NOT_FOUND, "no template named '%s'%s%s", name, c->g->dir[0] ? " in " : "", c->g->dir);
    sandbox_push_template(L, name);
    if (!lua_istable(L, -1))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua must return a table, it returned %s", name, luaL_typename(L, -1));
    static const char *const required[] = { "name", "op", "params", "space", "valid", "default", "generate", NULL };
    for (const char *const *f = required; *f; f++) {
        if (lua_getfield(L, -1, *f) == LUA_TNIL)
            sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: the returned table has no field '%s'", name, *f);
        lua_pop(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    lua_remove(L, -2);
}

static void push_problem(gen_state *g, lua_State *L, const sj_problem *p)
{
    lua_createtable(L, 0, 16);
    lua_pushstring(L, g->arch);
    lua_setfield(L, -2, "arch");
    lua_pushinteger(L, g->max_shared);
    lua_setfield(L, -2, "SMEM");
    lua_pushinteger(L, g->sm_count);
    lua_setfield(L, -2, "SMS");
    lua_pushstring(L, sj_op_name(p->op));
    lua_setfield(L, -2, "op");
    lua_pushstring(L, sj_dtype_name(p->dtype));
    lua_setfield(L, -2, "dtype");
    lua_pushstring(L, sj_dtype_name(p->out_dtype));
    lua_setfield(L, -2, "out_dtype");
    const struct { const char *k; lua_Integer v; } f[] = {
        { "M", p->m }, { "N", p->n }, { "K", p->k }, { "V", p->vnm_v }, { "NS", p->vnm_n }, { "MS", p->vnm_m },
        { "T", p->twell_tile }, { "C", p->twell_capacity }, { "DFF", p->d_ff }, { "RANK", p->lowrank_rank },
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        lua_pushinteger(L, f[i].v);
        lua_setfield(L, -2, f[i].k);
    }
    /* the activations' expected sparsity (0: unspecified), which picks the FFN's default algorithm */
    lua_pushnumber(L, p->twell_sparsity);
    lua_setfield(L, -2, "SPARSITY");
}

static void push_config(lua_State *L, const gen_config *c)
{
    lua_createtable(L, 0, c->n);
    for (int i = 0; i < c->n; i++) {
        lua_pushinteger(L, c->values[i]);
        lua_setfield(L, -2, c->names[i]);
    }
}

/* Calls template[fn](problem [, config]) leaving nresults on the stack. A plain table is
 * allowed for `space` (no config, one result) and pushed as it is. */
static void call_template(lua_State *L, gen_call *c, const char *fn, const gen_config *cfg, int nresults)
{
    push_template(L, c);
    if (lua_getfield(L, -1, fn) != LUA_TFUNCTION) {
        if (lua_istable(L, -1) && !cfg && nresults == 1) {
            lua_remove(L, -2);
            return;
        }
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: '%s' must be a function", c->name, fn);
    }
    lua_remove(L, -2);
    push_problem(c->g, L, c->p);
    if (cfg) push_config(L, cfg);
    if (sandbox_pcall(L, cfg ? 2 : 1, nresults) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        sandbox_raise(L, SJ_ERR_TEMPLATE, "%s (in %s.%s)", msg ? msg : "(error object is not a string)", c->name, fn);
    }
}

/* The template's params list, in its order. */
static void template_params(lua_State *L, gen_call *c, gen_config *names_only)
{
    push_template(L, c);
    memset(names_only, 0, sizeof *names_only);
    lua_getfield(L, -1, "params");
    if (!lua_istable(L, -1))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: 'params' must be a list of names", c->name);
    lua_Integer n = luaL_len(L, -1);
    if (n < 0 || n > GEN_MAX_PARAMS)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: params has %lld entries; at most %d are allowed", c->name,
                      (long long)n, GEN_MAX_PARAMS);
    for (lua_Integer i = 1; i <= n; i++) {
        size_t l;
        const char *s = lua_geti(L, -1, i) == LUA_TSTRING ? lua_tolstring(L, -1, &l) : NULL;
        if (!s || !name_ok(s, l))
            sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: params[%lld] is not a short identifier", c->name,
                          (long long)i);
        snprintf(names_only->names[names_only->n++], 16, "%s", s);
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

/* An integer the template gives for `what`, as an int. */
static int template_int(lua_State *L, gen_call *c, int idx, const char *what, const char *field)
{
    int isnum;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum) sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: %s gives no integer for '%s'", c->name, what, field);
    if (v < INT_MIN || v > INT_MAX)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: %s gives %lld for '%s', outside the range of int", c->name,
                      what, (long long)v, field);
    return (int)v;
}

/* Reads a config table at the top of the stack (popped) for the template's params. */
static void read_config_table(lua_State *L, gen_call *c, const char *what, const gen_config *params, gen_config *out)
{
    if (!lua_istable(L, -1))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: %s must return a table of params", c->name, what);
    *out = *params;
    for (int i = 0; i < params->n; i++) {
        lua_getfield(L, -1, params->names[i]);
        out->values[i] = template_int(L, c, -1, what, params->names[i]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void default_config(lua_State *L, gen_call *c, gen_config *out)
{
    gen_config params;
    template_params(L, c, &params);
    call_template(L, c, "default", NULL, 1);
    read_config_table(L, c, "default()", &params, out);
}

/* out = base with the values c->given names; unknown names refused. */
static void overlay_given(lua_State *L, gen_call *c, const gen_config *base, gen_config *out)
{
    *out = *base;
    for (int i = 0; i < c->given.n; i++) {
        int found = 0;
        for (int j = 0; j < out->n; j++)
            if (!strcmp(out->names[j], c->given.names[i])) {
                out->values[j] = c->given.values[i];
                found = 1;
            }
        if (!found) {
            char known[256] = "";
            for (int j = 0; j < out->n; j++) {
                strncat(known, j ? ", " : "", sizeof known - strlen(known) - 1);
                strncat(known, out->names[j], sizeof known - strlen(known) - 1);
            }
            sandbox_raise(L, SJ_ERR_INVALID_ARGUMENT, "config: template %s has no parameter '%s' (it has %s)", c->name,
                          c->given.names[i], known);
        }
    }
}

static void check_valid(lua_State *L, gen_call *c);

/* c->cfg: the values c->given names over the default. When the caller names only some of the
 * parameters and that mix is not valid (the default's other parameters belong to another
 * algorithm: "WG=0" over a default that reads dY by TMA, which needs WG=1), the first of the
 * template's variants() (its preferred candidates, in order) under which the named values are
 * valid gives the rest instead; with none, the default's mix stays, so the error names why. */
static void resolve_config(lua_State *L, gen_call *c)
{
    gen_config base;
    default_config(L, c, &base);
    overlay_given(L, c, &base, &c->cfg);
    if (c->given.n == 0 || c->given.n >= c->cfg.n) return;
    check_valid(L, c);
    push_template(L, c);
    int has_variants = lua_getfield(L, -1, "variants") != LUA_TNIL;
    lua_pop(L, 2);
    if (c->valid || !has_variants) return;
    const gen_config over_default = c->cfg;
    gen_config params;
    template_params(L, c, &params);
    call_template(L, c, "variants", NULL, 1);
    const lua_Integer count = lua_istable(L, -1) ? luaL_len(L, -1) : 0;
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, -1, i);
        read_config_table(L, c, "variants()", &params, &base);
        overlay_given(L, c, &base, &c->cfg);
        check_valid(L, c);
        if (c->valid) {
            lua_pop(L, 1);
            return;
        }
    }
    lua_pop(L, 1);
    c->cfg = over_default;
}

/* c->valid and c->reason for c->cfg. */
static void check_valid(lua_State *L, gen_call *c)
{
    call_template(L, c, "valid", &c->cfg, 2);
    c->valid = lua_toboolean(L, -2);
    const char *r = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    snprintf(c->reason, sizeof c->reason, "%s", c->valid ? "" : (r ? r : "rejected by the template's constraints"));
    lua_pop(L, 2);
}

static gen_call *call_of(lua_State *L) { return lua_touserdata(L, 1); }

static int run_default(lua_State *L)
{
    gen_call *c = call_of(L);
    default_config(L, c, &c->cfg);
    return 0;
}

static int run_resolve(lua_State *L)
{
    resolve_config(L, call_of(L));
    return 0;
}

static int run_valid(lua_State *L)
{
    gen_call *c = call_of(L);
    resolve_config(L, c);
    check_valid(L, c);
    return 0;
}

/* Parses the caller's config text into c->given before the call runs. */
static sj_status prepare(gen_call *c, gen_state *g, const char *name, const sj_problem *p, const char *config)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->name = name;
    c->p = p;
    return gen_config_parse(config, &c->given);
}

sj_status gen_default_config(gen_state *g, const char *name, const sj_problem *p, char *config, size_t len)
{
    gen_call c;
    sj_status st = prepare(&c, g, name, p, NULL);
    if (st == SJ_OK) st = gen_run(g, run_default, &c);
    if (st != SJ_OK) return st;
    gen_config_format(&c.cfg, config, len);
    return SJ_OK;
}

static int run_variants(lua_State *L)
{
    gen_call *c = call_of(L);
    gen_config params, cfg;
    template_params(L, c, &params);
    push_template(L, c);
    int has = lua_getfield(L, -1, "variants") != LUA_TNIL;
    lua_pop(L, 2);
    if (!has) { /* one variant: the template's default */
        default_config(L, c, &cfg);
        gen_config_format(&cfg, c->configs[0], 256);
        c->n = 1;
        return 0;
    }
    call_template(L, c, "variants", NULL, 1);
    if (!lua_istable(L, -1))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: variants() must return a list of configs", c->name);
    lua_Integer count = luaL_len(L, -1);
    if (count < 1 || count > c->max)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: variants() returned %lld configs; expected 1 .. %d", c->name,
                      (long long)count, c->max);
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, -1, i);
        read_config_table(L, c, "variants()", &params, &cfg);
        gen_config_format(&cfg, c->configs[c->n++], 256);
    }
    lua_pop(L, 1);
    return 0;
}

sj_status gen_variant_configs(gen_state *g, const char *name, const sj_problem *p, char configs[][256], int max,
                             int *n)
{
    *n = 0;
    gen_call c;
    sj_status st = prepare(&c, g, name, p, NULL);
    c.configs = configs;
    c.max = max;
    if (st == SJ_OK) st = gen_run(g, run_variants, &c);
    if (st == SJ_OK) *n = c.n;
    return st;
}

sj_status gen_canonical_config(gen_state *g, const char *name, const sj_problem *p, const char *config,
                               char *out, size_t len)
{
    gen_call c;
    sj_status st = prepare(&c, g, name, p, config);
    if (st == SJ_OK) st = gen_run(g, run_resolve, &c);
    if (st != SJ_OK) return st;
    gen_config_format(&c.cfg, out, len);
    return SJ_OK;
}

sj_status gen_config_valid(gen_state *g, const char *name, const sj_problem *p, const char *config, int *valid,
                           char *reason, size_t reason_len)
{
    gen_call c;
    sj_status st = prepare(&c, g, name, p, config);
    if (st == SJ_OK) st = gen_run(g, run_valid, &c);
    if (st != SJ_OK) return st;
    *valid = c.valid;
    if (reason && reason_len) snprintf(reason, reason_len, "%s", c.reason);
    return SJ_OK;
}

static int run_space(lua_State *L)
{
    gen_call *c = call_of(L);
    gen_space *out = c->space;
    gen_config params;
    template_params(L, c, &params);
    call_template(L, c, "space", NULL, 1);
    if (!lua_istable(L, -1))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: space must be (or return) a table", c->name);
    out->n_params = params.n;
    for (int i = 0; i < params.n; i++) {
        snprintf(out->names[i], sizeof out->names[i], "%s", params.names[i]);
        if (lua_getfield(L, -1, params.names[i]) != LUA_TTABLE)
            sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: space has no list for param '%s'", c->name, params.names[i]);
        lua_Integer n = luaL_len(L, -1);
        if (n < 1 || n > GEN_MAX_VALUES)
            sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: space.%s must list 1..%d values", c->name, params.names[i],
                          GEN_MAX_VALUES);
        for (lua_Integer j = 1; j <= n; j++) {
            lua_geti(L, -1, j);
            char what[64];
            snprintf(what, sizeof what, "space.%s[%lld]", params.names[i], (long long)j);
            out->values[i][j - 1] = template_int(L, c, -1, what, params.names[i]);
            lua_pop(L, 1);
        }
        out->n_values[i] = (int)n;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

sj_status gen_space_of(gen_state *g, const char *name, const sj_problem *p, gen_space *out)
{
    memset(out, 0, sizeof *out);
    gen_call c;
    sj_status st = prepare(&c, g, name, p, NULL);
    c.space = out;
    if (st == SJ_OK) st = gen_run(g, run_space, &c);
    if (st != SJ_OK) memset(out, 0, sizeof *out);
    return st;
}

static void read_dim3(lua_State *L, gen_call *c, const char *field, unsigned out[3])
{
    if (lua_getfield(L, -1, field) != LUA_TTABLE)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: generate() result needs %s = {x, y, z}", c->name, field);
    for (int i = 0; i < 3; i++) {
        int isnum = 1;
        int type = lua_geti(L, -1, i + 1);
        lua_Integer v = type == LUA_TNIL && i > 0 ? 1 : lua_tointegerx(L, -1, &isnum); /* {x} means {x,1,1} */
        if (!isnum || v < 1 || v > 0x7fffffff)
            sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: %s[%d] must be a positive integer", c->name, field, i + 1);
        out[i] = (unsigned)v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* A malloc'ed copy of the string field of the table at the top, or NULL when it is not one. */
static char *dup_field(lua_State *L, const char *field)
{
    char *copy = NULL;
    if (lua_getfield(L, -1, field) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        if (!(copy = malloc(n + 1))) sandbox_raise(L, SJ_ERR_OUT_OF_MEMORY, "generate: out of memory");
        memcpy(copy, s, n + 1);
    }
    lua_pop(L, 1);
    return copy;
}

void sj_generated_free(sj_generated *x)
{
    if (!x) return;
    free(x->source);
    free(x->entry);
    free(x->config);
    free(x->template_name);
    free(x);
}

static int run_generate(lua_State *L)
{
    gen_call *c = call_of(L);
    const char *name = c->name;
    resolve_config(L, c);
    char canon[256];
    gen_config_format(&c->cfg, canon, sizeof canon);
    check_valid(L, c);
    if (!c->valid)
        sandbox_raise(L, SJ_ERR_INVALID_ARGUMENT, "config %s is not valid for this problem: %s", canon, c->reason);
    call_template(L, c, "generate", &c->cfg, 1);
    if (!lua_istable(L, -1)) sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: generate() must return a table", name);
    sj_generated *x = c->out = calloc(1, sizeof *x);
    if (!x || !(x->config = strdup(canon)) || !(x->template_name = strdup(name)))
        sandbox_raise(L, SJ_ERR_OUT_OF_MEMORY, "generate: out of memory");
    x->source = dup_field(L, "source");
    x->entry = dup_field(L, "entry");
    if (!x->source || !x->entry)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: generate() result needs string fields source and entry", name);
    read_dim3(L, c, "grid", x->grid);
    read_dim3(L, c, "block", x->block);
    int type = lua_getfield(L, -1, "shared");
    int isnum = 1;
    lua_Integer shared = type == LUA_TNIL ? 0 : lua_tointegerx(L, -1, &isnum);
    if (!isnum || shared < 0 || shared > 232448)
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: shared must be an integer number of bytes in 0..232448", name);
    x->shared_bytes = (unsigned)shared;
    lua_pop(L, 2);
    if (!strstr(x->source, x->entry))
        sandbox_raise(L, SJ_ERR_TEMPLATE, "templates/%s.lua: entry '%s' does not occur in the source", name, x->entry);
    return 0;
}

sj_status gen_generate(gen_state *g, const char *name, const sj_problem *p, const char *config, sj_generated **out)
{
    *out = NULL;
    gen_call c;
    sj_status st = prepare(&c, g, name, p, config);
    if (st == SJ_OK) st = gen_run(g, run_generate, &c);
    if (st != SJ_OK) {
        sj_generated_free(c.out);
        return st;
    }
    *out = c.out;
    return SJ_OK;
}

static int run_flops(lua_State *L)
{
    gen_call *c = call_of(L);
    push_template(L, c);
    int has = lua_getfield(L, -1, "flops") == LUA_TFUNCTION;
    lua_pop(L, 2);
    if (!has) return 0;
    call_template(L, c, "flops", NULL, 1);
    c->flops = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return 0;
}

double gen_problem_flops(gen_state *g, const char *name, const sj_problem *p)
{
    gen_call c;
    if (prepare(&c, g, name, p, NULL) != SJ_OK || gen_run(g, run_flops, &c) != SJ_OK) return 0;
    return c.flops;
}
