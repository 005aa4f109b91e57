/* fuzz_parsers.c: the parsers of the text a user types (tests/fuzz/fuzz.h). The first byte picks
 * one, the rest is its input:
 *   0  number_parse, lo and hi from the next 16 bytes, against a reference built on strtoll;
 *   1  config strings (gen_config_parse): an accepted one formats to a canonical text that parses
 *      back to the same names and values, and formatting that again changes nothing;
 *   2  "MxNxK" / "V:N:M" / "T:C" fields (cli_parse_fields, the CLI's and Lua's): an accepted text
 *      has every field in its range and equals the fields printed back with the separator,
 *      less leading zeros and a "-0";
 *   3  sj_problem_validate of a problem made of the bytes, and sj_problem_describe of it;
 *   4  the names (sj_dtype_parse, sj_op_parse, sj_tune_strategy_parse): an accepted text is one
 *      word whose dtype or op's own name parses back to it. */
#include "tests/fuzz/fuzz.h"

#include "cli/cli_problem.h"
#include "core/number.h"
#include "generator/generator.h"
#include "sparsejit.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The input as a NUL-terminated text of exactly its size (a read past it is an ASan report). */
static char *text_of(const uint8_t *d, size_t n)
{
    char *t = malloc(n + 1);
    memcpy(t, d, n);
    t[n] = 0;
    return t;
}

/* number_parse's contract, restated on strtoll: an optional '-', then one or more digits, nothing
 * else; in range of long long and of lo..hi. */
static number_result reference_number(const char *s, size_t len, long long lo, long long hi, long long *out)
{
    size_t i = len && s[0] == '-';
    if (i == len) return NUMBER_NOT_INTEGER;
    for (size_t j = i; j < len; j++)
        if (s[j] < '0' || s[j] > '9') return NUMBER_NOT_INTEGER;
    char *copy = malloc(len + 1);
    memcpy(copy, s, len);
    copy[len] = 0;
    errno = 0;
    long long v = strtoll(copy, NULL, 10);
    int erange = errno == ERANGE;
    free(copy);
    if (erange || v < lo || v > hi) return NUMBER_OUT_OF_RANGE;
    *out = v;
    return NUMBER_OK;
}

static void numbers(const uint8_t *d, size_t n)
{
    if (n < 17) return; /* a flag byte, lo and hi, then the text */
    long long lo, hi;
    memcpy(&lo, d + 1, 8);
    memcpy(&hi, d + 9, 8);
    if (d[0] & 1) { /* a small, typical range */
        lo = (signed char)d[1];
        hi = lo + d[9] * 1000;
    }
    const char *s = (const char *)d + 17;
    size_t len = n - 17;
    long long got = 12345, want = 12345;
    number_result r = number_parse(s, len, lo, hi, &got), w = reference_number(s, len, lo, hi, &want);
    char detail[160];
    snprintf(detail, sizeof detail, "lo %lld hi %lld: number_parse %d (%lld), reference %d (%lld)", lo, hi, (int)r, got,
             (int)w, want);
    if (r != w || got != want) fuzz_fail("number_parse disagrees with the strtoll reference", detail);
    if (!number_problem(r)) fuzz_fail("number_problem returned NULL", NULL);
}

static void configs(const uint8_t *d, size_t n)
{
    char *text = text_of(d, n);
    gen_config c, again;
    if (gen_config_parse(text, &c) == SJ_OK) {
        if (c.n < 0 || c.n > GEN_MAX_PARAMS) fuzz_fail("gen_config_parse: parameter count out of range", text);
        char canon[GEN_MAX_PARAMS * 32], canon2[sizeof canon];
        gen_config_format(&c, canon, sizeof canon);
        if (gen_config_parse(canon, &again) != SJ_OK) fuzz_fail("the canonical form of an accepted config is refused", canon);
        if (again.n != c.n) fuzz_fail("the canonical form has another number of parameters", canon);
        for (int i = 0; i < c.n; i++) {
            int found = 0;
            for (int j = 0; j < again.n; j++)
                found |= !strcmp(c.names[i], again.names[j]) && c.values[i] == again.values[j];
            if (!found) fuzz_fail("a parameter changed in the canonical form", canon);
        }
        gen_config_format(&again, canon2, sizeof canon2);
        if (strcmp(canon, canon2)) fuzz_fail("formatting the canonical form changed it", canon2);
    } else if (!sj_last_error()[0]) {
        fuzz_fail("gen_config_parse refused a config without saying why", text);
    }
    free(text);
}

