/* test_hybrid_ffn_gpu.c: one training step of the ReLU FFN block over hybrid activations on the
 * GPU (skips with a reason without one): the gate writes a = relu(X . Wg) as hybrid
 * (sj_hybrid_gate_complete), sj_hybrid_ffn_fwd gives Y and u at the active pairs,
 * sj_hybrid_ffn_dx gives dX and dg, du at the active pairs, sj_hybrid_ffn_dw the three weight
 * gradients from those. Against the fp64 host reference of the step (sj_hybrid_ffn_step_host, on
 * the same fresh random inputs at 50% to 99.9% zeros, ragged shapes, f16 and bf16, every row
 * overflowing, none, a backup that must grow, f16/bf16/f32 gradients and explicit configs): Y, dX
 * and the device's dWgT, dWuT, dWd directly, and the compact per-pair values also through the
 * gradients summed here on the host from what the device stored, so a wrong u, dg or du is told
 * apart from a wrong dw kernel. A second dw into a workspace and outputs poisoned again must give
 * the same bytes (the sums run in token order). Outputs are poisoned first. Tolerances: fp32 accumulation, a and u rounded to the dtype, and gates within
 * rounding of zero that may fall on either side. The L2-blocked configs (SPLIT 4, 8, 16: unit
 * ranges, then column slices, two kernels) run the same checks, and their u, dg, du and dX must
 * also be the bytes of the per-token kernel of the same THREADS and B run on the same inputs
 * (every difference is printed, every case runs, then the test fails). The tensor-core
 * variants (ALGO=2: the listing of H's pairs, then the TwELL FFN's pairs kernel over it) of the
 * fwd and of the dx, together or each beside the other's default, run the same checks, and the
 * fwd's listing, run again into a poisoned workspace of the test's, must be
 * hybrid_pairs_list_host's of H as the device holds it, and that second forward's u the first's
 * bytes. Every call takes the workspace sj_hybrid_ffn_workspace sizes for the kernel it resolves
 * (checked against hybrid_pairs_plan for ALGO=2, 0 for the other fwd and dx kernels, the
 * transpose's plus hybrid_dw_busy_plan's for a BUSY dw), poisoned first; one byte less and a
 * null workspace are refused, naming the need and the config. The size query of loaded kernels
 * compiles nothing (test_size_query_is_a_lookup, which prints its host time). */
#include "test_util.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;
/* L2-blocked cases whose per-pair values or dX are not the per-token kernel's bits: reported
 * per case, failed after all of them ran */
static int split_cases_differing;

static int setup(void **state)
{
    (void)state;
    rng = tu_seed();
    return 0;
}

typedef struct ffn_case {
    sj_dtype dt;
    int64_t M, F, D;          /* tokens, d_ff, d_model */
    int W;
    int64_t backup;
    double sparsity;
    const char *config;       /* for the fwd and dx ops; NULL: the default */
    const char *dw_config;    /* for hybrid-ffn-dw; NULL: the default */
    sj_dtype dw_out;          /* the gradients' dtype */
    int l2_blocked;           /* config is SPLIT > 0: u, dg, du, dX must be the per-token kernel's bytes */
    const char *fwd_config;   /* the fwd's alone (its ALGO=2, with UT); NULL: config */
    const char *dx_config;    /* the dx's alone (its ALGO=2); NULL: config */
    double skew;              /* 0: every unit fires alike; A > 0: unit j at a rate ~ (j + 1)^-A, at most 0.5 */
} ffn_case;

static double rel_error64(const double *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static uint16_t *random16(sj_dtype dt, int64_t n)
{
    uint16_t *x = malloc(sizeof *x * (size_t)n);
    assert_non_null(x);
    tu_fill16(dt, x, (size_t)n, 1.0f, &rng);
    return x;
}

static sj_devptr upload(sj_context *ctx, const void *host, size_t bytes)
{
    sj_devptr d;
    SJ_ASSERT_OK(sj_malloc(ctx, bytes, &d));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, d, host, bytes));
    return d;
}

static sj_devptr poisoned(sj_context *ctx, size_t bytes)
{
    sj_devptr d;
    SJ_ASSERT_OK(sj_malloc(ctx, bytes ? bytes : 16, &d));
    SJ_ASSERT_OK(sj_memset_u8(ctx, d, 0xFF, bytes ? bytes : 16));
    return d;
}

/* How many of n elements (2 or 4 bytes each: dt's 16-bit values or fp32) differ in their bits
 * between the L2-blocked kernels' a and the per-token kernel's b; prints the first few (and
 * whether one is the 0xFF poison: an element one kernel left unwritten), so one GPU run shows
 * the nature of a difference, not only that there is one. */
static size_t count_differences(sj_context *ctx, const char *what, sj_dtype dt, size_t size, sj_devptr a, sj_devptr b,
                                size_t n)
{
    unsigned char *ha = malloc(n * size + 1), *hb = malloc(n * size + 1);
    assert_true(ha && hb);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, ha, a, n * size));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, hb, b, n * size));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(ha + i * size, hb + i * size, size)) continue;
        if (differ++ < 4) {
            uint32_t ba = 0, bb = 0;
            memcpy(&ba, ha + i * size, size);
            memcpy(&bb, hb + i * size, size);
            float fa, fb;
            if (size == 2) fa = tu_from16(dt, (uint16_t)ba), fb = tu_from16(dt, (uint16_t)bb);
            else memcpy(&fa, &ba, 4), memcpy(&fb, &bb, 4);
            print_message("  %s[%zu]: L2-blocked 0x%x (%g), per-token 0x%x (%g)\n", what, i, ba, fa, bb, fb);
        }
    }
    if (differ) print_message("  %s: %zu of %zu elements differ\n", what, differ, n);
    free(ha);
    free(hb);
    return differ;
}

/* config with its name=n made name=value (the same config otherwise). */
static void config_with(const char *config, const char *name, int value, char *out, size_t size)
{
    char key[16];
    snprintf(key, sizeof key, "%s=", name);
    const char *at = strstr(config, key);
    assert_non_null(at);
    const char *rest = at + strlen(key);
    while (*rest >= '0' && *rest <= '9') rest++;
    assert_true(snprintf(out, size, "%.*s%s%d%s", (int)(at - config), config, key, value, rest) < (int)size);
}

static void axpy(sj_dtype dt, double w, const uint16_t *row, double *acc, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] += w * tu_from16(dt, row[i]);
}

/* Checks failed so far: each is printed with its case, every case runs, the test fails at the end
 * (one GPU run shows every failing case, not only the first). */
static int checks_failed;

