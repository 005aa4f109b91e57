/* test_lua_script.c: `sparsejit run script.lua` on the CPU, through the built CLI: info() and
 * write_csv work without a GPU (the CSV is compared byte for byte), a GPU call without a GPU
 * raises a clear Lua error at the script's line, syntax and runtime errors name file:line,
 * arguments reach the script, bad arguments raise sparsejit messages, vnm_layout agrees with
 * the C API, and the shipped examples parse and refuse cleanly without a GPU. The GPU is hidden
 * (CUDA_VISIBLE_DEVICES="") so the test means the same on a GPU machine. Scripts load text
 * chunks only, and --timeout stops one that a pcall would keep running. The CLI is the build's
 * (SJ_BINARY_DIR) unless $SPARSEJIT_CLI names another. */
#include "test_util.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    fclose(f);
    return buf;
}

typedef struct run_result { int rc; char *out, *err; } run_result;

/* Writes text to dir/name and runs `sparsejit run OPTIONS` on it with args, the GPU hidden. */
static run_result run_script_with(const char *options, const char *name, const char *text, const char *args)
{
    char path[512], cmd[2048], out[512], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (text) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
    } else {
        snprintf(path, sizeof path, "%s", name); /* an existing file */
    }
    snprintf(out, sizeof out, "%s/stdout", dir);
    snprintf(err, sizeof err, "%s/stderr", dir);
    const char *cli = getenv("SPARSEJIT_CLI") ? getenv("SPARSEJIT_CLI") : SJ_BINARY_DIR "/sparsejit";
    if (access(cli, X_OK) != 0) fail_msg("the CLI %s is not built ($SPARSEJIT_CLI names another)", cli);
    snprintf(cmd, sizeof cmd, "cd '%s' && CUDA_VISIBLE_DEVICES= SPARSEJIT_CACHE='%s/kernels.db' '%s' run %s '%s' %s >'%s' 2>'%s'",
             dir, dir, cli, options, path, args ? args : "", out, err);
    int status = system(cmd);
    run_result r = { WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err) };
    return r;
}

static run_result run_script(const char *name, const char *text, const char *args)
{
    return run_script_with("", name, text, args);
}

static void done(run_result *r)
{
    free(r->out);
    free(r->err);
}

static void assert_contains(const char *text, const char *needle)
{
    if (!strstr(text, needle)) fail_msg("expected '%s' in:\n%s", needle, text);
}

static void test_info_and_csv_without_gpu(void **state)
{
    run_result r = run_script("csv.lua",
        "local i = sparsejit.info()\n"
        "print('has_gpu=' .. tostring(i.has_gpu), 'arch=' .. i.arch, 'version=' .. sparsejit.version)\n"
        "assert(#i.no_gpu_reason > 0 and i.nvrtc_version >= 12000)\n"
        "local rows = {\n"
        "  { name = 'plain', us = 12.5, n = 3, ok = true },\n"
        "  { name = 'with,comma', us = 0.25, n = -7 },\n"
        "  { name = 'say \"hi\"', extra = 'x' },\n"
        "  { name = ' padded ', ok = false },\n"
        "}\n"
        "assert(sparsejit.write_csv('auto.csv', rows) == 4)\n"
        "assert(sparsejit.write_csv('cols.csv', rows, { 'n', 'name' }) == 4)\n",
        NULL);
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    assert_contains(r.out, "has_gpu=false");
    assert_contains(r.out, "arch=sm_90a");
    char path[512];
    snprintf(path, sizeof path, "%s/auto.csv", dir);
    char *csv = slurp(path);
    assert_string_equal(csv, "extra,n,name,ok,us\n"
                             ",3,plain,true,12.5\n"
                             ",-7,\"with,comma\",,0.25\n"
                             "x,,\"say \"\"hi\"\"\",,\n"
                             ",,\" padded \",false,\n");
    free(csv);
    snprintf(path, sizeof path, "%s/cols.csv", dir);
    csv = slurp(path);
    assert_string_equal(csv, "n,name\n3,plain\n-7,\"with,comma\"\n,\"say \"\"hi\"\"\"\n,\" padded \"\n");
    free(csv);
    done(&r);
}

