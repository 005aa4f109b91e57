/* hybrid_train_bench.c: bench_ffn_train, the benchmark of one training step of the ReLU FFN block
 * y = Wd . (relu(Wg . x) (.) (Wu . x)) over hybrid activations (docs/training.md, "Training with
 * sparse activations"), which is not one op's kernel: `sparsejit bench --op ffn-train` (and Lua's
 * sparsejit.bench) runs, each through its entry point,
 *   gate  sj_hybrid_gate: a = relu(X . Wg) written as hybrid (the resets, then the GEMM);
 *   fwd   sj_hybrid_ffn_fwd: u at a's pairs, Y;
 *   dx    sj_hybrid_ffn_dx: dg, du at the pairs, dX;
 *   dw    sj_hybrid_ffn_dw: the transpose, then dWgT, dWuT, dWd;
 * against the dense step in the same process: its parts' baselines one after the other (the gate
 * GEMM; the up GEMM, relu(G) (.) U, the down GEMM; dH, dU, dG, dX's two GEMMs; the three
 * weight-gradient GEMMs: 9 cuBLAS GEMMs and 3 element-wise products), its forward (the first 4)
 * and its backward also timed alone. It takes the hybrid-ffn-dw problem (tokens x d_model x
 * d_model, d_ff, the ELL width as twell_capacity, sparsity, skew, dtype; every output in
 * out_dtype), so --config forces dW's kernel, the last one launched, whose config the row shows;
 * the gate's, fwd's and dx's kernels are what the request path gives their problems (the same
 * shape and law): tuned winners if cached, else the defaults.
 *
 * The backup: setup runs sj_hybrid_gate_complete once from an empty backup, which reads the
 * overflow counter back and grows the backup to every overflow row; the timed step then runs
 * the plain sj_hybrid_gate into it. Which rows overflow is decided by the gate's values alone
 * (not by the order its blocks run in), so the same inputs overflow the same rows at every
 * launch and none is dropped; the check (before timing) reads the matrix back and refuses an
 * unplaced row. Sizing it on the host instead would need the whole gate GEMM there. Every
 * buffer (u, dg, du at the pairs, the workspace) is allocated in setup, never while timed. The
 * workspace is one buffer of the largest of what sj_hybrid_ffn_workspace says fwd's, dx's and
 * dw's kernels need (the parts run in stream order, so they can share it); setup resolves those
 * kernels (a forced config, else the tuned winner, else the default) and loads them, so the
 * first launch's time leaves out their compilation.
 *
 * Inputs: the gate harness's (twell_gate_inputs: X and WgT uniform in [-1, 1), column 0 of X
 * ones and of WgT each unit's bias, so relu(X . Wg) has the problem's sparsity and skew), WuT,
 * Wd and dY uniform, all written on the device by the counter-based generator. The check
 * compares 16 sampled token rows of the gate, Y and dX and 16 sampled unit rows of each weight
 * gradient with the fp64 host reference of hybrid_step_reference.h, which takes the active pairs
 * from the matrix the gate wrote. FLOPs are the parts' harness counts. Nothing here has run on a
 * GPU yet. */
#include "tuner/bench.h"
#include "core/error.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_step_reference.h"
#include "ops/hybrid/hybrid_inputs.h"
#include "ops/twell/twell.h"
#include "tuner/random_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const op_bench bench_ffn_train;

/* The parts in launch order. */
enum { PART_GATE, PART_FWD, PART_DX, PART_DW, N_PARTS };
static const char *const part_names[N_PARTS + 1] = { "gate", "fwd", "dx", "dw", NULL };
/* The dense step's forward (the gate's and fwd's baselines: 1 + 3 steps) and backward. */
static const baseline_part dense_parts[] = { { "forward", 0 }, { "backward", 4 }, { NULL, 0 } };

