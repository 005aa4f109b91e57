/* twell_block.c: bench_twell_ffn_block, the benchmark of a whole ReLU FFN block that is not one
 * op's kernel: `sparsejit bench --op twell-ffn-block` (and Lua's sparsejit.bench) runs the gate
 * GEMM writing TwELL (twell-gate) and then the fused FFN over the TwELL it just wrote
 * (twell-ffn), each through its entry point, against the dense block: three cuBLAS GEMMs (gate,
 * up, down) and the element-wise relu(gate) (.) up between them. It takes the twell-ffn problem
 * (tokens x d_model x d_model, d_ff, TwELL, sparsity, skew) and derives the gate's from it.
 *
 * Inputs: the gate harness's (twell_gate_inputs: X and Wg uniform in [-1, 1) with a bias that
 * gives relu(X . Wg) the problem's sparsity), Wu and Wd uniform, all written on the device by
 * the counter-based generator. Its FLOPs are its parts' harness counts, so the block and its two
 * ops' benches agree. The check compares the sampled rows of Y (harness_sample_row) with an fp64
 * host reference that recomputes the gate from X and Wg, so a gate that wrote the wrong TwELL
 * fails it too; the host generates the elements it reads (those rows of X, every unit's gate
 * weights, the up and down weights of the units active there). Nothing here is tuned: the tuner
 * tunes the two ops, and the block runs their winners. */
#include "tuner/bench.h"
#include "core/error.h"
#include "ops/twell/twell.h"
#include "tuner/random_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bench_case {
    sj_problem p;        /* the FFN's */
    sj_problem gate;
    twell_gate_law law;  /* X and WgT, for check() */
    crng_matrix WuT, Wd;
    sj_twell_device H;
    sj_devptr X, WgT, WuT_d, Wd_d, Y;
};

/* The block's gate problem: tokens x d_ff over d_model, H in the input dtype, the FFN's TwELL
 * and input law (the cache keys both parts' winners by it). */
static void gate_problem(const sj_problem *p, sj_problem *gate)
{
    *gate = *p;
    gate->op = SJ_OP_TWELL_GATE;
    gate->out_dtype = p->dtype;
    gate->n = p->d_ff;
    gate->d_ff = 0;
}

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    sj_twell_device_free(ctx, &c->H);
    sj_devptr ptrs[] = { c->X, c->WgT, c->WuT_d, c->Wd_d, c->Y };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) sj_free(ctx, ptrs[i]);
    twell_gate_inputs_free(&c->law);
    free(c);
}

static sj_status setup(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out)
{
    *out = NULL;
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell-ffn-block: no host memory");
    c->p = *p;
    gate_problem(p, &c->gate);
    int64_t M = p->m, D = p->k, F = p->d_ff;
    c->WuT = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WU), F, D, NULL };
    c->Wd = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WD), F, D, NULL };
    sj_twell_layout layout;
    sj_status st = sj_problem_validate(&c->gate);
    if (st != SJ_OK || (st = sj_twell_layout_init(&layout, p->dtype, M, F, p->twell_tile, p->twell_capacity)) != SJ_OK ||
        (st = twell_gate_inputs(&c->gate, seed, &c->law)) != SJ_OK ||
        (st = twell_gate_write(ctx, &c->law, &c->X, &c->WgT, NULL)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->WuT, 0, &c->WuT_d)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->Wd, 0, &c->Wd_d)) != SJ_OK ||
        (st = sj_twell_device_alloc(ctx, &layout, &c->H)) != SJ_OK ||
        (st = sj_malloc(ctx, (size_t)(M * p->n) * sj_dtype_size(p->out_dtype), &c->Y)) != SJ_OK) {
        teardown(ctx, c);
        return st;
    }
    *out = c;
    return SJ_OK;
}

static sj_status launch(sj_context *ctx, bench_case *c)
{
    sj_status st = sj_twell_gate(ctx, &c->gate, c->X, c->WgT, &c->H, NULL);
    if (st != SJ_OK) return st;
    return sj_twell_ffn(ctx, &c->p, c->X, &c->H, c->WuT_d, c->Wd_d, c->Y, NULL);
}

/* The reference of the sampled rows in one pass over the d_ff units: h = relu(x . Wg[:, j])
 * rounded to the dtype as the gate stores it, then y += h (x . Wu[:, j]) Wd[j, :]. The rows'
 * x are interleaved (xt[k * rows + i]) so the gate's dot products of all rows run side by side
 * (the compiler vectorizes across rows; each row still sums in k order). */