static void test_gpu_call_without_gpu_raises(void **state)
{
    run_result r = run_script("gpu.lua",
        "local ok, err = pcall(sparsejit.bench, { op = 'gemm', shape = { 64, 64, 64 } })\n"
        "print('pcall', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'twell-ffn', shape = { 64, 256, 256 }, d_ff = 1024, sparsity = 1.5 })\n"
        "print('sparsity', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'twell-ffn', shape = { 64, 256, 256 }, d_ff = 1024, skew = 9 })\n"
        "print('skew', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'twell-ffn-block', shape = { 64, 256, 256 }, d_ff = 1024 })\n"
        "print('block', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'twell-ffn-block', shape = { 64, 256, 256 }, d_ff = 1024, rounds = 0 })\n"
        "print('rounds', ok, err)\n"
        "ok, err = pcall(sparsejit.tune, { op = 'twell-ffn-block', shape = { 64, 256, 256 }, d_ff = 1024 })\n"
        "print('tune block', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'vnm-train', shape = { 512, 256, 64 }, vnm = '128:2:8' })\n"
        "print('step', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'vnm-train-exact', shape = { 512, 256, 60 } })\n"
        "print('step tokens', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'vnm-spmm', shape = { 512, 256, 64 }, rank = 12 })\n"
        "print('rank', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'gemm', shape = { 512, 256, 64 }, rank = 16 })\n"
        "print('rank gemm', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'vnm-spmm', shape = { 512, 256, 64 }, rank = 256 })\n"
        "print('rank range', ok, err)\n"
        "ok, err = pcall(sparsejit.bench, { op = 'vnm-spmm', shape = { 512, 256, 64 }, rank = 32 })\n"
        "print('rank ok', ok, err)\n"
        "sparsejit.tune{ op = 'gemm', shape = { 64, 64, 64 } }\n"
        "print('not reached')\n",
        NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.out, "pcall\tfalse\tsparsejit.bench: benchmarking needs a GPU");
    assert_contains(r.out, "sparsity\tfalse\tsparsejit.bench: sparsity 1.5: expected a fraction of zeros in (0, 1)");
    assert_contains(r.out, "skew\tfalse\tsparsejit.bench: problem.twell_skew = 9: expected 0 (units alike) .. 4");
    assert_contains(r.out, "block\tfalse\tsparsejit.bench: benchmarking needs a GPU");
    assert_contains(r.out, "rounds\tfalse\tsparsejit.bench: field 'rounds' = 0 is out of range; expected an integer in 1..100");
    assert_contains(r.out, "tune block\tfalse\tsparsejit.tune: op 'twell-ffn-block' is a benchmark of twell-gate + "
                           "twell-ffn, not an op: sparsejit.bench runs it; sparsejit.tune takes its parts, one of gemm, "
                           "vnm-spmm, twell-gate, twell-ffn");
    assert_contains(r.out, "step\tfalse\tsparsejit.bench: benchmarking needs a GPU");
    assert_contains(r.out, "step tokens\tfalse\tsparsejit.bench: problem.k = 60 (tokens) must be a multiple of 8");
    assert_contains(r.out, "rank\tfalse\tsparsejit.bench: problem.lowrank_rank = 12: expected 0 (none) or a multiple of "
                           "8 in 8..128");
    assert_contains(r.out, "rank gemm\tfalse\tsparsejit.bench: problem.lowrank_rank = 16: gemm takes no low-rank term");
    assert_contains(r.out, "rank range\tfalse\tsparsejit.bench: field 'rank' = 256 is out of range; expected an "
                           "integer in 8..128");
    assert_contains(r.out, "rank ok\tfalse\tsparsejit.bench: benchmarking needs a GPU");
    assert_contains(r.err, "gpu.lua:25: sparsejit.tune: tuning needs a GPU");
    assert_contains(r.err, "stack traceback");
    assert_null(strstr(r.out, "not reached"));
    done(&r);
}

static void test_errors_name_file_and_line(void **state)
{
    run_result r = run_script("syntax.lua", "local a = 1\nlocal b = 2\nlocal c = = 3\n", NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "syntax.lua:3:");
    done(&r);
    r = run_script("boom.lua", "local function f()\n  error('boom')\nend\nf()\n", NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "boom.lua:2: boom");
    assert_contains(r.err, "boom.lua:4:");
    done(&r);
    r = run_script("/nonexistent/none.lua", NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "cannot open");
    done(&r);
}

