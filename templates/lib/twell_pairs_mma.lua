-- lib/twell_pairs_mma.lua: ALGO=2 of templates/twell_ffn.lua, the two phases of the pairs
-- kernel (lib/twell_pairs.lua owns the work items, the tickets, the workspace and the pair
-- list) on tensor cores instead of CUDA cores.
--
-- Why: ALGO=1 issues ~2.3 instructions per useful FMA and reaches ~7 FMA/clk/SM. Here a warp
-- computes a pair with mma.sync m16n8k16, gathering the pair's weight row out of the staged tile
-- with ldmatrix (which takes a row address per lane, so the gather costs nothing extra): one mma
-- is 16 pairs (M, "slots") x 8 tokens (N, a group), of which only the 16 products on the slot's
-- own token are kept, i.e. 1/8 of the tensor work is useful, at ~94 useful FMA per warp
-- instruction. The phases are bound by the shared-memory reads of the gathered rows (every pair
-- reads its d_model-long row once per phase).
--
-- Both phases: warp w of a token tile owns its 32 tokens (lane = token), in 4 groups of 8 lanes.
-- A group's pairs are dealt to slots in rounds of GQ (4 m-tiles of 16); a slot is a 32-bit word
--   up:   (list position << 16) | (token in group << 12) | unit in the unit tile   (+ h bits)
--   down: (p bits << 16)        | (token in group << 12) | unit in the Wd stage
-- and padding slots name token 8 (no token) and rows 0-7 in turn (any row will do: their products
-- are dropped or zero; these spread over the bank groups, see sj_slots_spread).
--   up (SDDMM), item (token tile, UT units): the tile's WuT rows and the 512 tokens' X rows are
--     streamed through shared memory in KC-element slices; A = gathered WuT rows (slots x k),
--     B = X^T of the group (k x 8 tokens), C = U^T; at the end each slot's product on its own
--     token, times h, goes to the token's pair list. Rounds past the first (a group with more
--     than GQ pairs in the tile) stream the slice sequence again.
--   down (SpMM), item (token tile, 64 output columns): Wd rows are staged UB units at a time;
--     A = Wd[slot rows, columns]^T via ldmatrix.trans (64 columns = 4 m-tiles), B = P^T built
--     in registers from the slot words (p where the slot's token is the column's, else 0),
--     C = Y^T accumulated over all of d_ff in registers. Rounds only re-deal slots (the stage
--     stays), so any number of pairs costs no extra weight traffic.
local emit = require "lib.emit"
local tw = require "lib.twell_common"

local M = {}

M.KC = 32            -- d_model elements per up slice: 64 bytes of a row, 4 cp.async pieces
M.PA = 80            -- staged row pitch, up: 5 x 16 bytes, so 8 consecutive rows hit 8 bank groups
M.UB = 512           -- units per down stage (a multiple of T)
M.NCOL = 64          -- output columns per down item
M.PB = 144           -- staged row pitch, down: 9 x 16 bytes
M.GQ = 64            -- slots per group and round

-- Adds ALGO=2's sizes to lib/twell_pairs.lua's geometry g.
function M.geometry(g, problem, cfg)
  local nw = cfg.WARPS
  g.KC, g.PA, g.PB, g.GQ, g.NCOL, g.UB = M.KC, M.PA, M.PB, M.GQ, M.NCOL, M.UB
  g.NKC = tw.cdiv(g.D, M.KC)
  g.NCB = tw.cdiv(g.D, M.NCOL)
  g.NUB = tw.cdiv(g.F, M.UB)
  g.A_STAGE = (cfg.UT + g.NTH) * M.PA
  g.A_SMEM = cfg.STAGES * g.A_STAGE + nw * (4 * M.GQ * 6 + 128)   -- + slot words, h bits, buckets
  g.B_STAGE = M.UB * M.PB
  g.B_SMEM = 2 * g.B_STAGE + nw * (4 * M.GQ * 4 + 128)
  g.smem = math.max(g.A_SMEM, g.B_SMEM) + 16
  g.items = g.NTT * (g.NUT + g.NCB)
