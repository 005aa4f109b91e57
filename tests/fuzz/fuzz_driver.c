/* fuzz_driver.c: runs a libFuzzer-style target (LLVMFuzzerTestOneInput, one per fuzz_*.c) where
 * libFuzzer is not: every seed of the corpus first, then random mutations of them for a bounded
 * time (or number of runs). The mutations come from a seeded generator, so a run is replayable:
 * the same --seed gives the same inputs in the same order. No coverage guidance: the seeds (valid
 * inputs of each parser, tests/fuzz/corpus/) put the mutations where the checks are. A crash, a
 * sanitizer report or a failed check of the target aborts, and the input that did it is written
 * to fuzz-crash-<target>.bin in the current folder (replay: fuzz_<target> that file).
 *
 *   fuzz_<target> [--seconds S] [--runs N] [--seed X] [--max-len N] CORPUS_DIR_OR_FILE...
 *   fuzz_<target> --write-seeds DIR     the target's own seeds (fuzz_make_seeds) into DIR
 */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The sanitizers call this before they end the process (weak: absent without them). */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

typedef struct input { uint8_t *data; size_t len; } input;

static const char *target_name = "target";
static const uint8_t *current;
static size_t current_len;
static volatile sig_atomic_t saving;

/* Writes the input being run; only async-signal-safe calls (it also runs from a signal). */
static void save_current(void)
{
    if (saving || !current) return;
    saving = 1;
    char path[256] = "fuzz-crash-";
    size_t n = strlen(path), t = strlen(target_name);
    if (n + t + 5 < sizeof path) {
        memcpy(path + n, target_name, t);
        memcpy(path + n + t, ".bin", 5);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        for (size_t off = 0; off < current_len;) {
            ssize_t w = write(fd, current + off, current_len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        static const char msg[] = "fuzz: the failing input is in ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, path, strlen(path));
        (void)!write(2, "\n", 1);
    }
}

static void on_signal(int sig)
{
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

void fuzz_fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz %s: check failed: %s%s%s\n", target_name, what, detail ? ": " : "", detail ? detail : "");
    save_current();
    abort();
}

/* splitmix64: the mutations' only source of randomness (any seed, 0 included, is a good one). */
static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static int read_file(const char *path, input *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; }
            else b = nb;
        }
    }
    fclose(f);
    if (!b) return 0;
    out->data = b;
    out->len = len;
    return 1;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the file at path, or every regular file of the folder at path in name order. */
static int add_corpus(const char *path, input **seeds, size_t *n, size_t *cap)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "fuzz %s: %s: %s\n", target_name, path, strerror(errno));
        return 0;
    }
    char **names = NULL;
    size_t n_names = 0;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char **nn = realloc(names, (n_names + 1) * sizeof *names);
            if (!nn) break;
            names = nn;
            size_t len = strlen(path) + strlen(e->d_name) + 2;
            names[n_names] = malloc(len);
            snprintf(names[n_names++], len, "%s/%s", path, e->d_name);
        }
        closedir(d);
        qsort(names, n_names, sizeof *names, by_name);
    } else {
        names = malloc(sizeof *names);
        names[0] = strdup(path);
        n_names = 1;
    }
    for (size_t i = 0; i < n_names; i++) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            *seeds = realloc(*seeds, *cap * sizeof **seeds);
        }
        if (read_file(names[i], &(*seeds)[*n])) (*n)++;
        else fprintf(stderr, "fuzz %s: cannot read %s\n", target_name, names[i]);
        free(names[i]);
    }
    free(names);
    return 1;
}

/* One to four edits of buf (len bytes, room for max): bit flips, bytes set to values parsers
 * treat specially, inserted and deleted runs, a run copied elsewhere, a run of another seed. */
