-- lib/twell_pairs_mma.lua: ALGO=2 of templates/twell_ffn.lua, the two phases of the pairs
-- kernel (lib/twell_pairs.lua owns the work items, the tickets, the workspace and the pair
-- list) on tensor cores instead of CUDA cores.
--
-- Why: ALGO=1 issues ~2.3 instructions per useful FMA and reaches ~7 FMA/clk/SM. Here a warp
-- computes a pair with mma.sync m16n8k16, gathering the pair's weight row out of the staged tile
-- with plain 16- or 8-byte shared loads (an address per lane, so the gather costs nothing
-- extra): an up mma is 16 pairs (M, "slots") x 8 tokens (N, a group), of which only the 16
-- products on the slot's own token are kept (1/8 of the tensor work is useful). The phases are
-- bound by the shared-memory reads of the gathered rows (every pair reads its d_model-long row
-- once per phase), so the loads are laid out to take one pass per 128 bytes: ldmatrix reads 8
-- gathered rows a pass and those collide in a bank group ~1.5 passes in 1 on random rows; here a
-- pass is 2 (up) or 4 (down) rows, and sj_slots_place arranges each block of 8 slots so that
-- those rows do not collide.
--
-- Both phases: warp w of a token tile owns its 32 tokens (lane = token), in 4 groups of 8 lanes.
-- The up item deals a group's pairs in its unit tile to slots in rounds of GQ (4 m-tiles of 16);
-- a slot is a 32-bit word (value bits << 16) | row code (sj_row_code of its unit in the unit
-- tile) | token in group, the value being h while the up product runs and p = h * u once it
-- is done; padding slots name token 8 (no token) and a row of the residue their place wants
-- (their products are dropped or zero). The up item then writes the group's slots, p included,
-- to the workspace, and the down items read them as they are: a down stage is a unit tile
-- (UB = UT), so they never deal again (the 64 column blocks of a token tile would each deal the
-- same slots).
--   up (SDDMM), item (token tile, UT units): the tile's WuT rows and the NTH tokens' X rows are
--     streamed through shared memory in KC-element slices by TMA (sm_90a: 256-row boxes,
--     64-byte swizzle, one thread issues them; per-thread cp.async wrote shared memory in ~3x
--     the passes its bytes need); A = gathered WuT rows (slots x k), B = X^T of the group
--     (k x 8 tokens), both with the slice's k order permuted (sj_up_mtiles), C = U^T; at the end
--     each slot's product on its own token, times h, goes to the token's pair list. Rounds past
--     the first (a group with more than GQ pairs in the tile) stream the slice sequence again.
--   down (SpMM), item (token tile, 64 output columns): Wd rows are staged a unit tile at a time
--     by TMA (64-row boxes, 128-byte swizzle), with the tile's slots (cp.async) and counts;
--     k = (slot, column parity), A = Wd pairs of columns as they lie in the rows (2 m-tiles of
--     32 columns), B = p on one parity (an even and an odd product per m-tile), C = Y^T
--     accumulated over all of d_ff in registers. Rounds past the first only load more slots (the
--     stage stays), so any number of pairs costs no extra weight traffic.
-- Listed input (lib/twell_pairs.lua; the hybrid FFN's forward): the up phase also stores each
-- pair's u (before the product with h) at its hybrid position (sj_keep_u).
-- DX (listed, the hybrid FFN's backward through the activations): the up product is
-- dh = dY[t] . Wd[j] (X = dY, WuT = Wd), the up phase stores dg = dh u and du = dh a at the
-- pair's hybrid position (sj_keep_grads) and writes the round's slots twice, with dg for unit
-- tile ut and with du for tile NUT + ut; the down product runs over 2 NUT stages, WgT's rows,
-- then WuT's (a second descriptor), so dX = sum dg WgT[j] + du WuT[j] in the same accumulators.
-- The slot regions and counts are per stage (NUB of them).
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
  g.NUB = g.NUT * (cfg.DX and 2 or 1)                              -- DX: WgT's stages, then WuT's
  g.NGP = g.NTT * g.NTH // 8
  g.SL_OFF = g.PL_OFF + tw.cdiv(g.NGP * g.NUB, 64) * 64
  g.A_STAGE = (cfg.UT + g.NTH) * M.KC * 2
  g.A_BAR = cfg.STAGES * g.A_STAGE + nw * (4 * M.GQ * 4 + 512)    -- after the slot words, placement tables
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

-- The loops over this lane's C fragments of a round whose slot is on the lane's own token (then
-- the statement that follows it in the text runs on each): the end of the up phase, once, and
-- for the dx's du slots a second time.
local OWN_SLOTS = [[#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++)
        if (m < mt[q]) {
#pragma unroll
          for (int c = 0; c < 4; c++) {
            const int s = q * GQ + m * 16 + (lane >> 2) + (c >> 1) * 8;
            const unsigned w = sw[s];
            if (sj_slot_tok(w) == (unsigned)(2 * (lane & 3) + (c & 1)))]]

function M.render(env)
  env.OWN_SLOTS = OWN_SLOTS
  return emit.render(here(), [[
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

/* A slot word's bits 4-15: its row u of the unit tile as u * 128 + ((u & 7) << 4), i.e. the row's
 * byte offset in a down stage with the swizzle's XOR key in bits 4-6 (128-byte rows: chunk c of
 * row u sits at u * 128 + ((c ^ (u & 7)) << 4)); u is code >> 7, the residue (code >> 4) & 7.
 * Bits 0-3 hold the slot's token in its group (8: none). Why this layout: the down product's
 * address is then one LOP3 ((w & 0xfff0) ^ lane offset) and its token test one more (w & 15 vs
 * the lane's token), where a code in bits 0-11 and the token in 12-15 cost a shift for each. */
__device__ __forceinline__ unsigned sj_row_code(int u) { return ((unsigned)u << 7) | (((unsigned)u & 7u) << 4); }
__device__ __forceinline__ int sj_slot_res(unsigned w) { return (int)((w >> 4) & 7u); }
__device__ __forceinline__ int sj_slot_row(unsigned w) { return (int)((w & 0xffffu) >> 7); }
__device__ __forceinline__ unsigned sj_slot_tok(unsigned w) { return w & 15u; }

/* The block position that wants residue r (row & 7 == r): residues 0 3 4 7 1 2 5 6 at positions
 * 0-7, so that positions 2i, 2i + 1 differ in r & 1, and positions 0-3, and 4-7, in r >> 1. */
__device__ __forceinline__ int sj_res_pos(int r) { return (int)((0x37621540u >> (4 * r)) & 7u); }

/* Places the group's ng slots and np - ng padding slots (np a multiple of 16: nb blocks of 8) so
 * that the products below gather their rows without bank conflicts: a block's position
 * sj_res_pos(r) wants a row with row & 7 == r. Why: the up product loads a gathered row 16 bytes
 * a lane, in passes of 8 lanes = 2 rows of a block (positions 2i, 2i + 1), which take one pass
 * only if they lie in different halves of a 128-byte line (64-byte rows: row & 1 differ); the
 * down product loads 8 bytes a lane, in passes of 16 lanes = 4 rows (positions 0-3 or 4-7) x 2
 * chunks, which take one pass only if they fall in different chunk pairs of the 128-byte
 * swizzle ((row >> 1) & 3 differ). Residue r's first nb rows take its position in blocks 0, 1,
 * ...; its rows past nb (an overflow, by pigeonhole unavoidable) go first to the free positions
 * of its twin r ^ 1 (same chunk pair: the down pass stays whole, the up pass doubles), then, in
 * parity order, to the free positions left, in parity order; the rest are padding slots on a row
 * of their position's residue (token 8: their products are dropped). Simulated on uniform
 * residues at 35-47 pairs: 1.11 passes per up pass and 1.17 per down pass, against 1.57 for
 * ldmatrix's 8 rows; measured (ncu, 99%): 1.09 and 1.16. tab: 32 ints of the group (counters
 * first, then 4 per residue). */
__device__ __forceinline__ void sj_slots_place(unsigned* sw, int* tab, int ng, int np, int tl) {
  const int nb = np >> 3;
  unsigned w[8];
  int rank[8];
  tab[tl] = 0;
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb && tl + 8 * j < ng) { w[j] = sw[tl + 8 * j]; rank[j] = atomicAdd(&tab[sj_slot_res(w[j])], 1); }
  __syncwarp();
  /* lane tl owns residue tl: its count, overflow and free positions, before and after the twins */
  const int c = tab[tl], c_twin = __shfl_xor_sync(FULL, c, 1, 8);
  const int over = max(0, c - nb), room = max(0, nb - c);
  const int to_twin = min(over, max(0, nb - c_twin)), from_twin = min(max(0, c_twin - nb), room);
  const int over2 = over - to_twin, room2 = room - from_twin;
  /* exclusive prefixes of over2 and room2 in parity order (residues 0 2 4 6 1 3 5 7) */
  const int key = ((tl & 1) << 2) | (tl >> 1);
  int over_pre = 0, room_pre = 0, over_total = 0;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const int r = ((k & 3) << 1) | (k >> 2);
    const int o = __shfl_sync(FULL, over2, r, 8), f = __shfl_sync(FULL, room2, r, 8);
    if (k < key) { over_pre += o; room_pre += f; }
    over_total += o;
  }
  __syncwarp();                                       /* the counters are read */
  tab[4 * tl] = c;
  tab[4 * tl + 1] = to_twin;
  tab[4 * tl + 2] = over_pre - to_twin;               /* + overflow index: its place in the order */
  tab[4 * tl + 3] = (room_pre << 16) | (room2 << 8) | (c + from_twin);   /* and where room2 starts */
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; j++)
    if (j < nb && tl + 8 * j < ng) {
      const int r = sj_slot_res(w[j]), o = rank[j] - nb;
      int block = rank[j], res = r;                   /* the block, and the residue whose place it takes */
      if (o >= 0 && o < tab[4 * r + 1]) {
        res = r ^ 1;
        block = tab[4 * res] + o;
      } else if (o >= 0) {
        const int i = o + tab[4 * r + 2];
        for (int q = 0; q < 8; q++) {
          const int f = tab[4 * q + 3], lo = f >> 16;
          if (i >= lo && i < lo + ((f >> 8) & 0xff)) { res = q; block = (f & 0xff) + i - lo; }
        }
      }
      sw[block * 8 + sj_res_pos(res)] = w[j];
    }
  for (int j = max(0, over_total - room_pre); j < room2; j++)
    sw[(c + from_twin + j) * 8 + sj_res_pos(tl)] = sj_row_code(tl) | 8u;
  __syncwarp();
}

/* A slice (2 k-steps) of a group's first N m-tiles in the up product (N is uniform over the warp,
 * so this is a branch, not N predicates). Each lane loads 16 bytes, its chunk lane & 3 of the
 * 64-byte slice row, of two gathered rows (m-tile rows lane / 4 and lane / 4 + 8) and of its
 * token's X row, and the k order inside the slice is permuted to match: k-step s, fragment
 * columns 2q, 2q + 1 (q = lane & 3) are elements 8q + 4s + 0, 1 of the slice, columns 2q + 8, 2q + 9
 * are 8q + 4s + 2, 3; A and B agree, so the sum is the same. Why: ldmatrix reads 8 rows a pass and
 * 8 gathered rows collide in some bank group ~1.5 times in 2 (sj_slots_place); two rows a pass
 * collide only if they share a half line. arow: the rows' byte offsets, two 16-bit halves;
 * x: the lane's X chunk. */
template <int N>
__device__ __forceinline__ void sj_up_mtiles(float acc[4][4], const sj_u32 arow[4], const sj_u32 x[4], sj_u32 st) {
#pragma unroll
  for (int m = 0; m < N; m++) {
    sj_u32 lo[4], hi[4];
    sj_lds128(lo, st + (arow[m] & 0xffffu));
    sj_lds128(hi, st + (arow[m] >> 16));
    const sj_u32 a0[4] = { lo[0], hi[0], lo[1], hi[1] }, b0[2] = { x[0], x[1] };
    const sj_u32 a1[4] = { lo[2], hi[2], lo[3], hi[3] }, b1[2] = { x[2], x[3] };
    sj_mma_16816(acc[m], a0, b0);
    sj_mma_16816(acc[m], a1, b1);
  }
}

/* Byte offset of 16-byte chunk c of row r in a stage: TMA's 64-byte swizzle (rows of 64 bytes,
 * the chunk index XORed with bits 1-2 of the row, from a 512-byte aligned base), so 8 rows with
 * distinct r & 7 put the same chunk in 8 different bank groups. */
__device__ __forceinline__ sj_u32 sj_sw64(int r, int c) { return (sj_u32)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4)); }

/* Phase A, item (tt, ut). */
__device__ __forceinline__ void sj_pairs_up(unsigned char* smem, int tt, int ut, const unsigned* __restrict__ entries,
    const int* __restrict__ counts, sj_spill_t __restrict__ spill, unsigned* work, int M, int D, int F,
$ if LISTED then
    const sj_tensor_map* tm_x, const sj_tensor_map* tm_wu, ${KEEP_PARAMS})
$ else
    const sj_tensor_map* tm_x, const sj_tensor_map* tm_wu)
$ end
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 3, tl = lane & 7;
  unsigned char* ring = smem;
  unsigned* sw = (unsigned*)(smem + STAGES * A_STAGE) + warp * 4 * GQ;                 /* [4][GQ] */
  int* tab = (int*)(smem + STAGES * A_STAGE + NTH / 32 * 4 * GQ * 4) + warp * 128 + g * 32;   /* [4][32] */
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
$ if DX then
  if (tl == 0) work[PL_OFF + (NUT + ut) * NGP + G0 + g] = (unsigned)gtot;   /* WuT's stage of the tile */
$ end
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
  /* this lane's X chunk for the B fragments: chunk lane & 3 of token lane / 4 of group 0; group q's
   * token is 8 q rows further on, which keeps its swizzle (+ 512 bytes) */
  const sj_u32 xoff = sj_sw64(UT + warp * 32 + (lane >> 2), lane & 3);
  int it = 0;                                          /* slices consumed in earlier rounds */
  __syncthreads();                                     /* the barriers are initialised */
  for (int lo = 0;; lo += GQ) {
    /* deal the group's pairs lo .. lo + GQ - 1 to slots: this lane's pairs a .. b - 1 */
    const int a = max(0, lo - pre), b = min(n, lo + GQ - pre);
    if (a < b)
      sj_tile_pairs(entries, counts, spill, t, n_tiles, tile0, tile1, F, a, b,
                    [&](int idx, int u, unsigned short bits) {
                      sw[g * GQ + pre + idx - lo] = ((unsigned)bits << 16) | sj_row_code(u) | (unsigned)tl;
                    });
    const int ng = max(0, min(GQ, gtot - lo)), np = (ng + 15) & ~15;
    for (int s = ng + tl; s < GQ; s += 8) sw[g * GQ + s] = sj_row_code(s & 7) | 8u;
    __syncwarp();
    sj_slots_place(sw + g * GQ, tab, ng, np, tl);
    if (!__syncthreads_or(ng > 0)) break;             /* every slot is written */
    /* m-tiles this round, per group (uniform over the warp, so the loop below branches on them
     * instead of predicating each ldmatrix and mma) */
    int mt[4];
#pragma unroll
    for (int q = 0; q < 4; q++) mt[q] = (max(0, min(GQ, tot[q] - lo)) + 15) >> 4;
    /* per group and m-tile, the byte offsets of this lane's two rows (m-tile rows lane / 4 and
     * lane / 4 + 8) at its chunk, 16 bits each */
    sj_u32 arow[4][4];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
      for (int m = 0; m < 4; m++)
        arow[q][m] = sj_sw64(sj_slot_row(sw[q * GQ + m * 16 + (lane >> 2)]), lane & 3) |
                     (sj_sw64(sj_slot_row(sw[q * GQ + m * 16 + 8 + (lane >> 2)]), lane & 3) << 16);
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
      for (int q = 0; q < 4; q++) {
        if (mt[q] == 0) continue;
        sj_u32 x[4];
        sj_lds128(x, st + xoff + q * 512);
        switch (mt[q]) {
          case 4: sj_up_mtiles<4>(acc[q], arow[q], x, st); break;
          case 3: sj_up_mtiles<3>(acc[q], arow[q], x, st); break;
          case 2: sj_up_mtiles<2>(acc[q], arow[q], x, st); break;
          case 1: sj_up_mtiles<1>(acc[q], arow[q], x, st); break;
          default: break;
        }
      }
    }
    /* C[slot][token]: each slot's product on its own token, times h, rounded to T, replaces h */
${OWN_SLOTS} {
$ if DX then
              /* dh; dg and du to the pair's hybrid position; the slot takes dg (WgT's stages), acc du */
              const float a = ${to_f32}((T)(w >> 16));
              const float dg = sj_keep_grads(entries, counts, spill, tt * NTH + warp * 32 + q * 8 + (int)sj_slot_tok(w), ut,
                                             sj_slot_row(w), acc[q][m][c], a, ${KEEP_ARGS});
              sw[s] = ((unsigned)${from_f32}(dg) << 16) | (w & 0xffffu);
              acc[q][m][c] *= a;
$ else
              const float p = acc[q][m][c] * ${to_f32}((T)(w >> 16));
              sw[s] = ((unsigned)${from_f32}(p) << 16) | (w & 0xffffu);
$   if LISTED then
              /* the backward's u, at the pair's hybrid position */
              sj_keep_u(entries, counts, spill, tt * NTH + warp * 32 + q * 8 + (int)sj_slot_tok(w), ut, sj_slot_row(w),
                        acc[q][m][c], ${KEEP_ARGS});
$   end
$ end
            }
          }
        }