static void expect_close(const char *what, const ffn_case *c, double e)
{
    const double tol = c->dt == SJ_DTYPE_BF16 ? 3e-2 : 1e-2;
    if (e < tol) return;
    print_message("FAILED: %s %s M=%lld F=%lld D=%lld W=%d s=%g config %s / fwd %s / dx %s: relative error %g\n", what,
                  sj_dtype_name(c->dt), (long long)c->M, (long long)c->F, (long long)c->D, c->W, c->sparsity,
                  c->config ? c->config : "default", c->fwd_config ? c->fwd_config : "-",
                  c->dx_config ? c->dx_config : "-", e);
    checks_failed++;
}

/* A rows x cols output (dt) that holds non-finite values: how many, in how many rows, the first
 * few rows, so a failure tells an unwritten or NaN row from overflowing sums. */
static void report_nonfinite(const char *what, sj_dtype dt, const uint16_t *out, int64_t rows, int64_t cols)
{
    int64_t bad = 0, bad_rows = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t in_row = 0, first = -1;
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(tu_from16(dt, out[r * cols + c]))) in_row++, first = first < 0 ? c : first;
        if (in_row && bad_rows++ < 4)
            print_message("  %s row %lld: %lld non-finite, the first at column %lld (0x%04x)\n", what, (long long)r,
                          (long long)in_row, (long long)first, out[r * cols + first]);
        bad += in_row;
    }
    if (bad) print_message("  %s: %lld non-finite values in %lld rows\n", what, (long long)bad, (long long)bad_rows);
}

/* The bytes of two device buffers must be equal (what: the comparison, for the message). */
static void expect_same_bytes(sj_context *ctx, const char *what, sj_devptr a, sj_devptr b, size_t bytes)
{
    unsigned char *ha = malloc(bytes + 1), *hb = malloc(bytes + 1);
    assert_true(ha && hb);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, ha, a, bytes));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, hb, b, bytes));
    if (memcmp(ha, hb, bytes)) {
        print_message("FAILED: %s: the bytes differ from the run it is compared with\n", what);
        checks_failed++;
    }
    free(ha);
    free(hb);
}

/* The relative error of n gradient elements (host, the gradients' dtype out) against ref. */
static double grad_error(sj_dtype out, const void *host, const double *ref, size_t n)
{
    if (out != SJ_DTYPE_F32) return tu_rel_error(out, host, ref, n);
    double *wide = malloc(n * sizeof *wide + 8);
    assert_non_null(wide);
    for (size_t i = 0; i < n; i++) wide[i] = ((const float *)host)[i];
    const double e = rel_error64(wide, ref, n);
    free(wide);
    return e;
}

/* Checks one gradient the device wrote (out dtype, d_ff x d_model) against the reference. */
static void expect_grad(sj_context *ctx, const char *what, const ffn_case *c, sj_devptr d, const double *ref, size_t n)
{
    const size_t esz = sj_dtype_size(c->dw_out);
    void *host = malloc(n * esz);
    assert_non_null(host);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, host, d, n * esz));
    expect_close(what, c, grad_error(c->dw_out, host, ref, n));
    free(host);
}

/* sj_hybrid_ffn_dw with one byte less than the need of the kernel it resolves is refused before
 * anything runs: the error names workspace_bytes, the need and the kernel's config. */
static void expect_too_small(sj_context *ctx, const sj_problem *wp, const sj_hybrid_device *H, sj_devptr X,
                             sj_devptr dY, const sj_devptr pairs[6], size_t need)
{
    const loaded_kernel *k;
    SJ_ASSERT_OK(rt_kernel_for(ctx, wp, &k));
    char msg[400];
    snprintf(msg, sizeof msg, "workspace_bytes = %zu; the kernel it launches (config %s) needs %zu", need - 1, k->config,
             need);
    sj_devptr work = poisoned(ctx, need), g = poisoned(ctx, 16);
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, wp, X, dY, H, pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5], g, g,
                                      g, work, need - 1, NULL),
                     SJ_ERR_INVALID_ARGUMENT, msg);
    SJ_ASSERT_STATUS(sj_hybrid_ffn_dw(ctx, wp, X, dY, H, pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5], g, g,
                                      g, 0, need, NULL),
                     SJ_ERR_INVALID_ARGUMENT, "workspace is a null device pointer");
    sj_free(ctx, work);
    sj_free(ctx, g);
}

/* dWgT, dWuT, dWd by sj_hybrid_ffn_dw into outputs poisoned first, the workspace of
 * sj_hybrid_ffn_workspace's size (the transpose's, plus the busy buffers' for a BUSY > 0 config:
 * hybrid_dw_busy_plan) poisoned too; twice, the second time into outputs and a workspace poisoned
 * again, which must give the same bytes. One byte less is refused first, naming the need. */
static void run_dw(sj_context *ctx, const ffn_case *c, const sj_hybrid_device *H, sj_devptr X, sj_devptr dY,
                   const sj_devptr pairs[6], const sj_hybrid_ffn_step *ref)
{
    const size_t n = (size_t)(c->F * c->D), bytes = n * sj_dtype_size(c->dw_out);
    sj_problem wp;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&H->layout, SJ_OP_HYBRID_FFN_DW, c->D, &wp));
    wp.out_dtype = c->dw_out;
    if (c->dw_config) SJ_ASSERT_OK(sj_set_config(ctx, &wp, c->dw_config));
    size_t work_bytes, transpose;
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &wp, &H->layout, &work_bytes));
    SJ_ASSERT_OK(sj_hybrid_ffn_dw_workspace(&H->layout, &transpose));
    const int capacity = c->dw_config ? tu_config_value(c->dw_config, "BUSY") : -1; /* -1: not named, 0 */
    hybrid_dw_busy_ws b = { 0 };
    if (capacity > 0) hybrid_dw_busy_plan(c->M, c->F, c->D, capacity, sj_dtype_size(c->dt), sj_dtype_size(c->dw_out), &b);
    assert_int_equal(work_bytes, transpose + b.total);
    expect_too_small(ctx, &wp, H, X, dY, pairs, work_bytes);
    unsigned char *first[3];
    for (int round = 0; round < 2; round++) {
        sj_devptr work = poisoned(ctx, work_bytes), g[3] = { poisoned(ctx, bytes), poisoned(ctx, bytes), poisoned(ctx, bytes) };
        SJ_ASSERT_OK(sj_hybrid_ffn_dw(ctx, &wp, X, dY, H, pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5],
                                      g[0], g[1], g[2], work, work_bytes, NULL));
        SJ_ASSERT_OK(sj_synchronize(ctx));
        if (round == 0) {
            expect_grad(ctx, "dWgT (device)", c, g[0], ref->dWgT, n);
            expect_grad(ctx, "dWuT (device)", c, g[1], ref->dWuT, n);
            expect_grad(ctx, "dWd (device)", c, g[2], ref->dWd, n);
        }
        for (int i = 0; i < 3; i++) {
            unsigned char *host = malloc(bytes);
            assert_non_null(host);
            SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, host, g[i], bytes));
            if (round == 0) first[i] = host;
            else {
                if (memcmp(host, first[i], bytes)) fail_msg("hybrid-ffn-dw: gradient %d differs between two runs", i);
                free(host);
                free(first[i]);
            }
            sj_free(ctx, g[i]);
        }
        sj_free(ctx, work);
    }
    if (c->dw_config) SJ_ASSERT_OK(sj_set_config(ctx, &wp, ""));
}

