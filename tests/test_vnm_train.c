/* test_vnm_train.c: the host references of V:N:M training (ops/vnm/vnm_double_prune.c,
 * vnm_dx_host.c, vnm_dw_host.c, vnm_gmp.c) on the CPU, each against a brute-force dense
 * computation written here: double pruning against the rule re-implemented on the dense W^T
 * (valid V:N:M, a subset of W^T's non-zeros with their values), the exact dX and the sampled dW
 * against dense fp64 products rounded like the library, and GMP (the cubic schedule, the
 * sparsity after every step, masks that only shrink, the pattern of every step and the final
 * V:2:M). Every V in {64, 128}, M in {4, 8, 16, 32}, f16 and bf16, ragged shapes. */
#include "test_util.h"
#include "ops/vnm/vnm_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int VS[] = { 64, 128 };
static const int MS[] = { 4, 8, 16, 32 };
static const sj_dtype DTS[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16 };

/* Ragged shapes: rows not a multiple of V, cols not a multiple of M (and a tiny one). */
static void shape_for(int v, int m, int variant, int64_t *rows, int64_t *cols)
{
    switch (variant) {
    case 0: *rows = v + 37; *cols = 3 * m + 5; break;
    case 1: *rows = 2 * v; *cols = 5 * m + 1; break;
    default: *rows = 3 * m - 1; *cols = v / 2 + 3; break;
    }
}

/* A random W pruned to V:2:M by magnitude (the compressed form and the dense one). */
static void random_w(sj_dtype dt, int v, int m, int64_t rows, int64_t cols, uint64_t *st, sj_vnm_host *h,
                     uint16_t **dense)
{
    sj_vnm_layout l;
    SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, m, rows, cols));
    uint16_t *A = malloc((size_t)(rows * cols) * 2);
    tu_fill16(dt, A, (size_t)(rows * cols), 1.0f, st);
    SJ_ASSERT_OK(sj_vnm_compress(&l, A, cols, SJ_VNM_PRUNE_L2, h));
    SJ_ASSERT_OK(sj_vnm_decompress(h, A, cols));
    *dense = A;
}

static double mag(sj_dtype dt, uint16_t x) { return fabs((double)tu_from16(dt, x)); }

/* The double-pruning rule written out on the dense T (rows x cols): per block the 4 columns of
 * largest L2 norm (ties lower, padding last), per row the 2 largest |t| of those (ties lower). */
static void rule_on_dense(sj_dtype dt, int v, int m, int64_t rows, int64_t cols, const uint16_t *T, uint16_t *out)
{
    memset(out, 0, (size_t)(rows * cols) * 2);
    for (int64_t r0 = 0; r0 < rows; r0 += v)
        for (int64_t c0 = 0; c0 < cols; c0 += m) {
            int64_t r1 = r0 + v < rows ? r0 + v : rows, w = cols - c0 < m ? cols - c0 : m;
            double norm[128];
            int pick[4], used[128] = { 0 };
            for (int c = 0; c < m; c++) {
                norm[c] = c < w ? 0.0 : -1.0; /* padding after every real column */
                for (int64_t r = r0; c < w && r < r1; r++) norm[c] += mag(dt, T[r * cols + c0 + c]) * mag(dt, T[r * cols + c0 + c]);
            }
            for (int j = 0; j < 4; j++) {
                int best = -1;
                for (int c = 0; c < m; c++)
                    if (!used[c] && (best < 0 || norm[c] > norm[best])) best = c;
                used[best] = 1;
                pick[j] = best;
            }
            for (int64_t r = r0; r < r1; r++) {
                int keep[2] = { -1, -1 };
                for (int k = 0; k < 2; k++)
                    for (int c = 0; c < m; c++) {
                        if (!used[c] || c >= w || c == keep[0]) continue;
                        /* among the 4 picked columns, in ascending column order for ties */
                        if (keep[k] < 0 || (T[r * cols + c0 + c] & 0x7fff) > (T[r * cols + c0 + keep[k]] & 0x7fff)) keep[k] = c;
                    }
                for (int k = 0; k < 2; k++)
                    if (keep[k] >= 0) out[r * cols + c0 + keep[k]] = T[r * cols + c0 + keep[k]];
            }
            (void)pick;
        }
}

