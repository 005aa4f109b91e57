-- hybrid_ffn_dw.lua: the three weight gradients of the ReLU FFN block from the compact per-pair
-- values the training step stored (docs/training.md), summed per unit j over the tokens active
-- at j only:
--   dWgT[j] = sum_t dg X[t],  dWuT[j] = sum_t du X[t],  dWd[j] = sum_t (a u) dY[t].
-- The tokens of each unit come from the transpose of the hybrid matrix
-- (templates/hybrid_transpose.lua: start[j] .. start[j + 1] in list, ascending tokens, each entry
-- a pair's position, decoded by lib/hybrid_list_pair.lua), so each output element is one fp32 sum
-- in token order: deterministic.
--
-- CUDA cores, no MMA (docs/training.md says why): one CTA per block of UB units and a d_model
-- slice of THREADS x 8 x VPT columns; thread i owns 8 VPT of those columns of the three gradient
-- rows in fp32 registers. A unit's pairs are decoded THREADS at a time into shared memory (token,
-- dg, du, a u), then every thread walks them PF tokens at a time: the PF tokens' 16-byte pieces
-- of X and dY first (loads in flight together), then the FMAs. blockIdx.y (the slice) is the slow
-- grid index, so the CTAs running together read one slice of X and dY, which L2 holds (8192
-- tokens x 1024 columns x 2 matrices = 32 MB at the default slice). An incomplete matrix (counter
-- > R) gets NaN gradients.
--
-- BUSY > 0 (not the default; written without a GPU): the busiest units go to dense tensor-core
-- GEMMs instead: ops/hybrid/hybrid_dw_launch.c selects up to BUSY units whose token count is at
-- least ceil(M / 64) into slot_of and scatters their coefficients (hybrid-transpose's stages 4
-- and 5, lib/hybrid_busy.lua), runs this kernel, which takes slot_of as one more argument and
-- skips every unit with slot_of[j] >= 0, then the two GEMMs, and copies their rows out (stage 6).
-- BUSY = 0 generates the kernel it always did.
--
-- Problem: op "hybrid-ffn-dw", M = tokens, N = K = d_model, DFF = d_ff, T = DFF, C = W,
-- out_dtype = the gradients'.
-- Kernel ABI: (const T* X, const T* dY, const unsigned short* values, const int* owner,
--              const unsigned short* backup, const int* counter, const unsigned short* u_values,
--              const unsigned short* u_backup, const float* dg_values, const float* dg_backup,
--              const float* du_values, const float* du_backup, const int* start,
--              const unsigned* list, OutT* dWgT, OutT* dWuT, OutT* dWd, int R, const int* slot_of);
-- X, dY M x D; dWgT, dWuT, dWd DFF x D; row-major, D % 8 == 0; the hybrid arrays as hybrid-gate
-- wrote them (R backup rows), u_* as hybrid-ffn-fwd and dg_*, du_* as hybrid-ffn-dx wrote them;
-- start (DFF + 1) and list as hybrid-transpose built them; slot_of (DFF) only BUSY > 0 reads
-- (its kernel leaves the rows of units with slot_of[j] >= 0 unwritten); BUSY = 0's kernel takes
-- the first 18.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local pair = require "lib.hybrid_list_pair"

local PARAMS = { "THREADS", "VPT", "UB", "PF", "BUSY" }
-- The capacities of the busy units' GEMMs (BUSY > 0): rows of their dense coefficient matrices.
local BUSY_CAPACITIES = { 0, 128, 256, 512 }

local function slice(cfg) return cfg.THREADS * 8 * cfg.VPT end

