/* twell_harness.c: the harnesses of the two TwELL ops of an FFN block, what the tuner and every
 * bench of twell-gate and twell-ffn time, check and count.
 *
 * twell-gate (H = relu(X . Wg) written as TwELL): X and Wg random, with a bias carried by
 * column 0 of X (all ones) and row 0 of Wg, chosen so that H has the problem's twell_sparsity
 * (timings depend on it; the cache key carries it; with twell_skew each unit has its own rate,
 * harness_unit_rates) or, when that is unspecified, a fraction C / (2T) of non-zeros: tiles
 * then hold C/2 on average and rarely overflow (twell_gate_inputs; the FFN block's bench takes
 * its inputs from there too). The output is read back through sj_twell_download +
 * sj_twell_to_dense (which also validates it), and compared with relu of
 * templates/gemm_reference.lua over the same X and Wg. Its baseline: the one dense GEMM.
 *
 * twell-ffn (Y = (H (.) (X . Wu)) . Wd): H random with that density (positive values, as a ReLU
 * gives), X, Wu, Wd random; the reference is computed on the host in fp64 over H's non-zeros
 * only (2 * nnz(H) * d_model multiply-adds), rounding h * u to the input dtype as the op does.
 * Its baseline: the up GEMM, the element-wise product with H and the down GEMM, all dense.
 * Kernel ABIs: templates/twell_gate.lua and templates/twell_ffn.lua. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/twell/twell.h"
#include "ops/twell/twell_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Non-zero fraction of the generated activations: 1 - twell_sparsity (with at least 64 non-zeros
 * expected, so the reference has something to compare), else C/2 per tile of T on average. */
static double target_density(const sj_problem *p)
{
    if (p->twell_sparsity > 0) {
        double cells = (double)p->m * (double)(p->op == SJ_OP_TWELL_FFN ? p->d_ff : p->n);
        double d = 1.0 - p->twell_sparsity, lo = 64.0 / cells;
        return d < lo ? (lo < 1 ? lo : 1) : d;
    }
    double d = (double)p->twell_capacity / (2.0 * p->twell_tile);
    double lo = 1.0 / p->twell_tile;
    return d < lo ? lo : d > 0.5 ? 0.5 : d;
}

static uint64_t seed_state(uint64_t seed, uint64_t salt)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + salt;
    return s ? s : 1;
}

/* ------------------------------------------------------------------ twell-gate */

typedef struct gate_state {
    sj_twell_layout layout;
    sj_twell_device H;
    sj_devptr X, WgT, Wg;    /* Wg (K x N) only for the reference */
} gate_state;

static void gate_teardown(harness *h)
{
    gate_state *s = h->state;
    if (!s) return;
    sj_twell_device_free(h->ctx, &s->H);
    sj_free(h->ctx, s->X);
    sj_free(h->ctx, s->WgT);
    sj_free(h->ctx, s->Wg);
    free(s);
    h->state = NULL;
}

sj_status twell_gate_inputs(const sj_problem *gate, uint64_t *rng, uint16_t *X, uint16_t *WgT)
{
    int64_t M = gate->m, N = gate->n, K = gate->k;
    harness_fill16(gate->dtype, X, (size_t)(M * K), 1.0f, rng);
    harness_fill16(gate->dtype, WgT, (size_t)(N * K), 1.0f, rng);
    if (K < 2) return SJ_OK; /* no column to spare for the bias: the law is relu's own, half zeros */
    double *shift = malloc(sizeof *shift * (size_t)N);
    if (!shift) return error_set(SJ_ERR_OUT_OF_MEMORY, "twell inputs: out of memory for %lld unit shifts", (long long)N);
    /* x . w over the K-1 random terms has variance (K-1)/9 (uniform [-1,1): 1/3 each); unit j's
     * bias makes it fire at its rate (all alike unless the problem has a skew). */
    sj_status st = harness_unit_shifts(target_density(gate), gate->twell_skew, sqrt((double)(K - 1) / 9.0), N, rng, shift);
    if (st == SJ_OK) {
        uint16_t one = harness_f32_to_16(gate->dtype, 1.0f);
        for (int64_t r = 0; r < M; r++) X[r * K] = one;
        for (int64_t j = 0; j < N; j++) WgT[j * K] = harness_f32_to_16(gate->dtype, (float)-shift[j]);
    }
    free(shift);
    return st;
}

