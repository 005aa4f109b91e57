/* vnm_train_bench.c: bench_vnm_train, bench_vnm_train_exact and bench_vnm_train_sparse_dx, the
 * benchmarks of one training step of a V:N:M linear layer Y = W . X (W out x in, X in x T;
 * docs/training.md), which is not one op's kernel: `sparsejit bench --op vnm-train|
 * vnm-train-exact|vnm-train-sparse-dx` (and Lua's sparsejit.bench) runs, each through its entry
 * point,
 *   forward  Y = W . X           sj_vnm_spmm on W;
 *   dX       dX = W^T . dY       vnm-train: sj_vnm_spmm on WT2, the double-pruned copy of W^T
 *                                (SLoPe), which sj_vnm_double_prune builds once in setup, as a
 *                                training loop does once per weight update: not timed;
 *                                vnm-train-exact: sj_vnm_dx_exact, which writes the dense masked
 *                                W^T (vnm-transpose) and then runs the dense gemm on it at every
 *                                call: both timed, as an exact step must redo W^T after an update;
 *                                vnm-train-sparse-dx: sj_vnm_dx, the exact dX straight from W's
 *                                compressed form (vnm-dx, a candidate: slower than the exact path so far);
 *   dW       dY . X^T at W's kept slots, sj_vnm_dw into W's value layout;
 * against the dense step: three cuBLAS GEMMs of the same shapes (forward out x T over in, dX
 * in x T over out, dW out x in over T). It takes the vnm-dw problem (rows of W x cols of W x
 * tokens, V:N:M, dtype; every output in out_dtype), so --config forces dW's kernel, the last one
 * launched, whose config the row shows; the forward and dX kernels are what the request path
 * gives their vnm-spmm (or gemm) problems: tuned winners if cached, else the defaults.
 *
 * Inputs: W uniform in [-1, 1) written on the device by the counter-based generator, pruned and
 * compressed by magnitude on the device (sj_vnm_compress_device) and copied back once for the
 * check; X and dY written on the device. The check compares 16 sampled rows each of Y, dX and
 * dW (harness_sample_row) with the fp64 host reference of vnm_step_reference.c, which for
 * vnm-train is the double-pruned product's, not the exact one. FLOPs are the parts' own harness
 * counts: the two vnm-spmm (kept non-zeros only), vnm-dw's, and for vnm-train-exact the dense
 * gemm's count of dX (its transpose counts none), so its TFLOP/s is not comparable with
 * vnm-train's: compare times. Each part is also timed alone (bench_ops.launch_part); the
 * measured rows are in bench/RESULTS.md. */
#include "tuner/bench.h"
#include "core/error.h"
#include "ops/gemm/gemm.h"
#include "ops/vnm/vnm.h"
#include "ops/vnm/vnm_format.h"
#include "ops/vnm/vnm_step_reference.h"
#include "tuner/random_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const op_bench bench_vnm_train, bench_vnm_train_exact, bench_vnm_train_sparse_dx;

/* How a benchmark computes dX: the SpMM on W^T double-pruned (vnm-train), the dense gemm on the
 * masked W^T rewritten each step (vnm-train-exact), or vnm-dx (vnm-train-sparse-dx). */
typedef enum { DX_DOUBLE_PRUNED, DX_DENSE_WT, DX_SPARSE } dx_path;

/* The seed's streams of the step's inputs. */
enum { STREAM_W = 1, STREAM_X, STREAM_DY };
/* The parts in launch order. */
enum { PART_FORWARD, PART_DX, PART_DW, N_PARTS };
static const char *const part_names[N_PARTS + 1] = { "forward", "dx", "dw", NULL };