$ for half = 0, DX and 1 or 0 do
$   if half == 1 then
    __syncwarp();                                     /* the copies above have read the dg slots */
    /* WuT's stages: the same slots with du */
${OWN_SLOTS}
              sw[s] = ((unsigned)${from_f32}(acc[q][m][c]) << 16) | (w & 0xffffu);
          }
        }
$   end
    __syncwarp();
    /* the round's slots (np of each group) to the workspace: half a warp per group, 16 bytes a lane */
#pragma unroll
    for (int q2 = 0; q2 < 4; q2 += 2) {
      const int q = q2 + (lane >> 4), s = 4 * (lane & 15), n_q = (lane >> 4) ? tot[q2 + 1] : tot[q2];
      if (s < ((max(0, min(GQ, n_q - lo)) + 15) & ~15))
        *(uint4*)(work + SL_OFF + ((size_t)(G0 + q) * NUB + ${half == 1 and "NUT + " or ""}ut) * (8 * UT) + lo + s) = *(const uint4*)(sw + q * GQ + s);
    }
$ end
    __syncthreads();                                  /* the slots and the ring are free again */
  }
}

/* Phase B, item (tt, cb). */
__device__ __forceinline__ void sj_pairs_down(unsigned char* smem, int tt, int cb, const sj_tensor_map* tm_wd,
$ if DX then
    const sj_tensor_map* tm_wd2,
$ end
    const unsigned* work, OutT* __restrict__ Y, int M, int D, int F)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned* swb = (unsigned*)(smem + 2 * B_STAGE) + warp * 2 * 4 * GQ;               /* [2][4][GQ] */
  const sj_u32 full = sj_smem_addr(smem + B_BAR);     /* full[s]: stage s's Wd rows landed (TMA bytes) */
  const int c0 = cb * NCOL, G0 = tt * (NTH / 8) + warp * 4;
  const unsigned* slots = work + SL_OFF + (size_t)G0 * NUB * (8 * UT);              /* group q: + q * NUB * 8 * UT */
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
$ if DX then
    const sj_tensor_map* tm = ub < NUT ? tm_wd : tm_wd2;   /* WgT's rows, then WuT's */
    const int row0 = (ub < NUT ? ub : ub - NUT) * UB;
