-- lib/twell_blocks.lua: ALGO=0 of templates/twell_ffn.lua, the FFN per block of tokens (its
-- valid() checks what all algorithms share, then B.valid the rest).
--
-- ALGO=0: one CTA owns a block of BT = 8*NT tokens for the whole d_ff sweep, so its output block Y_b
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
-- How the weight rows reach shared memory (PIPE):
--   PIPE=0 (any arch): every thread copies its own 16-byte pieces with cp.async into private
--     staging (each thread reads back only what it copied, so no barrier guards the ring). The
--     k order of the up product and the output-column order of the down product are permuted
--     inside each 64-wide chunk so every copy instruction reads whole sectors.
--   PIPE=1 (sm_90a): a producer warp streams the group's 16 rows with bulk copies (TMA, one
--     instruction per 1 KB row piece, no per-thread address work) into a STAGES-deep ring of
--     16-row x 512-column pieces with full/empty mbarriers, pitch 1040 bytes so ldmatrix reads
--     it conflict free; up and down alternate per group: every consumer warp multiplies its
--     64 (or 32) columns of each piece, the warps' partial U^T meet in shared memory behind one
--     named barrier (double buffered by group), and the down product reads the Wd pieces
--     transposed with ldmatrix. The ring never drains between groups, only between chunks.
--     (On an H200, 8192 tokens, 4096 / 11008, 99%: correct, but the block took 8.6 ms against
--     PIPE=0's 5.3 ms, so the default is PIPE=0; bench/NOTES.md says what to try next.)
-- Which CTA takes which token block (PERSIST):
--   PERSIST=0: one CTA per token block, launched in waves of one per SM.
--   PERSIST=1: one CTA per SM takes blocks blockIdx.x, + gridDim.x, ..., meant to keep the
--     resident CTAs walking d_ff in step so they share weight rows in L2. (On an H200 it is
--     within 4% of PERSIST=0 at every benchmark shape and sparsity: the waves of PERSIST=0
--     already move in step. The default is PERSIST=0; bench/NOTES.md.)
--
-- Traffic: a token block reads the WuT and Wd rows of the union of its tokens' active units,
-- 4*D bytes per unit: the limit of the kernel is how many distinct units a block activates.
-- (On an H200 those rows streamed at 2.2-2.4 TB/s whatever WARPS and STAGES while the up
-- phase's copies each touched half of four 32-byte sectors; they now read whole ones.)
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"

local B = {}

-- Geometry derived from problem and config (all compile-time constants of the kernel).
function B.geometry(problem, cfg)
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
  if cfg.PIPE == 1 then
    g.PIECE = 512                               -- columns of a row piece (1 KB)
    g.NPC = tw.cdiv(g.D, g.PIECE)               -- pieces per row
    g.SLICE = g.PIECE // cfg.WARPS              -- a consumer warp's columns of a piece
    g.MW = g.SLICE // 16                        -- its m16 tiles per piece in the down product
    g.ROWB = g.PIECE * 2 + 16                   -- ring row pitch (bytes): 16-byte skew per row
    g.STAGE_B = 16 * g.ROWB
    g.PLD = 24                                  -- partial U^T row pitch (floats): conflict-free float2 reads
    g.STG_BYTES = cfg.STAGES * g.STAGE_B
    g.US_BYTES = align16(2 * cfg.WARPS * g.BT * g.PLD * 4)
    g.MT = g.NPC * g.MW
  else
    g.STG_BYTES = cfg.STAGES * cfg.WARPS * 4 * 32 * 16
    g.US_BYTES = align16(g.BT * g.USLD * 4)
  end
  g.HG_BYTES = align16(g.BT * cfg.UCAP * 2)
  g.JL_BYTES = align16((g.RCOLS + 16) * 2)
  g.MASK_BYTES = align16(g.MASKW * 4)
  g.CNT_BYTES = align16(g.BT * g.RT * 4)
  g.smem = g.XS_BYTES + g.STG_BYTES + g.US_BYTES + g.HG_BYTES + g.JL_BYTES + 2 * g.MASK_BYTES + g.CNT_BYTES + 16
  if cfg.PIPE == 1 then g.smem = g.smem + 16 * cfg.STAGES end   -- the full / empty mbarriers
  g.acc = g.MT * cfg.NT * 4
  return g
end


-- The checks of ALGO=0's own parameters, after twell_ffn.lua's common ones.
function B.valid(problem, cfg)
  if cfg.UT ~= 1024 or cfg.SLOTS ~= 16 or cfg.DGROUP ~= 0 then
    return false, "ALGO=0 takes UT=1024, SLOTS=16, DGROUP=0 (they belong to ALGO=1 and 2)"
  end
  if cfg.NT ~= 1 and cfg.NT ~= 2 then return false, "NT must be 1 or 2" end
  if not tw.member({ 1024, 4096, 16384 }, cfg.ROUND) then return false, "ROUND must be 1024, 4096 or 16384" end
  if not tw.member({ 128, 256, 512, 1024 }, cfg.UCAP) then return false, "UCAP must be 128, 256, 512 or 1024" end
  if cfg.PIPE ~= 0 and cfg.PIPE ~= 1 then return false, "PIPE must be 0 or 1" end
  if cfg.PERSIST ~= 0 and cfg.PERSIST ~= 1 then return false, "PERSIST must be 0 or 1" end
  if cfg.PIPE == 1 then
    if problem.arch ~= "sm_90a" then return false, "PIPE=1 (bulk copies, mbarriers) needs sm_90a, the target is " .. tostring(problem.arch) end
    local slice = 512 // cfg.WARPS
    if problem.N % slice ~= 0 then
      return false, string.format("PIPE=1 needs d_model=%d a multiple of %d (512 / WARPS)", problem.N, slice)
    end
  end
  local g = B.geometry(problem, cfg)
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


function B.generate(problem, cfg)
  local dt = cuda.dtype(problem.dtype)
  local ot = cuda.dtype(problem.out_dtype)
  local g = B.geometry(problem, cfg)
  local env = {
    WARPS = cfg.WARPS, NT = cfg.NT, UCAP = cfg.UCAP, STAGES = cfg.STAGES, TT = problem.T, CAP = problem.C,
    ctype = dt.ctype, otype = ot.ctype, to_f32 = dt.to_f32, pack2 = dt.pack2, out_f16 = ot.size == 2,
    opack2 = ot.pack2, ofrom = ot.from_f32, PIPE = cfg.PIPE, PERSIST = cfg.PERSIST, hopper = cfg.PIPE == 1 and cuda.hopper() or "",
  }
  for k, v in pairs(g) do env[k] = v end
  env.entry = string.format("sj_twell_ffn_%s_%s_t%dc%d_d%d_f%d_w%d_nt%d_r%d_u%d_s%d_p%d_q%d", problem.dtype,
                            problem.out_dtype, problem.T, problem.C, g.D, problem.DFF, cfg.WARPS, cfg.NT, g.RCOLS,
                            cfg.UCAP, cfg.STAGES, cfg.PIPE, cfg.PERSIST)
  local src = emit.render(here(), [[
#define BT ${BT}
#define NT ${NT}
#define WARPS ${WARPS}
$ if PIPE == 1 then
#define THREADS (WARPS * 32 + 32)    /* + the producer warp */
$ else
#define THREADS (WARPS * 32)
$ end
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
$ if PIPE == 1 then
#define PIECE ${PIECE}
#define NPC ${NPC}
#define SLICE ${SLICE}
#define MW ${MW}
#define ROWB ${ROWB}
#define STAGE_B ${STAGE_B}
#define PLD ${PLD}
#define CONSUMERS (WARPS * 32)
/* sm_90a helpers */ ${hopper}
$ end

$ if PIPE == 0 then
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

/* The down product's weights of one (group, 64-column quarter) for this thread: 16 bytes of Wd
 * rows j(2t), j(2t+1), j(2t+8), j(2t+9) at output columns col .. col+7 (0 past D). */
__device__ __forceinline__ void sj_ffn_down_load(unsigned char* stg, int stage, int warp, int lane, const T* WdR,
                                                 const T* any, const unsigned short* j, int col, int D) {
  const bool ok = col < D;
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 0, lane)), ok ? WdR + (size_t)j[0] * D + col : any, ok ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 1, lane)), ok ? WdR + (size_t)j[1] * D + col : any, ok ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 2, lane)), ok ? WdR + (size_t)j[8] * D + col : any, ok ? 16 : 0);
  sj_cp_async16(sj_smem_addr(sj_stage(stg, stage, warp, 3, lane)), ok ? WdR + (size_t)j[9] * D + col : any, ok ? 16 : 0);
}
$ end

