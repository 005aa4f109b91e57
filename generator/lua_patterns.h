/* lua_patterns.h: the sandbox's string.find/match/gmatch/gsub, whose matching is charged to the
 * template call's CPU budget (see lua_patterns.c). */
#ifndef SJ_LUA_PATTERNS_H
#define SJ_LUA_PATTERNS_H

#include <lua.h>

/* Sets find, match, gmatch and gsub of the table at index string_table to the bounded ones. */
void patterns_install(lua_State *L, int string_table);

#endif