struct bench_case {
    sj_problem p;            /* vnm-dw's: m = out, n = in, k = tokens */
    dx_path path;
    vnm_dx_rule rule;        /* the reference's: double-pruned for DX_DOUBLE_PRUNED, else exact */
    sj_problem fwd, dx;      /* vnm-spmm of W (out x T over in) and of WT2 (in x T over out) */
    sj_problem dx_sparse;    /* DX_SPARSE: vnm-dx's (sj_vnm_dx_problem) */
    crng_matrix X, dY;       /* the laws of X (in x T) and dY (out x T), for check() */
    sj_vnm_host w;           /* W's compressed form, copied back for check() */
    sj_vnm_device W, WT2;    /* WT2: vnm-train only */
    sj_devptr Xd, dYd, Y, dX, dW;
    sj_devptr WT;            /* vnm-train-exact only: the dense W^T sj_vnm_dx_exact rewrites each step */
};

static const char *bench_name(dx_path path)
{
    return path == DX_DENSE_WT ? bench_vnm_train_exact.name
         : path == DX_SPARSE   ? bench_vnm_train_sparse_dx.name : bench_vnm_train.name;
}

/* The vnm-spmm problem of a rows x cols V:N:M matrix of p's dtype and V:N:M times a cols x tokens
 * operand (what sj_vnm_problem makes for its layout). */
static void spmm_problem(const sj_problem *p, int64_t rows, int64_t cols, sj_problem *out)
{
    sj_problem_init(out, SJ_OP_VNM_SPMM, p->dtype, rows, p->k, cols);
    out->out_dtype = p->out_dtype;
    out->vnm_v = p->vnm_v;
    out->vnm_n = p->vnm_n;
    out->vnm_m = p->vnm_m;
}

static void teardown(sj_context *ctx, bench_case *c)
{
    if (!c) return;
    sj_vnm_device_free(ctx, &c->W);
    sj_vnm_device_free(ctx, &c->WT2);
    sj_devptr ptrs[] = { c->Xd, c->dYd, c->Y, c->dX, c->dW, c->WT };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) sj_free(ctx, ptrs[i]);
    sj_vnm_host_free(&c->w);
    free(c);
}

/* W (out x in) generated dense on the device, compressed there by magnitude, and its compressed
 * form copied back for the check; the dense W is freed before anything else is allocated. */
static sj_status weights(sj_context *ctx, bench_case *c, uint64_t seed)
{
    const sj_problem *p = &c->p;
    const crng_matrix law = { p->dtype, crng_key(seed, STREAM_W), p->m, p->n, NULL };
    sj_vnm_layout l;
    sj_devptr dense = 0;
    sj_status st;
    if ((st = sj_vnm_layout_init(&l, p->dtype, p->vnm_v, p->vnm_n, p->vnm_m, p->m, p->n)) == SJ_OK &&
        (st = random_device_matrix(ctx, &law, 0, &dense)) == SJ_OK)
        st = sj_vnm_compress_device(ctx, &l, dense, p->n, SJ_VNM_PRUNE_L2, &c->W, NULL);
    if (dense) sj_free(ctx, dense);
    if (st == SJ_OK) st = sj_vnm_download(ctx, &c->W, &c->w);
    return st;
}

/* WT2 from W, once: what a training loop does after each weight update. */
static sj_status double_prune(sj_context *ctx, bench_case *c)
{
    size_t work_bytes;
    sj_devptr work = 0;
    sj_vnm_device *t = &c->WT2;
    sj_status st;
    if ((st = sj_vnm_transpose_layout(&c->W.layout, &t->layout)) != SJ_OK ||
        (st = sj_vnm_double_prune_workspace(&c->W.layout, &work_bytes)) != SJ_OK ||
        (st = sj_malloc(ctx, t->layout.values_bytes, &t->values)) != SJ_OK ||
        (st = sj_malloc(ctx, t->layout.meta_bytes, &t->meta)) != SJ_OK ||
        (st = sj_malloc(ctx, t->layout.index_bytes, &t->index)) != SJ_OK ||
        (st = sj_malloc(ctx, work_bytes, &work)) != SJ_OK ||
        (st = sj_vnm_double_prune(ctx, &c->W, t, work, work_bytes, NULL)) != SJ_OK)
        goto done;
    st = sj_synchronize(ctx);
done:
    if (work) sj_free(ctx, work);
    return st;
}

