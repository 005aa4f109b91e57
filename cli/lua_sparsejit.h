/* lua_sparsejit.h: the `sparsejit` Lua module of `sparsejit run` (cli/lua_sparsejit.c). */
#ifndef SJ_CLI_LUA_SPARSEJIT_H
#define SJ_CLI_LUA_SPARSEJIT_H

#include <lua.h>

/* Opens the module: its table on the stack; one context per Lua state, created on first use. */
int luaopen_sparsejit(lua_State *L);
/* The GPU the module's context will use (run --device N; sparsejit.configure{device=} overrides
 * it); before the first call that makes the context. Call after luaopen_sparsejit. */
void lua_sparsejit_set_device(lua_State *L, int device);

#endif
