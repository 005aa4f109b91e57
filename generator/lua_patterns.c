/* lua_patterns.c: string.find, match, gmatch and gsub for the template sandbox, with Lua 5.4's
 * pattern language, written for it so that matching is charged to the sandbox's CPU budget.
 * The stock functions backtrack in C where no count hook reaches them: a pattern like
 * ("a"):rep(30) .. "b" against (".-"):rep(30) runs for minutes. Here every match step is
 * counted and handed to the budget the sandbox installed with the functions (patterns_budget),
 * which raises once the instruction or wall-clock limit of the template call is spent; the
 * sandbox passes it down, so this file needs nothing of the sandbox's. Recursion depth is bounded as in Lua ("pattern too complex"). */
#include "generator/lua_patterns.h"

#include <ctype.h>
#include <lauxlib.h>
#include <string.h>

#define PATTERN_MAX_CAPTURES 32
#define PATTERN_MAX_DEPTH 200
#define PATTERN_CHARGE_EVERY 4096 /* steps between calls to the budget */
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)
#define SPECIALS "^$*+?.([%-"

typedef struct matcher {
    lua_State *L;
    const patterns_budget *budget;
    const char *src, *src_end, *pat_end;
    int depth, level;
    unsigned steps;
    struct { const char *init; ptrdiff_t len; } capture[PATTERN_MAX_CAPTURES];
} matcher;

static void step(matcher *m, unsigned n)
{
    m->steps += n;
    if (m->steps >= PATTERN_CHARGE_EVERY) {
        m->budget->charge(m->L, m->steps);
        m->steps = 0;
    }
}

static void reset(matcher *m)
{
    m->level = 0;
    m->depth = PATTERN_MAX_DEPTH;
}

/* The registry key of the budget patterns_install was given. */
static const char budget_key = 0;

static void start(matcher *m, lua_State *L, const char *s, size_t ls, const char *p, size_t lp)
{
    m->L = L;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    m->budget = lua_touserdata(L, -1);
    lua_pop(L, 1);
    m->src = s;
    m->src_end = s + ls;
    m->pat_end = p + lp;
    m->steps = 0;
    reset(m);
}

/* The end of the single-character class at p ("x", "%d", "[a-z]"). */
static const char *class_end(matcher *m, const char *p)
{
    char c = *p++;
    if (c == '%') {
        if (p == m->pat_end) luaL_error(m->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    if (c == '[') {
        if (*p == '^') p++;
        do { /* the first character after [ or [^ is a member even when it is ] */
            if (p == m->pat_end) luaL_error(m->L, "malformed pattern (missing ']')");
            if (*p++ == '%' && p < m->pat_end) p++;
        } while (*p != ']');
        return p + 1;
    }
    return p;
}

static int class_match(int c, int cl)
{
    int r;
    switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    case 'z': r = c == 0; break; /* deprecated, but the system's Lua (5.3 compatibility) has it */
    default: return cl == c;
    }
    r = r != 0;
    return isupper(cl) ? !r : r;
}

/* p at '[', close at its ']'. */
static int set_match(int c, const char *p, const char *close)
{
    int member = 1;
    if (p[1] == '^') {
        member = 0;
        p++;
    }
    while (++p < close) {
        if (*p == '%') {
            p++;
            if (class_match(c, (unsigned char)*p)) return member;
        } else if (p[1] == '-' && p + 2 < close) {
            p += 2;
            if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p) return member;
        } else if ((unsigned char)*p == c) {
            return member;
        }
    }
    return !member;
}

static int single_match(matcher *m, const char *s, const char *p, const char *ep)
{
    if (s >= m->src_end) return 0;
    int c = (unsigned char)*s;
    switch (*p) {
    case '.': return 1;
    case '%': return class_match(c, (unsigned char)p[1]);
    case '[': return set_match(c, p, ep - 1);
    default: return (unsigned char)*p == c;
    }
}

static const char *match(matcher *m, const char *s, const char *p);

static const char *balanced(matcher *m, const char *s, const char *p)
{
    if (p >= m->pat_end - 1) luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
    if (s >= m->src_end || *s != *p) return NULL;
    char open = p[0], close = p[1];
    int depth = 1;
    const char *from = s;
    while (++s < m->src_end) {
        if (*s == close) {
            if (--depth == 0) {
                step(m, (unsigned)(s - from));
                return s + 1;
            }
        } else if (*s == open) {
            depth++;
        }
    }
    step(m, (unsigned)(s - from));
    return NULL;
}