/* Downloads n 32-bit words at byte offset `at` of work. */
static uint32_t *words_at(sj_context *ctx, sj_devptr work, size_t at, size_t n)
{
    uint32_t *h = malloc(4 * n + 4);
    assert_non_null(h);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, h, work + at, 4 * n));
    return h;
}

/* The per-pair values the device stored: u (dtype) and dg, du (fp32), ELL- and backup-shaped. */
typedef struct stored_pairs {
    const uint16_t *u_v, *u_b;
    const float *g_v, *g_b, *d_v, *d_b;
} stored_pairs;

/* Adds the three weight gradients over H's pairs (a, H as the device holds it) into gWg, gWu,
 * gWd in fp64, from the stored values: the coefficients dg, du and a u as they are (rounded = 0)
 * or rounded to the dtype as the busy units' scatter rounds them (rounded = 1: dg and du from
 * fp32, a u from its fp32 product, which two 16-bit values make exactly). counts (NULL: not
 * wanted) gets each unit's pairs. */
static void sum_pairs(const ffn_case *c, const sj_hybrid_host *a, const stored_pairs *sp, const uint16_t *X,
                      const uint16_t *dY, int rounded, double *gWg, double *gWu, double *gWd, int64_t *counts)
{
    const sj_dtype dt = c->dt;
    const int64_t F = c->F, D = c->D;
    for (int64_t t = 0; t < c->M; t++) {
        const int64_t e = a->nnz[t] < c->W ? a->nnz[t] : c->W, s = a->nnz[t] > c->W ? a->slot[t] : -1;
        for (int64_t q = 0; q < e + (s >= 0 ? F : 0); q++) {
            const size_t at = q < e ? (size_t)(t * c->W + q) : (size_t)(s * F + (q - e));
            const uint16_t av = q < e ? a->values[at] : a->backup[at];
            if (!hybrid_nonzero(av)) continue;
            const int64_t j = q < e ? a->columns[at] : q - e;
            const float u = tu_from16(dt, q < e ? sp->u_v[at] : sp->u_b[at]), h = tu_from16(dt, av) * u;
            const float dg = q < e ? sp->g_v[at] : sp->g_b[at], du = q < e ? sp->d_v[at] : sp->d_b[at];
            if (counts) counts[j]++;
            axpy(dt, rounded ? tu_from16(dt, tu_to16(dt, dg)) : dg, X + t * D, gWg + j * D, D);
            axpy(dt, rounded ? tu_from16(dt, tu_to16(dt, du)) : du, X + t * D, gWu + j * D, D);
            axpy(dt, rounded ? tu_from16(dt, tu_to16(dt, h)) : (double)tu_from16(dt, av) * u, dY + t * D, gWd + j * D, D);
        }
    }
}

/* The busy units' rows (BUSY > 0) against the fp64 sums of the same coefficients rounded to the
 * input dtype (sum_pairs, rounded): what is left is the GEMM's fp32 accumulation over the tokens
 * (the products of two 16-bit values are exact in fp32; the sums' rounding is about sqrt(tokens)
 * 2^-24 relative, under 1e-5 at these token counts, 1e-4 leaves room for the tensor cores' order
 * and rounding of accumulation) and the rounding of the result to the gradients' dtype, at most
 * its unit roundoff relative to each element (2^-8 bf16, 2^-11 f16), so norm-wise too. The
 * coefficients' own rounding is not in this tolerance: against the unrounded sums the bf16 input
 * cases with f32 gradients would miss by about 1e-3 (each coefficient off by up to 2^-8 of
 * itself, independently), ten times the tolerance, so the check also tells that the coefficients
 * were rounded as documented; against the step's fp64 reference the busy rows pass run_dw's
 * tolerance (1e-2 f16, 3e-2 bf16), far above that rounding. */
static double busy_tolerance(sj_dtype out)
{
    return (out == SJ_DTYPE_BF16 ? 0x1p-8 : out == SJ_DTYPE_F16 ? 0x1p-11 : 0.0) + 1e-4;
}

/* Downloads the three gradients (out dtype, d_ff x d_model each) of g back to back. */
static unsigned char *grads_host(sj_context *ctx, const sj_devptr g[3], size_t bytes)
{
    unsigned char *h = malloc(3 * bytes);
    assert_non_null(h);
    for (int i = 0; i < 3; i++) SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, h + i * bytes, g[i], bytes));
    return h;
}

/* A BUSY > 0 dw config (c->dw_config), after run_dw ran it through sj_hybrid_ffn_dw: the op's
 * launch, run again into a poisoned workspace of the test's, selects the units
 * hybrid_dw_busy_select_host selects from H's counts (slot_of and unit_of read back); every
 * other unit's rows are the bytes of the same config at BUSY = 0 (the same kernel, which only
 * skips the busy units); the busy units' rows match the rounded-coefficient sums within
 * busy_tolerance. Outputs poisoned first. */
