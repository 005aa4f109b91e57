/* test_bench.c: the one benchmark path without a GPU. The benchmarks beside the op table
 * (core/op.h's op_bench) and every op's harness say what they time and against what; the FLOPs
 * a bench reports are the tuner's for every op (and, for the FFN block, its parts' sum), against
 * formulas written here on random shapes (the V:N:M training step's: its parts' counts);
 * bench_run and sj_bench refuse what they cannot run
 * and name it; the sampled rows of a bench's check; the baseline's element-wise kernel
 * (templates/ewise_product.lua) generates and compiles for sm_80 and sm_90a into 16-byte loads
 * and stores with no tensor-core work. */
#include "test_util.h"
#include "core/op.h"
#include "generator/nvrtc.h"
#include "runtime/runtime.h"
#include "tuner/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

/* A uniform integer in lo..hi. */
static int64_t pick(int64_t lo, int64_t hi)
{
    return lo + (int64_t)((tu_uniform(&rng) + 1.0) * 0.5 * (double)(hi - lo + 1)) % (hi - lo + 1);
}

/* A step of a baseline with the sizes it needs. */
static void expect_step(const char *who, const baseline_step *s)
{
    if (s->kind != BASELINE_GEMM && s->kind != BASELINE_PRODUCT && s->kind != BASELINE_RELU_PRODUCT)
        fail_msg("%s: a baseline step of kind %d", who, (int)s->kind);
    if (s->m < 1 || s->n < 1 || (s->kind == BASELINE_GEMM && s->k < 1))
        fail_msg("%s: a baseline step of %lld x %lld x %lld", who, (long long)s->m, (long long)s->n, (long long)s->k);
}

static void expect_step_is(const baseline_step *s, baseline_kind kind, int64_t m, int64_t n, int64_t k)
{
    assert_int_equal(s->kind, kind);
    assert_int_equal(s->m, m);
    assert_int_equal(s->n, n);
    if (kind == BASELINE_GEMM) assert_int_equal(s->k, k);
}