#pragma unroll
    for (int i = 0; i < UB / WBOX; i++) sj_tma_load_2d(st + i * WBOX * NCOL * 2, tm, c0, row0 + i * WBOX, bar);
$ else
#pragma unroll
    for (int i = 0; i < UB / WBOX; i++) sj_tma_load_2d(st + i * WBOX * NCOL * 2, tm_wd, c0, ub * UB + i * WBOX, bar);
$ end
  };
  /* a stage's first round of slots, given its counts c (16 bytes per lane and step) */
  auto load_slots = [&](int ub, int stage, const uint4 c) {
#pragma unroll
    for (int q2 = 0; q2 < 4; q2 += 2) {
      const int q = q2 + (lane >> 4), s = 4 * (lane & 15);
      const int n_q = (int)((lane >> 4) ? (q2 ? c.w : c.y) : (q2 ? c.z : c.x));
      if (s < ((min(GQ, n_q) + 15) & ~15))
        sj_cp_async16(sj_smem_addr(swb + stage * 4 * GQ + q * GQ + s), slots + ((size_t)q * NUB + ub) * (8 * UT) + s, 16);
    }
  };
  float acc[4][4][4];
#pragma unroll
  for (int q = 0; q < 4; q++)
#pragma unroll
    for (int m = 0; m < 4; m++) acc[q][m][0] = acc[q][m][1] = acc[q][m][2] = acc[q][m][3] = 0.f;
  /* The down product, per 8-slot k-tile and m-tile m of 32 columns: k = (slot, column parity),
   * A[r][(s, j)] = Wd[s][32 m + 4 (r & 7) + 2 (r >> 3) + j], so a lane's A fragment is 8 bytes
   * of each of its two slots' rows (rows r, r + 8 of its quad) and needs no transposition;
   * B[(s, j)][n] = p of slot s on token n for j = the product's parity (one even and one odd
   * product per m-tile, the same A). Why not ldmatrix.trans: it reads 8 slots' rows a pass, which
   * collide in some bank group ~1.5 times in 2; here a pass is 4 slots (sj_slots_place). A
   * lane's bytes of row u: u * 128 + (((4 m + (lane >> 3)) ^ (u & 7)) << 4) + 8 ((lane >> 2) & 1),
   * i.e. (slot word & 0xfff0) ^ lane_off ^ (m * 64). */
  const unsigned me = (unsigned)(lane >> 2);
  const unsigned lane_off = ((unsigned)(lane >> 3) << 4) | ((unsigned)((lane >> 2) & 1) << 3);
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
            *(uint4*)(sw + q * GQ + s) = __ldcg((const uint4*)(slots + ((size_t)q * NUB + ub) * (8 * UT) + lo + s));
        }
        __syncwarp();
      }