static sj_status reference(const bench_case *c, int rows, float *y_ref)
{
    const sj_problem *p = &c->p;
    int64_t D = p->k, F = p->d_ff, M = p->m;
    const float *lut = harness_lut16(p->dtype);
    double *xt = malloc(sizeof *xt * (size_t)(rows * D)), *y = calloc((size_t)(rows * D), sizeof *y);
    double *wg = malloc(sizeof *wg * (size_t)D), *pre = malloc(sizeof *pre * (size_t)rows);
    uint16_t *bits = malloc(sizeof *bits * (size_t)D), *wu = malloc(sizeof *wu * (size_t)D),
             *wd = malloc(sizeof *wd * (size_t)D);
    sj_status st = SJ_OK;
    if (!xt || !y || !wg || !pre || !bits || !wu || !wd) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell-ffn-block: no host memory for the reference");
        goto done;
    }
    for (int i = 0; i < rows; i++) {
        crng_matrix_row(&c->law.X, harness_sample_row(M, i), bits);
        for (int64_t k = 0; k < D; k++) xt[k * rows + i] = lut[bits[k]];
    }
    for (int64_t j = 0; j < F; j++) {
        crng_matrix_row(&c->law.WgT, j, bits);
        for (int64_t k = 0; k < D; k++) wg[k] = lut[bits[k]];
        for (int i = 0; i < rows; i++) pre[i] = 0;
        for (int64_t k = 0; k < D; k++)
            for (int i = 0; i < rows; i++) pre[i] += xt[k * rows + i] * wg[k];
        int have_weights = 0;
        for (int i = 0; i < rows; i++) {
            float h = lut[harness_f32_to_16(p->dtype, pre[i] > 0 ? (float)pre[i] : 0.0f)];
            if (h == 0) continue;
            if (!have_weights) { /* the unit fires in a checked row: its up and down weights */
                crng_matrix_row(&c->WuT, j, wu);
                crng_matrix_row(&c->Wd, j, wd);
                have_weights = 1;
            }
            double u = 0;
            for (int64_t k = 0; k < D; k++) u += xt[k * rows + i] * lut[wu[k]];
            for (int64_t k = 0; k < D; k++) y[i * D + k] += h * u * lut[wd[k]];
        }
    }
    for (int64_t i = 0; i < rows * D; i++) y_ref[i] = (float)y[i];
done:
    free(xt);
    free(y);
    free(wg);
    free(pre);
    free(bits);
    free(wu);
    free(wd);
    return st;
}

static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    *rel_error = INFINITY;
    const sj_problem *p = &c->p;
    int rows = harness_sample_count(p->m);
    size_t row_bytes = (size_t)p->n * sj_dtype_size(p->out_dtype);
    float *ref = malloc(sizeof *ref * (size_t)(rows * p->n));
    unsigned char *got = malloc(row_bytes * (size_t)rows);
    sj_status st = ref && got ? SJ_OK : error_set(SJ_ERR_OUT_OF_MEMORY, "bench twell-ffn-block: no host memory for the check");
    if (st == SJ_OK) st = reference(c, rows, ref);
    for (int i = 0; i < rows && st == SJ_OK; i++)
        st = sj_memcpy_dtoh(ctx, got + i * row_bytes, c->Y + (sj_devptr)harness_sample_row(p->m, i) * row_bytes, row_bytes);
    if (st == SJ_OK) *rel_error = harness_rel_error(p->out_dtype, got, ref, (size_t)(rows * p->n));
    free(ref);
    free(got);
    return st;
}

/* The parts' own counts: the dense gate, the up and down products at the active units. */
static double flops(const sj_problem *p)
{
    sj_problem gate;
    gate_problem(p, &gate);
    return harness_twell_gate.flops(&gate) + harness_twell_ffn.flops(p);
}

/* The dense block: gate and up GEMMs (tokens x d_ff over d_model), relu(gate) (.) up, the down
 * GEMM (tokens x d_model over d_ff). */
static int baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->d_ff, p->k };
    steps[1] = (baseline_step){ BASELINE_GEMM, p->m, p->d_ff, p->k };
    steps[2] = (baseline_step){ BASELINE_RELU_PRODUCT, p->m, p->d_ff, 0 };
    steps[3] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->d_ff };
    return 4;
}

static const bench_ops block_ops = {
    .setup = setup,
    .launch = launch,
    .check = check,
    .flops = flops,
    .baseline = baseline,
    .teardown = teardown,
};

const op_bench bench_twell_ffn_block = {
    .name = "twell-ffn-block",
    .op = SJ_OP_TWELL_FFN,
    .parts = "twell-gate + twell-ffn",
    .summary = "twell-gate, then twell-ffn over its TwELL: gate and up GEMMs, relu(gate) (.) up, down GEMM",
    .ops = &block_ops,
};