$ if PIPE == 1 then
/* The ring slot of use it, once its pieces have landed. */
__device__ __forceinline__ int sj_ring_acquire(sj_u32 full, int it) {
  const int st = it % STAGES;
  sj_mbar_wait(full + 8 * st, (it / STAGES) & 1);
  return st;
}

/* This consumer warp is done reading slot st. */
__device__ __forceinline__ void sj_ring_release(sj_u32 empty, int st, int lane) {
  __syncwarp();
  if (lane == 0) sj_mbar_arrive(empty + 8 * st);
}
$ end

/* Position in the round's unit list of round-local column c (set in mask). */
__device__ __forceinline__ int sj_pos(const unsigned* mask, const int* pref, int c) {
  return pref[c >> 5] + __popc(mask[c >> 5] & ((1u << (c & 31)) - 1u));
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) ${entry}(
    const T* __restrict__ X, const unsigned* __restrict__ entries, const int* __restrict__ counts,
    const T* __restrict__ spill, const T* __restrict__ WuT, const T* __restrict__ Wd,
    OutT* __restrict__ Y, int M, int D, int F, unsigned* work)
{
  extern __shared__ __align__(16) unsigned char smem[];
  T* Xs = (T*)smem;                                               /* BT x XLD */
  unsigned char* stg = smem + ${XS_BYTES};                        /* staging ring (PIPE=1: the piece ring) */
  float* Us = (float*)(stg + ${STG_BYTES});                       /* P, BT x USLD (PIPE=1: partial U^T) */
  unsigned short* Hg = (unsigned short*)((unsigned char*)Us + ${US_BYTES});   /* h, BT x UCAP */
  unsigned short* jl = (unsigned short*)((unsigned char*)Hg + ${HG_BYTES});   /* unit list */
  unsigned* mask = (unsigned*)((unsigned char*)jl + ${JL_BYTES});
  int* pref = (int*)((unsigned char*)mask + ${MASK_BYTES});
  int* cnts = (int*)((unsigned char*)pref + ${MASK_BYTES});     /* the round's counts, BT x RT */
  int* nsh = (int*)((unsigned char*)cnts + ${CNT_BYTES});
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int n_tiles = (F + TT - 1) / TT;
$ if PIPE == 1 then
  /* full[s]: the 16 row pieces of slot s landed; empty[s]: every consumer warp is done with it.
   * it counts ring uses over the whole kernel, the producer's and each consumer's alike. */
  const sj_u32 full = sj_smem_addr(nsh + 4), empty = full + 8 * STAGES;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      sj_mbar_init(full + 8 * s, 1);
      sj_mbar_init(empty + 8 * s, WARPS);
    }
    sj_mbar_fence_init();           /* visible to the copies after the first __syncthreads */
  }
  int it = 0;
