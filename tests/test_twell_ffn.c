/* test_twell_ffn.c: the TwELL gate GEMM (templates/twell_gate.lua) and the fused FFN
 * (templates/twell_ffn.lua) with their ops sj_twell_gate / sj_twell_ffn.
 *
 * CPU: defaults generate for every dtype pair, ragged shapes and both targets (sm_90a, sm_80),
 * with geometry that matches the config and the target's shared memory; every valid config of
 * both spaces generates, and defaults compile with NVRTC for both targets; the SASS of sm_90a
 * builds uses the intended units (HGMMA for the wgmma gates, fed by TMA loads and mbarriers in
 * the warp-specialised default and by LDGSTS in WG=1; HMMA for the mma.sync gate and the FFN,
 * whose PIPE=1 loop is fed by bulk copies) and never spills; invalid configs are refused with the constraint named; the ops
 * check their arguments before any GPU work.
 * GPU: the gate + TwELL epilogue against relu(X . Wg) in fp64, read back through
 * sj_twell_to_dense (which validates the format), on random inputs with shifted pre-activations
 * from 50% to 99.9% sparsity, ragged shapes, overflowing tiles, with each of the gate's three
 * main loops (TMA + warp specialisation, wgmma over cp.async, mma.sync); the fused FFN against a dense
 * fp64 (H (.) (X . Wu)) . Wd, for the default and explicit configs, and over a host-built
 * TwELL that overflows almost everywhere. Outputs are poisoned before every launch. */
#include "core/op.h"
#include "test_util.h"
#include "generator/generator.h"
#include "runtime/runtime.h"
#include "ops/twell/twell_format.h"
#include "tuner/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sj_context *ctx90, *ctx80;
static uint64_t rng;

static int setup(void **state)
{
    rng = tu_seed();
    ctx90 = tu_compile_context("sm_90a");
    ctx80 = tu_compile_context("sm_80");
    if (!ctx90 || !ctx80) {
        fprintf(stderr, "# cannot create compile-only contexts: %s\n", sj_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    sj_context_destroy(ctx90);
    sj_context_destroy(ctx80);
    return 0;
}

static sj_problem gate_problem(sj_dtype dt, int64_t tokens, int64_t d_ff, int64_t d_model, int T, int C)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_TWELL_GATE, dt, tokens, d_ff, d_model);
    p.twell_tile = T;
    p.twell_capacity = C;
    return p;
}

static sj_problem ffn_problem(sj_dtype dt, sj_dtype out, int64_t tokens, int64_t d_model, int64_t d_ff, int T, int C)
{
    sj_problem p;
    sj_problem_init(&p, SJ_OP_TWELL_FFN, dt, tokens, d_model, d_model);
    p.out_dtype = out;
    p.twell_tile = T;
    p.twell_capacity = C;
    p.d_ff = d_ff;
    return p;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The value of "#define NAME v" in generated source (fails the test if it is not there). */
static int64_t define_value(const char *source, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "#define %s ", name);
    const char *at = strstr(source, key);
    assert_non_null(at);
    return atoll(at + strlen(key));
}

/* expect_wg: 0, 1 or 2, or -1 for any (a config of the space). */
static void check_gate_generated(const sj_problem *p, const sj_generated *g, const char *arch, int expect_wg)
{
    int BM = tu_config_value(g->config, "BM"), BN = tu_config_value(g->config, "BN"), WG = tu_config_value(g->config, "WG");
    int warps = (BM / tu_config_value(g->config, "WM")) * (BN / tu_config_value(g->config, "WN"));
    assert_string_equal(g->template_name, "twell_gate");
    assert_int_equal(BN % p->twell_tile, 0);      /* a CTA owns whole tiles of its rows */
    assert_int_equal(g->block[0], (unsigned)(32 * warps + (WG == 2 ? 128 : 0))); /* + the producer warpgroup */
    int cluster = tu_config_value(g->config, "CLUSTER"); /* CTAs of a cluster take adjacent row tiles */
    unsigned tiles = (unsigned)(cluster * cdiv(p->m, cluster * BM) * cdiv(p->n, BN));
    if (WG == 2) /* persistent: whole clusters, at most one CTA per tile, or per half tile when halves run
                    (fewer when the GPU's SMs are known) */
        assert_true(g->grid[0] > 0 && g->grid[0] <= tiles * (1 + (unsigned)define_value(g->source, "HALVES")) &&
                    g->grid[0] % (unsigned)cluster == 0);
    else
        assert_int_equal(g->grid[0], tiles);
    if (cluster == 2) assert_non_null(strstr(g->source, "__cluster_dims__(2, 1, 1)"));
    assert_true(g->shared_bytes <= (unsigned)gen_arch_max_shared(arch));
    if (expect_wg >= 0) assert_int_equal(WG, expect_wg);
    if (WG) assert_string_equal(arch, "sm_90a");
    assert_non_null(strstr(g->source, WG ? "wgmma.mma_async.sync.aligned.m64n" : "mma.sync.aligned.m16n8k16"));
    if (!WG) assert_null(strstr(g->source, "wgmma.mma_async"));
    if (WG == 2) assert_non_null(strstr(g->source, "cp.async.bulk.tensor.2d"));
    assert_non_null(strstr(g->source, "twell_gate.lua"));
    assert_non_null(strstr(g->source, WG == 2 ? "lib/twell_gate_tma.lua" : "lib/twell_gate_sync.lua"));
    assert_non_null(strstr(g->source, "#line"));
}

static void check_ffn_generated(const sj_problem *p, const sj_generated *g, const char *arch)
{
    int NT = tu_config_value(g->config, "NT"), W = tu_config_value(g->config, "WARPS");
    int PIPE = tu_config_value(g->config, "PIPE");
    assert_string_equal(g->template_name, "twell_ffn");
    assert_true(g->shared_bytes <= (unsigned)gen_arch_max_shared(arch));
    int ALGO = tu_config_value(g->config, "ALGO");
    if (ALGO == 1 || ALGO == 2) { /* pairs: one CTA per work item, up items then down items */
        int UT = tu_config_value(g->config, "UT");
        int64_t tiles = cdiv(p->d_ff, p->twell_tile), token_tiles = cdiv(p->m, 32 * W);
        int64_t items = token_tiles * (cdiv(tiles, UT / p->twell_tile) + cdiv(p->n, 64));
        assert_int_equal(UT % p->twell_tile, 0);
        assert_int_equal(g->block[0], (unsigned)(32 * W));
        assert_int_equal(g->grid[0], (unsigned)items);
        assert_non_null(strstr(g->source, "atomicAdd(work, 1u)"));   /* the ticket */
        /* where the pair lists start: the offset ops/twell/twell_op.c sizes the workspace with */
        assert_int_equal(define_value(g->source, "PL_OFF"), (2 + cdiv(p->m, 256) + 63) / 64 * 64);
        assert_true(2 + token_tiles <= (2 + cdiv(p->m, 256) + 63) / 64 * 64); /* the counters fit before it */
        assert_non_null(strstr(g->source, "twell_pairs.lua"));
        if (ALGO == 2) { /* tensor cores, rows gathered 16 bytes a lane */
            assert_non_null(strstr(g->source, "twell_pairs_mma.lua"));
            assert_non_null(strstr(g->source, "mma.sync.aligned.m16n8k16"));
            assert_non_null(strstr(g->source, "sj_slots_place("));
            /* counts, then the dealt slots, inside the bytes ops/twell/twell_api.c allocates */
            int64_t pl_off = (2 + cdiv(p->m, 256) + 63) / 64 * 64, ngp = cdiv(p->m, 32 * W) * 4 * W;
            int64_t nut = cdiv(tiles, UT / p->twell_tile), sl_off = define_value(g->source, "SL_OFF");
            int64_t m512 = cdiv(p->m, 512) * 512, f512 = cdiv(p->d_ff, 512) * 512;
            assert_int_equal(define_value(g->source, "NGP"), ngp);
            assert_true(sl_off >= pl_off + ngp * nut && sl_off % 4 == 0);
            assert_true(sl_off + ngp * nut * 8 * UT <= pl_off + (m512 / 8 * cdiv(p->d_ff, 256) + 63) / 64 * 64 + m512 * f512);
        }
        return;
    }
    assert_int_equal(g->block[0], (unsigned)(32 * W + (PIPE ? 32 : 0)));   /* PIPE=1: + the producer warp */
    if (PIPE) assert_non_null(strstr(g->source, "cp.async.bulk.shared::cluster.global"));
    unsigned blocks = (unsigned)cdiv(p->m, 8 * NT);
    if (tu_config_value(g->config, "PERSIST")) { /* one CTA per SM when the GPU is known, never more than blocks */
        assert_true(g->grid[0] > 0 && g->grid[0] <= blocks);
        assert_non_null(strstr(g->source, "blk += gridDim.x"));  /* a grid of fewer CTAs must still cover M */
    } else {
        assert_int_equal(g->grid[0], blocks);
        assert_null(strstr(g->source, "gridDim.x"));
    }
    assert_non_null(strstr(g->source, "mma.sync.aligned.m16n8k16"));
    assert_non_null(strstr(g->source, "lib/twell_blocks.lua"));
}

