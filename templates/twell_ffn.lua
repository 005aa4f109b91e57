-- twell_ffn.lua: the fused sparse FFN, Y = (H (.) (X . Wu)) . Wd, from X, TwELL(H), Wu and Wd
-- in one kernel (fp32 accumulation, the up projection computed only at active d_ff units).
--
-- Problem: op "twell-ffn", M = tokens, N = d_model (output), K = d_model (input, N == K),
-- DFF = d_ff, T / C of the TwELL input, out_dtype = Y.
-- Kernel ABI: (const T* X, const unsigned* entries, const int* counts, const T* spill,
--              const T* WuT, const T* Wd, OutT* Y, int M, int D, int F); X is M x D, WuT and Wd
-- are F x D (row j = Wu[:, j] and Wd[j, :]), Y is M x D, all row-major.
--
-- One CTA owns a block of BT = 8*NT tokens for the whole d_ff sweep, so its output block Y_b
-- (BT x D, fp32) lives in registers: warp w holds output columns [16*MT*w, 16*MT*(w+1)).
-- X_b stays in shared memory. The d_ff axis is walked in rounds of RT tiles:
--   1. the union of the block's non-zero columns is built as a bitmask from the TwELL entries
--      (and from the spill for tiles whose count exceeds C: the exact overflow path), then a
--      prefix sum over the mask words lists the active units j in ascending order;
--   2. the list is processed in chunks of UCAP units, padded to groups of 16 (padding repeats
--      a real unit with h = 0, so it adds exact zeros);
--   3. up: U^T[16 j x BT] = WuT[j, :] . X_b^T on mma.sync m16n8k16 with the units as M and the
--      tokens as N; the (group, 64-wide k chunk) work is split evenly over the warps and the
--      partial products, times h, are added into P (fp32, shared memory);
--   4. down: every warp multiplies P^T (rounded to the input dtype) with the Wd rows of the
--      group over its own output columns: Y_b^T += Wd[J, cols]^T . P^T.
-- The k order of the up product and the output-column order of the down product are
-- permuted inside each 64-wide chunk so every copy instruction reads whole sectors; the
-- weights stream through per-thread cp.async staging (each thread reads back only what it
-- copied, so no barrier guards the ring).
--
-- Traffic: a token block reads the WuT and Wd rows of the union of its tokens' active units,
-- 4*D bytes per unit: the limit of the kernel is how many distinct units a block activates.
-- (On an H200 those rows streamed at 2.2-2.4 TB/s whatever WARPS and STAGES while the up
-- phase's copies each touched half of four 32-byte sectors; they now read whole ones.)
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"

local PARAMS = { "WARPS", "NT", "ROUND", "UCAP", "STAGES" }

-- Geometry derived from problem and config (all compile-time constants of the kernel).
local function geometry(problem, cfg)
  local g = {}
  g.D = problem.N
  g.BT = 8 * cfg.NT
  g.KCH = tw.cdiv(g.D, 64)
  g.XLD = g.KCH * 64 + 8                       -- X_b row pitch (elements): 16-byte skew per row
  g.MT = tw.cdiv(g.D, cfg.WARPS * 64) * 4       -- m16 tiles per warp in the down product
  g.n_tiles = tw.cdiv(problem.DFF, problem.T)
  g.RT = math.max(1, math.min(cfg.ROUND // problem.T, g.n_tiles))
  g.RCOLS = g.RT * problem.T
  g.MASKW = tw.cdiv(g.RCOLS, 32)
  g.USLD = cfg.UCAP + 8                         -- P row pitch (floats): conflict-free float2 reads
  local function align16(x) return (x + 15) // 16 * 16 end
  g.XS_BYTES = align16(g.BT * g.XLD * 2)
  g.STG_BYTES = cfg.STAGES * cfg.WARPS * 4 * 32 * 16
  g.US_BYTES = align16(g.BT * g.USLD * 4)
  g.HG_BYTES = align16(g.BT * cfg.UCAP * 2)
  g.JL_BYTES = align16((g.RCOLS + 16) * 2)
  g.MASK_BYTES = align16(g.MASKW * 4)
  g.CNT_BYTES = align16(g.BT * g.RT * 4)
  g.smem = g.XS_BYTES + g.STG_BYTES + g.US_BYTES + g.HG_BYTES + g.JL_BYTES + 2 * g.MASK_BYTES + g.CNT_BYTES + 16
  g.acc = g.MT * cfg.NT * 4
  return g
end

local function valid(problem, cfg)
  local ok, why = tw.check_ints(PARAMS, cfg)
  if not ok then return false, why end
  ok, why = tw.check_problem(problem, "twell-ffn")
  if not ok then return false, why end
  if not tw.member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "out_dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if problem.N ~= problem.K then
    return false, string.format("N=%d (d_model out) must equal K=%d (d_model in)", problem.N, problem.K)
  end
  if problem.N % 8 ~= 0 then return false, "d_model=" .. problem.N .. " must be a multiple of 8" end
  if problem.DFF < 1 then return false, "DFF must be > 0" end
  if cfg.WARPS ~= 8 and cfg.WARPS ~= 16 then return false, "WARPS must be 8 or 16" end
  if cfg.NT ~= 1 and cfg.NT ~= 2 then return false, "NT must be 1 or 2" end
  if not tw.member({ 1024, 4096, 16384 }, cfg.ROUND) then return false, "ROUND must be 1024, 4096 or 16384" end
  if not tw.member({ 128, 256, 512, 1024 }, cfg.UCAP) then return false, "UCAP must be 128, 256, 512 or 1024" end
  if cfg.STAGES < 2 or cfg.STAGES > 6 then return false, "STAGES must be 2..6" end
  local g = geometry(problem, cfg)
  if g.RCOLS > 65536 then return false, "round of " .. g.RCOLS .. " columns exceeds the 16-bit unit list" end
  -- 65536 registers per SM, one CTA per SM: the fp32 output block must leave room for the rest
  local acc_cap = cfg.WARPS == 16 and 64 or 128
  if g.acc > acc_cap then
    return false, string.format("%d output accumulators per thread exceed %d (d_model=%d, WARPS=%d, NT=%d)",
                                g.acc, acc_cap, g.D, cfg.WARPS, cfg.NT)
  end
  if g.smem > tw.smem_limit(problem) then
    return false, string.format("shared memory %d bytes exceeds the target's %d", g.smem, tw.smem_limit(problem))
  end
  return true
end

local function space(problem)
  return { WARPS = { 8, 16 }, NT = { 1, 2 }, ROUND = { 1024, 4096, 16384 }, UCAP = { 128, 256, 512, 1024 },
           STAGES = { 2, 3, 4, 6 } }
end

local DEFAULTS = {
  { WARPS = 8, NT = 2, ROUND = 16384, UCAP = 512, STAGES = 4 },
  { WARPS = 8, NT = 1, ROUND = 16384, UCAP = 512, STAGES = 4 },
  { WARPS = 8, NT = 1, ROUND = 4096, UCAP = 256, STAGES = 3 },
  { WARPS = 16, NT = 1, ROUND = 4096, UCAP = 256, STAGES = 2 },
  { WARPS = 8, NT = 1, ROUND = 1024, UCAP = 128, STAGES = 2 },
}

-- NT = 2 halves the weight rows read per token when blocks share units, but costs registers:
-- take it where it fits, else one n-tile of 8 tokens.
-- (A problem no config supports gets the last candidate, so the generator reports the reason.)
local function default(problem)
  local cfg
  for _, d in ipairs(DEFAULTS) do
    cfg = { WARPS = d.WARPS, NT = d.NT, ROUND = d.ROUND, UCAP = d.UCAP, STAGES = d.STAGES }
    if valid(problem, cfg) then return cfg end
  end
  return cfg
end

-- Useful work at full density would be 2 GEMMs; the kernel does the active units only, which
-- a template cannot know, so flops() reports the dense equivalent (the bench counts the rest).
local function flops(problem) return 4.0 * problem.M * problem.N * problem.DFF end

local function bytes(problem)
  local osz = cuda.dtype(problem.out_dtype).size
  return problem.M * problem.N * (2 + osz)
end

local function generate(problem, cfg)
  local dt = cuda.dtype(problem.dtype)
  local ot = cuda.dtype(problem.out_dtype)
  local g = geometry(problem, cfg)
  local env = {
    WARPS = cfg.WARPS, NT = cfg.NT, UCAP = cfg.UCAP, STAGES = cfg.STAGES, TT = problem.T, CAP = problem.C,
    ctype = dt.ctype, otype = ot.ctype, to_f32 = dt.to_f32, pack2 = dt.pack2, out_f16 = ot.size == 2,
    opack2 = ot.pack2,
  }
  for k, v in pairs(g) do env[k] = v end
  env.entry = string.format("sj_twell_ffn_%s_%s_t%dc%d_d%d_f%d_w%d_nt%d_r%d_u%d_s%d", problem.dtype, problem.out_dtype,
                            problem.T, problem.C, g.D, problem.DFF, cfg.WARPS, cfg.NT, g.RCOLS, cfg.UCAP, cfg.STAGES)
  local src = emit.render(here(), [[
#define BT ${BT}
#define NT ${NT}
#define WARPS ${WARPS}
#define THREADS (WARPS * 32)
#define TT ${TT}
#define CAP ${CAP}
#define RT ${RT}
#define RCOLS ${RCOLS}
#define MASKW ${MASKW}
#define UCAP ${UCAP}
#define USLD ${USLD}
#define MT ${MT}
#define QN (MT / 4)
#define KCH ${KCH}
#define XLD ${XLD}
#define STAGES ${STAGES}
typedef ${ctype} T;
typedef ${otype} OutT;

/* Thread-private cp.async staging: [stage][warp][piece 0..3][lane] x 16 bytes. */
__device__ __forceinline__ unsigned char* sj_stage(unsigned char* stg, int stage, int warp, int piece, int lane) {
  return stg + ((((stage * WARPS + warp) * 4 + piece) * 32 + lane) << 4);
}

/* The up product's weights of one (group, 64-wide k chunk) for this thread: 16-byte pieces of
 * rows ra (unit g) and rb (unit g + 8) at chunk columns k = 8t and k + 32, so each copy
 * instruction of the warp reads whole 32-byte sectors (two per row); columns past D read as 0. */
__device__ __forceinline__ void sj_ffn_up_load(unsigned char* stg, int stage, int warp, int lane, const T* ra,
                                               const T* rb, const T* any, int k, int D) {
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 0, lane)), k < D ? ra + k : any, k < D ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 1, lane)), k + 32 < D ? ra + k + 32 : any, k + 32 < D ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 2, lane)), k < D ? rb + k : any, k < D ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 3, lane)), k + 32 < D ? rb + k + 32 : any, k + 32 < D ? 16 : 0);
}

