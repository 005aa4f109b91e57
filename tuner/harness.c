/* harness.c: the parts of the per-op harness that every op shares: choosing the op's harness,
 * the NaN-poisoned correctness gate against the reference (every element, or sampled rows for
 * the benches), the reference GEMM kernel itself, 16-bit conversions and the laws of skewed units. */
#include "tuner/harness.h"
#include "core/op.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "generator/nvrtc.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sj_status harness_for(const sj_problem *p, const harness_ops **out)
{
    const op_desc *d = op_find(p->op);
    if (!d || !d->harness) /* e.g. the V:N:M compressor: a format conversion, not a tuned op */
        return error_set(SJ_ERR_INVALID_ARGUMENT, "the tuner has no harness for op %d (%s)", (int)p->op,
                         d ? d->name : "not an op");
    *out = d->harness;
    return SJ_OK;
}

/* Values the reference holds: every output element, or the sampled rows'. */
static size_t reference_count(const harness *h)
{
    if (!h->ref_sampled) return h->out_count;
    return (size_t)harness_sample_count(h->out_rows) * (h->out_count / (size_t)h->out_rows);
}

sj_status harness_open(sj_context *ctx, const sj_problem *p, uint64_t seed, harness_reference mode, harness *h)
{
    memset(h, 0, sizeof *h);
    if (mode != HARNESS_NO_REFERENCE && mode != HARNESS_REFERENCE && mode != HARNESS_REFERENCE_SAMPLED)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "harness_open: reference mode %d: expected 0 (none), 1 (every "
                         "element) or 2 (sampled rows)", (int)mode);
    sj_status st = harness_for(p, &h->ops);
    if (st != SJ_OK) return st;
    h->ctx = ctx;
    h->problem = *p;
    h->mode = mode;
    if ((st = h->ops->setup(h, seed)) != SJ_OK) {
        harness_close(h);
        return st;
    }
    if (h->out_rows < 1 || h->out_count % (size_t)h->out_rows) {
        st = error_set(SJ_ERR_INVALID_ARGUMENT, "the %s harness left an output of %zu elements in %lld rows",
                       sj_op_name(p->op), h->out_count, (long long)h->out_rows);
        harness_close(h);
        return st;
    }
    if (mode != HARNESS_NO_REFERENCE) {
        if ((st = h->ops->reference(h)) != SJ_OK) {
            harness_close(h);
            return error_prefix(st, "computing the reference output");
        }
        double s = 0;
        size_t n = reference_count(h);
        for (size_t i = 0; i < n; i++) s += h->reference[i] * h->reference[i];
        h->ref_norm = sqrt(s);
        if (!(h->ref_norm > 0) || !isfinite(h->ref_norm)) {
            harness_close(h);
            return error_set(SJ_ERR_VERIFY, "the reference output has norm %g: the gate would pass anything", h->ref_norm);
        }
    }
    return SJ_OK;
}

void harness_close(harness *h)
{
    if (h->ops && h->ops->teardown) h->ops->teardown(h);
    free(h->reference);
    memset(h, 0, sizeof *h);
}

int harness_sample_count(int64_t rows) { return rows < HARNESS_SAMPLE_ROWS ? (int)rows : HARNESS_SAMPLE_ROWS; }

int64_t harness_sample_row(int64_t rows, int i)
{
    return rows <= HARNESS_SAMPLE_ROWS ? i : (int64_t)i * (rows - 1) / (HARNESS_SAMPLE_ROWS - 1);
}

double harness_tolerance(const sj_problem *p)
{
    return p->dtype == SJ_DTYPE_BF16 || p->out_dtype == SJ_DTYPE_BF16 ? 1e-2 : 5e-3;
}

/* ------------------------------------------------------------------ the gate */

/* 16-bit -> float for every bit pattern of f16 and bf16, built once: the gate reads millions of
 * outputs per candidate. */
static float lut_f16[65536], lut_bf16[65536];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void build_luts(void)
{
    for (uint32_t i = 0; i < 65536; i++) {
        lut_f16[i] = (float)harness_16_to_f64(SJ_DTYPE_F16, (uint16_t)i);
        lut_bf16[i] = (float)harness_16_to_f64(SJ_DTYPE_BF16, (uint16_t)i);
    }
}

/* sum over i of (out[i] - ref[i])^2; NaN when an output is NaN (the poison was not overwritten). */
static double squared_error(sj_dtype dt, const void *out, const float *ref, size_t n)
{
    double sum = 0;
    if (dt == SJ_DTYPE_F32) {
        const float *o = out;
        for (size_t i = 0; i < n; i++) {
            double d = (double)o[i] - ref[i];
            sum += d * d;
        }
        return sum;
    }
    const float *lut = harness_lut16(dt);
    const uint16_t *o = out;
    for (size_t i = 0; i < n; i++) {
        double d = (double)lut[o[i]] - ref[i];
        sum += d * d;
    }
    return sum;
}