static void check_busy(sj_context *ctx, const ffn_case *c, const sj_hybrid_device *H, const sj_hybrid_host *a,
                       const uint16_t *X, const uint16_t *dY, sj_devptr dX, sj_devptr ddY, const sj_devptr pairs[6],
                       const stored_pairs *sp)
{
    const int capacity = tu_config_value(c->dw_config, "BUSY");
    const int64_t F = c->F, D = c->D;
    const size_t n = (size_t)(F * D), esz = sj_dtype_size(c->dw_out), bytes = n * esz, row = (size_t)D * esz;
    SJ_ASSERT_OK(rt_require_gpu(ctx, "check_busy"));
    hybrid_dw_busy_ws b;
    hybrid_dw_busy_plan(c->M, F, D, capacity, sj_dtype_size(c->dt), esz, &b);

    int64_t *counts = calloc((size_t)F, sizeof *counts);
    double *ref = calloc(3 * n, sizeof *ref);
    int32_t *want_slot = malloc(4 * (size_t)F), *want_unit = malloc(4 * (size_t)(capacity + 1));
    assert_true(counts && ref && want_slot && want_unit);
    sum_pairs(c, a, sp, X, dY, 1, ref, ref + n, ref + 2 * n, counts);
    hybrid_dw_busy_select_host(counts, F, c->M, capacity, want_slot, want_unit);
    int64_t eligible = 0;
    for (int64_t j = 0; j < F; j++) eligible += counts[j] >= hybrid_dw_busy_threshold(c->M);
    print_message("  %s BUSY=%d: %lld of %lld units busy (%lld tokens or more), %d on the GEMMs\n", sj_dtype_name(c->dt),
                  capacity, (long long)eligible, (long long)F, (long long)hybrid_dw_busy_threshold(c->M),
                  want_unit[capacity]);
    assert_true(want_unit[capacity] > 0); /* a case that leaves the GEMMs nothing checks nothing */

    /* the same config at BUSY = 0, through the entry point */
    sj_problem wp;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&H->layout, SJ_OP_HYBRID_FFN_DW, D, &wp));
    wp.out_dtype = c->dw_out;
    char zero[128];
    config_with(c->dw_config, "BUSY", 0, zero, sizeof zero);
    size_t work_bytes;
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, zero));
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &wp, &H->layout, &work_bytes));
    sj_devptr work = poisoned(ctx, work_bytes), g0[3] = { poisoned(ctx, bytes), poisoned(ctx, bytes), poisoned(ctx, bytes) };
    SJ_ASSERT_OK(sj_hybrid_ffn_dw(ctx, &wp, dX, ddY, H, pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5],
                                  g0[0], g0[1], g0[2], work, work_bytes, NULL));
    /* the BUSY config through the op's launch, its busy buffers after the transpose's in a
     * poisoned workspace of ours */
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, c->dw_config));
    const loaded_kernel *k;
    SJ_ASSERT_OK(rt_kernel_for(ctx, &wp, &k));
    hybrid_dw_ws w;
    hybrid_dw_plan(H->layout.rows, H->layout.cols, H->layout.width, H->layout.backup_rows, &w);
    sj_devptr busy_work = poisoned(ctx, w.total + b.total), g1[3] = { poisoned(ctx, bytes), poisoned(ctx, bytes),
                                                                      poisoned(ctx, bytes) };
    const hybrid_saved_u u = { pairs[0], pairs[1] };
    const hybrid_grads g = { pairs[2], pairs[3], pairs[4], pairs[5] };
    const hybrid_weight_grads out = { g1[0], g1[1], g1[2] };
    SJ_ASSERT_OK(hybrid_ffn_dw_launch(ctx, k, dX, ddY, H, &u, &g, &out, busy_work, &w, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, ""));

    const sj_devptr busy = busy_work + w.total;
    uint32_t *slot_of = words_at(ctx, busy, b.slot_of, (size_t)F), *unit_of = words_at(ctx, busy, b.unit_of, (size_t)capacity + 1);
    int64_t wrong = 0;
    for (int64_t j = 0; j < F; j++)
        if ((int32_t)slot_of[j] != want_slot[j] && wrong++ < 4)
            print_message("  BUSY=%d: slot_of[%lld] = %d, the host's %d (count %lld)\n", capacity, (long long)j,
                          (int)slot_of[j], want_slot[j], (long long)counts[j]);
    for (int s = 0; s <= capacity; s++)
        if ((int32_t)unit_of[s] != want_unit[s] && wrong++ < 4)
            print_message("  BUSY=%d: unit_of[%d] = %d, the host's %d\n", capacity, s, (int)unit_of[s], want_unit[s]);
    if (wrong) {
        print_message("FAILED: BUSY=%d: %lld entries of the device's selection differ from the host's\n", capacity,
                      (long long)wrong);
        checks_failed++;
    }

    unsigned char *h0 = grads_host(ctx, g0, bytes), *h1 = grads_host(ctx, g1, bytes);
    const char *names[3] = { "dWgT", "dWuT", "dWd" };
    for (int i = 0; i < 3; i++) {
        unsigned char *busy_rows = malloc((size_t)want_unit[capacity] * row + 1);
        double *busy_ref = malloc((size_t)want_unit[capacity] * (size_t)D * sizeof *busy_ref + 8);
        assert_true(busy_rows && busy_ref);
        int64_t rows = 0, differ = 0;
        for (int64_t j = 0; j < F; j++) {
            const size_t at = (size_t)i * bytes + (size_t)j * row;
            if (want_slot[j] < 0) {
                differ += memcmp(h1 + at, h0 + at, row) != 0;
                continue;
            }
            memcpy(busy_rows + (size_t)rows * row, h1 + at, row);
            memcpy(busy_ref + rows * D, ref + (size_t)i * n + (size_t)j * (size_t)D, (size_t)D * sizeof *busy_ref);
            rows++;
        }
        const double e = grad_error(c->dw_out, busy_rows, busy_ref, (size_t)(rows * D));
        if (differ || !(e < busy_tolerance(c->dw_out))) {
            print_message("FAILED: %s %s M=%lld F=%lld D=%lld dw %s: %lld rows of units off the GEMMs differ from "
                          "BUSY=0's bytes; the %lld busy rows' relative error %g (tolerance %g)\n", names[i],
                          sj_dtype_name(c->dt), (long long)c->M, (long long)F, (long long)D, c->dw_config,
                          (long long)differ, (long long)rows, e, busy_tolerance(c->dw_out));
            checks_failed++;
        }
        free(busy_rows), free(busy_ref);
    }
    free(h0), free(h1), free(slot_of), free(unit_of), free(counts), free(ref), free(want_slot), free(want_unit);
    sj_devptr all[] = { work, busy_work, g0[0], g0[1], g0[2], g1[0], g1[1], g1[2] };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sj_free(ctx, all[i]);
}

/* ALGO=2's listing, run again (the whole forward) into a poisoned workspace, against the host
 * reference on a, H as the device holds it: every count and start, and every listed pair; the
 * second forward's u must be the first's bytes (uv, ub). */
