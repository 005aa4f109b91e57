/* test_util.c: helpers shared by the cmocka tests (see test_util.h). */
#include "test_util.h"
#include "generator/generator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t tu_seed(void)
{
    const char *env = getenv("SJ_TEST_SEED");
    uint64_t s = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) * 2654435761u) ^ (uint64_t)getpid();
    fprintf(stderr, "# seed %llu (SJ_TEST_SEED to replay)\n", (unsigned long long)s);
    return s ? s : 1;
}

double tu_uniform(uint64_t *state)
{
    /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *state = x;
    return (double)((x * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t tu_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float tu_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t tu_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
    return (uint16_t)half;
}

float tu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    if (exp == 0) {
        if (!mant) return bits_f32(sign);
        float f = (float)mant / 1024.0f / 16384.0f;
        return sign ? -f : f;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t tu_to16(sj_dtype dt, float f) { return dt == SJ_DTYPE_BF16 ? tu_f32_to_bf16(f) : tu_f32_to_f16(f); }
float tu_from16(sj_dtype dt, uint16_t h) { return dt == SJ_DTYPE_BF16 ? tu_bf16_to_f32(h) : tu_f16_to_f32(h); }

void tu_fill16(sj_dtype dt, uint16_t *x, size_t n, float scale, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) x[i] = tu_to16(dt, (float)(tu_uniform(state) * scale));
}

void tu_random_vnm(sj_context *ctx, sj_dtype dt, int v, int m, int64_t rows, int64_t cols, uint64_t *rng, sj_vnm_host *h,
                   sj_vnm_device *d)
{
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, m, rows, cols));
    uint16_t *A = malloc((size_t)(rows * cols) * 2);
    assert_non_null(A);
    tu_fill16(dt, A, (size_t)(rows * cols), 1.0f, rng);
    SJ_ASSERT_OK(sj_vnm_compress(&l, A, cols, SJ_VNM_PRUNE_L2, h));
    free(A);
    if (d) SJ_ASSERT_OK(sj_vnm_upload(ctx, h, d));
}

double tu_load(sj_dtype dt, const void *buf, size_t i)
{
    if (dt == SJ_DTYPE_F32) return ((const float *)buf)[i];
    return tu_from16(dt, ((const uint16_t *)buf)[i]);
}

void tu_ref_gemm16(sj_dtype dt, const uint16_t *A, const uint16_t *B, double *C,
                   int64_t m, int64_t n, int64_t k)
{
    double *arow = malloc(sizeof(double) * (size_t)k);
    double *bd = malloc(sizeof(double) * (size_t)(k * n));
    for (int64_t i = 0; i < k * n; i++) bd[i] = tu_from16(dt, B[i]);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t p = 0; p < k; p++) arow[p] = tu_from16(dt, A[i * k + p]);
        double *c = C + i * n;
        for (int64_t j = 0; j < n; j++) c[j] = 0;
        for (int64_t p = 0; p < k; p++) {
            double a = arow[p];
            if (a == 0) continue;
            const double *b = bd + p * n;
            for (int64_t j = 0; j < n; j++) c[j] += a * b[j];
        }
    }
    free(arow);
    free(bd);
}

