/* random_fill.c: the device side of the counter-based inputs (random_fill.h): the generator
 * kernels of templates/fill_random.lua, built through the request path once per dtype, and
 * the small tables they read (column 0, the units' thresholds) uploaded for one launch. */
#include "tuner/random_fill.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/harness.h"

#include <stdlib.h>

/* The generator kernel of dist (0: a matrix, 1: TwELL activations) for dtype. Sizes are its
 * arguments, so the problem is 1 x 1 x 1: one kernel per dtype and device. */
static sj_status generator(sj_context *ctx, sj_dtype dtype, int dist, const loaded_kernel **k)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, dtype, 1, 1, 1);
    sj_status st = rt_kernel_with_config(ctx, &p, "fill_random", dist ? "DIST=1" : "DIST=0", k);
    return st == SJ_OK ? SJ_OK : error_prefix(st, "the input generator");
}

static sj_status check_dtype(sj_dtype dtype, const char *what)
{
    if (dtype == SJ_DTYPE_F16 || dtype == SJ_DTYPE_BF16) return SJ_OK;
    return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: dtype %s: expected f16 or bf16", what,
                     sj_dtype_name(dtype) ? sj_dtype_name(dtype) : "unknown");
}

sj_status random_fill_matrix(sj_context *ctx, const crng_matrix *m, int transposed, sj_devptr dst)
{
    if (!ctx || !m || !dst) return error_set(SJ_ERR_INVALID_ARGUMENT, "random_fill_matrix: ctx, m and dst must be set");
    sj_status st = check_dtype(m->dtype, "random_fill_matrix");
    if (st != SJ_OK) return st;
    if (m->rows < 1 || m->cols < 1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "random_fill_matrix: %lld x %lld: both must be >= 1",
                         (long long)m->rows, (long long)m->cols);
    const loaded_kernel *k;
    if ((st = generator(ctx, m->dtype, 0, &k)) != SJ_OK) return st;
    sj_devptr col0 = 0;
    if (m->col0 && (st = harness_upload(ctx, m->col0, sizeof *m->col0 * (size_t)m->rows, &col0)) != SJ_OK) return st;
    long long rows = m->rows, cols = m->cols;
    int tr = transposed ? 1 : 0;
    unsigned long long key = m->key;
    void *args[] = { &dst, &rows, &cols, &tr, &key, &col0 };
    st = rt_launch(ctx, k, RT_ARGS(args), NULL);
    if (st == SJ_OK) st = sj_synchronize(ctx); /* before col0 is freed */
    if (col0) sj_free(ctx, col0);
    return st;
}

sj_status random_device_matrix(sj_context *ctx, const crng_matrix *m, int transposed, sj_devptr *out)
{
    *out = 0;
    if (!m || m->rows < 1 || m->cols < 1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "random_device_matrix: m must be set, with rows and cols >= 1");
    sj_status st = sj_malloc(ctx, sizeof(uint16_t) * (size_t)m->rows * (size_t)m->cols, out);
    if (st == SJ_OK && (st = random_fill_matrix(ctx, m, transposed, *out)) != SJ_OK) {
        sj_free(ctx, *out);
        *out = 0;
    }
    return st;
}

sj_status random_fill_twell(sj_context *ctx, const crng_activations *a, const sj_twell_device *H)
{
    if (!ctx || !a || !a->threshold || !H)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "random_fill_twell: ctx, a, its thresholds and H must be set");
    const sj_twell_layout *l = &H->layout;
    if (l->rows != a->rows || l->cols != a->cols || l->dtype != a->dtype)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "random_fill_twell: activations of %lld x %lld %s into a TwELL "
                         "matrix of %lld x %lld %s", (long long)a->rows, (long long)a->cols, sj_dtype_name(a->dtype),
                         (long long)l->rows, (long long)l->cols, sj_dtype_name(l->dtype));
    sj_status st = check_dtype(a->dtype, "random_fill_twell");
    const loaded_kernel *k;
    if (st != SJ_OK || (st = generator(ctx, a->dtype, 1, &k)) != SJ_OK) return st;
    /* the host's converter leaves the spill zero outside overflowing tiles; so does this */
    if ((st = sj_memset_u8(ctx, H->spill, 0, l->spill_bytes)) != SJ_OK) return st;
    sj_devptr thr;
    if ((st = harness_upload(ctx, a->threshold, sizeof *a->threshold * (size_t)a->cols, &thr)) != SJ_OK) return st;
    sj_devptr entries = H->entries, counts = H->counts, spill = H->spill;
    long long rows = a->rows, cols = a->cols;
    int tile = l->tile, capacity = l->capacity;
    unsigned long long key = a->key;
    void *args[] = { &entries, &counts, &spill, &rows, &cols, &tile, &capacity, &key, &thr };
    st = rt_launch(ctx, k, RT_ARGS(args), NULL);
    if (st == SJ_OK) st = sj_synchronize(ctx); /* before the thresholds are freed */
    sj_free(ctx, thr);
    return st;
}
