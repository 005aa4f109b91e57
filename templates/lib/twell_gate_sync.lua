-- lib/twell_gate_sync.lua: WG=0 and WG=1 of templates/twell_gate.lua, the gate GEMM with one
-- CTA per BM x BN tile and the K slices loaded by every thread with cp.async.
--
-- Main loop: K is walked in BK slices through a STAGES-deep cp.async ring in XOR-swizzled
-- shared memory (16-byte chunk c of row r stored at c ^ (r % 8) for 128-byte rows: ldmatrix
-- conflict free, and exactly the 128-byte swizzle wgmma reads). WG=1 (sm_90a only): each
-- warpgroup multiplies a 64 x BN slab with wgmma.mma_async from shared-memory descriptors;
-- WG=0 (any arch): warps of WM x WN use ldmatrix + mma.sync m16n8k16.
-- Epilogue: ReLU, round to the input dtype, stage the BM x BN tile in shared memory; then one
-- warp per (row, T-wide tile) -- BN is a multiple of T, so the CTA owns whole tiles -- counts
-- the non-zeros (prefix sum over lanes), writes the first C as entries in column order, the
-- true count, and, when the count exceeds C, the whole tile densely into the spill (the
-- overflow path; see sparsejit.h). Columns past N are zero (zero-filled loads), rows past M
-- are skipped.
local emit = require "lib.emit"

local S = {}

-- The device functions before the entry: the swizzle and the loader of one ring stage.
function S.helpers(env) return emit.render(here(), [[
/* 16-byte chunk ch of tile row r (XOR swizzle; for 128-byte rows the wgmma 128B pattern). */
__device__ __forceinline__ int sj_swz(int r, int ch) {
$ if BK == 64 then
  return ch ^ (r & 7);
$ else
  return ch ^ ((r >> 1) & 3);
$ end
}

__device__ __forceinline__ void sj_gate_load(T* as, T* bs, const T* __restrict__ X, const T* __restrict__ WgT,
                                             int k0, int m0, int n0, int M, int N, int K, int tid) {
#pragma unroll
  for (int i = 0; i < BM * CPR / THREADS; i++) {
    const int c = tid + i * THREADS, r = c / CPR, ch = c % CPR;
    const int gr = m0 + r, gk = k0 + ch * 8;
    const bool ok = gr < M && gk < K;
    sj_cp_async16(sj_smem_addr(as + r * BK + sj_swz(r, ch) * 8), ok ? X + (size_t)gr * K + gk : X, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < BN * CPR / THREADS; i++) {
    const int c = tid + i * THREADS, r = c / CPR, ch = c % CPR;
    const int gr = n0 + r, gk = k0 + ch * 8;
    const bool ok = gr < N && gk < K;
    sj_cp_async16(sj_smem_addr(bs + r * BK + sj_swz(r, ch) * 8), ok ? WgT + (size_t)gr * K + gk : WgT, ok ? 16 : 0);
  }
}

]], env) end

-- The main loop after the common prologue (templates/twell_gate.lua): the CTA's tile origin
-- (m0, n0), the K loop, and the ReLU'd BM x BN tile rounded to T in shared memory at Hs (row
-- stride HS_LD), followed by a barrier. templates/hybrid_gate.lua ends it with its own epilogue.
function S.mainloop(env) return emit.render(here(), [[
  const int bid = blockIdx.x / CLUSTER;
  if (bid >= units) return;            /* a grid larger than the shape needs does nothing */
  int m0, n0;
  sj_gate_tile(bid, rank, grid_m, grid_n, m0, n0);
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) sj_gate_load(As + s * BM * BK, Bs + s * BN * BK, X, WgT, s * BK, m0, n0, M, N, K, tid);
    sj_cp_async_commit();
  }

$ if WG == 1 then
  /* Warpgroup wg owns rows 64wg..64wg+63 of the tile, all BN columns. */
  const int wg = warp >> 2;
  float acc[BN / 8][4];
#pragma unroll
  for (int j = 0; j < BN / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int kt = 0; kt < KT; kt++) {
    const int st = kt % STAGES;
    sj_cp_async_wait<STAGES - 2>();
    sj_fence_proxy_async();            /* cp.async writes -> visible to the async proxy */
    __syncthreads();
    const unsigned a0 = sj_smem_addr(As + st * BM * BK + wg * 64 * BK), b0 = sj_smem_addr(Bs + st * BN * BK);
    sj_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++)
      sj_wgmma_n${BN}(acc, sj_desc_sw128(a0 + ks * 32), sj_desc_sw128(b0 + ks * 32), kt > 0 || ks > 0);
    sj_wgmma_commit();
    sj_wgmma_wait<1>();                /* the previous k tile's wgmmas are done */
    __syncthreads();                   /* ... in every warpgroup: its stage may be refilled */
    const int nk = kt + STAGES - 1;
    if (nk < KT) sj_gate_load(As + (nk % STAGES) * BM * BK, Bs + (nk % STAGES) * BN * BK, X, WgT, nk * BK, m0, n0, M, N, K, tid);
    sj_cp_async_commit();
  }
  sj_wgmma_wait<0>();
  sj_cp_async_wait<0>();
  __syncthreads();
  T* Hs = (T*)smem;