static const char *greedy(matcher *m, const char *s, const char *p, const char *ep)
{
    ptrdiff_t i = 0;
    while (single_match(m, s + i, p, ep)) i++;
    step(m, (unsigned)i);
    for (; i >= 0; i--) { /* the longest run first, giving back one at a time */
        const char *r = match(m, s + i, ep + 1);
        if (r) return r;
    }
    return NULL;
}

static const char *lazy(matcher *m, const char *s, const char *p, const char *ep)
{
    for (;;) {
        const char *r = match(m, s, ep + 1);
        if (r) return r;
        if (!single_match(m, s, p, ep)) return NULL;
        s++;
    }
}

static const char *open_capture(matcher *m, const char *s, const char *p, ptrdiff_t what)
{
    if (m->level >= PATTERN_MAX_CAPTURES) luaL_error(m->L, "too many captures");
    m->capture[m->level].init = s;
    m->capture[m->level].len = what;
    m->level++;
    const char *r = match(m, s, p);
    if (!r) m->level--;
    return r;
}

static const char *close_capture(matcher *m, const char *s, const char *p)
{
    int l = m->level - 1;
    while (l >= 0 && m->capture[l].len != CAP_UNFINISHED) l--;
    if (l < 0) luaL_error(m->L, "invalid pattern capture");
    m->capture[l].len = s - m->capture[l].init;
    const char *r = match(m, s, p);
    if (!r) m->capture[l].len = CAP_UNFINISHED;
    return r;
}

static const char *back_reference(matcher *m, const char *s, int digit)
{
    int l = digit - '1';
    if (l < 0 || l >= m->level || m->capture[l].len == CAP_UNFINISHED)
        luaL_error(m->L, "invalid capture index %%%d", l + 1);
    ptrdiff_t len = m->capture[l].len;
    if (len < 0) return NULL; /* a position capture holds no text */
    step(m, (unsigned)len);
    if (m->src_end - s >= len && memcmp(m->capture[l].init, s, (size_t)len) == 0) return s + len;
    return NULL;
}

/* The end of the match of pattern p at s, or NULL. */
static const char *match(matcher *m, const char *s, const char *p)
{
    if (m->depth-- == 0) luaL_error(m->L, "pattern too complex");
    for (;;) {
        step(m, 1);
        if (p == m->pat_end) break;
        if (*p == '(') {
            s = p[1] == ')' ? open_capture(m, s, p + 2, CAP_POSITION) : open_capture(m, s, p + 1, CAP_UNFINISHED);
            break;
        }
        if (*p == ')') {
            s = close_capture(m, s, p + 1);
            break;
        }
        if (*p == '$' && p + 1 == m->pat_end) {
            s = s == m->src_end ? s : NULL;
            break;
        }
        if (*p == '%' && p[1] == 'b') {
            if (!(s = balanced(m, s, p + 2))) break;
            p += 4;
            continue;
        }
        if (*p == '%' && p[1] == 'f') {
            p += 2;
            if (*p != '[') luaL_error(m->L, "missing '[' after '%%f' in pattern");
            const char *ep = class_end(m, p);
            int prev = s == m->src ? 0 : (unsigned char)s[-1];
            int cur = s < m->src_end ? (unsigned char)*s : 0;
            if (set_match(prev, p, ep - 1) || !set_match(cur, p, ep - 1)) {
                s = NULL;
                break;
            }
            p = ep;
            continue;
        }
        if (*p == '%' && isdigit((unsigned char)p[1])) {
            if (!(s = back_reference(m, s, p[1]))) break;
            p += 2;
            continue;
        }
        const char *ep = class_end(m, p);
        if (!single_match(m, s, p, ep)) {
            if (*ep == '*' || *ep == '?' || *ep == '-') { /* zero repetitions are fine */
                p = ep + 1;
                continue;
            }
            s = NULL;
            break;
        }
        if (*ep == '?') {
            const char *r = match(m, s + 1, ep + 1);
            if (r) {
                s = r;
                break;
            }
            p = ep + 1;
            continue;
        }
        if (*ep == '+') {
            s = greedy(m, s + 1, p, ep);
            break;
        }
        if (*ep == '*') {
            s = greedy(m, s, p, ep);
            break;
        }
        if (*ep == '-') {
            s = lazy(m, s, p, ep);
            break;
        }
        s++;
        p = ep;
    }
    m->depth++;
    return s;
}

