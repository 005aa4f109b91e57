/* hybrid_ffn_harness.c: the harnesses of hybrid-ffn-fwd and hybrid-ffn-dx, what the tuner and
 * every bench of the ops time, check and count. Inputs: twell_ffn_inputs (ops/twell/twell.h: X,
 * WuT, Wd uniform in [-1, 1) and the activations a with the problem's sparsity and skew, or W/2
 * non-zeros a row when it is unspecified), plus for the dx dY, WgT and the stored u (uniform).
 * The matrices are written on the device (tuner/random_fill.h); a is built into the hybrid format
 * on the host (sj_hybrid_from_dense grows the backup to every overflow row) and uploaded, with u
 * at its positions. The output checked is Y (fwd) or dX (dx) against an fp64 host sum over each
 * row's active units (the hybrid matrix as uploaded), sharing no code with the kernels; the
 * per-pair outputs (u, dg, du) are checked by tests/test_hybrid_ffn_gpu.c through the weight
 * gradients. A tensor-core kernel (ALGO=2) lists the pairs in a workspace of the harness, sized
 * for the kernel launched (hybrid_harness_workspace). Baselines: the dense products the ops
 * replace. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "tuner/random_fill.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"
#include "ops/hybrid/hybrid_inputs.h"
#include "ops/twell/twell.h"

#include <stdlib.h>
#include <string.h>


typedef struct ffn_state {
    twell_ffn_law law;          /* X, WuT, Wd, a */
    crng_matrix dY, WgT_law, U; /* dx only */
    sj_hybrid_host a;           /* the reference's active units */
    sj_hybrid_device H;
    hybrid_saved_u u;
    hybrid_grads g;
    sj_devptr X, WgT, WuT, Wd, out; /* X is dY for the dx */
    sj_devptr work;                 /* ALGO=2's list: hybrid_harness_workspace */
    size_t work_bytes;
} ffn_state;

static void ffn_teardown(harness *h)
{
    ffn_state *s = h->state;
    if (!s) return;
    sj_devptr *ptrs[] = { &s->u.values, &s->u.backup, &s->g.dg_values, &s->g.dg_backup, &s->g.du_values,
                          &s->g.du_backup, &s->X, &s->WgT, &s->WuT, &s->Wd, &s->out, &s->work };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (*ptrs[i]) sj_free(h->ctx, *ptrs[i]);
    sj_hybrid_device_free(h->ctx, &s->H);
    sj_hybrid_host_free(&s->a);
    twell_ffn_inputs_free(&s->law);
    free(s);
    h->state = NULL;
}

static sj_status ffn_setup_common(harness *h, uint64_t seed, int dx)
{
    const sj_problem *p = &h->problem;
    ffn_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_status st = twell_ffn_inputs(p, seed, &s->law);
    if (st != SJ_OK || (st = hybrid_activations(p, &s->law.H, &s->a)) != SJ_OK || (st = sj_hybrid_upload(h->ctx, &s->a, &s->H)) != SJ_OK)
        return st;
    const sj_hybrid_layout *l = &s->a.layout;
    if ((st = random_device_matrix(h->ctx, &s->law.WuT, 0, &s->WuT)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &s->law.Wd, 0, &s->Wd)) != SJ_OK)
        return st;
    if (dx) {
        s->dY = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_DY), p->m, p->n, NULL };
        s->WgT_law = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WG), p->d_ff, p->n, NULL };
        s->U = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_U), p->m, p->d_ff, NULL };
        size_t ell = (size_t)(l->rows * l->width) * sizeof(float), bk = (size_t)(l->backup_rows * l->cols) * sizeof(float);
        if ((st = random_device_matrix(h->ctx, &s->dY, 0, &s->X)) != SJ_OK ||
            (st = random_device_matrix(h->ctx, &s->WgT_law, 0, &s->WgT)) != SJ_OK ||
            (st = hybrid_pairs_upload(h->ctx, &s->a, &s->U, HYBRID_PAIR_16, &s->u.values, &s->u.backup)) != SJ_OK ||
            (st = sj_malloc(h->ctx, ell, &s->g.dg_values)) != SJ_OK || (st = sj_malloc(h->ctx, ell, &s->g.du_values)) != SJ_OK)
            return st;
        if (bk && ((st = sj_malloc(h->ctx, bk, &s->g.dg_backup)) != SJ_OK ||
                   (st = sj_malloc(h->ctx, bk, &s->g.du_backup)) != SJ_OK))
            return st;
    } else {
        if ((st = random_device_matrix(h->ctx, &s->law.X, 0, &s->X)) != SJ_OK ||
            (st = sj_malloc(h->ctx, l->values_bytes, &s->u.values)) != SJ_OK)
            return st;
        if (l->backup_rows && (st = sj_malloc(h->ctx, l->backup_bytes, &s->u.backup)) != SJ_OK) return st;
    }
    h->out_count = (size_t)(p->m * p->n);
    h->out_rows = p->m;
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->out)) != SJ_OK) return st;
    h->out = s->out;
    return SJ_OK;
}