static void test_arguments_and_require(void **state)
{
    run_result r = run_script("args.lua",
        "local sj = require 'sparsejit'\n"
        "assert(sj == sparsejit and type(sj.tune) == 'function')\n"
        "local a, b = ...\n"
        "print(select('#', ...), a, b, arg[1], arg[2], arg[0]:match('args.lua$'))\n",
        "one 'two words'");
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    assert_contains(r.out, "2\tone\ttwo words\tone\ttwo words\targs.lua");
    done(&r);
}

static void test_bad_arguments_raise_sparsejit_messages(void **state)
{
    run_result r = run_script("bad.lua",
        "local function err(f, t) local ok, e = pcall(f, t); assert(not ok); print(e) end\n"
        "err(sparsejit.tune, { op = 'nope', shape = { 1, 1, 1 } })\n"
        "err(sparsejit.tune, { op = 'gemm', shape = { 0, 8, 8 } })\n"
        "err(sparsejit.tune, { op = 'gemm', shape = { 8, 8, 8 }, strategy = 'genetic' })\n"
        "err(sparsejit.bench, { op = 'vnm-spmm', shape = { 64, 64, 64 }, vnm = '64-2-8' })\n"
        "err(sparsejit.vnm_layout, { vnm = '64:3:8', rows = 64, cols = 64 })\n"
        "err(sparsejit.bench, { op = 'vnm-spmm', shape = { 64, 64, 64 }, vnm = '0:2:8' })\n"
        "err(sparsejit.bench, { op = 'vnm-spmm', shape = { 64, 64, 64 }, vnm = '4294967360:2:8' })\n"
        "err(sparsejit.bench, { op = 'twell-gate', shape = { 64, 64, 64 }, twell = '0:5' })\n"
        "err(sparsejit.tune, { op = 'gemm', shape = { 8, 8, 8 }, budget_trials = 4294967297 })\n"
        "err(sparsejit.bench, { op = 'gemm', shape = { 8, 8, 8 }, rounds = 0 })\n"
        "err(function() return sparsejit.write_csv('/nonexistent/x.csv', { { a = 1 } }) end)\n"
        "err(function() return sparsejit.write_csv('t.csv', { { a = {} } }) end)\n"
        "sparsejit.info()\n"
        "err(function() return sparsejit.configure{ cache = 'x.db' } end)\n",
        NULL);
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    assert_contains(r.out, "sparsejit.tune: unknown op 'nope'");
    assert_contains(r.out, "sparsejit.tune: problem.m = 0");
    assert_contains(r.out, "strategy 'genetic': expected exhaustive or random");
    assert_contains(r.out, "vnm '64-2-8': expected V:N:M, e.g. 64:2:8");
    assert_contains(r.out, "sparsejit.bench: vnm '0:2:8': V = '0' is out of range; expected an integer in 1..2147483647");
    assert_contains(r.out, "vnm '4294967360:2:8': V = '4294967360' is out of range");
    assert_contains(r.out, "twell '0:5': T = '0' is out of range; expected an integer in 1..65536");
    assert_contains(r.out, "field 'budget_trials' = 4294967297 is out of range; expected an integer in 0..1000000");
    assert_contains(r.out, "field 'rounds' = 0 is out of range; expected an integer in 1..100");
    assert_contains(r.out, "sparsejit.vnm_layout: V:N:M N = 3");
    assert_contains(r.out, "cannot open '/nonexistent/x.csv'");
    assert_contains(r.out, "row 1, column 'a': a table cannot be written");
    assert_contains(r.out, "call it before any other sparsejit function");
    done(&r);
}

static void test_vnm_layout_matches_c_api(void **state)
{
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, SJ_DTYPE_BF16, 128, 2, 16, 1000, 4100));
    char script[512], expect[256];
    snprintf(script, sizeof script,
             "local l = sparsejit.vnm_layout{ vnm = '128:2:16', rows = 1000, cols = 4100, dtype = 'bf16' }\n"
             "print(l.values_bytes, l.meta_bytes, l.index_bytes, l.row_blocks, l.groups, l.k_tiles, l.density)\n");
    run_result r = run_script("layout.lua", script, NULL);
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    snprintf(expect, sizeof expect, "%zu\t%zu\t%zu\t%lld\t%lld\t%lld\t0.125", l.values_bytes, l.meta_bytes, l.index_bytes,
             (long long)l.row_blocks, (long long)l.groups, (long long)l.k_tiles);
    assert_contains(r.out, expect);
    done(&r);
}

/* Option tables take exactly the fields the reference lists: another one, or one of the wrong
 * type, is refused naming it and what is accepted; configure{device} is range-checked. */