static void test_defaults_generate(void **state)
{
    const int64_t shapes[][3] = { /* tokens, d_model, d_ff */
        { 1, 8, 1 }, { 77, 264, 1000 }, { 300, 512, 1536 }, { 2048, 2048, 5632 }, { 8192, 4096, 11008 },
        { 8192, 2048, 5632 }, { 33, 1024, 129 },
    };
    const int tc[][2] = { { 128, 16 }, { 64, 8 }, { 32, 32 }, { 256, 4 } };
    const sj_dtype outs[] = { SJ_DTYPE_F16, SJ_DTYPE_BF16, SJ_DTYPE_F32 };
    sj_context *ctxs[] = { ctx90, ctx80 };
    const char *archs[] = { "sm_90a", "sm_80" };
    for (int a = 0; a < 2; a++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t t = 0; t < sizeof tc / sizeof *tc; t++)
                for (int in = 0; in < 2; in++) {
                    sj_dtype dt = in ? SJ_DTYPE_BF16 : SJ_DTYPE_F16;
                    sj_problem gp = gate_problem(dt, shapes[s][0], shapes[s][2], shapes[s][1], tc[t][0], tc[t][1]);
                    sj_generated *g = NULL;
                    SJ_ASSERT_OK(sj_generate(ctxs[a], &gp, NULL, &g));
                    check_gate_generated(&gp, g, archs[a], strcmp(archs[a], "sm_90a") ? 0 : 2); /* TMA + wgmma where they exist */
                    sj_generated_free(g);
                    for (size_t o = 0; o < 3; o++) {
                        sj_problem fp = ffn_problem(dt, outs[o], shapes[s][0], shapes[s][1], shapes[s][2], tc[t][0], tc[t][1]);
                        SJ_ASSERT_OK(sj_generate(ctxs[a], &fp, NULL, &g));
                        check_ffn_generated(&fp, g, archs[a]);
                        sj_generated_free(g);
                    }
                }
}

/* With the GPU's SM count known (132, an H100 / H200), the persistent gate's grid: a cluster
 * per unit up to one per SM pair, and a cluster per half unit where a shape has at most half as
 * many units as there are clusters and halves hold whole tiles and boxes (sj_gate_items). */
static void test_gate_grid_on_known_sms(void **state)
{
    gen_state *g;
    SJ_ASSERT_OK(gen_open(NULL, &g));
    gen_set_target(g, "sm_90a", gen_arch_max_shared("sm_90a"), 132);
    const struct { int64_t M, F, D; int T; const char *config; unsigned grid; int halves; } cases[] = {
        { 77, 1000, 264, 64, NULL, 2 * 2 * 4, 1 },      /* 4 units -> 8 halves */
        { 77, 1000, 264, 256, NULL, 2 * 4, 0 },         /* a half would cut a 256-wide tile */
        { 2100, 1024, 256, 128, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=2,CLUSTER=2", 2 * 36, 1 }, /* 36 > 66 / 2 */
        { 2048, 11008, 4096, 128, NULL, 132, 1 },       /* 344 units: the last round's 14 split in the kernel */
        { 1000, 4800, 256, 128, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=2,CLUSTER=1", 132, 1 },
        { 77, 1000, 264, 64, "BM=64,BN=128,BK=64,WM=64,WN=32,STAGES=5,GROUP_M=16,WG=2,CLUSTER=2", 2 * 8, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = gate_problem(SJ_DTYPE_F16, cases[i].M, cases[i].F, cases[i].D, cases[i].T, 16);
        sj_generated *out = NULL;
        SJ_ASSERT_OK(gen_generate(g, "twell_gate", &p, cases[i].config, &out));
        assert_int_equal(out->grid[0], cases[i].grid);
        assert_int_equal(define_value(out->source, "HALVES"), cases[i].halves);
        int BN = tu_config_value(out->config, "BN");
        char half_mma[64]; /* the half's wgmma exists exactly when halves can run */
        snprintf(half_mma, sizeof half_mma, "sj_wgmma_n%d(float", BN / 2);
        assert_true((strstr(out->source, half_mma) != NULL) == cases[i].halves);
        sj_generated_free(out);
    }
    gen_close(g);
}

/* ALGO=1 and 2 (templates/lib/twell_pairs.lua) leave ALGO=0's parameters at their canonical
 * values, ALGO=2 also ALGO=1's SLOTS. */
#define PAIRS "ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,"
#define PAIRS_MMA "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,"

/* DGROUP=1 (a tuning-space variant of the pairs kernels): with the GPU's SM count known, the down
 * items go in groups of DG token tiles: the token tiles left once the last 132 up tickets' tiles
 * (132 / NUT of them) are set aside, at least one. DGROUP=0 keeps the plain token-tile order and
 * defines no DG. */
static void test_ffn_down_groups_on_known_sms(void **state)
{
    (void)state;
    gen_state *g;
    SJ_ASSERT_OK(gen_open(NULL, &g));
    gen_set_target(g, "sm_90a", gen_arch_max_shared("sm_90a"), 132);
    const struct { int64_t M, D, F; const char *config; int dg; } cases[] = {
        { 8192, 4096, 11008, PAIRS_MMA "WARPS=16,UT=512,STAGES=3,DGROUP=1", 16 - 6 },  /* NTT 16, NUT 22 */
        { 8192, 2048, 5632, PAIRS_MMA "WARPS=16,UT=512,STAGES=3,DGROUP=1", 16 - 12 },  /* NUT 11 */
        { 2048, 4096, 11008, PAIRS_MMA "WARPS=8,UT=512,STAGES=3,DGROUP=1", 8 - 6 },    /* NTT 8 */
        { 3300, 256, 4096, PAIRS_MMA "WARPS=8,UT=256,STAGES=2,DGROUP=1", 13 - 9 },     /* the GPU test's: 13 = 3 x 4 + 1 */
        { 2048, 4096, 11008, PAIRS_MMA "WARPS=16,UT=512,STAGES=3,DGROUP=1", 1 },       /* NTT 4 <= 6 */
        { 8192, 4096, 11008, PAIRS "WARPS=16,UT=512,SLOTS=16,STAGES=3,DGROUP=1", 16 - 6 },
        { 8192, 4096, 11008, PAIRS_MMA "WARPS=16,UT=512,STAGES=3,DGROUP=0", -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, cases[i].M, cases[i].D, cases[i].F, 128, 16);
        sj_generated *out = NULL;
        SJ_ASSERT_OK(gen_generate(g, "twell_ffn", &p, cases[i].config, &out));
        if (cases[i].dg < 0) assert_null(strstr(out->source, "#define DG "));
        else assert_int_equal(define_value(out->source, "DG"), cases[i].dg);
        sj_generated_free(out);
    }
    gen_close(g);
}

/* Every config of each template's space that `valid` accepts also generates. */
static void test_space_generates(void **state)
{
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(ctx90, &gs));
    sj_problem probs[] = { gate_problem(SJ_DTYPE_BF16, 8192, 11008, 4096, 128, 16),
                           ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F32, 2048, 2048, 5632, 128, 16),
                           ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, 77, 264, 1000, 64, 8) };
    for (size_t i = 0; i < sizeof probs / sizeof *probs; i++) {
        const char *tname;
        SJ_ASSERT_OK(op_template(probs[i].op, &tname));
        gen_space sp;
        SJ_ASSERT_OK(gen_space_of(gs, tname, &probs[i], &sp));
        int idx[GEN_MAX_PARAMS] = { 0 }, n_valid = 0;
        for (;;) {
            char cfg[256] = "";
            for (int k = 0; k < sp.n_params; k++) {
                char part[48];
                snprintf(part, sizeof part, "%s%s=%d", k ? "," : "", sp.names[k], sp.values[k][idx[k]]);
                strcat(cfg, part);
            }
            int valid = 0;
            char reason[256];
            SJ_ASSERT_OK(gen_config_valid(gs, tname, &probs[i], cfg, &valid, reason, sizeof reason));
            if (valid) {
                sj_generated *g = NULL;
                SJ_ASSERT_OK(sj_generate(ctx90, &probs[i], cfg, &g));
                if (probs[i].op == SJ_OP_TWELL_GATE) check_gate_generated(&probs[i], g, "sm_90a", -1);
                else check_ffn_generated(&probs[i], g, "sm_90a");
                sj_generated_free(g);
                n_valid++;
            } else {
                assert_true(reason[0] != 0);
            }
            int k = 0;
            while (k < sp.n_params && ++idx[k] == sp.n_values[k]) idx[k++] = 0;
            if (k == sp.n_params) break;
        }
        fprintf(stderr, "# %s: %d valid configs in the space\n", tname, n_valid);
        assert_true(n_valid >= 8);
    }
}

