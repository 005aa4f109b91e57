/* lua_sandbox.c: the Lua state templates run in. Text chunks only, a whitelisted environment
 * (no io, os, debug, dofile/loadfile, binary load, math.random), a counting allocator that caps
 * memory, a CPU budget per call (instructions, pattern-matching steps and wall-clock time) that
 * sticks once spent, `require` restricted to the template set's lib/ modules, and here() for
 * #line directives.
 *
 * Nothing touches the state outside sandbox_run, which runs the caller's C function inside
 * lua_pcall, so a raising metamethod or memory running out at any step is an error and never
 * reaches Lua's panic path; the panic handler is set anyway and jumps back to sandbox_run
 * instead of letting Lua abort the process.
 *
 * Each template runs in a world of its own: fresh copies of the base functions' table and of
 * string/table/math/utf8, and its own set of loaded lib/ modules, so what one template assigns
 * (`_G.require = ...`, `string.format = ...`) no other template sees. */
#include "generator/lua_sandbox.h"
#include "generator/lua_patterns.h"

#include <lauxlib.h>
#include <lualib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SANDBOX_MEMORY_LIMIT ((size_t)256 << 20)
#define SANDBOX_INSTRUCTION_LIMIT 500000000ull /* per call; a template is a few million at most */
#define SANDBOX_WALL_LIMIT_MS 20000u           /* per call; a template takes milliseconds */
#define SANDBOX_HOOK_EVERY 10000

struct sandbox {
    lua_State *L;
    size_t used, limit;
    int exhausted; /* the allocator refused a block since the run began */
    unsigned long long instructions, instruction_limit;
    unsigned wall_limit_ms;
    unsigned long long deadline_ms;
    int tripped;        /* the budget is spent: every hook and charge raises until the run ends */
    char trip_msg[128];
    int host_code;      /* given to sandbox_raise: the error is the host's, not the template's */
    jmp_buf guard;      /* where the panic handler returns to */
    int guarded, panicked;
    char panic_msg[256];
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
    if (nsize > old && s->used + (nsize - old) > s->limit) { /* Lua raises "not enough memory" */
        s->exhausted = 1;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p)
        s->used = s->used - old + nsize;
    else
        s->exhausted = 1;
    return p;
}

static sandbox *sandbox_of(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

static unsigned long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000u + (unsigned long long)t.tv_nsec / 1000000u;
}

static void count_hook(lua_State *L, lua_Debug *ar);

/* From here on the hook fires at every instruction and raises, so an error caught by a
 * template's pcall is raised again at the next instruction of its caller. */
static void trip(lua_State *L, sandbox *s)
{
    s->tripped = 1;
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
}

void sandbox_charge(lua_State *L, unsigned long long steps)
{
    sandbox *s = sandbox_of(L);
    if (!s->tripped) {
        s->instructions += steps;
        if (s->instructions > s->instruction_limit) {
            snprintf(s->trip_msg, sizeof s->trip_msg, "template exceeded the instruction limit (%llu million): endless loop?",
                     s->instruction_limit / 1000000);
            trip(L, s);
        } else if (now_ms() > s->deadline_ms) {
            snprintf(s->trip_msg, sizeof s->trip_msg, "template exceeded the time limit (%u ms): endless loop?",
                     s->wall_limit_ms);
            trip(L, s);
        }
    }
    if (s->tripped) luaL_error(L, "%s", s->trip_msg);
}

/* The string library's pattern functions (lua_patterns.c) charge their match steps here. */
static const patterns_budget pattern_budget = { sandbox_charge };

static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    sandbox_charge(L, SANDBOX_HOOK_EVERY);
}

void sandbox_raise(lua_State *L, int host_code, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lua_pushstring(L, msg);
    sandbox_of(L)->host_code = host_code;
    lua_error(L);
    __builtin_unreachable(); /* lua_error does not return; Lua's headers do not say so */
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

/* xpcall(f, handler, ...) that calls the handler after the error has unwound. Lua calls a
 * message handler where the error was raised; when that is the count hook (the budget is
 * spent), hooks are off there and a looping handler would never be stopped. Once the budget
 * is spent the handler is not called at all: the error goes on up. */
static int l_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2); /* f, handler, true, f, args... */
    if (lua_pcall(L, n - 2, LUA_MULTRET, 0) == LUA_OK) return lua_gettop(L) - 2;
    if (sandbox_of(L)->tripped) return lua_error(L);
    lua_pushvalue(L, 2);
    lua_insert(L, -2);
    lua_pcall(L, 1, 1, 0); /* an error in the handler is what xpcall gives, as in Lua */
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
}

