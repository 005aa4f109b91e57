/* test_generator.c: the Lua sandbox and the template contract, on the CPU: io/os refused,
 * errors carry template file:line, instruction and memory caps, hostile templates (raising
 * metamethods, memory filled to the cap) fail as errors, limits a pcall cannot swallow, a
 * wall-clock limit, bounded pattern functions that agree with Lua's, templates that cannot
 * change each other's globals, #line reaches NVRTC's log, config strings, and the template
 * hash that keys the cache. */
#include "core/op.h"
#include "test_util.h"
#include "generator/generator.h"
#include "generator/nvrtc.h"
#include "generator/lua_sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

static void write_file(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void copy_lib(const char *name)
{
    char src[512];
    snprintf(src, sizeof src, "%s/templates/lib/%s", tu_source_dir(), name);
    FILE *f = fopen(src, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char rel[128];
    snprintf(rel, sizeof rel, "lib/%s", name);
    write_file(rel, buf);
}

/* A minimal valid template; `body` is spliced into generate(). */
static void write_template(const char *name, const char *body)
{
    char text[4096];
    snprintf(text, sizeof text,
             "local emit = require 'lib.emit'\n"                       /* 1 */
             "return {\n"                                              /* 2 */
             "  name = '%s', op = 'gemm', params = { 'BM', 'BN' },\n"  /* 3 */
             "  space = { BM = {32, 64}, BN = {32, 64, 32} },\n"       /* 4 */
             "  valid = function(p, c) if c.BM > p.M * 64 then return false, 'BM too big' end return true end,\n" /* 5 */
             "  default = function(p) return { BM = 64, BN = 32 } end,\n" /* 6 */
             "  generate = function(p, c)\n"                           /* 7 */
             "%s\n"                                                    /* 8 */
             "  end,\n"
             "}\n",
             name, body);
    char rel[128];
    snprintf(rel, sizeof rel, "%s.lua", name);
    write_file(rel, text);
}

static gen_state *open_dir(void)
{
    gen_state *g = NULL;
    SJ_ASSERT_OK(gen_open(dir, &g));
    return g;
}

static sj_problem problem(void)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 64, 64, 64);
    return p;
}

static int setup(void **state)
{
    const char *t = tu_tempdir();
    if (!t) return -1;
    snprintf(dir, sizeof dir, "%s", t);
    char lib[300];
    snprintf(lib, sizeof lib, "%s/lib", dir);
    if (mkdir(lib, 0700) != 0) return -1;
    copy_lib("emit.lua");
    copy_lib("cuda.lua");
    return 0;
}

static void expect_named_error(const char *name, sj_status expected, const char *needle)
{
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out = (sj_generated *)0x1;
    SJ_ASSERT_STATUS(gen_generate(g, name, &p, NULL, &out), expected, needle);
    assert_null(out);
    gen_close(g);
}

static void expect_generate_error(const char *name, const char *body, sj_status expected, const char *needle)
{
    write_template(name, body);
    expect_named_error(name, expected, needle);
}

static void test_sandbox_refuses_io_and_os(void **state)
{
    expect_generate_error("uses_io", "    return io.open('/etc/passwd')", SJ_ERR_TEMPLATE, "global 'io'");
    expect_generate_error("uses_os", "    os.execute('touch /tmp/sj_pwned')", SJ_ERR_TEMPLATE, "global 'os'");
    expect_generate_error("uses_dofile", "    dofile('/etc/passwd')", SJ_ERR_TEMPLATE, "global 'dofile'");
    expect_generate_error("uses_require", "    require 'os'", SJ_ERR_TEMPLATE, "only lib.* modules");
    expect_generate_error("uses_path", "    require 'lib..x'", SJ_ERR_TEMPLATE, "no template or module");
    expect_generate_error("uses_random", "    return math.random()", SJ_ERR_TEMPLATE, "field 'random'");
    expect_generate_error("uses_dump", "    return string.dump(print)", SJ_ERR_TEMPLATE, "field 'dump'");
    expect_generate_error("uses_dump2", "    return ('x'):dump()", SJ_ERR_TEMPLATE, "method 'dump'");
    /* load of a binary chunk: only text is accepted */
    expect_generate_error("uses_binary", "    local f, e = load('\\27Lua', 'x', 'b', {}) error(e)", SJ_ERR_TEMPLATE,
                          "attempt to load a binary chunk");
    expect_generate_error("uses_strmeta", "    getmetatable('').__index = nil", SJ_ERR_TEMPLATE, "attempt to index a boolean");
    expect_generate_error("uses_load_noenv", "    load('return 1')", SJ_ERR_TEMPLATE, "bad argument #4");
    FILE *f = fopen("/tmp/sj_pwned", "r");
    assert_null(f);
}