static void compile_ok(sj_context *ctx, const sj_problem *p, const char *cfg)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, p, cfg, &g));
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    sj_status st = sj_compile(ctx, g, &cubin, &size, &log);
    if (st != SJ_OK) fail_msg("%s %s: %s\n%.2000s", g->entry, g->config, sj_last_error(), log ? log : "");
    assert_true(size > 1000);
    free(cubin);
    free(log);
    sj_generated_free(g);
}

static void test_defaults_compile(void **state)
{
    sj_problem ps[] = {
        gate_problem(SJ_DTYPE_BF16, 8192, 11008, 4096, 128, 16), gate_problem(SJ_DTYPE_F16, 77, 1000, 264, 64, 8),
        ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, 8192, 4096, 11008, 128, 16),
        ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F32, 77, 264, 1000, 64, 8),
        ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_F16, 2048, 2048, 5632, 128, 16),
    };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        compile_ok(ctx90, &ps[i], NULL);
        compile_ok(ctx80, &ps[i], NULL);
    }
    /* the pairs FFN on both */
    compile_ok(ctx90, &ps[2], "ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,WARPS=16,UT=1024,SLOTS=16,STAGES=3");
    compile_ok(ctx80, &ps[2], "ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,WARPS=16,UT=1024,SLOTS=16,STAGES=2");
    compile_ok(ctx80, &ps[3], "ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,WARPS=8,UT=256,SLOTS=32,STAGES=2");
    compile_ok(ctx90, &ps[2], "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=512,STAGES=2");
    compile_ok(ctx90, &ps[3], "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=8,UT=256,STAGES=2");
    compile_ok(ctx90, &ps[4], "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=256,STAGES=3");
    /* the mma.sync gate on sm_90a too */
    compile_ok(ctx90, &ps[0], "BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=0,CLUSTER=1");
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0, len = strlen(needle);
    for (const char *s = text; (s = strstr(s, needle)); s += len) n++;
    return n;
}

/* SASS of p's kernel with cfg on ctx's arch; NULL (the caller skips) without cuobjdump. */
static char *sass_of(sj_context *ctx, const sj_problem *p, const char *cfg)
{
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx, p, cfg, &g));
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    SJ_ASSERT_OK(sj_compile(ctx, g, &cubin, &size, &log));
    free(log);
    sj_generated_free(g);
    char *text = tu_sass(cubin, size);
    free(cubin);
    return text;
}

static void test_sass(void **state)
{
    sj_problem gate = gate_problem(SJ_DTYPE_BF16, 8192, 11008, 4096, 128, 16);
    sj_problem ffn = ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, 8192, 4096, 11008, 128, 16);
    char *s = sass_of(ctx90, &gate, NULL);
    if (!s) {
        tu_note_skip(); /* visible in ctest: no cuobjdump */
        skip();
        return;
    }
    assert_true(count(s, "HGMMA.64x256x16.F32") >= 4);   /* wgmma, 4 k-steps of the BK=64 slice */
    assert_true(count(s, "HGMMA.64x128x16.F32") >= 4);   /* ... and of a half unit (sj_gate_items) */
    assert_int_equal(count(s, "HMMA"), 0);
    assert_int_equal(count(s, "UTMALDG.2D"), 4);         /* 2 boxes of X + 2 of WgT per stage ... */
    assert_int_equal(count(s, "UTMALDG.2D.MULTICAST"), 2); /* ... the WgT half multicast to the cluster */
    assert_true(count(s, "UCGABAR_WAIT") >= 2);          /* cluster barriers at the start and the end */
    assert_int_equal(count(s, "LDGSTS"), 0);
    assert_true(count(s, "SYNCS.PHASECHK") >= 2);        /* full and empty waits */
    assert_true(count(s, "USETMAXREG") >= 2);            /* producer gives registers to the consumers */
    assert_int_equal(count(s, "LDL"), 0);
    assert_int_equal(count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &gate, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=1,CLUSTER=1");
    assert_non_null(s);
    assert_true(count(s, "HGMMA.64x256x16.F32") >= 4);
    assert_true(count(s, "LDGSTS") >= 2);
    assert_int_equal(count(s, "UTMALDG"), 0);
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &gate, "BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=0,CLUSTER=1");
    assert_non_null(s);
    assert_true(count(s, "HMMA.16816.F32.BF16") >= 32);
    assert_int_equal(count(s, "HGMMA"), 0);
    assert_true(count(s, "LDSM.16.M88.4") >= 2);
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &ffn, NULL);
    assert_non_null(s);
    assert_true(count(s, "HMMA.16816.F32.BF16") >= 8);   /* up (4 k-steps) and down (4 m tiles) at least */
    assert_true(count(s, "LDGSTS") >= 8);
    assert_true(count(s, "PRMT") >= 4);                  /* the down product's A fragments */
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &ffn, "WARPS=8,NT=1,ROUND=16384,UCAP=1024,STAGES=6,PIPE=1,PERSIST=0");
    assert_non_null(s);
    assert_int_equal(count(s, "HMMA.16816.F32.BF16"), 64); /* 8 pieces x (4 up k-steps + 4 down m tiles) */
    assert_int_equal(count(s, "UBLKCP.S.G"), 32);         /* a group's 16 row pieces, WuT and Wd */
    assert_int_equal(count(s, "LDSM.16.MT88.4"), 32);     /* the Wd pieces, transposed */
    assert_true(count(s, "SYNCS.PHASECHK") >= 2);        /* full and empty waits */
    assert_true(count(s, "LDGSTS") <= 8);                 /* X_b's copy loop only, no weight rows */
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &ffn, "WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=6,PIPE=0,PERSIST=1");
    assert_non_null(s);
    assert_true(count(s, "HMMA.16816.F32.BF16") >= 8);   /* the token-block loop keeps the same main loops */
    assert_true(count(s, "LDGSTS") >= 8);
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx90, &ffn, "ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,WARPS=16,UT=1024,SLOTS=16,STAGES=3");
    assert_non_null(s);
    assert_true(count(s, "FFMA") >= 16 * 16 + 16 * 4); /* 16 slots x 16 k per up chunk, 16 tokens x 4 columns down */
    assert_true(count(s, "LDGSTS") >= 3);               /* WuT and X pieces up, Wd pieces down */
    assert_int_equal(count(s, "HMMA"), 0);              /* CUDA cores only */
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    /* ALGO=2: up 4 groups x 4 m-tiles x 2 k-steps per slice, down 2 m-tiles x 2 parities per k-tile, rows gathered
     * 16 (up) or 8 (down) bytes a lane: 2 or 4 rows a pass, not ldmatrix's 8 */
    s = sass_of(ctx90, &ffn, "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=8,UT=512,STAGES=2");
    assert_non_null(s);
    assert_true(count(s, "HMMA.16816.F32.BF16") >= 32 + 16);
    assert_true(count(s, "LDS.128") >= 4 * 4 * 2 + 4); /* up: 2 WuT rows per m-tile, 4 X chunks */
    assert_true(count(s, "LDS.64") >= 4);               /* down: 2 Wd rows x 2 m-tiles per k-tile */
    assert_int_equal(count(s, "LDSM"), 0);
    /* by TMA, at the prologue and in the loop: an up slice's 2 WuT and 1 X boxes, a down stage's
     * 8 Wd boxes; cp.async is left for the down stages' slot words */
    assert_true(count(s, "UTMALDG.2D") >= 2 * (2 + 1) + 2 * 8);
    assert_true(count(s, "LDGSTS") <= 4);
    assert_true(count(s, "FFMA") < 64);                /* no CUDA-core product left */
    assert_int_equal(count(s, "LDL") + count(s, "STL"), 0);
    free(s);
    s = sass_of(ctx80, &gate, NULL);
    assert_non_null(s);
    assert_true(count(s, "HMMA.16816.F32.BF16") >= 32);
    assert_int_equal(count(s, "HGMMA"), 0);
    free(s);
}

static void expect_invalid(sj_context *ctx, const sj_problem *p, const char *cfg, const char *needle)
{
    sj_generated *g = NULL;
    SJ_ASSERT_STATUS(sj_generate(ctx, p, cfg, &g), SJ_ERR_INVALID_ARGUMENT, needle);
    assert_null(g);
}