$ end

  const int n0 = warp * (16 * MT);                                 /* this warp's output columns */
$ if PERSIST == 1 then
  /* A CTA per SM takes token blocks blockIdx.x, + gridDim.x, ... in turn, so the resident CTAs
   * sweep d_ff about in step and share the L2's weight rows. */
  for (int blk = blockIdx.x; blk * BT < M; blk += gridDim.x) {
    const int r0 = blk * BT;
$ else
  {
    const int r0 = blockIdx.x * BT;
    if (r0 >= M) return;              /* a grid larger than the shape needs does nothing */
$ end
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
$ if PIPE == 0 then
        for (int i = tid; i < BT * USLD; i += THREADS) Us[i] = 0.f;
$ end
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

$ if PIPE == 1 then
        if (warp == WARPS) {            /* producer: per group the up pieces (WuT), then the down ones (Wd) */
          if (lane == 0) {
            for (int grp = 0; grp < ng; grp++)
              for (int half = 0; half < 2; half++) {
                const T* src = half ? WdR : WuR;
#pragma unroll 1
                for (int p = 0; p < NPC; p++, it++) {
                  const int st = it % STAGES;
                  if (it >= STAGES) sj_mbar_wait(empty + 8 * st, ((it / STAGES) & 1) ^ 1);
                  const int bytes = min(PIECE, D - PIECE * p) * 2;
                  sj_mbar_expect_tx(full + 8 * st, 16 * bytes);
                  const sj_u32 dst = sj_smem_addr(stg + st * STAGE_B);
#pragma unroll
                  for (int r = 0; r < 16; r++)
                    sj_bulk_load(dst + r * ROWB, src + (size_t)jl[c0 + grp * 16 + r] * D + PIECE * p, bytes, full + 8 * st);
                }
              }
          }
          __syncwarp();
        } else {
          /* ldmatrix row addresses: A of the up product (units x k), X_b (tokens x k), and the
           * transposed Wd piece (units x output columns) of the down product */
          const sj_u32 up_row = (lane & 15) * ROWB + (SLICE * warp + 8 * (lane >> 4)) * 2;
          const sj_u32 dn_row = ((lane & 7) + 8 * (lane >> 4)) * ROWB + (SLICE * warp + 8 * ((lane >> 3) & 1)) * 2;
          const sj_u32 x_row = sj_smem_addr(Xs + (lane & 7) * XLD + 8 * (lane >> 3));
          for (int grp = 0; grp < ng; grp++) {
            float u[NT][4];
#pragma unroll
            for (int n = 0; n < NT; n++) u[n][0] = u[n][1] = u[n][2] = u[n][3] = 0.f;
            /* 3. up: U^T (16 units x BT tokens) over this warp's SLICE of every piece */
#pragma unroll
            for (int p = 0; p < NPC; p++, it++) {
              const int st = sj_ring_acquire(full, it);
              if (PIECE * p + SLICE * warp < D) {
                const sj_u32 sb = sj_smem_addr(stg + st * STAGE_B) + up_row;
#pragma unroll
                for (int ks = 0; ks < SLICE / 32; ks++) {   /* two k16 steps */
                  sj_u32 a0[4], a1[4];
                  sj_ldmatrix_x4(a0, sb + ks * 64);
                  sj_ldmatrix_x4(a1, sb + ks * 64 + 32);
#pragma unroll
                  for (int n = 0; n < NT; n++) {
                    sj_u32 xb[4];
                    sj_ldmatrix_x4(xb, x_row + (8 * n * XLD + PIECE * p + SLICE * warp + 32 * ks) * 2);
                    const sj_u32 b0[2] = { xb[0], xb[1] }, b1[2] = { xb[2], xb[3] };
                    sj_mma_16816(u[n], a0, b0);
                    sj_mma_16816(u[n], a1, b1);
                  }
                }
              }
              sj_ring_release(empty, st, lane);
            }
            /* the warps' partials -> P^T fragment (units 2t, 2t+1 | 2t+8, 2t+9 of token g), times h */
            float* pw = Us + ((grp & 1) * WARPS + warp) * BT * PLD;
#pragma unroll
            for (int n = 0; n < NT; n++) {
              const int t0 = 8 * n + 2 * t;
              pw[t0 * PLD + g] = u[n][0];
              pw[(t0 + 1) * PLD + g] = u[n][1];
              pw[t0 * PLD + g + 8] = u[n][2];
              pw[(t0 + 1) * PLD + g + 8] = u[n][3];
            }
            sj_named_sync(1, CONSUMERS);
            sj_u32 b[NT][2];
#pragma unroll
            for (int n = 0; n < NT; n++) {
              const int tok = 8 * n + g;
              float2 lo = make_float2(0.f, 0.f), hi = make_float2(0.f, 0.f);
#pragma unroll
              for (int w = 0; w < WARPS; w++) {
                const float* q = Us + (((grp & 1) * WARPS + w) * BT + tok) * PLD + 2 * t;
                const float2 l = *(const float2*)q, h = *(const float2*)(q + 8);
                lo.x += l.x; lo.y += l.y; hi.x += h.x; hi.y += h.y;
              }
              const unsigned short* hp = Hg + tok * UCAP + grp * 16 + 2 * t;
              b[n][0] = ${pack2}(lo.x * ${to_f32}(hp[0]), lo.y * ${to_f32}(hp[1]));
              b[n][1] = ${pack2}(hi.x * ${to_f32}(hp[8]), hi.y * ${to_f32}(hp[9]));
            }
            /* 4. down: Y_b^T[this warp's SLICE of every piece] += Wd[J, cols]^T . P^T */
#pragma unroll
            for (int p = 0; p < NPC; p++, it++) {
              const int st = sj_ring_acquire(full, it);
              if (PIECE * p + SLICE * warp < D) {
                const sj_u32 sb = sj_smem_addr(stg + st * STAGE_B) + dn_row;
#pragma unroll
                for (int mw = 0; mw < MW; mw++) {
                  sj_u32 a[4];
                  sj_ldmatrix_x4_trans(a, sb + mw * 32);
#pragma unroll
                  for (int n = 0; n < NT; n++) sj_mma_16816(acc[p * MW + mw][n], a, b[n]);
                }
              }
              sj_ring_release(empty, st, lane);
            }
          }
        }
$ else
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
              sj_ffn_down_load(stg, s, warp, lane, WdR, Wd, jl + c0 + grp * 16 + 2 * t, col, D);
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
                sj_ffn_down_load(stg, ps, warp, lane, WdR, Wd, jl + c0 + pgrp * 16 + 2 * t, col, D);
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
$ end
        __syncthreads();
      }
    }