static void check_listing(sj_context *ctx, const ffn_case *c, const sj_problem *fp, const sj_hybrid_device *H,
                          const sj_hybrid_host *a, sj_devptr X, sj_devptr WuT, sj_devptr Wd, sj_devptr uv, sj_devptr ub)
{
    const sj_hybrid_layout *l = &H->layout;
    const int ut = tu_config_value(c->fwd_config, "UT");
    const int64_t nut = (l->cols + ut - 1) / ut, cells = l->rows * nut;
    hybrid_pairs_ws w;
    hybrid_pairs_plan(l->rows, l->cols, l->width, l->backup_rows, 1, &w);
    const size_t tok = (size_t)(c->M * c->D) * 2, ell = (size_t)(l->rows * l->width) * 2,
                 bk = (size_t)(l->backup_rows * l->cols) * 2;
    sj_devptr work = poisoned(ctx, w.total), Y1 = poisoned(ctx, tok), uv1 = poisoned(ctx, ell), ub1 = poisoned(ctx, bk);
    const loaded_kernel *k;
    SJ_ASSERT_OK(rt_require_gpu(ctx, "check_listing"));
    SJ_ASSERT_OK(rt_kernel_for(ctx, fp, &k));
    hybrid_saved_u u = { uv1, bk ? ub1 : 0 };
    SJ_ASSERT_OK(hybrid_ffn_fwd_launch(ctx, k, X, H, WuT, Wd, Y1, &u, work, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    expect_same_bytes(ctx, "u (ELL), ALGO=2 run twice", uv, uv1, ell);
    if (bk) expect_same_bytes(ctx, "u (backup), ALGO=2 run twice", ub, ub1, bk);
    uint32_t *counts = words_at(ctx, work, w.counts, (size_t)cells), *starts = words_at(ctx, work, w.starts, (size_t)cells),
             *list = words_at(ctx, work, w.list, 2 * (size_t)w.positions);
    int32_t *rc = malloc(4 * (size_t)cells), *rs = malloc(4 * (size_t)cells);
    uint32_t *rl = malloc(8 * (size_t)w.positions + 8);
    assert_true(rc && rs && rl);
    SJ_ASSERT_OK(hybrid_pairs_list_host(a, ut, rc, rs, rl));
    int64_t wrong = 0; /* cells whose count, start or pairs differ: the first few printed */
    for (int64_t i = 0; i < cells; i++) {
        int ok = (int32_t)counts[i] == rc[i] && (int32_t)starts[i] == rs[i];
        if (!ok && wrong < 4)
            print_message("  ALGO=2 listing, row %lld tile %lld: count %d start %d, the host's %d and %d\n",
                          (long long)(i / nut), (long long)(i % nut), (int)counts[i], (int)starts[i], rc[i], rs[i]);
        for (int64_t q = rs[i]; ok && q < rs[i] + rc[i]; q++)
            if (list[2 * q] != rl[2 * q] || list[2 * q + 1] != rl[2 * q + 1]) {
                ok = 0;
                if (wrong < 4)
                    print_message("  ALGO=2 listing, row %lld tile %lld, pair %lld: %08x %08x, the host's %08x %08x\n",
                                  (long long)(i / nut), (long long)(i % nut), (long long)q, list[2 * q],
                                  list[2 * q + 1], rl[2 * q], rl[2 * q + 1]);
            }
        wrong += !ok;
    }
    if (wrong) {
        print_message("FAILED: ALGO=2 listing: %lld of %lld (row, unit tile) cells differ from the host's\n",
                      (long long)wrong, (long long)cells);
        checks_failed++;
    }
    free(counts), free(starts), free(list), free(rc), free(rs), free(rl);
    sj_devptr all[] = { work, Y1, uv1, ub1 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sj_free(ctx, all[i]);
}

/* The workspace of the fwd or dx kernel that problem p (whose forced config is config, NULL: the
 * default) resolves to over layout l, poisoned: sj_hybrid_ffn_workspace's bytes, which must be
 * hybrid_pairs_plan's total for ALGO=2 (halves 1 for the fwd, 2 for the dx) and 0 for every other
 * kernel; then 0, and the call gets no workspace at all. Where there is one, call (the fwd's or
 * the dx's entry point with a workspace and its bytes) refuses one byte less and a null workspace
 * first, naming the need. */
typedef sj_status (*ffn_call)(sj_context *ctx, const sj_problem *p, sj_devptr work, size_t bytes, const void *user);

static sj_devptr ffn_workspace(sj_context *ctx, const sj_problem *p, const sj_hybrid_layout *l, const char *config,
                               ffn_call call, const void *user, size_t *bytes)
{
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, p, l, bytes));
    size_t want = 0;
    if (config && tu_config_value(config, "ALGO") == 2) {
        hybrid_pairs_ws w;
        hybrid_pairs_plan(l->rows, l->cols, l->width, l->backup_rows, p->op == SJ_OP_HYBRID_FFN_DX ? 2 : 1, &w);
        want = w.total;
    }
    if (*bytes != want)
        fail_msg("%s config %s: sj_hybrid_ffn_workspace says %zu bytes, the plan %zu", sj_op_name(p->op),
                 config ? config : "default", *bytes, want);
    if (!*bytes) return 0;
    sj_devptr work = poisoned(ctx, *bytes);
    char msg[160];
    snprintf(msg, sizeof msg, "workspace_bytes = %zu; the kernel it launches (config ALGO=2,", *bytes - 1);
    SJ_ASSERT_STATUS(call(ctx, p, work, *bytes - 1, user), SJ_ERR_INVALID_ARGUMENT, msg);
    snprintf(msg, sizeof msg, "needs %zu bytes", *bytes);
    SJ_ASSERT_STATUS(call(ctx, p, 0, *bytes, user), SJ_ERR_INVALID_ARGUMENT, msg);
    return work;
}

/* The fwd's and the dx's operands, for ffn_workspace's calls. */
typedef struct ffn_operands {
    const sj_hybrid_device *H;
    sj_devptr X, dY, WgT, WuT, Wd, Y, dX, uv, ub, dgv, dgb, duv, dub;
} ffn_operands;

static sj_status call_fwd(sj_context *ctx, const sj_problem *p, sj_devptr work, size_t bytes, const void *user)
{
    const ffn_operands *o = user;
    return sj_hybrid_ffn_fwd(ctx, p, o->X, o->H, o->WuT, o->Wd, o->Y, o->uv, o->ub, work, bytes, NULL);
}

static sj_status call_dx(sj_context *ctx, const sj_problem *p, sj_devptr work, size_t bytes, const void *user)
{
    const ffn_operands *o = user;
    return sj_hybrid_ffn_dx(ctx, p, o->dY, o->H, o->uv, o->ub, o->WgT, o->WuT, o->Wd, o->dX, o->dgv, o->dgb, o->duv,
                            o->dub, work, bytes, NULL);
}

/* The x with Phi(x) = p, Phi the standard normal distribution (bisection). */
static double normal_quantile(double p)
{
    double lo = -10, hi = 10;
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid; else hi = mid;
    }
    return lo;
}

/* How often unit j fires: 1 - sparsity, or with a skew scale (j + 1)^-skew capped at 0.5. */
static double unit_rate(const ffn_case *c, double scale, int64_t j)
{
    return c->skew > 0 ? fmin(0.5, scale * pow((double)(j + 1), -c->skew)) : 1 - c->sparsity;
}

/* The scale that gives the skewed rates the mean 1 - sparsity (bisection; 0 without a skew). */
static double skew_scale(const ffn_case *c)
{
    if (c->skew <= 0) return 0;
    double lo = 0, hi = 1e9;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi), mean = 0;
        for (int64_t j = 0; j < c->F; j++) mean += unit_rate(c, mid, j) / (double)c->F;
        if (mean < 1 - c->sparsity) lo = mid; else hi = mid;
    }
    return lo;
}