static void test_invalid_configs(void **state)
{
    sj_problem gate = gate_problem(SJ_DTYPE_F16, 4096, 11008, 4096, 128, 16);
    const char *wg1 = "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=3,GROUP_M=8,WG=1,CLUSTER=1";
    expect_invalid(ctx80, &gate, wg1, "needs sm_90a");
    expect_invalid(ctx90, &gate, "BM=128,BN=64,BK=64,WM=64,WN=32,STAGES=3,GROUP_M=8,WG=0,CLUSTER=1", "multiple of T=128");
    expect_invalid(ctx90, &gate, "BM=256,BN=256,BK=64,WM=64,WN=64,STAGES=5,GROUP_M=8,WG=0,CLUSTER=1", "warps");
    expect_invalid(ctx90, &gate, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=5,GROUP_M=8,WG=1,CLUSTER=1", "shared memory");
    expect_invalid(ctx90, &gate, "BM=128,BN=256,BK=32,WM=64,WN=64,STAGES=3,GROUP_M=8,WG=1,CLUSTER=1", "BK=64");
    expect_invalid(ctx90, &gate, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=3,GROUP_M=8,WG=1,CLUSTER=2", "needs WG=2");
    sj_problem t64 = gate_problem(SJ_DTYPE_F16, 256, 1024, 256, 64, 8);
    expect_invalid(ctx90, &t64, "BM=64,BN=64,BK=64,WM=32,WN=32,STAGES=3,GROUP_M=8,WG=2,CLUSTER=2", "multiple of 128");
    sj_problem odd = gate_problem(SJ_DTYPE_F16, 64, 1024, 100, 128, 16);
    expect_invalid(ctx90, &odd, NULL, "multiple of 8");
    sj_problem gate_out = gate;
    gate_out.out_dtype = SJ_DTYPE_F32;
    expect_invalid(ctx90, &gate_out, NULL, "out_dtype must equal dtype");
    sj_problem t100 = gate_problem(SJ_DTYPE_F16, 64, 1024, 64, 100, 16);
    expect_invalid(ctx90, &t100, "BM=64,BN=128,BK=64,WM=32,WN=32,STAGES=3,GROUP_M=8,WG=0,CLUSTER=1", "multiple of T=100");

    sj_problem ffn = ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, 8192, 4096, 11008, 128, 16);
    expect_invalid(ctx90, &ffn, "WARPS=8,NT=2,ROUND=16384,UCAP=512,STAGES=4,PIPE=0", "accumulators");
    expect_invalid(ctx90, &ffn, "WARPS=16,NT=1,ROUND=16384,UCAP=1024,STAGES=4,PIPE=0", "shared memory");
    expect_invalid(ctx90, &ffn, "WARPS=12,NT=1,ROUND=16384,UCAP=512,STAGES=4,PIPE=0", "WARPS");
    expect_invalid(ctx80, &ffn, "WARPS=8,NT=1,ROUND=16384,UCAP=512,STAGES=4,PIPE=0", "shared memory");
    expect_invalid(ctx80, &ffn, "WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=2,PIPE=1", "needs sm_90a");
    expect_invalid(ctx90, &ffn, "WARPS=8,NT=1,ROUND=16384,UCAP=512,STAGES=4,PIPE=2", "PIPE must be 0 or 1");
    expect_invalid(ctx90, &ffn, "WARPS=8,NT=1,ROUND=16384,UCAP=512,STAGES=4,PIPE=0,PERSIST=2", "PERSIST must be 0 or 1");
    expect_invalid(ctx90, &ffn, "ALGO=3", "ALGO must be 0");
    expect_invalid(ctx90, &ffn, "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=32,WARPS=16,UT=512,STAGES=2", "SLOTS=16");
    expect_invalid(ctx80, &ffn, "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=8,UT=256,STAGES=2", "needs sm_90a");
    expect_invalid(ctx90, &ffn, "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=1024,STAGES=2", "UT=256 or 512");
    expect_invalid(ctx90, &ffn, "ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=512,STAGES=4", "shared memory");
    expect_invalid(ctx90, &ffn, "ALGO=2,NT=2,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=512,STAGES=2", "ALGO=2 takes PIPE=0");
    sj_problem ragged = ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 77, 264, 1000, 64, 8);
    expect_invalid(ctx90, &ragged, "WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=2,PIPE=1", "multiple of 64");
    sj_problem nk = ffn;
    nk.k = 2048;
    expect_invalid(ctx90, &nk, NULL, "must equal K");
}

/* The FFN's default algorithm follows the declared sparsity: the tensor-core pairs kernel from
 * 90% to 99.5% when its up items fill the GPU, the token blocks elsewhere and when unspecified. */
static void test_default_follows_sparsity(void **state)
{
    (void)state;
    /* warps: ALGO=2's, 16 where the up items fill 132 SMs, 8 where 8 warps' items fill half */
    const struct { int64_t M, D, F; double sparsity; int algo, warps; } cases[] = {
        { 8192, 4096, 11008, 0.99, 2, 16 }, { 8192, 4096, 11008, 0.95, 2, 16 }, { 8192, 4096, 11008, 0.999, 0, 0 },
        { 8192, 4096, 11008, 0.90, 2, 16 }, { 8192, 4096, 11008, 0.80, 0, 0 }, { 8192, 4096, 11008, 0, 0, 0 },
        { 8192, 2048, 5632, 0.99, 2, 16 }, { 2048, 2048, 5632, 0.99, 2, 8 }, { 2048, 4096, 11008, 0.95, 2, 8 },
        { 8192, 2048, 5632, 0.995, 2, 16 }, { 8192, 2048, 5632, 0.997, 2, 16 }, { 8192, 2048, 5632, 0.998, 0, 0 },
        { 1024, 2048, 5632, 0.99, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sj_problem p = ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, cases[i].M, cases[i].D, cases[i].F, 128, 16);
        p.twell_sparsity = cases[i].sparsity;
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(ctx90, &p, NULL, &g));
        if (tu_config_value(g->config, "ALGO") != cases[i].algo)
            fail_msg("%lld tokens, d_ff %lld, sparsity %g: default %s, expected ALGO=%d", (long long)cases[i].M,
                     (long long)cases[i].F, cases[i].sparsity, g->config, cases[i].algo);
        if (cases[i].algo == 2) {
            assert_int_equal(tu_config_value(g->config, "WARPS"), cases[i].warps);
            assert_int_equal(tu_config_value(g->config, "UT"), 512);
            assert_int_equal(tu_config_value(g->config, "STAGES"), 3);
        }
        sj_generated_free(g);
    }
    /* on sm_80 (no TMA) the token blocks */
    sj_problem p = ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 8192, 4096, 11008, 128, 16);
    p.twell_sparsity = 0.99;
    sj_generated *g = NULL;
    SJ_ASSERT_OK(sj_generate(ctx80, &p, NULL, &g));
    assert_int_equal(tu_config_value(g->config, "ALGO"), 0);
    sj_generated_free(g);
}

/* The untuned default against the FFN block timed on GPUs per algorithm (tests/data/
 * twell_ffn_block.csv: per GPU, shape, sparsity and ALGO, that algorithm's best-known config, its
 * block time and cuBLAS's dense block in the same process). At every recorded shape and sparsity
 * the default's algorithm must be the fastest against cuBLAS on each GPU, or within 3% of it
 * (the spread between processes, bench/NOTES.md). */
static void test_default_matches_recorded_timings(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/twell_ffn_block.csv", tu_source_dir());
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    struct row { char gpu[16]; int64_t M, D, F; double sparsity; int algo; double speedup; } rows[128];
    int n = 0;
    char line[512];
    if (!fgets(line, sizeof line, f)) fail_msg("%s is empty", path);   /* the header */
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (n == (int)(sizeof rows / sizeof *rows)) fail_msg("%s: more than %d rows", path, n);
        struct row *r = &rows[n];
        long long M, D, F;
        double block_us, cublas_us;
        if (sscanf(line, "%15[^,],%lld,%lld,%lld,%lf,%d,%lf,%lf", r->gpu, &M, &D, &F, &r->sparsity, &r->algo, &block_us,
                   &cublas_us) != 8 || block_us <= 0 || cublas_us <= 0)
            fail_msg("%s: malformed row: %s", path, line);
        r->M = M, r->D = D, r->F = F, r->speedup = cublas_us / block_us;
        n++;
    }
    fclose(f);
    int groups = 0;
    for (int i = 0; i < n; i++) {
        int first = 1, algos = 0;   /* check a group once, at its first row */
        double best = 0, chosen = -1;
        sj_problem p = ffn_problem(SJ_DTYPE_BF16, SJ_DTYPE_BF16, rows[i].M, rows[i].D, rows[i].F, 128, 16);
        p.twell_sparsity = rows[i].sparsity;
        sj_generated *g = NULL;
        SJ_ASSERT_OK(sj_generate(ctx90, &p, NULL, &g));
        int algo = tu_config_value(g->config, "ALGO");
        sj_generated_free(g);
        for (int j = 0; j < n; j++) {
            if (strcmp(rows[j].gpu, rows[i].gpu) || rows[j].M != rows[i].M || rows[j].D != rows[i].D ||
                rows[j].F != rows[i].F || rows[j].sparsity != rows[i].sparsity)
                continue;
            if (j < i) first = 0;
            algos++;
            if (rows[j].speedup > best) best = rows[j].speedup;
            if (rows[j].algo == algo) chosen = rows[j].speedup;
        }
        if (!first) continue;
        if (algos < 2) fail_msg("%s: %s %lld x %lld / %lld at %g has one algorithm: nothing to compare", path, rows[i].gpu,
                                (long long)rows[i].M, (long long)rows[i].D, (long long)rows[i].F, rows[i].sparsity);
        if (chosen < 0)
            fail_msg("%s %lld x %lld / %lld at %g: the default takes ALGO=%d, which has no recorded row", rows[i].gpu,
                     (long long)rows[i].M, (long long)rows[i].D, (long long)rows[i].F, rows[i].sparsity, algo);
        if (chosen < best / 1.03)
            fail_msg("%s %lld x %lld / %lld at %g: the default takes ALGO=%d (%.2fx of cuBLAS), the fastest ran %.2fx",
                     rows[i].gpu, (long long)rows[i].M, (long long)rows[i].D, (long long)rows[i].F, rows[i].sparsity, algo,
                     chosen, best);
        groups++;
    }
    assert_true(groups >= 4);
    print_message("# %d recorded shapes and sparsities: the default takes the fastest algorithm at each\n", groups);
}