/* What dX's path needs beyond the common buffers: the dense W^T, the double-pruned WT2, or
 * vnm-dx's problem. */
static sj_status dx_setup(sj_context *ctx, bench_case *c)
{
    switch (c->path) {
    case DX_DENSE_WT:
        return sj_malloc(ctx, (size_t)(c->p.m * c->p.n) * 2, &c->WT);
    case DX_SPARSE:
        return sj_vnm_dx_problem(&c->W.layout, c->p.k, c->p.out_dtype, &c->dx_sparse);
    default:
        return double_prune(ctx, c);
    }
}

static sj_status setup(sj_context *ctx, const sj_problem *p, uint64_t seed, dx_path path, bench_case **out)
{
    *out = NULL;
    bench_case *c = calloc(1, sizeof *c);
    if (!c) return error_set(SJ_ERR_OUT_OF_MEMORY, "bench %s: no host memory", bench_name(path));
    c->p = *p;
    c->path = path;
    c->rule = path == DX_DOUBLE_PRUNED ? VNM_DX_DOUBLE_PRUNED : VNM_DX_EXACT;
    const int64_t rows = p->m, cols = p->n, tokens = p->k;
    const size_t osz = sj_dtype_size(p->out_dtype);
    spmm_problem(p, rows, cols, &c->fwd);
    spmm_problem(p, cols, rows, &c->dx);
    c->X = (crng_matrix){ p->dtype, crng_key(seed, STREAM_X), cols, tokens, NULL };
    c->dY = (crng_matrix){ p->dtype, crng_key(seed, STREAM_DY), rows, tokens, NULL };
    sj_status st;
    if ((st = weights(ctx, c, seed)) != SJ_OK || (st = random_device_matrix(ctx, &c->X, 0, &c->Xd)) != SJ_OK ||
        (st = random_device_matrix(ctx, &c->dY, 0, &c->dYd)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(rows * tokens) * osz, &c->Y)) != SJ_OK ||
        (st = bench_output(ctx, (size_t)(cols * tokens) * osz, &c->dX)) != SJ_OK ||
        (st = bench_output(ctx, c->W.layout.values_bytes / 2 * osz, &c->dW)) != SJ_OK ||
        (st = dx_setup(ctx, c)) != SJ_OK || (st = sj_synchronize(ctx)) != SJ_OK) {
        st = error_prefix(st, "bench %s (setup)", bench_name(path));
        teardown(ctx, c);
        return st;
    }
    *out = c;
    return SJ_OK;
}

static sj_status setup_double_pruned(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out)
{
    return setup(ctx, p, seed, DX_DOUBLE_PRUNED, out);
}

static sj_status setup_exact(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out)
{
    return setup(ctx, p, seed, DX_DENSE_WT, out);
}

static sj_status setup_sparse_dx(sj_context *ctx, const sj_problem *p, uint64_t seed, bench_case **out)
{
    return setup(ctx, p, seed, DX_SPARSE, out);
}

static sj_status launch_part(sj_context *ctx, bench_case *c, int part)
{
    switch (part) {
    case PART_FORWARD:
        return sj_vnm_spmm(ctx, &c->fwd, &c->W, c->Xd, c->Y, 1.0f, 0.0f, NULL);
    case PART_DX:
        if (c->path == DX_DENSE_WT) return sj_vnm_dx_exact(ctx, &c->W, c->WT, c->dYd, c->dX, c->p.k, c->p.out_dtype, NULL);
        if (c->path == DX_SPARSE) return sj_vnm_dx(ctx, &c->dx_sparse, &c->W, c->dYd, c->dX, NULL);
        return sj_vnm_spmm(ctx, &c->dx, &c->WT2, c->dYd, c->dX, 1.0f, 0.0f, NULL);
    case PART_DW:
        return sj_vnm_dw(ctx, &c->p, &c->W, c->dYd, c->Xd, c->dW, NULL);
    default:
        return error_set(SJ_ERR_INVALID_ARGUMENT, "bench %s: part %d: expected 0..%d", bench_name(c->path), part, N_PARTS - 1);
    }
}