const float *harness_lut16(sj_dtype dtype)
{
    pthread_once(&lut_once, build_luts);
    return dtype == SJ_DTYPE_BF16 ? lut_bf16 : lut_f16;
}

double harness_rel_error(sj_dtype dtype, const void *out, const float *ref, size_t n)
{
    double norm = 0;
    for (size_t i = 0; i < n; i++) norm += (double)ref[i] * ref[i];
    double num = squared_error(dtype, out, ref, n);
    if (!isfinite(num)) return INFINITY;
    return norm > 0 ? sqrt(num / norm) : sqrt(num);
}

sj_status harness_check(harness *h, const loaded_kernel *k, double *rel_error, int *sticky)
{
    *rel_error = INFINITY;
    *sticky = 0;
    size_t bytes = h->out_count * sj_dtype_size(h->out_dtype);
    sj_status st;
    if (h->ops->poison) {
        if ((st = h->ops->poison(h)) != SJ_OK) return st;
    } else {
        /* 0xFF bytes are NaN in f16, bf16 and f32: an element the kernel does not write fails. */
        CU_CHECK(cu.cuMemsetD8((CUdeviceptr)h->out, 0xFF, bytes), "poisoning the output (cuMemsetD8)");
    }
    st = h->ops->launch(h, k, NULL);
    CUresult r = cu.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) {
        /* An error surfacing at synchronize (illegal address, ...) leaves the context unusable. */
        *sticky = 1;
        return cuda_error(r, "running the candidate once (the CUDA context is lost)");
    }
    if (st != SJ_OK) return st;
    void *host = malloc(bytes);
    if (!host) return error_set(SJ_ERR_OUT_OF_MEMORY, "gate: out of memory for %zu bytes", bytes);
    if (h->ops->read) {
        st = h->ops->read(h, host);
        if (st == SJ_ERR_VERIFY) { /* malformed output: the candidate is wrong, not the run */
            free(host);
            return SJ_OK;
        }
        if (st != SJ_OK) {
            free(host);
            return st;
        }
    } else if ((r = cu.cuMemcpyDtoH(host, (CUdeviceptr)h->out, bytes)) != CUDA_SUCCESS) {
        free(host);
        return cuda_error(r, "reading the candidate's output");
    }
    if (h->ref_sampled) {
        /* the sampled rows to the front, in order: row i comes from row harness_sample_row(i) >= i */
        size_t row_bytes = bytes / (size_t)h->out_rows;
        for (int i = 0; i < harness_sample_count(h->out_rows); i++)
            memmove((char *)host + (size_t)i * row_bytes,
                    (char *)host + (size_t)harness_sample_row(h->out_rows, i) * row_bytes, row_bytes);
    }
    double num = squared_error(h->out_dtype, host, h->reference, reference_count(h));
    free(host);
    *rel_error = isfinite(num) ? sqrt(num) / h->ref_norm : INFINITY;
    return SJ_OK;
}

int harness_baseline_gemm(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->k };
    return 1;
}

/* ------------------------------------------------------------------ the reference GEMM */

sj_status harness_reference_gemm(sj_context *ctx, sj_dtype dtype, sj_devptr A, sj_devptr B, int64_t m, int64_t n,
                                 int64_t k, float *ref)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, dtype, m, n, k);
    p.out_dtype = SJ_DTYPE_F32;
    /* through the request path like any kernel, keyed under its own template: compiled once,
     * then from the cache and the context's table */
    const loaded_kernel *rk;
    sj_status st = rt_kernel_with_config(ctx, &p, "gemm_reference", "", &rk);
    if (st != SJ_OK) return error_prefix(st, "the reference kernel");
    size_t count = (size_t)(m * n);
    sj_devptr C = 0;
    if ((st = sj_malloc(ctx, count * sizeof(float), &C)) == SJ_OK &&
        (st = sj_memset_u8(ctx, C, 0xFF, count * sizeof(float))) == SJ_OK) {
        int mi = (int)m, ni = (int)n, ki = (int)k;
        void *args[] = { &A, &B, &C, &mi, &ni, &ki };
        if ((st = rt_launch(ctx, rk, RT_ARGS(args), NULL)) == SJ_OK && (st = sj_synchronize(ctx)) == SJ_OK &&
            (st = sj_memcpy_dtoh(ctx, ref, C, count * sizeof(float))) == SJ_OK) {
            for (size_t i = 0; i < count; i++)
                if (!isfinite(ref[i])) {
                    st = error_set(SJ_ERR_VERIFY, "the reference kernel left element %zu unwritten or not finite", i);
                    break;
                }
        }
    }
    if (C) sj_free(ctx, C);
    return st;
}

/* ------------------------------------------------------------------ 16-bit host values */

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

uint16_t harness_f32_to_16(sj_dtype dt, float f)
{
    uint32_t u = f32_bits(f);
    if (dt == SJ_DTYPE_BF16) {
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
        return (uint16_t)(u >> 16);
    }
    /* f16, round to nearest even; the inputs here are finite and small, subnormals handled. */
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
    return (uint16_t)half;
}

