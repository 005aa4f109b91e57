/* vnm_gmp.c: gradual magnitude pruning (Zhu and Gupta's cubic schedule) ending in a V:2:M
 * pattern, on the host: the schedule (what sparsity and which pattern a step asks for) and one
 * pruning step on a dense weight and its mask, the reference of a device GMP step.
 *
 * Between dense and the final pattern a step takes the sparsest V:2:M' pattern its target
 * allows (the largest M' <= M with 1 - 2/M' <= s_t; none below 1/2) and reaches the rest of s_t
 * by unstructured magnitude pruning inside it (sparsejit.h gives the four steps). Why this rule:
 * the schedule's sparsity is met at every step, not rounded to the next pattern; the mask only
 * shrinks (each step prunes the surviving weights, so no weight comes back); from s_t = 1/2 on
 * the weight already lies in a V:2:M' pattern, so training runs on sparse tensor cores long
 * before the end; and the last step's pattern is the final V:2:M. Unstructured pruning alone
 * would run dense until the last step and then force a pattern onto weights that never had to
 * fit one; stepping M alone cannot reach the sparsities between two patterns. */
#include "core/error.h"
#include "ops/vnm/vnm_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sj_status check_schedule(const sj_gmp_schedule *s, const char *what)
{
    if (!s) return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule is NULL", what);
    if (s->v != 16 && s->v != 32 && s->v != 64 && s->v != 128)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.v = %d: V must be 16, 32, 64 or 128", what, s->v);
    if (s->m < 4 || s->m > 128)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.m = %d: M must be in 4..128", what, s->m);
    double pattern = 1.0 - 2.0 / s->m;
    if (!(s->final_sparsity >= pattern - 1e-12 && s->final_sparsity < 1.0))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.final_sparsity = %g: expected [%g, 1) for V:2:%d", what,
                         s->final_sparsity, pattern, s->m);
    if (!(s->initial_sparsity >= 0.0 && s->initial_sparsity <= s->final_sparsity))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.initial_sparsity = %g: expected [0, final_sparsity = %g]",
                         what, s->initial_sparsity, s->final_sparsity);
    if (s->start_step < 0)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.start_step = %lld: expected >= 0", what,
                         (long long)s->start_step);
    if (s->interval < 1 || s->interval > ((int64_t)1 << 40))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.interval = %lld: expected 1..2^40", what,
                         (long long)s->interval);
    if (s->n_steps < 1 || s->n_steps > ((int64_t)1 << 20))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: schedule.n_steps = %lld: expected 1..2^20", what,
                         (long long)s->n_steps);
    return SJ_OK;
}

sj_status sj_gmp_target_at(const sj_gmp_schedule *s, int64_t step, sj_gmp_target *out)
{
    if (!out) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_target_at: out is NULL");
    memset(out, 0, sizeof *out);
    sj_status st = check_schedule(s, "sj_gmp_target_at");
    if (st != SJ_OK) return st;
    if (step < 0) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_target_at: step = %lld: expected >= 0", (long long)step);
    if (step < s->start_step) return SJ_OK;
    int64_t j = (step - s->start_step) / s->interval;
    out->prune_now = j <= s->n_steps && (step - s->start_step) % s->interval == 0;
    if (j > s->n_steps) j = s->n_steps;
    double f = 1.0 - (double)j / (double)s->n_steps;
    out->sparsity = j == s->n_steps ? s->final_sparsity
                                    : s->final_sparsity + (s->initial_sparsity - s->final_sparsity) * f * f * f;
    /* The largest M' <= M whose pattern is no sparser than the target (1e-12: s_f = 1 - 2/M
       computed by a caller in another order still reaches the final pattern). */
    for (int m = s->m; m >= 4 && !out->pattern_m; m--)
        if (1.0 - 2.0 / m <= out->sparsity + 1e-12) out->pattern_m = m;
    return SJ_OK;
}

typedef struct candidate {
    uint16_t key; /* |w| as its 16-bit magnitude bits (ordered like |w| in f16 and bf16) */
    int64_t at;   /* row-major index */
} candidate;

