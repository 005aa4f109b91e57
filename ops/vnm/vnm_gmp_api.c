/* vnm_gmp_api.c: gradual magnitude pruning on the device (docs/training.md): one pruning step of
 * a dense W and its mask, bit for bit sj_gmp_prune_host (vnm_gmp.c), as the stages of
 * templates/gmp_prune.lua around the existing compressor, and the re-compression of both
 * copies (forward and double-pruned) from the pruned W. Nothing is allocated and nothing waits:
 * the host computes the schedule's target, the device everything that depends on W. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/vnm/vnm_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { HIST_BINS = 32768, CHUNK = 16 * 256 }; /* gmp_prune.lua: 15-bit keys; ROUNDS x THREADS */

static size_t up16(size_t b) { return (b + 15) & ~(size_t)15; }

/* The workspace, in order: U (the survivors, dense), the pattern's compressed arrays (the
 * largest of V:2:M' for M' in 4..M) and the compressor's word, the histogram and the masked-out
 * count (zeroed by one memset), the selection, the chunks' tie counts. */
typedef struct gmp_ws {
    size_t u, values, meta, index, word, hist, sel, counts, total;
    int64_t n_chunks;
} gmp_ws;

static sj_status plan(const sj_gmp_schedule *s, sj_dtype dt, int64_t rows, int64_t cols, gmp_ws *w, const char *what)
{
    sj_gmp_target t;
    sj_status st = sj_gmp_target_at(s, 0, &t); /* checks the schedule */
    if (st != SJ_OK) return error_prefix(st, "%s", what);
    const int64_t max_dim = (int64_t)1 << 30;
    if (rows < 1 || rows > max_dim || cols < 1 || cols > max_dim || rows * cols > ((int64_t)1 << 40))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: rows = %lld, cols = %lld: expected 1..2^30 each", what,
                         (long long)rows, (long long)cols);
    size_t vb = 0, mb = 0, ib = 0;
    for (int m = 4; m <= s->m; m++) {
        sj_vnm_layout l;
        if ((st = sj_vnm_layout_init(&l, dt, s->v, 2, m, rows, cols)) != SJ_OK) return error_prefix(st, "%s", what);
        if (up16(l.values_bytes) > vb) vb = up16(l.values_bytes);
        if (up16(l.meta_bytes) > mb) mb = up16(l.meta_bytes);
        if (up16(l.index_bytes) > ib) ib = up16(l.index_bytes);
    }
    memset(w, 0, sizeof *w);
    w->n_chunks = (rows * cols + CHUNK - 1) / CHUNK;
    w->values = up16((size_t)(rows * cols) * 2);
    w->meta = w->values + vb;
    w->index = w->meta + mb;
    w->word = w->index + ib;
    w->hist = w->word + 16;
    w->sel = w->hist + (size_t)HIST_BINS * 4 + 16;
    w->counts = w->sel + 16;
    w->total = w->counts + up16((size_t)w->n_chunks * 4);
    return SJ_OK;
}

sj_status sj_gmp_prune_workspace(const sj_gmp_schedule *s, sj_dtype dt, int64_t rows, int64_t cols, size_t *bytes)
{
    if (!bytes) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_prune_workspace: bytes is NULL");
    gmp_ws w;
    sj_status st = plan(s, dt, rows, cols, &w, "sj_gmp_prune_workspace");
    if (st == SJ_OK) *bytes = w.total;
    return st;
}

/* The kernel of one stage; the pattern stage keys on M', the others on the final M. */
static sj_status stage(sj_context *ctx, const sj_gmp_schedule *s, sj_dtype dt, int64_t rows, int64_t cols, int m,
                       int which, void **args, size_t n_args, void *stream)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GMP_PRUNE, dt, rows, 1, cols);
    p.vnm_v = s->v;
    p.vnm_n = 2;
    p.vnm_m = m;
    char config[40];
    snprintf(config, sizeof config, "STAGE=%d,THREADS=%d", which, which == 3 || which == 5 ? 1024 : 256);
    const loaded_kernel *k;
    sj_status st = rt_kernel_with_config(ctx, &p, NULL, config, &k);
    if (st != SJ_OK) return error_prefix(st, "the GMP kernel %s", config);
    return rt_launch(ctx, k, args, n_args, stream);
}