static void run_case(sj_context *ctx, const ffn_case *c)
{
    const sj_dtype dt = c->dt;
    const int64_t M = c->M, F = c->F, D = c->D;
    uint16_t *X = random16(dt, M * D), *WgT = random16(dt, F * D), *WuT = random16(dt, F * D),
             *Wd = random16(dt, F * D), *dY = random16(dt, M * D);
    /* column 0: ones in X and a bias in WgT that makes about unit j's share of zeros of the gate
     * negative (the gate's rest is about normal, sigma^2 = (D - 1) / 9) */
    const double sigma = sqrt((double)(D - 1) / 9.0), scale = skew_scale(c);
    for (int64_t r = 0; r < M; r++) X[r * D] = tu_to16(dt, 1.0f);
    for (int64_t j = 0; j < F; j++) WgT[j * D] = tu_to16(dt, (float)(-sigma * normal_quantile(1 - unit_rate(c, scale, j))));

    const size_t tok = (size_t)(M * D), wts = (size_t)(F * D), b16 = 2;
    sj_hybrid_ffn_step ref = { malloc(sizeof(double) * tok), malloc(sizeof(double) * tok), malloc(sizeof(double) * wts),
                               malloc(sizeof(double) * wts), malloc(sizeof(double) * wts), 0 };
    assert_true(ref.Y && ref.dX && ref.dWgT && ref.dWuT && ref.dWd);
    SJ_ASSERT_OK(sj_hybrid_ffn_step_host(dt, M, D, F, X, WgT, WuT, Wd, dY, &ref));

    sj_devptr dX_in = upload(ctx, X, tok * b16), dWg = upload(ctx, WgT, wts * b16), dWu = upload(ctx, WuT, wts * b16),
              dWd = upload(ctx, Wd, wts * b16), ddY = upload(ctx, dY, tok * b16);
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, dt, M, F, c->W, c->backup));
    sj_hybrid_device H;
    SJ_ASSERT_OK(sj_hybrid_device_alloc(ctx, &l, &H));
    sj_problem gp;
    SJ_ASSERT_OK(sj_hybrid_gate_problem(&l, D, &gp));
    sj_hybrid_report rep;
    SJ_ASSERT_OK(sj_hybrid_gate_complete(ctx, &gp, dX_in, dWg, &H, &rep, NULL, NULL));
    assert_int_equal(rep.rows_unplaced, 0);
    const sj_hybrid_layout *hl = &H.layout; /* grown when the backup was too small */
    const size_t ell = (size_t)(M * c->W), bk = (size_t)(hl->backup_rows * F);

    sj_devptr Y = poisoned(ctx, tok * b16), uv = poisoned(ctx, ell * b16), ub = poisoned(ctx, bk * b16),
              dXo = poisoned(ctx, tok * b16), dgv = poisoned(ctx, ell * 4), dgb = poisoned(ctx, bk * 4),
              duv = poisoned(ctx, ell * 4), dub = poisoned(ctx, bk * 4);
    sj_problem fp, xp;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(hl, SJ_OP_HYBRID_FFN_FWD, D, &fp));
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(hl, SJ_OP_HYBRID_FFN_DX, D, &xp));
    const char *fwd_config = c->fwd_config ? c->fwd_config : c->config, *dx_config = c->dx_config ? c->dx_config : c->config;
    if (fwd_config) SJ_ASSERT_OK(sj_set_config(ctx, &fp, fwd_config));
    if (dx_config) SJ_ASSERT_OK(sj_set_config(ctx, &xp, dx_config));
    const ffn_operands ops = { &H, dX_in, ddY, dWg, dWu, dWd, Y, dXo, uv, bk ? ub : 0, dgv, bk ? dgb : 0, duv,
                               bk ? dub : 0 };
    size_t fwd_bytes, dx_bytes;
    sj_devptr fwd_work = ffn_workspace(ctx, &fp, hl, fwd_config, call_fwd, &ops, &fwd_bytes),
              dx_work = ffn_workspace(ctx, &xp, hl, dx_config, call_dx, &ops, &dx_bytes);
    SJ_ASSERT_OK(call_fwd(ctx, &fp, fwd_work, fwd_bytes, &ops));
    SJ_ASSERT_OK(call_dx(ctx, &xp, dx_work, dx_bytes, &ops));
    SJ_ASSERT_OK(sj_synchronize(ctx));

    uint16_t *out = malloc(tok * b16), *u_v = malloc(ell * b16), *u_b = malloc(bk * b16 + 2);
    float *g_v = malloc(ell * 4), *g_b = malloc(bk * 4 + 4), *d_v = malloc(ell * 4), *d_b = malloc(bk * 4 + 4);
    assert_true(out && u_v && u_b && g_v && g_b && d_v && d_b);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, Y, tok * b16));
    expect_close("Y", c, tu_rel_error(dt, out, ref.Y, tok));
    report_nonfinite("Y", dt, out, M, D);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, out, dXo, tok * b16));
    expect_close("dX", c, tu_rel_error(dt, out, ref.dX, tok));
    report_nonfinite("dX", dt, out, M, D);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, u_v, uv, ell * b16));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, g_v, dgv, ell * 4));
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, d_v, duv, ell * 4));
    if (bk) {
        SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, u_b, ub, bk * b16));
        SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, g_b, dgb, bk * 4));
        SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, d_b, dub, bk * 4));
    }
    /* the weight gradients from the compact per-pair values, over the pairs H holds */
    sj_hybrid_host a;
    SJ_ASSERT_OK(sj_hybrid_download(ctx, &H, &a));
    double *gWg = calloc(wts, sizeof(double)), *gWu = calloc(wts, sizeof(double)), *gWd = calloc(wts, sizeof(double));
    assert_true(gWg && gWu && gWd);
    const stored_pairs stored = { u_v, u_b, g_v, g_b, d_v, d_b };
    sum_pairs(c, &a, &stored, X, dY, 0, gWg, gWu, gWd, NULL);
    expect_close("dWgT (from dg)", c, rel_error64(gWg, ref.dWgT, wts));
    expect_close("dWuT (from du)", c, rel_error64(gWu, ref.dWuT, wts));
    expect_close("dWd (from a u)", c, rel_error64(gWd, ref.dWd, wts));
    const sj_devptr pairs[6] = { uv, bk ? ub : 0, dgv, bk ? dgb : 0, duv, bk ? dub : 0 };
    run_dw(ctx, c, &H, dX_in, ddY, pairs, &ref);
    if (c->dw_config && tu_config_value(c->dw_config, "BUSY") > 0)
        check_busy(ctx, c, &H, &a, X, dY, dX_in, ddY, pairs, &stored);
    if (c->fwd_config) check_listing(ctx, c, &fp, &H, &a, dX_in, dWu, dWd, uv, bk ? ub : 0);
    if (fwd_config) SJ_ASSERT_OK(sj_set_config(ctx, &fp, ""));
    if (dx_config) SJ_ASSERT_OK(sj_set_config(ctx, &xp, ""));
    if (c->l2_blocked) {
        /* the per-token kernel of the same THREADS and B: the same threads hold the same columns,
         * so each pair's dot is summed in the same order */
        char token_config[128];
        config_with(c->config, "SPLIT", 0, token_config, sizeof token_config);
        SJ_ASSERT_OK(sj_set_config(ctx, &fp, token_config));
        SJ_ASSERT_OK(sj_set_config(ctx, &xp, token_config));
        /* each pair's dot as the per-token kernel computes it; the dx from the same stored u. Y is
         * not compared: the slices take u as stored (rounded), the per-token kernel the fp32 dot */
        sj_devptr Y1 = poisoned(ctx, tok * b16), uv1 = poisoned(ctx, ell * b16), ub1 = poisoned(ctx, bk * b16),
                  dX1 = poisoned(ctx, tok * b16), dgv1 = poisoned(ctx, ell * 4), dgb1 = poisoned(ctx, bk * 4),
                  duv1 = poisoned(ctx, ell * 4), dub1 = poisoned(ctx, bk * 4);
        SJ_ASSERT_OK(sj_hybrid_ffn_fwd(ctx, &fp, dX_in, &H, dWu, dWd, Y1, uv1, bk ? ub1 : 0, 0, 0, NULL));
        SJ_ASSERT_OK(sj_hybrid_ffn_dx(ctx, &xp, ddY, &H, uv, bk ? ub : 0, dWg, dWu, dWd, dX1, dgv1, bk ? dgb1 : 0, duv1,
                                      bk ? dub1 : 0, 0, 0, NULL));
        SJ_ASSERT_OK(sj_synchronize(ctx));
        size_t differ = count_differences(ctx, "u (ELL)", dt, 2, uv, uv1, ell) +
                        count_differences(ctx, "dg (ELL)", dt, 4, dgv, dgv1, ell) +
                        count_differences(ctx, "du (ELL)", dt, 4, duv, duv1, ell) +
                        count_differences(ctx, "dX", dt, 2, dXo, dX1, tok);
        if (bk)
            differ += count_differences(ctx, "u (backup)", dt, 2, ub, ub1, bk) +
                      count_differences(ctx, "dg (backup)", dt, 4, dgb, dgb1, bk) +
                      count_differences(ctx, "du (backup)", dt, 4, dub, dub1, bk);
        if (differ) {
            print_message("%s M=%lld F=%lld D=%lld %s: %zu elements of the L2-blocked kernels differ from the "
                          "per-token kernel's\n", sj_dtype_name(dt), (long long)c->M, (long long)c->F, (long long)c->D,
                          c->config, differ);
            split_cases_differing++;
        }
        SJ_ASSERT_OK(sj_set_config(ctx, &fp, ""));
        SJ_ASSERT_OK(sj_set_config(ctx, &xp, ""));
        sj_devptr ones[] = { Y1, uv1, ub1, dX1, dgv1, dgb1, duv1, dub1 };
        for (size_t i = 0; i < sizeof ones / sizeof *ones; i++) sj_free(ctx, ones[i]);
    }
    sj_hybrid_host_free(&a);
    SJ_ASSERT_OK(sj_hybrid_device_free(ctx, &H));
    sj_devptr all[] = { dX_in, dWg, dWu, dWd, ddY, Y, uv, ub, dXo, dgv, dgb, duv, dub, fwd_work, dx_work };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) sj_free(ctx, all[i]);
    free(X), free(WgT), free(WuT), free(Wd), free(dY), free(out), free(u_v), free(u_b);
    free(g_v), free(g_b), free(d_v), free(d_b), free(gWg), free(gWu), free(gWd);
    free(ref.Y), free(ref.dX), free(ref.dWgT), free(ref.dWuT), free(ref.dWd);
}