/* Position in the round's unit list of round-local column c (set in mask). */
__device__ __forceinline__ int sj_pos(const unsigned* mask, const int* pref, int c) {
  return pref[c >> 5] + __popc(mask[c >> 5] & ((1u << (c & 31)) - 1u));
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${entry}(
    const T* __restrict__ X, const unsigned* __restrict__ entries, const int* __restrict__ counts,
    const T* __restrict__ spill, const T* __restrict__ WuT, const T* __restrict__ Wd,
    OutT* __restrict__ Y, int M, int D, int F)
{
  extern __shared__ __align__(16) unsigned char smem[];
  T* Xs = (T*)smem;                                               /* BT x XLD */
  unsigned char* stg = smem + ${XS_BYTES};                        /* staging ring */
  float* Us = (float*)(stg + ${STG_BYTES});                       /* P, BT x USLD */
  unsigned short* Hg = (unsigned short*)((unsigned char*)Us + ${US_BYTES});   /* h, BT x UCAP */
  unsigned short* jl = (unsigned short*)((unsigned char*)Hg + ${HG_BYTES});   /* unit list */
  unsigned* mask = (unsigned*)((unsigned char*)jl + ${JL_BYTES});
  int* pref = (int*)((unsigned char*)mask + ${MASK_BYTES});
  int* cnts = (int*)((unsigned char*)pref + ${MASK_BYTES});     /* the round's counts, BT x RT */
  int* nsh = (int*)((unsigned char*)cnts + ${CNT_BYTES});
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int r0 = blockIdx.x * BT;
  if (r0 >= M) return;                /* a grid larger than the shape needs does nothing */
  const int n_tiles = (F + TT - 1) / TT;

  /* X_b -> shared memory (rows past M and columns past D are zero). */
  for (int c = tid; c < BT * KCH * 8; c += THREADS) {
    const int r = c / (KCH * 8), ch = c % (KCH * 8), gr = r0 + r, gk = ch * 8;
    const bool ok = gr < M && gk < D;
    sj_cp_async16(sj_smem_addr(Xs + r * XLD + gk), ok ? X + (size_t)gr * D + gk : X, ok ? 16 : 0);
  }
  sj_cp_async_commit();

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int n = 0; n < NT; n++) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.f;
  const int n0 = warp * (16 * MT);                                 /* this warp's output columns */

  for (int tile0 = 0; tile0 < n_tiles; tile0 += RT) {
    /* 1a. clear the union mask; the round's counts -> shared memory (0 past M or the last tile) */
    for (int i = tid; i < MASKW; i += THREADS) mask[i] = 0u;
    for (int it = tid; it < BT * RT; it += THREADS) {
      const int row = r0 + it / RT, tile = tile0 + it % RT;
      cnts[it] = row < M && tile < n_tiles ? counts[(size_t)row * n_tiles + tile] : 0;
    }
    __syncthreads();
    /* 1b. set a bit per non-zero (token, column); one thread per (token, tile) */
    for (int it = tid; it < BT * RT; it += THREADS) {
      const int cnt = cnts[it];
      if (!cnt) continue;
      const int tok = it / RT, tl = it % RT, tile = tile0 + tl, row = r0 + tok;
      const size_t cell = (size_t)row * n_tiles + tile;
      if (cnt <= CAP) {
        const unsigned* e = entries + cell * CAP;
        for (int i0 = 0; i0 < cnt; i0 += 8) {                      /* 8 loads in flight */
          unsigned v[8];
#pragma unroll
          for (int j = 0; j < 8; j++) v[j] = i0 + j < cnt ? __ldg(e + i0 + j) : 0u;
#pragma unroll
          for (int j = 0; j < 8; j++)
            if (i0 + j < cnt) { const int c = tl * TT + (int)(v[j] >> 16); atomicOr(&mask[c >> 5], 1u << (c & 31)); }
        }
      } else {                                                     /* overflow: the dense spill */
        const unsigned short* sp = (const unsigned short*)spill + (size_t)row * F + (size_t)tile * TT;
        const int w = min(TT, F - tile * TT);
        for (int i = 0; i < w; i++)
          if (sj_twell_nz(__ldg(sp + i))) { const int c = tl * TT + i; atomicOr(&mask[c >> 5], 1u << (c & 31)); }
      }
    }
    __syncthreads();
    /* 1c. prefix sum over the mask words and the ascending unit list (warp 0) */
    if (warp == 0) {
      int run = 0;
      for (int w0 = 0; w0 < MASKW; w0 += 32) {
        const int w = w0 + lane;
        unsigned m = w < MASKW ? mask[w] : 0u;
        const int c = __popc(m);
        int incl = c;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, incl, off);
          if (lane >= off) incl += y;
        }
        int p = run + incl - c;
        if (w < MASKW) pref[w] = p;
        while (m) {
          const int b = __ffs(m) - 1;
          m &= m - 1u;
          jl[p++] = (unsigned short)(w * 32 + b);
        }
        run += __shfl_sync(0xffffffffu, incl, 31);
      }
      __syncwarp();
      /* pad the last group of 16 with a real unit; its h stays 0 */
      for (int p = run + lane; p < ((run + 15) & ~15); p += 32) jl[p] = jl[0];
      if (lane == 0) nsh[0] = run;
    }
    __syncthreads();
    const int nu = nsh[0];
    const T* WuR = WuT + (size_t)tile0 * TT * D;                   /* this round's first unit row */
    const T* WdR = Wd + (size_t)tile0 * TT * D;

    for (int c0 = 0; c0 < nu; c0 += UCAP) {
      const int nc = min(UCAP, nu - c0), ng = (nc + 15) >> 4;
      /* 2a. zero P and h of this chunk */
      for (int i = tid; i < BT * USLD; i += THREADS) Us[i] = 0.f;
      for (int i = tid; i < BT * UCAP / 2; i += THREADS) ((unsigned*)Hg)[i] = 0u;
      __syncthreads();
      /* 2b. h of the chunk's units, by token */
      for (int it = tid; it < BT * RT; it += THREADS) {
        const int cnt = cnts[it];
        if (!cnt) continue;
        const int tok = it / RT, tl = it % RT, tile = tile0 + tl, row = r0 + tok;
        const size_t cell = (size_t)row * n_tiles + tile;
        if (cnt <= CAP) {
          const unsigned* e = entries + cell * CAP;
          for (int i0 = 0; i0 < cnt; i0 += 8) {
            unsigned v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = i0 + j < cnt ? __ldg(e + i0 + j) : 0u;
#pragma unroll
            for (int j = 0; j < 8; j++) {
              if (i0 + j >= cnt) continue;
              const int p = sj_pos(mask, pref, tl * TT + (int)(v[j] >> 16)) - c0;
              if (p >= 0 && p < nc) Hg[tok * UCAP + p] = (unsigned short)(v[j] & 0xffffu);
            }
          }
        } else {
          const unsigned short* sp = (const unsigned short*)spill + (size_t)row * F + (size_t)tile * TT;
          const int w = min(TT, F - tile * TT);
          for (int i = 0; i < w; i++) {
            const unsigned short v = __ldg(sp + i);
            if (!sj_twell_nz(v)) continue;
            const int p = sj_pos(mask, pref, tl * TT + i) - c0;
            if (p >= 0 && p < nc) Hg[tok * UCAP + p] = v;
          }
        }
      }
      sj_cp_async_wait<0>();                                        /* X_b (first chunk) */
      __syncthreads();

      /* 3. up: (group, k chunk) units of work, split evenly over the warps */
      {
        const int total = ng * KCH, fb = warp * total / WARPS, fe = (warp + 1) * total / WARPS;
        int fp = fb;                                                /* next unit to prefetch */
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
          if (fp < fe) {
            const int grp = fp / KCH, k = (fp % KCH) * 64 + 8 * t;
            sj_ffn_up_load(stg, s, warp, lane, WuR + (size_t)jl[c0 + grp * 16 + g] * D, WuR + (size_t)jl[c0 + grp * 16 + g + 8] * D, WuT, k, D);
            fp++;
          }
          sj_cp_async_commit();
        }
        float u[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) u[n][0] = u[n][1] = u[n][2] = u[n][3] = 0.f;
        int stage = 0;
        for (int f = fb; f < fe; f++) {
          sj_cp_async_wait<STAGES - 2>();
          if (fp < fe) {
            const int ps = (stage + STAGES - 1) % STAGES;
            const int grp = fp / KCH, k = (fp % KCH) * 64 + 8 * t;
            sj_ffn_up_load(stg, ps, warp, lane, WuR + (size_t)jl[c0 + grp * 16 + g] * D, WuR + (size_t)jl[c0 + grp * 16 + g + 8] * D, WuT, k, D);
            fp++;
          }
          sj_cp_async_commit();
          const int grp = f / KCH, kc = f % KCH;
          const uint4 pa0 = *(const uint4*)sj_stage(stg, stage, warp, 0, lane);
          const uint4 pa1 = *(const uint4*)sj_stage(stg, stage, warp, 1, lane);
          const uint4 pb0 = *(const uint4*)sj_stage(stg, stage, warp, 2, lane);
          const uint4 pb1 = *(const uint4*)sj_stage(stg, stage, warp, 3, lane);
#pragma unroll
          for (int n = 0; n < NT; n++) {
            const T* xr = Xs + (g + 8 * n) * XLD + kc * 64 + 8 * t;
            const uint4 x0 = *(const uint4*)xr, x1 = *(const uint4*)(xr + 32);
            /* k order inside the chunk: logical (2t+e | 2t+8+e) of step s = 32(s/2) + 8t + 4(s%2) + (e | 2+e) */
            sj_u32 a[4], b[2];
            a[0] = pa0.x; a[1] = pb0.x; a[2] = pa0.y; a[3] = pb0.y; b[0] = x0.x; b[1] = x0.y; sj_mma_16816(u[n], a, b);
            a[0] = pa0.z; a[1] = pb0.z; a[2] = pa0.w; a[3] = pb0.w; b[0] = x0.z; b[1] = x0.w; sj_mma_16816(u[n], a, b);
            a[0] = pa1.x; a[1] = pb1.x; a[2] = pa1.y; a[3] = pb1.y; b[0] = x1.x; b[1] = x1.y; sj_mma_16816(u[n], a, b);
            a[0] = pa1.z; a[1] = pb1.z; a[2] = pa1.w; a[3] = pb1.w; b[0] = x1.z; b[1] = x1.w; sj_mma_16816(u[n], a, b);
          }
          if (kc == KCH - 1 || f == fe - 1) {                      /* end of this warp's share of a group */
            const int pg = grp * 16 + g, ph = pg + 8;
#pragma unroll
            for (int n = 0; n < NT; n++) {
              const int t0 = 2 * t + 8 * n, t1 = t0 + 1;
              atomicAdd(&Us[t0 * USLD + pg], u[n][0] * ${to_f32}(Hg[t0 * UCAP + pg]));
              atomicAdd(&Us[t1 * USLD + pg], u[n][1] * ${to_f32}(Hg[t1 * UCAP + pg]));
              atomicAdd(&Us[t0 * USLD + ph], u[n][2] * ${to_f32}(Hg[t0 * UCAP + ph]));
              atomicAdd(&Us[t1 * USLD + ph], u[n][3] * ${to_f32}(Hg[t1 * UCAP + ph]));
              u[n][0] = u[n][1] = u[n][2] = u[n][3] = 0.f;
            }
          }
          stage = stage + 1 == STAGES ? 0 : stage + 1;
        }
      }
      __syncthreads();

      /* 4. down: Y_b^T[cols of this warp] += Wd[J, cols]^T . P^T, group by group */
      {
        const int total = ng * QN;
        int fp = 0;
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
          if (fp < total) {
            const int grp = fp / QN, col = n0 + (fp % QN) * 64 + 8 * g;
            const int p0 = c0 + grp * 16 + 2 * t;
            const bool ok = col < D;
            sj_cp_async16(sj_smem_addr(sj_stage(stg, s, warp, 0, lane)), ok ? WdR + (size_t)jl[p0] * D + col : Wd, ok ? 16 : 0);
            sj_cp_async16(sj_smem_addr(sj_stage(stg, s, warp, 1, lane)), ok ? WdR + (size_t)jl[p0 + 1] * D + col : Wd, ok ? 16 : 0);
            sj_cp_async16(sj_smem_addr(sj_stage(stg, s, warp, 2, lane)), ok ? WdR + (size_t)jl[p0 + 8] * D + col : Wd, ok ? 16 : 0);
            sj_cp_async16(sj_smem_addr(sj_stage(stg, s, warp, 3, lane)), ok ? WdR + (size_t)jl[p0 + 9] * D + col : Wd, ok ? 16 : 0);
            fp++;
          }
          sj_cp_async_commit();
        }
        int stage = 0;
        for (int grp = 0; grp < ng; grp++) {
          /* P^T fragment of the group: k = units 2t, 2t+1 | 2t+8, 2t+9; n = token g (+8n) */
          sj_u32 b[NT][2];
#pragma unroll
          for (int n = 0; n < NT; n++) {
            const float* pr = Us + (g + 8 * n) * USLD + grp * 16 + 2 * t;
            const float2 lo = *(const float2*)pr, hi = *(const float2*)(pr + 8);
            b[n][0] = ${pack2}(lo.x, lo.y);
            b[n][1] = ${pack2}(hi.x, hi.y);
          }
#pragma unroll
          for (int q = 0; q < QN; q++) {
            sj_cp_async_wait<STAGES - 2>();
            if (fp < total) {
              const int ps = (stage + STAGES - 1) % STAGES;
              const int pgrp = fp / QN, col = n0 + (fp % QN) * 64 + 8 * g;
              const int p0 = c0 + pgrp * 16 + 2 * t;
              const bool ok = col < D;
              sj_cp_async16(sj_smem_addr(sj_stage(stg, ps, warp, 0, lane)), ok ? WdR + (size_t)jl[p0] * D + col : Wd, ok ? 16 : 0);
              sj_cp_async16(sj_smem_addr(sj_stage(stg, ps, warp, 1, lane)), ok ? WdR + (size_t)jl[p0 + 1] * D + col : Wd, ok ? 16 : 0);
              sj_cp_async16(sj_smem_addr(sj_stage(stg, ps, warp, 2, lane)), ok ? WdR + (size_t)jl[p0 + 8] * D + col : Wd, ok ? 16 : 0);
              sj_cp_async16(sj_smem_addr(sj_stage(stg, ps, warp, 3, lane)), ok ? WdR + (size_t)jl[p0 + 9] * D + col : Wd, ok ? 16 : 0);
              fp++;
            }
            sj_cp_async_commit();
            /* rows j(2t), j(2t+1), j(2t+8), j(2t+9), output columns col .. col+7 */
            const uint4 w0 = *(const uint4*)sj_stage(stg, stage, warp, 0, lane);
            const uint4 w1 = *(const uint4*)sj_stage(stg, stage, warp, 1, lane);
            const uint4 w2 = *(const uint4*)sj_stage(stg, stage, warp, 2, lane);
            const uint4 w3 = *(const uint4*)sj_stage(stg, stage, warp, 3, lane);
            const sj_u32 r0w[4] = { w0.x, w0.y, w0.z, w0.w }, r1w[4] = { w1.x, w1.y, w1.z, w1.w };
            const sj_u32 r2w[4] = { w2.x, w2.y, w2.z, w2.w }, r3w[4] = { w3.x, w3.y, w3.z, w3.w };
            /* m tile 4q+i: row g is output col+2i, row g+8 is col+2i+1 */
#pragma unroll
            for (int i = 0; i < 4; i++) {
              sj_u32 a[4];
              a[0] = __byte_perm(r0w[i], r1w[i], 0x5410);
              a[1] = __byte_perm(r0w[i], r1w[i], 0x7632);
              a[2] = __byte_perm(r2w[i], r3w[i], 0x5410);
              a[3] = __byte_perm(r2w[i], r3w[i], 0x7632);
#pragma unroll
              for (int n = 0; n < NT; n++) sj_mma_16816(acc[4 * q + i][n], a, b[n]);
            }
            stage = stage + 1 == STAGES ? 0 : stage + 1;
          }
        }
      }
      __syncthreads();
    }
  }

  sj_cp_async_wait<0>();                                          /* nothing left in flight */
  /* Y: token 2t (+8n) gets c0/c2 of the four m tiles of quarter q, token 2t+1 c1/c3. */