double tu_rel_error(sj_dtype out_dt, const void *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double o = tu_load(out_dt, out, i);
        if (!isfinite(o)) return INFINITY;
        num += (o - ref[i]) * (o - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

sj_context *tu_gpu_context(void)
{
    static sj_context *ctx;
    static int tried;
    if (!tried) {
        tried = 1;
        sj_context_options o;
        sj_context_options_init(&o);
        o.require_gpu = 1;
        if (sj_context_create(&o, &ctx) != SJ_OK) {
            fprintf(stderr, "# SKIP GPU test: %s\n", sj_last_error());
            ctx = NULL;
        }
    } else if (!ctx) {
        fprintf(stderr, "# SKIP GPU test: no GPU (see above)\n");
    }
    return ctx;
}

sj_context *tu_compile_context(const char *arch)
{
    sj_context_options o;
    sj_context_options_init(&o);
    o.arch = arch;
    o.cache_path = "";
    sj_context *ctx = NULL;
    if (sj_context_create(&o, &ctx) != SJ_OK) return NULL;
    return ctx;
}

const char *tu_cuobjdump(void)
{
    static char path[1024];
    const char *env = getenv("CUOBJDUMP");
    if (env && access(env, X_OK) == 0) return env;
    const char *candidates[] = { "/usr/local/cuda/bin/cuobjdump", "/usr/bin/cuobjdump" };
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++)
        if (access(candidates[i], X_OK) == 0) return candidates[i];
    FILE *p = popen("python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], \"cu13\", \"bin\", \"cuobjdump\"))' 2>/dev/null", "r");
    if (p) {
        if (fgets(path, sizeof path, p)) {
            path[strcspn(path, "\n")] = 0;
            pclose(p);
            if (access(path, X_OK) == 0) return path;
        } else {
            pclose(p);
        }
    }
    return NULL;
}

const char *tu_tempdir(void)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/sparsejit-test-XXXXXX");
    if (!mkdtemp(dir)) return NULL;
    return dir;
}

const char *tu_source_dir(void)
{
    const char *env = getenv("SJ_SOURCE_DIR");
    return env && env[0] ? env : SJ_SOURCE_DIR;
}

static int skipped_for_gpu;

void tu_note_skip(void) { skipped_for_gpu = 1; }

int tu_exit_code(int failed)
{
    if (failed) return 1;
    if (skipped_for_gpu) {
        fprintf(stderr, "# some tests were skipped: no GPU (exit 77 = skipped for ctest)\n");
        return 77;
    }
    return 0;
}

char *tu_sass(const void *cubin, size_t size)
{
    const char *tool = tu_cuobjdump();
    if (!tool) {
        fprintf(stderr, "# SKIP SASS check: no cuobjdump (set $CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)\n");
        tu_note_skip();
        return NULL;
    }
    const char *dir = tu_tempdir();
    assert_non_null(dir);
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/kernel.cubin", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(cubin, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "'%s' --dump-sass '%s' 2>&1", tool, path);
    FILE *pp = popen(cmd, "r");
    assert_non_null(pp);
    size_t cap = 1 << 20, len = 0, r;
    char *text = malloc(cap);
    assert_non_null(text);
    while ((r = fread(text + len, 1, cap - len - 1, pp)) > 0) {
        len += r;
        if (len + 1 == cap) {
            cap *= 2;
            text = realloc(text, cap);
            assert_non_null(text);
        }
    }
    text[len] = 0;
    int rc = pclose(pp);
    remove(path);
    rmdir(dir);
    if (rc != 0 && strstr(text, "nvdisasm")) {
        /* cuobjdump disassembles through nvdisasm, a separate package */
        fprintf(stderr, "# SKIP SASS check: cuobjdump cannot disassemble without nvdisasm "
                        "(pip install nvidia-cuda-nvdisasm): %.200s\n", text);
        free(text);
        tu_note_skip();
        return NULL;
    }
    if (rc != 0) fail_msg("%s failed (%d): %.500s", cmd, rc, text);
    return text;
}

int tu_config_value(const char *config, const char *name)
{
    gen_config c;
    if (gen_config_parse(config, &c) != SJ_OK) fail_msg("config '%s': %s", config, sj_last_error());
    for (int i = 0; i < c.n; i++)
        if (!strcmp(c.names[i], name)) return c.values[i];
    return -1;
}

void tu_expect_refused(sj_context *ctx, const sj_problem *p, const char *config, const char *needle)
{
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, p, config, &g), SJ_ERR_INVALID_ARGUMENT, needle);
    assert_null(g);
}

int tu_count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        n += memmem(line, len, needle, strlen(needle)) != NULL;
    }
    return n;
}