static void test_benchmarks_beside_the_op_table(void **state)
{
    assert_true(op_bench_count() > 0);
    assert_null(op_bench_at(-1));
    assert_null(op_bench_at(op_bench_count()));
    for (int i = 0; i < op_bench_count(); i++) {
        const op_bench *b = op_bench_at(i);
        assert_non_null(b);
        assert_non_null(b->name);
        if (op_find_name(b->name)) fail_msg("benchmark %s has an op's name: --op would be ambiguous", b->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(op_bench_at(j)->name, b->name)) fail_msg("two benchmarks named %s", b->name);
        assert_ptr_equal(op_bench_find_name(b->name), b);
        if (!strstr(op_bench_names(), b->name)) fail_msg("op_bench_names() '%s' lacks %s", op_bench_names(), b->name);
        const op_desc *d = op_find(b->op);
        if (!d || !d->harness) fail_msg("benchmark %s takes a problem of op %d, which has no harness", b->name, (int)b->op);
        assert_non_null(b->summary);
        assert_non_null(b->parts);
        /* every part is a tunable op: what `tune` is told to tune instead */
        char parts[128];
        snprintf(parts, sizeof parts, "%s", b->parts);
        int n_parts = 0;
        for (char *save = NULL, *part = strtok_r(parts, " +", &save); part; part = strtok_r(NULL, " +", &save), n_parts++)
            if (!op_find_name(part) || !op_find_name(part)->harness) fail_msg("benchmark %s: part '%s' is no tunable op", b->name, part);
        assert_true(n_parts >= 2);
        const bench_ops *o = b->ops;
        assert_true(o && o->setup && (o->launch || o->launch_part) && o->check && o->flops && o->baseline && o->teardown);
        /* parts timed alone: both hooks or neither, and a name for each */
        assert_int_equal(o->launch_part != NULL, o->part_names != NULL);
        int named = 0;
        while (o->part_names && named < BENCH_MAX_PARTS && o->part_names[named]) named++;
        if (o->part_names && (named < 2 || o->part_names[named])) fail_msg("benchmark %s: %d part names, not NULL-terminated within %d", b->name, named, BENCH_MAX_PARTS);
        sj_problem p;
        d->example(&p);
        baseline_step steps[BASELINE_MAX];
        int n = o->baseline(&p, steps);
        assert_true(n >= 1 && n <= BASELINE_MAX);
        for (int s = 0; s < n; s++) expect_step(b->name, &steps[s]);
        assert_true(o->flops(&p) > 0);
        /* the baseline's parts: named, the first at step 0, the others rising within it */
        for (int i = 0; o->baseline_parts && o->baseline_parts[i].name; i++) {
            assert_true(i < BENCH_MAX_PARTS);
            if (i == 0) assert_int_equal(o->baseline_parts[i].first, 0);
            else assert_true(o->baseline_parts[i].first > o->baseline_parts[i - 1].first && o->baseline_parts[i].first < n);
        }
    }
    const op_bench *block = op_bench_find_name("twell-ffn-block");
    assert_non_null(block);
    assert_int_equal(block->op, SJ_OP_TWELL_FFN);
    assert_string_equal(block->parts, "twell-gate + twell-ffn");
    assert_null(block->ops->launch_part);
    /* a V:N:M layer's training step, double-pruned, exact (dense W^T) or sparse exact dX: the
     * vnm-dw problem, forward, dX and dW each timed alone too */
    const char *steps[] = { "vnm-train", "vnm-train-exact", "vnm-train-sparse-dx" };
    const char *parts[] = { "vnm-spmm + vnm-dw", "vnm-spmm + gemm + vnm-dw", "vnm-spmm + vnm-dx + vnm-dw" };
    for (int i = 0; i < 3; i++) {
        const op_bench *step = op_bench_find_name(steps[i]);
        assert_non_null(step);
        assert_int_equal(step->op, SJ_OP_VNM_DW);
        assert_string_equal(step->parts, parts[i]);
        assert_non_null(step->ops->launch_part);
        assert_string_equal(step->ops->part_names[0], "forward");
        assert_string_equal(step->ops->part_names[1], "dx");
        assert_string_equal(step->ops->part_names[2], "dw");
        assert_null(step->ops->part_names[3]);
    }
    /* the FFN block's training step over hybrid activations: the hybrid-ffn-dw problem, its four
     * parts timed alone, the dense forward and backward too, and its activations counted */
    const op_bench *train = op_bench_find_name("ffn-train");
    assert_non_null(train);
    assert_int_equal(train->op, SJ_OP_HYBRID_FFN_DW);
    assert_string_equal(train->parts, "hybrid-gate + hybrid-ffn-fwd + hybrid-ffn-dx + hybrid-ffn-dw");
    const char *train_parts[] = { "gate", "fwd", "dx", "dw" };
    for (int i = 0; i < 4; i++) assert_string_equal(train->ops->part_names[i], train_parts[i]);
    assert_null(train->ops->part_names[4]);
    assert_string_equal(train->ops->baseline_parts[0].name, "forward");
    assert_string_equal(train->ops->baseline_parts[1].name, "backward");
    assert_null(train->ops->baseline_parts[2].name);
    assert_non_null(train->ops->saved_bytes);
    assert_null(op_bench_find_name("twell-ffn"));
    assert_null(op_bench_find_name(NULL));

    /* every op with a harness says what it is benched against, and is tunable */
    for (int i = 0; i < op_count(); i++) {
        const op_desc *d = op_at(i);
        int listed = 0;
        char names[256];
        snprintf(names, sizeof names, "%s", op_tunable_names());
        for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save))
            listed |= !strcmp(name, d->name);
        if (listed != (d->harness != NULL)) fail_msg("op_tunable_names() '%s' and %s's harness disagree", op_tunable_names(), d->name);
        if (!d->harness) {
            assert_null(d->baseline_help);
            continue;
        }
        assert_non_null(d->baseline_help);
        assert_non_null(d->harness->baseline);
        sj_problem p;
        d->example(&p);
        baseline_step steps[BASELINE_MAX];
        int n = d->harness->baseline(&p, steps);
        assert_true(n >= 1 && n <= BASELINE_MAX);
        for (int s = 0; s < n; s++) expect_step(d->name, &steps[s]);
    }
}

/* What each baseline runs: the dense GEMM of the op's shape; for twell-ffn the products it
 * fuses; for the block the whole dense FFN. */