/* Each algorithm's own best config (gen_variant_configs), which the tuner measures first whatever
 * the sparsity: the token blocks, the tensor-core pairs kernel where the target has TMA, the
 * CUDA-core pairs kernel; every one valid, and the default one of them. A template without
 * variants() has one variant, its default. */
static void test_variants_seed_every_algorithm(void **state)
{
    (void)state;
    const double sparsities[] = { 0, 0.9, 0.99, 0.995, 0.999 };
    sj_context *ctxs[] = { ctx90, ctx80 };
    for (int a = 0; a < 2; a++) {
        gen_state *gs;
        SJ_ASSERT_OK(rt_generator(ctxs[a], &gs));
        for (size_t i = 0; i < sizeof sparsities / sizeof *sparsities; i++) {
            sj_problem p = ffn_problem(SJ_DTYPE_F16, SJ_DTYPE_F16, 8192, 2048, 5632, 128, 16);
            p.twell_sparsity = sparsities[i];
            char cfg[GEN_MAX_VARIANTS][256];
            int n = 0;
            SJ_ASSERT_OK(gen_variant_configs(gs, "twell_ffn", &p, cfg, GEN_MAX_VARIANTS, &n));
            const int expect[] = { 0, 2, 1 }, *e = a == 0 ? expect : (const int[]){ 0, 1 };
            assert_int_equal(n, a == 0 ? 3 : 2);
            sj_generated *g = NULL;
            SJ_ASSERT_OK(sj_generate(ctxs[a], &p, NULL, &g));
            int has_default = 0;
            for (int v = 0; v < n; v++) {
                assert_int_equal(tu_config_value(cfg[v], "ALGO"), e[v]);
                int valid = 0;
                char why[256];
                SJ_ASSERT_OK(gen_config_valid(gs, "twell_ffn", &p, cfg[v], &valid, why, sizeof why));
                if (!valid) fail_msg("variant %s is invalid at sparsity %g: %s", cfg[v], sparsities[i], why);
                has_default |= !strcmp(cfg[v], g->config);
            }
            if (!has_default) fail_msg("the default %s is none of the variants at sparsity %g", g->config, sparsities[i]);
            sj_generated_free(g);
        }
    }
    gen_state *gs;
    SJ_ASSERT_OK(rt_generator(ctx90, &gs));
    sj_problem gemm;
    sj_problem_init(&gemm, SJ_OP_GEMM, SJ_DTYPE_F16, 512, 512, 512);
    char cfg[GEN_MAX_VARIANTS][256], dflt[256];
    int n = 0;
    SJ_ASSERT_OK(gen_variant_configs(gs, "gemm_dense", &gemm, cfg, GEN_MAX_VARIANTS, &n));
    SJ_ASSERT_OK(gen_default_config(gs, "gemm_dense", &gemm, dflt, sizeof dflt));
    assert_int_equal(n, 1);
    assert_string_equal(cfg[0], dflt);
}

/* The cache key carries the sparsity, so a winner tuned at one is never served at another, and
 * an unspecified one keeps the key text that entries tuned before the field existed have. */
static void test_cache_key_carries_sparsity(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 2048, 5632, 128, 16));
    sj_problem p[3];
    SJ_ASSERT_OK(sj_twell_ffn_problem(&l, 2048, SJ_DTYPE_F16, &p[0]));
    p[1] = p[0];
    p[1].twell_sparsity = 0.99;
    p[2] = p[0];
    p[2].twell_sparsity = 0.999;
    const char *want[] = { "T=128,C=16,DFF=5632", "T=128,C=16,DFF=5632,S=0.99", "T=128,C=16,DFF=5632,S=0.999" };
    for (int i = 0; i < 3; i++) {
        cache_key k;
        SJ_ASSERT_OK(rt_cache_key(ctx90, &p[i], NULL, &k));
        assert_string_equal(k.sparsity, want[i]);
    }
    /* the input law is part of the key, and is checked */
    sj_problem q = p[1];
    q.twell_skew = 1.5;
    cache_key k;
    SJ_ASSERT_OK(rt_cache_key(ctx90, &q, NULL, &k));
    assert_string_equal(k.sparsity, "T=128,C=16,DFF=5632,S=0.99,A=1.5");
    q.twell_skew = 4.5;
    SJ_ASSERT_STATUS(sj_problem_validate(&q), SJ_ERR_INVALID_ARGUMENT, "problem.twell_skew = 4.5: expected 0");
    q.twell_skew = -1;
    SJ_ASSERT_STATUS(sj_problem_validate(&q), SJ_ERR_INVALID_ARGUMENT, "problem.twell_skew = -1");
    q.twell_skew = 1;
    q.twell_sparsity = 0.3;
    SJ_ASSERT_STATUS(sj_problem_validate(&q), SJ_ERR_INVALID_ARGUMENT, "needs problem.twell_sparsity >= 0.5");
    q.twell_sparsity = 0;
    SJ_ASSERT_STATUS(sj_problem_validate(&q), SJ_ERR_INVALID_ARGUMENT, "needs problem.twell_sparsity >= 0.5");
}

/* Share of the total rate held by the busiest fifth of the units. */
static double top_fifth_share(const double *rate, int64_t n)
{
    double *r = malloc(sizeof *r * (size_t)n), total = 0, top = 0;
    assert_non_null(r);
    memcpy(r, rate, sizeof *r * (size_t)n);
    for (int64_t i = 0; i < n; i++) total += r[i];
    for (int64_t i = 0; i < n / 5; i++) { /* partial selection of the n/5 largest */
        int64_t best = i;
        for (int64_t j = i + 1; j < n; j++)
            if (r[j] > r[best]) best = j;
        double t = r[i];
        r[i] = r[best];
        r[best] = t;
        top += r[i];
    }
    free(r);
    return top / total;
}

/* The generated inputs' per-unit firing rates: the mean is the density asked for, no unit
 * exceeds the cap, the skew concentrates activity as documented, a seed fixes the order. */
