/* lua_sandbox.h: the sandboxed Lua state templates run in (see lua_sandbox.c). The state is
 * reached only through sandbox_run, which runs a C function inside lua_pcall. */
#ifndef SJ_LUA_SANDBOX_H
#define SJ_LUA_SANDBOX_H

#include <lua.h>
#include <stddef.h>

typedef struct sandbox sandbox;

/* Returns the text of template or module `name` ("gemm_dense", "lib/cuda"), or NULL. */
typedef const char *(*sandbox_reader)(void *user, const char *name, size_t *len);

sandbox *sandbox_open(sandbox_reader reader, void *user, char *err, size_t errlen);
void sandbox_close(sandbox *s);
/* Memory cap (bytes), instructions and wall-clock milliseconds per run; 0 keeps a limit. */
void sandbox_set_limits(sandbox *s, size_t memory_bytes, unsigned long long instructions, unsigned wall_ms);

/* Runs fn(L) inside lua_pcall with ud as its one argument (a light userdata) and a fresh CPU
 * budget; the stack is as before afterwards. Returns 0, or -1 with the message in err and in
 * *host_code the code fn gave sandbox_raise (0: the template failed, or a limit was reached). */
int sandbox_run(sandbox *s, lua_CFunction fn, void *ud, int *host_code, char *err, size_t errlen);
/* 1 when the last run hit the memory cap or Lua panicked: templates may hold what filled it,
 * so the owner closes the state and opens another. */
int sandbox_spoiled(const sandbox *s);

/* Inside sandbox_run: */
/* Raises a formatted error of the host's with host_code (nonzero) and no Lua traceback. */
void sandbox_raise(lua_State *L, int host_code, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* lua_pcall with a traceback handler: on error the message (with template file:line) is on
 * the stack. Returns the lua_pcall code. */
int sandbox_pcall(lua_State *L, int nargs, int nresults);
/* Counts steps of work done in C for the template against its budget; raises when spent. */
void sandbox_charge(lua_State *L, unsigned long long steps);
/* Runs templates/<name>.lua in a world of its own and pushes what it returns. */
void sandbox_push_template(lua_State *L, const char *name);

#endif
