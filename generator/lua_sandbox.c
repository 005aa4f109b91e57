/* lua_sandbox.c: the Lua state templates run in. Text chunks only, a whitelisted environment
 * (no io, os, debug, dofile/loadfile, binary load, math.random), a counting allocator that caps
 * memory, a count hook that caps instructions per call, `require` restricted to the template
 * set's lib/ modules, and here() for #line directives. */
#include "generator/lua_sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SANDBOX_MEMORY_LIMIT ((size_t)256 << 20)
#define SANDBOX_INSTRUCTION_LIMIT 500000000ull /* per call; a template is a few million at most */
#define SANDBOX_HOOK_EVERY 10000

struct sandbox {
    lua_State *L;
    size_t used, limit;
    unsigned long long instructions, instruction_limit;
    sandbox_reader reader;
    void *reader_user;
};

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    sandbox *s = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        s->used -= old;
        return NULL;
    }
    if (nsize > old && s->used + (nsize - old) > s->limit) return NULL; /* Lua raises "not enough memory" */
    void *p = realloc(ptr, nsize);
    if (p) s->used = s->used - old + nsize;
    return p;
}

static sandbox *sandbox_of(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    sandbox *s = sandbox_of(L);
    s->instructions += SANDBOX_HOOK_EVERY;
    if (s->instructions > s->instruction_limit)
        luaL_error(L, "template exceeded the instruction limit (%d million): endless loop?", (int)(s->instruction_limit / 1000000));
}

/* here(): {file = "templates/x.lua", line = N} of the caller. */
static int l_here(lua_State *L)
{
    lua_Debug ar;
    if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "Sl", &ar)) return luaL_error(L, "here(): no caller");
    lua_createtable(L, 0, 2);
    lua_pushstring(L, ar.source[0] == '@' ? ar.source + 1 : ar.short_src);
    lua_setfield(L, -2, "file");
    lua_pushinteger(L, ar.currentline);
    lua_setfield(L, -2, "line");
    return 1;
}

/* load(chunk, name, mode, env): text only, and the environment must be given, so templates
 * cannot reach the real globals through it. */
static int l_safe_load(lua_State *L)
{
    size_t len;
    const char *chunk = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "=load");
    luaL_checktype(L, 4, LUA_TTABLE);
    if (luaL_loadbufferx(L, chunk, len, name, "t") != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    lua_pushvalue(L, 4);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    return 1;
}

/* Fresh environment for one chunk: its own globals, reading through to the sandbox base. */
static void push_chunk_env(lua_State *L)
{
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "sj.sandbox");
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
}

/* Loads name ("gemm_dense", "lib/cuda") as text with chunk name "@templates/<name>.lua" and
 * its own environment; leaves the function on the stack. */
static int load_template_chunk(lua_State *L, const char *name)
{
    sandbox *s = sandbox_of(L);
    size_t len = 0;
    const char *text = s->reader(s->reader_user, name, &len);
    if (!text) return luaL_error(L, "no template or module named '%s'", name);
    char chunkname[300];
    snprintf(chunkname, sizeof chunkname, "@templates/%s.lua", name);
    if (luaL_loadbufferx(L, text, len, chunkname, "t") != LUA_OK) return lua_error(L);
    push_chunk_env(L);
    lua_setupvalue(L, -2, 1);
    return 1;
}

static int l_load_template(lua_State *L) { return load_template_chunk(L, luaL_checkstring(L, 1)); }

/* require "lib.x": only modules of the template set, each loaded once per state. */
static int l_require(lua_State *L)
{
    const char *mod = luaL_checkstring(L, 1);
    char path[128];
    size_t n = strlen(mod);
    if (n == 0 || n >= sizeof path) return luaL_error(L, "require: bad module name '%s'", mod);
    for (size_t i = 0; i < n; i++) {
        char c = mod[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return luaL_error(L, "require: module name '%s' may hold only a-z, 0-9, '_' and '.'", mod);
        path[i] = c == '.' ? '/' : c;
    }
    path[n] = 0;
    if (strncmp(path, "lib/", 4) != 0) return luaL_error(L, "require: only lib.* modules exist, not '%s'", mod);
    lua_getfield(L, LUA_REGISTRYINDEX, "sj.loaded");
    if (lua_getfield(L, -1, path) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    load_template_chunk(L, path);
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, path);
    return 1;
}

/* Copies the named fields of library table `lib` (a global) into a new table at t[key]. */
static void copy_library(lua_State *L, int sandbox_idx, const char *lib, const char *const *exclude)
{
    lua_getglobal(L, lib);
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        int skip = 0;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (const char *const *e = exclude; e && *e; e++)
                if (!strcmp(lua_tostring(L, -2), *e)) skip = 1;
        if (skip) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -4);
    }
    lua_setfield(L, sandbox_idx, lib);
    lua_pop(L, 1);
}