static void test_unit_rates(void **state)
{
    enum { N = 5632 };
    static double a[N], b[N];
    uint64_t rng = 7;
    SJ_ASSERT_OK(harness_unit_rates(0.01, 0, 0, N, &rng, a));
    for (int j = 0; j < N; j++) assert_true(a[j] == 0.01);
    assert_int_equal(rng, 7); /* iid inputs draw nothing: they stay what they were */
    double share[3];
    const double skews[3] = { 0.5, 1, 2 };
    for (int s = 0; s < 3; s++) {
        rng = 7;
        SJ_ASSERT_OK(harness_unit_rates(0.01, skews[s], 0, N, &rng, a));
        double mean = 0, lo = 1, hi = 0;
        for (int j = 0; j < N; j++) {
            mean += a[j] / N;
            lo = fmin(lo, a[j]);
            hi = fmax(hi, a[j]);
        }
        assert_true(fabs(mean - 0.01) < 1e-9);
        assert_true(lo > 0 && hi <= HARNESS_RATE_CAP);
        share[s] = top_fifth_share(a, N);
    }
    assert_true(share[0] > 0.35 && share[0] < 0.55);  /* 44% at d_ff 11008 */
    assert_true(share[1] > 0.65 && share[1] < 0.85);  /* 76% */
    assert_true(share[2] > 0.95);                     /* 98% */
    rng = 7;
    SJ_ASSERT_OK(harness_unit_rates(0.01, 1, 0, N, &rng, b));
    rng = 7;
    SJ_ASSERT_OK(harness_unit_rates(0.01, 1, 0, N, &rng, a));
    assert_memory_equal(a, b, sizeof a);
    rng = 8;
    SJ_ASSERT_OK(harness_unit_rates(0.01, 1, 0, N, &rng, b));
    assert_true(memcmp(a, b, sizeof a) != 0);           /* another seed, another order of the units */
    rng = 7;
    SJ_ASSERT_OK(harness_unit_rates(0.6, 1, 0, N, &rng, a)); /* above the cap: all alike */
    for (int j = 0; j < N; j++) assert_true(a[j] == 0.6);
    /* the shifts make each unit fire at its rate: P(N(0, sigma^2) > shift_j) = rate_j */
    for (int s = 0; s < 2; s++) {
        rng = 9;
        SJ_ASSERT_OK(harness_unit_rates(0.01, s, 0, N, &rng, a));
        rng = 9;
        SJ_ASSERT_OK(harness_unit_shifts(0.01, s, 0, 21.0, N, &rng, b));
        for (int j = 0; j < N; j++) assert_true(fabs(0.5 * erfc(b[j] / (21.0 * sqrt(2.0))) - a[j]) < 1e-6 * a[j] + 1e-12);
    }
    /* dead units: round(dead N) units at 0, the live ones keep the mean (iid: all alike; skewed:
     * capped), placed at random; dead = 0 draws what the law without them draws */
    for (int s = 0; s < 2; s++) {
        rng = 11;
        SJ_ASSERT_OK(harness_unit_rates(0.01, s, 0.3, N, &rng, a));
        int zeros = 0, zeros_first_half = 0;
        double mean = 0;
        for (int j = 0; j < N; j++) {
            zeros += a[j] == 0;
            zeros_first_half += a[j] == 0 && j < N / 2;
            mean += a[j] / N;
            assert_true(a[j] <= HARNESS_RATE_CAP);
            if (s == 0 && a[j] != 0) assert_true(fabs(a[j] - 0.01 * N / (N - 1690)) < 1e-12);
        }
        assert_int_equal(zeros, 1690);                               /* round(0.3 x 5632) */
        assert_true(zeros_first_half > 700 && zeros_first_half < 990); /* spread, not a block */
        assert_true(fabs(mean - 0.01) < 1e-9);
        rng = 11;
        SJ_ASSERT_OK(harness_unit_shifts(0.01, s, 0.3, 21.0, N, &rng, b));
        for (int j = 0; j < N; j++) assert_true(fabs(0.5 * erfc(b[j] / (21.0 * sqrt(2.0))) - a[j]) < 1e-6 * a[j] + 1e-12);
    }
    SJ_ASSERT_STATUS(harness_unit_rates(0.01, 5, 0, N, &rng, a), SJ_ERR_INVALID_ARGUMENT, "skew 5");
    SJ_ASSERT_STATUS(harness_unit_rates(0, 1, 0, N, &rng, a), SJ_ERR_INVALID_ARGUMENT, "expected density in (0, 1]");
    SJ_ASSERT_STATUS(harness_unit_rates(0.01, 1, 0.95, N, &rng, a), SJ_ERR_INVALID_ARGUMENT, "dead in [0, 0.9]");
    SJ_ASSERT_STATUS(harness_unit_rates(0.4, 1, 0.5, N, &rng, a), SJ_ERR_INVALID_ARGUMENT,
                     "2816 of 5632 units dead leave the others a mean rate of 0.8: expected at most 0.5");
}

/* The ops refuse bad arguments before they look for a kernel. On a machine whose GPU is sm_90a,
 * ctx90 is a real device context: the fake pointers must then never reach a launch. */
static void test_api_checks(void **state)
{
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, SJ_DTYPE_F16, 64, 1024, 128, 16));
    sj_twell_device H = { .layout = l, .entries = 0x10000, .counts = 0x20000, .spill = 0x30000 };
    sj_problem gp, fp;
    SJ_ASSERT_OK(sj_twell_gate_problem(&l, 512, &gp));
    SJ_ASSERT_OK(sj_twell_ffn_problem(&l, 512, SJ_DTYPE_F16, &fp));
    sj_devptr X = 0x40000, W = 0x50000, Y = 0x60000;
    SJ_ASSERT_STATUS(sj_twell_gate(NULL, &gp, X, W, &H, NULL), SJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &fp, X, W, &H, NULL), SJ_ERR_INVALID_ARGUMENT, "expected twell-gate");
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &gp, 0, W, &H, NULL), SJ_ERR_INVALID_ARGUMENT, "X is a null");
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &gp, X + 2, W, &H, NULL), SJ_ERR_INVALID_ARGUMENT, "16-byte aligned");
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &gp, X, W, NULL, NULL), SJ_ERR_INVALID_ARGUMENT, "H is NULL");
    sj_problem other = gp;
    other.m = 65;
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &other, X, W, &H, NULL), SJ_ERR_INVALID_ARGUMENT, "H is f16 64 x 1024");
    sj_twell_device Hn = H;
    Hn.spill = 0;
    SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &gp, X, W, &Hn, NULL), SJ_ERR_INVALID_ARGUMENT, "H.spill");
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx90, &info));
    if (!info.has_gpu) SJ_ASSERT_STATUS(sj_twell_gate(ctx90, &gp, X, W, &H, NULL), SJ_ERR_NO_GPU, NULL);
    SJ_ASSERT_STATUS(sj_twell_ffn(ctx90, &gp, X, &H, W, W, Y, NULL), SJ_ERR_INVALID_ARGUMENT, "expected twell-ffn");
    SJ_ASSERT_STATUS(sj_twell_ffn(ctx90, &fp, X, &H, W, 0, Y, NULL), SJ_ERR_INVALID_ARGUMENT, "Wd is a null");
    other = fp;
    other.k = 256;
    SJ_ASSERT_STATUS(sj_twell_ffn(ctx90, &other, X, &H, W, W, Y, NULL), SJ_ERR_INVALID_ARGUMENT, "must both be d_model");
    other = fp;
    other.d_ff = 1000;
    SJ_ASSERT_STATUS(sj_twell_ffn(ctx90, &other, X, &H, W, W, Y, NULL), SJ_ERR_INVALID_ARGUMENT, "H is");
    if (!info.has_gpu) SJ_ASSERT_STATUS(sj_twell_ffn(ctx90, &fp, X, &H, W, W, Y, NULL), SJ_ERR_NO_GPU, NULL);
}

/* ------------------------------------------------------------------ GPU */

typedef struct ffn_data {
    sj_dtype dt;
    int64_t M, D, F;
    uint16_t *X, *WgT, *WuT, *Wd;   /* host, as uploaded */
    float *fX, *fWgT, *fWuT, *fWd;  /* the same values as floats, for the references */
    sj_devptr dX, dWgT, dWuT, dWd;
} ffn_data;

static float *to_float(sj_dtype dt, const uint16_t *h, size_t n)
{
    float *f = malloc(sizeof *f * n);
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) f[i] = tu_from16(dt, h[i]);
    return f;
}

static sj_devptr upload16(sj_context *ctx, const uint16_t *h, size_t n)
{
    sj_devptr d;
    SJ_ASSERT_OK(sj_malloc(ctx, n * 2, &d));
    SJ_ASSERT_OK(sj_memcpy_htod(ctx, d, h, n * 2));
    return d;
}

/* Random X, Wg, Wu, Wd (uniform [-1, 1)) with shifted pre-activations: X[:, D-1] = 1 and
 * Wg[D-1, :] = -b so that relu(X . Wg) has about the given sparsity. */
static void make_data(sj_context *ctx, ffn_data *d, sj_dtype dt, int64_t M, int64_t D, int64_t F, double sparsity)
{
    d->dt = dt;
    d->M = M;
    d->D = D;
    d->F = F;
    d->X = malloc(sizeof *d->X * (size_t)(M * D));
    d->WgT = malloc(sizeof *d->WgT * (size_t)(F * D));
    d->WuT = malloc(sizeof *d->WuT * (size_t)(F * D));
    d->Wd = malloc(sizeof *d->Wd * (size_t)(F * D));
    assert_true(d->X && d->WgT && d->WuT && d->Wd);
    tu_fill16(dt, d->X, (size_t)(M * D), 1.0f, &rng);
    tu_fill16(dt, d->WgT, (size_t)(F * D), 1.0f, &rng);
    tu_fill16(dt, d->WuT, (size_t)(F * D), 1.0f, &rng);
    tu_fill16(dt, d->Wd, (size_t)(F * D), 1.0f, &rng);
    double shift = sqrt((double)(D - 1) / 9.0) * harness_normal_quantile(sparsity);
    for (int64_t r = 0; r < M; r++) d->X[r * D + D - 1] = tu_to16(dt, 1.0f);
    for (int64_t j = 0; j < F; j++) d->WgT[j * D + D - 1] = tu_to16(dt, (float)-shift);
    d->fX = to_float(dt, d->X, (size_t)(M * D));
    d->fWgT = to_float(dt, d->WgT, (size_t)(F * D));
    d->fWuT = to_float(dt, d->WuT, (size_t)(F * D));
    d->fWd = to_float(dt, d->Wd, (size_t)(F * D));
    d->dX = upload16(ctx, d->X, (size_t)(M * D));
    d->dWgT = upload16(ctx, d->WgT, (size_t)(F * D));
    d->dWuT = upload16(ctx, d->WuT, (size_t)(F * D));
    d->dWd = upload16(ctx, d->Wd, (size_t)(F * D));
}

