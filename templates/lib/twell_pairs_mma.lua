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
-- The up item deals a group's pairs in its unit tile to slots in rounds of GQ (4 m-tiles of 16);
-- a slot is a 32-bit word (value bits << 16) | (token in group << 12) | unit in the unit tile,
-- the value being h while the up product runs and p = h * u once it is done; padding slots name
-- token 8 (no token) and one of rows 0-7 (any row will do: their products are dropped or zero;
-- sj_slots_spread picks the rows that balance the bank groups). The up item then writes the group's
-- slots, p included, to the workspace, and the down items read them as they are: a down stage is
-- a unit tile (UB = UT), so they never deal again (the 64 column blocks of a token tile would
-- each deal the same slots).
--   up (SDDMM), item (token tile, UT units): the tile's WuT rows and the NTH tokens' X rows are
--     streamed through shared memory in KC-element slices by TMA (sm_90a: 256-row boxes,
--     64-byte swizzle, one thread issues them; per-thread cp.async wrote shared memory in ~3x
--     the passes its bytes need, and shared memory is what bounds this kernel); A = gathered WuT rows (slots x k),
--     B = X^T of the group (k x 8 tokens), C = U^T; at the end each slot's product on its own
--     token, times h, goes to the token's pair list. Rounds past the first (a group with more
--     than GQ pairs in the tile) stream the slice sequence again.
--   down (SpMM), item (token tile, 64 output columns): Wd rows are staged a unit tile at a time
--     by TMA (64-row boxes, 128-byte swizzle), with the tile's slots (cp.async) and counts; A = Wd[slot rows, columns]^T via ldmatrix.trans (64
--     columns = 4 m-tiles), B = P^T built in registers from the slot words (p where the slot's
--     token is the column's, else 0), C = Y^T accumulated over all of d_ff in registers. Rounds
--     past the first only load more slots (the stage stays), so any number of pairs costs no
--     extra weight traffic.
-- Workspace (after lib/twell_pairs.lua's counters, from u32 PL_OFF): the pair counts, u32
-- [ut * NGP + G] for unit tile ut and group G (token / 8), then from SL_OFF the slots, group G
-- and unit tile ut at (G * NUT + ut) * 8 * UT (8 tokens x UT units is the most a group can
-- have there), its rounds back to back, each padded to a multiple of 16.
local emit = require "lib.emit"
local tw = require "lib.twell_common"

local M = {}

M.KC = 32            -- d_model elements per up slice: 64 bytes of a row, one TMA box wide
M.BOX = 256          -- rows per TMA box (runtime/tensor_map.c, SJ_TMA_ROWS32)
M.NCOL = 64          -- output columns per down item
M.WBOX = 64          -- rows per Wd box (runtime/tensor_map.c, SJ_TMA_WGMMA: 64 x 64, 128-byte swizzle)
M.GQ = 64            -- slots per group and round

-- Adds ALGO=2's sizes to lib/twell_pairs.lua's geometry g.
function M.geometry(g, problem, cfg)
  local nw = cfg.WARPS
  g.KC, g.GQ, g.NCOL, g.UB, g.BOX, g.WBOX = M.KC, M.GQ, M.NCOL, cfg.UT, M.BOX, M.WBOX
  g.NKC = tw.cdiv(g.D, M.KC)
  g.NCB = tw.cdiv(g.D, M.NCOL)
  g.NUB = g.NUT
  g.NGP = g.NTT * g.NTH // 8
  g.SL_OFF = g.PL_OFF + tw.cdiv(g.NGP * g.NUT, 64) * 64
  g.A_STAGE = (cfg.UT + g.NTH) * M.KC * 2
  g.A_BAR = cfg.STAGES * g.A_STAGE + nw * (4 * M.GQ * 4 + 128)    -- after the slot words, sort buckets
  g.A_SMEM = g.A_BAR + 8 * cfg.STAGES                               -- + a full barrier per stage
  g.B_STAGE = cfg.UT * M.NCOL * 2
  g.B_BAR = 2 * g.B_STAGE + nw * 2 * 4 * M.GQ * 4                 -- after the slots, twice
  g.B_SMEM = g.B_BAR + 16                                           -- + a full barrier per stage
  g.smem = math.max(g.A_SMEM, g.B_SMEM) + 1024      -- + 1024: the base is aligned by hand (swizzle)
  g.items = g.NTT * (g.NUT + g.NCB)
end

function M.valid(problem, cfg)
  -- UT = 512 keeps a staged row's byte offset (row * 64) in 16 bits, and a unit tile's Wd rows
  -- (UT * 128 bytes, twice) in shared memory.
  if problem.arch ~= "sm_90a" then
    return false, "ALGO=2 (TMA, mbarriers) needs sm_90a, the target is " .. tostring(problem.arch)
  end
  if not tw.member({ 256, 512 }, cfg.UT) then return false, "ALGO=2 takes UT=256 or 512" end
  if (cfg.WARPS * 32) % M.BOX ~= 0 then return false, "ALGO=2 takes WARPS=8 or 16 (tokens per tile a multiple of 256)" end
  if problem.M * problem.N >= 1 << 31 or problem.DFF * problem.N >= 1 << 31 then
    return false, "ALGO=2 needs tokens x d_model and d_ff x d_model below 2^31 (32-bit offsets)"
  end
  if cfg.SLOTS ~= 16 then return false, "ALGO=2 takes SLOTS=16 (it belongs to ALGO=1)" end
  return true
end

function M.render(env) return emit.render(here(), [[
#define KC ${KC}
#define BOX ${BOX}
#define A_BAR ${A_BAR}
#define WBOX ${WBOX}
#define B_BAR ${B_BAR}
#define GQ ${GQ}
#define NCOL ${NCOL}
#define NGP ${NGP}
#define SL_OFF ${SL_OFF}
#define FULL 0xffffffffu

/* Exclusive prefix of n over the 8 lanes of this lane's group, and the group's total. */
__device__ __forceinline__ void sj_group_prefix(int n, int tl, int* pre, int* total) {
  int incl = n;
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) { const int v = __shfl_up_sync(FULL, incl, d, 8); if (tl >= d) incl += v; }
  *pre = incl - n;
  *total = __shfl_sync(FULL, incl, 7, 8);
}

/* Deals the group's ng slots and np - ng padding slots (np a multiple of 16) anew so that each
 * 8-slot block of an m-tile holds rows with distinct row & 7 where it can. Why: ldmatrix reads a
 * block's 8 rows in one pass only if they fall in 8 different 16-byte bank groups, which for the
 * staged layouts (the up stages' 64-byte swizzle, the down stages' pitch of 9 x 16 bytes) means
 * distinct row & 7; gathered rows are random, and 8 random rows take 2.6 passes on average. The
 * padding slots take the residues that have fewer than np / 8 slots (a padding row may be any
 * row), then all are sorted by residue (a counting sort through smem counters; ties in any
 * order) and sorted slot i goes to block i % nb, place i / nb, so a block's 8 slots are nb
 * apart in that order: 1.5 passes per block at 41 pairs, 1.8 with padding at fixed residues. */
__device__ __forceinline__ void sj_slots_spread(unsigned* sw, int* bucket, int ng, int np, int tl) {
  const int nb = np >> 3;
  unsigned w[8];
  int rank[8];
  bucket[tl] = 0;
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb && tl + 8 * j < ng) { w[j] = sw[tl + 8 * j]; rank[j] = atomicAdd(&bucket[w[j] & 7u], 1); }
  __syncwarp();
  /* lane tl owns residue tl: its count, its padding slots (filling the deficits in residue
   * order), and where its slots start in the sorted order */
  const int c = bucket[tl];
  int dpre, dtot, start, total;
  sj_group_prefix(max(0, nb - c), tl, &dpre, &dtot);
  const int pads = max(0, min(nb - c, np - ng - dpre));
  sj_group_prefix(c + pads, tl, &start, &total);
  __syncwarp();
  bucket[tl] = start;
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb && tl + 8 * j < ng) {
      const int i = bucket[w[j] & 7u] + rank[j];
      sw[(i % nb) * 8 + i / nb] = w[j];
    }
  for (int p = 0; p < pads; p++) {
    const int i = start + c + p;
    sw[(i % nb) * 8 + i / nb] = (8u << 12) | (unsigned)tl;
  }
  __syncwarp();
}

/* One k-step of a group's first N m-tiles in the up product (N is uniform over the warp, so
 * this is a branch, not N predicates). arow: the gathered rows' byte offsets in the stage at
 * k-step 0, two per register; b: the group's B fragment; st: the stage; kx: the k-step's 32
 * bytes, XORed into the offsets (the swizzle, sj_sw64). */
template <int N>
__device__ __forceinline__ void sj_up_mtiles(float acc[4][4], const sj_u32 arow[2], const sj_u32 b[2], sj_u32 st, sj_u32 kx) {
  sj_u32 af[N][4];
#pragma unroll
  for (int m = 0; m < N; m++) sj_ldmatrix_x4(af[m], st + (((m & 1) ? arow[m >> 1] >> 16 : arow[m >> 1] & 0xffffu) ^ kx));
#pragma unroll
  for (int m = 0; m < N; m++) sj_mma_16816(acc[m], af[m], b);
}

/* Byte offset of 16-byte chunk c of row r in a stage: TMA's 64-byte swizzle (rows of 64 bytes,
 * the chunk index XORed with bits 1-2 of the row, from a 512-byte aligned base), so 8 rows with
 * distinct r & 7 put the same chunk in 8 different bank groups. */
__device__ __forceinline__ sj_u32 sj_sw64(int r, int c) { return (sj_u32)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4)); }

