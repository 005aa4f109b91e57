/* vnm_api.c: the device side of V:N:M: moving compressed matrices to and from the GPU, the GPU
 * compressor (templates/vnm_compress.lua; into the caller's arrays and workspace without waiting,
 * sj_vnm_compress_device_ws, or allocating and checking the pattern, sj_vnm_compress_device)
 * and sj_vnm_spmm and sj_vnm_spmm_lowrank (templates/vnm_spmm.lua through the request path:
 * kernel table, cache, template + NVRTC). */
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/vnm/vnm_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sj_status sj_vnm_device_free(sj_context *ctx, sj_vnm_device *d)
{
    RT_USE_CONTEXT(ctx);
    if (!ctx || !d) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_device_free: ctx or d is NULL");
    sj_status st = SJ_OK, s2;
    sj_devptr ptrs[3] = { d->values, d->meta, d->index };
    for (int i = 0; i < 3; i++)
        if (ptrs[i] && (s2 = sj_free(ctx, ptrs[i])) != SJ_OK && st == SJ_OK) st = s2;
    memset(d, 0, sizeof *d);
    return st;
}

static sj_status device_alloc(sj_context *ctx, const sj_vnm_layout *l, sj_vnm_device *out)
{
    memset(out, 0, sizeof *out);
    out->layout = *l;
    sj_status st;
    if ((st = sj_malloc(ctx, l->values_bytes, &out->values)) != SJ_OK ||
        (st = sj_malloc(ctx, l->meta_bytes, &out->meta)) != SJ_OK ||
        (st = sj_malloc(ctx, l->index_bytes, &out->index)) != SJ_OK) {
        sj_vnm_device_free(ctx, out);
        return st;
    }
    return SJ_OK;
}

sj_status sj_vnm_upload(sj_context *ctx, const sj_vnm_host *h, sj_vnm_device *out)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_upload: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_upload: ctx is NULL");
    if (!h || !h->values || !h->meta || !h->index)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_upload: h or its arrays are NULL");
    const sj_vnm_layout *l = &h->layout;
    sj_status st = vnm_layout_check(l, "sj_vnm_upload");
    if (st != SJ_OK || (st = device_alloc(ctx, l, out)) != SJ_OK) return st;
    if ((st = sj_memcpy_htod(ctx, out->values, h->values, l->values_bytes)) != SJ_OK ||
        (st = sj_memcpy_htod(ctx, out->meta, h->meta, l->meta_bytes)) != SJ_OK ||
        (st = sj_memcpy_htod(ctx, out->index, h->index, l->index_bytes)) != SJ_OK)
        sj_vnm_device_free(ctx, out);
    return st;
}

sj_status sj_vnm_download(sj_context *ctx, const sj_vnm_device *d, sj_vnm_host *out)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_download: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx || !d) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_download: ctx or d is NULL");
    const sj_vnm_layout *l = &d->layout;
    sj_status st = vnm_layout_check(l, "sj_vnm_download");
    if (st != SJ_OK) return st;
    out->layout = *l;
    out->values = malloc(l->values_bytes);
    out->meta = malloc(l->meta_bytes);
    out->index = malloc(l->index_bytes);
    if (!out->values || !out->meta || !out->index) {
        sj_vnm_host_free(out);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_vnm_download: cannot allocate %zu bytes",
                       l->values_bytes + l->meta_bytes + l->index_bytes);
    }
    if ((st = sj_memcpy_dtoh(ctx, out->values, d->values, l->values_bytes)) != SJ_OK ||
        (st = sj_memcpy_dtoh(ctx, out->meta, d->meta, l->meta_bytes)) != SJ_OK ||
        (st = sj_memcpy_dtoh(ctx, out->index, d->index, l->index_bytes)) != SJ_OK)
        sj_vnm_host_free(out);
    return st;
}

sj_status sj_vnm_problem(const sj_vnm_layout *l, int64_t n, sj_dtype out_dtype, sj_problem *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_problem: out is NULL");
    sj_status st = vnm_layout_check(l, "sj_vnm_problem");
    if (st != SJ_OK) return st;
    sj_problem_init(out, SJ_OP_VNM_SPMM, l->dtype, l->rows, n, l->cols);
    out->out_dtype = out_dtype;
    out->vnm_v = l->v;
    out->vnm_n = l->n;
    out->vnm_m = l->m;
    return sj_problem_validate(out);
}

