-- twell_gate.lua: the gate GEMM of a ReLU FFN block, H = relu(X . Wg), whose epilogue writes H
-- as TwELL directly (no second pass, no synchronisation between thread blocks).
--
-- Problem: op "twell-gate", M = tokens, N = d_ff, K = d_model, T / C = TwELL tile / capacity.
-- Kernel ABI: (const T* X, const T* WgT, unsigned* entries, int* counts, T* spill,
--              int M, int N, int K, tmX, tmW); X is M x K, WgT is N x K (row j = Wg[:, j]), both
-- row-major, so both operands are K-major in shared memory; tmX / tmW are their TMA descriptors
-- (templates/README.md), read by WG=2 only.
--
-- Main loop: one CTA computes a BM x BN tile; K is walked in BK slices through a STAGES-deep
-- cp.async ring in XOR-swizzled shared memory (16-byte chunk c of row r stored at c ^ (r % 8)
-- for 128-byte rows: ldmatrix conflict free, and exactly the 128-byte swizzle wgmma reads).
-- WG=1 (sm_90a only): each warpgroup multiplies a 64 x BN slab with wgmma.mma_async from
-- shared-memory descriptors; WG=0 (any arch): warps of WM x WN use ldmatrix + mma.sync
-- m16n8k16. WG=2 (sm_90a only) is WG=1's math fed by a producer warpgroup: one thread issues
-- TMA loads (64 x 64 boxes, the same 128-byte swizzle) into the ring, full/empty mbarriers per
-- stage hand slots back and forth, and the consumer warpgroups never wait on each other or on
-- the loads of a slot they are not about to read (no __syncthreads in the main loop).
-- CLUSTER=2 (WG=2 only) pairs CTAs of adjacent row tiles and one column tile in a thread-block
-- cluster: each loads its own X rows and half of the shared WgT tile, multicast into both, so
-- a CTA pulls (BM + BN/2) rows per k slice from L2 instead of BM + BN. At 128 x 256 that is
-- 32 KB instead of 48 KB per 4.2 MFLOP: the unpaired kernel needs 8.8 TB/s of L2 at cuBLAS's
-- rate, above the H200's measured 8.0 (bench/NOTES.md); slots are freed by the consumers of
-- both CTAs (remote mbarrier arrivals). WG=2 is persistent (a CTA per SM walks the tiles) and
-- writes TwELL from its accumulators (below), so the producer fills the ring with the next
-- tile while the consumers finish this one.
--
-- Epilogue (WG=2): per row the 4 lanes that hold it exchange masks of their non-zeros; each
-- lane then walks its own set bits, and an entry's slot is the count of its tile's non-zeros
-- at smaller columns.
-- Epilogue (WG=0/1): ReLU, round to the input dtype, stage the BM x BN tile in shared memory; then one
-- warp per (row, T-wide tile) -- BN is a multiple of T, so the CTA owns whole tiles -- counts
-- the non-zeros (prefix sum over lanes), writes the first C as entries in column order, the
-- true count, and, when the count exceeds C, the whole tile densely into the spill (the
-- overflow path; see sparsejit.h). Columns past N are zero (zero-filled loads), rows past M
-- are skipped.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"