struct bench_case {
    sj_problem p;                  /* hybrid-ffn-dw's; fwd and dx: the same with their op */
    sj_problem gate, fwd, dx;
    twell_gate_law law;            /* X and WgT */
    crng_matrix WuT, Wd, dY;
    sj_hybrid_device H;
    hybrid_saved_u u;
    hybrid_grads g;
    sj_devptr X, WgT, WuT_d, Wd_d, dY_d, Y, dX, dWgT, dWuT, dWd, work;
    size_t work_bytes;
};

int64_t hybrid_ffn_saved_bytes(const sj_hybrid_layout *l)
{
    const size_t esz = sj_dtype_size(l->dtype);
    return (int64_t)(l->total_bytes + ((size_t)(l->rows * l->width) + (size_t)(l->backup_rows * l->cols)) * esz);
}

int64_t hybrid_ffn_dense_saved_bytes(int64_t tokens, int64_t d_ff, sj_dtype dtype)
{
    return 3 * tokens * d_ff * (int64_t)sj_dtype_size(dtype);
}

/* The parts' problems: the gate's over the same layout (tokens x d_ff over d_model), fwd's and
 * dx's the dw problem's with their op; all with its law, which their cache keys carry. */
static sj_status part_problems(const sj_problem *p, sj_problem *gate, sj_problem *fwd, sj_problem *dx)
{
    sj_hybrid_layout l;
    sj_status st = sj_hybrid_layout_init(&l, p->dtype, p->m, p->d_ff, p->twell_capacity, 0);
    if (st != SJ_OK || (st = sj_hybrid_gate_problem(&l, p->n, gate)) != SJ_OK) return st;
    gate->twell_sparsity = p->twell_sparsity;
    gate->twell_skew = p->twell_skew;
    gate->twell_dead = p->twell_dead;
    *fwd = *p;
    fwd->op = SJ_OP_HYBRID_FFN_FWD;
    *dx = *p;
    dx->op = SJ_OP_HYBRID_FFN_DX;
    return sj_problem_validate(gate);
}

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    sj_hybrid_device_free(ctx, &c->H);
    sj_devptr ptrs[] = { c->u.values, c->u.backup, c->g.dg_values, c->g.dg_backup, c->g.du_values, c->g.du_backup,
                         c->X, c->WgT, c->WuT_d, c->Wd_d, c->dY_d, c->Y, c->dX, c->dWgT, c->dWuT, c->dWd, c->work };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) sj_free(ctx, ptrs[i]);
    twell_gate_inputs_free(&c->law);
    free(c);
}

/* The gate once through the complete path, from an empty backup: H's backup then holds every
 * overflow row of these inputs. */
static sj_status place_every_row(sj_context *ctx, bench_case *c)
{
    sj_hybrid_layout l;
    sj_hybrid_report report;
    sj_status st = sj_hybrid_layout_init(&l, c->p.dtype, c->p.m, c->p.d_ff, c->p.twell_capacity, 0);
    if (st != SJ_OK || (st = sj_hybrid_device_alloc(ctx, &l, &c->H)) != SJ_OK ||
        (st = sj_hybrid_gate_complete(ctx, &c->gate, c->X, c->WgT, &c->H, &report, NULL, NULL)) != SJ_OK)
        return st;
    if (report.rows_unplaced)
        return error_set(SJ_ERR_VERIFY, "bench %s: the complete gate left %lld rows unplaced", bench_ffn_train.name,
                         (long long)report.rows_unplaced);
    return SJ_OK;
}

/* The workspace fwd's, dx's and dw's kernels share: the largest they need over H's layout. */
static sj_status shared_workspace(sj_context *ctx, bench_case *c)
{
    const sj_problem *parts[] = { &c->fwd, &c->dx, &c->p };
    c->work_bytes = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        size_t need;
        sj_status st = sj_hybrid_ffn_workspace(ctx, parts[i], &c->H.layout, &need);
        if (st != SJ_OK) return st;
        c->work_bytes = need > c->work_bytes ? need : c->work_bytes;
    }
    return sj_malloc(ctx, c->work_bytes, &c->work);
}

/* The per-pair arrays of H's layout (ELL-shaped, and backup-shaped when there is a backup) and
 * the workspace. */