static void test_baselines(void **state)
{
    for (int rep = 0; rep < 20; rep++) {
        int64_t m = pick(1, 9000), d = 8 * pick(1, 1024), f = pick(1, 30000);
        baseline_step s[BASELINE_MAX];
        sj_problem p;
        sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, m, f, d);
        assert_int_equal(op_find(SJ_OP_GEMM)->harness->baseline(&p, s), 1);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);
        p.op = SJ_OP_TWELL_GATE;
        assert_int_equal(op_find(SJ_OP_TWELL_GATE)->harness->baseline(&p, s), 1);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);
        sj_problem_init(&p, SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, m, d, d);
        p.d_ff = f;
        assert_int_equal(op_find(SJ_OP_TWELL_FFN)->harness->baseline(&p, s), 3);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);     /* up */
        expect_step_is(&s[1], BASELINE_PRODUCT, m, f, 0);  /* H (.) up */
        expect_step_is(&s[2], BASELINE_GEMM, m, d, f);     /* down */
        assert_int_equal(op_bench_find_name("twell-ffn-block")->ops->baseline(&p, s), 4);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);     /* gate */
        expect_step_is(&s[1], BASELINE_GEMM, m, f, d);     /* up */
        expect_step_is(&s[2], BASELINE_RELU_PRODUCT, m, f, 0);
        expect_step_is(&s[3], BASELINE_GEMM, m, d, f);     /* down */
        /* the hybrid FFN's dense backward through the activations: dH, dU, dG, dX's two GEMMs */
        sj_problem_init(&p, SJ_OP_HYBRID_FFN_DX, SJ_DTYPE_BF16, m, d, d);
        p.d_ff = f, p.twell_tile = (int)f, p.twell_capacity = 1, p.twell_sparsity = 0.99;
        assert_int_equal(op_find(SJ_OP_HYBRID_FFN_DX)->harness->baseline(&p, s), 5);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);         /* dH = dY . Wd^T */
        expect_step_is(&s[1], BASELINE_RELU_PRODUCT, m, f, 0); /* dU = relu(G) (.) dH */
        expect_step_is(&s[2], BASELINE_PRODUCT, m, f, 0);      /* dG = dH (.) U, masked */
        expect_step_is(&s[3], BASELINE_GEMM, m, d, f);         /* dG . Wg^T */
        expect_step_is(&s[4], BASELINE_GEMM, m, d, f);         /* dU . Wu^T */
        /* the whole dense step of the FFN block: forward (4 steps, the first baseline part),
         * backward (8) */
        p.op = SJ_OP_HYBRID_FFN_DW;
        assert_int_equal(op_bench_find_name("ffn-train")->ops->baseline(&p, s), 12);
        assert_int_equal(op_bench_find_name("ffn-train")->ops->baseline_parts[1].first, 4);
        expect_step_is(&s[0], BASELINE_GEMM, m, f, d);          /* G = X . Wg */
        expect_step_is(&s[1], BASELINE_GEMM, m, f, d);          /* U = X . Wu */
        expect_step_is(&s[2], BASELINE_RELU_PRODUCT, m, f, 0);  /* H = relu(G) (.) U */
        expect_step_is(&s[3], BASELINE_GEMM, m, d, f);          /* Y = H . Wd */
        expect_step_is(&s[4], BASELINE_GEMM, m, f, d);          /* dH */
        expect_step_is(&s[5], BASELINE_RELU_PRODUCT, m, f, 0);  /* dU */
        expect_step_is(&s[6], BASELINE_PRODUCT, m, f, 0);       /* dG */
        expect_step_is(&s[7], BASELINE_GEMM, m, d, f);          /* dX, twice */
        expect_step_is(&s[8], BASELINE_GEMM, m, d, f);
        expect_step_is(&s[9], BASELINE_GEMM, d, f, m);          /* dWg, dWu: d_model x d_ff over T */
        expect_step_is(&s[10], BASELINE_GEMM, d, f, m);
        expect_step_is(&s[11], BASELINE_GEMM, f, d, m);         /* dWd: d_ff x d_model over T */
        /* the dense training step of W (out x in = m x f) over d tokens, either dX */
        sj_problem_init(&p, SJ_OP_VNM_DW, SJ_DTYPE_F16, m, f, d);
        p.vnm_v = 128, p.vnm_n = 2, p.vnm_m = 8;
        const char *steps[] = { "vnm-train", "vnm-train-exact", "vnm-train-sparse-dx" };
        for (int i = 0; i < 3; i++) {
            assert_int_equal(op_bench_find_name(steps[i])->ops->baseline(&p, s), 3);
            expect_step_is(&s[0], BASELINE_GEMM, m, d, f); /* Y = W . X: out x T over in */
            expect_step_is(&s[1], BASELINE_GEMM, f, d, m); /* dX = W^T . dY: in x T over out */
            expect_step_is(&s[2], BASELINE_GEMM, m, f, d); /* dW = dY . X^T: out x in over T */
        }
    }
}

