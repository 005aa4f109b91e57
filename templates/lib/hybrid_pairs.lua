-- lib/hybrid_pairs.lua: ALGO=2 of templates/hybrid_ffn_fwd.lua and templates/hybrid_ffn_dx.lua,
-- the hybrid FFN's forward and backward through its activations on tensor cores through the TwELL
-- FFN's pairs kernel (lib/twell_pairs.lua + lib/twell_pairs_mma.lua, ALGO=2 there, GPU-verified),
-- and what the two templates share (H.template: parameters, checks, defaults, variants).
--   fwd: the TwELL FFN's two products (u = X[t] . WuT[j] at the active pairs, then
--     Y[t] = sum_j (a u) Wd[j]) over large (token x unit) tiles, weights staged in shared memory
--     once per 256 or 512 tokens instead of read per pair (bench/NOTES.md, "Hybrid training step");
--   dx: the same kernel with dY for X and Wd for WuT in the up product (dh = dY[t] . Wd[j]), dg =
--     dh u and du = dh a stored at the pairs, and a down product over WgT's rows with dg, then
--     WuT's with du, into the same accumulators: dX[t] = sum_j dg WgT[j] + du WuT[j].
-- Not the default: written without a GPU.
--
-- Two kernels that the op launches in stream order with the same arguments, the op's ABI plus
-- its tail (ops/hybrid/hybrid_ffn_api.c): fwd (X, values, columns, nnz, slot, backup, WuT, Wd, Y,
-- u_values, u_backup, R, work, tm_x, tm_wu, tm_wd); dx (dY, values, columns, nnz, slot, backup,
-- u_values, u_backup, WgT, WuT, Wd, dX, dg_values, dg_backup, du_values, du_backup, R, work, tm_dy,
-- tm_wd, tm_wg, tm_wu); `work` the caller's workspace (hybrid_pairs_plan in
-- ops/hybrid/hybrid_pairs_list.c sizes it; the offsets below agree):
--   STAGE=0, the listing (one CTA per token): the token's active pairs, its ELL slots (in any order)
--     and its backup row's non-zeros, marked in a shared bitmap of d_ff bits, then each written at
--     its rank: per unit tile of UT units its count and the index of its first pair, and the
--     pairs in ascending columns, each (local column << 16 | a bits, hybrid position), the position
--     being the pair's ELL slot t W + i or MW + s d_ff + j for backup row s (MW = tokens x W). The
--     order depends on the columns only, so the pairs kernel sees the same input whatever order the
--     gate wrote the ELL in, and its sums are deterministic. An unplaced overflow row (slot outside
--     the backup) lists one pair of unit 0 with a NaN value and no position: its Y row is NaN,
--     nothing of its u is written, as with the per-token kernel. Block 0 also zeroes the pairs
--     kernel's counters (so a launch never depends on the last one having finished cleanly).
--   STAGE=1, the pairs kernel on that list (lib/twell_pairs.lua with `listed`): TwELL's tiles are the
--     unit tiles (T = UT), and a tile never overflows (the list holds every pair of a row: a row of
--     the ELL has at most W, an overflow row d_ff places at its backup row's), so no pair is ever
--     dropped whatever the distribution. The up phase also stores each pair's u, rounded to the
--     input dtype, at its hybrid position (lib/twell_pairs.lua's sj_keep_u), or the dx's dg and du
--     in fp32 (sj_keep_grads); the dx's down product takes them rounded to the input dtype (as the
--     forward takes a u), its slots twice (dg for WgT's stages, du for WuT's).
-- Why a list rather than TwELL's fixed C slots per tile and dense spill: TwELL that drops nothing
-- needs C >= W slots in every tile or a tokens x d_ff spill (180 to 360 MB at 8192 x 11008), where
-- the list takes 8 bytes a position (tokens x W + R x d_ff) and the pairs kernel reads it with
-- the same loop.
--
-- Workspace (u32 words): [0, CNT_OFF) the pairs kernel's own (its bound for any config,
-- lib/twell_pairs.lua's workspace_words; the dx's slots twice), then counts and starts, tokens x
-- ceil(d_ff / 256) ints each (room for UT = 256), then the list, 2 words a position.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local pairs_algo = require "lib.twell_pairs"
local rows = require "lib.hybrid_rows"