static void test_option_fields_checked(void **state)
{
    run_result r = run_script("fields.lua",
        "local function try(name, f, t) local ok, e = pcall(f, t); print(name, ok, e) end\n"
        "try('device', sparsejit.configure, { device = 1024 })\n" /* before any call makes the context */
        "try('configure', sparsejit.configure, { cachee = 'x.db' })\n"
        "try('tune', sparsejit.tune, { op = 'gemm', shape = { 64, 64, 64 }, bogus_field = 1 })\n"
        "try('bench', sparsejit.bench, { op = 'gemm', shape = { 64, 64, 64 }, [1] = 5 })\n"
        "try('layout', sparsejit.vnm_layout, { rows = 64, cols = 64, colz = 3 })\n"
        "try('progress', sparsejit.tune, { op = 'gemm', shape = { 64, 64, 64 }, progress = 'yes' })\n"
        "try('save', sparsejit.tune, { op = 'gemm', shape = { 64, 64, 64 }, save = 'no' })\n"
        "try('both', sparsejit.tune, { op = 'gemm', shape = { 64, 64, 64 }, m = 3 })\n"
        "try('two', sparsejit.bench, { op = 'gemm', shape = { 64, 64 } })\n"
        "try('rep', sparsejit.tune, { op = 'gemm', shape = { 64, 64, 64 }, rep_ms = -1 })\n"
        "try('nan', sparsejit.bench, { op = 'twell-ffn', shape = { 64, 256, 256 }, d_ff = 1024, sparsity = 0/0 })\n"
        "for _, f in ipairs(sparsejit.reference()) do\n"
        "  for _, x in ipairs(f.fields) do\n"
        "    if f.name ~= 'configure' then\n" /* a known field is never refused as unknown */
        "      local ok, e = pcall(sparsejit[f.name], { [x.name] = {} })\n"
        "      if not ok and e:find('unknown field', 1, true) then print('refused known', f.name, x.name) end\n"
        "    end\n"
        "  end\n"
        "end\n",
        NULL);
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    assert_contains(r.out, "tune\tfalse\tsparsejit.tune: unknown field 'bogus_field'; it takes op, dtype, out_dtype, shape, "
                           "m, n, k, vnm, twell, d_ff, sparsity, skew, dead, rank, strategy, budget_trials, budget_seconds, seed, "
                           "warmup_ms, rep_ms, threads, save, progress");
    assert_contains(r.out, "bench\tfalse\tsparsejit.bench: unknown field '1'; it takes op,");
    assert_contains(r.out, "layout\tfalse\tsparsejit.vnm_layout: unknown field 'colz'; it takes vnm, rows, cols, dtype");
    assert_contains(r.out, "configure\tfalse\tsparsejit.configure: unknown field 'cachee'; it takes cache, template_dir, device");
    assert_contains(r.out, "sparsejit.tune: field 'progress' must be true, false or a function, not a string");
    assert_contains(r.out, "sparsejit.tune: field 'save' must be true or false, not a string");
    assert_contains(r.out, "sparsejit.tune: give shape or m, n and k, not both");
    assert_contains(r.out, "sparsejit.bench: shape must be {m, n, k}: 3 integers");
    assert_contains(r.out, "sparsejit.tune: field 'rep_ms' must be a number in [0, 604800000]");
    assert_contains(r.out, "nan: expected a fraction of zeros in (0, 1)");
    assert_contains(r.out, "sparsejit.configure: field 'device' = 1024 is out of range; expected an integer in 0..1023");
    if (strstr(r.out, "refused known")) fail_msg("a listed field was refused as unknown:\n%s", r.out);
    done(&r);
}

/* The reference agrees with the code where the code can be asked without a GPU: the keys info,
 * stats and vnm_layout return are the ones it lists, and the defaults it gives for tune and bench
 * are sj_tune_options_init's and bench's. */