static int by_magnitude(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* mask &= the slots the V:2:m pruning of U = W (.) mask keeps. */
static sj_status mask_pattern(const sj_gmp_schedule *s, int m, sj_dtype dt, int64_t rows, int64_t cols,
                              const uint16_t *W, int64_t ldw, uint8_t *mask, int64_t ldm)
{
    sj_vnm_layout l;
    sj_vnm_host h;
    memset(&h, 0, sizeof h);
    sj_status st = sj_vnm_layout_init(&l, dt, s->v, 2, m, rows, cols);
    if (st != SJ_OK) return st;
    uint16_t *U = malloc((size_t)(rows * cols) * 2);
    uint8_t *keep = calloc((size_t)(rows * cols), 1);
    if (!U || !keep) {
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "sj_gmp_prune_host: cannot allocate a %lld x %lld copy", (long long)rows,
                       (long long)cols);
        goto done;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) U[r * cols + c] = mask[r * ldm + c] ? W[r * ldw + c] : 0;
    if ((st = sj_vnm_compress(&l, U, cols, SJ_VNM_PRUNE_L2, &h)) != SJ_OK) goto done;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < l.groups; g++)
            for (int half = 0; half < 2; half++) {
                int32_t c = vnm_slot_column(&l, h.meta, h.index, r, g, half);
                if (c >= 0) keep[r * cols + c] = 1;
            }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) mask[r * ldm + c] &= keep[r * cols + c];
done:
    sj_vnm_host_free(&h);
    free(U);
    free(keep);
    return st;
}

sj_status sj_gmp_prune_host(const sj_gmp_schedule *s, int64_t step, sj_dtype dt, int64_t rows, int64_t cols, void *Wv,
                            int64_t ldw, uint8_t *mask, int64_t ldm)
{
    sj_gmp_target t;
    sj_status st = sj_gmp_target_at(s, step, &t);
    if (st != SJ_OK) return error_prefix(st, "sj_gmp_prune_host");
    if (dt != SJ_DTYPE_F16 && dt != SJ_DTYPE_BF16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_prune_host: dtype %d: expected f16 or bf16", (int)dt);
    const int64_t max_dim = (int64_t)1 << 30;
    if (rows < 1 || rows > max_dim || cols < 1 || cols > max_dim)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_prune_host: rows = %lld, cols = %lld: expected 1..2^30 each",
                         (long long)rows, (long long)cols);
    if (!Wv || !mask) return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_prune_host: W or mask is NULL");
    if (ldw < cols || ldm < cols)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "sj_gmp_prune_host: ldw = %lld, ldm = %lld: both must be >= cols = %lld",
                         (long long)ldw, (long long)ldm, (long long)cols);
    if (!t.prune_now) return SJ_OK;
    uint16_t *W = Wv;
    if (t.pattern_m && (st = mask_pattern(s, t.pattern_m, dt, rows, cols, W, ldw, mask, ldm)) != SJ_OK) return st;
    /* Unstructured: the smallest surviving magnitudes go until ceil(s_t * n) are masked out. */
    const int64_t n = rows * cols;
    int64_t need = (int64_t)ceil(t.sparsity * (double)n - 1e-9), out = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) out += !mask[r * ldm + c];
    if (out < need) {
        candidate *cand = malloc((size_t)(n - out) * sizeof *cand);
        if (!cand) return error_set(SJ_ERR_OUT_OF_MEMORY, "sj_gmp_prune_host: cannot allocate %lld candidates",
                                    (long long)(n - out));
        int64_t k = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                if (mask[r * ldm + c]) cand[k++] = (candidate){ (uint16_t)(W[r * ldw + c] & 0x7fffu), r * cols + c };
        qsort(cand, (size_t)k, sizeof *cand, by_magnitude);
        for (int64_t i = 0; i < need - out; i++) mask[cand[i].at / cols * ldm + cand[i].at % cols] = 0;
        free(cand);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (!mask[r * ldm + c]) W[r * ldw + c] = 0;
    return SJ_OK;
}