/* dW's slots of W's row r, in the reference's order (2g + h for the real groups g), copied from
 * the device through the one fragment tile of 16 rows that holds them (tile: its bytes). */
static sj_status dw_row(sj_context *ctx, const bench_case *c, int64_t r, unsigned char *tile, unsigned char *out)
{
    const sj_vnm_layout *l = &c->W.layout;
    const size_t esz = sj_dtype_size(c->p.out_dtype), first = vnm_value_at(l, r / 16 * 16, 0, 0);
    sj_status st = sj_memcpy_dtoh(ctx, tile, c->dW + first * esz, (size_t)l->k_tiles * 256 * esz);
    for (int64_t g = 0; st == SJ_OK && g < l->groups; g++)
        for (int h = 0; h < 2; h++) memcpy(out + (size_t)(2 * g + h) * esz, tile + (vnm_value_at(l, r, g, h) - first) * esz, esz);
    return st;
}

/* Y's, dX's and dW's sampled rows against the reference; the error is the largest of the three,
 * and one over the tolerance is SJ_ERR_VERIFY naming each. */
static sj_status check(sj_context *ctx, bench_case *c, double *rel_error)
{
    *rel_error = INFINITY;
    const sj_vnm_layout *l = &c->W.layout;
    const sj_dtype od = c->p.out_dtype;
    const size_t esz = sj_dtype_size(od), row_bytes = (size_t)c->p.k * esz;
    vnm_step_sample ref;
    sj_status st = vnm_step_reference(&c->w, &c->X, &c->dY, c->rule, &ref);
    if (st != SJ_OK) return st;
    unsigned char *y = malloc(row_bytes * (size_t)ref.y_rows), *dx = malloc(row_bytes * (size_t)ref.dx_rows);
    unsigned char *dw = malloc(esz * (size_t)(ref.y_rows * ref.dw_slots)), *tile = malloc((size_t)l->k_tiles * 256 * esz);
    if (!y || !dx || !dw || !tile) st = error_set(SJ_ERR_OUT_OF_MEMORY, "bench %s: no host memory for the check", bench_name(c->path));
    for (int i = 0; i < ref.y_rows && st == SJ_OK; i++) {
        int64_t r = harness_sample_row(l->rows, i);
        if ((st = sj_memcpy_dtoh(ctx, y + (size_t)i * row_bytes, c->Y + (sj_devptr)r * row_bytes, row_bytes)) == SJ_OK)
            st = dw_row(ctx, c, r, tile, dw + (size_t)(i * ref.dw_slots) * esz);
    }
    for (int j = 0; j < ref.dx_rows && st == SJ_OK; j++)
        st = sj_memcpy_dtoh(ctx, dx + (size_t)j * row_bytes, c->dX + (sj_devptr)harness_sample_row(l->cols, j) * row_bytes,
                            row_bytes);
    if (st == SJ_OK) {
        double e_y = harness_rel_error(od, y, ref.y, (size_t)(ref.y_rows * ref.tokens));
        double e_dx = harness_rel_error(od, dx, ref.dx, (size_t)(ref.dx_rows * ref.tokens));
        double e_dw = harness_rel_error(od, dw, ref.dw, (size_t)(ref.y_rows * ref.dw_slots));
        *rel_error = e_y > e_dx ? e_y : e_dx;
        if (e_dw > *rel_error) *rel_error = e_dw;
        if (!(*rel_error <= harness_tolerance(&c->p)))
            st = error_set(SJ_ERR_VERIFY, "bench %s: relative errors against the fp64 host reference of sampled rows: "
                           "Y %.3g, dX (%s) %.3g, dW %.3g; tolerance %.3g; not timed", bench_name(c->path), e_y,
                           c->rule == VNM_DX_EXACT ? "exact" : "double-pruned", e_dx, e_dw, harness_tolerance(&c->p));
    }
    vnm_step_sample_free(&ref);
    free(y);
    free(dx);
    free(dw);
    free(tile);
    return st;
}

