/* hybrid_dw_harness.c: the harness of hybrid-ffn-dw, what the tuner and every bench of the op
 * time, check and count. Inputs: twell_ffn_inputs' X and activations a (ops/twell/twell.h, the
 * problem's sparsity and skew), built into the hybrid format on the host with a backup that holds
 * every overflow row, dY, and the per-pair values u (16-bit), dg and du (fp32) drawn at a's
 * positions (hybrid_inputs.h). A launch is the op's: the transpose stages into the harness's
 * workspace, then the kernel (with a BUSY > 0 config also the busy units' stages and GEMMs, their
 * buffers in the same workspace, sized for the kernel launched: hybrid_harness_workspace). The
 * output checked is dWgT, dWuT and dWd one after the other
 * (3 d_ff rows of d_model) against an fp64 host sum over each checked unit's tokens, found by a
 * host transpose of a, sharing no code with the kernels. Baseline: the three dense
 * weight-gradient GEMMs. */
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

typedef struct dw_state {
    twell_ffn_law law;             /* X, a */
    crng_matrix dY, U, DG, DU;
    sj_hybrid_host a;
    sj_hybrid_device H;
    hybrid_saved_u u;
    hybrid_grads g;
    hybrid_dw_ws plan;
    sj_devptr X, dYd, out, work;   /* out: dWgT, dWuT, dWd back to back */
    size_t work_bytes;
} dw_state;

static void dw_teardown(harness *h)
{
    dw_state *s = h->state;
    if (!s) return;
    sj_devptr ptrs[] = { s->u.values, s->u.backup, s->g.dg_values, s->g.dg_backup, s->g.du_values, s->g.du_backup,
                         s->X, s->dYd, s->out, s->work };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) sj_free(h->ctx, ptrs[i]);
    sj_hybrid_device_free(h->ctx, &s->H);
    sj_hybrid_host_free(&s->a);
    twell_ffn_inputs_free(&s->law);
    free(s);
    h->state = NULL;
}

static sj_status dw_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    dw_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_status st = twell_ffn_inputs(p, seed, &s->law);
    if (st != SJ_OK || (st = hybrid_activations(p, &s->law.H, &s->a)) != SJ_OK ||
        (st = sj_hybrid_upload(h->ctx, &s->a, &s->H)) != SJ_OK)
        return st;
    s->dY = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_DY), p->m, p->n, NULL };
    s->U = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_U), p->m, p->d_ff, NULL };
    s->DG = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_DG), p->m, p->d_ff, NULL };
    s->DU = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_DU), p->m, p->d_ff, NULL };
    if ((st = random_device_matrix(h->ctx, &s->law.X, 0, &s->X)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &s->dY, 0, &s->dYd)) != SJ_OK ||
        (st = hybrid_pairs_upload(h->ctx, &s->a, &s->U, HYBRID_PAIR_16, &s->u.values, &s->u.backup)) != SJ_OK ||
        (st = hybrid_pairs_upload(h->ctx, &s->a, &s->DG, HYBRID_PAIR_F32, &s->g.dg_values, &s->g.dg_backup)) != SJ_OK ||
        (st = hybrid_pairs_upload(h->ctx, &s->a, &s->DU, HYBRID_PAIR_F32, &s->g.du_values, &s->g.du_backup)) != SJ_OK)
        return st;
    hybrid_dw_plan(p->m, p->d_ff, p->twell_capacity, s->a.layout.backup_rows, &s->plan);
    h->out_rows = 3 * p->d_ff;
    h->out_count = (size_t)(h->out_rows * p->n);
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->out)) != SJ_OK) return st;
    h->out = s->out;
    return SJ_OK;
}

static sj_status dw_launch(harness *h, const loaded_kernel *k, void *stream)
{
    dw_state *s = h->state;
    const size_t grad = (size_t)(h->problem.d_ff * h->problem.n) * sj_dtype_size(h->problem.out_dtype);
    hybrid_weight_grads out = { s->out, s->out + grad, s->out + 2 * grad };
    sj_status st = hybrid_harness_workspace(h->ctx, k, &s->H.layout, &s->work, &s->work_bytes);
    if (st != SJ_OK) return st;
    return hybrid_ffn_dw_launch(h->ctx, k, s->X, s->dYd, &s->H, &s->u, &s->g, &out, s->work, &s->plan, stream);
}

/* One active pair of a on the host: its token and its value bits. */
typedef struct host_pair {
    int64_t t;
    uint16_t a;
} host_pair;

/* Every unit's pairs (units[j] .. units[j + 1] in pairs), counted then placed, from the host
 * hybrid matrix: the reference's own transpose. */