static sj_status fwd_setup(harness *h, uint64_t seed) { return ffn_setup_common(h, seed, 0); }
static sj_status dx_setup(harness *h, uint64_t seed) { return ffn_setup_common(h, seed, 1); }

static sj_status fwd_launch(harness *h, const loaded_kernel *k, void *stream)
{
    ffn_state *s = h->state;
    sj_status st = hybrid_harness_workspace(h->ctx, k, &s->H.layout, &s->work, &s->work_bytes);
    if (st != SJ_OK) return st;
    return hybrid_ffn_fwd_launch(h->ctx, k, s->X, &s->H, s->WuT, s->Wd, s->out, &s->u, s->work, stream);
}

static sj_status dx_launch(harness *h, const loaded_kernel *k, void *stream)
{
    ffn_state *s = h->state;
    sj_status st = hybrid_harness_workspace(h->ctx, k, &s->H.layout, &s->work, &s->work_bytes);
    if (st != SJ_OK) return st;
    return hybrid_ffn_dx_launch(h->ctx, k, s->X, &s->H, &s->u, s->WgT, s->WuT, s->Wd, s->out, &s->g, s->work, stream);
}

/* Row r of a weight matrix as doubles. */
static void weight_row(sj_dtype dt, const crng_matrix *m, int64_t r, uint16_t *bits, double *out)
{
    crng_matrix_row(m, r, bits);
    for (int64_t c = 0; c < m->cols; c++) out[c] = harness_16_to_f64(dt, bits[c]);
}

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* fp64 over each checked row's active units in the host hybrid matrix (ELL, then backup):
 * fwd: y = sum_j a (x . WuT[j]) Wd[j]; dx: dh = dy . Wd[j], dx = sum_j (dh u) WgT[j] + (dh a) WuT[j].
 * Every row for the tuner's gate, the sampled rows for a bench. */