static void test_step_matches_reference(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const ffn_case cases[] = {
        { SJ_DTYPE_BF16, 256, 1024, 512, 128, 32, 0.99, NULL, NULL, SJ_DTYPE_BF16, 0, NULL, NULL, 0 },
        /* every row overflows; one token a chunk, more tokens than a chunk holds */
        { SJ_DTYPE_F16, 130, 768, 264, 32, 130, 0.50, "THREADS=128,B=4", "THREADS=32,VPT=1,UB=1,PF=1", SJ_DTYPE_F32, 0, NULL, NULL, 0 },
        /* ragged; the backup grows */
        { SJ_DTYPE_BF16, 77, 3001, 1032, 64, 0, 0.95, "THREADS=128,B=16", "THREADS=64,VPT=2,UB=8,PF=2", SJ_DTYPE_BF16, 0, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 96, 5632, 136, 16, 8, 0.999, NULL, NULL, SJ_DTYPE_F16, 0, NULL, NULL, 0 },          /* ragged d_model, 99.9% */
        /* nothing overflows */
        { SJ_DTYPE_BF16, 129, 2048, 2048, 256, 0, 0.99, "THREADS=256,B=8", "THREADS=256,VPT=1,UB=2,PF=4", SJ_DTYPE_F32, 0, NULL, NULL, 0 },
        /* the L2-blocked pair, every SPLIT, both dtypes; ragged ranges (d_ff) and slices (d_model
         * pieces), rows overflowing into a backup that grows */
        { SJ_DTYPE_BF16, 77, 3001, 1032, 64, 0, 0.95, "THREADS=128,B=16,SPLIT=4", NULL, SJ_DTYPE_BF16, 1, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 77, 3001, 1032, 64, 4, 0.95, "THREADS=256,B=4,SPLIT=4", NULL, SJ_DTYPE_F16, 1, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 130, 1100, 2056, 16, 8, 0.98, "THREADS=256,B=8,SPLIT=8", NULL, SJ_DTYPE_F32, 1, NULL, NULL, 0 },
        { SJ_DTYPE_BF16, 130, 1100, 2056, 16, 0, 0.98, "THREADS=128,B=4,SPLIT=8", NULL, SJ_DTYPE_BF16, 1, NULL, NULL, 0 },
        /* slices of 33 pieces; the slices of SPLIT=4 here take two 16-byte pieces a thread */
        { SJ_DTYPE_BF16, 64, 2050, 4104, 16, 0, 0.99, "THREADS=512,B=8,SPLIT=16", NULL, SJ_DTYPE_F32, 1, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 48, 2050, 4104, 32, 0, 0.98, "THREADS=128,B=16,SPLIT=16", NULL, SJ_DTYPE_F16, 1, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 48, 1500, 4104, 128, 0, 0.99, "THREADS=128,B=8,SPLIT=4", NULL, SJ_DTYPE_F16, 1, NULL, NULL, 0 },
        /* the tensor-core variants (ALGO=2) of the fwd and the dx, both unit tiles, 8 and 16 warps,
         * 2 to 4 stages: 99%; every row overflowing (a partial last unit tile); ragged d_ff and
         * d_model with a backup that grows; nothing overflowing (the fwd alone); 99.9% (the dx
         * alone, on the per-token fwd's u); several token tiles, the last partial */
        { SJ_DTYPE_BF16, 256, 1024, 512, 128, 32, 0.99, NULL, NULL, SJ_DTYPE_BF16, 0, "ALGO=2,WARPS=8,UT=512,STAGES=3",
          "ALGO=2,WARPS=8,UT=512,STAGES=3", 0 },
        { SJ_DTYPE_F16, 130, 768, 264, 32, 130, 0.50, NULL, NULL, SJ_DTYPE_F32, 0, "ALGO=2,WARPS=8,UT=512,STAGES=2",
          "ALGO=2,WARPS=8,UT=512,STAGES=2", 0 },
        { SJ_DTYPE_BF16, 77, 3001, 1032, 64, 0, 0.95, NULL, NULL, SJ_DTYPE_BF16, 0, "ALGO=2,WARPS=8,UT=256,STAGES=4",
          "ALGO=2,WARPS=8,UT=512,STAGES=3", 0 },
        { SJ_DTYPE_BF16, 129, 2048, 2048, 256, 0, 0.99, NULL, NULL, SJ_DTYPE_F32, 0, "ALGO=2,WARPS=16,UT=256,STAGES=3", NULL, 0 },
        { SJ_DTYPE_F16, 96, 5632, 136, 16, 8, 0.999, NULL, NULL, SJ_DTYPE_F16, 0, NULL, "ALGO=2,WARPS=16,UT=512,STAGES=3", 0 },
        { SJ_DTYPE_F16, 700, 1500, 520, 64, 0, 0.98, NULL, NULL, SJ_DTYPE_F16, 0, "ALGO=2,WARPS=8,UT=512,STAGES=3",
          "ALGO=2,WARPS=16,UT=256,STAGES=2", 0 },
        /* the busy units on tensor cores (dw BUSY > 0; check_busy): skewed rates ~ 1 / (j + 1) at
         * 98%, about 175 units at 8 tokens (1/64 of 512) or more: more than 128 slots, fewer than
         * 256 (slots left empty); every unit busy and every one placed (d_ff = BUSY = 128); every
         * unit busy at 50%, 640 of them past the slots; ragged tokens (77: the GEMMs' rows of A
         * not 16-byte aligned) and d_model, 512 slots of 3001 units */
        { SJ_DTYPE_BF16, 512, 1024, 256, 64, 0, 0.98, NULL, "BUSY=128,THREADS=32,VPT=1,UB=2,PF=2", SJ_DTYPE_F32, 0,
          NULL, NULL, 1.0 },
        { SJ_DTYPE_F16, 512, 1024, 256, 64, 0, 0.98, NULL, "BUSY=256", SJ_DTYPE_F16, 0, NULL, NULL, 1.0 },
        { SJ_DTYPE_BF16, 130, 128, 264, 32, 130, 0.50, NULL, "BUSY=128", SJ_DTYPE_BF16, 0, NULL, NULL, 0 },
        { SJ_DTYPE_F16, 130, 768, 264, 32, 130, 0.50, NULL, "BUSY=128,THREADS=32,VPT=1,UB=1,PF=1", SJ_DTYPE_F32, 0, NULL,
          NULL, 0 },
        { SJ_DTYPE_BF16, 77, 3001, 1032, 64, 0, 0.95, NULL, "BUSY=512,THREADS=64,VPT=2,UB=8,PF=2", SJ_DTYPE_BF16, 0, NULL,
          NULL, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ctx, &cases[i]);
    if (checks_failed || split_cases_differing)
        fail_msg("%d checks failed; %d L2-blocked cases gave per-pair values or dX other than the per-token kernel's "
                 "bits (above)", checks_failed, split_cases_differing);
}

/* Once its kernel is loaded, sj_hybrid_ffn_workspace is a lookup: 2000 queries (a tensor-core
 * fwd, a BUSY dw) generate, compile and load nothing (the stats' counts stay), and their host time
 * a query is printed; sj_set_config changes what it answers, as it changes the kernel. */
static void test_size_query_is_a_lookup(void **state)
{
    (void)state;
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_hybrid_layout l;
    SJ_ASSERT_OK(sj_hybrid_layout_init(&l, SJ_DTYPE_BF16, 256, 1024, 128, 32));
    sj_problem fp, wp;
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_FWD, 512, &fp));
    SJ_ASSERT_OK(sj_hybrid_ffn_problem(&l, SJ_OP_HYBRID_FFN_DW, 512, &wp));
    size_t bytes = 1, transpose;
    SJ_ASSERT_OK(sj_set_config(ctx, &fp, "ALGO=0"));
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &fp, &l, &bytes));
    assert_int_equal(bytes, 0);
    SJ_ASSERT_OK(sj_set_config(ctx, &fp, "ALGO=2"));
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, "BUSY=512"));
    hybrid_pairs_ws pw;
    hybrid_pairs_plan(l.rows, l.cols, l.width, l.backup_rows, 1, &pw);
    hybrid_dw_busy_ws bw;
    hybrid_dw_busy_plan(l.rows, l.cols, 512, 512, 2, 2, &bw);
    SJ_ASSERT_OK(sj_hybrid_ffn_dw_workspace(&l, &transpose));
    sj_stats before, after;
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &fp, &l, &bytes)); /* loads the kernels */
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &wp, &l, &bytes));
    SJ_ASSERT_OK(sj_get_stats(ctx, &before));
    const int queries = 1000;
    const double t0 = rt_seconds();
    for (int i = 0; i < queries; i++) {
        SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &fp, &l, &bytes));
        assert_int_equal(bytes, pw.total);
        SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &wp, &l, &bytes));
        assert_int_equal(bytes, transpose + bw.total);
    }
    const double us = (rt_seconds() - t0) / (2.0 * queries) * 1e6;
    SJ_ASSERT_OK(sj_get_stats(ctx, &after));
    assert_int_equal(after.lua_generations, before.lua_generations);
    assert_int_equal(after.nvrtc_compiles, before.nvrtc_compiles);
    assert_int_equal(after.cache_hits + after.cache_misses, before.cache_hits + before.cache_misses);
    assert_int_equal(after.launches, before.launches);
    print_message("  sj_hybrid_ffn_workspace once loaded: %.2f us a query (host)\n", us);
    SJ_ASSERT_OK(sj_set_config(ctx, &fp, ""));
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, "BUSY=0"));
    SJ_ASSERT_OK(sj_hybrid_ffn_workspace(ctx, &wp, &l, &bytes));
    assert_int_equal(bytes, transpose);
    SJ_ASSERT_OK(sj_set_config(ctx, &wp, ""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_matches_reference),
        cmocka_unit_test(test_size_query_is_a_lookup),
    };
    return TU_RUN_TESTS(tests, setup, NULL);
}