static sj_status host_transpose(const sj_hybrid_host *a, int64_t **units, host_pair **pairs)
{
    const sj_hybrid_layout *l = &a->layout;
    const int64_t F = l->cols, W = l->width;
    int64_t *start = calloc((size_t)F + 1, sizeof *start), *fill = calloc((size_t)F, sizeof *fill);
    host_pair *list = NULL;
    for (int pass = 0; pass < 2 && start && fill; pass++) {
        for (int64_t t = 0; t < l->rows; t++) {
            const int64_t e = a->nnz[t] < W ? a->nnz[t] : W, s = a->nnz[t] > W ? a->slot[t] : -1;
            for (int64_t q = 0; q < e + (s >= 0 ? F : 0); q++) {
                const uint16_t v = q < e ? a->values[t * W + q] : a->backup[s * F + (q - e)];
                if (!hybrid_nonzero(v)) continue;
                const int64_t j = q < e ? a->columns[t * W + q] : q - e;
                if (pass == 0) start[j + 1]++;
                else list[start[j] + fill[j]++] = (host_pair){ t, v };
            }
        }
        if (pass == 0) {
            for (int64_t j = 0; j < F; j++) start[j + 1] += start[j];
            if (!(list = malloc(sizeof *list * (size_t)(start[F] + 1)))) break;
        }
    }
    free(fill);
    if (!start || !list) {
        free(start);
        free(list);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the host transpose");
    }
    *units = start;
    *pairs = list;
    return SJ_OK;
}

/* fp64 per checked output row r (gradient r / d_ff of unit r % d_ff): dWgT[j] = sum dg X[t],
 * dWuT[j] = sum du X[t], dWd[j] = sum a u dY[t] over the unit's tokens. */
static sj_status dw_reference(harness *h)
{
    dw_state *s = h->state;
    const sj_problem *p = &h->problem;
    const int64_t D = p->n, F = p->d_ff;
    h->ref_sampled = h->mode == HARNESS_REFERENCE_SAMPLED;
    const int64_t rows = h->ref_sampled ? harness_sample_count(h->out_rows) : h->out_rows;
    int64_t *units = NULL;
    host_pair *pairs = NULL;
    sj_status st = host_transpose(&s->a, &units, &pairs);
    if (st != SJ_OK) return st;
    h->reference = malloc((size_t)(rows * D) * sizeof *h->reference);
    double *acc = malloc(sizeof *acc * (size_t)D);
    uint16_t *bits = malloc(sizeof *bits * (size_t)D);
    if (!h->reference || !acc || !bits) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the hybrid-ffn-dw reference");
        goto done;
    }
    for (int64_t i = 0; i < rows; i++) {
        const int64_t r = h->ref_sampled ? harness_sample_row(h->out_rows, (int)i) : i, which = r / F, j = r % F;
        memset(acc, 0, sizeof *acc * (size_t)D);
        for (int64_t q = units[j]; q < units[j + 1]; q++) {
            const int64_t t = pairs[q].t;
            double c;
            if (which == 0) c = hybrid_pair_value(&s->DG, t, j);
            else if (which == 1) c = hybrid_pair_value(&s->DU, t, j);
            else c = harness_16_to_f64(p->dtype, pairs[q].a) * hybrid_pair_value(&s->U, t, j);
            crng_matrix_row(which == 2 ? &s->dY : &s->law.X, t, bits);
            for (int64_t col = 0; col < D; col++) acc[col] += c * harness_16_to_f64(p->dtype, bits[col]);
        }
        for (int64_t col = 0; col < D; col++) h->reference[i * D + col] = (float)acc[col];
    }
done:
    free(units);
    free(pairs);
    free(acc);
    free(bits);
    return st;
}

/* Three products of 2 d_model FLOPs per active pair at the declared density. */
static double dw_flops(const sj_problem *p)
{
    return 6.0 * (double)p->m * (double)p->n * (double)p->d_ff * twell_target_density(p);
}

/* The dense weight gradients: dWg and dWu (d_model x d_ff over tokens) and dWd (d_ff x d_model). */
static int dw_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->n, p->d_ff, p->m };
    steps[1] = (baseline_step){ BASELINE_GEMM, p->n, p->d_ff, p->m };
    steps[2] = (baseline_step){ BASELINE_GEMM, p->d_ff, p->n, p->m };
    return 3;
}

const harness_ops harness_hybrid_ffn_dw = {
    .op = SJ_OP_HYBRID_FFN_DW,
    .setup = dw_setup,
    .launch = dw_launch,
    .reference = dw_reference,
    .flops = dw_flops,
    .baseline = dw_baseline,
    .teardown = dw_teardown,
};