/* Pushes capture i of a match s..e (the whole match when the pattern has none). */
static void push_capture(matcher *m, int i, const char *s, const char *e)
{
    if (i >= m->level) {
        if (i != 0) luaL_error(m->L, "invalid capture index %%%d", i + 1);
        lua_pushlstring(m->L, s, (size_t)(e - s));
        return;
    }
    ptrdiff_t len = m->capture[i].len;
    if (len == CAP_UNFINISHED) luaL_error(m->L, "unfinished capture");
    if (len == CAP_POSITION)
        lua_pushinteger(m->L, (lua_Integer)(m->capture[i].init - m->src) + 1);
    else
        lua_pushlstring(m->L, m->capture[i].init, (size_t)len);
}

static int push_captures(matcher *m, const char *s, const char *e)
{
    int n = m->level == 0 && s ? 1 : m->level;
    luaL_checkstack(m->L, n, "too many captures");
    for (int i = 0; i < n; i++) push_capture(m, i, s, e);
    return n;
}

/* A start position argument: 1-based, negative from the end, clamped at 1. */
static size_t start_position(lua_State *L, int arg, size_t len)
{
    lua_Integer pos = luaL_optinteger(L, arg, 1);
    if (pos > 0) return (size_t)pos;
    if (pos == 0 || pos < -(lua_Integer)len) return 1;
    return len + (size_t)pos + 1;
}

static int has_specials(const char *p, size_t lp)
{
    for (size_t i = 0; i < lp; i++)
        if (p[i] && strchr(SPECIALS, p[i])) return 1;
    return 0;
}

static const char *find_plain(matcher *m, const char *s, size_t ls, const char *p, size_t lp)
{
    if (lp == 0) return s;
    for (const char *end = s + ls; (size_t)(end - s) >= lp; s++) {
        step(m, 1);
        if (*s == *p && memcmp(s, p, lp) == 0) return s;
    }
    return NULL;
}

static int find_or_match(lua_State *L, int find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = start_position(L, 3, ls);
    if (init > ls + 1) {
        luaL_pushfail(L);
        return 1;
    }
    matcher m;
    start(&m, L, s, ls, p, lp);
    if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
        const char *at = find_plain(&m, s + init - 1, ls - init + 1, p, lp);
        if (at) {
            lua_pushinteger(L, (lua_Integer)(at - s) + 1);
            lua_pushinteger(L, (lua_Integer)(at - s + (ptrdiff_t)lp));
            return 2;
        }
        luaL_pushfail(L);
        return 1;
    }
    int anchored = *p == '^';
    if (anchored) {
        p++;
        lp--;
    }
    const char *s1 = s + init - 1;
    do {
        reset(&m);
        const char *e = match(&m, s1, p);
        if (e) {
            if (!find) return push_captures(&m, s1, e);
            lua_pushinteger(L, (lua_Integer)(s1 - s) + 1);
            lua_pushinteger(L, (lua_Integer)(e - s));
            return push_captures(&m, NULL, NULL) + 2;
        }
    } while (s1++ < m.src_end && !anchored);
    luaL_pushfail(L);
    return 1;
}

static int l_find(lua_State *L) { return find_or_match(L, 1); }
static int l_match(lua_State *L) { return find_or_match(L, 0); }

/* gmatch's iterator: upvalues subject, pattern, next position (0-based), end of the last
 * match (-1: none), so an empty match right after a match is skipped as in Lua 5.4. */
static int gmatch_next(lua_State *L)
{
    size_t ls, lp;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
    const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
    lua_Integer pos = lua_tointeger(L, lua_upvalueindex(3));
    lua_Integer last = lua_tointeger(L, lua_upvalueindex(4));
    matcher m;
    start(&m, L, s, ls, p, lp);
    for (const char *src = s + pos; src <= m.src_end; src++) {
        reset(&m);
        const char *e = match(&m, src, p);
        if (e && e - s != last) {
            lua_pushinteger(L, e - s);
            lua_copy(L, -1, lua_upvalueindex(3));
            lua_replace(L, lua_upvalueindex(4));
            return push_captures(&m, src, e);
        }
    }
    return 0;
}