/* setmetatable without finalizers: Lua runs __gc with hooks off, where no limit reaches. */
static int l_setmetatable(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    if (lua_type(L, 2) == LUA_TTABLE && lua_getfield(L, 2, "__gc") != LUA_TNIL)
        return luaL_error(L, "setmetatable: templates may not set __gc (finalizers run where no limit applies)");
    luaL_argexpected(L, lua_isnoneornil(L, 2) || lua_istable(L, 2), 2, "nil or table");
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL) return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* Loads name ("gemm_dense", "lib/cuda") as text with chunk name "@templates/<name>.lua" and
 * an environment of its own that reads through to the world at index `world`; leaves the
 * function on the stack. */
static void load_chunk(lua_State *L, const char *name, int world)
{
    sandbox *s = sandbox_of(L);
    world = lua_absindex(L, world);
    size_t len = 0;
    const char *text = s->reader(s->reader_user, name, &len);
    if (!text) luaL_error(L, "no template or module named '%s'", name);
    char chunkname[300];
    snprintf(chunkname, sizeof chunkname, "@templates/%s.lua", name);
    if (luaL_loadbufferx(L, text, len, chunkname, "t") != LUA_OK) lua_error(L);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, world);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setupvalue(L, -2, 1);
}

/* require "lib.x": only modules of the template set, each loaded once per world. Upvalues:
 * the world, its table of loaded modules. */
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
    if (lua_getfield(L, lua_upvalueindex(2), path) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    load_chunk(L, path, lua_upvalueindex(1));
    lua_call(L, 0, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, lua_upvalueindex(2), path);
    return 1;
}

/* Pushes a shallow copy of the table at idx without the keys in exclude. */
static void push_copy(lua_State *L, int idx, const char *const *exclude)
{
    idx = lua_absindex(L, idx);
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
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
        lua_rawset(L, -4);
    }
}

/* Pushes a new world: a copy of the base in the registry (its library tables copied too),
 * _G pointing at itself, and a require of its own. */
static void push_world(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "sj.sandbox");
    int base = lua_gettop(L);
    lua_newtable(L);
    int world = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, base)) {
        if (lua_type(L, -1) == LUA_TTABLE) {
            push_copy(L, -1, NULL);
            lua_remove(L, -2);
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, world);
    }
    lua_pushvalue(L, world);
    lua_setfield(L, world, "_G");
    lua_pushvalue(L, world);
    lua_newtable(L);
    lua_pushcclosure(L, l_require, 2);
    lua_setfield(L, world, "require");
    lua_remove(L, base);
}

void sandbox_push_template(lua_State *L, const char *name)
{
    push_world(L);
    load_chunk(L, name, -1);
    lua_remove(L, -2);
    lua_call(L, 0, 1);
}

static int setup_state(lua_State *L)
{
    luaL_openlibs(L);
    lua_newtable(L);
    int sb = lua_gettop(L);
    static const char *const globals[] = { "assert", "error", "ipairs", "next", "pairs", "pcall",
        "rawequal", "rawget", "rawlen", "rawset", "select", "getmetatable", "tonumber", "tostring",
        "type", NULL };
    for (const char *const *g = globals; *g; g++) {
        lua_getglobal(L, *g);
        lua_setfield(L, sb, *g);
    }
    static const char *const no_string[] = { "dump", NULL };
    static const char *const no_math[] = { "random", "randomseed", NULL };
    static const struct { const char *name; const char *const *exclude; } libs[] = {
        { "string", no_string }, { "table", NULL }, { "math", no_math }, { "utf8", NULL },
    };
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
        lua_getglobal(L, libs[i].name);
        push_copy(L, -1, libs[i].exclude);
        if (!strcmp(libs[i].name, "string")) patterns_install(L, -1, &pattern_budget);
        lua_setfield(L, sb, libs[i].name);
        lua_pop(L, 1);
    }
    lua_pushcfunction(L, l_safe_load);
    lua_setfield(L, sb, "load");
    lua_pushcfunction(L, l_xpcall);
    lua_setfield(L, sb, "xpcall");
    lua_pushcfunction(L, l_setmetatable);
    lua_setfield(L, sb, "setmetatable");
    lua_pushcfunction(L, l_here);
    lua_setfield(L, sb, "here");
    /* The string metatable's __index is the real string table; point it at the base's copy,
     * which no world can reach to change, so ("x"):dump() is gone and ("x"):find() bounded. */
    lua_getfield(L, sb, "string");
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, "__index");
    /* getmetatable("") must not hand templates the shared metatable to rewrite */
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 3);
    lua_setfield(L, LUA_REGISTRYINDEX, "sj.sandbox");
    return 0;
}