end

function M.valid(problem, cfg)
  if not tw.member({ 256, 512, 1024 }, cfg.UT) then return false, "ALGO=2 takes UT=256, 512 or 1024" end
  if cfg.SLOTS ~= 16 then return false, "ALGO=2 takes SLOTS=16 (it belongs to ALGO=1)" end
  if M.UB % problem.T ~= 0 then
    return false, string.format("ALGO=2 needs the TwELL tile T=%d to divide %d", problem.T, M.UB)
  end
  return true
end

function M.render(env) return emit.render(here(), [[
#define KC ${KC}
#define PA ${PA}
#define PB ${PB}
#define GQ ${GQ}
#define NCOL ${NCOL}
#define FULL 0xffffffffu

/* Exclusive prefix of n over the 8 lanes of this lane's group, and the group's total. */
__device__ __forceinline__ void sj_group_prefix(int n, int tl, int* pre, int* total) {
  int incl = n;
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) { const int v = __shfl_up_sync(FULL, incl, d, 8); if (tl >= d) incl += v; }
  *pre = incl - n;
  *total = __shfl_sync(FULL, incl, 7, 8);
}

/* Deals the np (a multiple of 16) slots of this lane's group anew so that each 8-slot block of
 * an m-tile holds rows with distinct row & 7 where it can. Why: ldmatrix reads a block's 8 rows
 * in one pass only if they fall in 8 different 16-byte bank groups, which for a row pitch of an
 * odd number of 16-byte pieces means distinct row & 7; gathered rows are random, and 8 random
 * rows take 2.6 passes on average. The slots are sorted by row & 7 (a counting sort through
 * smem counters; ties in any order) and sorted slot i goes to block i % nb, place i / nb, so a
 * block's 8 slots are nb apart in that order. sh: the up phase's h bits, which move along. */
__device__ __forceinline__ void sj_slots_spread(unsigned* sw, unsigned short* sh, int* bucket, int np, int tl) {
  const int nb = np >> 3;
  unsigned w[8];
  unsigned short h[8];
  int rank[8];
  if (tl < 8) bucket[tl] = 0;
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb) {
      w[j] = sw[tl + 8 * j];
      if (sh) h[j] = sh[tl + 8 * j];
      rank[j] = atomicAdd(&bucket[w[j] & 7u], 1);
    }
  __syncwarp();
  int start[8], run = 0;
#pragma unroll
  for (int r = 0; r < 8; r++) { start[r] = run; run += bucket[r]; }
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb) {
      const int r = (int)(w[j] & 7u);
      int i = rank[j];
#pragma unroll
      for (int q = 0; q < 8; q++) if (q == r) i += start[q];
      const int pos = (i % nb) * 8 + i / nb;
      sw[pos] = w[j];
      if (sh) sh[pos] = h[j];
    }
  __syncwarp();
}

/* Phase A, item (tt, ut). */
__device__ __forceinline__ void sj_pairs_up(unsigned char* smem, int tt, int ut, const T* __restrict__ X,
    const unsigned* __restrict__ entries, const int* __restrict__ counts, const T* __restrict__ spill,
    const T* __restrict__ WuT, unsigned* plist, int M, int D, int F)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 3, tl = lane & 7;
  unsigned char* ring = smem;
  unsigned* sw = (unsigned*)(smem + STAGES * A_STAGE) + warp * 4 * GQ;                 /* [4][GQ] */
  unsigned short* sh = (unsigned short*)((unsigned*)(smem + STAGES * A_STAGE) + NTH / 8 * GQ) + warp * 4 * GQ;
  int* bucket = (int*)((unsigned char*)(smem + STAGES * A_STAGE) + NTH / 32 * 4 * GQ * 6) + warp * 32 + g * 8;
  const int t = tt * NTH + tid;
  const int n_tiles = (F + TT - 1) / TT, tile0 = ut * UTT, u0 = tile0 * TT;
  const int tile1 = min(n_tiles, tile0 + UTT);
  int off, n;
  sj_tile_range(counts, t, M, n_tiles, tile0, tile1, &off, &n);
  int pre, gtot;
  sj_group_prefix(n, tl, &pre, &gtot);
  int tot[4];