local PARAMS = { "BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "WG", "CLUSTER" }
local MAX_ACC = 128   -- fp32 accumulators per thread

-- The warps that compute (WM x WN tiles, or the consumer warpgroups of WG=1/2); WG=2 adds a
-- producer warpgroup.
local function warps_of(cfg) return (cfg.BM // cfg.WM) * (cfg.BN // cfg.WN) end
local function threads_of(cfg) return warps_of(cfg) * 32 + (cfg.WG == 2 and 128 or 0) end

-- The ring, and past it WG=2's full/empty mbarriers; WG=0/1 stage the output tile in the ring
-- once the main loop is done (WG=2 writes TwELL from registers while the ring refills).
local function bar_offset(cfg)
  local ring = cfg.STAGES * (cfg.BM + cfg.BN) * cfg.BK * 2
  if cfg.WG == 2 then return ring end
  return math.max(ring, cfg.BM * (cfg.BN + 8) * 2)
end

local function smem_bytes(cfg)
  -- + 1024: the ring base is aligned to 1024 bytes by hand (wgmma's 128-byte swizzle atoms)
  return bar_offset(cfg) + 1024 + (cfg.WG == 2 and 16 * cfg.STAGES or 0)
end

local function valid(problem, cfg)
  local ok, why = tw.check_ints(PARAMS, cfg)
  if not ok then return false, why end
  ok, why = tw.check_problem(problem, "twell-gate")
  if not ok then return false, why end
  if problem.out_dtype ~= problem.dtype then
    return false, "out_dtype must equal dtype (the TwELL values), got " .. tostring(problem.out_dtype)
  end
  if problem.K % 8 ~= 0 then return false, "K=" .. problem.K .. " must be a multiple of 8 (16-byte rows)" end
  local BM, BN, BK, WM, WN = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN
  if not tw.member({ 64, 128, 256 }, BM) then return false, "BM=" .. BM .. " must be 64, 128 or 256" end
  if not tw.member({ 64, 128, 256 }, BN) then return false, "BN=" .. BN .. " must be 64, 128 or 256" end
  if not tw.member({ 32, 64 }, BK) then return false, "BK=" .. BK .. " must be 32 or 64" end
  if not tw.member({ 32, 64 }, WM) then return false, "WM=" .. WM .. " must be 32 or 64" end
  if not tw.member({ 32, 64 }, WN) then return false, "WN=" .. WN .. " must be 32 or 64" end
  if BM % WM ~= 0 or BN % WN ~= 0 then return false, "BM, BN must be multiples of WM, WN" end
  local warps = warps_of(cfg)
  if warps ~= 4 and warps ~= 8 then return false, string.format("%d warps; expected 4 or 8", warps) end
  if WM * WN // 32 > MAX_ACC then return false, "WM*WN/32 accumulators exceed " .. MAX_ACC end
  if BN % problem.T ~= 0 then
    return false, string.format("BN=%d must be a multiple of T=%d so a CTA owns whole tiles", BN, problem.T)
  end
  if problem.T < 8 then return false, "T=" .. problem.T .. " must be at least 8" end
  if cfg.STAGES < 2 or cfg.STAGES > 5 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..5" end
  if not tw.member({ 1, 8, 16 }, cfg.GROUP_M) then return false, "GROUP_M must be 1, 8 or 16" end
  if not tw.member({ 0, 1, 2 }, cfg.WG) then return false, "WG must be 0, 1 or 2" end
  if cfg.WG >= 1 then
    local wg = "WG=" .. cfg.WG
    if problem.arch ~= "sm_90a" then return false, wg .. " (wgmma) needs sm_90a, the target is " .. tostring(problem.arch) end
    if BK ~= 64 then return false, wg .. " needs BK=64 (128-byte swizzled rows)" end
    if BM ~= 64 * (warps // 4) then
      return false, string.format("%s needs BM = 64 per warpgroup (%d warpgroups, BM=%d)", wg, warps // 4, BM)
    end
    if BN // 2 > MAX_ACC then return false, wg .. ": BN/2 accumulators exceed " .. MAX_ACC end
  end
  if not tw.member({ 1, 2 }, cfg.CLUSTER) then return false, "CLUSTER must be 1 or 2" end
  if cfg.CLUSTER == 2 then
    if cfg.WG ~= 2 then return false, "CLUSTER=2 needs WG=2 (TMA multicast)" end
    if (BN // 64) % 2 ~= 0 then return false, "CLUSTER=2 needs BN a multiple of 128 (a 64-row box per CTA)" end
  end
  if (BM * BK // 8) % (warps * 32) ~= 0 or (BN * BK // 8) % (warps * 32) ~= 0 then
    return false, "tile chunks must divide evenly among the threads"
  end
  local smem, limit = smem_bytes(cfg), tw.smem_limit(problem)
  if smem > limit then return false, string.format("shared memory %d bytes exceeds the target's %d", smem, limit) end
  if BM > math.max(64, tw.pow2_at_least(problem.M)) then return false, "BM is larger than M needs" end
  if BN > math.max(64, tw.pow2_at_least(problem.N), problem.T) then return false, "BN is larger than N needs" end
  return true
end

local function space(problem)
  return {
    BM = { 64, 128, 256 }, BN = { 64, 128, 256 }, BK = { 32, 64 }, WM = { 32, 64 }, WN = { 32, 64 },
    STAGES = { 2, 3, 4, 5 }, GROUP_M = { 1, 8, 16 }, WG = { 0, 1, 2 }, CLUSTER = { 1, 2 },
  }
end

-- Largest tiles first (on an H200, 128 x 256 with wgmma and 4 stages was the fastest of the
-- tried configs at every benchmark shape); the first valid one that still fills a wave of ~132
-- SMs wins, with the deepest ring the target's shared memory allows.
local DEFAULTS = {
  { BM = 128, BN = 256, WM = 64, WN = 64 },   -- 8 warps: 2 warpgroups
  { BM = 128, BN = 128, WM = 64, WN = 32 },
  { BM = 64,  BN = 256, WM = 64, WN = 64 },   -- 4 warps: 1 warpgroup
  { BM = 64,  BN = 128, WM = 64, WN = 32 },
  { BM = 64,  BN = 64,  WM = 32, WN = 32 },
}

-- A problem no config supports (K not a multiple of 8, T that divides no BN) still gets the
-- first candidate, so the generator reports valid()'s reason.
local function default(problem)
  local chosen, first
  local wg = problem.arch == "sm_90a" and 2 or 0
  for _, d in ipairs(DEFAULTS) do
    for stages = 4, 2, -1 do
      local cfg = { BM = d.BM, BN = d.BN, BK = 64, WM = d.WM, WN = d.WN, STAGES = stages, GROUP_M = 8, WG = wg,
                    CLUSTER = (wg == 2 and d.BN % 128 == 0) and 2 or 1 }
      first = first or cfg
      if valid(problem, cfg) then
        chosen = chosen or cfg
        if tw.cdiv(problem.M, cfg.BM) * tw.cdiv(problem.N, cfg.BN) >= 132 then return cfg end
        break
      end
    end
  end
  return chosen or first
end

local function flops(problem) return 2.0 * problem.M * problem.N * problem.K end

local function bytes(problem)
  -- inputs once, counts, and at most C entries per tile
  local tiles = problem.M * tw.cdiv(problem.N, problem.T)
  return (problem.M + problem.N) * problem.K * 2 + tiles * 4
end

-- The wgmma instruction of one warpgroup: D(64 x BN, fp32) += A(desc) . B(desc).
local function wgmma_fn(dt, BN)
  local n = BN // 2
  local regs, cons = {}, {}
  for i = 0, n - 1 do
    regs[#regs + 1] = "%" .. i
    cons[#cons + 1] = string.format('"+f"(d[%d][%d])', i // 4, i % 4)
  end
  return string.format([[
__device__ __forceinline__ void sj_wgmma_n%d(float d[%d][4], unsigned long long da, unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %%%d, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 0;\n}\n"
    : %s
    : "l"(da), "l"(db), "r"(acc)); }
]], BN, BN // 8, n + 2, BN, dt.ptx, dt.ptx, table.concat(regs, ","), n, n + 1, table.concat(cons, ", "))
end

-- WG=2 may split the units of a short last round into column halves (sj_gate_items below): a
-- half is BN/2 columns, whole TwELL tiles and whole 64-row boxes of WgT per CTA of the cluster.
local function halves(problem, cfg)
  local half = cfg.BN // 2
  return cfg.WG == 2 and half % (64 * cfg.CLUSTER) == 0 and half % problem.T == 0
end

local function generate(problem, cfg)
  local dt = cuda.dtype(problem.dtype)
  local warps = warps_of(cfg)
  local env = {
    prelude = cuda.prelude(problem.dtype), format_c = tw.format_c,
    BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, WM = cfg.WM, WN = cfg.WN, STAGES = cfg.STAGES,
    GROUP_M = cfg.GROUP_M, WG = cfg.WG, CLUSTER = cfg.CLUSTER, THREADS = threads_of(cfg), WARPS = warps,
    TT = problem.T, CAP = problem.C, VPL = math.max(1, problem.T // 32),
    ctype = dt.ctype, pack2 = dt.pack2,
    wgmma = cfg.WG >= 1 and wgmma_fn(dt, cfg.BN) or "", hopper = cfg.WG >= 1 and cuda.hopper() or "",
    BAR_OFF = bar_offset(cfg), HALVES = halves(problem, cfg) and 1 or 0,
  }
  if env.HALVES == 1 then env.wgmma = env.wgmma .. wgmma_fn(dt, cfg.BN // 2) end
  env.entry = string.format("sj_twell_gate_%s_t%dc%d_%dx%dx%d_s%d_g%d_w%dx%d_wg%d_c%d", problem.dtype, problem.T,
                            problem.C, cfg.BM, cfg.BN, cfg.BK, cfg.STAGES, cfg.GROUP_M, cfg.WM, cfg.WN, cfg.WG, cfg.CLUSTER)
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
/* TwELL format */ ${format_c}
#define BM ${BM}
#define BN ${BN}
#define BK ${BK}
#define WM ${WM}
#define WN ${WN}
#define WARPS ${WARPS}
#define WARPS_N (BN / WN)
#define THREADS ${THREADS}
#define STAGES ${STAGES}
#define GROUP_M ${GROUP_M}
#define CLUSTER ${CLUSTER}
#define TT ${TT}
#define CAP ${CAP}
#define VPL ${VPL}
#define HALVES ${HALVES}
#define CPR (BK / 8)
#define HS_LD (BN + 8)
#define SEGS ((BN / 8 + 15) / 16)
typedef ${ctype} T;
$ if WG >= 1 then
/* sm_90a helpers */ ${hopper}
/* wgmma of one warpgroup */ ${wgmma}
$ end

$ if WG ~= 2 then
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
$ end

/* Origin (m0, n0) of work unit u for the CTA of cluster rank `rank`: a grouped raster over units
 * of CLUSTER row tiles (GROUP_M units share their B columns in L2); the CTAs of a cluster take
 * adjacent row tiles of one unit, and a row tile past M loads zeros and writes nothing, so it
 * can still feed its partner. */
__device__ __forceinline__ void sj_gate_tile(int u, int rank, int grid_m, int grid_n, int& m0, int& n0) {
  const int in_group = GROUP_M * grid_n;
  const int first_m = (u / in_group) * GROUP_M;
  const int rows_in_group = min(grid_m - first_m, GROUP_M);
  m0 = ((first_m + (u % in_group) % rows_in_group) * CLUSTER + rank) * BM;
  n0 = ((u % in_group) / rows_in_group) * BN;
}

$ if WG == 2 then
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
$ end

$ if WG == 2 then
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
$ end

$ if CLUSTER == 2 then
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(THREADS, 1) ${entry}(
$ else
extern "C" __global__ void __launch_bounds__(THREADS, 1) ${entry}(
$ end
    const T* __restrict__ X, const T* __restrict__ WgT, unsigned* __restrict__ entries,
    int* __restrict__ counts, T* __restrict__ spill, int M, int N, int K,
    const __grid_constant__ sj_tensor_map tmX, const __grid_constant__ sj_tensor_map tmW)
{
  extern __shared__ __align__(128) unsigned char sj_smem_raw[];
  /* 1024-byte aligned ring: wgmma's swizzle atoms are addressed from absolute smem bits. */
  unsigned char* smem = sj_smem_raw + ((1024 - (sj_smem_addr(sj_smem_raw) & 1023)) & 1023);
  T* As = (T*)smem;
  T* Bs = As + STAGES * BM * BK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int grid_m = (M + BM * CLUSTER - 1) / (BM * CLUSTER), grid_n = (N + BN - 1) / BN;
  const int units = grid_m * grid_n, rank = blockIdx.x % CLUSTER;
  const int KT = (K + BK - 1) / BK;
  const int n_tiles = (N + TT - 1) / TT;

$ if WG == 2 then
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
$ else
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
$ end
}
]], env)
  local tiles = cfg.CLUSTER * tw.cdiv(problem.M, cfg.BM * cfg.CLUSTER) * tw.cdiv(problem.N, cfg.BN)
  -- WG=2 is persistent: one CTA per SM (its ring takes most of the SM's shared memory) when the
  -- target's SM count is known, walking the tiles in raster order; a shape of at most half as
  -- many units as clusters fit gets a cluster per half unit (sj_gate_items)
  if cfg.WG == 2 and problem.SMS > 0 then
    local clusters = problem.SMS // cfg.CLUSTER
    local units = tiles // cfg.CLUSTER
    if halves(problem, cfg) and 2 * units <= clusters then units = 2 * units end
    tiles = cfg.CLUSTER * math.min(units, clusters)
  end
  return {
    source = src, entry = env.entry,
    grid = { tiles, 1, 1 }, block = { threads_of(cfg), 1, 1 }, shared = smem_bytes(cfg),
  }
end

return {
  name = "twell_gate",
  op = "twell-gate",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