#pragma unroll
  for (int j = 0; j < BN / 8; j++) {
    const int r = wg * 64 + (warp & 3) * 16 + g, c = j * 8 + 2 * t4;
    *(sj_u32*)(Hs + r * HS_LD + c) = ${pack2}(fmaxf(acc[j][0], 0.f), fmaxf(acc[j][1], 0.f));
    *(sj_u32*)(Hs + (r + 8) * HS_LD + c) = ${pack2}(fmaxf(acc[j][2], 0.f), fmaxf(acc[j][3], 0.f));
  }
$ else
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  float acc[WM / 16][WN / 8][4];
#pragma unroll
  for (int i = 0; i < WM / 16; i++)
#pragma unroll
    for (int j = 0; j < WN / 8; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
  for (int kt = 0; kt < KT; kt++) {
    sj_cp_async_wait<STAGES - 2>();
    __syncthreads();                   /* tile kt landed; everyone is done with tile kt-1 */
    const int nk = kt + STAGES - 1;
    if (nk < KT) sj_gate_load(As + (nk % STAGES) * BM * BK, Bs + (nk % STAGES) * BN * BK, X, WgT, nk * BK, m0, n0, M, N, K, tid);
    sj_cp_async_commit();
    const T* as = As + (kt % STAGES) * BM * BK;
    const T* bs = Bs + (kt % STAGES) * BN * BK;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++) {
      sj_u32 a[WM / 16][4], b[WN / 8][2];
#pragma unroll
      for (int i = 0; i < WM / 16; i++) {
        const int r = wm * WM + i * 16 + (lane & 15), ch = ks * 2 + (lane >> 4);
        sj_ldmatrix_x4(a[i], sj_smem_addr(as + r * BK + sj_swz(r, ch) * 8));
      }
#pragma unroll
      for (int j = 0; j < WN / 16; j++) {
        const int r = wn * WN + j * 16 + (lane & 7) + ((lane >> 4) << 3), ch = ks * 2 + ((lane >> 3) & 1);
        sj_u32 q[4];
        sj_ldmatrix_x4(q, sj_smem_addr(bs + r * BK + sj_swz(r, ch) * 8));
        b[2 * j][0] = q[0]; b[2 * j][1] = q[1]; b[2 * j + 1][0] = q[2]; b[2 * j + 1][1] = q[3];
      }
#pragma unroll
      for (int i = 0; i < WM / 16; i++)
#pragma unroll
        for (int j = 0; j < WN / 8; j++) sj_mma_16816(acc[i][j], a[i], b[j]);
    }
  }
  sj_cp_async_wait<0>();
  __syncthreads();
  T* Hs = (T*)smem;
#pragma unroll
  for (int i = 0; i < WM / 16; i++)
#pragma unroll
    for (int j = 0; j < WN / 8; j++) {
      const int r = wm * WM + i * 16 + g, c = wn * WN + j * 8 + 2 * t4;
      *(sj_u32*)(Hs + r * HS_LD + c) = ${pack2}(fmaxf(acc[i][j][0], 0.f), fmaxf(acc[i][j][1], 0.f));
      *(sj_u32*)(Hs + (r + 8) * HS_LD + c) = ${pack2}(fmaxf(acc[i][j][2], 0.f), fmaxf(acc[i][j][3], 0.f));
    }
$ end
  __syncthreads();
]], env) end

-- The TwELL epilogue over the staged tile.
local function twell_epilogue(env) return emit.render(here(), [[

  /* TwELL compaction: one warp per (row, tile); lane l holds columns l*VPL .. l*VPL+VPL-1. */
  for (int p = warp; p < BM * (BN / TT); p += WARPS) {
    const int r = p / (BN / TT), tl = p % (BN / TT);
    const int row = m0 + r, tile = n0 / TT + tl;
    if (row >= M || tile >= n_tiles) continue;
    const unsigned short* hs = (const unsigned short*)(Hs + r * HS_LD + tl * TT);
    unsigned short v[VPL];
    int nz = 0;
#pragma unroll
    for (int q = 0; q < VPL; q++) {
      const int c = lane * VPL + q;
      v[q] = c < TT ? hs[c] : (unsigned short)0;
      nz += sj_twell_nz(v[q]);
    }
    int incl = nz;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    unsigned* slots = entries + ((size_t)row * n_tiles + tile) * CAP;
    int pos = incl - nz;
#pragma unroll
    for (int q = 0; q < VPL; q++)
      if (sj_twell_nz(v[q])) {
        if (pos < CAP) slots[pos] = sj_twell_entry(lane * VPL + q, v[q]);
        pos++;
      }
    if (lane == 0) counts[(size_t)row * n_tiles + tile] = total;
    if (total > CAP) {                 /* overflow: the whole tile, densely, into the spill */
      T* sp = spill + (size_t)row * N + (size_t)tile * TT;
#pragma unroll
      for (int q = 0; q < VPL; q++) {
        const int c = lane * VPL + q;
        if (c < TT && tile * TT + c < N) sp[c] = v[q];
      }
    }
  }
]], env) end

-- The entry's body after the common prologue (templates/twell_gate.lua).
function S.body(env) return S.mainloop(env) .. twell_epilogue(env) end

return S