/* Phase A, item (tt, ut). */
__device__ __forceinline__ void sj_pairs_up(unsigned char* smem, int tt, int ut, const unsigned* __restrict__ entries,
    const int* __restrict__ counts, const T* __restrict__ spill, unsigned* work, int M, int D, int F,
    const sj_tensor_map* tm_x, const sj_tensor_map* tm_wu)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 3, tl = lane & 7;
  unsigned char* ring = smem;
  unsigned* sw = (unsigned*)(smem + STAGES * A_STAGE) + warp * 4 * GQ;                 /* [4][GQ] */
  int* bucket = (int*)(smem + STAGES * A_STAGE + NTH / 32 * 4 * GQ * 4) + warp * 32 + g * 8;
  const sj_u32 full = sj_smem_addr(smem + A_BAR);     /* full[s]: slice in stage s landed (TMA bytes) */
  const int t = tt * NTH + tid;
  const int n_tiles = (F + TT - 1) / TT, tile0 = ut * UTT, u0 = tile0 * TT;
  const int tile1 = min(n_tiles, tile0 + UTT);
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) sj_mbar_init(full + 8 * s, 1);
    sj_mbar_fence_init();
  }
  const int n = sj_tile_count(counts, t, M, n_tiles, tile0, tile1);
  int pre, gtot;
  sj_group_prefix(n, tl, &pre, &gtot);
  int tot[4];