#pragma unroll
  for (int q = 0; q < 4; q++) tot[q] = __shfl_sync(FULL, gtot, 8 * q);
  /* a slice: UT WuT rows, then the tile's NTH X rows, 4 pieces of 16 bytes each */
  auto load_slice = [&](int kc, int stage) {
    unsigned char* st = ring + stage * A_STAGE;
    const int k = kc * KC;
    for (int i = tid; i < (UT + NTH) * 4; i += NTH) {
      const int r = i >> 2, kk = k + 8 * (i & 3);
      const T* src;
      bool ok;
      if (r < UT) { const int row = u0 + r; ok = row < F && kk < D; src = WuT + (size_t)row * D + kk; }
      else { const int row = tt * NTH + r - UT; ok = row < M && kk < D; src = X + (size_t)row * D + kk; }
      sj_cp_async16(sj_smem_addr(st + r * PA + (i & 3) * 16), ok ? src : X, ok ? 16 : 0);
    }
  };
  /* this lane's 8 X rows for the B fragments: lanes 0-15 group 0 (k 0-7, k 8-15), 16-31 group 1 */
  const sj_u32 xoff = (UT + warp * 32 + (lane & 7) + ((lane >> 4) << 3)) * PA + ((lane >> 3) & 1) * 16;
  for (int lo = 0;; lo += GQ) {
    /* deal the group's pairs lo .. lo + GQ - 1 to slots: this lane's pairs a .. b - 1 */
    const int a = max(0, lo - pre), b = min(n, lo + GQ - pre);
    if (a < b)
      sj_tile_pairs(entries, counts, spill, t, n_tiles, tile0, tile1, F, a, b,
                    [&](int idx, int u, unsigned short bits) {
                      const int s = g * GQ + pre + idx - lo;
                      sw[s] = ((unsigned)(off + idx) << 16) | ((unsigned)tl << 12) | (unsigned)u;
                      sh[s] = bits;
                    });
    const int ng = max(0, min(GQ, gtot - lo));
    for (int s = ng + tl; s < ((ng + 15) & ~15); s += 8) sw[g * GQ + s] = (8u << 12) | (unsigned)(s & 7);
    __syncwarp();
    sj_slots_spread(sw + g * GQ, sh + g * GQ, bucket, (ng + 15) & ~15, tl);
    if (!__syncthreads_or(ng > 0)) break;             /* every slot is written */
    /* per m-tile, the staged row this lane addresses for ldmatrix, two 16-bit rows per register
     * (128 registers at 512 threads leave no room for 16 addresses) */
    int mt[4];
    sj_u32 arow[4][2];
    const sj_u32 kof = (lane >> 4) * 16;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      mt[q] = (max(0, min(GQ, tot[q] - lo)) + 15) >> 4;
#pragma unroll
      for (int m = 0; m < 4; m += 2)
        arow[q][m >> 1] = (sw[q * GQ + m * 16 + (lane & 15)] & 0xfffu) | ((sw[q * GQ + (m + 1) * 16 + (lane & 15)] & 0xfffu) << 16);
    }
    float acc[4][4][4];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++) acc[q][m][0] = acc[q][m][1] = acc[q][m][2] = acc[q][m][3] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) { if (s < NKC) load_slice(s, s); sj_cp_async_commit(); }
    for (int kc = 0; kc < NKC; kc++) {
      sj_cp_async_wait<STAGES - 2>();
      __syncthreads();                                /* slice kc landed; slice kc - 1 is read by all */
      if (kc + STAGES - 1 < NKC) load_slice(kc + STAGES - 1, (kc + STAGES - 1) % STAGES);
      sj_cp_async_commit();
      const sj_u32 st = sj_smem_addr(ring + (kc % STAGES) * A_STAGE);
#pragma unroll
      for (int ks = 0; ks < KC / 16; ks++) {
        sj_u32 bx[4][2], r[4];
        sj_ldmatrix_x4(r, st + xoff + ks * 32);
        bx[0][0] = r[0]; bx[0][1] = r[1]; bx[1][0] = r[2]; bx[1][1] = r[3];
        sj_ldmatrix_x4(r, st + xoff + 16 * PA + ks * 32);
        bx[2][0] = r[0]; bx[2][1] = r[1]; bx[3][0] = r[2]; bx[3][1] = r[3];
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
          for (int m = 0; m < 4; m++)
            if (m < mt[q]) {
              sj_u32 af[4];
              const sj_u32 row = (m & 1) ? arow[q][m >> 1] >> 16 : arow[q][m >> 1] & 0xffffu;
              sj_ldmatrix_x4(af, st + row * PA + kof + ks * 32);
              sj_mma_16816(acc[q][m], af, bx[q]);
            }
      }
    }
    sj_cp_async_wait<0>();
    /* C[slot][token]: keep each slot's product on its own token, times h, rounded to T */
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++)
        if (m < mt[q]) {
#pragma unroll
          for (int c = 0; c < 4; c++) {
            const int s = q * GQ + m * 16 + (lane >> 2) + (c >> 1) * 8;
            const unsigned w = sw[s];
            const unsigned tok = (w >> 12) & 15u;
            if (tok == (unsigned)(2 * (lane & 3) + (c & 1))) {
              const float p = acc[q][m][c] * ${to_f32}((T)sh[s]);
              const size_t row = (size_t)(tt * NTH + warp * 32 + q * 8 + (int)tok) * F;
              plist[row + (w >> 16)] = ((unsigned)(u0 + (int)(w & 0xfffu)) << 16) | (unsigned)${from_f32}(p);
            }
          }
        }
    __syncthreads();                                  /* the slots and the ring are free again */
  }
}