static void test_errors_carry_template_line(void **state)
{
    /* generate's body is line 8 of the template */
    expect_generate_error("runtime_err", "    error('the tile does not fit')", SJ_ERR_TEMPLATE,
                          "templates/runtime_err.lua:8: the tile does not fit");
    expect_generate_error("nil_index", "    local x = nil; return x.y", SJ_ERR_TEMPLATE, "templates/nil_index.lua:8:");
    write_file("syntax.lua", "return {\n  name = 'syntax',\n  op = = 'gemm',\n}\n");
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out;
    SJ_ASSERT_STATUS(gen_generate(g, "syntax", &p, NULL, &out), SJ_ERR_TEMPLATE, "templates/syntax.lua:3:");
    SJ_ASSERT_STATUS(gen_generate(g, "missing", &p, NULL, &out), SJ_ERR_NOT_FOUND, "no template named 'missing'");
    gen_close(g);
    write_file("incomplete.lua", "return { name = 'incomplete', op = 'gemm' }\n");
    g = open_dir();
    SJ_ASSERT_STATUS(gen_generate(g, "incomplete", &p, NULL, &out), SJ_ERR_TEMPLATE, "no field 'params'");
    gen_close(g);
}

static void test_instruction_and_memory_caps(void **state)
{
    expect_generate_error("endless", "    while true do end", SJ_ERR_TEMPLATE, "instruction limit");
    expect_generate_error("hog", "    local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1024) .. i end", SJ_ERR_TEMPLATE,
                          "not enough memory");
}

/* A whole template file, for templates that attack the side reading what they return. */
static void write_whole(const char *name, const char *text)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s.lua", name);
    write_file(rel, text);
}

#define GOOD_FIELDS                                                                                          \
    "name = 'x', op = 'gemm', space = { BM = {64} }, valid = function() return true end,\n"                 \
    "generate = function(p, c) return { source = 'k', entry = 'k', grid = {1}, block = {1} } end,\n"

/* Each of these aborted the process (rc 134) before every read of a template value ran
 * protected: the host read them with lua_getfield / luaL_len outside lua_pcall. */