sj_status sj_gmp_prune(sj_context *ctx, const sj_gmp_schedule *s, int64_t step, sj_dtype dt, int64_t rows, int64_t cols,
                       sj_devptr W, int64_t ldw, sj_devptr mask, int64_t ldm, sj_devptr workspace, size_t workspace_bytes,
                       void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_gmp_prune";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    if (dt != SJ_DTYPE_F16 && dt != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: dtype %d: expected f16 or bf16", what, (int)dt);
    gmp_ws w;
    sj_status st = plan(s, dt, rows, cols, &w, what);
    if (st != SJ_OK) return st;
    sj_gmp_target t;
    if ((st = sj_gmp_target_at(s, step, &t)) != SJ_OK) return error_prefix(st, "%s", what);
    if (ldw < cols || ldm < cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ldw = %lld, ldm = %lld: both must be >= cols = %lld", what,
                         (long long)ldw, (long long)ldm, (long long)cols);
    if ((st = rt_check_ptr("W", W, 2)) != SJ_OK || (st = rt_check_ptr("mask", mask, 1)) != SJ_OK ||
        (st = rt_check_ptr("workspace", workspace, 16)) != SJ_OK)
        return error_prefix(st, "%s", what);
    if (workspace_bytes < w.total)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace_bytes = %zu, needs %zu (sj_gmp_prune_workspace)", what,
                         workspace_bytes, w.total);
    if (!t.prune_now) return SJ_OK;
    long long lw = ldw, lm = ldm;
    sj_devptr U = workspace, hist = workspace + w.hist, n_out = hist + (size_t)HIST_BINS * 4, sel = workspace + w.sel,
              counts = workspace + w.counts;
    if (t.pattern_m) { /* mask &= the slots the V:2:M' compression of U = W (.) mask keeps */
        void *a0[] = { &W, &lw, &mask, &lm, &U };
        if ((st = stage(ctx, s, dt, rows, cols, s->m, 0, RT_ARGS(a0), stream)) != SJ_OK) return st;
        sj_vnm_device c;
        if ((st = sj_vnm_layout_init(&c.layout, dt, s->v, 2, t.pattern_m, rows, cols)) != SJ_OK) return st;
        c.values = workspace + w.values;
        c.meta = workspace + w.meta;
        c.index = workspace + w.index;
        if ((st = sj_vnm_compress_device_ws(ctx, &c.layout, U, cols, SJ_VNM_PRUNE_L2, &c, workspace + w.word, 16,
                                            stream)) != SJ_OK)
            return error_prefix(st, "%s (the pattern V:2:%d)", what, t.pattern_m);
        void *a1[] = { &c.meta, &c.index, &mask, &lm };
        if ((st = stage(ctx, s, dt, rows, cols, t.pattern_m, 1, RT_ARGS(a1), stream)) != SJ_OK) return st;
    }
    /* Unstructured: the smallest surviving magnitudes go until ceil(s_t * n) are masked out. */
    CU_CHECK(cu.cuMemsetD32Async((CUdeviceptr)hist, 0, HIST_BINS + 4, (CUstream)stream), "zeroing the GMP histogram");
    long long need = (long long)ceil(t.sparsity * (double)(rows * cols) - 1e-9), n_chunks = w.n_chunks;
    void *a2[] = { &W, &lw, &mask, &lm, &hist, &n_out };
    void *a3[] = { &hist, &n_out, &need, &sel };
    void *a4[] = { &W, &lw, &mask, &lm, &sel, &counts };
    void *a5[] = { &counts, &n_chunks };
    void *a6[] = { &W, &lw, &mask, &lm, &sel, &counts };
    void **args[] = { a2, a3, a4, a5, a6 };
    const size_t n_args[] = { 6, 4, 6, 2, 6 };
    for (int i = 0; i < 5; i++)
        if ((st = stage(ctx, s, dt, rows, cols, s->m, 2 + i, args[i], n_args[i], stream)) != SJ_OK) return st;
    return SJ_OK;
}

sj_status sj_gmp_recompress(sj_context *ctx, sj_devptr W, int64_t ldw, const sj_vnm_device *fwd, const sj_vnm_device *wt2,
                            sj_devptr workspace, size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_gmp_recompress";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    if (!fwd || !wt2) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: fwd or wt2 is NULL", what);
    size_t need;
    sj_status st = sj_vnm_double_prune_workspace(&fwd->layout, &need);
    if (st != SJ_OK) return error_prefix(st, "%s: fwd", what);
    if ((st = rt_check_ptr("workspace", workspace, 16)) != SJ_OK) return error_prefix(st, "%s", what);
    if (workspace_bytes < need)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace_bytes = %zu, needs %zu (sj_vnm_double_prune_workspace)",
                         what, workspace_bytes, need);
    /* the compressor's word goes where double pruning's own word will: both are 16 bytes at the end */
    if ((st = sj_vnm_compress_device_ws(ctx, &fwd->layout, W, ldw, SJ_VNM_PRUNE_L2, fwd, workspace + need - 16, 16,
                                        stream)) != SJ_OK)
        return error_prefix(st, "%s (the forward copy)", what);
    return sj_vnm_double_prune(ctx, fwd, wt2, workspace, workspace_bytes, stream);
}