double harness_16_to_f64(sj_dtype dt, uint16_t h)
{
    if (dt == SJ_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) v = ldexp((double)mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexp((double)(mant | 0x400), exp - 25);
    return (h & 0x8000) ? -v : v;
}

double harness_next_unit(uint64_t *state)
{
    /* xorshift64*: 53 random bits -> [0, 1) */
    uint64_t s = *state;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    *state = s;
    return (double)((s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Mean over units of min(c * w_j, cap). */
static double capped_mean(const double *w, int64_t n, double c, double cap)
{
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += fmin(c * w[j], cap);
    return sum / (double)n;
}

/* Fisher-Yates over n values. */
static void shuffle(double *v, int64_t n, uint64_t *rng)
{
    for (int64_t j = n - 1; j > 0; j--) {
        int64_t i = (int64_t)(harness_next_unit(rng) * (double)(j + 1));
        double t = v[j];
        v[j] = v[i];
        v[i] = t;
    }
}

/* The rates of n units that all fire (harness_unit_rates without dead units). */
static void live_rates(double density, double skew, int64_t n, uint64_t *rng, double *rate)
{
    if (skew == 0 || density >= HARNESS_RATE_CAP) {
        for (int64_t j = 0; j < n; j++) rate[j] = density;
        return;
    }
    /* rank r (1..n) of a random order: weight r^-skew; rate = min(c * weight, cap), with c found
     * by bisection so that the mean is density (the mean rises with c up to cap > density) */
    for (int64_t j = 0; j < n; j++) rate[j] = (double)(j + 1);
    shuffle(rate, n, rng);
    for (int64_t j = 0; j < n; j++) rate[j] = pow(rate[j], -skew);
    double lo = 0, hi = 1;
    while (capped_mean(rate, n, hi, HARNESS_RATE_CAP) < density) hi *= 2;
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        if (capped_mean(rate, n, mid, HARNESS_RATE_CAP) < density) lo = mid;
        else hi = mid;
    }
    for (int64_t j = 0; j < n; j++) rate[j] = fmin(hi * rate[j], HARNESS_RATE_CAP);
}

sj_status harness_unit_rates(double density, double skew, double dead, int64_t n, uint64_t *rng, double *rate)
{
    if (!(density > 0 && density <= 1) || !(skew >= 0 && skew <= SJ_TWELL_MAX_SKEW) ||
        !(dead >= 0 && dead <= SJ_TWELL_MAX_DEAD) || n < 1 || !rng || !rate)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "harness_unit_rates: density %g, skew %g, dead %g, n %lld: expected "
                       "density in (0, 1], skew in [0, %g], dead in [0, %g], n >= 1", density, skew, dead, (long long)n,
                       SJ_TWELL_MAX_SKEW, SJ_TWELL_MAX_DEAD);
    int64_t silent = llround(dead * (double)n), live = n - silent;
    double live_density = density * (double)n / (double)live;
    if (live < 1 || live_density > 1 || (skew > 0 && silent > 0 && live_density > HARNESS_RATE_CAP))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "harness_unit_rates: %lld of %lld units dead leave the others a mean "
                         "rate of %g: expected at most %g%s", (long long)silent, (long long)n, live_density,
                         skew > 0 ? HARNESS_RATE_CAP : 1.0, skew > 0 ? " (the cap of a skewed law)" : "");
    live_rates(live_density, skew, live, rng, rate);
    if (silent > 0) {   /* the dead units at random places among the live ones */
        for (int64_t j = live; j < n; j++) rate[j] = 0;
        shuffle(rate, n, rng);
    }
    return SJ_OK;
}

sj_status harness_unit_shifts(double density, double skew, double dead, double sigma, int64_t n, uint64_t *rng,
                              double *shift)
{
    sj_status st = harness_unit_rates(density, skew, dead, n, rng, shift);
    if (st != SJ_OK) return st;
    if (skew == 0 && dead == 0) { /* all alike: one quantile */
        double z = sigma * harness_normal_quantile(1.0 - density);
        for (int64_t j = 0; j < n; j++) shift[j] = z;
        return SJ_OK;
    }
    for (int64_t j = 0; j < n; j++) shift[j] = sigma * harness_normal_quantile(1.0 - shift[j]);
    return SJ_OK;
}

sj_status harness_upload(sj_context *ctx, const void *host, size_t bytes, sj_devptr *out)
{
    sj_status st = sj_malloc(ctx, bytes, out);
    if (st == SJ_OK && (st = sj_memcpy_htod(ctx, *out, host, bytes)) != SJ_OK) {
        sj_free(ctx, *out);
        *out = 0;
    }
    return st;
}

double harness_normal_quantile(double q)
{
    double lo = -10, hi = 10;
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < q) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}