static void test_double_prune(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++)
                for (int var = 0; var < 3; var++) {
                    const sj_dtype dt = DTS[d];
                    const int v = VS[vi], m = MS[mi];
                    int64_t rows, cols;
                    shape_for(v, m, var, &rows, &cols);
                    sj_vnm_host W, W2;
                    uint16_t *D;
                    random_w(dt, v, m, rows, cols, &st, &W, &D);
                    SJ_ASSERT_OK(sj_vnm_double_prune_host(&W, &W2));
                    sj_vnm_layout lt;
                    SJ_ASSERT_OK(sj_vnm_transpose_layout(&W.layout, &lt));
                    assert_memory_equal(&lt, &W2.layout, sizeof lt);
                    assert_int_equal(lt.rows, cols);
                    assert_int_equal(lt.cols, rows);
                    uint16_t *T = malloc((size_t)(rows * cols) * 2), *D2 = malloc((size_t)(rows * cols) * 2),
                             *E = malloc((size_t)(rows * cols) * 2);
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) T[c * rows + r] = D[r * cols + c];
                    memset(D2, 0xff, (size_t)(rows * cols) * 2); /* poison: decompress writes all */
                    SJ_ASSERT_OK(sj_vnm_decompress(&W2, D2, rows));
                    SJ_ASSERT_OK(sj_vnm_check(&lt, D2, rows)); /* a valid V:N:M along W^T's rows */
                    int64_t nz_t = 0, nz_2 = 0;
                    for (int64_t i = 0; i < rows * cols; i++) {
                        nz_t += (T[i] & 0x7fff) != 0;
                        if ((D2[i] & 0x7fff) == 0) continue;
                        nz_2++;
                        if (D2[i] != T[i]) fail_msg("V=%d M=%d %s: WT2[%lld] = 0x%04x is not W^T's 0x%04x", v, m,
                                                    sj_dtype_name(dt), (long long)i, D2[i], T[i]);
                    }
                    assert_true(nz_2 <= nz_t && nz_2 > 0);
                    rule_on_dense(dt, v, m, cols, rows, T, E);
                    for (int64_t i = 0; i < rows * cols; i++)
                        if ((D2[i] & 0x7fff) != (E[i] & 0x7fff))
                            fail_msg("V=%d M=%d %s %lldx%lld: WT2 element %lld is 0x%04x, the rule keeps 0x%04x", v, m,
                                     sj_dtype_name(dt), (long long)rows, (long long)cols, (long long)i, D2[i], E[i]);
                    free(T);
                    free(D2);
                    free(E);
                    free(D);
                    sj_vnm_host_free(&W);
                    sj_vnm_host_free(&W2);
                }
}

/* out element i of dtype dt as a double. */
static double load(sj_dtype dt, const void *buf, size_t i) { return tu_load(dt, buf, i); }

static double round_to(sj_dtype dt, double x)
{
    return dt == SJ_DTYPE_F32 ? (double)(float)x : (double)tu_from16(dt, tu_to16(dt, (float)x));
}