static sj_status gate_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    gate_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_status st = sj_twell_layout_init(&s->layout, p->dtype, p->m, p->n, p->twell_tile, p->twell_capacity);
    if (st != SJ_OK) return st;
    int64_t M = p->m, N = p->n, K = p->k;
    uint16_t *X = malloc(sizeof *X * (size_t)(M * K)), *Wg = malloc(sizeof *Wg * (size_t)(K * N)),
             *WgT = malloc(sizeof *WgT * (size_t)(N * K));
    if (!X || !Wg || !WgT) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for a %lldx%lldx%lld gate", (long long)M,
                     (long long)N, (long long)K);
        goto done;
    }
    uint64_t rng = seed_state(seed, 0x7f4a7c15f39cc060ull);
    if ((st = twell_gate_inputs(p, &rng, X, WgT)) != SJ_OK) goto done;
    for (int64_t kk = 0; kk < K; kk++) /* the reference kernel takes Wg as K x N */
        for (int64_t j = 0; j < N; j++) Wg[kk * N + j] = WgT[j * K + kk];
    if ((st = harness_upload(h->ctx, X, sizeof *X * (size_t)(M * K), &s->X)) != SJ_OK ||
        (st = harness_upload(h->ctx, WgT, sizeof *WgT * (size_t)(N * K), &s->WgT)) != SJ_OK ||
        (st = harness_upload(h->ctx, Wg, sizeof *Wg * (size_t)(K * N), &s->Wg)) != SJ_OK ||
        (st = sj_twell_device_alloc(h->ctx, &s->layout, &s->H)) != SJ_OK)
        goto done;
    h->out_count = (size_t)(M * N);
    h->out_rows = M;
    h->out_dtype = p->dtype;
done:
    free(X);
    free(Wg);
    free(WgT);
    return st;
}

static sj_status gate_launch(harness *h, const loaded_kernel *k, void *stream)
{
    gate_state *s = h->state;
    return twell_gate_launch(h->ctx, k, &h->problem, s->X, s->WgT, &s->H, stream);
}

/* Counts of -1 and 0xFF entries: a tile the kernel does not write is invalid when read back. */
static sj_status twell_poison(sj_context *ctx, const sj_twell_device *H)
{
    const sj_twell_layout *l = &H->layout;
    CU_CHECK(cu.cuMemsetD8((CUdeviceptr)H->entries, 0xFF, l->entries_bytes), "poisoning TwELL entries");
    CU_CHECK(cu.cuMemsetD8((CUdeviceptr)H->counts, 0xFF, l->counts_bytes), "poisoning TwELL counts");
    CU_CHECK(cu.cuMemsetD8((CUdeviceptr)H->spill, 0xFF, l->spill_bytes), "poisoning TwELL spill");
    return SJ_OK;
}

static sj_status gate_poison(harness *h)
{
    gate_state *s = h->state;
    return twell_poison(h->ctx, &s->H);
}

static sj_status gate_read(harness *h, void *host)
{
    gate_state *s = h->state;
    sj_twell_host t;
    sj_status st = sj_twell_download(h->ctx, &s->H, &t);
    if (st != SJ_OK) return st;
    st = sj_twell_to_dense(&t, host, h->problem.n);
    sj_twell_host_free(&t);
    /* An inconsistent TwELL (bad count, column, order) is a wrong result of the candidate. */
    return st == SJ_ERR_INVALID_ARGUMENT ? SJ_ERR_VERIFY : st;
}

static sj_status gate_reference(harness *h)
{
    gate_state *s = h->state;
    const sj_problem *p = &h->problem;
    h->reference = malloc(h->out_count * sizeof *h->reference);
    if (!h->reference) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the reference");
    sj_status st = harness_reference_gemm(h->ctx, p->dtype, s->X, s->Wg, p->m, p->n, p->k, h->reference);
    if (st != SJ_OK) return st;
    for (size_t i = 0; i < h->out_count; i++)
        if (h->reference[i] < 0) h->reference[i] = 0;
    sj_free(h->ctx, s->Wg); /* the reference is done with it */
    s->Wg = 0;
    return SJ_OK;
}