static void free_data(sj_context *ctx, ffn_data *d)
{
    sj_free(ctx, d->dX);
    sj_free(ctx, d->dWgT);
    sj_free(ctx, d->dWuT);
    sj_free(ctx, d->dWd);
    free(d->X);
    free(d->WgT);
    free(d->WuT);
    free(d->Wd);
    free(d->fX);
    free(d->fWgT);
    free(d->fWuT);
    free(d->fWd);
}

static void poison_twell(sj_context *ctx, const sj_twell_device *H)
{
    SJ_ASSERT_OK(sj_memset_u8(ctx, H->entries, 0xFF, H->layout.entries_bytes));
    SJ_ASSERT_OK(sj_memset_u8(ctx, H->counts, 0xFF, H->layout.counts_bytes));
    SJ_ASSERT_OK(sj_memset_u8(ctx, H->spill, 0xFF, H->layout.spill_bytes));
}

/* Runs the gate (config, or the default when NULL) into H and returns the dense H it holds
 * (validated by sj_twell_to_dense), after checking it against relu(X . Wg) in fp64 element by
 * element. */
static uint16_t *gate_and_check(sj_context *ctx, const ffn_data *d, sj_twell_device *H, const char *config,
                                int64_t *overflow)
{
    const sj_twell_layout *l = &H->layout;
    sj_problem p;
    SJ_ASSERT_OK(sj_twell_gate_problem(l, d->D, &p));
    poison_twell(ctx, H);
    SJ_ASSERT_OK(sj_set_config(ctx, &p, config ? config : ""));
    SJ_ASSERT_OK(sj_twell_gate(ctx, &p, d->dX, d->dWgT, H, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    sj_twell_host h;
    SJ_ASSERT_OK(sj_twell_download(ctx, H, &h));
    uint16_t *dense = malloc(sizeof *dense * (size_t)(d->M * d->F));
    assert_non_null(dense);
    SJ_ASSERT_OK(sj_twell_to_dense(&h, dense, d->F));
    *overflow = sj_twell_overflow_tiles(&h);
    sj_twell_host_free(&h);
    double rtol = d->dt == SJ_DTYPE_BF16 ? 1e-2 : 2e-3, atol = 1e-3 * sqrt((double)d->D / 9.0);
    int64_t bad = 0, nnz = 0;
    for (int64_t r = 0; r < d->M; r++) {
        const float *x = d->fX + r * d->D;
        for (int64_t j = 0; j < d->F; j++) {
            const float *w = d->fWgT + j * d->D;
            double z = 0;
            for (int64_t k = 0; k < d->D; k++) z += (double)x[k] * w[k];
            double ref = z > 0 ? z : 0, got = tu_from16(d->dt, dense[r * d->F + j]);
            if (!(fabs(got - ref) <= atol + rtol * ref)) {
                if (bad < 5) fprintf(stderr, "# gate (%lld, %lld): got %g, expected %g\n", (long long)r, (long long)j, got, ref);
                bad++;
            }
            nnz += twell_nonzero(dense[r * d->F + j]);
        }
    }
    assert_int_equal(bad, 0);
    fprintf(stderr, "# gate %lldx%lldx%lld T=%d C=%d, config %s: sparsity %.4f, %lld overflowing tiles\n",
            (long long)d->M, (long long)d->F, (long long)d->D, l->tile, l->capacity, config ? config : "default",
            1.0 - (double)nnz / (double)(d->M * d->F), (long long)*overflow);
    return dense;
}

/* Dense fp64 Y = (H (.) (X . Wu)) . Wd. */
static double *ffn_reference(const ffn_data *d, const uint16_t *H)
{
    double *Y = calloc((size_t)(d->M * d->D), sizeof *Y), *p = malloc(sizeof *p * (size_t)d->F);
    assert_true(Y && p);
    for (int64_t r = 0; r < d->M; r++) {
        const float *x = d->fX + r * d->D;
        for (int64_t j = 0; j < d->F; j++) { /* every unit, active or not: the dense product */
            double u = 0;
            const float *wu = d->fWuT + j * d->D;
            for (int64_t k = 0; k < d->D; k++) u += (double)x[k] * wu[k];
            p[j] = tu_from16(d->dt, H[r * d->F + j]) * u;
        }
        double *y = Y + r * d->D;
        for (int64_t j = 0; j < d->F; j++) {
            const float *wd = d->fWd + j * d->D;
            for (int64_t c = 0; c < d->D; c++) y[c] += p[j] * wd[c];
        }
    }
    free(p);
    return Y;
}

static void ffn_and_check(sj_context *ctx, const ffn_data *d, const sj_twell_device *H, const double *ref,
                          sj_dtype out, const char *config)
{
    sj_problem p;
    SJ_ASSERT_OK(sj_twell_ffn_problem(&H->layout, d->D, out, &p));
    size_t n = (size_t)(d->M * d->D), bytes = n * sj_dtype_size(out);
    sj_devptr Y;
    SJ_ASSERT_OK(sj_malloc(ctx, bytes, &Y));
    SJ_ASSERT_OK(sj_memset_u8(ctx, Y, 0xFF, bytes)); /* NaN: an unwritten output fails */
    SJ_ASSERT_OK(sj_set_config(ctx, &p, config ? config : ""));
    SJ_ASSERT_OK(sj_twell_ffn(ctx, &p, d->dX, H, d->dWuT, d->dWd, Y, NULL));
    SJ_ASSERT_OK(sj_synchronize(ctx));
    SJ_ASSERT_OK(sj_set_config(ctx, &p, ""));
    void *host = malloc(bytes);
    assert_non_null(host);
    SJ_ASSERT_OK(sj_memcpy_dtoh(ctx, host, Y, bytes));
    double err = tu_rel_error(out, host, ref, n);
    double tol = d->dt == SJ_DTYPE_BF16 || out == SJ_DTYPE_BF16 ? 1e-2 : 5e-3;
    sj_kernel_info ki;
    SJ_ASSERT_OK(sj_last_kernel_info(ctx, &ki));
    fprintf(stderr, "# ffn %lld tokens, d_model %lld, d_ff %lld -> %s, config %s: rel error %.2e\n", (long long)d->M,
            (long long)d->D, (long long)d->F, sj_dtype_name(out), ki.config, err);
    if (!(err < tol)) fail_msg("ffn rel error %g >= %g (config %s)", err, tol, ki.config);
    free(host);
    sj_free(ctx, Y);
}

static void test_gate_and_ffn_gpu(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    const struct { sj_dtype dt, out; int64_t M, D, F; int T, C; double sparsity; } cases[] = {
        { SJ_DTYPE_F16, SJ_DTYPE_F16, 77, 264, 1000, 64, 8, 0.50 },     /* ragged, overflow almost everywhere */
        { SJ_DTYPE_BF16, SJ_DTYPE_BF16, 77, 264, 1000, 64, 8, 0.90 },
        { SJ_DTYPE_F16, SJ_DTYPE_F32, 300, 512, 1536, 128, 16, 0.95 },
        { SJ_DTYPE_BF16, SJ_DTYPE_F16, 129, 1024, 2048, 128, 16, 0.99 },
        { SJ_DTYPE_BF16, SJ_DTYPE_BF16, 64, 2048, 4096, 128, 16, 0.999 },
        { SJ_DTYPE_F16, SJ_DTYPE_BF16, 100, 576, 1100, 64, 8, 0.90 },   /* a last row piece of 64 columns */
        { SJ_DTYPE_F16, SJ_DTYPE_F16, 2100, 256, 1024, 64, 8, 0.99 },   /* more token blocks than SMs */
        { SJ_DTYPE_F16, SJ_DTYPE_F16, 3300, 256, 4096, 64, 8, 0.99 },   /* DGROUP=1: groups of 4 token tiles, the last of 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ffn_data d;
        make_data(ctx, &d, cases[i].dt, cases[i].M, cases[i].D, cases[i].F, cases[i].sparsity);
        sj_twell_layout l;
        SJ_ASSERT_OK(sj_twell_layout_init(&l, cases[i].dt, cases[i].M, cases[i].F, cases[i].T, cases[i].C));
        sj_twell_device H;
        SJ_ASSERT_OK(sj_twell_device_alloc(ctx, &l, &H));
        int64_t overflow;
        if (i == 0 || i == 2) { /* the other main loops: one consumer warpgroup, no cluster, wgmma over cp.async, mma.sync */
            const char *gate_configs[] = { "BM=64,BN=128,BK=64,WM=64,WN=32,STAGES=5,GROUP_M=16,WG=2,CLUSTER=2",
                                           "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,GROUP_M=1,WG=2,CLUSTER=1",
                                           "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=3,GROUP_M=8,WG=1,CLUSTER=1",
                                           "BM=64,BN=128,BK=32,WM=32,WN=32,STAGES=3,GROUP_M=1,WG=0,CLUSTER=1" };
            for (int c = 0; c < 4; c++) free(gate_and_check(ctx, &d, &H, gate_configs[c], &overflow));
        }
        uint16_t *dense = gate_and_check(ctx, &d, &H, NULL, &overflow);
        if (cases[i].sparsity <= 0.9) assert_true(overflow > 0); /* the overflow path is exercised */
        double *ref = ffn_reference(&d, dense);
        ffn_and_check(ctx, &d, &H, ref, cases[i].out, NULL);
        /* the pairs kernel: small unit tiles with few slots (case 0: many passes per tile), large
         * ones; each twice, so the second launch runs on the counters the first one reset */
        for (int rep = 0; rep < 2; rep++) {
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS "WARPS=8,UT=256,SLOTS=16,STAGES=2");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS "WARPS=16,UT=512,SLOTS=16,STAGES=5");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS_MMA "WARPS=8,UT=256,STAGES=2");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS_MMA "WARPS=16,UT=512,STAGES=2");
            /* the down items in groups of token tiles (DGROUP=1) */
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS "WARPS=8,UT=256,SLOTS=16,STAGES=2,DGROUP=1");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, PAIRS_MMA "WARPS=8,UT=256,STAGES=2,DGROUP=1");
        }
        if (i == 2) { /* explicit configs: both warp counts, both token blocks, short rounds, both pipes */
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=16,NT=2,ROUND=16384,UCAP=256,STAGES=3,PIPE=0,PERSIST=0");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=2,PIPE=0,PERSIST=0");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=1,ROUND=16384,UCAP=512,STAGES=4,PIPE=1,PERSIST=0");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=16,NT=2,ROUND=1024,UCAP=128,STAGES=2,PIPE=1,PERSIST=0");
        }
        if (i == 6) { /* persistent CTAs (a grid of one per SM) walking several token blocks each */
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=1,ROUND=4096,UCAP=256,STAGES=6,PIPE=0,PERSIST=0");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=1,ROUND=1024,UCAP=128,STAGES=6,PIPE=0,PERSIST=1");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=16,NT=2,ROUND=16384,UCAP=512,STAGES=4,PIPE=0,PERSIST=1");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=1,ROUND=4096,UCAP=256,STAGES=4,PIPE=1,PERSIST=1");
        } else if (i >= 3) { /* the bulk-copy pipe at larger d_model, deep rings, and a partial last piece */
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=8,NT=2,ROUND=4096,UCAP=256,STAGES=6,PIPE=1,PERSIST=0");
            ffn_and_check(ctx, &d, &H, ref, cases[i].out, "WARPS=16,NT=1,ROUND=16384,UCAP=512,STAGES=3,PIPE=1,PERSIST=0");
        }
        free(ref);
        free(dense);
        SJ_ASSERT_OK(sj_twell_device_free(ctx, &H));
        free_data(ctx, &d);
    }
}