static sj_status pair_buffers(sj_context *ctx, bench_case *c)
{
    const sj_hybrid_layout *l = &c->H.layout;
    const size_t ell = (size_t)(l->rows * l->width), bk = (size_t)(l->backup_rows * l->cols);
    const size_t esz = sj_dtype_size(l->dtype);
    sj_status st;
    if ((st = sj_malloc(ctx, ell * esz, &c->u.values)) != SJ_OK || (st = sj_malloc(ctx, ell * 4, &c->g.dg_values)) != SJ_OK ||
        (st = sj_malloc(ctx, ell * 4, &c->g.du_values)) != SJ_OK || (st = shared_workspace(ctx, c)) != SJ_OK)
        return st;
    if (!bk) return SJ_OK;
    if ((st = sj_malloc(ctx, bk * esz, &c->u.backup)) != SJ_OK || (st = sj_malloc(ctx, bk * 4, &c->g.dg_backup)) != SJ_OK)
        return st;
    return sj_malloc(ctx, bk * 4, &c->g.du_backup);
}

static sj_status setup(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out)
{
    *out = NULL;
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench %s: no host memory", bench_ffn_train.name);
    c->p = *p;
    const int64_t T = p->m, D = p->n, F = p->d_ff;
    const size_t osz = sj_dtype_size(p->out_dtype);
    c->WuT = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WU), F, D, NULL };
    c->Wd = (crng_matrix){ p->dtype, crng_key(seed, TWELL_STREAM_WD), F, D, NULL };
    c->dY = (crng_matrix){ p->dtype, crng_key(seed, HYBRID_STREAM_DY), T, D, NULL };
    sj_status st;
    if ((st = part_problems(p, &c->gate, &c->fwd, &c->dx)) != SJ_OK || (st = twell_gate_inputs(&c->gate, seed, &c->law)) != SJ_OK ||
        (st = twell_gate_write(ctx, &c->law, &c->X, &c->WgT, NULL)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->WuT, 0, &c->WuT_d)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->Wd, 0, &c->Wd_d)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->dY, 0, &c->dY_d)) != SJ_OK || (st = place_every_row(ctx, c)) != SJ_OK ||
        (st = pair_buffers(ctx, c)) != SJ_OK || (st = bench_output(ctx, (size_t)(T * D) * osz, &c->Y)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(T * D) * osz, &c->dX)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(F * D) * osz, &c->dWgT)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(F * D) * osz, &c->dWuT)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(F * D) * osz, &c->dWd)) != SJ_OK || (st = sj_synchronize(ctx)) != SJ_OK) {
        st = error_prefix(st, "bench %s (setup)", bench_ffn_train.name);
        teardown(ctx, c);
        return st;
    }
    *out = c;
    return SJ_OK;
}

static sj_status launch_part(sj_context *ctx, bench_case *c, int part)
{
    switch (part) {
    case PART_GATE:
        return sj_hybrid_gate(ctx, &c->gate, c->X, c->WgT, &c->H, NULL);
    case PART_FWD:
        return sj_hybrid_ffn_fwd(ctx, &c->fwd, c->X, &c->H, c->WuT_d, c->Wd_d, c->Y, c->u.values, c->u.backup, c->work,
                                 c->work_bytes, NULL);
    case PART_DX:
        return sj_hybrid_ffn_dx(ctx, &c->dx, c->dY_d, &c->H, c->u.values, c->u.backup, c->WgT, c->WuT_d, c->Wd_d, c->dX,
                                c->g.dg_values, c->g.dg_backup, c->g.du_values, c->g.du_backup, c->work, c->work_bytes,
                                NULL);
    case PART_DW:
        return sj_hybrid_ffn_dw(ctx, &c->p, c->X, c->dY_d, &c->H, c->u.values, c->u.backup, c->g.dg_values,
                                c->g.dg_backup, c->g.du_values, c->g.du_backup, c->dWgT, c->dWuT, c->dWd, c->work,
                                c->work_bytes, NULL);
    default:
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench %s: part %d: expected 0..%d", bench_ffn_train.name, part,
                         N_PARTS - 1);
    }
}

