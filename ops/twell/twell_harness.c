/* twell_harness.c: the harnesses of the two TwELL ops of an FFN block, what the tuner and every
 * bench of twell-gate and twell-ffn time, check and count.
 *
 * Inputs are written on the device by the counter-based generator (twell_inputs.c's laws,
 * tuner/random_fill.h); nothing is generated on the host or uploaded whole.
 *
 * twell-gate (H = relu(X . Wg) written as TwELL): X and Wg random, with a bias carried by
 * column 0 of X (all ones) and row 0 of Wg, chosen so that H has the problem's twell_sparsity
 * (timings depend on it; the cache key carries it; with twell_skew each unit has its own rate,
 * harness_unit_rates) or, when that is unspecified, a fraction C / (2T) of non-zeros: tiles
 * then hold C/2 on average and rarely overflow (twell_gate_inputs; the FFN block's bench takes
 * its inputs from there too). The output is read back through sj_twell_download +
 * sj_twell_to_dense (which also validates it), and compared with relu of
 * templates/gemm_reference.lua over the same X and Wg (generated transposed for it). Its
 * baseline: the one dense GEMM.
 *
 * twell-ffn (Y = (H (.) (X . Wu)) . Wd): H random with that density (positive values, as a ReLU
 * gives; generated straight as TwELL), X, Wu, Wd random; the reference is computed on the host
 * in fp64 over H's non-zeros only (2 * nnz(H) * d_model multiply-adds), rounding h * u to the
 * input dtype as the op does, from the elements the host generator gives for the rows it checks
 * and the units active there. Its baseline: the up GEMM, the element-wise product with H and
 * the down GEMM, all dense. Kernel ABIs: templates/twell_gate.lua and templates/twell_ffn.lua. */
#include "tuner/harness.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "ops/twell/twell.h"
#include "ops/twell/twell_format.h"
#include "tuner/random_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static sj_status gate_setup(harness *h, uint64_t seed)
{
    const sj_problem *p = &h->problem;
    gate_state *s = calloc(1, sizeof *s);
    if (!s) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory");
    h->state = s;
    sj_status st = sj_twell_layout_init(&s->layout, p->dtype, p->m, p->n, p->twell_tile, p->twell_capacity);
    twell_gate_law law;
    if (st != SJ_OK || (st = twell_gate_inputs(p, seed, &law)) != SJ_OK) return st;
    if ((st = twell_gate_write(h->ctx, &law, &s->X, &s->WgT, &s->Wg)) == SJ_OK &&
        (st = sj_twell_device_alloc(h->ctx, &s->layout, &s->H)) == SJ_OK) {
        h->out_count = (size_t)(p->m * p->n);
        h->out_rows = p->m;
        h->out_dtype = p->dtype;
    }
    twell_gate_inputs_free(&law);
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
    return twell_gate_reference(h, s->X, &s->Wg);
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
    twell_ffn_law law;       /* what the host reference generates its elements from */
    sj_twell_device H;
    sj_devptr X, WuT, Wd, Y;
} ffn_state;

static void ffn_teardown(harness *h)
{
    ffn_state *s = h->state;
    if (!s) return;
    sj_twell_device_free(h->ctx, &s->H);
    sj_free(h->ctx, s->X);
    sj_free(h->ctx, s->WuT);
    sj_free(h->ctx, s->Wd);
    sj_free(h->ctx, s->Y);
    twell_ffn_inputs_free(&s->law);
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
    if (st != SJ_OK || (st = twell_ffn_inputs(p, seed, &s->law)) != SJ_OK) return st;
    if ((st = random_device_matrix(h->ctx, &s->law.X, 0, &s->X)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &s->law.WuT, 0, &s->WuT)) != SJ_OK ||
        (st = random_device_matrix(h->ctx, &s->law.Wd, 0, &s->Wd)) != SJ_OK ||
        (st = sj_twell_device_alloc(h->ctx, &layout, &s->H)) != SJ_OK ||
        (st = random_fill_twell(h->ctx, &s->law.H, &s->H)) != SJ_OK)
        return st;
    h->out_count = (size_t)(p->m * p->n);
    h->out_rows = p->m;
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
 * would take minutes at 90% sparsity and 8192 tokens. One pass over the units: a unit's weight
 * rows are generated only when it fires in a checked row, once for all of them; each row still
 * sums its units in order, so a sampled row is the full reference's row bit for bit. */
static sj_status ffn_reference(harness *h)
{
    ffn_state *s = h->state;
    const sj_problem *p = &h->problem;
    const twell_ffn_law *law = &s->law;
    int64_t M = p->m, D = p->n, F = p->d_ff;
    h->ref_sampled = h->mode == HARNESS_REFERENCE_SAMPLED;
    int64_t rows = h->ref_sampled ? harness_sample_count(M) : M;
    h->reference = malloc((size_t)(rows * D) * sizeof *h->reference);
    float *x = malloc(sizeof *x * (size_t)(rows * D)), *wu = malloc(sizeof *wu * (size_t)D),
          *wd = malloc(sizeof *wd * (size_t)D);
    double *y = calloc((size_t)(rows * D), sizeof *y);
    int64_t *row = malloc(sizeof *row * (size_t)rows), *active = malloc(sizeof *active * (size_t)rows);
    uint16_t *bits = malloc(sizeof *bits * (size_t)D), *hv = malloc(sizeof *hv * (size_t)rows);
    sj_status st = SJ_OK;
    if (!h->reference || !x || !wu || !wd || !y || !row || !active || !bits || !hv) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the FFN reference of %lld rows",
                       (long long)rows);
        goto done;
    }
    /* the table holds every 16-bit value exactly: the same sums as converting each element */
    const float *lut = harness_lut16(p->dtype);
    for (int64_t i = 0; i < rows; i++) {
        row[i] = h->ref_sampled ? harness_sample_row(M, (int)i) : i;
        crng_matrix_row(&law->X, row[i], bits);
        for (int64_t c = 0; c < D; c++) x[i * D + c] = lut[bits[c]];
    }
    for (int64_t j = 0; j < F; j++) {
        int64_t n_active = 0;
        for (int64_t i = 0; i < rows; i++) {
            uint16_t hb = crng_activation_at(&law->H, row[i], j);
            if (!twell_nonzero(hb)) continue;
            active[n_active] = i;
            hv[n_active++] = hb;
        }
        if (!n_active) continue;
        crng_matrix_row(&law->WuT, j, bits);
        for (int64_t c = 0; c < D; c++) wu[c] = lut[bits[c]];
        crng_matrix_row(&law->Wd, j, bits);
        for (int64_t c = 0; c < D; c++) wd[c] = lut[bits[c]];
        for (int64_t a = 0; a < n_active; a++) {
            const float *xi = x + active[a] * D;
            double *yi = y + active[a] * D, u = 0;
            for (int64_t c = 0; c < D; c++) u += (double)xi[c] * wu[c];
            double hu = lut[harness_f32_to_16(p->dtype, (float)(lut[hv[a]] * u))];
            for (int64_t c = 0; c < D; c++) yi[c] += hu * wd[c];
        }
    }
    for (int64_t i = 0; i < rows * D; i++) h->reference[i] = (float)y[i];
done:
    free(x);
    free(wu);
    free(wd);
    free(y);
    free(row);
    free(active);
    free(bits);
    free(hv);
    return st;
}

/* Useful work: up and down products at the active units only (the template's flops() is the
 * dense equivalent, which it reports because it cannot see the data). */
static double ffn_flops(const sj_problem *p)
{
    return 4.0 * (double)p->m * (double)p->n * (double)p->d_ff * twell_target_density(p);
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
