/* fuzz_formats.c: the host format checks that read data a caller hands over (tests/fuzz/fuzz.h):
 * sj_vnm_decompress, sj_twell_to_dense and sj_hybrid_to_dense (with sj_hybrid_report_host) on
 * arrays filled from the input. An input is an 8-byte header, then the arrays' bytes in order
 * (the rest zero):
 *   [0] format: 0 V:N:M, 1 TwELL, 2 hybrid    [1] dtype: even f16, odd bf16
 *   [2] rows - 1 (1..32)    [3..4] cols - 1 (1..512, little-endian, mod 512)
 *   [5], [6]: V:N:M: V = 16 << ([5] % 4), M = 4 + [6] % 13; TwELL: T = 8 << ([5] % 5),
 *             C = 1 + [6] % T; hybrid: W = 1 + [5] % cols, backup rows = [6] % (rows + 1)
 *   [7]: the dense matrix's row stride is cols + [7] % 4; hybrid: the counter is [7] >> 2
 * Every array is allocated at exactly its layout's size, so a read past one is an ASan report.
 * Where the check accepts the data, the dense matrix it wrote must survive the round trip: to
 * the format again (sj_vnm_compress exact, sj_twell_from_dense, sj_hybrid_from_dense) and back
 * gives the same values (a zero's sign aside). */
#include "tests/fuzz/fuzz.h"

#include "sparsejit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long tried[3], accepted[3]; /* per format */

void fuzz_report(char *line, size_t len)
{
    snprintf(line, len, "accepted V:N:M %lld of %lld, TwELL %lld of %lld, hybrid %lld of %lld", accepted[0], tried[0],
             accepted[1], tried[1], accepted[2], tried[2]);
}

typedef struct reader { const uint8_t *d; size_t n, off; } reader;

/* An array of size bytes, filled from the input while it lasts, zero after. */
static void *take(reader *r, size_t size)
{
    uint8_t *a = malloc(size ? size : 1);
    size_t k = r->off < r->n ? r->n - r->off : 0;
    if (k > size) k = size;
    memcpy(a, r->d + r->off, k);
    memset(a + k, 0, size - k);
    r->off += k;
    return a;
}

static void need_reason(sj_status st, const char *what)
{
    if (st != SJ_OK && !sj_last_error()[0]) fuzz_fail(what, "refused without saying why");
}

/* Equal bits, or both zero: V:N:M may keep a -0 where its round trip writes +0. */
static void same_dense(const uint16_t *a, const uint16_t *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && ((a[i] | b[i]) & 0x7fff)) fuzz_fail(what, "the round trip changed the dense matrix");
}

/* One format's calls on its host struct: decode writes the dense matrix (the check under test),
 * encode makes a host struct of the same layout from a dense matrix, release frees one. */
typedef sj_status (*decode_fn)(const void *host, uint16_t *dense, int64_t ld);
typedef sj_status (*encode_fn)(const void *host, const uint16_t *dense, int64_t ld, void *out);
typedef void (*release_fn)(void *host);
typedef struct format { const char *name; decode_fn decode; encode_fn encode; release_fn release; } format;

/* Decodes host; where the check accepts it, encoding the dense matrix and decoding that must give
 * the same values. */
static void round_trip(int f, const format *fmt, const void *host, int64_t rows, int64_t ld)
{
    size_t n = (size_t)(rows * ld);
    uint16_t *dense = calloc(n, 2), *again = calloc(n, 2);
    sj_status st = fmt->decode(host, dense, ld);
    tried[f]++;
    accepted[f] += st == SJ_OK;
    need_reason(st, fmt->name);
    if (st == SJ_OK) {
        union { sj_vnm_host v; sj_twell_host t; sj_hybrid_host h; } y;
        if (fmt->encode(host, dense, ld, &y) != SJ_OK) fuzz_fail(fmt->name, sj_last_error());
        if (fmt->decode(&y, again, ld) != SJ_OK) fuzz_fail(fmt->name, sj_last_error());
        fmt->release(&y);
        same_dense(dense, again, n, fmt->name);
    }
    free(dense);
    free(again);
}

