/* cmd_run.c: `sparsejit run [--timeout S] [--device N] script.lua [args]`: runs a user's Lua script (sweeps)
 * in a normal Lua state with the standard libraries and the `sparsejit` module
 * (cli/lua_sparsejit.c), both as `require "sparsejit"` and as the global `sparsejit`. The script
 * is the user's own program, so it gets io, os and the rest by design (templates are what the
 * sandbox is for); what it loads, though, must be source text: load, loadfile and dofile refuse
 * binary chunks, which Lua does not verify and which crash it when corrupt. The script's
 * arguments are in `arg` and `...`. Errors, syntax errors included, are reported with the
 * script's file:line. */
#include "cli/commands.h"
#include "cli/cli_context.h"
#include "cli/lua_sparsejit.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUN_MAX_TIMEOUT_S 604800.0 /* a week */

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* load(chunk [, name [, mode [, env]]]) and loadfile(file [, mode [, env]]) with mode forced to
 * text. Upvalues: the standard function, the index of its mode argument. */
static int load_text_only(lua_State *L)
{
    int mode_arg = (int)lua_tointeger(L, lua_upvalueindex(2));
    const char *mode = luaL_optstring(L, mode_arg, "t");
    if (strchr(mode, 'b'))
        return luaL_error(L, "binary chunks are refused (mode '%s'): sparsejit run loads Lua source text only", mode);
    if (lua_gettop(L) < mode_arg) lua_settop(L, mode_arg);
    lua_pushliteral(L, "t");
    lua_replace(L, mode_arg);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int dofile_text_only(lua_State *L)
{
    const char *file = luaL_optstring(L, 1, NULL);
    lua_settop(L, 1);
    if (luaL_loadfilex(L, file, "t") != LUA_OK) return lua_error(L);
    lua_call(L, 0, LUA_MULTRET);
    return lua_gettop(L) - 1;
}

static void wrap_loader(lua_State *L, const char *name, int mode_arg)
{
    lua_getglobal(L, name);
    lua_pushinteger(L, mode_arg);
    lua_pushcclosure(L, load_text_only, 2);
    lua_setglobal(L, name);
}

/* --timeout: checked every few thousand instructions; once passed the hook raises at every
 * instruction, so a pcall in the script cannot keep it running. A library call in progress
 * (a tune, a bench) finishes first. */
static double deadline;
static double timeout_s;
static int device; /* --device N, -1 when not given */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void timeout_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    if (now_s() < deadline) return;
    lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 1);
    luaL_error(L, "the script ran past --timeout %f s", timeout_s);
}

/* Everything that touches the state runs here, inside lua_pcall: an allocation failure while
 * setting up is an error, not Lua's panic. Arguments: argc, argv as light userdata. */
static int run_script(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    luaL_openlibs(L);
    wrap_loader(L, "load", 3);
    wrap_loader(L, "loadfile", 2);
    lua_pushcfunction(L, dofile_text_only);
    lua_setglobal(L, "dofile");
    luaL_requiref(L, "sparsejit", luaopen_sparsejit, 1);
    lua_pop(L, 1);
    lua_sparsejit_set_device(L, device);
    lua_createtable(L, argc - 1, 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");
    if (luaL_loadfilex(L, argv[0], "t") != LUA_OK) return lua_error(L);
    for (int i = 1; i < argc; i++) lua_pushstring(L, argv[i]);
    if (timeout_s > 0) {
        deadline = now_s() + timeout_s;
        lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 10000);
    }
    lua_call(L, argc - 1, 0);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sparsejit run [--timeout SECONDS] [--device N] SCRIPT.lua [ARGS...]\n\n"
               "Runs a Lua 5.4 script with the full standard library (io, os, ...: a script is your own\n"
               "program, unlike a template, which runs sandboxed) and the sparsejit module: configure, info,\n"
               "stats, tune, bench, vnm_layout, write_csv and reference; docs/lua.md (or sparsejit.reference())\n"
               "describes each, its fields, defaults and errors. Option tables refuse fields they do not take.\n"
               "load, loadfile and dofile accept source text only, never binary chunks.\n"
               "  --timeout S        stop the script with an error once it has run S seconds (0 < S <= %g);\n"
               "                     checked between Lua instructions: a tune or bench in progress finishes first\n"
               CLI_DEVICE_HELP
               "                     (the module's context; sparsejit.configure{device=} overrides it)\n"
               "ARGS are in the table `arg` (arg[0] is the script) and in `...`.\n"
               "Examples: examples/vnm_sparsity_sweep.lua, examples/ffn_shape_sweep.lua\n",
            RUN_MAX_TIMEOUT_S);
}

int cmd_run(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    int first = 1;
    timeout_s = 0;
    device = -1;
    /* the options come before the script; what follows it is the script's */
    while (first < argc && argv[first][0] == '-' && argv[first][1] == '-') {
        const char *a = argv[first], *val = first + 1 < argc ? argv[first + 1] : NULL;
        if (!strcmp(a, "--timeout")) {
            char *end = NULL;
            errno = 0;
            double v = val ? strtod(val, &end) : NAN;
            if (!val || end == val || *end || errno || !(v > 0 && v <= RUN_MAX_TIMEOUT_S)) {
                fprintf(stderr, "sparsejit run: --timeout takes seconds, a number > 0 and <= %g; got '%s'\n",
                        RUN_MAX_TIMEOUT_S, val ? val : "");
                return 2;
            }
            timeout_s = v;
        } else if (!strcmp(a, "--device")) {
            if (!val) {
                fprintf(stderr, "sparsejit run: --device needs a GPU's number, 0..%d\n", CLI_MAX_DEVICE);
                return 2;
            }
            if (!cli_parse_device("run", val, &device)) return 2;
        } else {
            fprintf(stderr, "sparsejit run: unknown option '%s' (try --help)\n", a);
            return 2;
        }
        first += 2;
    }
    if (argc <= first) {
        usage(stderr);
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "sparsejit run: cannot create a Lua state (out of memory)\n");
        return 1;
    }
    int rc = 0;
    lua_pushcfunction(L, traceback);
    lua_pushcfunction(L, run_script);
    lua_pushinteger(L, argc - first);
    lua_pushlightuserdata(L, argv + first);
    if (lua_pcall(L, 2, 0, 1) != LUA_OK) {
        fprintf(stderr, "sparsejit run: %s\n", lua_tostring(L, -1));
        rc = 1;
    }
    lua_close(L); /* also destroys the module's context */
    return rc;
}
