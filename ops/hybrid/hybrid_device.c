/* hybrid_device.c: hybrid matrices in device memory: allocation, upload, download, the growth of
 * the backup, the report of where the rows went, the checks of a layout and of a device matrix
 * against a problem, and the hybrid-gate problem of a layout. */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <string.h>

/* The arrays of d with their sizes, in one order for alloc, copy and free. */
typedef struct array_ref { sj_devptr *dev; size_t bytes; } array_ref;

static int arrays_of(sj_hybrid_device *d, array_ref out[7])
{
    const sj_hybrid_layout *l = &d->layout;
    array_ref a[7] = { { &d->values, l->values_bytes }, { &d->columns, l->columns_bytes }, { &d->nnz, l->nnz_bytes },
                       { &d->slot, l->slot_bytes }, { &d->counter, l->counter_bytes }, { &d->owner, l->owner_bytes },
                       { &d->backup, l->backup_bytes } };
    memcpy(out, a, sizeof a);
    return l->backup_rows ? 7 : 5; /* an empty backup has no owner and no backup array */
}

sj_status sj_hybrid_device_free(sj_context *ctx, sj_hybrid_device *d)
{
    RT_USE_CONTEXT(ctx);
    if (!d) return SJ_OK;
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_device_free: ctx is NULL");
    sj_status st = SJ_OK, s;
    sj_devptr *ptrs[] = { &d->values, &d->columns, &d->nnz, &d->slot, &d->owner, &d->backup, &d->counter };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) {
        if (*ptrs[i] && (s = sj_free(ctx, *ptrs[i])) != SJ_OK && st == SJ_OK) st = s;
        *ptrs[i] = 0;
    }
    return st;
}

sj_status sj_hybrid_device_alloc(sj_context *ctx, const sj_hybrid_layout *l, sj_hybrid_device *out)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_device_alloc: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_device_alloc: ctx is NULL");
    sj_status st = hybrid_layout_check(l, "sj_hybrid_device_alloc");
    if (st != SJ_OK) return st;
    out->layout = *l;
    array_ref a[7];
    int n = arrays_of(out, a);
    for (int i = 0; i < n; i++)
        if ((st = sj_malloc(ctx, a[i].bytes, a[i].dev)) != SJ_OK) {
            sj_hybrid_device_free(ctx, out);
            return error_prefix(st, "allocating a hybrid matrix");
        }
    return SJ_OK;
}

sj_status sj_hybrid_device_grow(sj_context *ctx, sj_hybrid_device *d, int64_t backup_rows)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !d) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_device_grow: ctx and d must not be NULL");
    sj_hybrid_layout l;
    sj_status st = hybrid_layout_check(&d->layout, "sj_hybrid_device_grow");
    if (st != SJ_OK) return st;
    if ((st = sj_hybrid_layout_init(&l, d->layout.dtype, d->layout.rows, d->layout.cols, d->layout.width, backup_rows)) != SJ_OK)
        return error_prefix(st, "sj_hybrid_device_grow");
    sj_devptr owner = 0, backup = 0;
    if (backup_rows && ((st = sj_malloc(ctx, l.owner_bytes, &owner)) != SJ_OK ||
                        (st = sj_malloc(ctx, l.backup_bytes, &backup)) != SJ_OK)) {
        if (owner) sj_free(ctx, owner);
        return error_prefix(st, "growing a hybrid backup to %lld rows", (long long)backup_rows);
    }
    if (d->owner) sj_free(ctx, d->owner);
    if (d->backup) sj_free(ctx, d->backup);
    d->owner = owner;
    d->backup = backup;
    d->layout = l;
    return SJ_OK;
}

/* Copies between the host arrays of h and the device arrays of d (to_device: upload). */
static sj_status copy_arrays(sj_context *ctx, sj_hybrid_host *h, sj_hybrid_device *d, int to_device)
{
    void *host[7] = { h->values, h->columns, h->nnz, h->slot, &h->counter, h->owner, h->backup };
    array_ref a[7];
    int n = arrays_of(d, a);
    sj_status st = SJ_OK;
    for (int i = 0; i < n && st == SJ_OK; i++)
        st = to_device ? sj_memcpy_htod(ctx, *a[i].dev, host[i], a[i].bytes) : sj_memcpy_dtoh(ctx, host[i], *a[i].dev, a[i].bytes);
    return st;
}

