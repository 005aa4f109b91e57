-- lib/hybrid_rows.lua: the per-token kernels of the hybrid FFN's training step
-- (templates/hybrid_ffn_fwd.lua, templates/hybrid_ffn_dx.lua). Both walk one token's active
-- units (the hybrid matrix of a = relu(g): its ELL entries, then the non-zeros of its backup row)
-- and do the same two things per unit j: a sampled dot product of the token's dense row with one
-- weight row, then an update of the token's dense output row with one or two weight rows:
--   fwd: u = X[t] . WuT[j] (stored at the pair's position), Y[t] += (a u) Wd[j]
--   dx:  dh = dY[t] . Wd[j]; du = dh a, dg = dh u (stored, fp32, at the pair's position);
--        dX[t] += dg WgT[j] + du WuT[j]
-- so nothing visits an inactive pair, and what the backward keeps is compact (the hybrid
-- positions). CUDA cores: a token's ~1% active units share no structure with the next token's,
-- so there is no MMA tile to fill per token (docs/training.md says where tensor cores fit).
--
-- One CTA per token, THREADS threads; thread i holds columns 8 (k THREADS + i) .. +7 of the
-- token's dense row and of its output accumulators in registers (VPT 16-byte pieces each). The
-- active units are staged in shared memory in chunks of THREADS (the ELL slots in their order,
-- then the backup row's non-zeros in ascending columns, compacted with warp ballots), and each
-- chunk is processed B units at a time: every thread's partial dots of the B units, a warp
-- reduction, one barrier, the warps' partials summed (double-buffered by batch parity, so one
-- barrier per batch), then the B weight rows of the update. Every step is in a fixed order, so
-- results are deterministic. An overflow row without a backup row (unplaced: the gate's backup
-- was too small) is incomplete: its output row is written NaN and nothing else of it.
--
-- SPLIT > 0 (not measured: written without a GPU) is the L2-blocked form, two kernels of the
-- same text that the op launches in stream order (ops/hybrid/hybrid_ffn_api.c), so that the
-- weight rows the resident CTAs read at a time fit the L2 instead of streaming 90 MB matrices
-- from HBM per token:
--   STAGE=0 "range": the sampled products only (u; dh, du, dg), blockIdx = q M + t with the unit
--     range q (d_ff in SPLIT ranges) slowest: CTA (q, t) takes t's active units in range q (its
--     ELL slots filtered and compacted with ballots, then its backup row's range). Each pair's
--     dot is the per-token kernel's (same threads, same reduction), so dg and du are its bits.
--   STAGE=1 "slice": the updates only, blockIdx = q M + t with the column slice q (d_model in
--     SPLIT slices of whole 16-byte pieces) slowest: CTA (q, t) stages all of t's units as the
--     per-token kernel does, with the coefficients STAGE=0 stored at the pairs (fwd: a u, u as
--     stored, in the input dtype; dx: dg and du, fp32), and sums them times the slice of each
--     unit's weight rows in the same unit order into Y[t] (dX[t]) at the slice's columns. The
--     slices are disjoint: no accumulation across CTAs, deterministic. The one rounding that
--     differs from the per-token kernel: fwd's Y takes u rounded to the dtype (the u the
--     backward reads), not the fp32 dot; the dx's outputs are the same bits.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"

local R = {}

R.PARAMS = { "THREADS", "B", "SPLIT", "STAGE" }
local MAX_VPT = 8   -- 16-byte pieces per thread: 2 x 8 x VPT fp32 registers for row and output

function R.vpt(problem, cfg) return tw.cdiv(problem.N, 8 * cfg.THREADS) end

function R.valid(problem, cfg, op)
  local ok, why = tw.check_hybrid(problem, op, R.PARAMS, cfg, "DFF")
  if not ok then return false, why end
  if problem.N ~= problem.K then
    return false, string.format("N=%d and K=%d must both be d_model", problem.N, problem.K)
  end
  if problem.N % 8 ~= 0 then return false, "N (d_model) = " .. problem.N .. " must be a multiple of 8 (16-byte rows)" end
  if not tw.member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "out_dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if not tw.member({ 128, 256, 512 }, cfg.THREADS) then return false, "THREADS=" .. cfg.THREADS .. " must be 128, 256 or 512" end
  if not tw.member({ 4, 8, 16 }, cfg.B) then return false, "B=" .. cfg.B .. " must be 4, 8 or 16" end
  if R.vpt(problem, cfg) > MAX_VPT then
    return false, string.format("d_model %d needs %d 16-byte pieces per thread at THREADS=%d; at most %d",
                                problem.N, R.vpt(problem, cfg), cfg.THREADS, MAX_VPT)
  end
  if cfg.THREADS > math.max(128, tw.pow2_at_least(problem.N // 8)) then
    return false, "THREADS=" .. cfg.THREADS .. " is more than d_model " .. problem.N .. " needs (8 columns a thread)"
  end
  return R.valid_split(problem, cfg)
end

-- SPLIT and STAGE: the L2-blocked form's ranges of d_ff and slices of d_model, and its kernel.
local MIN_SLICE_PIECES, MIN_RANGE_UNITS = 32, 128
function R.valid_split(problem, cfg)
  if not tw.member({ 0, 4, 8, 16 }, cfg.SPLIT) then
    return false, "SPLIT=" .. cfg.SPLIT .. " must be 0 (one kernel per token), 4, 8 or 16 (the L2-blocked pair of kernels)"
  end
  if cfg.STAGE ~= 0 and cfg.STAGE ~= 1 then
    return false, "STAGE=" .. cfg.STAGE .. " must be 0 (the op's kernel) or 1 (the column-slice updates of SPLIT > 0)"
  end
  if cfg.SPLIT == 0 then
    if cfg.STAGE == 1 then return false, "STAGE=1 (the column-slice updates) is the second kernel of SPLIT > 0; SPLIT is 0" end
    return true
  end
  local pieces = problem.N // 8
  if pieces < MIN_SLICE_PIECES * cfg.SPLIT then
    return false, string.format("SPLIT=%d: d_model %d has %d 16-byte pieces; a column slice needs at least %d (a warp's), "
                                .. "so SPLIT <= %d", cfg.SPLIT, problem.N, pieces, MIN_SLICE_PIECES, pieces // MIN_SLICE_PIECES)
  end
  if problem.DFF < MIN_RANGE_UNITS * cfg.SPLIT then
    return false, string.format("SPLIT=%d: d_ff %d makes unit ranges of fewer than %d units, so SPLIT <= %d", cfg.SPLIT,
                                problem.DFF, MIN_RANGE_UNITS, problem.DFF // MIN_RANGE_UNITS)
  end
  return true
end

-- STAGE stays 0: the op launches STAGE=1 itself after a SPLIT > 0 kernel.
function R.space(problem) return { THREADS = { 128, 256, 512 }, B = { 4, 8, 16 }, SPLIT = { 0, 4, 8, 16 }, STAGE = { 0 } } end

-- Two 16-byte pieces per thread (d_model 2048: 128 threads, 4096: 256), 8 units a batch, and the
-- L2-blocked pair of kernels at `split` (0: none; fwd 4, dx 8: the per-pass working sets
-- bench/NOTES.md counts) where the shape allows it (H100, 2026-12-07, 8192 tokens, 4096 / 11008,
-- bf16, 99%: fwd 2433 us against the per-token kernel's 5125, dx 3521 against 7880;
-- bench/RESULTS.md).
function R.default(problem, split, op)
  local t = math.min(512, math.max(128, tw.pow2_at_least(math.max(1, problem.N // 16))))
  local cfg = { THREADS = t, B = 8, SPLIT = split, STAGE = 0 }
  if not R.valid(problem, cfg, op) then cfg.SPLIT = 0 end
  return cfg
end

-- The tuner's first candidates: the default, and the other form of the same tile (the
-- per-token kernel beside an L2-blocked default, or the reverse where SPLIT fits).
function R.variants(problem, split, op)
  local default = R.default(problem, split, op)
  local other = { THREADS = default.THREADS, B = default.B, SPLIT = default.SPLIT > 0 and 0 or split, STAGE = 0 }
  local out = { default }
  if R.valid(problem, other, op) then out[#out + 1] = other end
  return out
end

-- The declared density (0: unspecified, taken as 1%), as the harness generates it.
function R.density(problem) return problem.SPARSITY > 0 and 1 - problem.SPARSITY or 0.01 end

-- The kernel's shape: "token" (SPLIT=0), "range" (STAGE=0) or "slice" (STAGE=1), and for the
-- slice kernel its columns (whole 16-byte pieces), threads (a warp multiple, at most THREADS) and
-- pieces per thread.
local function kernel_shape(problem, cfg)
  if cfg.SPLIT == 0 then return { kind = "token", threads = cfg.THREADS, vpt = R.vpt(problem, cfg) } end
  if cfg.STAGE == 0 then return { kind = "range", threads = cfg.THREADS, vpt = R.vpt(problem, cfg) } end
  local pieces = tw.cdiv(problem.N // 8, cfg.SPLIT)
  local threads = math.min(cfg.THREADS, 32 * tw.cdiv(pieces, 32))
  return { kind = "slice", threads = threads, vpt = tw.cdiv(pieces, threads), slice = 8 * pieces }
end

-- mode: "fwd" or "dx" (see the top comment).
function R.generate(problem, cfg, mode)
  local dt, ot = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local fwd = mode == "fwd"
  local shape = kernel_shape(problem, cfg)
  local kind = shape.kind
  local env = {
    prelude = cuda.prelude(problem.dtype), D = problem.N, F = problem.DFF, W = problem.C,
    THREADS = shape.threads, WARPS = shape.threads // 32, B = cfg.B, VPT = shape.vpt,
    ctype = dt.ctype, otype = ot.ctype, to_f32 = dt.to_f32, from_f32 = dt.from_f32, out_from_f32 = ot.from_f32,
    fwd = fwd, kind = kind, M = problem.M, SPLIT = cfg.SPLIT, RANGE = tw.cdiv(problem.DFF, math.max(1, cfg.SPLIT)),
    SLICE = shape.slice or 0,
    -- a slice kernel's columns start at its slice (the others' at 0) and end at the slice's end
    first = kind == "slice" and "c_first + " or "", col_end = kind == "slice" and "c_end" or "D",
  }
  local suffix = kind == "token" and "" or string.format("_%ss%d", kind, cfg.SPLIT)
  env.entry = string.format("sj_hybrid_ffn_%s%s_%s_%s_d%d_f%d_w%d_t%d_b%d", mode, suffix, problem.dtype,
                            problem.out_dtype, env.D, env.F, env.W, cfg.THREADS, cfg.B)
  local args
  if fwd then
    args = [[const T* __restrict__ V, const unsigned short* __restrict__ values,
    const unsigned short* __restrict__ columns, const int* __restrict__ nnz, const int* __restrict__ slot,
    const unsigned short* __restrict__ backup, const T* __restrict__ DOTW, const T* __restrict__ UPDW,
    OutT* __restrict__ out, unsigned short* __restrict__ u_values, unsigned short* __restrict__ u_backup,
    int R]]
  else
    args = [[const T* __restrict__ V, const unsigned short* __restrict__ values,
    const unsigned short* __restrict__ columns, const int* __restrict__ nnz, const int* __restrict__ slot,
    const unsigned short* __restrict__ backup, const unsigned short* __restrict__ u_values,
    const unsigned short* __restrict__ u_backup, const T* __restrict__ WgT, const T* __restrict__ WuT,
    const T* __restrict__ DOTW, OutT* __restrict__ out, float* __restrict__ dg_values, float* __restrict__ dg_backup,
    float* __restrict__ du_values, float* __restrict__ du_backup, int R]]
  end
  env.args = args
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
#define D ${D}
#define F ${F}
#define W ${W}
#define THREADS ${THREADS}
#define WARPS ${WARPS}
#define B ${B}
#define VPT ${VPT}
$ if kind == "range" then
#define M ${M}
#define RANGE ${RANGE}
$ elseif kind == "slice" then
#define M ${M}
#define SLICE ${SLICE}
$ end
typedef ${ctype} T;
typedef ${otype} OutT;

__device__ __forceinline__ bool sj_hybrid_nz(unsigned short bits) { return (bits & 0x7fffu) != 0; }

/* Eight 16-bit elements at p (16-byte aligned) as floats. */
__device__ __forceinline__ void sj_load8(const T* p, float f[8]) {
  const uint4 q = __ldg((const uint4*)p);
  const sj_u32 w[4] = { q.x, q.y, q.z, q.w };
#pragma unroll
  for (int k = 0; k < 4; k++) {
    f[2 * k] = ${to_f32}((T)(w[k] & 0xffffu));
    f[2 * k + 1] = ${to_f32}((T)(w[k] >> 16));
  }
}

$ if kind == "slice" then
/* The token's staged units: unit and its coefficients, what the range kernel stored at the pair. */
struct sj_list {
  int j[THREADS];
$   if fwd then
  float h[THREADS];   /* a u, of Wd[j] */
$   else
  float dg[THREADS];  /* of WgT[j] */
  float du[THREADS];  /* of WuT[j] */
$   end
};
$ else
/* The token's staged units: unit, ELL slot (-1: from the backup row), a (and u for the dx). */
struct sj_list {
  int j[THREADS];
  int i[THREADS];
  float a[THREADS];
$ if not fwd then
  float u[THREADS];
$ end
};
$ end

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${entry}(
    ${args})
{
  __shared__ sj_list list;
$ if kind ~= "slice" then
  __shared__ float red[2][B][WARPS];
$ end
  __shared__ int warp_count[WARPS];
$ if kind == "token" then
  const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
$ else
  /* the range (slice) is the slow index: the CTAs resident together read one range of weight
   * rows (one column slice of them), which stays in the L2 */
  const int which = blockIdx.x / M, t = blockIdx.x - which * M, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
$ end
$ if kind == "range" then
  const int lo = which * RANGE, hi = min(F, lo + RANGE);
$ elseif kind == "slice" then
  const int c_first = which * SLICE, c_end = min(D, c_first + SLICE);
$ end
  const int n = nnz[t], e = min(n, W);
  int s = -1;
  if (n > W) {
    s = slot[t];
    if (s < 0 || s >= R) {
$ if kind == "range" then
      return;   /* the slice kernel writes the output row NaN */
$ else
      for (int c = ${first}tid; c < ${col_end}; c += THREADS) out[(size_t)t * D + c] = ${out_from_f32}(__int_as_float(0x7fc00000));
      return;
$ end
    }
  }
$ if kind == "slice" then
  float acc[VPT][8];
#pragma unroll
  for (int k = 0; k < VPT; k++)
#pragma unroll
    for (int q = 0; q < 8; q++) acc[k][q] = 0.f;
$ else
$   local acc = kind == "token"   -- the range kernel updates nothing
  float v[VPT][8]${acc and ", acc[VPT][8]" or ""};
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int c0 = (k * THREADS + tid) * 8;
#pragma unroll
    for (int q = 0; q < 8; q++) { v[k][q] = 0.f;${acc and " acc[k][q] = 0.f;" or ""} }
    if (c0 < D) sj_load8(V + (size_t)t * D + c0, v[k]);
  }
$ end
$ if kind ~= "slice" then
  int parity = 0;
$ end
$ if kind == "range" then
  /* chunks of up to THREADS candidates: the ELL slots, then the range's positions of the backup
   * row; ch, and so every branch holding a barrier, is uniform over the block */
  const int ell_chunks = (e + THREADS - 1) / THREADS, chunks = ell_chunks + (s >= 0 ? (hi - lo + THREADS - 1) / THREADS : 0);
$ else
  /* chunks of up to THREADS units: the ELL slots, then the backup row's non-zeros in ascending
   * columns; ch, and so every branch holding a barrier, is uniform over the block */
  const int ell_chunks = (e + THREADS - 1) / THREADS, chunks = ell_chunks + (s >= 0 ? (F + THREADS - 1) / THREADS : 0);
$ end
  for (int ch = 0; ch < chunks; ch++) {
    int cnt;
    __syncthreads();   /* the previous chunk is done with the list and the counts */
$ if kind == "range" then
    /* the chunk's units in the range, compacted: the ELL slots' (in slot order), the backup's */
    int i = -1, j;
    unsigned short bits = 0;
    bool nz;
    if (ch < ell_chunks) {
      i = ch * THREADS + tid;
      j = i < e ? columns[(size_t)t * W + i] : -1;
      nz = j >= lo && j < hi;
      if (nz) bits = values[(size_t)t * W + i];
    } else {
      j = lo + (ch - ell_chunks) * THREADS + tid;
      bits = j < hi ? backup[(size_t)s * F + j] : (unsigned short)0;
      nz = sj_hybrid_nz(bits);
    }
    {
$ else
    if (ch < ell_chunks) {
      const int i = ch * THREADS + tid;
      if (i < e) {
        const size_t at = (size_t)t * W + i;
        list.j[tid] = columns[at];
$   if kind == "slice" and fwd then
        list.h[tid] = ${to_f32}(values[at]) * ${to_f32}(u_values[at]);
$   elseif kind == "slice" then
        list.dg[tid] = dg_values[at];
        list.du[tid] = du_values[at];
$   else
        list.i[tid] = i;
        list.a[tid] = ${to_f32}(values[at]);
$     if not fwd then
        list.u[tid] = ${to_f32}(u_values[at]);
$     end
$   end
      }
      cnt = min(THREADS, e - ch * THREADS);
    } else {
      const int j = (ch - ell_chunks) * THREADS + tid;
      const unsigned short bits = j < F ? backup[(size_t)s * F + j] : (unsigned short)0;
      const bool nz = sj_hybrid_nz(bits);
$ end
      const unsigned mask = __ballot_sync(0xffffffffu, nz);
      if (lane == 0) warp_count[warp] = __popc(mask);
      __syncthreads();
      int before = 0;
      cnt = 0;
#pragma unroll
      for (int w = 0; w < WARPS; w++) {
        const int c = warp_count[w];
        before += w < warp ? c : 0;
        cnt += c;
      }
      if (nz) {
        const int p = before + __popc(mask & ((1u << lane) - 1u));
        list.j[p] = j;
$ if kind == "slice" and fwd then
        list.h[p] = ${to_f32}(bits) * ${to_f32}(u_backup[(size_t)s * F + j]);
$ elseif kind == "slice" then
        list.dg[p] = dg_backup[(size_t)s * F + j];
        list.du[p] = du_backup[(size_t)s * F + j];
$ elseif kind == "range" then
        list.i[p] = i;
        list.a[p] = ${to_f32}(bits);
$   if not fwd then
        list.u[p] = ${to_f32}(i >= 0 ? u_values[(size_t)t * W + i] : u_backup[(size_t)s * F + j]);
$   end
$ else
        list.i[p] = -1;
        list.a[p] = ${to_f32}(bits);
$   if not fwd then
        list.u[p] = ${to_f32}(u_backup[(size_t)s * F + j]);
$   end
$ end
      }
    }
    __syncthreads();
    /* the chunk, B units at a time */
    for (int b0 = 0; b0 < cnt; b0 += B) {
      const int nb = min(B, cnt - b0);
$ if kind ~= "slice" then
      float part[B];
#pragma unroll
      for (int b = 0; b < B; b++) {
        part[b] = 0.f;
        if (b < nb) {
          const T* w = DOTW + (size_t)list.j[b0 + b] * D;
#pragma unroll
          for (int k = 0; k < VPT; k++) {
            const int c0 = (k * THREADS + tid) * 8;
            if (c0 < D) {
              float f[8];
              sj_load8(w + c0, f);
#pragma unroll
              for (int q = 0; q < 8; q++) part[b] = fmaf(v[k][q], f[q], part[b]);
            }
          }
        }
      }
#pragma unroll
      for (int b = 0; b < B; b++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) part[b] += __shfl_xor_sync(0xffffffffu, part[b], off);
        if (lane == 0) red[parity][b][warp] = part[b];
      }
      __syncthreads();
$ end
#pragma unroll
      for (int b = 0; b < B; b++) {
        if (b >= nb) continue;
$ if kind == "slice" then
        const int j = list.j[b0 + b];
$ else
        float dot = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) dot += red[parity][b][w];
        const int j = list.j[b0 + b], i = list.i[b0 + b];
        const float a = list.a[b0 + b];
        const size_t at = i >= 0 ? (size_t)t * W + i : (size_t)s * F + j;
$ end
$ if fwd then
$   if kind ~= "slice" then
        /* dot = u; the pair keeps u for the backward, the output gets h = a u times Wd[j] */
        if (tid == b) {
          const unsigned short ub = ${from_f32}(dot);
          if (i >= 0) u_values[at] = ub; else u_backup[at] = ub;
        }
$   end
$   if kind == "token" then
        const float h = a * dot;
$   elseif kind == "slice" then
        const float h = list.h[b0 + b];
$   end
$   if kind ~= "range" then
        const T* w1 = UPDW + (size_t)j * D;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
          const int c0 = ${first}(k * THREADS + tid) * 8;
          if (c0 < ${col_end}) {
            float f[8];
            sj_load8(w1 + c0, f);
#pragma unroll
            for (int q = 0; q < 8; q++) acc[k][q] = fmaf(h, f[q], acc[k][q]);
          }
        }
$   end
$ else
$   if kind == "slice" then
        const float dg = list.dg[b0 + b], du = list.du[b0 + b];
$   else
        /* dot = dh = dY[t] . Wd[j]; du = dh a, dg = dh u (relu' = 1 at an active pair) */
        const float du = dot * a, dg = dot * list.u[b0 + b];
        if (tid == b) {
          (i >= 0 ? dg_values : dg_backup)[at] = dg;
          (i >= 0 ? du_values : du_backup)[at] = du;
        }
$   end
$   if kind ~= "range" then
        const T* wg = WgT + (size_t)j * D;
        const T* wu = WuT + (size_t)j * D;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
          const int c0 = ${first}(k * THREADS + tid) * 8;
          if (c0 < ${col_end}) {
            float f[8], g[8];
            sj_load8(wg + c0, f);
            sj_load8(wu + c0, g);
#pragma unroll
            for (int q = 0; q < 8; q++) acc[k][q] = fmaf(dg, f[q], fmaf(du, g[q], acc[k][q]));
          }
        }
$   end
$ end
      }
$ if kind ~= "slice" then
      parity ^= 1;
$ end
    }
  }
$ if kind ~= "range" then
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int c0 = ${first}(k * THREADS + tid) * 8;
    if (c0 < ${col_end}) {
#pragma unroll
      for (int q = 0; q < 8; q++) out[(size_t)t * D + c0 + q] = ${out_from_f32}(acc[k][q]);
    }
  }
$ end
}
]], env)
  local grid = kind == "token" and problem.M or cfg.SPLIT * problem.M
  return { source = src, entry = env.entry, grid = { grid, 1, 1 }, block = { shape.threads, 1, 1 }, shared = 0 }
end

return R