static void expect_near(const char *what, double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fabs(want))) fail_msg("%s: %.17g FLOPs, expected %.17g", what, got, want);
}

/* The FLOPs bench reports are the tuner's (the op's harness) and the formulas below. */
static void test_flops_agree_between_tuner_and_bench(void **state)
{
    for (int rep = 0; rep < 50; rep++) {
        int64_t m = pick(64, 16384), d = 8 * pick(8, 1024), f = pick(256, 30000);
        double s = 0.5 + 0.499 * (tu_uniform(&rng) + 1.0) * 0.5, flops;
        sj_problem p;

        sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, m, f, d);
        SJ_ASSERT_OK(bench_flops("gemm", &p, &flops));
        expect_near("gemm", flops, 2.0 * m * f * d);
        expect_near("gemm (tuner)", op_find(SJ_OP_GEMM)->harness->flops(&p), flops);

        sj_problem_init(&p, SJ_OP_VNM_SPMM, SJ_DTYPE_F16, m, 8 * pick(1, 512), d);
        p.vnm_v = 64, p.vnm_n = 2, p.vnm_m = (int)(4 << pick(0, 3));
        SJ_ASSERT_OK(bench_flops("vnm-spmm", &p, &flops));
        expect_near("vnm-spmm", flops, 2.0 * p.m * p.n * p.k * 2.0 / p.vnm_m);
        expect_near("vnm-spmm (tuner)", op_find(SJ_OP_VNM_SPMM)->harness->flops(&p), flops);
        /* with a low-rank term: its r columns count densely */
        p.lowrank_rank = 8 * (int)pick(1, 16);
        SJ_ASSERT_OK(bench_flops("vnm-spmm", &p, &flops));
        expect_near("vnm-spmm + U.Z", flops, 2.0 * p.m * p.n * (p.k * 2.0 / p.vnm_m + p.lowrank_rank));
        expect_near("vnm-spmm + U.Z (tuner)", op_find(SJ_OP_VNM_SPMM)->harness->flops(&p), flops);
        baseline_step steps[BASELINE_MAX];
        assert_int_equal(op_find(SJ_OP_VNM_SPMM)->harness->baseline(&p, steps), 2);
        assert_true(steps[1].kind == BASELINE_GEMM && steps[1].m == p.m && steps[1].n == p.n &&
                    steps[1].k == p.lowrank_rank);

        /* the sampled dW: the kept 2 of every M columns of W (m x n) over k tokens */
        sj_problem_init(&p, SJ_OP_VNM_DW, SJ_DTYPE_BF16, m, f, d);
        p.vnm_v = 128, p.vnm_n = 2, p.vnm_m = (int)(4 << pick(0, 3));
        SJ_ASSERT_OK(bench_flops("vnm-dw", &p, &flops));
        expect_near("vnm-dw", flops, 2.0 * p.m * p.n * p.k * 2.0 / p.vnm_m);
        expect_near("vnm-dw (tuner)", op_find(SJ_OP_VNM_DW)->harness->flops(&p), flops);

        /* the exact dX from W's compressed form: W's kept values (m x n, 2 of every M) over k
         * tokens; its baseline is the dense W^T . dY, n x k over m */
        p.op = SJ_OP_VNM_DX;
        SJ_ASSERT_OK(bench_flops("vnm-dx", &p, &flops));
        expect_near("vnm-dx", flops, 2.0 * p.m * p.n * p.k * 2.0 / p.vnm_m);
        expect_near("vnm-dx (tuner)", op_find(SJ_OP_VNM_DX)->harness->flops(&p), flops);
        baseline_step dx_steps[BASELINE_MAX];
        assert_int_equal(op_find(SJ_OP_VNM_DX)->harness->baseline(&p, dx_steps), 1);
        assert_true(dx_steps[0].kind == BASELINE_GEMM && dx_steps[0].m == p.n && dx_steps[0].n == p.k && dx_steps[0].k == p.m);

        sj_problem_init(&p, SJ_OP_TWELL_GATE, SJ_DTYPE_BF16, m, f, d);
        p.twell_tile = 128, p.twell_capacity = 16, p.twell_sparsity = s;
        SJ_ASSERT_OK(bench_flops("twell-gate", &p, &flops));
        expect_near("twell-gate", flops, 2.0 * m * f * d);
        expect_near("twell-gate (tuner)", op_find(SJ_OP_TWELL_GATE)->harness->flops(&p), flops);

        /* the hybrid gate: the whole dense gate is computed, only its writes are sparse */
        sj_problem_init(&p, SJ_OP_HYBRID_GATE, SJ_DTYPE_BF16, m, f, d);
        p.twell_tile = (int)f, p.twell_capacity = 128, p.twell_sparsity = s;
        SJ_ASSERT_OK(bench_flops("hybrid-gate", &p, &flops));
        expect_near("hybrid-gate", flops, 2.0 * m * f * d);
        expect_near("hybrid-gate (tuner)", op_find(SJ_OP_HYBRID_GATE)->harness->flops(&p), flops);

        /* the hybrid FFN's forward (up and down) and activations' backward (dh, dX's two
         * products) at the active pairs only */
        sj_problem_init(&p, SJ_OP_HYBRID_FFN_FWD, SJ_DTYPE_BF16, m, d, d);
        p.d_ff = f, p.twell_tile = (int)f, p.twell_capacity = 128, p.twell_sparsity = s;
        SJ_ASSERT_OK(bench_flops("hybrid-ffn-fwd", &p, &flops));
        expect_near("hybrid-ffn-fwd", flops, 4.0 * m * d * f * (1.0 - s));
        expect_near("hybrid-ffn-fwd (tuner)", op_find(SJ_OP_HYBRID_FFN_FWD)->harness->flops(&p), flops);
        p.op = SJ_OP_HYBRID_FFN_DX;
        SJ_ASSERT_OK(bench_flops("hybrid-ffn-dx", &p, &flops));
        expect_near("hybrid-ffn-dx", flops, 6.0 * m * d * f * (1.0 - s));
        expect_near("hybrid-ffn-dx (tuner)", op_find(SJ_OP_HYBRID_FFN_DX)->harness->flops(&p), flops);
        /* the three weight gradients at the active pairs */
        p.op = SJ_OP_HYBRID_FFN_DW;
        SJ_ASSERT_OK(bench_flops("hybrid-ffn-dw", &p, &flops));
        expect_near("hybrid-ffn-dw", flops, 6.0 * m * d * f * (1.0 - s));
        expect_near("hybrid-ffn-dw (tuner)", op_find(SJ_OP_HYBRID_FFN_DW)->harness->flops(&p), flops);

        /* the fused FFN alone: up and down at the active units only, as the tuner counts */
        sj_problem_init(&p, SJ_OP_TWELL_FFN, SJ_DTYPE_BF16, m, d, d);
        p.d_ff = f, p.twell_tile = 128, p.twell_capacity = 16, p.twell_sparsity = s;
        double ffn;
        SJ_ASSERT_OK(bench_flops("twell-ffn", &p, &ffn));
        expect_near("twell-ffn", ffn, 4.0 * m * d * f * (1.0 - s));
        expect_near("twell-ffn (tuner)", op_find(SJ_OP_TWELL_FFN)->harness->flops(&p), ffn);

        /* the block: the dense gate plus that */
        SJ_ASSERT_OK(bench_flops("twell-ffn-block", &p, &flops));
        expect_near("twell-ffn-block", flops, 2.0 * m * f * d + 4.0 * m * d * f * (1.0 - s));
        expect_near("twell-ffn-block = gate + ffn", flops, 2.0 * m * f * d + ffn);

        /* a V:N:M layer's step (W m x f over d tokens): the forward and dW at the kept non-zeros,
         * dX too when double-pruned, and as the dense gemm when exact */
        sj_problem_init(&p, SJ_OP_VNM_DW, SJ_DTYPE_BF16, m, f, d);
        p.vnm_v = 128, p.vnm_n = 2, p.vnm_m = (int)(4 << pick(0, 3));
        double sparse = 2.0 * m * f * d * 2.0 / p.vnm_m;
        SJ_ASSERT_OK(bench_flops("vnm-train", &p, &flops));
        expect_near("vnm-train", flops, 3.0 * sparse);
        SJ_ASSERT_OK(bench_flops("vnm-train-exact", &p, &flops));
        expect_near("vnm-train-exact", flops, 2.0 * sparse + 2.0 * m * f * d);
        SJ_ASSERT_OK(bench_flops("vnm-train-sparse-dx", &p, &flops));
        expect_near("vnm-train-sparse-dx", flops, 3.0 * sparse);

        /* the FFN block's training step over hybrid activations: the dense gate, then the forward
         * (4 D a pair), dx (6 D) and dw (6 D) at the active pairs */
        sj_problem_init(&p, SJ_OP_HYBRID_FFN_DW, SJ_DTYPE_BF16, m, d, d);
        p.d_ff = f, p.twell_tile = (int)f, p.twell_capacity = 128, p.twell_sparsity = s;
        SJ_ASSERT_OK(bench_flops("ffn-train", &p, &flops));
        expect_near("ffn-train", flops, 2.0 * m * f * d + 16.0 * m * d * f * (1.0 - s));
    }
    sj_problem p;
    sj_problem_init(&p, SJ_OP_GEMM, SJ_DTYPE_F16, 64, 64, 64);
    double flops;
    SJ_ASSERT_STATUS(bench_flops("nope", &p, &flops), SJ_ERR_INVALID_ARGUMENT, "'nope' is not an op or a benchmark");
    SJ_ASSERT_STATUS(bench_flops("vnm-compress", &p, &flops), SJ_ERR_INVALID_ARGUMENT, "twell-ffn-block");
}