/* text without leading zeros and with "-0" as "0": what printing its value gives back. */
static void normalize_number(const char *s, size_t len, char *out, size_t cap)
{
    int neg = len && s[0] == '-';
    size_t i = (size_t)neg;
    while (i + 1 < len && s[i] == '0') i++;
    if (len - i == 1 && s[i] == '0') neg = 0;
    snprintf(out, cap, "%s%.*s", neg ? "-" : "", (int)(len - i), s + i);
}

static void fields(const uint8_t *d, size_t n)
{
    if (n < 1) return;
    const cli_fields *all[] = { &cli_shape_fields, &cli_vnm_fields, &cli_twell_fields };
    const cli_fields *f = all[d[0] % 3];
    char *text = text_of(d + 1, n - 1);
    long long v[3];
    char why[512];
    if (cli_parse_fields("--x", text, f, v, why, sizeof why)) {
        char printed[128] = "", normal[128] = "";
        size_t off = 0, noff = 0;
        const char *p = text;
        for (int i = 0; i < f->n; i++) {
            if (v[i] < f->fields[i].lo || v[i] > f->fields[i].hi) fuzz_fail("a field out of its range was accepted", text);
            off += (size_t)snprintf(printed + off, sizeof printed - off, "%s%lld", i ? (char[]){ f->sep, 0 } : "", v[i]);
            const char *end = i < f->n - 1 ? strchr(p, f->sep) : p + strlen(p);
            if (!end) fuzz_fail("accepted with a separator missing", text);
            char num[96];
            normalize_number(p, (size_t)(end - p), num, sizeof num);
            noff += (size_t)snprintf(normal + noff, sizeof normal - noff, "%s%s", i ? (char[]){ f->sep, 0 } : "", num);
            p = end + 1;
        }
        if (strcmp(printed, normal)) fuzz_fail("the fields read are not the text's numbers", text);
    } else if (!strstr(why, "--x '")) {
        fuzz_fail("a refused value's message does not name the option", why);
    }
    free(text);
}

static void problems(const uint8_t *d, size_t n)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 1, 1, 1);
    memcpy(&p, d, n < sizeof p ? n : sizeof p);
    char desc[256];
    memset(desc, 'x', sizeof desc);
    sj_status st = sj_problem_validate(&p);
    if (st != SJ_OK && !sj_last_error()[0]) fuzz_fail("sj_problem_validate refused a problem without saying why", NULL);
    sj_status ds = sj_problem_describe(&p, desc, sizeof desc);
    if (ds == SJ_OK && !memchr(desc, 0, sizeof desc)) fuzz_fail("sj_problem_describe left no terminating NUL", NULL);
    if (st == SJ_OK && ds != SJ_OK) fuzz_fail("a valid problem could not be described", sj_last_error());
}

