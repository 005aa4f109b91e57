/* fuzz_cache_import.c: `sparsejit cache import` of a crafted file (tests/fuzz/fuzz.h). The input
 * is the file: it is written to a temporary folder and merged (cache_import) into a cache there,
 * for the arch, driver and NVRTC of the seeds' keys. Whatever the file holds, the import must
 * return (no crash, no sanitizer report, no hang: the driver's time bound would pass), and what it
 * took must be what it promises (cache/cache.h): every imported key lists with printable text, a
 * winner's median finite and > 0, its config NAME=INTEGER pairs, and its kernel, when stored,
 * loads with the winner's config. The seeds are exports of small caches made with the cache API. */
#include "tests/fuzz/fuzz.h"

#include "cache/cache.h"
#include "generator/generator.h"
#include "sparsejit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARCH "sm_90a"
#define DRIVER 13000
#define NVRTC 13000

static char dir[64];
static char src[128], dst[128];
static cache_db *db;
static int runs;
static long long imports, keys_taken, rows_refused;

void fuzz_report(char *line, size_t len)
{
    snprintf(line, len, "%lld imports ran to the end, taking %lld keys, refusing %lld invalid keys or rows", imports,
             keys_taken, rows_refused);
}

static void remove_files(void)
{
    if (db) cache_close(db);
    db = NULL;
    static const char *const suffixes[] = { "", "-wal", "-shm", "-journal", ".corrupt" };
    char p[160];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(p, sizeof p, "%s%s", src, suffixes[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s%s", dst, suffixes[i]);
        unlink(p);
    }
    if (dir[0]) rmdir(dir);
}

static void setup(void)
{
    if (dir[0]) return;
    snprintf(dir, sizeof dir, "/tmp/sparsejit-fuzz-XXXXXX");
    if (!mkdtemp(dir)) fuzz_fail("mkdtemp", NULL);
    snprintf(src, sizeof src, "%s/import.db", dir);
    snprintf(dst, sizeof dst, "%s/cache.db", dir);
    atexit(remove_files);
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

static int check_key(void *user, const cache_key *k, const cache_winner *w, int n_kernels, int n_trials)
{
    char text[2048];
    cache_key_text(k, text, sizeof text);
    if (!printable(text)) fuzz_fail("an imported key holds a control character", NULL);
    if (strcmp(k->arch, ARCH) || k->driver_version != DRIVER || k->nvrtc_version != NVRTC)
        fuzz_fail("a key for another arch, driver or NVRTC was imported", text);
    if (n_kernels < 0 || n_trials < 0) fuzz_fail("negative counts", text);
    if (!w) return 0;
    if (!(isfinite(w->median_us) && w->median_us > 0)) fuzz_fail("an imported winner has no positive time", text);
    gen_config c;
    if (!printable(w->config) || !printable(w->strategy) || gen_config_parse(w->config, &c) != SJ_OK)
        fuzz_fail("an imported winner's config is not NAME=INTEGER pairs", w->config);
    cache_kernel kern;
    sj_status st = cache_get_kernel(db, k, w->config, &kern);
    if (st == SJ_OK) {
        if (strcmp(kern.config, w->config)) fuzz_fail("the winner's kernel has another config", kern.config);
        free(kern.cubin);
    } else if (st != SJ_ERR_NOT_FOUND) {
        fuzz_fail("the winner's kernel cannot be read", sj_last_error());
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (!db || ++runs % 256 == 0) { /* a fresh cache now and then: the merged rows stay few */
        remove_files();
        if (mkdir(dir, 0700) != 0 && access(dir, F_OK) != 0) fuzz_fail("mkdir", dir);
        if (cache_open(dst, NULL, NULL, &db) != SJ_OK) fuzz_fail("cache_open", sj_last_error());
    }
    FILE *f = fopen(src, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) fuzz_fail("cannot write the input file", src);
    int imported = -1, refused = -1, invalid = -1;
    char why[512] = "";
    sj_status st = cache_import(db, src, ARCH, DRIVER, NVRTC, &imported, &refused, &invalid, why, sizeof why);
    if (st != SJ_OK && !sj_last_error()[0]) fuzz_fail("cache_import failed without saying why", NULL);
    if (st == SJ_OK && (imported < 0 || refused < 0 || invalid < 0)) fuzz_fail("cache_import's counts were not set", NULL);
    if (st == SJ_OK && invalid > 0 && !why[0]) fuzz_fail("cache_import refused rows without saying why", NULL);
    if (st == SJ_OK) {
        imports++;
        keys_taken += imported;
        rows_refused += invalid;
    }
    if (cache_list(db, check_key, NULL) != SJ_OK) fuzz_fail("the cache cannot be listed after an import", sj_last_error());
    unlink(src);
    return 0;
}

/* ---------------------------------------------------------------- seeds: real exports */

static void put_entry(cache_db *c, int i, const char *config, double median)
{
    cache_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "NVIDIA H200");
    snprintf(k.arch, sizeof k.arch, i == 2 ? "sm_80" : ARCH); /* one key for another arch: refused */
    k.sm_count = 132;
    k.driver_version = DRIVER;
    k.nvrtc_version = NVRTC;
    snprintf(k.template_name, sizeof k.template_name, "vnm_spmm");
    for (int j = 0; j < 64; j++) k.template_hash[j] = "0123456789abcdef"[(j * 7 + i) % 16];
    snprintf(k.op, sizeof k.op, "vnm-spmm");
    snprintf(k.dtype, sizeof k.dtype, "f16");
    snprintf(k.out_dtype, sizeof k.out_dtype, "f16");
    k.m = 256 << i;
    k.n = 128;
    k.k = 512;
    snprintf(k.sparsity, sizeof k.sparsity, "V=64,NS=2,MS=8");
    cache_kernel kern;
    memset(&kern, 0, sizeof kern);
    snprintf(kern.config, sizeof kern.config, "%s", config);
    snprintf(kern.entry, sizeof kern.entry, "sj_vnm_spmm_%d", i);
    for (int j = 0; j < 3; j++) {
        kern.grid[j] = 4u << j;
        kern.block[j] = j ? 1 : 128;
    }
    kern.shared_bytes = 49152;
    unsigned char cubin[96];
    for (size_t j = 0; j < sizeof cubin; j++) cubin[j] = (unsigned char)(j * 31 + (size_t)i);
    kern.cubin = cubin;
    kern.cubin_size = sizeof cubin;
    kern.compile_seconds = 0.25;
    cache_trial t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].config, sizeof t[0].config, "%s", config);
    snprintf(t[0].status, sizeof t[0].status, "ok");
    t[0].median_us = median;
    t[0].p20_us = median * 0.98;
    t[0].p80_us = median * 1.03;
    t[0].tflops = 100;
    t[0].compile_seconds = 0.25;
    snprintf(t[1].config, sizeof t[1].config, "BM=64,BN=64");
    snprintf(t[1].status, sizeof t[1].status, "wrong-result");
    t[1].median_us = NAN;
    cache_winner w;
    memset(&w, 0, sizeof w);
    snprintf(w.config, sizeof w.config, "%s", config);
    snprintf(w.strategy, sizeof w.strategy, "random");
    w.median_us = median;
    w.tflops = 100;
    w.tuned_at = 1700000000;
    if (cache_put_tuning(c, &k, t, 2, &w, &kern, 0) != SJ_OK) fuzz_fail("seed: cache_put_tuning", sj_last_error());
}

void fuzz_make_seeds(void (*emit)(const uint8_t *, size_t))
{
    setup();
    char made[160], out[160];
    snprintf(made, sizeof made, "%s/made.db", dir);
    snprintf(out, sizeof out, "%s/export.db", dir);
    for (int keys = 1; keys <= 3; keys += 2) {
        cache_db *c;
        if (cache_open(made, NULL, NULL, &c) != SJ_OK) fuzz_fail("seed: cache_open", sj_last_error());
        for (int i = 0; i < keys; i++) put_entry(c, i, i ? "BM=128,BN=128,STAGES=3" : "BM=64,BN=128", 12.5 + i);
        int n;
        if (cache_export(c, out, NULL, NULL, &n) != SJ_OK) fuzz_fail("seed: cache_export", sj_last_error());
        cache_close(c);
        FILE *f = fopen(out, "rb");
        static uint8_t buf[1 << 20];
        size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        if (!len) fuzz_fail("seed: cannot read the export", out);
        emit(buf, len);
        unlink(out);
        unlink(made);
        char side[200];
        snprintf(side, sizeof side, "%s-wal", made);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", made);
        unlink(side);
    }
}