#pragma unroll
  for (int q = 0; q < QN; q++) {
    const int col = n0 + q * 64 + 8 * g;
    if (col >= D) continue;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int row = r0 + 2 * t + 8 * n + e;
        if (row >= M) continue;
        float v[8];
#pragma unroll
        for (int i = 0; i < 4; i++) { v[2 * i] = acc[4 * q + i][n][e]; v[2 * i + 1] = acc[4 * q + i][n][2 + e]; }
        OutT* yr = Y + (size_t)row * D + col;
$ if out_f16 then
        uint4 o;
        o.x = ${opack2}(v[0], v[1]); o.y = ${opack2}(v[2], v[3]); o.z = ${opack2}(v[4], v[5]); o.w = ${opack2}(v[6], v[7]);
        *(uint4*)yr = o;
$ else
        *(float4*)yr = make_float4(v[0], v[1], v[2], v[3]);
        *(float4*)(yr + 4) = make_float4(v[4], v[5], v[6], v[7]);
$ end
      }
  }
}
]], env)
  local prelude = cuda.prelude(problem.dtype) .. tw.format_c
  return {
    source = prelude .. src, entry = env.entry,
    grid = { tw.cdiv(problem.M, g.BT), 1, 1 }, block = { cfg.WARPS * 32, 1, 1 }, shared = g.smem,
  }
end

return {
  name = "twell_ffn",
  op = "twell-ffn",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