static void test_hostile_templates_cannot_abort(void **state)
{
    write_whole("idx_raises", "return setmetatable({}, { __index = function(t, k) error('index boom ' .. k) end })\n");
    expect_named_error("idx_raises", SJ_ERR_TEMPLATE, "index boom name");
    write_whole("len_raises", "return { " GOOD_FIELDS
                "  params = setmetatable({}, { __len = function() error('len boom') end }),\n"
                "  default = function() return { BM = 64 } end }\n");
    expect_named_error("len_raises", SJ_ERR_TEMPLATE, "len boom");
    write_whole("len_huge", "return { " GOOD_FIELDS
                "  params = setmetatable({}, { __len = function() return math.maxinteger end }),\n"
                "  default = function() return { BM = 64 } end }\n");
    expect_named_error("len_huge", SJ_ERR_TEMPLATE, "at most 16");
    write_whole("default_idx", "return { " GOOD_FIELDS "  params = { 'BM' },\n"
                "  default = function() return setmetatable({}, { __index = function() error('default boom') end }) end }\n");
    expect_named_error("default_idx", SJ_ERR_TEMPLATE, "default boom");
    write_whole("variants_len", "return { " GOOD_FIELDS "  params = { 'BM' }, default = function() return { BM = 64 } end,\n"
                "  variants = function() return setmetatable({}, { __len = function() error('variants boom') end }) end }\n");
    gen_state *g = open_dir();
    sj_problem p = problem();
    char configs[GEN_MAX_VARIANTS][256];
    int n = -1;
    SJ_ASSERT_STATUS(gen_variant_configs(g, "variants_len", &p, configs, GEN_MAX_VARIANTS, &n), SJ_ERR_TEMPLATE,
                     "variants boom");
    assert_int_equal(n, 0);
    gen_close(g);
    write_whole("result_idx", "return { name = 'x', op = 'gemm', space = { BM = {64} }, params = { 'BM' },\n"
                "  valid = function() return true end, default = function() return { BM = 64 } end,\n"
                "  generate = function() return setmetatable({ source = 'k' }, { __index = function() error('result boom') end }) end }\n");
    expect_named_error("result_idx", SJ_ERR_TEMPLATE, "result boom");
    /* memory filled to just under the cap, kept by the template, before it returns: the host's
     * own allocations for the next call fail, as an error */
    write_whole("fills_memory", "hog = {}\n"
                "for _, size in ipairs({ 1048576, 65536, 4096, 256, 32 }) do\n"
                "  pcall(function() while true do hog[#hog + 1] = ('x'):rep(size - 8) .. #hog end end)\n"
                "end\n"
                "return { " GOOD_FIELDS "  params = { 'BM' }, default = function() return { BM = 64 } end }\n");
    write_template("after_hog", "    return { source = 'k', entry = 'k', grid = {1}, block = {1} }");
    g = open_dir();
    sj_generated *out = NULL;
    sj_status st = gen_generate(g, "fills_memory", &p, NULL, &out);
    if (st != SJ_OK) SJ_ASSERT_STATUS(st, SJ_ERR_TEMPLATE, "not enough memory");
    sj_generated_free(out);
    /* the generator is usable afterwards: a fresh sandbox, not the full one */
    SJ_ASSERT_OK(gen_generate(g, "after_hog", &p, NULL, &out));
    sj_generated_free(out);
    gen_close(g);
}

