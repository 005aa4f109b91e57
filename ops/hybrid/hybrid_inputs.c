/* hybrid_inputs.c: what the hybrid FFN harnesses share (hybrid_inputs.h): the activations of a law
 * as a host hybrid matrix, per-pair values at its positions uploaded in its shapes, and the
 * workspace each launched kernel needs. */
#include "ops/hybrid/hybrid_inputs.h"
#include "core/error.h"
#include "tuner/harness.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <stdlib.h>
#include <string.h>

sj_status hybrid_activations(const sj_problem *p, const crng_activations *law, sj_hybrid_host *a)
{
    sj_hybrid_layout l;
    sj_status st = sj_hybrid_layout_init(&l, p->dtype, p->m, p->d_ff, p->twell_capacity, 0);
    if (st != SJ_OK) return st;
    uint16_t *dense = malloc(sizeof *dense * (size_t)(p->m * p->d_ff));
    if (!dense) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for %lld x %lld activations",
                                 (long long)p->m, (long long)p->d_ff);
    for (int64_t r = 0; r < p->m; r++) crng_activation_row(law, r, dense + r * p->d_ff);
    st = sj_hybrid_from_dense(&l, dense, p->d_ff, a, NULL);
    free(dense);
    return st;
}

double hybrid_pair_value(const crng_matrix *law, int64_t t, int64_t j)
{
    return harness_16_to_f64(law->dtype, crng_matrix_at(law, t, j));
}

/* Writes the value of (t, j) at index i of buf (kind's element size). */
static void put(void *buf, size_t i, const crng_matrix *law, hybrid_pair_kind kind, int64_t t, int64_t j)
{
    if (kind == HYBRID_PAIR_16) ((uint16_t *)buf)[i] = crng_matrix_at(law, t, j);
    else ((float *)buf)[i] = (float)hybrid_pair_value(law, t, j);
}

sj_status hybrid_pairs_upload(sj_context *ctx, const sj_hybrid_host *a, const crng_matrix *law, hybrid_pair_kind kind,
                              sj_devptr *ell, sj_devptr *bk)
{
    const sj_hybrid_layout *l = &a->layout;
    const size_t esz = kind == HYBRID_PAIR_16 ? 2 : 4, n_ell = (size_t)(l->rows * l->width),
                 n_bk = (size_t)(l->backup_rows * l->cols);
    void *ev = calloc(n_ell + 1, esz), *bv = calloc(n_bk + 1, esz);
    sj_status st = SJ_OK;
    if (!ev || !bv) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for per-pair values");
        goto done;
    }
    for (int64_t r = 0; r < l->rows; r++) {
        int64_t e = a->nnz[r] < l->width ? a->nnz[r] : l->width;
        for (int64_t i = 0; i < e; i++) put(ev, (size_t)(r * l->width + i), law, kind, r, a->columns[r * l->width + i]);
    }
    for (int64_t b = 0; b < l->backup_rows; b++)
        for (int64_t j = 0; j < l->cols; j++)
            if (hybrid_nonzero(a->backup[b * l->cols + j])) put(bv, (size_t)(b * l->cols + j), law, kind, a->owner[b], j);
    if ((st = harness_upload(ctx, ev, n_ell * esz, ell)) == SJ_OK && n_bk) st = harness_upload(ctx, bv, n_bk * esz, bk);
done:
    free(ev);
    free(bv);
    return st;
}

sj_status hybrid_harness_workspace(sj_context *ctx, const loaded_kernel *k, const sj_hybrid_layout *l, sj_devptr *work,
                                   size_t *bytes)
{
    size_t need;
    sj_status st = hybrid_ffn_workspace_of(&k->problem, k->config, l, &need);
    if (st != SJ_OK || need <= *bytes) return st;
    /* the kernels queued on the old one must finish before it goes */
    if (*work && ((st = sj_synchronize(ctx)) != SJ_OK || (st = sj_free(ctx, *work)) != SJ_OK)) return st;
    *work = 0;
    *bytes = 0;
    if ((st = sj_malloc(ctx, need, work)) != SJ_OK)
        return error_prefix(st, "harness: the workspace of %s config %s", k->template_name, k->config);
    *bytes = need;
    return SJ_OK;
}