/* The gate's default main loop at tile widths the benchmark does not use: several tiles per
 * 128-column mask (T = 16, 32) and a tile spanning two of them (T = 256), ragged, some tiles
 * overflowing. */
static void test_gate_tile_widths_gpu(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    ffn_data d;
    make_data(ctx, &d, SJ_DTYPE_F16, 77, 264, 1000, 0.8);
    const int widths[][2] = { { 16, 2 }, { 32, 4 }, { 256, 24 } };
    for (int i = 0; i < 3; i++) {
        sj_twell_layout l;
        SJ_ASSERT_OK(sj_twell_layout_init(&l, d.dt, d.M, d.F, widths[i][0], widths[i][1]));
        sj_twell_device H;
        SJ_ASSERT_OK(sj_twell_device_alloc(ctx, &l, &H));
        int64_t overflow;
        free(gate_and_check(ctx, &d, &H, NULL, &overflow));
        assert_true(overflow > 0);
        SJ_ASSERT_OK(sj_twell_device_free(ctx, &H));
    }
    free_data(ctx, &d);
}

/* The persistent gate's half units (templates/twell_gate.lua, sj_gate_items): 1000 x 4800 is
 * 4 x 19 = 76 cluster units of 256 x 256, on 66 clusters (132 SMs) one full round and 10 units
 * split into 20 halves, the last column unit's second half 64 columns wide; unpaired CTAs
 * (CLUSTER=1) have 152 units, 132 + 20 split. Both dtypes, some tiles overflowing. */
static void test_gate_halves_gpu(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    sj_device_info info;
    SJ_ASSERT_OK(sj_get_device_info(ctx, &info));
    const int64_t M = 1000, F = 4800, D = 256;
    for (int c = 1; c <= 2; c++) {
        int64_t units = cdiv(M, 128 * c) * cdiv(F, 256), clusters = info.sm_count / c, tail = units % clusters;
        fprintf(stderr, "# gate halves, CLUSTER=%d: %lld units on %lld clusters, %lld split\n", c, (long long)units,
                (long long)clusters, (long long)(tail > 0 && 2 * tail <= clusters ? tail : 0));
    }
    const struct { sj_dtype dt; double sparsity; int T, C; } cases[] = {
        { SJ_DTYPE_F16, 0.9, 128, 16 }, { SJ_DTYPE_BF16, 0.99, 64, 4 },
    };
    for (int i = 0; i < 2; i++) {
        ffn_data d;
        make_data(ctx, &d, cases[i].dt, M, D, F, cases[i].sparsity);
        sj_twell_layout l;
        SJ_ASSERT_OK(sj_twell_layout_init(&l, d.dt, d.M, d.F, cases[i].T, cases[i].C));
        sj_twell_device H;
        SJ_ASSERT_OK(sj_twell_device_alloc(ctx, &l, &H));
        int64_t overflow;
        free(gate_and_check(ctx, &d, &H, NULL, &overflow));
        assert_true(overflow > 0);
        free(gate_and_check(ctx, &d, &H, "BM=128,BN=256,BK=64,WM=64,WN=64,STAGES=4,GROUP_M=8,WG=2,CLUSTER=1", &overflow));
        SJ_ASSERT_OK(sj_twell_device_free(ctx, &H));
        free_data(ctx, &d);
    }
}

/* The FFN over a host-built TwELL (independent of the gate) whose small C makes nearly every
 * tile overflow into the spill. */
static void test_ffn_overflow_gpu(void **state)
{
    sj_context *ctx;
    TU_REQUIRE_GPU(ctx);
    ffn_data d;
    make_data(ctx, &d, SJ_DTYPE_F16, 50, 512, 777, 0.5);
    uint16_t *H = malloc(sizeof *H * (size_t)(d.M * d.F));
    assert_non_null(H);
    for (int64_t i = 0; i < d.M * d.F; i++)
        H[i] = tu_uniform(&rng) < 0.4 ? tu_to16(d.dt, (float)(0.6 + 0.4 * tu_uniform(&rng))) : 0;
    sj_twell_layout l;
    SJ_ASSERT_OK(sj_twell_layout_init(&l, d.dt, d.M, d.F, 32, 2));
    sj_twell_host th;
    int64_t overflow;
    SJ_ASSERT_OK(sj_twell_from_dense(&l, H, d.F, &th, &overflow));
    assert_true(overflow > l.rows * l.n_tiles * 9 / 10);
    sj_twell_device dev;
    SJ_ASSERT_OK(sj_twell_upload(ctx, &th, &dev));
    double *ref = ffn_reference(&d, H);
    ffn_and_check(ctx, &d, &dev, ref, SJ_DTYPE_F32, NULL);
    ffn_and_check(ctx, &d, &dev, ref, SJ_DTYPE_F32, PAIRS "WARPS=8,UT=256,SLOTS=16,STAGES=3");
    ffn_and_check(ctx, &d, &dev, ref, SJ_DTYPE_F32, PAIRS_MMA "WARPS=16,UT=256,STAGES=3");
    free(ref);
    sj_twell_host_free(&th);
    SJ_ASSERT_OK(sj_twell_device_free(ctx, &dev));
    free(H);
    free_data(ctx, &d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_generate),
        cmocka_unit_test(test_space_generates),
        cmocka_unit_test(test_defaults_compile),
        cmocka_unit_test(test_sass),
        cmocka_unit_test(test_gate_grid_on_known_sms),
        cmocka_unit_test(test_ffn_down_groups_on_known_sms),
        cmocka_unit_test(test_invalid_configs),
        cmocka_unit_test(test_default_follows_sparsity),
        cmocka_unit_test(test_default_matches_recorded_timings),
        cmocka_unit_test(test_variants_seed_every_algorithm),
        cmocka_unit_test(test_cache_key_carries_sparsity),
        cmocka_unit_test(test_unit_rates),
        cmocka_unit_test(test_api_checks),
        cmocka_unit_test(test_gate_and_ffn_gpu),
        cmocka_unit_test(test_gate_tile_widths_gpu),
        cmocka_unit_test(test_gate_halves_gpu),
        cmocka_unit_test(test_ffn_overflow_gpu),
    };
    return TU_RUN_TESTS(tests, setup, teardown);
}