/* dX = W^T . dY against the dense product; also how far the double-pruned dX (WT2 . dY) is. */
static void test_dx(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    const sj_dtype outs[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                const sj_dtype dt = DTS[d];
                const int v = VS[vi], m = MS[mi];
                const int64_t tokens = 24 + (int64_t)(mi * 7);
                int64_t rows, cols;
                shape_for(v, m, (int)(mi % 3), &rows, &cols);
                sj_vnm_host W, W2;
                uint16_t *D;
                random_w(dt, v, m, rows, cols, &st, &W, &D);
                uint16_t *dY = malloc((size_t)(rows * tokens) * 2), *Dt = malloc((size_t)(rows * cols) * 2),
                         *D2 = malloc((size_t)(rows * cols) * 2);
                tu_fill16(dt, dY, (size_t)(rows * tokens), 1.0f, &st);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++) Dt[c * rows + r] = D[r * cols + c];
                double *ref = malloc(sizeof(double) * (size_t)(cols * tokens)), *ref2 = malloc(sizeof(double) * (size_t)(cols * tokens));
                tu_ref_gemm16(dt, Dt, dY, ref, cols, tokens, rows);
                const sj_dtype od = outs[(vi * 4 + mi) % 3];
                void *dX = malloc((size_t)(cols * tokens) * 4);
                memset(dX, 0xff, (size_t)(cols * tokens) * 4);
                SJ_ASSERT_OK(sj_vnm_dx_host(&W, dY, tokens, od, dX));
                for (size_t i = 0; i < (size_t)(cols * tokens); i++)
                    if (load(od, dX, i) != round_to(od, ref[i]))
                        fail_msg("V=%d M=%d %s->%s: dX[%zu] = %g, expected %g", v, m, sj_dtype_name(dt), sj_dtype_name(od),
                                 i, load(od, dX, i), round_to(od, ref[i]));
                /* The double-pruned dX: WT2 . dY, its distance from the exact one (reported). */
                SJ_ASSERT_OK(sj_vnm_double_prune_host(&W, &W2));
                SJ_ASSERT_OK(sj_vnm_decompress(&W2, D2, rows));
                tu_ref_gemm16(dt, D2, dY, ref2, cols, tokens, rows);
                double num = 0, den = 0;
                for (size_t i = 0; i < (size_t)(cols * tokens); i++) {
                    num += (ref2[i] - ref[i]) * (ref2[i] - ref[i]);
                    den += ref[i] * ref[i];
                }
                double rel = sqrt(num / den);
                printf("double-pruned dX vs exact, V=%d 2:%d %s: rel. error %.3f\n", v, m, sj_dtype_name(dt), rel);
                assert_true(rel > 0.0 && rel < 1.0);
                free(dY);
                free(Dt);
                free(D2);
                free(ref);
                free(ref2);
                free(dX);
                free(D);
                sj_vnm_host_free(&W);
                sj_vnm_host_free(&W2);
            }
}