$ if PIPE == 1 then
$ if PERSIST == 1 then
    if (warp < WARPS) {          /* the producer warp holds no output */
$ else
    if (warp == WARPS) return;
    {
$ end
      /* Y: m tile p * MW + mw holds output columns PIECE p + SLICE warp + 16 mw + g (+ 8) of tokens
       * 2t, 2t + 1 (+ 8n); the stores are 2-byte scattered, which costs nothing next to the sweep */
#pragma unroll
      for (int p = 0; p < NPC; p++)
#pragma unroll
        for (int mw = 0; mw < MW; mw++) {
          const int col = PIECE * p + SLICE * warp + 16 * mw + g;
          if (PIECE * p + SLICE * warp >= D) continue;
#pragma unroll
          for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int row = r0 + 8 * n + 2 * t + e;
              if (row >= M) continue;
              OutT* yr = Y + (size_t)row * D + col;
              yr[0] = ${ofrom}(acc[p * MW + mw][n][e]);
              yr[8] = ${ofrom}(acc[p * MW + mw][n][2 + e]);
            }
        }
    }
$ else
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
$ end
$ if PERSIST == 1 or PIPE == 0 then
    sj_cp_async_wait<0>();        /* nothing in flight (PERSIST=1: the next block's X_b reuses the buffer) */
$ end
  }
}
]], env)
  local prelude = cuda.prelude(problem.dtype) .. tw.format_c
  local blocks = tw.cdiv(problem.M, g.BT)
  if cfg.PERSIST == 1 and problem.SMS > 0 then blocks = math.min(blocks, problem.SMS) end
  return {
    source = prelude .. src, entry = env.entry,
    grid = { blocks, 1, 1 }, block = { cfg.WARPS * 32 + (cfg.PIPE == 1 and 32 or 0), 1, 1 }, shared = g.smem,
  }
end


return B
