/* test_generator.c: the Lua sandbox and the template contract, on the CPU: io/os refused,
 * errors carry template file:line, instruction and memory caps, #line reaches NVRTC's log,
 * config strings, and the template hash that keys the cache. */
#include "core/op.h"
#include "test_util.h"
#include "generator/generator.h"
#include "generator/nvrtc.h"

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

static void expect_generate_error(const char *name, const char *body, sj_status expected, const char *needle)
{
    write_template(name, body);
    gen_state *g = open_dir();
    sj_problem p = problem();
    sj_generated *out = (sj_generated *)0x1;
    SJ_ASSERT_STATUS(gen_generate(g, name, &p, NULL, &out), expected, needle);
    assert_null(out);
    gen_close(g);
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
    const char *bad[] = { "BM", "BM=", "BM=12x", "=3", "BM=1,BM=2", "B-M=3", "BM=1;BN=2" };
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
        cmocka_unit_test(test_generate_result_checked),
        cmocka_unit_test(test_line_directives_reach_nvrtc),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_template_hash),
        cmocka_unit_test(test_embedded_templates_load),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