#pragma unroll
  for (int q = 0; q < 4; q++) tot[q] = __shfl_sync(FULL, gtot, 8 * q);
  const int G0 = tt * (NTH / 8) + warp * 4;                                          /* the warp's first group */
  if (tl == 0) work[PL_OFF + ut * NGP + G0 + g] = (unsigned)gtot;
  /* A slice is UT WuT rows, then the tile's NTH X rows, KC elements each, in boxes of BOX rows;
   * rows past F or M and columns past D arrive as zeros (and count in the bytes). Slices are
   * numbered across rounds (it), which gives each its stage and barrier phase. */
  auto load_slice = [&](int kc, int it) {
    const int stage = it % STAGES;
    const sj_u32 st = sj_smem_addr(ring + stage * A_STAGE), bar = full + 8 * stage;
    sj_mbar_expect_tx(bar, A_STAGE);
#pragma unroll
    for (int i = 0; i < UT / BOX; i++) sj_tma_load_2d(st + i * BOX * KC * 2, tm_wu, kc * KC, u0 + i * BOX, bar);
#pragma unroll
    for (int i = 0; i < NTH / BOX; i++) sj_tma_load_2d(st + (UT + i * BOX) * KC * 2, tm_x, kc * KC, tt * NTH + i * BOX, bar);
  };
  /* this lane's 8 X rows for the B fragments: lanes 0-15 group 0 (k 0-7, k 8-15), 16-31 group 1;
   * group 2 and 3's rows are 16 further on, which keeps their swizzle (k-step 1: ^ 32) */
  const sj_u32 xoff = sj_sw64(UT + warp * 32 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  int it = 0;                                          /* slices consumed in earlier rounds */
  __syncthreads();                                     /* the barriers are initialised */
  for (int lo = 0;; lo += GQ) {
    /* deal the group's pairs lo .. lo + GQ - 1 to slots: this lane's pairs a .. b - 1 */
    const int a = max(0, lo - pre), b = min(n, lo + GQ - pre);
    if (a < b)
      sj_tile_pairs(entries, counts, spill, t, n_tiles, tile0, tile1, F, a, b,
                    [&](int idx, int u, unsigned short bits) {
                      sw[g * GQ + pre + idx - lo] = ((unsigned)bits << 16) | ((unsigned)tl << 12) | (unsigned)u;
                    });
    const int ng = max(0, min(GQ, gtot - lo)), np = (ng + 15) & ~15;
    for (int s = ng + tl; s < GQ; s += 8) sw[g * GQ + s] = (8u << 12) | (unsigned)(s & 7);
    __syncwarp();
    sj_slots_spread(sw + g * GQ, bucket, ng, np, tl);
    if (!__syncthreads_or(ng > 0)) break;             /* every slot is written */
    /* m-tiles this round, per group (uniform over the warp, so the loop below branches on them
     * instead of predicating each ldmatrix and mma) */
    int mt[4];
#pragma unroll
    for (int q = 0; q < 4; q++) mt[q] = (max(0, min(GQ, tot[q] - lo)) + 15) >> 4;
    /* per m-tile, the byte offset (k-step 0) of the row this lane addresses for ldmatrix, two
     * 16-bit offsets per register (128 registers at 512 threads leave no room for 16) */
    sj_u32 arow[4][2];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m += 2)
        arow[q][m >> 1] = sj_sw64((int)(sw[q * GQ + m * 16 + (lane & 15)] & 0xfffu), lane >> 4) |
                          (sj_sw64((int)(sw[q * GQ + (m + 1) * 16 + (lane & 15)] & 0xfffu), lane >> 4) << 16);
    float acc[4][4][4];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++) acc[q][m][0] = acc[q][m][1] = acc[q][m][2] = acc[q][m][3] = 0.f;

    if (tid == 0)