static double gate_flops(const sj_problem *p) { return 2.0 * (double)p->m * (double)p->n * (double)p->k; }

const harness_ops harness_twell_gate = {
    .op = SJ_OP_TWELL_GATE,
    .setup = gate_setup,
    .launch = gate_launch,
    .reference = gate_reference,
    .flops = gate_flops,
    .baseline = harness_baseline_gemm,
    .teardown = gate_teardown,
    .poison = gate_poison,
    .read = gate_read,
};

/* ------------------------------------------------------------------ twell-ffn */

typedef struct ffn_state {
    sj_twell_device H;
    sj_devptr X, WuT, Wd, Y;
    /* host copies for the reference, freed once it is computed */
    uint16_t *hX, *hH, *hWuT, *hWd;
    int64_t nnz;
} ffn_state;

static void ffn_free_host(ffn_state *s)
{
    free(s->hX);
    free(s->hH);
    free(s->hWuT);
    free(s->hWd);
    s->hX = s->hH = s->hWuT = s->hWd = NULL;
}

static void ffn_teardown(harness *h)
{
    ffn_state *s = h->state;
    if (!s) return;
    sj_twell_device_free(h->ctx, &s->H);
    sj_free(h->ctx, s->X);
    sj_free(h->ctx, s->WuT);
    sj_free(h->ctx, s->Wd);
    sj_free(h->ctx, s->Y);
    ffn_free_host(s);
    free(s);
    h->state = NULL;
}

static sj_status ffn_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    ffn_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_twell_layout layout;
    sj_status st = sj_twell_layout_init(&layout, p->dtype, p->m, p->d_ff, p->twell_tile, p->twell_capacity);
    if (st != SJ_OK) return st;
    int64_t M = p->m, D = p->n, F = p->d_ff;
    s->hX = malloc(sizeof *s->hX * (size_t)(M * D));
    s->hH = malloc(sizeof *s->hH * (size_t)(M * F));
    s->hWuT = malloc(sizeof *s->hWuT * (size_t)(F * D));
    s->hWd = malloc(sizeof *s->hWd * (size_t)(F * D));
    if (!s->hX || !s->hH || !s->hWuT || !s->hWd)
        return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for a %lld-token FFN of %lld x %lld",
                       (long long)M, (long long)D, (long long)F);
    uint64_t rng = seed_state(seed, 0x5be0cd19137e2179ull);
    harness_fill16(p->dtype, s->hX, (size_t)(M * D), 1.0f, &rng);
    harness_fill16(p->dtype, s->hWuT, (size_t)(F * D), 1.0f, &rng);
    harness_fill16(p->dtype, s->hWd, (size_t)(F * D), 1.0f, &rng);
    double *rate = malloc(sizeof *rate * (size_t)F);
    if (!rate) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for %lld unit rates", (long long)F);
    if ((st = harness_unit_rates(target_density(p), p->twell_skew, F, &rng, rate)) != SJ_OK) {
        free(rate);
        return st;
    }
    uint16_t zero = harness_f32_to_16(p->dtype, 0.0f);
    for (int64_t i = 0; i < M * F; i++) {
        /* positive values in (0, 1], as a ReLU writes them */
        int on = harness_next_unit(&rng) < rate[i % F];
        s->hH[i] = on ? harness_f32_to_16(p->dtype, (float)(1.0 - harness_next_unit(&rng))) : zero;
        s->nnz += on;
    }
    free(rate);
    sj_twell_host th;
    if ((st = sj_twell_from_dense(&layout, s->hH, F, &th, NULL)) != SJ_OK) return st;
    st = sj_twell_upload(h->ctx, &th, &s->H);
    sj_twell_host_free(&th);
    if (st != SJ_OK) return st;
    if ((st = harness_upload(h->ctx, s->hX, sizeof *s->hX * (size_t)(M * D), &s->X)) != SJ_OK ||
        (st = harness_upload(h->ctx, s->hWuT, sizeof *s->hWuT * (size_t)(F * D), &s->WuT)) != SJ_OK ||
        (st = harness_upload(h->ctx, s->hWd, sizeof *s->hWd * (size_t)(F * D), &s->Wd)) != SJ_OK)
        return st;
    h->out_count = (size_t)(M * D);
    h->out_rows = M;
    h->out_dtype = p->out_dtype;
    if ((st = sj_malloc(h->ctx, h->out_count * sj_dtype_size(p->out_dtype), &s->Y)) != SJ_OK) return st;
    h->out = s->Y;
    return SJ_OK;
}