static sj_status vnm_decode(const void *x, uint16_t *dense, int64_t ld) { return sj_vnm_decompress(x, dense, ld); }
/* the decompressed matrix has the pattern: it compresses exactly */
static sj_status vnm_encode(const void *x, const uint16_t *dense, int64_t ld, void *out)
{
    const sj_vnm_layout *l = &((const sj_vnm_host *)x)->layout;
    if (sj_vnm_check(l, dense, ld) != SJ_OK) return SJ_ERR_PATTERN;
    return sj_vnm_compress(l, dense, ld, SJ_VNM_EXACT, out);
}
static void vnm_release(void *h) { sj_vnm_host_free(h); }

static sj_status twell_decode(const void *x, uint16_t *dense, int64_t ld)
{
    (void)sj_twell_overflow_tiles(x);
    return sj_twell_to_dense(x, dense, ld);
}
static sj_status twell_encode(const void *x, const uint16_t *dense, int64_t ld, void *out)
{
    return sj_twell_from_dense(&((const sj_twell_host *)x)->layout, dense, ld, out, NULL);
}
static void twell_release(void *h) { sj_twell_host_free(h); }

static sj_status hybrid_decode(const void *x, uint16_t *dense, int64_t ld)
{
    sj_hybrid_report rep;
    need_reason(sj_hybrid_report_host(x, &rep), "sj_hybrid_report_host");
    return sj_hybrid_to_dense(x, dense, ld);
}
static sj_status hybrid_encode(const void *x, const uint16_t *dense, int64_t ld, void *out)
{
    return sj_hybrid_from_dense(&((const sj_hybrid_host *)x)->layout, dense, ld, out, NULL);
}
static void hybrid_release(void *h) { sj_hybrid_host_free(h); }

static const format formats[] = {
    { "V:N:M", vnm_decode, vnm_encode, vnm_release },
    { "TwELL", twell_decode, twell_encode, twell_release },
    { "hybrid", hybrid_decode, hybrid_encode, hybrid_release },
};

/* A host matrix of any of the three formats (f: 0 V:N:M, 1 TwELL, 2 hybrid). */
typedef union host { sj_vnm_host v; sj_twell_host t; sj_hybrid_host h; } host;

/* The matrix's geometry from the input's header. */
typedef struct geometry { int f; sj_dtype dt; int64_t rows, cols, ld; } geometry;
static geometry geometry_of(const uint8_t h[8])
{
    int64_t cols = 1 + (h[3] | h[4] << 8) % 512;
    return (geometry){ h[0] % 3, h[1] & 1 ? SJ_DTYPE_BF16 : SJ_DTYPE_F16, 1 + h[2] % 32, cols, cols + h[7] % 4 };
}

/* x's layout from the header. */
static void layout_of(const uint8_t h[8], const geometry *g, host *x)
{
    memset(x, 0, sizeof *x);
    int tile = 8 << (h[5] % 5);
    sj_status st = g->f == 0 ? sj_vnm_layout_init(&x->v.layout, g->dt, 16 << (h[5] % 4), 2, 4 + h[6] % 13, g->rows, g->cols)
                 : g->f == 1 ? sj_twell_layout_init(&x->t.layout, g->dt, g->rows, g->cols, tile, 1 + h[6] % tile)
                 : sj_hybrid_layout_init(&x->h.layout, g->dt, g->rows, g->cols, 1 + (int)(h[5] % g->cols), h[6] % (g->rows + 1));
    if (st != SJ_OK) fuzz_fail("a layout init refused a valid layout", sj_last_error());
}

static int copy_arrays(void **where[6], size_t size[6], void **const w[], const size_t s[], int n)
{
    memcpy(where, w, (size_t)n * sizeof *w);
    memcpy(size, s, (size_t)n * sizeof *s);
    return n;
}

