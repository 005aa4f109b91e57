/* lua_patterns.h: the sandbox's string.find/match/gmatch/gsub, whose matching is charged to the
 * template call's CPU budget (see lua_patterns.c). */
#ifndef SJ_LUA_PATTERNS_H
#define SJ_LUA_PATTERNS_H

#include <lua.h>

/* Where matching charges its steps: charge raises (a Lua error) once the caller's budget is
 * spent. A struct, not a bare function pointer, so it can sit in the registry as light userdata. */
typedef struct patterns_budget {
    void (*charge)(lua_State *L, unsigned long long steps);
} patterns_budget;

/* Sets find, match, gmatch and gsub of the table at index string_table to the bounded ones,
 * which charge budget (kept for the life of the state: a static object). */
void patterns_install(lua_State *L, int string_table, const patterns_budget *budget);

#endif