local function valid(problem, cfg)
  local ok, why = tw.check_hybrid(problem, "hybrid-ffn-dw", PARAMS, cfg, "DFF")
  if not ok then return false, why end
  if problem.N ~= problem.K then return false, string.format("N=%d and K=%d must both be d_model", problem.N, problem.K) end
  if problem.N % 8 ~= 0 then return false, "N (d_model) = " .. problem.N .. " must be a multiple of 8 (16-byte rows)" end
  if not tw.member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "out_dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if not tw.member({ 32, 64, 128, 256 }, cfg.THREADS) then return false, "THREADS=" .. cfg.THREADS .. " must be 32, 64, 128 or 256" end
  if not tw.member({ 1, 2 }, cfg.VPT) then return false, "VPT=" .. cfg.VPT .. " must be 1 or 2" end
  if not tw.member({ 1, 2, 4, 8 }, cfg.UB) then return false, "UB=" .. cfg.UB .. " must be 1, 2, 4 or 8" end
  if not tw.member({ 1, 2, 4 }, cfg.PF) then return false, "PF=" .. cfg.PF .. " must be 1, 2 or 4" end
  if not tw.member(BUSY_CAPACITIES, cfg.BUSY) then
    return false, "BUSY=" .. cfg.BUSY .. " must be 0 (every unit on CUDA cores), 128, 256 or 512 (busy units on tensor cores)"
  end
  if cfg.BUSY > problem.DFF then
    return false, string.format("BUSY=%d: more busy-unit slots than d_ff %d has units", cfg.BUSY, problem.DFF)
  end
  if slice(cfg) > math.max(256, tw.pow2_at_least(problem.N)) then
    return false, string.format("a slice of %d columns (THREADS x 8 x VPT) is wider than d_model %d needs", slice(cfg),
                                problem.N)
  end
  return true
end

local function space(problem)
  return { THREADS = { 32, 64, 128, 256 }, VPT = { 1, 2 }, UB = { 1, 2, 4, 8 }, PF = { 1, 2, 4 }, BUSY = BUSY_CAPACITIES }
end

-- One 16-byte piece a thread, slices of up to 1024 columns (so a slice of X and dY stays in L2),
-- 4 units a CTA, 4 tokens in flight: not measured (written without a GPU). Every unit on CUDA
-- cores (BUSY = 0) until the busy units' GEMMs have run on a GPU.
local function default(problem)
  local t = math.min(128, math.max(32, tw.pow2_at_least(tw.cdiv(problem.N, 8))))
  return { THREADS = t, VPT = 1, UB = 4, PF = 4, BUSY = 0 }
end

local function density(problem) return problem.SPARSITY > 0 and 1 - problem.SPARSITY or 0.01 end

-- Three products of 2 D FLOPs per active pair.
local function flops(problem) return 6.0 * problem.M * problem.N * problem.DFF * density(problem) end

local function bytes(problem)
  -- per active pair an X and a dY row (4 D bytes), its list entry and values (22 bytes); the
  -- three gradients written once
  local pairs = problem.M * problem.DFF * density(problem)
  local osz = problem.out_dtype == "f32" and 4 or 2
  return pairs * (4 * problem.N + 22) + 3 * problem.DFF * problem.N * osz
end

local function generate(problem, cfg)
  local dt, ot = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local env = {
    prelude = cuda.prelude(problem.dtype), D = problem.N, F = problem.DFF, W = problem.C, M = problem.M,
    THREADS = cfg.THREADS, VPT = cfg.VPT, UB = cfg.UB, PF = cfg.PF, CS = slice(cfg),
    ctype = dt.ctype, otype = ot.ctype, to_f32 = dt.to_f32, out_from_f32 = ot.from_f32,
  }
  env.BUSY = cfg.BUSY
  env.slot_arg = cfg.BUSY > 0 and ", const int* __restrict__ slot_of" or ""
  env.pair_struct = pair.STRUCT
  env.entry = string.format("sj_hybrid_ffn_dw_%s_%s_m%d_d%d_f%d_w%d_t%d_v%d_u%d_p%d%s", problem.dtype, problem.out_dtype,
                            env.M, env.D, env.F, env.W, cfg.THREADS, cfg.VPT, cfg.UB, cfg.PF,
                            cfg.BUSY > 0 and string.format("_b%d", cfg.BUSY) or "")
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
#define D ${D}
#define F ${F}
#define W ${W}
#define ELL ((unsigned)${M} * (unsigned)W)
#define THREADS ${THREADS}
#define VPT ${VPT}
#define UB ${UB}
#define PF ${PF}
#define CS ${CS}
typedef ${ctype} T;
typedef ${otype} OutT;