#pragma unroll
      for (int s = 0; s < STAGES - 1; s++) if (s < NKC) load_slice(s, it + s);
    for (int kc = 0; kc < NKC; kc++, it++) {
      sj_mbar_wait(full + 8 * (it % STAGES), (sj_u32)((it / STAGES) & 1));
      __syncthreads();                                /* slice kc landed; slice kc - 1 is read by all */
      if (tid == 0 && kc + STAGES - 1 < NKC) load_slice(kc + STAGES - 1, it + STAGES - 1);
      const sj_u32 st = sj_smem_addr(ring + (it % STAGES) * A_STAGE);
#pragma unroll
      for (int ks = 0; ks < KC / 16; ks++) {
        sj_u32 bx[4][2], r[4];
        sj_ldmatrix_x4(r, st + (xoff ^ (ks * 32)));
        bx[0][0] = r[0]; bx[0][1] = r[1]; bx[1][0] = r[2]; bx[1][1] = r[3];
        sj_ldmatrix_x4(r, st + 16 * KC * 2 + (xoff ^ (ks * 32)));
        bx[2][0] = r[0]; bx[2][1] = r[1]; bx[3][0] = r[2]; bx[3][1] = r[3];
#pragma unroll
        for (int q = 0; q < 4; q++)
          switch (mt[q]) {
            case 4: sj_up_mtiles<4>(acc[q], arow[q], bx[q], st, ks * 32); break;
            case 3: sj_up_mtiles<3>(acc[q], arow[q], bx[q], st, ks * 32); break;
            case 2: sj_up_mtiles<2>(acc[q], arow[q], bx[q], st, ks * 32); break;
            case 1: sj_up_mtiles<1>(acc[q], arow[q], bx[q], st, ks * 32); break;
            default: break;
          }
      }
    }
    /* C[slot][token]: each slot's product on its own token, times h, rounded to T, replaces h */
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++)
        if (m < mt[q]) {
#pragma unroll
          for (int c = 0; c < 4; c++) {
            const int s = q * GQ + m * 16 + (lane >> 2) + (c >> 1) * 8;
            const unsigned w = sw[s];
            if (((w >> 12) & 15u) == (unsigned)(2 * (lane & 3) + (c & 1))) {
              const float p = acc[q][m][c] * ${to_f32}((T)(w >> 16));
              sw[s] = ((unsigned)${from_f32}(p) << 16) | (w & 0xffffu);
            }
          }
        }
    __syncwarp();
    /* the round's slots (np of each group) to the workspace: half a warp per group, 16 bytes a lane */
