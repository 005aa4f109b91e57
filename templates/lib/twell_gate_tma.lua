-- lib/twell_gate_tma.lua: WG=2 of templates/twell_gate.lua (sm_90a only), the gate GEMM as a
-- persistent, warp-specialised kernel: WG=1's wgmma math fed by a producer warpgroup.
--
-- One thread of the producer issues TMA loads (64 x 64 boxes, 128-byte swizzle) into a
-- STAGES-deep ring; full/empty mbarriers per stage hand slots back and forth, and the consumer
-- warpgroups never wait on each other or on the loads of a slot they are not about to read (no
-- __syncthreads in the main loop). CLUSTER=2 pairs CTAs of adjacent row tiles and one column
-- tile in a thread-block cluster: each loads its own X rows and half of the shared WgT tile,
-- multicast into both, so a CTA pulls (BM + BN/2) rows per k slice from L2 instead of BM + BN.
-- At 128 x 256 that is 32 KB instead of 48 KB per 4.2 MFLOP: the unpaired kernel needs 8.8 TB/s
-- of L2 at cuBLAS's rate, above the H200's measured 8.0 (bench/NOTES.md); slots are freed by
-- the consumers of both CTAs (remote mbarrier arrivals). A CTA per SM walks the tiles and writes
-- TwELL from its accumulators, so the producer fills the ring with the next tile while the
-- consumers finish this one.
-- Epilogue: per row the 4 lanes that hold it exchange masks of their non-zeros; each lane then
-- walks its own set bits, and an entry's slot is the count of its tile's non-zeros at smaller
-- columns.
local emit = require "lib.emit"

local G = {}

-- The device functions before the entry: the work items of the persistent CTAs, the release of
-- a ring slot and a consumer warpgroup's k loop.
function G.helpers(env) return emit.render(here(), [[
/* The persistent CTAs' work items. W clusters take the units in rounds of W; when the last
 * round would be at most half full (0 < units % W <= W / 2), its units are split into column
 * halves of BN / 2, two items each, so that round takes about half as long and twice as many
 * clusters share it: at 2048 x 11008 x 4096, 344 units on 66 clusters are 5 full rounds and
 * 14 units, which become 28 halves. */
__device__ __forceinline__ int sj_gate_items(int units, int W) {
  const int tail = units % W;
  return HALVES && tail > 0 && 2 * tail <= W ? units + tail : units;
}

/* Origin of item w, as sj_gate_tile; true when it is a half (columns n0 .. n0 + BN/2 - 1). */
__device__ __forceinline__ bool sj_gate_item(int w, int units, int items, int W, int rank, int grid_m, int grid_n,
                                             int& m0, int& n0) {
  const int whole = units - units % W;  /* the units of full rounds */
  if (items == units || w < whole) {
    sj_gate_tile(w, rank, grid_m, grid_n, m0, n0);
    return false;
  }
  sj_gate_tile(whole + (w - whole) / 2, rank, grid_m, grid_n, m0, n0);
  n0 += ((w - whole) & 1) * (BN / 2);
  return true;
}

/* A consumer warp gives a ring slot back: to its CTA's producer and, in a cluster, to its
 * partner's, which multicasts into this CTA's copy of the slot too. */
__device__ __forceinline__ void sj_gate_release(sj_u32 bar, int lane) {
  __syncwarp();
  if (lane == 0) {
$ if CLUSTER == 2 then
    sj_mbar_arrive_cta(bar, 0);
    sj_mbar_arrive_cta(bar, 1);
$ else
    sj_mbar_arrive(bar);
$ end
  }
}

/* A consumer warpgroup's k loop over one item: 64 x BN (or, for a half, 64 x BN/2 into acc's
 * first BN/16 chunks; the rest stay zero from the last epilogue) from the ring slots, each
 * handed back once this warp's wgmmas on it are done. `it` counts slices over all items. */
template <bool HALF>
__device__ __forceinline__ void sj_gate_consume(float (&acc)[BN / 8][4], int& it, int KT, sj_u32 full, sj_u32 empty,
                                                const T* As, const T* Bs, int wg, int lane) {
  for (int kt = 0; kt < KT; kt++, it++) {
    const int st = it % STAGES;
    sj_mbar_wait(full + 8 * st, (it / STAGES) & 1);
    const unsigned a0 = sj_smem_addr(As + st * BM * BK + wg * 64 * BK), b0 = sj_smem_addr(Bs + st * BN * BK);
    sj_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++) {   /* the item's first product overwrites acc */
$ if HALVES == 1 then
      if (HALF)
        sj_wgmma_n${BN // 2}(acc, sj_desc_sw128(a0 + ks * 32), sj_desc_sw128(b0 + ks * 32), kt > 0 || ks > 0);
      else
$ end
        sj_wgmma_n${BN}(acc, sj_desc_sw128(a0 + ks * 32), sj_desc_sw128(b0 + ks * 32), kt > 0 || ks > 0);
    }
    sj_wgmma_commit();
    sj_wgmma_wait<1>();            /* this warp's wgmmas of the previous slice are done ... */
    if (kt > 0) sj_gate_release(empty + 8 * ((it - 1) % STAGES), lane);   /* ... so its slot is free */
  }
  sj_wgmma_wait<0>();
  sj_gate_release(empty + 8 * ((it - 1) % STAGES), lane);
}

]], env) end