/* The activations the gate wrote, dense (tokens x d_ff): read back and validated by
 * sj_hybrid_to_dense, which refuses an unplaced row or any inconsistency. */
static sj_status gate_output(sj_context *ctx, const bench_case *c, uint16_t **A)
{
    *A = NULL;
    sj_hybrid_host h;
    sj_status st = sj_hybrid_download(ctx, &c->H, &h);
    if (st != SJ_OK) return st;
    const sj_hybrid_layout *l = &h.layout;
    if (!(*A = malloc(sizeof **A * (size_t)(l->rows * l->cols))))
        st = error_set(SJ_ERR_OUT_OF_MEMORY, "bench %s: no host memory for the gate's output", bench_ffn_train.name);
    else if ((st = sj_hybrid_to_dense(&h, *A, l->cols)) != SJ_OK)
        st = error_set(SJ_ERR_VERIFY, "bench %s: the gate wrote an invalid hybrid matrix: %s", bench_ffn_train.name,
                       sj_last_error());
    sj_hybrid_host_free(&h);
    if (st != SJ_OK) {
        free(*A);
        *A = NULL;
    }
    return st;
}

/* The sampled rows (harness_sample_row(total_rows, i), i < rows) of each of n device matrices of
 * row_bytes rows, matrix after matrix into host. */
static sj_status read_rows(sj_context *ctx, const sj_devptr *m, int n, int64_t total_rows, int rows, size_t row_bytes,
                           unsigned char *host)
{
    sj_status st = SJ_OK;
    for (int g = 0; g < n; g++)
        for (int i = 0; i < rows && st == SJ_OK; i++)
            st = sj_memcpy_dtoh(ctx, host + (size_t)(g * rows + i) * row_bytes,
                                m[g] + (sj_devptr)harness_sample_row(total_rows, i) * row_bytes, row_bytes);
    return st;
}

/* The gate's, Y's, dX's and the three gradients' sampled rows against the reference; the error
 * is the largest of the six, and one over the tolerance is SJ_ERR_VERIFY naming each. */
static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    *rel_error = INFINITY;
    const sj_problem *p = &c->p;
    const sj_dtype od = p->out_dtype;
    const int64_t T = p->m, D = p->n, F = p->d_ff;
    const size_t row_bytes = (size_t)D * sj_dtype_size(od);
    uint16_t *A, *gate;
    sj_status st = gate_output(ctx, c, &A);
    if (st != SJ_OK) return st;
    hybrid_step_inputs in = { &c->law.X, &c->law.WgT, &c->WuT, &c->Wd, &c->dY, A };
    hybrid_step_sample ref;
    if ((st = hybrid_step_reference(&in, &ref)) != SJ_OK) {
        free(A);
        return st;
    }
    /* one block: the gate's sampled rows (dtype), then Y's and dX's (out dtype), then the gradients' */
    const size_t gate_bytes = sizeof *gate * (size_t)(ref.rows * F);
    unsigned char *host = malloc(gate_bytes + row_bytes * (size_t)(2 * ref.rows + 3 * ref.units));
    unsigned char *tok = host + gate_bytes, *unit = tok + row_bytes * (size_t)(2 * ref.rows);
    gate = (uint16_t *)host;
    if (!host) st = error_set(SJ_ERR_OUT_OF_MEMORY, "bench %s: no host memory for the check", bench_ffn_train.name);
    const sj_devptr tok_out[] = { c->Y, c->dX }, unit_out[] = { c->dWgT, c->dWuT, c->dWd };
    if (st == SJ_OK && (st = read_rows(ctx, tok_out, 2, T, ref.rows, row_bytes, tok)) == SJ_OK)
        st = read_rows(ctx, unit_out, 3, F, ref.units, row_bytes, unit);
    if (st == SJ_OK) {
        for (int i = 0; i < ref.rows; i++) memcpy(gate + i * F, A + harness_sample_row(T, i) * F, sizeof *gate * (size_t)F);
        const size_t nt = (size_t)(ref.rows * D), nu = (size_t)(ref.units * D);
        const double e[6] = {
            harness_rel_error(p->dtype, gate, ref.gate, (size_t)(ref.rows * F)),
            harness_rel_error(od, tok, ref.y, nt), harness_rel_error(od, tok + nt * sj_dtype_size(od), ref.dx, nt),
            harness_rel_error(od, unit, ref.dwg, nu), harness_rel_error(od, unit + nu * sj_dtype_size(od), ref.dwu, nu),
            harness_rel_error(od, unit + 2 * nu * sj_dtype_size(od), ref.dwd, nu) };
        *rel_error = 0;
        for (int i = 0; i < 6; i++) *rel_error = e[i] > *rel_error || e[i] != e[i] ? e[i] : *rel_error;
        if (!(*rel_error <= harness_tolerance(p)))
            st = error_set(SJ_ERR_VERIFY, "bench %s: relative errors against the fp64 host reference of sampled rows: "
                           "gate %.3g, Y %.3g, dX %.3g, dWgT %.3g, dWuT %.3g, dWd %.3g; tolerance %.3g; not timed",
                           bench_ffn_train.name, e[0], e[1], e[2], e[3], e[4], e[5], harness_tolerance(p));
    }
    hybrid_step_sample_free(&ref);
    free(A);
    free(host);
    return st;
}