#pragma unroll
    for (int q2 = 0; q2 < 4; q2 += 2) {
      const int q = q2 + (lane >> 4), s = 4 * (lane & 15), n_q = (lane >> 4) ? tot[q2 + 1] : tot[q2];
      if (s < ((max(0, min(GQ, n_q - lo)) + 15) & ~15))
        *(uint4*)(work + SL_OFF + ((size_t)(G0 + q) * NUT + ut) * (8 * UT) + lo + s) = *(const uint4*)(sw + q * GQ + s);
    }
    __syncthreads();                                  /* the slots and the ring are free again */
  }
}

/* B fragment half: the 16-bit p of slot word w if its token is n, else 0. */
__device__ __forceinline__ sj_u32 sj_slot_p(unsigned w, unsigned n) { return ((w >> 12) & 15u) == n ? (w >> 16) : 0u; }

/* Phase B, item (tt, cb). */
__device__ __forceinline__ void sj_pairs_down(unsigned char* smem, int tt, int cb, const sj_tensor_map* tm_wd,
    const unsigned* work, OutT* __restrict__ Y, int M, int D, int F)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned* swb = (unsigned*)(smem + 2 * B_STAGE) + warp * 2 * 4 * GQ;               /* [2][4][GQ] */
  const sj_u32 full = sj_smem_addr(smem + B_BAR);     /* full[s]: stage s's Wd rows landed (TMA bytes) */
  const int c0 = cb * NCOL, G0 = tt * (NTH / 8) + warp * 4;
  const unsigned* slots = work + SL_OFF + (size_t)G0 * NUT * (8 * UT);              /* group q: + q * NUT * 8 * UT */
  if (tid == 0) {
    sj_mbar_init(full, 1);
    sj_mbar_init(full + 8, 1);
    sj_mbar_fence_init();
  }
  __syncthreads();
  /* a stage: the unit tile's Wd rows, 64 columns of them, by TMA in boxes of WBOX rows (rows of
   * 128 bytes, 128-byte swizzle; past F or D zeros), issued by thread 0 */
  auto load_stage = [&](int ub, int stage) {
    if (tid != 0) return;
    const sj_u32 st = sj_smem_addr(smem + stage * B_STAGE), bar = full + 8 * stage;
    sj_mbar_expect_tx(bar, B_STAGE);
#pragma unroll
    for (int i = 0; i < UB / WBOX; i++) sj_tma_load_2d(st + i * WBOX * NCOL * 2, tm_wd, c0, ub * UB + i * WBOX, bar);
  };
  /* a stage's first round of slots, given its counts c (16 bytes per lane and step) */
  auto load_slots = [&](int ub, int stage, const uint4 c) {
#pragma unroll
    for (int q2 = 0; q2 < 4; q2 += 2) {
      const int q = q2 + (lane >> 4), s = 4 * (lane & 15);
      const int n_q = (int)((lane >> 4) ? (q2 ? c.w : c.y) : (q2 ? c.z : c.x));
      if (s < ((min(GQ, n_q) + 15) & ~15))
        sj_cp_async16(sj_smem_addr(swb + stage * 4 * GQ + q * GQ + s), slots + ((size_t)q * NUT + ub) * (8 * UT) + s, 16);
    }
  };
  float acc[4][4][4];
#pragma unroll
  for (int q = 0; q < 4; q++)