/* B fragment half: the 16-bit p of slot word w if its token is n, else 0. */
__device__ __forceinline__ sj_u32 sj_slot_p(unsigned w, unsigned n) { return ((w >> 12) & 15u) == n ? (w >> 16) : 0u; }

/* Phase B, item (tt, cb). */
__device__ __forceinline__ void sj_pairs_down(unsigned char* smem, int tt, int cb, const int* __restrict__ counts,
    const T* __restrict__ Wd, const unsigned* plist, OutT* __restrict__ Y, int M, int D, int F)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 3, tl = lane & 7;
  unsigned* sw = (unsigned*)(smem + 2 * B_STAGE) + warp * 4 * GQ;
  int* bucket = (int*)(smem + 2 * B_STAGE + NTH / 32 * 4 * GQ * 4) + warp * 32 + g * 8;
  const int t = tt * NTH + tid, c0 = cb * NCOL, n_tiles = (F + TT - 1) / TT;
  const int tiles_per_stage = UB / TT;
  const size_t crow = (size_t)t * n_tiles;
  const unsigned* list = plist + (size_t)t * F;
  auto load_stage = [&](int ub, int stage) {
    unsigned char* st = smem + stage * B_STAGE;
    for (int i = tid; i < UB * 8; i += NTH) {
      const int r = i >> 3, q = i & 7, row = ub * UB + r, col = c0 + 8 * q;
      const bool ok = row < F && col < D;
      sj_cp_async16(sj_smem_addr(st + r * PB + q * 16), ok ? Wd + (size_t)row * D + col : Wd, ok ? 16 : 0);
    }
  };
  float acc[4][4][4];
#pragma unroll
  for (int q = 0; q < 4; q++)