static int l_gmatch(lua_State *L)
{
    size_t ls;
    luaL_checklstring(L, 1, &ls);
    luaL_checkstring(L, 2);
    size_t init = start_position(L, 3, ls);
    if (init > ls + 1) init = ls + 1;
    lua_settop(L, 2);
    lua_pushinteger(L, (lua_Integer)init - 1);
    lua_pushinteger(L, -1);
    lua_pushcclosure(L, gmatch_next, 4);
    return 1;
}

/* Appends a replacement string with %0..%9 and %% to b. */
static void add_template(matcher *m, luaL_Buffer *b, const char *s, const char *e, int repl)
{
    size_t l;
    const char *r = lua_tolstring(m->L, repl, &l);
    const char *end = r + l;
    while (r < end) {
        const char *pct = memchr(r, '%', (size_t)(end - r));
        if (!pct) {
            luaL_addlstring(b, r, (size_t)(end - r));
            break;
        }
        luaL_addlstring(b, r, (size_t)(pct - r));
        r = pct + 1;
        if (r < end && *r == '%') {
            luaL_addchar(b, '%');
        } else if (r < end && isdigit((unsigned char)*r)) {
            if (*r == '0')
                lua_pushlstring(m->L, s, (size_t)(e - s));
            else
                push_capture(m, *r - '1', s, e);
            luaL_tolstring(m->L, -1, NULL);
            lua_remove(m->L, -2);
            luaL_addvalue(b);
        } else {
            luaL_error(m->L, "invalid use of '%%' in replacement string");
        }
        r++;
    }
}

/* Appends the replacement of match s..e; returns 0 when the match stays as it was. */
static int add_replacement(matcher *m, luaL_Buffer *b, const char *s, const char *e, int type)
{
    lua_State *L = m->L;
    if (type == LUA_TSTRING || type == LUA_TNUMBER) {
        add_template(m, b, s, e, 3);
        return 1;
    }
    if (type == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        int n = push_captures(m, s, e);
        lua_call(L, n, 1);
    } else {
        push_capture(m, 0, s, e);
        lua_gettable(L, 3);
    }
    if (!lua_toboolean(L, -1)) { /* nil or false: keep the original */
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
        return 0;
    }
    if (!lua_isstring(L, -1)) return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    luaL_addvalue(b);
    return 1;
}

static int l_gsub(lua_State *L)
{
    size_t ls, lp;
    const char *src = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    int type = lua_type(L, 3);
    lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
    luaL_argexpected(L, type == LUA_TNUMBER || type == LUA_TSTRING || type == LUA_TFUNCTION || type == LUA_TTABLE, 3,
                     "string/function/table");
    int anchored = *p == '^';
    if (anchored) {
        p++;
        lp--;
    }
    matcher m;
    start(&m, L, src, ls, p, lp);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    const char *last = NULL;
    lua_Integer n = 0;
    int changed = 0;
    while (n < max) {
        reset(&m);
        const char *e = match(&m, src, p);
        if (e && e != last) {
            n++;
            changed |= add_replacement(&m, &b, src, e, type);
            src = last = e;
        } else if (src < m.src_end) {
            luaL_addchar(&b, *src++);
        } else {
            break;
        }
        if (anchored) break;
    }
    if (!changed) {
        lua_pushvalue(L, 1);
    } else {
        luaL_addlstring(&b, src, (size_t)(m.src_end - src));
        luaL_pushresult(&b);
    }
    lua_pushinteger(L, n);
    return 2;
}

void patterns_install(lua_State *L, int string_table, const patterns_budget *budget)
{
    lua_pushlightuserdata(L, (void *)budget);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
    static const luaL_Reg fns[] = {
        { "find", l_find }, { "match", l_match }, { "gmatch", l_gmatch }, { "gsub", l_gsub }, { NULL, NULL },
    };
    string_table = lua_absindex(L, string_table);
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, string_table, f->name);
    }
}