#pragma unroll
    for (int m = 0; m < 4; m++) acc[q][m][0] = acc[q][m][1] = acc[q][m][2] = acc[q][m][3] = 0.f;
  /* ldmatrix.trans rows: lanes 0-7 and 8-15 slots 0-7 (columns 0-7, 8-15), 16-31 slots 8-15;
   * chunk 2m + h of unit u sits at u * 128 + ((2m + h) ^ (u & 7)) * 16 (the swizzle) */
  const int arow = (lane & 7) + ((lane >> 4) << 3);
  const unsigned half = (unsigned)((lane >> 3) & 1);
  const unsigned me = (unsigned)(lane >> 2);
  /* the warp's 4 group counts of a stage; those of the next stage are loaded one stage ahead */
  const uint4* counts = (const uint4*)(work + PL_OFF + G0);
  const uint4 none = make_uint4(0u, 0u, 0u, 0u);
  uint4 cnow = __ldcg(counts), cnext = NUB > 1 ? __ldcg(counts + NGP / 4) : none;
  load_stage(0, 0);
  load_slots(0, 0, cnow);
  sj_cp_async_commit();
  for (int ub = 0; ub < NUB; ub++) {
    sj_cp_async_wait<0>();                            /* this lane's slot copies */
    sj_mbar_wait(full + 8 * (ub & 1), (sj_u32)((ub >> 1) & 1));
    __syncthreads();                                  /* stage ub landed; stage ub - 1 is read by all */
    const int tot[4] = { (int)cnow.x, (int)cnow.y, (int)cnow.z, (int)cnow.w };
    if (ub + 1 < NUB) {
      load_stage(ub + 1, (ub + 1) & 1);
      load_slots(ub + 1, (ub + 1) & 1, cnext);
    }
    sj_cp_async_commit();
    cnow = cnext;
    cnext = ub + 2 < NUB ? __ldcg(counts + (size_t)(ub + 2) * (NGP / 4)) : none;
    const sj_u32 st = sj_smem_addr(smem + (ub & 1) * B_STAGE);
    unsigned* sw = swb + (ub & 1) * 4 * GQ;
    for (int lo = 0; lo < max(max(tot[0], tot[1]), max(tot[2], tot[3])); lo += GQ) {
      if (lo > 0) {
        /* a round past the first: its slots straight from the workspace */
        __syncwarp();
#pragma unroll
        for (int q2 = 0; q2 < 4; q2 += 2) {
          const int q = q2 + (lane >> 4), s = 4 * (lane & 15), n_q = (lane >> 4) ? tot[q2 + 1] : tot[q2];
          if (s < ((max(0, min(GQ, n_q - lo)) + 15) & ~15))
            *(uint4*)(sw + q * GQ + s) = __ldcg((const uint4*)(slots + ((size_t)q * NUT + ub) * (8 * UT) + lo + s));
        }
        __syncwarp();
      }
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int ks_end = (max(0, min(GQ, tot[q] - lo)) + 15) >> 4;
        /* a k-tile's slot words: this lane's 4 for B, and its ldmatrix row; the next k-tile's are
         * read while this one's mma run */
        const unsigned* sq = sw + q * GQ;
        uint2 w0, w1;
        unsigned wr = 0u;
        if (ks_end > 0) { w0 = *(const uint2*)(sq + 2 * (lane & 3)); w1 = *(const uint2*)(sq + 8 + 2 * (lane & 3)); wr = sq[arow]; }
        for (int ks = 0; ks < ks_end; ks++) {
          const sj_u32 bf[2] = { sj_slot_p(w0.x, me) | (sj_slot_p(w0.y, me) << 16),
                                 sj_slot_p(w1.x, me) | (sj_slot_p(w1.y, me) << 16) };
          const unsigned u = wr & 0xfffu;
          const sj_u32 ra = st + u * 128 + ((half ^ (u & 7u)) << 4);
          if (ks + 1 < ks_end) {
            const unsigned* s16 = sq + (ks + 1) * 16;
            w0 = *(const uint2*)(s16 + 2 * (lane & 3));
            w1 = *(const uint2*)(s16 + 8 + 2 * (lane & 3));
            wr = s16[arow];
          }
#pragma unroll
          for (int m = 0; m < 4; m++) {
            sj_u32 af[4];
            sj_ldmatrix_x4_trans(af, ra ^ (m * 32));
            sj_mma_16816(acc[q][m], af, bf);
          }
        }
      }
    }
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