/* A pcall used to swallow the limit's error, so this ran forever. */
static void test_cpu_limit_sticks(void **state)
{
    write_template("pcall_loop", "    while true do pcall(function() while true do end end) end");
    write_template("xpcall_loop", "    while true do xpcall(function() while true do end end, function() while true do end end) end");
    write_template("nested_pcall",
                   "    while true do pcall(function() while true do pcall(function() while true do end end) end end) end");
    write_template("gc_loop", "    setmetatable({}, { __gc = function() while true do end end })");
    gen_state *g = open_dir();
    gen_set_limits(g, 0, 20000000, 60000);
    sj_problem p = problem();
    sj_generated *out;
    SJ_ASSERT_STATUS(gen_generate(g, "pcall_loop", &p, NULL, &out), SJ_ERR_TEMPLATE, "instruction limit");
    SJ_ASSERT_STATUS(gen_generate(g, "xpcall_loop", &p, NULL, &out), SJ_ERR_TEMPLATE, "instruction limit");
    SJ_ASSERT_STATUS(gen_generate(g, "nested_pcall", &p, NULL, &out), SJ_ERR_TEMPLATE, "instruction limit");
    /* Lua runs finalizers with hooks off, where no limit would stop this one */
    SJ_ASSERT_STATUS(gen_generate(g, "gc_loop", &p, NULL, &out), SJ_ERR_TEMPLATE, "may not set __gc");
    /* the next call has its budget back */
    write_template("fine", "    return { source = 'k', entry = 'k', grid = {1}, block = {1} }");
    SJ_ASSERT_OK(gen_generate(g, "fine", &p, NULL, &out));
    sj_generated_free(out);
    gen_close(g);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_wall_clock_limit(void **state)
{
    write_template("slow", "    while true do pcall(function() while true do end end) end");
    gen_state *g = open_dir();
    gen_set_limits(g, 0, 1000000000000000ull, 300); /* instructions cannot stop it: the clock must */
    sj_problem p = problem();
    sj_generated *out;
    double t0 = seconds_now();
    SJ_ASSERT_STATUS(gen_generate(g, "slow", &p, NULL, &out), SJ_ERR_TEMPLATE, "time limit (300 ms)");
    double took = seconds_now() - t0;
    assert_true(took >= 0.25 && took < 5.0);
    gen_close(g);
}

/* Backtracking in C, where no count hook reaches: minutes with Lua's own string.find. */
static void test_pattern_backtracking_bounded(void **state)
{
    write_template("backtrack_find", "    return string.find(('a'):rep(60), ('a*'):rep(30) .. 'b')");
    write_template("backtrack_method", "    return (('a'):rep(60)):match(('.-'):rep(30) .. 'b')");
    write_template("backtrack_gsub", "    return (('a'):rep(60)):gsub(('a-'):rep(30) .. 'b', '')");
    write_template("backtrack_gmatch", "    for x in (('a'):rep(60)):gmatch(('a*'):rep(30) .. 'b') do end");
    write_template("backtrack_loop", "    while true do pcall(string.find, ('a'):rep(60), ('a*'):rep(30) .. 'b') end");
    gen_state *g = open_dir();
    gen_set_limits(g, 0, 50000000, 60000);
    sj_problem p = problem();
    sj_generated *out;
    const char *names[] = { "backtrack_find", "backtrack_method", "backtrack_gsub", "backtrack_gmatch", "backtrack_loop" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        double t0 = seconds_now();
        SJ_ASSERT_STATUS(gen_generate(g, names[i], &p, NULL, &out), SJ_ERR_TEMPLATE, "instruction limit");
        assert_true(seconds_now() - t0 < 10.0);
    }
    gen_close(g);
}

/* The sandbox's pattern functions against Lua's own on the same calls. */
static const char *const pattern_cases[] = {
    "string.find('hello world', 'o w')", "string.find('hello world', 'l+')", "string.find('hello', 'l', 1, true)",
    "string.find('a.b', '.', 1, true)", "string.find('hello', 'xyz')", "string.find('hello', '')",
    "string.find('hello', '', 10)", "string.find('hello', 'l', -2)", "string.find('hello', 'h', -100)",
    "string.find('hello', '^h(e)(l+)')", "string.find('  x', '^%s*()')", "string.find('abc', 'b()')",
    "string.match('key = value', '(%w+)%s*=%s*(%w+)')", "string.match('2024-01-15', '(%d+)-(%d+)-(%d+)')",
    "string.match('[[x]]', '%[(%b[])%]')", "string.match('THE (quick) fox', '%f[%a]%a+')",
    "string.match('hello', '.-l')", "string.match('hello', '.*l')", "string.match('hello', 'x?h')",
    "string.match('abab', '(ab)%1')", "string.match('a]b', '[]]')", "string.match('a-b', '[a%-]+')",
    "string.match('x^y', '[%^y]+')", "string.match('AbC1', '[^%l]+')", "string.match('f(a(b)c)d', '%b()')",
    "string.match('$x', '^%$(.*)$')", "string.match('end$', 'd%$$')", "string.match('abc', '()b()')",
    "string.match('\\0a\\0', '%z?a')", "string.match('tab\\there', '%c')", "string.match('x1_y', '[%w_]+$')",
    "string.match('hello', 'l', -2)", "string.match('hello', '[a-f]+', 2)",
    "string.gsub('hello world', 'o', '0')", "string.gsub('hello world', '(%w+)', '<%1>')",
    "string.gsub('hello', '', '-')", "string.gsub('abc', '%w', '%0%0')", "string.gsub('abc', 'b', '%%')",
    "string.gsub('hello world', '%w+', { hello = 'HI', world = false })",
    "string.gsub('a b c', '%a', function(x) if x == 'b' then return nil end return x:upper() end)",
    "string.gsub('abc', '.', 'x', 2)", "string.gsub('abc', '^a', 'z')", "string.gsub('aaa', 'a*', '-')",
    "string.gsub('x = 1, y = 2', '(%w+) = (%w+)', '%2 = %1')", "string.gsub('abc', '()', '%1')",
    "string.gsub('@T@ and @T@', '@T@', 'half')", "string.gsub('a.b', '%.', '%%')",
    "(function() local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t+1] = k .. v end return table.concat(t, ',') end)()",
    "(function() local t = {} for w in string.gmatch('one two  three', '%a*') do t[#t+1] = '[' .. w .. ']' end return table.concat(t) end)()",
    "(function() local t = {} for l in ('a\\nb\\r\\n\\nc\\n'):gmatch('(.-)\\r?\\n') do t[#t+1] = '<' .. l .. '>' end return table.concat(t) end)()",
    "(function() local t = {} for a in string.gmatch('abcd', '.', 3) do t[#t+1] = a end return table.concat(t) end)()",
    "(function() local t = {} for p in string.gmatch('abc', '()') do t[#t+1] = p end return table.concat(t, ',') end)()",
    "pcall(string.find, 'x', '%')", "pcall(string.find, 'x', '[a')", "pcall(string.match, 'x', '(x')",
    "pcall(string.match, 'x', 'x)')", "pcall(string.gsub, 'x', 'x', '%2')", "pcall(string.gsub, 'x', 'x', '%z')",
    "pcall(string.find, 'x', '%f')", "pcall(string.find, 'x', '%b')", "pcall(string.gsub, 'x', 'x', true)",
    "pcall(string.match, 'x', '%1')", "pcall(string.rep)",
};

#define SERIALIZE "local function ser(...) local t = table.pack(...) for i = 1, t.n do t[i] = tostring(t[i]) end " \
                  "return table.concat(t, '|') end "

static const char *snippet_text;
static const char *snippet_reader(void *user, const char *name, size_t *len)
{
    *len = strlen(snippet_text);
    return snippet_text;
}

static int run_snippet(lua_State *L)
{
    sandbox_push_template(L, "snippet");
    snprintf(lua_touserdata(L, 1), 1024, "%s", lua_tostring(L, -1));
    return 0;
}

/* An error result's text without where it was raised and the name Lua finds for the function
 * ("bad argument #3 to 'string.gsub'" / "to '?'"), which differ between the two; other results
 * whole. */
static const char *error_text(const char *result)
{
    if (strncmp(result, "false|", 6)) return result;
    const char *colon = strrchr(result, ':');
    const char *paren = strstr(result, "' (");
    return paren ? paren : colon ? colon : result;
}

static void test_patterns_match_stock_lua(void **state)
{
    char err[1024];
    sandbox *sb = sandbox_open(snippet_reader, NULL, err, sizeof err);
    assert_non_null(sb);
    lua_State *stock = luaL_newstate();
    luaL_openlibs(stock);
    for (size_t i = 0; i < sizeof pattern_cases / sizeof *pattern_cases; i++) {
        char text[2048], want[1024], got[1024];
        snprintf(text, sizeof text, SERIALIZE "return ser(%s)", pattern_cases[i]);
        if (luaL_dostring(stock, text) != LUA_OK) fail_msg("%s: %s", pattern_cases[i], lua_tostring(stock, -1));
        snprintf(want, sizeof want, "%s", lua_tostring(stock, -1));
        lua_pop(stock, 1);
        snippet_text = text;
        int code;
        if (sandbox_run(sb, run_snippet, got, &code, err, sizeof err) != 0) fail_msg("%s: %s", pattern_cases[i], err);
        if (strcmp(error_text(want), error_text(got)))
            fail_msg("%s: Lua gives '%s', the sandbox '%s'", pattern_cases[i], want, got);
    }
    lua_close(stock);
    sandbox_close(sb);
}

/* What one template assigns to the shared tables, another does not see; a lib module's table is
 * its own per template as well. */
static void test_templates_do_not_share_globals(void **state)
{
    write_template("vandal", "    _G.require = nil; string.format = function() return 'pwned' end\n"
                             "    table.concat = nil; math.max = nil; emit.render = nil; _G.tostring = nil\n"
                             "    return { source = 'k', entry = 'k', grid = {1}, block = {1} }");
    write_template("victim", "    local e = require 'lib.emit'\n"
                             "    assert(e.render and emit.render, 'emit.render is gone')\n"
                             "    local s = string.format('%d', 7) .. ('%d'):format(8) .. table.concat({ 'a', 'b' }) .. math.max(1, 2) .. tostring(3)\n"
                             "    return { source = s .. ' k', entry = 'k', grid = {1}, block = {1} }");
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out;
    SJ_ASSERT_OK(gen_generate(g, "vandal", &p, NULL, &out));
    sj_generated_free(out);
    SJ_ASSERT_OK(gen_generate(g, "victim", &p, NULL, &out));
    assert_string_equal(out->source, "78ab23 k");
    sj_generated_free(out);
    gen_close(g);
}

static void test_generate_result_checked(void **state)
{
    expect_generate_error("no_entry", "    return { source = 'x', grid = {1}, block = {1} }", SJ_ERR_TEMPLATE,
                          "source and entry");
    expect_generate_error("bad_grid", "    return { source = 'k', entry = 'k', grid = {0}, block = {1} }", SJ_ERR_TEMPLATE,
                          "grid[1] must be a positive integer");
    expect_generate_error("entry_missing",
                          "    return { source = 'void f(){}', entry = 'k', grid = {1}, block = {1} }", SJ_ERR_TEMPLATE,
                          "does not occur");
}

/* The CUDA text of the template below starts at a known line; a deliberate CUDA error two lines
 * into it must be reported by NVRTC at that template line. */
static void test_line_directives_reach_nvrtc(void **state)
{
    write_file("lines.lua",
               "local emit = require 'lib.emit'\n"                                     /* 1 */
               "local cuda = require 'lib.cuda'\n"                                     /* 2 */
               "return { name = 'lines', op = 'gemm', params = { 'X' }, space = { X = {1} },\n" /* 3 */
               "  valid = function() return true end, default = function() return { X = 1 } end,\n" /* 4 */
               "  generate = function(p, c)\n"                                         /* 5 */
               "    local src = emit.render(here(), [[\n"                              /* 6 */
               "extern \"C\" __global__ void lines_k(float *x) {\n"                   /* 7 */
               "$ for i = 1, 2 do\n"                                                   /* 8 */
               "  x[${i}] = ${c.X} + undeclared_thing;\n"                              /* 9 */
               "$ end\n"                                                               /* 10 */
               "}]], { c = c })\n"                                                     /* 11 */
               "    return { source = src, entry = 'lines_k', grid = {1}, block = {32} }\n"
               "  end }\n");
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out = NULL;
    SJ_ASSERT_OK(gen_generate(g, "lines", &p, "", &out));
    assert_non_null(strstr(out->source, "#line 7 \"templates/lines.lua\""));
    assert_non_null(strstr(out->source, "x[2] = 1 + undeclared_thing;"));
    assert_string_equal(out->config, "X=1");
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    SJ_ASSERT_STATUS(nvrtc_compile(out->source, out->entry, "sm_90a", &cubin, &size, &log, NULL), SJ_ERR_NVRTC,
                     "templates/lines.lua(9)");
    assert_null(cubin);
    assert_non_null(log);
    assert_non_null(strstr(log, "undeclared_thing"));
    free(log);
    sj_generated_free(out);
    gen_close(g);
}

static void test_configs(void **state)
{
    gen_config c;
    char buf[256];
    SJ_ASSERT_OK(gen_config_parse("WN=32, BM=128,BK=-2", &c));
    assert_int_equal(c.n, 3);
    gen_config_format(&c, buf, sizeof buf);
    assert_string_equal(buf, "BK=-2,BM=128,WN=32");
    SJ_ASSERT_OK(gen_config_parse("", &c));
    assert_int_equal(c.n, 0);
    SJ_ASSERT_OK(gen_config_parse("BM=2147483647,BN=-2147483648", &c));
    assert_int_equal(c.values[0], 2147483647);
    assert_int_equal(c.values[1], -2147483647 - 1);
    /* anything but a sign and digits, and anything an int cannot hold, is refused (no wrap) */
    const char *bad[] = { "BM", "BM=", "BM=12x", "=3", "BM=1,BM=2", "B-M=3", "BM=1;BN=2", "garbage;;;", "BM=4294967360",
                          "STAGES=3888888888888888888", "BM=2147483648", "BM=-2147483649", "BM=+1", "BM= 1", "BM=-",
                          "BM=99999999999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        SJ_ASSERT_STATUS(gen_config_parse(bad[i], &c), SJ_ERR_INVALID_ARGUMENT, "config");

    write_template("cfg", "    return { source = 'k', entry = 'k', grid = {c.BM}, block = {c.BN} }");
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out;
    SJ_ASSERT_OK(gen_generate(g, "cfg", &p, "BN=64", &out)); /* partial: the default fills BM */
    assert_string_equal(out->config, "BM=64,BN=64");
    assert_int_equal(out->grid[0], 64);
    assert_int_equal(out->grid[1], 1);
    assert_int_equal(out->block[0], 64);
    sj_generated_free(out);
    SJ_ASSERT_STATUS(gen_generate(g, "cfg", &p, "BQ=1", &out), SJ_ERR_INVALID_ARGUMENT, "no parameter 'BQ' (it has BM, BN)");
    sj_problem tiny = problem();
    tiny.m = 0; /* valid() refuses BM > M*64 */
    SJ_ASSERT_STATUS(gen_generate(g, "cfg", &tiny, NULL, &out), SJ_ERR_INVALID_ARGUMENT, "BM too big");
    int valid = -1;
    char reason[128];
    SJ_ASSERT_OK(gen_config_valid(g, "cfg", &tiny, "BM=32,BN=32", &valid, reason, sizeof reason));
    assert_int_equal(valid, 0);
    assert_string_equal(reason, "BM too big");
    gen_space sp;
    SJ_ASSERT_OK(gen_space_of(g, "cfg", &p, &sp));
    assert_int_equal(sp.n_params, 2);
    assert_string_equal(sp.names[0], "BM");
    assert_int_equal(sp.n_values[1], 3);
    assert_int_equal(sp.values[1][1], 64);
    gen_close(g);
}

static void test_template_hash(void **state)
{
    write_template("h1", "    return nil");
    write_template("h2", "    return nil ");
    gen_state *g = open_dir();
    char a[65], b[65], a2[65];
    SJ_ASSERT_OK(gen_template_hash(g, "h1", a));
    SJ_ASSERT_OK(gen_template_hash(g, "h2", b));
    assert_int_equal(strlen(a), 64);
    assert_string_not_equal(a, b);
    gen_close(g);
    /* a change to a lib module changes every template's hash */
    write_file("lib/extra.lua", "return { version = 2 }\n");
    g = open_dir();
    SJ_ASSERT_OK(gen_template_hash(g, "h1", a2));
    assert_string_not_equal(a, a2);
    SJ_ASSERT_STATUS(gen_template_hash(g, "nope", a2), SJ_ERR_NOT_FOUND, "nope");
    gen_close(g);
}

/* Every built-in template loads from the embedded set, and its default config generates. */
static void test_embedded_templates_load(void **state)
{
    gen_state *g = NULL;
    SJ_ASSERT_OK(gen_open(NULL, &g));
    const char *name;
    SJ_ASSERT_OK(op_template(SJ_OP_GEMM, &name));
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_BF16, 100, 72, 40);
    p.out_dtype = SJ_DTYPE_F32;
    sj_generated *out;
    SJ_ASSERT_OK(gen_generate(g, name, &p, NULL, &out));
    assert_non_null(strstr(out->source, "mma.sync"));
    assert_non_null(strstr(out->source, "#line"));
    sj_generated_free(out);
    char h[65];
    SJ_ASSERT_OK(gen_template_hash(g, name, h));
    gen_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sandbox_refuses_io_and_os),
        cmocka_unit_test(test_errors_carry_template_line),
        cmocka_unit_test(test_instruction_and_memory_caps),
        cmocka_unit_test(test_hostile_templates_cannot_abort),
        cmocka_unit_test(test_cpu_limit_sticks),
        cmocka_unit_test(test_wall_clock_limit),
        cmocka_unit_test(test_pattern_backtracking_bounded),
        cmocka_unit_test(test_patterns_match_stock_lua),
        cmocka_unit_test(test_templates_do_not_share_globals),
        cmocka_unit_test(test_generate_result_checked),
        cmocka_unit_test(test_line_directives_reach_nvrtc),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_template_hash),
        cmocka_unit_test(test_embedded_templates_load),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