local H = {}

H.PARAMS = { "ALGO", "WARPS", "UT", "STAGES" }
H.CT = 256            -- threads of the listing kernel

local function ceil64(x) return (x + 63) // 64 * 64 end

-- The pairs kernel's view: a TwELL problem whose tile is the unit tile, and its config.
local function pairs_problem(problem, cfg)
  return { op = "twell-ffn", dtype = problem.dtype, out_dtype = problem.out_dtype, M = problem.M, N = problem.N,
           K = problem.K, DFF = problem.DFF, T = cfg.UT, C = cfg.UT, SMS = problem.SMS, SMEM = problem.SMEM,
           arch = problem.arch, SPARSITY = problem.SPARSITY }
end
local function pairs_config(cfg, mode)
  return { WARPS = cfg.WARPS, NT = 1, ROUND = 1024, UCAP = 128, STAGES = cfg.STAGES, PIPE = 0, PERSIST = 0, ALGO = 2,
           UT = cfg.UT, SLOTS = 16, DGROUP = 0, DX = mode == "dx" }
end

-- The workspace's offsets in u32 words (ops/hybrid/hybrid_pairs_list.c computes the same).
function H.offsets(problem, mode)
  local o = {}
  o.MW = problem.M * problem.C
  o.CNT_OFF = ceil64(pairs_algo.workspace_words(problem.M, problem.DFF, mode == "dx" and 2 or 1))
  local per = ceil64(problem.M * tw.cdiv(problem.DFF, 256))
  o.ST_OFF = o.CNT_OFF + per
  o.LIST_OFF = o.ST_OFF + per
  return o
end

-- ALGO=2's own checks (before the op's common ones, lib/hybrid_rows.lua's): the pairs
-- kernel's (sm_90a, UT, WARPS, STAGES, shared memory) on its view, and 32-bit list indices.
local function valid_pairs(problem, cfg, mode)
  if not tw.member({ 2, 3, 4, 6 }, cfg.STAGES) then return false, "STAGES=" .. cfg.STAGES .. " must be 2, 3, 4 or 6" end
  if cfg.WARPS ~= 8 and cfg.WARPS ~= 16 then return false, "WARPS=" .. cfg.WARPS .. " must be 8 or 16" end
  if cfg.STAGE ~= 0 and cfg.STAGE ~= 1 then
    return false, "STAGE=" .. cfg.STAGE .. " must be 0 (the listing, the op's kernel) or 1 (the pairs kernel it launches next)"
  end
  if problem.M * (problem.C + problem.DFF) >= 1 << 31 then
    return false, string.format("ALGO=2 lists up to tokens x (W + d_ff) = %d positions; it needs fewer than 2^31",
                                problem.M * (problem.C + problem.DFF))
  end
  return pairs_algo.valid(pairs_problem(problem, cfg), pairs_config(cfg, mode))
end

-- The config the tuner tries first: unit tiles of 512 and 3 stages (the TwELL FFN's measured
-- best), 16 warps where their up items fill the GPU, else 8; nil where neither is valid.
local function first_config(problem, base, mode)
  local sms = problem.SMS > 0 and problem.SMS or 132
  for _, warps in ipairs({ 16, 8 }) do
    local cfg = { ALGO = 2, WARPS = warps, UT = 512, STAGES = 3 }
    for k, v in pairs(base) do if cfg[k] == nil then cfg[k] = v end end
    if valid_pairs(problem, cfg, mode) then
      local g = pairs_algo.geometry(pairs_problem(problem, cfg), pairs_config(cfg, mode))
      if g.NTT * g.NUT >= (warps == 16 and sms or sms / 2) or warps == 8 then return cfg end
    end
  end
  return nil