/* The argument checks both SpMM entry points share (what: the caller). */
static sj_status spmm_check(sj_context *ctx, const sj_problem *p, const sj_vnm_device *A, sj_devptr B, sj_devptr C,
                            const char *what)
{
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    sj_status st = sj_problem_validate(p);
    if (st != SJ_OK) return st;
    if (p->op != SJ_OP_VNM_SPMM)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: problem.op is %s, expected vnm-spmm", what, sj_op_name(p->op));
    if (!A) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: A is NULL", what);
    const sj_vnm_layout *l = &A->layout;
    if ((st = vnm_layout_check(l, what)) != SJ_OK) return st;
    if (p->dtype != l->dtype || p->m != l->rows || p->k != l->cols || p->vnm_v != l->v || p->vnm_n != l->n ||
        p->vnm_m != l->m)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                       "%s: problem (%s, m=%lld, k=%lld, V:N:M %d:%d:%d) does not match A (%s, %lldx%lld, "
                       "%d:%d:%d); see sj_vnm_problem",
                       what, sj_dtype_name(p->dtype), (long long)p->m, (long long)p->k, p->vnm_v, p->vnm_n, p->vnm_m,
                       sj_dtype_name(l->dtype), (long long)l->rows, (long long)l->cols, l->v, l->n, l->m);
    if (p->n % 8)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: n = %lld must be a multiple of 8 (16-byte rows of B and C)",
                       what, (long long)p->n);
    if ((st = rt_check_ptr("A.values", A->values, 16)) != SJ_OK || (st = rt_check_ptr("A.meta", A->meta, 16)) != SJ_OK ||
        (st = rt_check_ptr("A.index", A->index, 16)) != SJ_OK || (st = rt_check_ptr("B", B, 16)) != SJ_OK ||
        (st = rt_check_ptr("C", C, 16)) != SJ_OK)
        return st;
    return SJ_OK;
}

sj_status sj_vnm_spmm(sj_context *ctx, const sj_problem *p, const sj_vnm_device *A, sj_devptr B, sj_devptr C,
                      float alpha, float beta, void *stream)
{
    RT_USE_CONTEXT(ctx);
    if (p && p->lowrank_rank)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_spmm: problem.lowrank_rank = %d: a low-rank term needs U "
                         "and Z (sj_vnm_spmm_lowrank)", p->lowrank_rank);
    const loaded_kernel *k;
    sj_status st = spmm_check(ctx, p, A, B, C, "sj_vnm_spmm");
    if (st != SJ_OK || (st = rt_kernel_for(ctx, p, &k)) != SJ_OK) return st;
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    void *args[] = { (void *)&A->values, (void *)&A->meta, (void *)&A->index, &B, &C, &m, &n, &kk, &alpha, &beta };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_vnm_spmm_lowrank(sj_context *ctx, const sj_problem *p, const sj_vnm_device *A, sj_devptr B,
                              sj_devptr C, sj_devptr U, sj_devptr Z, float alpha, float beta, void *stream)
{
    RT_USE_CONTEXT(ctx);
    if (p && !p->lowrank_rank)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_spmm_lowrank: problem.lowrank_rank is 0: set the rank "
                         "r of U (rows x r) and Z (r x n), or call sj_vnm_spmm");
    const loaded_kernel *k;
    sj_status st = spmm_check(ctx, p, A, B, C, "sj_vnm_spmm_lowrank");
    if (st != SJ_OK || (st = rt_check_ptr("U", U, 16)) != SJ_OK || (st = rt_check_ptr("Z", Z, 16)) != SJ_OK ||
        (st = rt_kernel_for(ctx, p, &k)) != SJ_OK)
        return st;
    int m = (int)p->m, n = (int)p->n, kk = (int)p->k;
    void *args[] = { (void *)&A->values, (void *)&A->meta, (void *)&A->index, &B, &C, &m, &n, &kk, &alpha, &beta,
                     &U, &Z };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

/* ---------------------------------------------------------------- the GPU compressor */

/* The compressor is a kernel like any other (table, cache, or template + NVRTC), under the
 * vnm-compress problem of the layout (n is unused: 1). */
static void compress_problem(const sj_vnm_layout *l, sj_problem *p)
{
    sj_problem_init(p, SJ_OP_VNM_COMPRESS, l->dtype, l->rows, 1, l->cols);
    p->vnm_v = l->v;
    p->vnm_n = l->n;
    p->vnm_m = l->m;
}

/* The message of the first violation the kernel found (its key: see templates/vnm_compress.lua). */
sj_status sj_vnm_pattern_status(const sj_vnm_layout *l, uint64_t key)
{
    sj_status st = vnm_layout_check(l, "sj_vnm_pattern_status");
    if (st != SJ_OK) return st;
    if (key == ~0ull) return SJ_OK;
    long long gp = (long long)l->k_tiles * 8, sub = (long long)(key % (unsigned long long)(l->v + 1));
    long long blk = (long long)(key / (unsigned long long)(l->v + 1)), rb = blk / gp, g = blk % gp;
    if (rb >= l->row_blocks || g >= l->groups)
        return error_set(SJ_ERR_INVALID_ARGUMENT,
                         "sj_vnm_pattern_status: word 0x%llx names row block %lld, group %lld; the layout has %lld row "
                         "blocks of %lld groups (not a word the compressor wrote for this layout)",
                         (unsigned long long)key, rb, g, (long long)l->row_blocks, (long long)l->groups);
    long long c0 = g * l->m, c1 = c0 + l->m < l->cols ? c0 + l->m - 1 : l->cols - 1;
    if (sub == 0) {
        long long r0 = rb * l->v, r1 = r0 + l->v < l->rows ? r0 + l->v - 1 : l->rows - 1;
        return error_set(SJ_ERR_PATTERN,
                       "not V:%d:%d: rows %lld..%lld, columns %lld..%lld (row block %lld, group %lld) have non-zeros in "
                       "more than 4 columns; a block keeps at most 4",
                       l->n, l->m, r0, r1, c0, c1, rb, g);
    }
    return error_set(SJ_ERR_PATTERN,
                   "not V:%d:%d: row %lld has more than 2 non-zeros in columns %lld..%lld (group %lld); 2:4 keeps at "
                   "most 2 of the block's 4 columns",
                   l->n, l->m, rb * l->v + sub - 1, c0, c1, g);
}