#pragma unroll
      for (int q = 0; q < 4; q++) {
        /* k-tiles of 8 slots over all np of the round: sj_slots_place may put a pair anywhere in them */
        const int ks_end = ((max(0, min(GQ, tot[q] - lo)) + 15) & ~15) >> 3;
        /* a k-tile's slot words: this lane's 2 (slots q and q + 4 of the 8, q = lane & 3), for B
         * and for the rows it loads. ks_end is even (np is a multiple of 16), so k-tiles go in
         * pairs with no odd tail tested inside the loop; the next pair's words are read while
         * this pair's mma run. Rolled: unrolled over its at most 4 pairs the loop saves 2
         * instructions a pair and grows to ~1000 per group. */
        const unsigned* sq = sw + q * GQ + (lane & 3);
        unsigned wn[4] = { 0u, 0u, 0u, 0u };
        if (ks_end > 0) { wn[0] = sq[0]; wn[1] = sq[4]; wn[2] = sq[8]; wn[3] = sq[12]; }
#pragma unroll 1
        for (int ks = 0; ks < ks_end; ks += 2) {
          const unsigned w[4] = { wn[0], wn[1], wn[2], wn[3] };
          if (ks + 2 < ks_end) {
            wn[0] = sq[(ks + 2) * 8]; wn[1] = sq[(ks + 2) * 8 + 4];
            wn[2] = sq[(ks + 3) * 8]; wn[3] = sq[(ks + 3) * 8 + 4];
          }
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const unsigned wa = w[2 * h], wb = w[2 * h + 1];
            /* B: k = (slot, column parity), so the two columns of a 32-bit pair of Wd need no
             * transposition: the even product takes p on parity 0, the odd one on parity 1 */
            const unsigned pa = sj_slot_tok(wa) == me ? wa : 0u, pb = sj_slot_tok(wb) == me ? wb : 0u;
            const sj_u32 b_even[2] = { pa >> 16, pb >> 16 }, b_odd[2] = { pa & 0xffff0000u, pb & 0xffff0000u };
            const sj_u32 ra = st + ((wa & 0xfff0u) ^ lane_off), rb = st + ((wb & 0xfff0u) ^ lane_off);
#pragma unroll
            for (int m = 0; m < 2; m++) {
              sj_u32 af[4];
              sj_lds64(af, ra ^ (m * 64));
              sj_lds64(af + 2, rb ^ (m * 64));
              sj_mma_16816(acc[q][2 * m], af, b_even);
              sj_mma_16816(acc[q][2 * m + 1], af, b_odd);
            }
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
        const int col = c0 + 32 * (m >> 1) + 4 * (lane >> 2) + 2 * (c >> 1) + (m & 1);   /* m: m-tile, parity */
        if (tok < M && col < D) Y[(size_t)tok * D + col] = ${ofrom}(acc[q][m][c]);
      }
}
]], env) end

return M