end

-- The per-pair outputs each mode's kernels take, in the ABI's order.
local KEEP = {
  fwd = { params = "unsigned short* __restrict__ u_values, unsigned short* __restrict__ u_backup",
          args = "u_values, u_backup" },
  dx = { inputs = "const unsigned short* __restrict__ u_values, const unsigned short* __restrict__ u_backup",
         outputs = "float* __restrict__ dg_values, float* __restrict__ dg_backup, float* __restrict__ du_values, "
                   .. "float* __restrict__ du_backup",
         args = "u_values, u_backup, dg_values, dg_backup, du_values, du_backup" },
}
KEEP.dx.params = KEEP.dx.inputs .. ", " .. KEEP.dx.outputs

local function listing(problem, cfg, dt, mode)
  local o = H.offsets(problem, mode)
  local env = { prelude = cuda.prelude(problem.dtype), M = problem.M, D = problem.N, F = problem.DFF, W = problem.C,
                UT = cfg.UT, NUT = tw.cdiv(problem.DFF, cfg.UT), NWORDS = tw.cdiv(problem.DFF, 32), CT = H.CT,
                COUNTERS = pairs_algo.list_offset(problem.M), ctype = dt.ctype,
                nan = problem.dtype == "bf16" and "0x7fc0u" or "0x7e00u" }
  for k, v in pairs(o) do env[k] = v end
  env.entry = string.format("sj_hybrid_ffn_%s_list_%s_m%d_f%d_w%d_u%d", mode, problem.dtype, problem.M, env.F, env.W,
                            cfg.UT)
  env.fwd = mode == "fwd"
  env.KEEP_PARAMS, env.KEEP_INPUTS, env.KEEP_OUTPUTS = KEEP[mode].params, KEEP[mode].inputs, KEEP[mode].outputs
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
#define M ${M}
#define F ${F}
#define W ${W}
#define UT ${UT}
#define NUT ${NUT}
#define NWORDS ${NWORDS}
#define CT ${CT}
#define MW ${MW}
#define CNT_OFF ${CNT_OFF}
#define ST_OFF ${ST_OFF}
#define LIST_OFF ${LIST_OFF}
#define COUNTERS ${COUNTERS}
#define HPOS_NONE 0xffffffffu
typedef ${ctype} T;

