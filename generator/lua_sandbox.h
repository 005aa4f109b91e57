/* lua_sandbox.h: the sandboxed Lua state templates run in (see lua_sandbox.c). */
#ifndef SJ_LUA_SANDBOX_H
#define SJ_LUA_SANDBOX_H

#include <lua.h>
#include <stddef.h>

typedef struct sandbox sandbox;

/* Returns the text of template or module `name` ("gemm_dense", "lib/cuda"), or NULL. */
typedef const char *(*sandbox_reader)(void *user, const char *name, size_t *len);

sandbox *sandbox_open(sandbox_reader reader, void *user, char *err, size_t errlen);
void sandbox_close(sandbox *s);
lua_State *sandbox_state(sandbox *s);
/* 0 keeps a limit as it is. */
void sandbox_set_limits(sandbox *s, size_t memory_bytes, unsigned long long instructions);
/* lua_pcall with a traceback handler and a fresh instruction budget; on error the message
 * (with template file:line) is copied to err and popped. Returns the lua_pcall code. */
int sandbox_pcall(sandbox *s, int nargs, int nresults, char *err, size_t errlen);
/* Runs templates/<name>.lua and leaves the table it returns on the stack; -1 on error. */
int sandbox_load_template(sandbox *s, const char *name, char *err, size_t errlen);

#endif