-- The entry's body after the common prologue (templates/twell_gate.lua).
function G.body(env) return emit.render(here(), [[
  /* Persistent: the CTA (with its cluster partner) walks units u = blockIdx.x / CLUSTER + i *
   * gridDim.x / CLUSTER, and the ring's slot and phase run on across units, so the producer
   * loads the next unit while the consumers write this one's TwELL from registers.
   * full[s]: the TMA loads of slot s landed (one arrival + the bytes); empty[s]: every consumer
   * warp of the cluster is done reading it (one arrival per warp and CTA). */
  const sj_u32 full = sj_smem_addr(smem + ${BAR_OFF}), empty = full + 8 * STAGES;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      sj_mbar_init(full + 8 * s, 1);
      sj_mbar_init(empty + 8 * s, WARPS * CLUSTER);
    }
    sj_mbar_fence_init();
  }
$ if CLUSTER == 2 then
  sj_cluster_sync();                   /* both CTAs' barriers exist before either is used */
$ else
  __syncthreads();
$ end
  const int first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  const int items = sj_gate_items(units, unit_step);
  if (warp >= WARPS) {                 /* the producer warpgroup: one thread issues every load */
    sj_setmaxnreg_dec<40>();
    if (tid == WARPS * 32) {
      int it = 0;                      /* k slices issued so far, over all units */
      for (int w = first_unit; w < items; w += unit_step) {
        int m0, n0;
        const bool half = sj_gate_item(w, units, items, unit_step, rank, grid_m, grid_n, m0, n0);
        const int boxes = (half ? BN / 2 : BN) / 64 / CLUSTER;   /* of WgT, per CTA */
        for (int kt = 0; kt < KT; kt++, it++) {
          const int st = it % STAGES;
          if (it >= STAGES) sj_mbar_wait(empty + 8 * st, ((it / STAGES) & 1) ^ 1);
          sj_mbar_expect_tx(full + 8 * st, (BM + boxes * 64 * CLUSTER) * BK * 2);
#pragma unroll
          for (int i = 0; i < BM / 64; i++)
            sj_tma_load_2d(sj_smem_addr(As + st * BM * BK + i * 64 * BK), &tmX, kt * BK, m0 + i * 64, full + 8 * st);
#pragma unroll
          for (int i = 0; i < BN / 64 / CLUSTER; i++) {
            if (i >= boxes) break;
            const int r = (rank * boxes + i) * 64;
$ if CLUSTER == 2 then
            sj_tma_load_2d_multicast(sj_smem_addr(Bs + st * BN * BK + r * BK), &tmW, kt * BK, n0 + r, full + 8 * st, 3);
$ else
            sj_tma_load_2d(sj_smem_addr(Bs + st * BN * BK + r * BK), &tmW, kt * BK, n0 + r, full + 8 * st);
$ end
          }
        }
      }
    }
    __syncwarp();
  } else {
    sj_setmaxnreg_inc<232>();
    /* Warpgroup wg owns rows 64wg..64wg+63 of the tile, all BN columns; this thread holds rows
     * r0 and r0 + 8, columns 8j + 2t4 and 8j + 2t4 + 1 of every j. */
    const int wg = warp >> 2, r0 = wg * 64 + (warp & 3) * 16 + g;
    float acc[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    int it = 0;
    for (int w = first_unit; w < items; w += unit_step) {
      int m0, n0;
      const bool half = sj_gate_item(w, units, items, unit_step, rank, grid_m, grid_n, m0, n0);
      if (half)
        sj_gate_consume<true>(acc, it, KT, full, empty, As, Bs, wg, lane);
      else
        sj_gate_consume<false>(acc, it, KT, full, empty, As, Bs, wg, lane);

      /* TwELL straight from the accumulators. The quad of lanes that shares g holds rows r0 and
       * r0 + 8 of the tile, interleaved by pairs: lane t4 has columns 8j + 2t4 + e (e = 0, 1) of
       * chunk j. Per row and segment of 16 chunks a lane makes a 32-bit mask of its non-zeros
       * (bit jl for e = 0, 16 + jl for e = 1, jl = j % 16) and the quad exchanges them; a
       * non-zero's slot is the count of its tile's non-zeros at smaller columns: all four lanes'
       * at the tile's earlier chunks, lanes below t4 at chunk j, and its own e = 0 neighbour.
       * Every element costs a few independent instructions (all masks are built, then all
       * exchanged); then each lane visits only its own non-zeros. The tensor cores idle
       * meanwhile (the consumers are the only warps that issue wgmmas), so every instruction
       * here counts. */
      sj_u32 v[2][BN / 8], mine[2][SEGS], q[2][SEGS][4];
#pragma unroll
      for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int s = 0; s < SEGS; s++) mine[h][s] = 0;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
          v[h][j] = ${pack2}(fmaxf(acc[j][2 * h], 0.f), fmaxf(acc[j][2 * h + 1], 0.f));
          acc[j][2 * h] = acc[j][2 * h + 1] = 0.f;   /* dead until the next unit: room for v */
          /* bit 15 / 31: the low / high half is non-zero (+0 and -0 are zeros; the low half's
           * sum stays below 0x10000, so nothing carries into the high half) */
          mine[h][j / 16] |= (((v[h][j] & 0x7fff7fffu) + 0x7fff7fffu) & 0x80008000u) >> (15 - j % 16);
        }
#pragma unroll
        for (int s = 0; s < SEGS; s++)
#pragma unroll
          for (int t = 0; t < 4; t++) q[h][s][t] = __shfl_sync(0xffffffffu, mine[h][s], (lane & ~3) | t);
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = m0 + r0 + 8 * h;
        if (row >= M) continue;
        unsigned* row_entries = entries + (size_t)row * n_tiles * CAP;
        /* Each lane walks only its own non-zeros (__ffs), so a warp's time follows its busiest
         * lane's count, not the number of chunks holding any non-zero: at 99% sparsity a lane
         * has under one non-zero per row, while about half of the chunks hold one somewhere in
         * the warp. A non-zero's value comes from the unrolled v[] through a select tree
         * (a dynamic index would put v in local memory). */
#pragma unroll
        for (int s = 0; s < SEGS; s++) {
          /* a tile of 32 chunks spans two segments: its non-zeros in the first come before */
          const int carry = (TT / 8 > 16 && (s & 1))
              ? __popc(q[h][s ^ 1][0]) + __popc(q[h][s ^ 1][1]) + __popc(q[h][s ^ 1][2]) + __popc(q[h][s ^ 1][3]) : 0;
          sj_u32 left = mine[h][s];
          while (left) {
            const int b = __ffs(left) - 1, jl = b & 15, e = b >> 4;
            left &= left - 1;
            /* the tile's chunks in this segment start at lo */
            const int lo = TT / 8 >= 16 ? 0 : jl & ~(TT / 8 - 1);
            const sj_u32 below = ((1u << jl) - (1u << lo)) * 0x10001u, upto = below | (0x10001u << jl);
            int pos = carry + e * ((mine[h][s] >> jl) & 1);   /* a high half follows its low half */
#pragma unroll
            for (int t = 0; t < 4; t++) pos += __popc(q[h][s][t] & (t < t4 ? upto : below));
            if (pos < CAP) {
              sj_u32 pick[16];
#pragma unroll
              for (int k = 0; k < 16; k++) pick[k] = 16 * s + k < BN / 8 ? v[h][16 * s + k] : 0u;
#pragma unroll
              for (int k = 0; k < 8; k++) pick[k] = jl & 8 ? pick[k + 8] : pick[k];
#pragma unroll
              for (int k = 0; k < 4; k++) pick[k] = jl & 4 ? pick[k + 4] : pick[k];
#pragma unroll
              for (int k = 0; k < 2; k++) pick[k] = jl & 2 ? pick[k + 2] : pick[k];
              const sj_u32 pair = jl & 1 ? pick[1] : pick[0];
              const int j = 16 * s + jl, tile = n0 / TT + j / (TT / 8);
              row_entries[tile * CAP + pos] =
                  sj_twell_entry(8 * (j % (TT / 8)) + 2 * t4 + e, (unsigned short)(pair >> (16 * e)));
            }
          }
        }
        /* per tile: the true count, and on overflow the whole tile densely into the spill */
#pragma unroll
        for (int tl = 0; tl < BN / TT; tl++) {
          const int tile = n0 / TT + tl;
          if (tile >= n_tiles || (half && tl >= BN / TT / 2)) continue;   /* a half's tiles end at BN/2 */
          int count = 0;
#pragma unroll
          for (int s = 0; s < SEGS; s++) {
            const int first = tl * (TT / 8) - 16 * s, last = first + TT / 8;   /* chunk range in s */
            if (last <= 0 || first >= 16) continue;
            const sj_u32 in_tile = ((last >= 16 ? 0x10000u : 1u << last) - (1u << (first < 0 ? 0 : first))) * 0x10001u;
            count += __popc(q[h][s][0] & in_tile) + __popc(q[h][s][1] & in_tile) +
                     __popc(q[h][s][2] & in_tile) + __popc(q[h][s][3] & in_tile);
          }
          if (t4 == 0) counts[(size_t)row * n_tiles + tile] = count;
          if (count > CAP) {
            T* sp = spill + (size_t)row * N + (size_t)tile * TT;
#pragma unroll
            for (int jj = 0; jj < TT / 8; jj++) {
              const int col = 8 * jj + 2 * t4;
              const sj_u32 x = v[h][tl * (TT / 8) + jj];
              if (tile * TT + col < N) sp[col] = (unsigned short)x;
              if (tile * TT + col + 1 < N) sp[col + 1] = (unsigned short)(x >> 16);
            }
          }
        }
      }
    }
  }
$ if CLUSTER == 2 then
  sj_cluster_sync();                   /* neither CTA leaves while its partner may signal its barriers */
$ end
]], env) end

-- The persistent grid: one CTA per SM (its ring takes most of the SM's shared memory) when the
-- target's SM count is known, walking the tiles in raster order; a shape of at most half as
-- many units as clusters fit gets a cluster per half unit (sj_gate_items). tiles: the CTAs one
-- per tile would take; halves: whether the last round may split units into column halves.
function G.grid(problem, cfg, tiles, halves)
  if problem.SMS == 0 then return tiles end
  local clusters = problem.SMS // cfg.CLUSTER
  local units = tiles // cfg.CLUSTER
  if halves and 2 * units <= clusters then units = 2 * units end
  return cfg.CLUSTER * math.min(units, clusters)
end

return G