/* x's arrays, in the input's order: where each pointer is and its size. Returns how many. */
static int arrays_of(int f, host *x, void **where[6], size_t size[6])
{
    const sj_vnm_layout *v = &x->v.layout;
    const sj_twell_layout *t = &x->t.layout;
    const sj_hybrid_layout *h = &x->h.layout;
    if (f == 0)
        return copy_arrays(where, size, (void **[]){ (void **)&x->v.values, (void **)&x->v.meta, (void **)&x->v.index },
                           (size_t[]){ v->values_bytes, v->meta_bytes, v->index_bytes }, 3);
    if (f == 1)
        return copy_arrays(where, size, (void **[]){ (void **)&x->t.entries, (void **)&x->t.counts, (void **)&x->t.spill },
                           (size_t[]){ t->entries_bytes, t->counts_bytes, t->spill_bytes }, 3);
    return copy_arrays(where, size,
                       (void **[]){ (void **)&x->h.values, (void **)&x->h.columns, (void **)&x->h.nnz, (void **)&x->h.slot,
                                    (void **)&x->h.owner, (void **)&x->h.backup },
                       (size_t[]){ h->values_bytes, h->columns_bytes, h->nnz_bytes, h->slot_bytes, h->owner_bytes,
                                   h->backup_bytes }, 6);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    geometry g = geometry_of(data);
    host x;
    layout_of(data, &g, &x);
    if (g.f == 2) x.h.counter = data[7] >> 2;
    reader r = { data, size, 8 };
    void **where[6];
    size_t sizes[6];
    for (int i = 0, n = arrays_of(g.f, &x, where, sizes); i < n; i++) *where[i] = take(&r, sizes[i]);
    round_trip(g.f, &formats[g.f], &x, g.rows, g.ld);
    formats[g.f].release(&x);
    return 0;
}

/* ---------------------------------------------------------------- seeds: valid encodings */

static uint64_t seed_state = 88172645463325252ull;
static unsigned seed_rand(void)
{
    seed_state ^= seed_state << 13;
    seed_state ^= seed_state >> 7;
    seed_state ^= seed_state << 17;
    return (unsigned)(seed_state >> 32);
}

void fuzz_make_seeds(void (*emit)(const uint8_t *, size_t))
{
    /* header: format, dtype, rows - 1, cols - 1 (2 bytes), two parameters, stride/counter */
    static const uint8_t headers[][8] = {
        { 0, 0, 15, 63, 0, 0, 4, 0 },    /* V:N:M 16:2:8, 16 x 64, f16 */
        { 0, 1, 7, 39, 0, 1, 0, 1 },     /* 32:2:4, 8 x 40 (a ragged group), bf16, stride 41 */
        { 1, 0, 3, 63, 0, 1, 3, 0 },     /* TwELL T = 16, C = 4, 4 x 64 */
        { 1, 1, 5, 99, 0, 0, 1, 2 },     /* T = 8, C = 2 (tiles overflow), 6 x 100 */
        { 2, 0, 7, 63, 0, 3, 8, 0 },     /* hybrid W = 4, 8 backup rows, 8 x 64 */
        { 2, 1, 3, 31, 0, 1, 4, 1 },     /* W = 2, 4 backup rows, 4 x 32, stride 33 */
    };
    static const int per_mille[] = { 900, 150, 80 }; /* non-zeros: V:N:M prunes, the others keep all */
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        uint8_t h[8];
        memcpy(h, headers[i], 8);
        geometry g = geometry_of(h);
        host l, x;
        layout_of(h, &g, &l);
        uint16_t *a = calloc((size_t)(g.rows * g.ld), 2); /* small values of both signs */
        for (int64_t j = 0; j < g.rows * g.ld; j++)
            if ((int)(seed_rand() % 1000) < per_mille[g.f]) a[j] = (uint16_t)(0x3c00 + seed_rand() % 0x400) ^ (seed_rand() & 0x8000);
        sj_status st = g.f == 0 ? sj_vnm_compress(&l.v.layout, a, g.ld, SJ_VNM_PRUNE_L2, &x.v)
                                : formats[g.f].encode(&l, a, g.ld, &x);
        if (st != SJ_OK) fuzz_fail("seed", sj_last_error());
        if (g.f == 2) { /* the input's layout is the header's: a backup that grew does not fit it */
            if (x.h.layout.backup_rows != l.h.layout.backup_rows || x.h.counter > 63)
                fuzz_fail("hybrid seed", "the backup grew or the counter does not fit the header: pick another");
            h[7] = (uint8_t)(x.h.counter << 2 | h[7] % 4);
        }
        void **where[6];
        size_t sizes[6], total = 8;
        int n = arrays_of(g.f, &x, where, sizes);
        for (int j = 0; j < n; j++) total += sizes[j];
        uint8_t *buf = malloc(total), *p = buf + 8;
        memcpy(buf, h, 8);
        for (int j = 0; j < n; j++) {
            memcpy(p, *where[j], sizes[j]);
            p += sizes[j];
        }
        emit(buf, total);
        free(buf);
        formats[g.f].release(&x);
        free(a);
    }
}