static void test_bench_refuses_what_it_cannot_run(void **state)
{
    sj_context *ctx = tu_compile_context("sm_90a");
    assert_non_null(ctx);
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    bench_options o;
    bench_options_init(&o);
    bench_result r;
    sj_problem ffn, gemm;
    sj_problem_init(&ffn, SJ_OP_TWELL_FFN, SJ_DTYPE_F16, 64, 256, 256);
    ffn.d_ff = 1024, ffn.twell_tile = 128, ffn.twell_capacity = 16, ffn.twell_sparsity = 0.99;
    sj_problem_init(&gemm, SJ_OP_GEMM, SJ_DTYPE_F16, 64, 64, 64);

    SJ_ASSERT_STATUS(bench_run(NULL, "gemm", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    SJ_ASSERT_STATUS(bench_run(ctx, "gemm", &gemm, NULL, &r), SJ_ERR_INVALID_ARGUMENT, "options is NULL");
    SJ_ASSERT_STATUS(bench_run(ctx, "no-such", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT,
                     "expected an op (gemm, vnm-spmm, twell-gate, twell-ffn, vnm-dw, vnm-dx, hybrid-gate, hybrid-ffn-fwd, hybrid-ffn-dx, hybrid-ffn-dw) or a benchmark (twell-ffn-block, vnm-train, vnm-train-exact, vnm-train-sparse-dx, ffn-train)");
    SJ_ASSERT_STATUS(bench_run(ctx, "vnm-compress", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT, "a conversion with no harness");
    SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn-block", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT,
                     "problem.op is gemm, expected a twell-ffn problem");
    SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT, "expected a twell-ffn problem");
    sj_problem bad = ffn;
    bad.d_ff = 0;
    SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn-block", &bad, &o, &r), SJ_ERR_INVALID_ARGUMENT, "problem.d_ff = 0");
    sj_problem layer; /* a V:N:M layer's training step: W 512 x 256 over 64 tokens */
    sj_problem_init(&layer, SJ_OP_VNM_DW, SJ_DTYPE_F16, 512, 256, 64);
    layer.vnm_v = 64, layer.vnm_n = 2, layer.vnm_m = 8;
    SJ_ASSERT_STATUS(bench_run(ctx, "vnm-train", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT, "expected a vnm-dw problem");
    bad = layer;
    bad.k = 60;
    SJ_ASSERT_STATUS(bench_run(ctx, "vnm-train-exact", &bad, &o, &r), SJ_ERR_INVALID_ARGUMENT, "must be a multiple of 8");
    bad = layer;
    bad.vnm_m = 2;
    SJ_ASSERT_STATUS(bench_run(ctx, "vnm-train", &bad, &o, &r), SJ_ERR_INVALID_ARGUMENT, "M must be in 4..128");
    sj_problem ffn_step; /* the FFN block's training step: 64 tokens, d_model 256, d_ff 1024, W 128 */
    sj_problem_init(&ffn_step, SJ_OP_HYBRID_FFN_DW, SJ_DTYPE_BF16, 64, 256, 256);
    ffn_step.d_ff = 1024, ffn_step.twell_tile = 1024, ffn_step.twell_capacity = 128, ffn_step.twell_sparsity = 0.99;
    SJ_ASSERT_STATUS(bench_run(ctx, "ffn-train", &ffn, &o, &r), SJ_ERR_INVALID_ARGUMENT,
                     "problem.op is twell-ffn, expected a hybrid-ffn-dw problem");
    for (int i = 0; i < 3; i++) { /* d_model not a multiple of 8, W past d_ff, a tile narrower than the row */
        bad = ffn_step;
        const char *why = i == 0 ? (bad.k = 248, "needs both d_model")
                        : i == 1 ? (bad.twell_capacity = 1025, "the ELL width W) = 1025")
                                 : (bad.twell_tile = 128, "a row is one tile");
        SJ_ASSERT_STATUS(bench_run(ctx, "ffn-train", &bad, &o, &r), SJ_ERR_INVALID_ARGUMENT, why);
    }
    o.rounds = 0;
    SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn-block", &ffn, &o, &r), SJ_ERR_INVALID_ARGUMENT, "rounds 0: expected 1..100");
    o.rounds = 101;
    SJ_ASSERT_STATUS(bench_run(ctx, "gemm", &gemm, &o, &r), SJ_ERR_INVALID_ARGUMENT, "rounds 101");
    bench_options_init(&o);
    if (!info.has_gpu) {
        SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn-block", &ffn, &o, &r), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        SJ_ASSERT_STATUS(bench_run(ctx, "twell-ffn", &ffn, &o, &r), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        SJ_ASSERT_STATUS(bench_run(ctx, "vnm-train", &layer, &o, &r), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        SJ_ASSERT_STATUS(bench_run(ctx, "vnm-train-exact", &layer, &o, &r), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        SJ_ASSERT_STATUS(bench_run(ctx, "ffn-train", &ffn_step, &o, &r), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        sj_bench_result b;
        SJ_ASSERT_STATUS(sj_bench(ctx, &ffn, NULL, &b), SJ_ERR_NO_GPU, "benchmarking needs a GPU");
        measure_result mr;
        baseline_step steps[BASELINE_MAX];
        int n = op_bench_find_name("twell-ffn-block")->ops->baseline(&ffn, steps);
        SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F16, n, steps, NULL, &mr), SJ_ERR_NO_GPU, "needs a GPU");
    }
    /* the baseline's own checks come before the GPU's */
    measure_result mr;
    baseline_step step = { BASELINE_PRODUCT, 64, 0, 0 };
    SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F16, 1, &step, NULL, &mr), SJ_ERR_INVALID_ARGUMENT,
                     "step 0 (64 x 0 x 0) has a dimension outside 1..2^31-1");
    step = (baseline_step){ (baseline_kind)9, 64, 64, 64 };
    SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F16, 1, &step, NULL, &mr), SJ_ERR_INVALID_ARGUMENT, "unknown kind");
    step = (baseline_step){ BASELINE_GEMM, 64, 64, 64 };
    SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F16, 0, &step, NULL, &mr), SJ_ERR_INVALID_ARGUMENT, "n_steps in 1..16");
    SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F16, BASELINE_MAX + 1, &step, NULL, &mr), SJ_ERR_INVALID_ARGUMENT,
                     "n_steps in 1..16 (got 17)");
    SJ_ASSERT_STATUS(cublas_baseline_time(ctx, SJ_DTYPE_F32, 1, &step, NULL, &mr), SJ_ERR_INVALID_ARGUMENT, "f16 or bf16");
    sj_context_destroy(ctx);
}