/* dW = dY . X^T at W's kept slots, in W's value layout, against the dense product. */
static void test_dw(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    const sj_dtype outs[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++)
                for (size_t oi = 0; oi < 3; oi++) {
                    const sj_dtype dt = DTS[d], od = outs[oi];
                    const int v = VS[vi], m = MS[mi];
                    const int64_t tokens = 17 + (int64_t)(oi * 11);
                    int64_t rows, cols;
                    shape_for(v, m, (int)((mi + oi) % 3), &rows, &cols);
                    sj_vnm_host W;
                    uint16_t *D;
                    random_w(dt, v, m, rows, cols, &st, &W, &D);
                    const sj_vnm_layout *l = &W.layout;
                    uint16_t *dY = malloc((size_t)(rows * tokens) * 2), *X = malloc((size_t)(cols * tokens) * 2),
                             *Xt = malloc((size_t)(cols * tokens) * 2);
                    tu_fill16(dt, dY, (size_t)(rows * tokens), 1.0f, &st);
                    tu_fill16(dt, X, (size_t)(cols * tokens), 1.0f, &st);
                    for (int64_t c = 0; c < cols; c++)
                        for (int64_t t = 0; t < tokens; t++) Xt[t * cols + c] = X[c * tokens + t];
                    double *full = malloc(sizeof(double) * (size_t)(rows * cols));
                    tu_ref_gemm16(dt, dY, Xt, full, rows, cols, tokens);
                    const size_t n_values = l->values_bytes / 2;
                    void *dW = malloc(n_values * 4);
                    memset(dW, 0xff, n_values * 4); /* NaN in every dtype: each slot must be written */
                    SJ_ASSERT_OK(sj_vnm_dw_host(&W, dY, X, tokens, od, dW));
                    /* Decode the slots from the format's definition: meta nibble -> index column. */
                    int64_t nz_slots = 0, nz_dense = 0;
                    for (int64_t r = 0; r < vnm_rows_padded(l); r++)
                        for (int64_t g = 0; g < vnm_groups_padded(l); g++)
                            for (int h = 0; h < 2; h++) {
                                double want = 0.0;
                                size_t vi2 = vnm_value_at(l, r, g, h);
                                if (r < rows && g < l->groups) {
                                    int shift;
                                    uint32_t word = W.meta[vnm_meta_at(l, r, g, &shift)];
                                    int pos = (int)((word >> shift) >> (2 * h)) & 3;
                                    int32_t c = W.index[vnm_index_at(l, r / v, g, pos)];
                                    if (c >= 0) {
                                        want = round_to(od, full[r * cols + c]);
                                        if ((W.values[vi2] & 0x7fff) != 0) {
                                            nz_slots++;
                                            assert_int_equal(W.values[vi2], D[r * cols + c]);
                                        }
                                    }
                                }
                                if (load(od, dW, vi2) != want)
                                    fail_msg("V=%d M=%d %s->%s %lldx%lld T=%lld: dW slot (%lld, %lld, %d) = %g, expected %g", v,
                                             m, sj_dtype_name(dt), sj_dtype_name(od), (long long)rows, (long long)cols,
                                             (long long)tokens, (long long)r, (long long)g, h, load(od, dW, vi2), want);
                            }
                    for (int64_t i = 0; i < rows * cols; i++) nz_dense += (D[i] & 0x7fff) != 0;
                    assert_int_equal(nz_slots, nz_dense); /* every non-zero of W has its slot */
                    free(dY);
                    free(X);
                    free(Xt);
                    free(full);
                    free(dW);
                    free(D);
                    sj_vnm_host_free(&W);
                }
}

static void test_reference_errors(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    sj_vnm_host W, out;
    uint16_t *D;
    random_w(SJ_DTYPE_F16, 64, 8, 70, 40, &st, &W, &D);
    uint16_t buf[70 * 4];
    float outbuf[70 * 4 * 2];
    SJ_ASSERT_STATUS(sj_vnm_double_prune_host(NULL, &out), SJ_ERR_INVALID_ARGUMENT, "W or its arrays");
    SJ_ASSERT_STATUS(sj_vnm_double_prune_host(&W, NULL), SJ_ERR_INVALID_ARGUMENT, "out is NULL");
    SJ_ASSERT_STATUS(sj_vnm_dx_host(&W, buf, 0, SJ_DTYPE_F32, outbuf), SJ_ERR_INVALID_ARGUMENT, "tokens = 0");
    SJ_ASSERT_STATUS(sj_vnm_dx_host(&W, buf, 4, (sj_dtype)9, outbuf), SJ_ERR_INVALID_ARGUMENT, "out_dtype = 9");
    SJ_ASSERT_STATUS(sj_vnm_dw_host(&W, buf, NULL, 4, SJ_DTYPE_F32, outbuf), SJ_ERR_INVALID_ARGUMENT, "X");
    sj_vnm_host forged = W;
    forged.layout.groups = 3;
    SJ_ASSERT_STATUS(sj_vnm_dw_host(&forged, buf, buf, 4, SJ_DTYPE_F32, outbuf), SJ_ERR_INVALID_ARGUMENT, "sj_vnm_layout_init");
    sj_vnm_host_free(&W);
    free(D);
}

/* ---------------------------------------------------------------- GMP */

static sj_gmp_schedule schedule(int v, int m, double si, double sf, int64_t t0, int64_t dt, int64_t n)
{
    sj_gmp_schedule s = { .initial_sparsity = si, .final_sparsity = sf, .start_step = t0, .interval = dt,
                          .n_steps = n, .v = v, .m = m };
    return s;
}