static void test_reference_matches_code(void **state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/lua_reference_check.lua", tu_source_dir());
    run_result r = run_script(path, NULL, NULL);
    if (r.rc != 0) fail_msg("rc %d: %s", r.rc, r.err);
    if (strstr(r.out, "undocumented") || strstr(r.out, "returns differ")) fail_msg("the reference disagrees:\n%s", r.out);
    sj_tune_options o;
    sj_tune_options_init(&o);
    char line[256];
    snprintf(line, sizeof line, "default\ttune\tseed\t%llu\n", (unsigned long long)o.seed);
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\ttune\twarmup_ms\t%g\n", o.warmup_ms);
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\ttune\trep_ms\t%g\n", o.rep_ms);
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\tbench\twarmup_ms\t%g\n", o.warmup_ms);
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\tbench\trep_ms\t%g\n", o.rep_ms);
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\ttune\tsave\t%s\n", o.save ? "true" : "false");
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\ttune\tstrategy\t\"%s\"\n", o.strategy == SJ_TUNE_RANDOM ? "random" : "exhaustive");
    assert_contains(r.out, line);
    snprintf(line, sizeof line, "default\tbench\tdtype\t\"%s\"\n", "f16");
    assert_contains(r.out, line);
    done(&r);
}

static void test_examples_parse_and_need_a_gpu(void **state)
{
    const char *examples[] = { "vnm_sparsity_sweep.lua", "ffn_shape_sweep.lua" };
    for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/examples/%s", tu_source_dir(), examples[i]);
        lua_State *L = luaL_newstate();
        assert_non_null(L);
        if (luaL_loadfilex(L, path, "t") != LUA_OK) fail_msg("%s does not parse: %s", path, lua_tostring(L, -1));
        lua_close(L);
        run_result r = run_script(path, NULL, NULL);
        assert_int_equal(r.rc, 1);
        assert_contains(r.err, "this sweep needs a GPU");
        done(&r);
        r = run_script(path, NULL, "nosuchkey=1");
        assert_int_equal(r.rc, 1);
        assert_contains(r.err, "unknown argument 'nosuchkey=1'");
        done(&r);
    }
}

/* Corrupt bytecode crashes Lua (44 of 300 mutated chunks segfaulted): scripts load text only. */
static void test_binary_chunks_refused(void **state)
{
    run_result r = run_script("dump.lua",
        "local bin = string.dump(function() return 1 end)\n"
        "local f, e = load(bin)\n"
        "assert(f == nil and e:find('binary chunk'), 'load took a binary chunk')\n"
        "local ok, e2 = pcall(load, bin, 'x', 'b')\n"
        "assert(not ok and e2:find('binary chunks are refused'), tostring(e2))\n"
        "local out = io.open('chunk.luac', 'wb') out:write(bin) out:close()\n"
        "local g, e3 = loadfile('chunk.luac')\n"
        "assert(g == nil and e3:find('binary chunk'), 'loadfile took a binary chunk')\n"
        "assert(not pcall(dofile, 'chunk.luac'), 'dofile ran a binary chunk')\n"
        "print('text ' .. load('return 6 * 7')() .. ' ' .. os.time() // os.time())\n", NULL);
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "text 42 1"); /* text chunks and the full standard library still work */
    done(&r);
}

static void test_timeout(void **state)
{
    run_result r = run_script_with("--timeout 0.5", "spin.lua",
        "while true do pcall(function() while true do end end) end\n", NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "ran past --timeout 0.5");
    done(&r);
    r = run_script_with("--timeout 30", "quick.lua", "print('args', ...)\n", "a b");
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "args\ta\tb");
    done(&r);
    const char *bad[] = { "--timeout 0", "--timeout -1", "--timeout 5x", "--timeout nan", "--timeout 1e9" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = run_script_with(bad[i], "quick.lua", NULL, NULL);
        assert_int_equal(r.rc, 2);
        assert_contains(r.err, "--timeout takes seconds, a number > 0 and <= 604800");
        done(&r);
    }
}

int main(void)
{
    const char *d = tu_tempdir();
    if (!d) {
        fprintf(stderr, "cannot create a temporary directory\n");
        return 1;
    }
    snprintf(dir, sizeof dir, "%s", d);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_and_csv_without_gpu),
        cmocka_unit_test(test_gpu_call_without_gpu_raises),
        cmocka_unit_test(test_errors_name_file_and_line),
        cmocka_unit_test(test_arguments_and_require),
        cmocka_unit_test(test_bad_arguments_raise_sparsejit_messages),
        cmocka_unit_test(test_vnm_layout_matches_c_api),
        cmocka_unit_test(test_option_fields_checked),
        cmocka_unit_test(test_reference_matches_code),
        cmocka_unit_test(test_examples_parse_and_need_a_gpu),
        cmocka_unit_test(test_binary_chunks_refused),
        cmocka_unit_test(test_timeout),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