sj_status sj_vnm_compress_device_ws(sj_context *ctx, const sj_vnm_layout *l, sj_devptr A, int64_t lda,
                                    sj_vnm_select select, const sj_vnm_device *out, sj_devptr workspace,
                                    size_t workspace_bytes, void *stream)
{
    RT_USE_CONTEXT(ctx);
    const char *what = "sj_vnm_compress_device_ws";
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", what);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: out is NULL", what);
    sj_status st = vnm_layout_check(l, what);
    if (st != SJ_OK) return st;
    if (memcmp(&out->layout, l, sizeof *l))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: out->layout differs from layout (fill it with the same "
                         "sj_vnm_layout_init)", what);
    if ((st = rt_check_ptr("A", A, 2)) != SJ_OK || (st = rt_check_ptr("out->values", out->values, 16)) != SJ_OK ||
        (st = rt_check_ptr("out->meta", out->meta, 16)) != SJ_OK ||
        (st = rt_check_ptr("out->index", out->index, 16)) != SJ_OK ||
        (st = rt_check_ptr("workspace", workspace, 16)) != SJ_OK)
        return st;
    if (lda < l->cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: lda = %lld is less than cols = %lld", what, (long long)lda,
                         (long long)l->cols);
    if (select != SJ_VNM_EXACT && select != SJ_VNM_PRUNE_L2 && select != SJ_VNM_PRUNE_L1)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: select = %d is not an sj_vnm_select (0 exact, 1 L2, 2 L1)",
                         what, (int)select);
    sj_problem p;
    compress_problem(l, &p);
    size_t need;
    if ((st = sj_workspace_size(&p, &need)) != SJ_OK) return st;
    if (workspace_bytes < need)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: workspace_bytes = %zu; the compressor needs at least %zu",
                         what, workspace_bytes, need);
    if ((st = rt_require_gpu(ctx, "compressing on the device")) != SJ_OK) return st;
    const loaded_kernel *k;
    if ((st = rt_kernel_for(ctx, &p, &k)) != SJ_OK) return error_prefix(st, "the V:N:M compressor kernel");
    /* no violation yet: all ones, which atomicMin lowers to the first one found */
    CUresult r = cu.cuMemsetD32Async(workspace, 0xffffffffu, 2, (CUstream)stream);
    if (r != CUDA_SUCCESS) return cuda_error(r, "cuMemsetD32Async (the compressor's violation word)");
    long long ld = (long long)lda;
    int sel = (int)select;
    sj_devptr values = out->values, meta = out->meta, index = out->index;
    void *args[] = { &A, &ld, &sel, &values, &meta, &index, &workspace };
    return rt_launch(ctx, k, RT_ARGS(args), stream);
}

sj_status sj_vnm_compress_device(sj_context *ctx, const sj_vnm_layout *l, sj_devptr A, int64_t lda,
                                 sj_vnm_select select, sj_vnm_device *out, void *stream)
{
    RT_USE_CONTEXT(ctx);
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_compress_device: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_vnm_compress_device: ctx is NULL");
    sj_status st = vnm_layout_check(l, "sj_vnm_compress_device");
    if (st != SJ_OK) return st;
    if ((st = rt_require_gpu(ctx, "compressing on the device")) != SJ_OK) return st;
    sj_devptr work = 0;
    unsigned long long key = ~0ull;
    CUresult r = CUDA_SUCCESS;
    if ((st = device_alloc(ctx, l, out)) != SJ_OK || (st = sj_malloc(ctx, 16, &work)) != SJ_OK ||
        (st = sj_vnm_compress_device_ws(ctx, l, A, lda, select, out, work, 16, stream)) != SJ_OK)
        goto done;
    /* The violation word is read back, so the kernel must be done first. */
    if ((r = cu.cuStreamSynchronize((CUstream)stream)) != CUDA_SUCCESS) {
        st = cuda_error(r, "cuStreamSynchronize (V:N:M compressor)");
        goto done;
    }
    if ((st = sj_memcpy_dtoh(ctx, &key, work, sizeof key)) != SJ_OK) goto done;
    st = sj_vnm_pattern_status(l, key);
done:
    if (work) {
        sj_status s2 = sj_free(ctx, work);
        if (st == SJ_OK) st = s2;
    }
    /* On failure the message is already set; freeing out must not replace it. */
    if (st != SJ_OK) {
        char keep[2048];
        snprintf(keep, sizeof keep, "%s", sj_last_error());
        sj_vnm_device_free(ctx, out);
        error_set(st, "%s", keep);
    }
    return st;
}