${pair_struct}
/* The eight 16-bit elements of q as floats. */
__device__ __forceinline__ void sj_unpack8(const uint4 q, float f[8]) {
  const sj_u32 w[4] = { q.x, q.y, q.z, q.w };
#pragma unroll
  for (int k = 0; k < 4; k++) {
    f[2 * k] = ${to_f32}((T)(w[k] & 0xffffu));
    f[2 * k + 1] = ${to_f32}((T)(w[k] >> 16));
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) ${entry}(
    const T* __restrict__ X, const T* __restrict__ dY, const unsigned short* __restrict__ values,
    const int* __restrict__ owner, const unsigned short* __restrict__ backup, const int* __restrict__ counter,
    const unsigned short* __restrict__ u_values, const unsigned short* __restrict__ u_backup,
    const float* __restrict__ dg_values, const float* __restrict__ dg_backup, const float* __restrict__ du_values,
    const float* __restrict__ du_backup, const int* __restrict__ start, const unsigned* __restrict__ list,
    OutT* __restrict__ dWgT, OutT* __restrict__ dWuT, OutT* __restrict__ dWd, int R${slot_arg})
{
  __shared__ sj_pair chunk[THREADS];
  const int tid = threadIdx.x;
  const bool incomplete = *counter > R;   /* the transpose marked nothing: NaN, not a partial sum */
  for (int u = 0; u < UB; u++) {
    const int j = blockIdx.x * UB + u;
    if (j >= F) break;
$ if BUSY > 0 then
    if (slot_of[j] >= 0) continue;   /* a busy unit: its rows come from the GEMMs */
$ end
    float ag[VPT][8], au[VPT][8], ad[VPT][8];
#pragma unroll
    for (int k = 0; k < VPT; k++)
#pragma unroll
      for (int q = 0; q < 8; q++) { ag[k][q] = 0.f; au[k][q] = 0.f; ad[k][q] = 0.f; }
    const int b = incomplete ? 0 : start[j], e = incomplete ? 0 : start[j + 1];
    for (int c0 = b; c0 < e; c0 += THREADS) {
      const int n = min(THREADS, e - c0);
      __syncthreads();   /* the previous chunk is done */
      if (tid < n) {
        const unsigned i = list[c0 + tid];
]], env) .. pair.decode(env) .. emit.render(here(), [[
        chunk[tid] = p;
      }
      __syncthreads();
      for (int q0 = 0; q0 < n; q0 += PF) {
        uint4 xv[PF][VPT], yv[PF][VPT];
#pragma unroll
        for (int p = 0; p < PF; p++) {
          const size_t row = (size_t)chunk[min(q0 + p, n - 1)].t * D;
#pragma unroll
          for (int k = 0; k < VPT; k++) {
            const int c = blockIdx.y * CS + (k * THREADS + tid) * 8;
            xv[p][k] = make_uint4(0u, 0u, 0u, 0u);
            yv[p][k] = xv[p][k];
            if (q0 + p < n && c < D) {
              xv[p][k] = __ldg((const uint4*)(X + row + c));
              yv[p][k] = __ldg((const uint4*)(dY + row + c));
            }
          }
        }
#pragma unroll
        for (int p = 0; p < PF; p++) {
          if (q0 + p >= n) break;
          const sj_pair pr = chunk[q0 + p];
#pragma unroll
          for (int k = 0; k < VPT; k++) {
            float x[8], y[8];
            sj_unpack8(xv[p][k], x);
            sj_unpack8(yv[p][k], y);
#pragma unroll
            for (int q = 0; q < 8; q++) {
              ag[k][q] = fmaf(pr.dg, x[q], ag[k][q]);
              au[k][q] = fmaf(pr.du, x[q], au[k][q]);
              ad[k][q] = fmaf(pr.h, y[q], ad[k][q]);
            }
          }
        }
      }
    }
    const float nan = __int_as_float(0x7fc00000);
#pragma unroll
    for (int k = 0; k < VPT; k++) {
      const int c = blockIdx.y * CS + (k * THREADS + tid) * 8;
      if (c >= D) continue;
      const size_t at = (size_t)j * D + c;
#pragma unroll
      for (int q = 0; q < 8; q++) {
        dWgT[at + q] = ${out_from_f32}(incomplete ? nan : ag[k][q]);
        dWuT[at + q] = ${out_from_f32}(incomplete ? nan : au[k][q]);
        dWd[at + q] = ${out_from_f32}(incomplete ? nan : ad[k][q]);
      }
    }
  }
}
]], env)
  return { source = src, entry = env.entry, grid = { tw.cdiv(problem.DFF, cfg.UB), tw.cdiv(problem.N, slice(cfg)), 1 },
           block = { cfg.THREADS, 1, 1 }, shared = 0 }
end

return {
  name = "hybrid_ffn_dw",
  op = "hybrid-ffn-dw",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