/* the op's ABI and the workspace (the rest of the tail is the pairs kernel's) */
extern "C" __global__ void __launch_bounds__(CT) ${entry}(
    const T* __restrict__ X, const unsigned short* __restrict__ values, const unsigned short* __restrict__ columns,
    const int* __restrict__ nnz, const int* __restrict__ slot, const unsigned short* __restrict__ backup,
$ if fwd then
    const T* __restrict__ WuT, const T* __restrict__ Wd, void* __restrict__ Y, ${KEEP_PARAMS}, int R,
$ else
    ${KEEP_INPUTS}, const T* __restrict__ WgT, const T* __restrict__ WuT, const T* __restrict__ Wd,
    void* __restrict__ dX, ${KEEP_OUTPUTS}, int R,
$ end
    unsigned* __restrict__ work)
{
  __shared__ unsigned bits[NWORDS];   /* the token's active units */
  __shared__ int wpre[NWORDS];        /* pairs before word w in its unit tile */
  __shared__ int tcount[NUT], tstart[NUT];
  const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31;
  int* counts = (int*)(work + CNT_OFF);
  int* starts = (int*)(work + ST_OFF);
  uint2* list = (uint2*)(work + LIST_OFF);
  if (t == 0)
    for (int i = tid; i < COUNTERS; i += CT) work[i] = 0u;
  const int n = nnz[t], e = min(n, W);
  const int s = n > W ? slot[t] : -1;
  if (n > W && (s < 0 || s >= R)) {
    /* unplaced: one pair, NaN, no position */
    for (int ut = tid; ut < NUT; ut += CT) {
      counts[(size_t)t * NUT + ut] = ut == 0;
      starts[(size_t)t * NUT + ut] = t * W;
    }
    if (tid == 0) list[(size_t)t * W] = make_uint2(${nan}, HPOS_NONE);
    return;
  }
  for (int w = tid; w < NWORDS; w += CT) bits[w] = 0u;
  __syncthreads();
  for (int i = tid; i < e; i += CT) {
    const int col = columns[(size_t)t * W + i];
    atomicOr(&bits[col >> 5], 1u << (col & 31));
  }
  if (s >= 0)
    for (int j = tid; j < F; j += CT)
      if ((backup[(size_t)s * F + j] & 0x7fffu) != 0) atomicOr(&bits[j >> 5], 1u << (j & 31));
  __syncthreads();
  /* per unit tile (UT / 32 whole words), its count and its words' prefixes */
  for (int ut = tid; ut < NUT; ut += CT) {
    int c = 0;
    for (int w = ut * (UT / 32); w < min(NWORDS, (ut + 1) * (UT / 32)); w++) { wpre[w] = c; c += __popc(bits[w]); }
    tcount[ut] = c;
  }
  __syncthreads();
  /* the tiles' starts: the token's list begins at its ELL slots, or at its backup row's place */
  if (tid < 32) {
    int run = s >= 0 ? MW + s * F : t * W;
    for (int u0 = 0; u0 < NUT; u0 += 32) {
      const int c = u0 + lane < NUT ? tcount[u0 + lane] : 0;
      int incl = c;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) { const int v = __shfl_up_sync(0xffffffffu, incl, d); if (lane >= d) incl += v; }
      if (u0 + lane < NUT) tstart[u0 + lane] = run + incl - c;
      run += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  for (int ut = tid; ut < NUT; ut += CT) {
    counts[(size_t)t * NUT + ut] = tcount[ut];
    starts[(size_t)t * NUT + ut] = tstart[ut];
  }
  /* every pair at its rank: the tile's start, the words before it in the tile, the bits below it */
  auto place = [&](int col, unsigned short v, unsigned pos) {
    const int w = col >> 5, tile = col / UT;
    const int idx = tstart[tile] + wpre[w] + __popc(bits[w] & ((1u << (col & 31)) - 1u));
    list[idx] = make_uint2(((unsigned)(col - tile * UT) << 16) | v, pos);
  };
  for (int i = tid; i < e; i += CT) place(columns[(size_t)t * W + i], values[(size_t)t * W + i], (unsigned)(t * W + i));
  if (s >= 0)
    for (int j = tid; j < F; j += CT) {
      const unsigned short v = backup[(size_t)s * F + j];
      if ((v & 0x7fffu) != 0) place(j, v, (unsigned)(MW + s * F + j));
    }
}
]], env)
  return { source = src, entry = env.entry, grid = { problem.M, 1, 1 }, block = { H.CT, 1, 1 }, shared = 0 }
end

-- STAGE=0: the listing; STAGE=1: the pairs kernel over it.
local function generate(problem, cfg, mode)
  local dt, ot = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  if cfg.STAGE == 0 then return listing(problem, cfg, dt, mode) end
  local listed = H.offsets(problem, mode)
  listed.DX = mode == "dx"
  listed.KEEP_PARAMS, listed.KEEP_ARGS = KEEP[mode].params, KEEP[mode].args
  listed.KEEP_INPUTS, listed.KEEP_OUTPUTS = KEEP[mode].inputs or "", KEEP[mode].outputs or ""
  listed.entry = string.format("sj_hybrid_ffn_%s_pairs_%s_%s_m%d_d%d_f%d_w%d_u%d_wp%d_st%d", mode, problem.dtype,
                               problem.out_dtype, problem.M, problem.N, problem.DFF, problem.C, cfg.UT, cfg.WARPS,
                               cfg.STAGES)
  return pairs_algo.generate(pairs_problem(problem, cfg), pairs_config(cfg, mode), dt, ot, listed)
end