/* The forward's and dW's counts, which both benchmarks share. */
static double forward_and_dw_flops(const sj_problem *p)
{
    sj_problem fwd;
    spmm_problem(p, p->m, p->n, &fwd);
    return harness_vnm.flops(&fwd) + harness_vnm_dw.flops(p);
}

/* dX on WT2: vnm-spmm's count (its kept non-zeros). */
static double flops_double_pruned(const sj_problem *p)
{
    sj_problem dx;
    spmm_problem(p, p->n, p->m, &dx);
    return forward_and_dw_flops(p) + harness_vnm.flops(&dx);
}

/* dX on the dense W^T: gemm's count, in x T over out. */
static double flops_exact(const sj_problem *p)
{
    sj_problem dx;
    sj_problem_init(&dx, SJ_OP_GEMM, p->dtype, p->n, p->k, p->m);
    return forward_and_dw_flops(p) + harness_gemm.flops(&dx);
}

/* dX by vnm-dx: its count (the kept non-zeros, as the SpMMs'). */
static double flops_sparse_dx(const sj_problem *p)
{
    sj_problem dx = *p;
    dx.op = SJ_OP_VNM_DX;
    return forward_and_dw_flops(p) + harness_vnm_dx.flops(&dx);
}

/* The dense step: Y = W . X (out x T over in), dX = W^T . dY (in x T over out), dW = dY . X^T
 * (out x in over T). */
static int baseline(const sj_problem *p, baseline_step steps[BASELINE_MAX])
{
    steps[0] = (baseline_step){ BASELINE_GEMM, p->m, p->k, p->n };
    steps[1] = (baseline_step){ BASELINE_GEMM, p->n, p->k, p->m };
    steps[2] = (baseline_step){ BASELINE_GEMM, p->m, p->n, p->k };
    return 3;
}

static const bench_ops double_pruned_ops = {
    .setup = setup_double_pruned,
    .check = check,
    .flops = flops_double_pruned,
    .baseline = baseline,
    .teardown = teardown,
    .part_names = part_names,
    .launch_part = launch_part,
};

static const bench_ops exact_ops = {
    .setup = setup_exact,
    .check = check,
    .flops = flops_exact,
    .baseline = baseline,
    .teardown = teardown,
    .part_names = part_names,
    .launch_part = launch_part,
};

static const bench_ops sparse_dx_ops = {
    .setup = setup_sparse_dx,
    .check = check,
    .flops = flops_sparse_dx,
    .baseline = baseline,
    .teardown = teardown,
    .part_names = part_names,
    .launch_part = launch_part,
};

const op_bench bench_vnm_train = {
    .name = "vnm-train",
    .op = SJ_OP_VNM_DW,
    .parts = "vnm-spmm + vnm-dw",
    .summary = "forward, dX on W^T double-pruned in setup (untimed), dW; vs 3 cuBLAS GEMMs of the step",
    .ops = &double_pruned_ops,
};

const op_bench bench_vnm_train_exact = {
    .name = "vnm-train-exact",
    .op = SJ_OP_VNM_DW,
    .parts = "vnm-spmm + gemm + vnm-dw",
    .summary = "forward, exact dX (W^T rewritten each step, then gemm: both timed), dW; vs the same 3 GEMMs",
    .ops = &exact_ops,
};

const op_bench bench_vnm_train_sparse_dx = {
    .name = "vnm-train-sparse-dx",
    .op = SJ_OP_VNM_DW,
    .parts = "vnm-spmm + vnm-dx + vnm-dw",
    .summary = "forward, exact dX from W's compressed form (vnm-dx, a candidate), dW; vs the same 3 GEMMs",
    .ops = &sparse_dx_ops,
};