/* A bench's check sees every part of the output: the first and last rows and evenly between. */
static void test_sampled_rows(void **state)
{
    for (int64_t rows = 1; rows <= HARNESS_SAMPLE_ROWS; rows++) {
        assert_int_equal(harness_sample_count(rows), rows);
        for (int i = 0; i < rows; i++) assert_int_equal(harness_sample_row(rows, i), i);
    }
    for (int rep = 0; rep < 200; rep++) {
        int64_t rows = pick(HARNESS_SAMPLE_ROWS + 1, 1 << 20);
        assert_int_equal(harness_sample_count(rows), HARNESS_SAMPLE_ROWS);
        assert_int_equal(harness_sample_row(rows, 0), 0);
        assert_int_equal(harness_sample_row(rows, HARNESS_SAMPLE_ROWS - 1), rows - 1);
        for (int i = 1; i < HARNESS_SAMPLE_ROWS; i++) {
            int64_t r = harness_sample_row(rows, i), prev = harness_sample_row(rows, i - 1);
            if (!(r > prev && r - prev <= rows / (HARNESS_SAMPLE_ROWS - 1) + 1))
                fail_msg("%lld rows: sampled row %d is %lld after %lld", (long long)rows, i, (long long)r, (long long)prev);
        }
    }
}

static void test_elementwise_baseline_kernel(void **state)
{
    for (int a = 0; a < 2; a++) {
        const char *arch = a ? "sm_80" : "sm_90a";
        sj_context *ctx = tu_compile_context(arch);
        assert_non_null(ctx);
        gen_state *g;
        SJ_ASSERT_OK(rt_generator(ctx, &g));
        sj_problem p;
        /* 1000 x 77: 77000 values, 9625 vectors of 8, 38 blocks of 256 threads */
        sj_problem_init(&p, SJ_OP_GEMM, a ? SJ_DTYPE_BF16 : SJ_DTYPE_F16, 1000, 77, 1);
        sj_generated *gen = NULL;
        SJ_ASSERT_OK(gen_generate(g, "ewise_product", &p, "", &gen));
        assert_string_equal(gen->config, "THREADS=256");
        assert_int_equal(gen->grid[0], 38);
        assert_int_equal(gen->grid[1] * gen->grid[2], 1);
        assert_int_equal(gen->block[0] * gen->block[1] * gen->block[2], 256);
        assert_int_equal(gen->shared_bytes, 0);
        /* a ragged count: the last vector is partial */
        sj_problem q = p;
        q.m = 3, q.n = 5;
        sj_generated *small = NULL;
        SJ_ASSERT_OK(gen_generate(g, "ewise_product", &q, "", &small));
        assert_int_equal(small->grid[0], 1);
        sj_generated_free(small);
        int valid = 1;
        char reason[256] = "";
        q = p;
        q.out_dtype = SJ_DTYPE_F32;
        SJ_ASSERT_OK(gen_config_valid(g, "ewise_product", &q, "", &valid, reason, sizeof reason));
        assert_false(valid);
        assert_non_null(strstr(reason, "output dtype must be the input's"));
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        double secs;
        SJ_ASSERT_OK(nvrtc_compile(gen->source, gen->entry, arch, &cubin, &size, &log, &secs));
        free(log);
        char *sass = tu_sass(cubin, size);
        if (sass) {
            int ldg = tu_count_lines(sass, "LDG.E.128"), stg = tu_count_lines(sass, "STG.E.128");
            int mma = tu_count_lines(sass, "HMMA") + tu_count_lines(sass, "HGMMA"), local = tu_count_lines(sass, "LDL");
            fprintf(stderr, "# ewise_product %s SASS: %d LDG.E.128, %d STG.E.128\n", arch, ldg, stg);
            assert_int_equal(ldg, 2);
            assert_int_equal(stg, 1);
            assert_int_equal(mma, 0);
            assert_int_equal(local, 0);
            free(sass);
        }
        free(cubin);
        sj_generated_free(gen);
        sj_context_destroy(ctx);
    }
}

int main(void)
{
    rng = tu_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_benchmarks_beside_the_op_table),
        cmocka_unit_test(test_baselines),
        cmocka_unit_test(test_flops_agree_between_tuner_and_bench),
        cmocka_unit_test(test_bench_refuses_what_it_cannot_run),
        cmocka_unit_test(test_sampled_rows),
        cmocka_unit_test(test_elementwise_baseline_kernel),
    };
    return TU_RUN_TESTS(tests, NULL, NULL);
}