/* The parts' own counts: the dense gate, then fwd, dx and dw at the active pairs. */
static double flops(const sj_problem *p)
{
    sj_problem gate, fwd, dx;
    if (part_problems(p, &gate, &fwd, &dx) != SJ_OK) return NAN;
    return harness_hybrid_gate.flops(&gate) + harness_hybrid_ffn_fwd.flops(&fwd) + harness_hybrid_ffn_dx.flops(&dx) +
           harness_hybrid_ffn_dw.flops(p);
}

/* The dense step: the dense work of each part in order, as each op's own bench runs it. */
static int baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    sj_problem gate, fwd, dx;
    if (part_problems(p, &gate, &fwd, &dx) != SJ_OK) return 0;
    const struct { const harness_ops *h; const sj_problem *p; } parts[N_PARTS] = {
        { &harness_hybrid_gate, &gate }, { &harness_hybrid_ffn_fwd, &fwd }, { &harness_hybrid_ffn_dx, &dx },
        { &harness_hybrid_ffn_dw, p } };
    int n = 0;
    for (int i = 0; i < N_PARTS; i++) {
        baseline_step part[BASELINE_MAX];
        int k = parts[i].h->baseline(parts[i].p, part);
        if (k < 1 || k > BASELINE_MAX - n) return 0; /* bench_run refuses an empty baseline */
        memcpy(steps + n, part, sizeof *part * (size_t)k);
        n += k;
    }
    return n;
}

static void saved_bytes(const bench_case *c, int64_t *sparse, int64_t *dense)
{
    *sparse = hybrid_ffn_saved_bytes(&c->H.layout);
    *dense = hybrid_ffn_dense_saved_bytes(c->p.m, c->p.d_ff, c->p.dtype);
}

static const bench_ops train_ops = {
    .setup = setup,
    .check = check,
    .flops = flops,
    .baseline = baseline,
    .teardown = teardown,
    .part_names = part_names,
    .launch_part = launch_part,
    .baseline_parts = dense_parts,
    .saved_bytes = saved_bytes,
};

const op_bench bench_ffn_train = {
    .name = "ffn-train",
    .op = SJ_OP_HYBRID_FFN_DW,
    .parts = "hybrid-gate + hybrid-ffn-fwd + hybrid-ffn-dx + hybrid-ffn-dw",
    .summary = "one training step of the ReLU FFN over hybrid activations (gate, fwd, dx, dw); vs the dense step: "
               "9 cuBLAS GEMMs + 3 element-wise",
    .ops = &train_ops,
};
