/* twell_inputs.c: the laws of the TwELL family's benchmark inputs (twell.h), on the counter-based
 * generator: the gate's X and WgT with the bias column that gives relu(X . Wg) the problem's
 * sparsity and skew, and the fused FFN's X, WuT, Wd and activations H. What is not an element
 * of a stream (the biases, the units' thresholds) is computed here, once per unit; the gate's
 * inputs are written on the device from here too. */
#include "ops/twell/twell.h"
#include "core/error.h"
#include "tuner/random_fill.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sj_status twell_check_dead(const sj_problem *p)
{
    double dead = p->twell_dead;
    if (!(dead >= 0 && dead <= SJ_TWELL_MAX_DEAD))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_dead = %g: expected a share of never-firing units in "
                         "[0, %g]", dead, SJ_TWELL_MAX_DEAD);
    if (dead > 0 && !(p->twell_sparsity > 0))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_dead = %g needs problem.twell_sparsity > 0 (the "
                         "non-zeros the live units share)", dead);
    if (dead > 0 && (1 - p->twell_sparsity) / (1 - dead) > HARNESS_RATE_CAP)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "problem.twell_dead = %g with problem.twell_sparsity = %g leaves the "
                         "live units a mean rate of %g: expected at most %g", dead, p->twell_sparsity,
                         (1 - p->twell_sparsity) / (1 - dead), HARNESS_RATE_CAP);
    return SJ_OK;
}

void twell_dead_key(const sj_problem *p, char *buf, size_t len)
{
    if (p->twell_dead > 0) snprintf(buf, len, ",D=%.4g", p->twell_dead);
    else if (len) buf[0] = 0;
}

void twell_dead_label(const sj_problem *p, char *buf, size_t len)
{
    if (p->twell_dead > 0) snprintf(buf, len, "/D%g", p->twell_dead);
    else if (len) buf[0] = 0;
}

double twell_target_density(const sj_problem *p)
{
    if (p->twell_sparsity > 0) {
        /* the activations are tokens x d_ff: the gates' n, the FFN ops' d_ff (their n is d_model) */
        int ffn = p->op == SJ_OP_TWELL_FFN || p->op == SJ_OP_HYBRID_FFN_FWD || p->op == SJ_OP_HYBRID_FFN_DX ||
                  p->op == SJ_OP_HYBRID_FFN_DW;
        double cells = (double)p->m * (double)(ffn ? p->d_ff : p->n);
        double d = 1.0 - p->twell_sparsity, lo = 64.0 / cells;
        return d < lo ? (lo < 1 ? lo : 1) : d;
    }
    double d = (double)p->twell_capacity / (2.0 * p->twell_tile);
    double lo = 1.0 / p->twell_tile;
    return d < lo ? lo : d > 0.5 ? 0.5 : d;
}

/* The xorshift state that orders the units of a skewed law (harness_unit_rates). */
static uint64_t unit_rng(uint64_t seed)
{
    uint64_t s = crng_key(seed, 0);
    return s ? s : 1;
}

void twell_gate_inputs_free(twell_gate_law *law)
{
    free(law->ones);
    free(law->bias);
    memset(law, 0, sizeof *law);
}