static void names(const uint8_t *d, size_t n)
{
    char *text = text_of(d, n);
    sj_dtype dt, dt2;
    sj_op op, op2;
    sj_tune_strategy ts;
    size_t len = strlen(text);
    int word = len > 0 && len < 32;
    for (size_t i = 0; i < len; i++) word &= text[i] > ' ' && text[i] < 0x7f;
    if (sj_dtype_parse(text, &dt) == SJ_OK &&
        (!word || !sj_dtype_name(dt) || sj_dtype_parse(sj_dtype_name(dt), &dt2) != SJ_OK || dt2 != dt))
        fuzz_fail("sj_dtype_parse accepted a text that names no dtype", text);
    if (sj_op_parse(text, &op) == SJ_OK &&
        (!word || !sj_op_name(op) || sj_op_parse(sj_op_name(op), &op2) != SJ_OK || op2 != op))
        fuzz_fail("sj_op_parse accepted a text that names no op", text);
    if (sj_tune_strategy_parse(text, &ts) == SJ_OK && strcmp(text, "exhaustive") && strcmp(text, "random"))
        fuzz_fail("sj_tune_strategy_parse accepted a text that is not a strategy", text);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 5) {
    case 0: numbers(data + 1, size - 1); break;
    case 1: configs(data + 1, size - 1); break;
    case 2: fields(data + 1, size - 1); break;
    case 3: problems(data + 1, size - 1); break;
    default: names(data + 1, size - 1); break;
    }
    return 0;
}

static void emit_text(void (*emit)(const uint8_t *, size_t), uint8_t mode, int sub, const char *text)
{
    uint8_t buf[128];
    size_t n = 0, len = strlen(text);
    buf[n++] = mode;
    if (sub >= 0) buf[n++] = (uint8_t)sub;
    memcpy(buf + n, text, len);
    emit(buf, n + len);
}

void fuzz_make_seeds(void (*emit)(const uint8_t *, size_t))
{
    static const char *const config_texts[] = {
        "BM=128,BN=64,BK=32", "WN=32, BM=128,BK=-2", "BM=2147483647,BN=-2147483648", "STAGES=3888888888888888888",
        "A=1,B=2,C=3,D=4,E=5,F=6,G=7,H=8,I=9,J=10,K=11,L=12", "garbage;;;", ",,, BM=1 ,",
    };
    for (size_t i = 0; i < sizeof config_texts / sizeof config_texts[0]; i++) emit_text(emit, 1, -1, config_texts[i]);
    static const struct { int which; const char *text; } field_texts[] = {
        { 0, "4096x4096x4096" }, { 1, "64:2:8" }, { 2, "128:16" }, { 0, "0x1x1" }, { 1, "4294967360:2:8" },
        { 2, "-0:007" }, { 0, "64x64" },
    };
    for (size_t i = 0; i < sizeof field_texts / sizeof field_texts[0]; i++)
        emit_text(emit, 2, field_texts[i].which, field_texts[i].text);
    static const char *const name_texts[] = { "f16", "bf16", "vnm-spmm", "twell-ffn", "random", "exhaustive" };
    for (size_t i = 0; i < sizeof name_texts / sizeof name_texts[0]; i++) emit_text(emit, 4, -1, name_texts[i]);
    static const struct { long long lo, hi; const char *text; } nums[] = {
        { 1, 2147483647, "4096" }, { INT_MIN, INT_MAX, "-2147483648" }, { 0, 100, "5x" },
        { LLONG_MIN, LLONG_MAX, "9223372036854775807" }, { LLONG_MIN, LLONG_MAX, "-9223372036854775809" },
        { 1, 100, "-" }, { 1, 100, "007" },
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        uint8_t buf[64];
        size_t len = strlen(nums[i].text);
        buf[0] = 0;   /* numbers */
        buf[1] = 0;   /* lo and hi as given */
        memcpy(buf + 2, &nums[i].lo, 8);
        memcpy(buf + 10, &nums[i].hi, 8);
        memcpy(buf + 18, nums[i].text, len);
        emit(buf, 18 + len);
    }
    sj_problem p;
    uint8_t buf[1 + sizeof p];
    buf[0] = 3;
    sj_problem_init(&p, SJ_OP_VNM_SPMM, SJ_DTYPE_BF16, 4096, 4096, 4096);
    memcpy(buf + 1, &p, sizeof p);
    emit(buf, sizeof buf);
    sj_problem_init(&p, SJ_OP_TWELL_FFN, SJ_DTYPE_F16, 2048, 4096, 4096);
    p.d_ff = 11008;
    memcpy(buf + 1, &p, sizeof p);
    emit(buf, sizeof buf);
}