static void test_gmp_schedule(void **state)
{
    (void)state;
    sj_gmp_schedule s = schedule(64, 8, 0.1, 0.75, 10, 5, 6);
    sj_gmp_target t;
    for (int64_t step = 0; step < 60; step++) {
        SJ_ASSERT_OK(sj_gmp_target_at(&s, step, &t));
        int64_t j = step < 10 ? -1 : (step - 10) / 5;
        int prune = step >= 10 && (step - 10) % 5 == 0 && j <= 6;
        assert_int_equal(t.prune_now, prune);
        double want = 0.0;
        if (j >= 0) {
            double jj = (double)(j > 6 ? 6 : j);
            want = 0.75 + (0.1 - 0.75) * pow(1.0 - jj / 6.0, 3.0);
        }
        assert_true(fabs(t.sparsity - want) < 1e-12);
        int pm = 0;
        for (int m = 8; m >= 4 && !pm; m--)
            if (1.0 - 2.0 / m <= want + 1e-12) pm = m;
        assert_int_equal(t.pattern_m, pm);
    }
    SJ_ASSERT_OK(sj_gmp_target_at(&s, 40, &t)); /* the last pruning step: exactly s_f and the pattern */
    assert_true(t.prune_now && t.sparsity == 0.75 && t.pattern_m == 8);
    SJ_ASSERT_OK(sj_gmp_target_at(&s, 41, &t));
    assert_true(!t.prune_now && t.sparsity == 0.75);

    /* One field out of range at a time; the error names it and its value. */
    const struct { sj_gmp_schedule s; const char *needle; } bad[] = {
        { schedule(64, 8, 0.1, 0.7, 10, 5, 6), "final_sparsity = 0.7" },
        { schedule(64, 8, 0.8, 0.75, 10, 5, 6), "initial_sparsity = 0.8" },
        { schedule(64, 8, 0.1, 0.75, -1, 5, 6), "start_step = -1" },
        { schedule(64, 8, 0.1, 0.75, 10, 0, 6), "interval = 0" },
        { schedule(64, 8, 0.1, 0.75, 10, 5, 0), "n_steps = 0" },
        { schedule(48, 8, 0.1, 0.75, 10, 5, 6), "schedule.v = 48" },
        { schedule(64, 3, 0.1, 0.75, 10, 5, 6), "schedule.m = 3" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        SJ_ASSERT_STATUS(sj_gmp_target_at(&bad[i].s, 0, &t), SJ_ERR_INVALID_ARGUMENT, bad[i].needle);
    SJ_ASSERT_STATUS(sj_gmp_target_at(&s, -1, &t), SJ_ERR_INVALID_ARGUMENT, "step = -1");
}

/* A whole GMP run on a random dense weight: after every pruning step the mask only shrank, the
 * sparsity is max(target, what the pattern alone leaves), the unstructured part removed the
 * smallest survivors, the weight lies in the step's V:2:M' pattern, and the last step leaves a
 * V:2:M matrix. */
static void test_gmp_run(void **state)
{
    (void)state;
    uint64_t st = tu_seed();
    for (size_t d = 0; d < 2; d++)
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < 4; mi++) {
                const sj_dtype dt = DTS[d];
                const int v = VS[vi], m = MS[mi];
                int64_t rows, cols;
                shape_for(v, m, (int)((d + mi) % 3), &rows, &cols);
                const int64_t n = rows * cols;
                sj_gmp_schedule s = schedule(v, m, 0.0, mi == 3 ? 0.97 : 1.0 - 2.0 / m, 3, 2, 7);
                uint16_t *W = malloc((size_t)n * 2), *before = malloc((size_t)n * 2), *U = malloc((size_t)n * 2);
                uint8_t *mask = malloc((size_t)n), *old = malloc((size_t)n);
                tu_fill16(dt, W, (size_t)n, 1.0f, &st);
                memset(mask, 1, (size_t)n);
                int steps_with_pattern = 0;
                for (int64_t step = 0; step < 3 + 2 * 7 + 4; step++) {
                    sj_gmp_target t;
                    SJ_ASSERT_OK(sj_gmp_target_at(&s, step, &t));
                    memcpy(before, W, (size_t)n * 2);
                    memcpy(old, mask, (size_t)n);
                    SJ_ASSERT_OK(sj_gmp_prune_host(&s, step, dt, rows, cols, W, cols, mask, cols));
                    if (!t.prune_now) {
                        assert_memory_equal(W, before, (size_t)n * 2);
                        assert_memory_equal(mask, old, (size_t)n);
                        continue;
                    }
                    /* what the pattern alone keeps of the survivors */
                    uint8_t *pat = malloc((size_t)n);
                    memcpy(pat, old, (size_t)n);
                    if (t.pattern_m) {
                        sj_vnm_layout l;
                        sj_vnm_host h;
                        SJ_ASSERT_OK(sj_vnm_layout_init(&l, dt, v, 2, t.pattern_m, rows, cols));
                        for (int64_t i = 0; i < n; i++) U[i] = old[i] ? before[i] : 0;
                        SJ_ASSERT_OK(sj_vnm_compress(&l, U, cols, SJ_VNM_PRUNE_L2, &h));
                        uint8_t *slot = calloc((size_t)n, 1);
                        for (int64_t r = 0; r < rows; r++)
                            for (int64_t g = 0; g < l.groups; g++)
                                for (int hh = 0; hh < 2; hh++) {
                                    int32_t c = vnm_slot_column(&l, h.meta, h.index, r, g, hh);
                                    if (c >= 0) slot[r * cols + c] = 1;
                                }
                        for (int64_t i = 0; i < n; i++) pat[i] &= slot[i];
                        free(slot);
                        sj_vnm_host_free(&h);
                        SJ_ASSERT_OK(sj_vnm_check(&l, W, cols)); /* the step's pattern */
                        steps_with_pattern++;
                    }
                    int64_t zeros = 0, zeros_pat = 0, need = (int64_t)ceil(t.sparsity * (double)n - 1e-9);
                    uint16_t min_kept = 0xffff, max_cut = 0;
                    for (int64_t i = 0; i < n; i++) {
                        if (mask[i] && !old[i]) fail_msg("GMP step %lld: position %lld came back", (long long)step, (long long)i);
                        zeros += !mask[i];
                        zeros_pat += !pat[i];
                        if (mask[i]) {
                            assert_int_equal(W[i], before[i]);
                            if ((W[i] & 0x7fff) < min_kept) min_kept = W[i] & 0x7fff;
                        } else {
                            assert_int_equal(W[i], 0);
                            if (pat[i] && (before[i] & 0x7fff) > max_cut) max_cut = before[i] & 0x7fff;
                        }
                    }
                    assert_int_equal(zeros, need > zeros_pat ? need : zeros_pat);
                    assert_true((double)zeros / (double)n >= t.sparsity - 1e-12);
                    if (zeros > zeros_pat) assert_true(max_cut <= min_kept); /* the smallest went */
                    free(pat);
                }
                /* The end: a V:2:M weight at (at least) the final sparsity. */
                sj_vnm_layout lf;
                SJ_ASSERT_OK(sj_vnm_layout_init(&lf, dt, v, 2, m, rows, cols));
                SJ_ASSERT_OK(sj_vnm_check(&lf, W, cols));
                /* 2:4 reaches its pattern (1/2) only at the last step; sparser ones earlier */
                assert_true(steps_with_pattern >= (m == 4 ? 1 : 2));
                free(W);
                free(before);
                free(U);
                free(mask);
                free(old);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_prune),
        cmocka_unit_test(test_dx),
        cmocka_unit_test(test_dw),
        cmocka_unit_test(test_reference_errors),
        cmocka_unit_test(test_gmp_schedule),
        cmocka_unit_test(test_gmp_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