sj_status twell_gate_inputs(const sj_problem *gate, uint64_t seed, twell_gate_law *law)
{
    memset(law, 0, sizeof *law);
    int64_t M = gate->m, N = gate->n, K = gate->k;
    law->X = (crng_matrix){ gate->dtype, crng_key(seed, TWELL_STREAM_X), M, K, NULL };
    law->WgT = (crng_matrix){ gate->dtype, crng_key(seed, TWELL_STREAM_WG), N, K, NULL };
    if (K < 2) return SJ_OK; /* no column to spare for the bias: the law is relu's own, half zeros */
    law->ones = malloc(sizeof *law->ones * (size_t)M);
    law->bias = malloc(sizeof *law->bias * (size_t)N);
    double *shift = malloc(sizeof *shift * (size_t)N);
    sj_status st = SJ_OK;
    if (!law->ones || !law->bias || !shift) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "twell inputs: out of memory for %lld rows and %lld unit biases",
                       (long long)M, (long long)N);
        goto done;
    }
    /* x . w over the K-1 random terms has variance (K-1)/9 (uniform [-1,1): 1/3 each); unit j's
     * bias makes it fire at its rate (all alike unless the problem has a skew). */
    uint64_t rng = unit_rng(seed);
    if ((st = harness_unit_shifts(twell_target_density(gate), gate->twell_skew, gate->twell_dead,
                                  sqrt((double)(K - 1) / 9.0), N, &rng, shift)) != SJ_OK)
        goto done;
    uint16_t one = harness_f32_to_16(gate->dtype, 1.0f);
    for (int64_t r = 0; r < M; r++) law->ones[r] = one;
    for (int64_t j = 0; j < N; j++) law->bias[j] = harness_f32_to_16(gate->dtype, (float)-shift[j]);
    law->X.col0 = law->ones;
    law->WgT.col0 = law->bias;
done:
    free(shift);
    if (st != SJ_OK) twell_gate_inputs_free(law);
    return st;
}

sj_status twell_gate_write(sj_context *ctx, const twell_gate_law *law, sj_devptr *X, sj_devptr *WgT, sj_devptr *Wg)
{
    sj_status st;
    if ((st = random_device_matrix(ctx, &law->X, 0, X)) != SJ_OK ||
        (st = random_device_matrix(ctx, &law->WgT, 0, WgT)) != SJ_OK)
        return st;
    return Wg ? random_device_matrix(ctx, &law->WgT, 1, Wg) : SJ_OK;
}

void twell_ffn_inputs_free(twell_ffn_law *law)
{
    free(law->threshold);
    memset(law, 0, sizeof *law);
}

sj_status twell_ffn_inputs(const sj_problem *p, uint64_t seed, twell_ffn_law *law)
{
    memset(law, 0, sizeof *law);
    int64_t M = p->m, D = p->n, F = p->d_ff;
    law->X = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_X), M, D, NULL };
    law->WuT = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WU), F, D, NULL };
    law->Wd = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WD), F, D, NULL };
    law->threshold = malloc(sizeof *law->threshold * (size_t)F);
    double *rate = malloc(sizeof *rate * (size_t)F);
    sj_status st = SJ_OK;
    if (!law->threshold || !rate) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "twell inputs: out of memory for %lld unit rates", (long long)F);
    } else {
        uint64_t rng = unit_rng(seed);
        if ((st = harness_unit_rates(twell_target_density(p), p->twell_skew, p->twell_dead, F, &rng, rate)) == SJ_OK)
            for (int64_t j = 0; j < F; j++) law->threshold[j] = crng_threshold(rate[j]);
    }
    free(rate);
    if (st != SJ_OK) {
        twell_ffn_inputs_free(law);
        return st;
    }
    law->H = (crng_activations){ p->dtype, crng_key(seed, TWELL_STREAM_H), M, F, law->threshold };
    return SJ_OK;
}

sj_status twell_gate_reference(harness *h, sj_devptr X, sj_devptr *Wg)
{
    const sj_problem *p = &h->problem;
    h->reference = malloc(h->out_count * sizeof *h->reference);
    if (!h->reference) return error_set(SJ_ERR_OUT_OF_MEMORY, "harness: out of memory for the reference");
    sj_status st = harness_reference_gemm(h->ctx, p->dtype, X, *Wg, p->m, p->n, p->k, h->reference);
    if (st != SJ_OK) return st;
    for (size_t i = 0; i < h->out_count; i++)
        if (h->reference[i] < 0) h->reference[i] = 0;
    sj_free(h->ctx, *Wg); /* the reference is done with it */
    *Wg = 0;
    return SJ_OK;
}