#pragma unroll
    for (int m = 0; m < 4; m++) acc[q][m][0] = acc[q][m][1] = acc[q][m][2] = acc[q][m][3] = 0.f;
  /* ldmatrix.trans rows: lanes 0-7 and 8-15 slots 0-7 (columns 0-7, 8-15), 16-31 slots 8-15 */
  const int arow = (lane & 7) + ((lane >> 4) << 3);
  const sj_u32 acol = ((lane >> 3) & 1) * 16;
  const unsigned me = (unsigned)(lane >> 2);
  int cur = 0;
  load_stage(0, 0);
  sj_cp_async_commit();
  for (int ub = 0; ub < NUB; ub++) {
    /* this token's pairs in the stage: the counts of its tiles there */
    int n = 0;
    if (t < M)
      for (int tile = ub * tiles_per_stage; tile < min(n_tiles, (ub + 1) * tiles_per_stage); tile++) n += counts[crow + tile];
    sj_cp_async_wait<0>();
    __syncthreads();                                  /* stage ub landed; stage ub - 1 is read by all */
    if (ub + 1 < NUB) load_stage(ub + 1, (ub + 1) & 1);
    sj_cp_async_commit();
    const sj_u32 st = sj_smem_addr(smem + (ub & 1) * B_STAGE);
    int pre, gtot;
    sj_group_prefix(n, tl, &pre, &gtot);
    int tot[4];
#pragma unroll
    for (int q = 0; q < 4; q++) tot[q] = __shfl_sync(FULL, gtot, 8 * q);
    const unsigned ubase = (unsigned)(ub * UB);
    for (int lo = 0; lo < max(max(tot[0], tot[1]), max(tot[2], tot[3])); lo += GQ) {
      /* deal the group's pairs lo .. lo + GQ - 1 (this lane's a .. b - 1) to slots */
      const int a = max(0, lo - pre), b = min(n, lo + GQ - pre);
      for (int i = a; i < b; i += 4) {
        unsigned v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = i + j < b ? __ldcg(list + cur + i + j) : 0u;
#pragma unroll
        for (int j = 0; j < 4; j++)
          if (i + j < b) sw[g * GQ + pre + i + j - lo] = (v[j] << 16) | ((unsigned)tl << 12) | ((v[j] >> 16) - ubase);
      }
      const int ng = max(0, min(GQ, gtot - lo));
      for (int s = ng + tl; s < ((ng + 15) & ~15); s += 8) sw[g * GQ + s] = (8u << 12) | (unsigned)(s & 7);
      __syncwarp();
      sj_slots_spread(sw + g * GQ, nullptr, bucket, (ng + 15) & ~15, tl);
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int ks_end = (max(0, min(GQ, tot[q] - lo)) + 15) >> 4;
        for (int ks = 0; ks < ks_end; ks++) {
          const unsigned* s16 = sw + q * GQ + ks * 16;
          const uint2 w0 = *(const uint2*)(s16 + 2 * (lane & 3));
          const uint2 w1 = *(const uint2*)(s16 + 8 + 2 * (lane & 3));
          const sj_u32 bf[2] = { sj_slot_p(w0.x, me) | (sj_slot_p(w0.y, me) << 16),
                                 sj_slot_p(w1.x, me) | (sj_slot_p(w1.y, me) << 16) };
          const sj_u32 ra = st + (s16[arow] & 0xfffu) * PB + acol;
#pragma unroll
          for (int m = 0; m < 4; m++) {
            sj_u32 af[4];
            sj_ldmatrix_x4_trans(af, ra + m * 32);
            sj_mma_16816(acc[q][m], af, bf);
          }
        }
      }
      __syncwarp();                                   /* the slots are read before the next deal */
    }
    cur += n;
  }
  /* C[column][token] -> Y */
#pragma unroll
  for (int q = 0; q < 4; q++)
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int tok = tt * NTH + warp * 32 + q * 8 + 2 * (lane & 3) + (c & 1);
        const int col = c0 + m * 16 + (lane >> 2) + (c >> 1) * 8;
        if (tok < M && col < D) Y[(size_t)tok * D + col] = ${ofrom}(acc[q][m][c]);
      }
}
]], env) end

return M