sj_status sj_hybrid_upload(sj_context *ctx, const sj_hybrid_host *h, sj_hybrid_device *out)
{
    RT_USE_CONTEXT(ctx);
    if (!h) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_upload: h is NULL");
    sj_status st = sj_hybrid_device_alloc(ctx, &h->layout, out);
    if (st != SJ_OK) return st;
    if ((st = copy_arrays(ctx, (sj_hybrid_host *)h, out, 1)) != SJ_OK) sj_hybrid_device_free(ctx, out);
    return st;
}

sj_status sj_hybrid_download(sj_context *ctx, const sj_hybrid_device *d, sj_hybrid_host *out)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !d || !out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_download: ctx, d and out must not be NULL");
    sj_status st = hybrid_layout_check(&d->layout, "sj_hybrid_download");
    if (st != SJ_OK) return st;
    if ((st = hybrid_host_alloc(&d->layout, out)) != SJ_OK) return st;
    if ((st = copy_arrays(ctx, out, (sj_hybrid_device *)d, 0)) != SJ_OK) sj_hybrid_host_free(out);
    return st;
}

sj_status sj_hybrid_report_device(sj_context *ctx, const sj_hybrid_device *d, sj_hybrid_report *report)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !d || !report)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_report_device: ctx, d and report must not be NULL");
    sj_hybrid_host h;
    sj_status st = sj_hybrid_download(ctx, d, &h);
    if (st != SJ_OK) return st;
    st = sj_hybrid_report_host(&h, report);
    sj_hybrid_host_free(&h);
    return st;
}

sj_status hybrid_check_layout(const sj_hybrid_layout *l, const sj_problem *p, const char *name, const char *what)
{
    if (!l) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, name);
    sj_status st = hybrid_layout_check(l, what);
    if (st != SJ_OK) return st;
    if (l->rows != p->m || l->cols != p->n || l->width != p->twell_capacity || l->dtype != p->dtype)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: %s is %s %lld x %lld W=%d, the problem expects %s %lld x %lld W=%d",
                         what, name, sj_dtype_name(l->dtype), (long long)l->rows, (long long)l->cols, l->width,
                         sj_dtype_name(p->dtype), (long long)p->m, (long long)p->n, p->twell_capacity);
    return SJ_OK;
}

sj_status hybrid_check_device(const sj_hybrid_device *H, const sj_problem *p, const char *what)
{
    sj_status st = hybrid_check_layout(H ? &H->layout : NULL, p, "H", what);
    if (st != SJ_OK) return st;
    const sj_hybrid_layout *l = &H->layout;
    const struct { const char *name; sj_devptr p; unsigned align; } ptrs[] = {
        { "H.values", H->values, 2 }, { "H.columns", H->columns, 2 }, { "H.nnz", H->nnz, 4 }, { "H.slot", H->slot, 4 },
        { "H.counter", H->counter, 4 }, { "H.owner", H->owner, 4 }, { "H.backup", H->backup, 2 } };
    int n = l->backup_rows ? 7 : 5; /* an empty backup has no owner and no backup array */
    for (int i = 0; i < n; i++)
        if ((st = rt_check_ptr(ptrs[i].name, ptrs[i].p, ptrs[i].align)) != SJ_OK) return st;
    return SJ_OK;
}

sj_status sj_hybrid_gate_problem(const sj_hybrid_layout *l, int64_t d_model, sj_problem *out)
{
    sj_status st = hybrid_layout_check(l, "sj_hybrid_gate_problem");
    if (st != SJ_OK) return st;
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_hybrid_gate_problem: out is NULL");
    sj_problem_init(out, SJ_OP_HYBRID_GATE, l->dtype, l->rows, l->cols, d_model);
    out->twell_tile = (int)l->cols;
    out->twell_capacity = l->width;
    return sj_problem_validate(out);
}