/* Lua calls this for an error outside any lua_pcall and aborts when it returns: jump back to
 * the sandbox_run in progress instead; the state is spoiled from then on. */
static int on_panic(lua_State *L)
{
    sandbox *s = sandbox_of(L);
    const char *msg = lua_tostring(L, -1);
    snprintf(s->panic_msg, sizeof s->panic_msg, "%s", msg ? msg : "(error object is not a string)");
    s->panicked = 1;
    if (s->guarded) longjmp(s->guard, 1);
    return 0; /* unreachable: every use of the state is inside sandbox_run or sandbox_close */
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
    s->wall_limit_ms = SANDBOX_WALL_LIMIT_MS;
    s->reader = reader;
    s->reader_user = user;
    s->L = lua_newstate(counting_alloc, s);
    if (!s->L) {
        snprintf(err, errlen, "lua_newstate failed");
        free(s);
        return NULL;
    }
    lua_atpanic(s->L, on_panic);
    int code;
    char msg[512];
    if (sandbox_run(s, setup_state, NULL, &code, msg, sizeof msg) != 0) {
        snprintf(err, errlen, "setting up the Lua sandbox: %s", msg);
        sandbox_close(s);
        return NULL;
    }
    return s;
}

void sandbox_close(sandbox *s)
{
    if (!s) return;
    /* Finalizers run here, inside Lua's own protection; a panic (which should not happen)
     * leaves the state behind rather than the process. */
    if (s->L && !s->panicked) {
        if (!setjmp(s->guard)) {
            s->guarded = 1;
            lua_close(s->L);
        }
    }
    s->guarded = 0;
    free(s);
}

void sandbox_set_limits(sandbox *s, size_t memory_bytes, unsigned long long instructions, unsigned wall_ms)
{
    if (memory_bytes) s->limit = memory_bytes;
    if (instructions) s->instruction_limit = instructions;
    if (wall_ms) s->wall_limit_ms = wall_ms;
}

int sandbox_spoiled(const sandbox *s) { return s->exhausted || s->panicked; }

static int traceback_handler(lua_State *L)
{
    if (sandbox_of(L)->host_code) return 1; /* the host's own message, no Lua stack to show */
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_typename(L, 1);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int sandbox_pcall(lua_State *L, int nargs, int nresults)
{
    sandbox *s = sandbox_of(L);
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback_handler);
    lua_insert(L, base);
    s->host_code = 0;
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    if (rc == LUA_ERRMEM) {
        lua_pop(L, 1);
        lua_pushfstring(L, "not enough memory: a template may use %d MiB", (int)(s->limit >> 20));
    }
    return rc;
}

int sandbox_run(sandbox *s, lua_CFunction fn, void *ud, int *host_code, char *err, size_t errlen)
{
    lua_State *L = s->L;
    *host_code = 0;
    if (s->panicked) {
        snprintf(err, errlen, "the Lua state failed outside a protected call (%s) and cannot be used", s->panic_msg);
        return -1;
    }
    s->host_code = 0;
    s->exhausted = 0;
    s->instructions = 0;
    s->tripped = 0;
    s->deadline_ms = now_ms() + s->wall_limit_ms;
    lua_sethook(L, count_hook, LUA_MASKCOUNT, SANDBOX_HOOK_EVERY);
    int top = lua_gettop(L);
    if (setjmp(s->guard)) {
        s->guarded = 0;
        snprintf(err, errlen, "the Lua state failed outside a protected call: %s", s->panic_msg);
        return -1;
    }
    s->guarded = 1;
    lua_pushcfunction(L, traceback_handler);
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, ud);
    int rc = lua_pcall(L, 1, 0, top + 1);
    s->guarded = 0;
    if (rc != LUA_OK) {
        *host_code = s->host_code;
        const char *msg = lua_tostring(L, -1);
        if (rc == LUA_ERRMEM || (rc == LUA_ERRERR && s->exhausted))
            snprintf(err, errlen, "not enough memory: a template may use %d MiB", (int)(s->limit >> 20));
        else
            snprintf(err, errlen, "%s", msg ? msg : "(error object is not a string)");
    }
    lua_settop(L, top);
    return rc == LUA_OK ? 0 : -1;
}
