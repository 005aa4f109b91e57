/* cmd_run.c: `sparsejit run script.lua [args]`: runs a user's Lua script (sweeps) in a normal
 * Lua state with the standard libraries and the `sparsejit` module (cli/lua_sparsejit.c), both as
 * `require "sparsejit"` and as the global `sparsejit`. The script's arguments are in `arg` and
 * `...`. Errors, syntax errors included, are reported with the script's file:line. */
#include "cli/commands.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

/* cli/lua_sparsejit.c */
int luaopen_sparsejit(lua_State *L);

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int cmd_run(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: sparsejit run SCRIPT.lua [ARGS...]\n\n"
                   "Runs a Lua 5.4 script with the standard libraries and the sparsejit module:\n"
                   "  sparsejit.info()                    device, arch, driver, NVRTC, cache path\n"
                   "  sparsejit.tune{op=, dtype=, shape={m,n,k}, vnm=\"64:2:8\", strategy=, budget_trials=, ...}\n"
                   "  sparsejit.bench{op=, dtype=, shape={m,n,k}, rounds=, seed=, cublas=, ...}\n"
                   "                                      {median_us=, tflops=, rel_error=, cublas_us=, speedup=};\n"
                   "                                      op: as `sparsejit bench --op` (twell-ffn-block too)\n"
                   "  sparsejit.vnm_layout{vnm=, rows=, cols=, dtype=}  compressed sizes of a V:N:M matrix\n"
                   "  sparsejit.write_csv(path, rows [, columns])       rows: a list of tables\n"
                   "  sparsejit.configure{cache=, template_dir=}       before the first call\n"
                   "  sparsejit.stats()                   counters: compiles, cache hits, launches\n"
                   "ARGS are in the table `arg` (arg[0] is the script) and in `...`.\n"
                   "Examples: examples/vnm_sparsity_sweep.lua, examples/ffn_shape_sweep.lua\n");
        return argc < 2 ? 2 : 0;
    }
    const char *script = argv[1];
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "sparsejit run: cannot create a Lua state (out of memory)\n");
        return 1;
    }
    luaL_openlibs(L);
    luaL_requiref(L, "sparsejit", luaopen_sparsejit, 1);
    lua_pop(L, 1);
    lua_createtable(L, argc - 2, 1);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");

    int rc = 0;
    lua_pushcfunction(L, traceback);
    int handler = lua_gettop(L);
    if (luaL_loadfilex(L, script, "t") != LUA_OK) {
        fprintf(stderr, "sparsejit run: %s\n", lua_tostring(L, -1));
        rc = 1;
    } else {
        for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
        if (lua_pcall(L, argc - 2, 0, handler) != LUA_OK) {
            fprintf(stderr, "sparsejit run: %s\n", lua_tostring(L, -1));
            rc = 1;
        }
    }
    lua_close(L); /* also destroys the module's context */
    return rc;
}