static size_t mutate(uint8_t *buf, size_t len, size_t max, const input *seeds, size_t n_seeds)
{
    static const uint8_t special[] = { 0, 1, 0x7f, 0x80, 0xff, '0', '1', '9', '-', '+', ',', '=', ':', 'x', ' ', '.' };
    static const int64_t wide[] = { 0, 1, -1, 2, 16, 64, 127, 128, 255, 256, 32767, 65535, 65536, INT32_MAX,
                                    INT32_MIN, (int64_t)1 << 32, INT64_MAX, INT64_MIN };
    int edits = 1 + (int)below(4);
    for (int e = 0; e < edits; e++) {
        size_t pos = below(len + 1);
        switch (below(8)) {
        case 0:
            if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
            break;
        case 1:
            if (len) buf[below(len)] = special[below(sizeof special)];
            break;
        case 2:
            if (len) buf[below(len)] = (uint8_t)rnd();
            break;
        case 3: { /* insert 1..8 bytes */
            size_t k = 1 + below(8);
            if (len + k > max) break;
            memmove(buf + pos + k, buf + pos, len - pos);
            for (size_t i = 0; i < k; i++) buf[pos + i] = below(2) ? special[below(sizeof special)] : (uint8_t)rnd();
            len += k;
            break;
        }
        case 4: { /* delete a run */
            if (pos >= len) break;
            size_t k = 1 + below(len - pos < 16 ? len - pos : 16);
            memmove(buf + pos, buf + pos + k, len - pos - k);
            len -= k;
            break;
        }
        case 5: { /* a 1, 2, 4 or 8-byte little-endian integer set to a boundary value */
            size_t w = (size_t)1 << below(4);
            if (len < w) break;
            int64_t v = wide[below(sizeof wide / sizeof wide[0])];
            memcpy(buf + below(len - w + 1), &v, w);
            break;
        }
        case 6: { /* copy a run of this input over another place */
            if (len < 2) break;
            size_t from = below(len), k = 1 + below(len - from < 32 ? len - from : 32);
            size_t to = below(len - k + 1);
            memmove(buf + to, buf + from, k);
            break;
        }
        default: { /* splice: a run of another seed inserted here */
            const input *o = &seeds[below(n_seeds)];
            if (!o->len) break;
            size_t from = below(o->len), k = 1 + below(o->len - from < 64 ? o->len - from : 64);
            if (len + k > max) break;
            memmove(buf + pos + k, buf + pos, len - pos);
            memcpy(buf + pos, o->data + from, k);
            len += k;
            break;
        }
        }
    }
    return len;
}

/* Runs one input from a buffer of exactly its size, so that a read past it is a sanitizer report. */
static void run_one(const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len) memcpy(copy, data, len);
    current = copy;
    current_len = len;
    LLVMFuzzerTestOneInput(copy, len);
    current = NULL;
    free(copy);
}

static const char *write_dir;
static int written;
static void write_seed(const uint8_t *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%03d", write_dir, written++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "fuzz %s: cannot write %s\n", target_name, path);
        exit(1);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int usage(void)
{
    fprintf(stderr, "usage: fuzz_%s [--seconds S] [--runs N] [--seed X] [--max-len N] CORPUS_DIR_OR_FILE...\n"
                    "       fuzz_%s --write-seeds DIR\n", target_name, target_name);
    return 2;
}

int main(int argc, char **argv)
{
    const char *slash = strrchr(argv[0], '/');
    target_name = slash ? slash + 1 : argv[0];
    if (!strncmp(target_name, "fuzz_", 5)) target_name += 5;
    double seconds = 5;
    long long runs = -1;
    unsigned long long seed = 1;
    size_t max_len = 0;
    input *seeds = NULL;
    size_t n_seeds = 0, cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--write-seeds") && v) {
            write_dir = v;
            if (!fuzz_make_seeds) {
                fprintf(stderr, "fuzz %s: this target makes no seeds of its own\n", target_name);
                return 2;
            }
            fuzz_make_seeds(write_seed);
            printf("fuzz %s: wrote %d seeds to %s\n", target_name, written, v);
            return 0;
        } else if (!strcmp(a, "--seconds") && v) {
            seconds = strtod(v, &end);
            if (*end || !(seconds >= 0 && seconds <= 86400)) return usage();
            i++;
        } else if (!strcmp(a, "--runs") && v) {
            runs = strtoll(v, &end, 10);
            if (*end || runs < 0) return usage();
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            seed = strtoull(v, &end, 10);
            if (*end) return usage();
            i++;
        } else if (!strcmp(a, "--max-len") && v) {
            max_len = (size_t)strtoull(v, &end, 10);
            if (*end || !max_len) return usage();
            i++;
        } else if (a[0] == '-') {
            return usage();
        } else if (!add_corpus(a, &seeds, &n_seeds, &cap)) {
            return 2;
        }
    }
    if (!n_seeds) return usage();
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current);
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGABRT, on_signal);
    setvbuf(stdout, NULL, _IONBF, 0);

    double t0 = now_s();
    for (size_t i = 0; i < n_seeds; i++) run_one(seeds[i].data, seeds[i].len);
    size_t longest = 0;
    for (size_t i = 0; i < n_seeds; i++) longest = seeds[i].len > longest ? seeds[i].len : longest;
    if (!max_len) max_len = longest * 2 > 4096 ? longest * 2 : 4096;
    uint8_t *buf = malloc(max_len);
    rng_state = seed;
    long long done = 0;
    while (runs < 0 ? now_s() - t0 < seconds : done < runs) {
        const input *s = &seeds[below(n_seeds)];
        size_t len = s->len < max_len ? s->len : max_len;
        memcpy(buf, s->data, len);
        len = mutate(buf, len, max_len, seeds, n_seeds);
        run_one(buf, len);
        done++;
    }
    char line[256] = "";
    if (fuzz_report) fuzz_report(line, sizeof line);
    printf("fuzz %s: %zu seeds and %lld mutated inputs (seed %llu) in %.1f s: no failure%s%s\n", target_name, n_seeds,
           done, seed, now_s() - t0, line[0] ? "; " : "", line);
    free(buf);
    for (size_t i = 0; i < n_seeds; i++) free(seeds[i].data);
    free(seeds);
    return 0;
}