static sj_status ffn_launch(harness *h, const loaded_kernel *k, void *stream)
{
    ffn_state *s = h->state;
    return twell_ffn_launch(h->ctx, k, &h->problem, s->X, &s->H, s->WuT, s->Wd, s->Y, stream);
}

/* Host fp64 over the non-zeros of H: independent of every GPU code path. Every row for the
 * tuner's gate; the sampled rows for a bench, where all of them (2 * nnz(H) * d_model terms)
 * would take minutes at 90% sparsity and 8192 tokens. */
static sj_status ffn_reference(harness *h)
{
    ffn_state *s = h->state;
    const sj_problem *p = &h->problem;
    int64_t M = p->m, D = p->n, F = p->d_ff;
    h->ref_sampled = h->mode == HARNESS_REFERENCE_SAMPLED;
    int64_t rows = h->ref_sampled ? harness_sample_count(M) : M;
    h->reference = malloc((size_t)(rows * D) * sizeof *h->reference);
    double *x = malloc(sizeof *x * (size_t)D), *y = malloc(sizeof *y * (size_t)D);
    if (!h->reference || !x || !y) {
        free(x);
        free(y);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the FFN reference");
    }
    /* the table holds every 16-bit value exactly: the same sums as converting each element, at a
     * fraction of the cost (2 * nnz(H) * d_model terms: billions for a large FFN) */
    const float *lut = harness_lut16(p->dtype);
    for (int64_t i = 0; i < rows; i++) {
        int64_t r = h->ref_sampled ? harness_sample_row(M, (int)i) : i;
        for (int64_t c = 0; c < D; c++) {
            x[c] = lut[s->hX[r * D + c]];
            y[c] = 0;
        }
        for (int64_t j = 0; j < F; j++) {
            uint16_t hb = s->hH[r * F + j];
            if (!twell_nonzero(hb)) continue;
            const uint16_t *wu = s->hWuT + j * D, *wd = s->hWd + j * D;
            double u = 0;
            for (int64_t c = 0; c < D; c++) u += x[c] * lut[wu[c]];
            double hu = lut[harness_f32_to_16(p->dtype, (float)(lut[hb] * u))];
            for (int64_t c = 0; c < D; c++) y[c] += hu * lut[wd[c]];
        }
        for (int64_t c = 0; c < D; c++) h->reference[i * D + c] = (float)y[c];
    }
    free(x);
    free(y);
    ffn_free_host(s);
    return SJ_OK;
}

/* Useful work: up and down products at the active units only (the template's flops() is the
 * dense equivalent, which it reports because it cannot see the data). */
static double ffn_flops(const sj_problem *p)
{
    return 4.0 * (double)p->m * (double)p->n * (double)p->d_ff * target_density(p);
}

/* The dense products the fused FFN replaces: U = X . Wu, H (.) U, and Y = (H (.) U) . Wd. */
static int ffn_baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->d_ff, p->n };
    steps[1] = (baseline_step){ BASELINE_PRODUCT, p->m, p->d_ff, 0 };
    steps[2] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->d_ff };
    return 3;
}

const harness_ops harness_twell_ffn = {
    .op = SJ_OP_TWELL_FFN,
    .setup = ffn_setup,
    .launch = ffn_launch,
    .reference = ffn_reference,
    .flops = ffn_flops,
    .baseline = ffn_baseline,
    .teardown = ffn_teardown,
};
