-- twell_gate.lua: the gate GEMM of a ReLU FFN block, H = relu(X . Wg), whose epilogue writes H
-- as TwELL directly (no second pass, no synchronisation between thread blocks).
--
-- Problem: op "twell-gate", M = tokens, N = d_ff, K = d_model, T / C = TwELL tile / capacity.
-- Kernel ABI: (const T* X, const T* WgT, unsigned* entries, int* counts, T* spill,
--              int M, int N, int K, tmX, tmW); X is M x K, WgT is N x K (row j = Wg[:, j]), both
-- row-major, so both operands are K-major in shared memory; tmX / tmW are their TMA descriptors
-- (templates/README.md), read by WG=2 only.
--
-- One CTA computes a BM x BN tile (WG=2: a persistent CTA walks tiles); K is walked in BK
-- slices through a STAGES-deep ring in shared memory with the 128-byte XOR swizzle wgmma reads.
-- Three variants (WG), a file each for the kernel text, this file holding their parameters,
-- checks, defaults and the parts they share (definitions, the tile raster, the entry's prologue):
--   WG=0 (any arch) and WG=1 (sm_90a), lib/twell_gate_sync.lua: every thread loads with cp.async;
--     warps of WM x WN on ldmatrix + mma.sync (0) or warpgroups on wgmma (1); the ReLU'd tile is
--     staged in shared memory and compacted to TwELL by one warp per (row, tile).
--   WG=2 (sm_90a), lib/twell_gate_tma.lua: a producer warpgroup's TMA loads feed wgmma consumer
--     warpgroups through full/empty mbarriers, optionally in clusters of two CTAs sharing WgT by
--     multicast (CLUSTER=2), and TwELL is written straight from the accumulators.
-- Every variant writes the true count of each tile, its first C entries in column order and,
-- when the count exceeds C, the whole tile densely into the spill (the overflow path; see
-- sparsejit.h). Columns past N are zero (zero-filled loads), rows past M are skipped.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local sync = require "lib.twell_gate_sync"
local tma = require "lib.twell_gate_tma"

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
    wgmma = cfg.WG >= 1 and cuda.wgmma(dt, cfg.BN) or "", hopper = cfg.WG >= 1 and cuda.hopper() or "",
    BAR_OFF = bar_offset(cfg), HALVES = halves(problem, cfg) and 1 or 0,
  }
  if env.HALVES == 1 then env.wgmma = env.wgmma .. cuda.wgmma(dt, cfg.BN // 2) end
  env.entry = string.format("sj_twell_gate_%s_t%dc%d_%dx%dx%d_s%d_g%d_w%dx%d_wg%d_c%d", problem.dtype, problem.T,
                            problem.C, cfg.BM, cfg.BN, cfg.BK, cfg.STAGES, cfg.GROUP_M, cfg.WM, cfg.WN, cfg.WG, cfg.CLUSTER)
  local variant = cfg.WG == 2 and tma or sync
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

]], env) .. variant.helpers(env) .. emit.render(here(), [[
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

]], env) .. variant.body(env) .. "}\n"
  local tiles = cfg.CLUSTER * tw.cdiv(problem.M, cfg.BM * cfg.CLUSTER) * tw.cdiv(problem.N, cfg.BN)
  if cfg.WG == 2 then tiles = tma.grid(problem, cfg, tiles, halves(problem, cfg)) end
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