static int setup_state(lua_State *L)
{
    luaL_openlibs(L);
    lua_newtable(L);
    int sb = lua_gettop(L);
    static const char *const globals[] = { "assert", "error", "ipairs", "next", "pairs", "pcall",
        "rawequal", "rawget", "rawlen", "rawset", "select", "setmetatable", "getmetatable",
        "tonumber", "tostring", "type", "xpcall", NULL };
    for (const char *const *g = globals; *g; g++) {
        lua_getglobal(L, *g);
        lua_setfield(L, sb, *g);
    }
    static const char *const no_string[] = { "dump", NULL };
    static const char *const no_math[] = { "random", "randomseed", NULL };
    copy_library(L, sb, "string", no_string);
    copy_library(L, sb, "table", NULL);
    copy_library(L, sb, "math", no_math);
    copy_library(L, sb, "utf8", NULL);
    lua_pushcfunction(L, l_safe_load);
    lua_setfield(L, sb, "load");
    lua_pushcfunction(L, l_require);
    lua_setfield(L, sb, "require");
    lua_pushcfunction(L, l_here);
    lua_setfield(L, sb, "here");
    lua_pushvalue(L, sb);
    lua_setfield(L, sb, "_G");
    lua_setfield(L, LUA_REGISTRYINDEX, "sj.sandbox");
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "sj.loaded");
    /* The string metatable's __index is the real string table; point it at the sandbox copy so
     * ("x"):dump() is not reachable either. */
    lua_getfield(L, LUA_REGISTRYINDEX, "sj.sandbox");
    lua_getfield(L, -1, "string");
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, "__index");
    /* getmetatable("") must not hand templates the shared metatable to rewrite */
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 4);
    return 0;
}

sandbox *sandbox_open(sandbox_reader reader, void *user, char *err, size_t errlen)
{
    sandbox *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory creating the Lua sandbox");
        return NULL;
    }
    s->limit = SANDBOX_MEMORY_LIMIT;
    s->instruction_limit = SANDBOX_INSTRUCTION_LIMIT;
    s->reader = reader;
    s->reader_user = user;
    s->L = lua_newstate(counting_alloc, s);
    if (!s->L) {
        snprintf(err, errlen, "lua_newstate failed");
        free(s);
        return NULL;
    }
    lua_pushcfunction(s->L, setup_state);
    if (lua_pcall(s->L, 0, 0, 0) != LUA_OK) {
        snprintf(err, errlen, "setting up the Lua sandbox: %s", lua_tostring(s->L, -1));
        sandbox_close(s);
        return NULL;
    }
    lua_sethook(s->L, count_hook, LUA_MASKCOUNT, SANDBOX_HOOK_EVERY);
    return s;
}

void sandbox_close(sandbox *s)
{
    if (!s) return;
    if (s->L) lua_close(s->L);
    free(s);
}

lua_State *sandbox_state(sandbox *s) { return s->L; }

void sandbox_set_limits(sandbox *s, size_t memory_bytes, unsigned long long instructions)
{
    if (memory_bytes) s->limit = memory_bytes;
    if (instructions) s->instruction_limit = instructions;
}

static int traceback_handler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_typename(L, 1);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int sandbox_pcall(sandbox *s, int nargs, int nresults, char *err, size_t errlen)
{
    lua_State *L = s->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback_handler);
    lua_insert(L, base);
    s->instructions = 0;
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    if (rc != LUA_OK) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object is not a string)");
        lua_pop(L, 1);
    }
    return rc;
}

int sandbox_load_template(sandbox *s, const char *name, char *err, size_t errlen)
{
    lua_State *L = s->L;
    lua_pushcfunction(L, l_load_template);
    lua_pushstring(L, name);
    if (sandbox_pcall(s, 1, 1, err, errlen) != LUA_OK) return -1;
    if (sandbox_pcall(s, 0, 1, err, errlen) != LUA_OK) return -1;
    if (!lua_istable(L, -1)) {
        snprintf(err, errlen, "templates/%s.lua must return a table, it returned %s", name, luaL_typename(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    return 0;
}