-- What templates/hybrid_ffn_fwd.lua and hybrid_ffn_dx.lua share: two algorithms (ALGO), 0 the
-- rows (lib/hybrid_rows.lua, CUDA cores; the default; SPLIT > 0 its L2-blocked pair of kernels)
-- and 2 the pairs above (sm_90a), each leaving the other's parameters at fixed values. op: the
-- op's name, mode "fwd" or "dx", split: the SPLIT the tuner tries first; own: the template's own
-- fields (name, op, flops, bytes), returned with the shared ones.
local ROWS_FIXED = { WARPS = 16, UT = 512, STAGES = 3 }
local function pairs_fixed(problem, op) return { THREADS = rows.default(problem, 0, op).THREADS, B = 8, SPLIT = 0 } end

local function fixed(cfg, values, algo)
  for _, k in ipairs({ "THREADS", "B", "SPLIT", "WARPS", "UT", "STAGES" }) do
    if values[k] and cfg[k] ~= values[k] then
      return false, string.format("ALGO=%d takes %s=%d (it belongs to the other algorithm)", algo, k, values[k])
    end
  end
  return true
end

local function with(cfg, values)
  for k, v in pairs(values) do cfg[k] = v end
  return cfg
end

function H.template(op, mode, split, own)
  local params = {}
  for _, p in ipairs(rows.PARAMS) do params[#params + 1] = p end
  for _, p in ipairs(H.PARAMS) do params[#params + 1] = p end

  local function valid(problem, cfg)
    local ok, why = tw.check_ints(params, cfg)
    if not ok then return false, why end
    if cfg.ALGO == 0 then
      ok, why = fixed(cfg, ROWS_FIXED, 0)
      if not ok then return false, why end
      return rows.valid(problem, cfg, op)
    end
    if cfg.ALGO ~= 2 then return false, "ALGO=" .. cfg.ALGO .. " must be 0 (rows, CUDA cores) or 2 (pairs, tensor cores)" end
    -- the target first: no other parameter makes ALGO=2 valid off sm_90a
    if problem.arch ~= "sm_90a" then
      return false, "ALGO=2 (TMA, mbarriers) needs sm_90a, the target is " .. tostring(problem.arch)
    end
    -- its own parameters before the other algorithm's (the more telling refusal first)
    ok, why = valid_pairs(problem, cfg, mode)
    if not ok then return false, why end
    ok, why = fixed(cfg, pairs_fixed(problem, op), 2)
    if not ok then return false, why end
    return rows.valid(problem, with(with({}, cfg), { STAGE = 0 }), op) -- the rows' checks of the problem
  end

  return with(own, {
    params = params,
    valid = valid,
    space = function(problem)
      return with(rows.space(problem), { ALGO = { 0, 2 }, WARPS = { 8, 16 }, UT = { 256, 512 }, STAGES = { 2, 3, 4 } })
    end,
    -- the per-token rows: SPLIT (2.1x faster at 4096 / 11008, bench/RESULTS.md) waits on its one
    -- failing GPU case (test_hybrid_ffn_gpu, f16 dx SPLIT=4 THREADS=256: non-finite dX, H100
    -- 2026-12-07); the tuner tries it first (variants)
    default = function(problem) return with(rows.default(problem, 0, op), with({ ALGO = 0 }, ROWS_FIXED)) end,
    -- the tuner's first candidates: the rows' (the default and its L2-blocked form at `split`, the
    -- per-pass working set bench/NOTES.md counts), then the pairs where the target has them
    variants = function(problem)
      local out = {}
      for _, cfg in ipairs(rows.variants(problem, split, op)) do out[#out + 1] = with(cfg, with({ ALGO = 0 }, ROWS_FIXED)) end
      out[#out + 1] = first_config(problem, with(pairs_fixed(problem, op), { STAGE = 0 }), mode)
      return out
    end,
    generate = function(problem, cfg)
      if cfg.ALGO == 2 then return generate(problem, cfg, mode) end
      return rows.generate(problem, cfg, mode)
    end,
  })
end

return H