static sj_status ffn_reference_common(harness *h, int dx)
{
    ffn_state *s = h->state;
    const sj_problem *p = &h->problem;
    const sj_hybrid_host *a = &s->a;
    const int64_t D = p->n, F = p->d_ff, W = a->layout.width;
    h->ref_sampled = h->mode == HARNESS_REFERENCE_SAMPLED;
    int64_t rows = h->ref_sampled ? harness_sample_count(p->m) : p->m;
    h->reference = malloc((size_t)(rows * D) * sizeof *h->reference);
    double *x = malloc(sizeof *x * (size_t)D), *w1 = malloc(sizeof *w1 * (size_t)D),
           *w2 = malloc(sizeof *w2 * (size_t)D), *w3 = malloc(sizeof *w3 * (size_t)D),
           *y = malloc(sizeof *y * (size_t)D);
    uint16_t *bits = malloc(sizeof *bits * (size_t)D);
    sj_status st = SJ_OK;
    if (!h->reference || !x || !w1 || !w2 || !w3 || !y || !bits) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the hybrid FFN reference");
        goto done;
    }
    for (int64_t i = 0; i < rows; i++) {
        const int64_t r = h->ref_sampled ? harness_sample_row(p->m, (int)i) : i;
        weight_row(p->dtype, dx ? &s->dY : &s->law.X, r, bits, x);
        memset(y, 0, sizeof *y * (size_t)D);
        const int64_t e = a->nnz[r] < W ? a->nnz[r] : W, slot = a->nnz[r] > W ? a->slot[r] : -1;
        for (int64_t q = 0; q < e + (slot >= 0 ? F : 0); q++) {
            const uint16_t *v = q < e ? &a->values[r * W + q] : &a->backup[slot * F + (q - e)];
            if (!hybrid_nonzero(*v)) continue; /* a backup position without a non-zero */
            const int64_t j = q < e ? a->columns[r * W + q] : q - e;
            const double av = harness_16_to_f64(p->dtype, *v);
            if (!dx) {
                weight_row(p->dtype, &s->law.WuT, j, bits, w1);
                weight_row(p->dtype, &s->law.Wd, j, bits, w2);
                const double hv = av * dot(x, w1, D);
                for (int64_t c = 0; c < D; c++) y[c] += hv * w2[c];
            } else {
                weight_row(p->dtype, &s->law.Wd, j, bits, w1);
                weight_row(p->dtype, &s->WgT_law, j, bits, w2);
                weight_row(p->dtype, &s->law.WuT, j, bits, w3);
                const double dh = dot(x, w1, D), u = harness_16_to_f64(p->dtype, crng_matrix_at(&s->U, r, j));
                for (int64_t c = 0; c < D; c++) y[c] += dh * u * w2[c] + dh * av * w3[c];
            }
        }
        for (int64_t c = 0; c < D; c++) h->reference[i * D + c] = (float)y[c];
    }
done:
    free(x);
    free(w1);
    free(w2);
    free(w3);
    free(y);
    free(bits);
    return st;
}

static sj_status fwd_reference(harness *h) { return ffn_reference_common(h, 0); }
static sj_status dx_reference(harness *h) { return ffn_reference_common(h, 1); }

/* Useful work at the declared density: fwd the up and down products (4 D a pair), dx the sampled
 * dh and dX's two products (6 D a pair). */
static double fwd_flops(const sj_problem *p) { return 4.0 * (double)p->m * (double)p->n * (double)p->d_ff * twell_target_density(p); }
static double dx_flops(const sj_problem *p) { return 6.0 * (double)p->m * (double)p->n * (double)p->d_ff * twell_target_density(p); }

/* The dense forward after the gate: U = X . Wu, relu(G) (.) U, Y = H . Wd. */
static int fwd_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->d_ff, p->n };
    steps[1] = (baseline_step){ BASELINE_RELU_PRODUCT, p->m, p->d_ff, 0 };
    steps[2] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->d_ff };
    return 3;
}

/* The dense backward through the activations: dH = dY . Wd^T, then the two element-wise products
 * dU = relu(G) (.) dH and dG = dH (.) U (.) [G > 0], the second timed as a two-input product (a
 * fused kernel would read a third array, the mask: a lower bound on its time), and dX = dG . Wg^T
 * + dU . Wu^T (two GEMMs). */
static int dx_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->d_ff, p->n };
    steps[1] = (baseline_step){ BASELINE_RELU_PRODUCT, p->m, p->d_ff, 0 };
    steps[2] = (baseline_step){ BASELINE_PRODUCT, p->m, p->d_ff, 0 };
    steps[3] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->d_ff };
    steps[4] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->d_ff };
    return 5;
}

const harness_ops harness_hybrid_ffn_fwd = {
    .op = SJ_OP_HYBRID_FFN_FWD,
    .setup = fwd_setup,
    .launch = fwd_launch,
    .reference = fwd_reference,
    .flops = fwd_flops,
    .baseline = fwd_baseline,
    .teardown = ffn_teardown,
};

const harness_ops harness_hybrid_ffn_dx = {
    .op = SJ_OP_HYBRID_FFN_DX,
    .setup = dx_setup,
    .launch = dx_launch,
    .reference = dx_reference,
    .flops = dx_flops,
    .baseline = dx_baseline,
    .teardown = ffn_teardown,
};
