-- hybrid_gate.lua: the gate GEMM of a ReLU FFN block for training, H = relu(X . Wg), whose
-- epilogue writes H in the hybrid ELL + dense-backup format (ops/hybrid/hybrid_format.h)
-- directly: the row partition is decided on the GPU, no host round trip, no second pass.
--
-- Problem: op "hybrid-gate", M = tokens, N = d_ff, K = d_model; T = N (a row is one tile) and
-- C = W, the ELL width (a hybrid row is a TwELL tile as wide as the row).
-- Kernel ABI: (const T* X, const T* WgT, unsigned short* values, unsigned short* columns,
--              int* nnz, int* slot, int* owner, unsigned short* backup, int* counter,
--              int M, int N, int K, int R); X is M x K and WgT N x K row-major, K % 8 == 0;
-- R = the backup's rows. The caller zeroes nnz, counter and the backup and sets slot to -1
-- before the launch (sj_hybrid_gate does, on the stream).
--
-- Main loop: templates/lib/twell_gate_sync.lua, the cp.async ring of twell_gate.lua's WG=0
-- (ldmatrix + mma.sync, any arch) and WG=1 (wgmma, sm_90a), staging the ReLU'd BM x BN tile in
-- shared memory. Epilogue: one warp per row of the tile counts the chunk's non-zeros (prefix sum
-- over lanes) and reserves positions in the row with one atomicAdd on nnz[row]; positions below
-- W go to the ELL (value, column). The chunk whose positions first pass W (exactly one per
-- overflow row: the reservations are a prefix sum) takes a backup row from the overflow counter
-- and publishes it in slot[row]; later chunks of the row wait for it (the publisher reserved
-- before them, so it is running, and it waits on nothing in between) and write their positions
-- from W on into that backup row. A counter past R leaves the row unplaced (slot >= R): the
-- counter tells the host how large a backup holds every row (sj_hybrid_gate_complete relaunches
-- into one). fp32 accumulation, ReLU, rounding to the input dtype before the non-zero test.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local sync = require "lib.twell_gate_sync"

local PARAMS = { "BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "WG" }
local MAX_ACC = 128   -- fp32 accumulators per thread

local function warps_of(cfg) return (cfg.BM // cfg.WM) * (cfg.BN // cfg.WN) end

local function smem_bytes(cfg)
  -- the ring, reused for the staged tile; + 1024: the ring base aligned by hand (wgmma swizzle)
  return math.max(cfg.STAGES * (cfg.BM + cfg.BN) * cfg.BK * 2, cfg.BM * (cfg.BN + 8) * 2) + 1024
end

local function valid(problem, cfg)
  local ok, why = tw.check_hybrid(problem, "hybrid-gate", PARAMS, cfg, "N")
  if not ok then return false, why end
  if problem.out_dtype ~= problem.dtype then
    return false, "out_dtype must equal dtype (the hybrid values), got " .. tostring(problem.out_dtype)
  end
  if problem.K % 8 ~= 0 then return false, "K=" .. problem.K .. " must be a multiple of 8 (16-byte rows)" end
  local BM, BN, BK, WM, WN = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN
  if not tw.member({ 64, 128 }, BM) then return false, "BM=" .. BM .. " must be 64 or 128" end
  if not tw.member({ 64, 128, 256 }, BN) then return false, "BN=" .. BN .. " must be 64, 128 or 256" end
  if not tw.member({ 32, 64 }, BK) then return false, "BK=" .. BK .. " must be 32 or 64" end
  if not tw.member({ 32, 64 }, WM) or not tw.member({ 32, 64 }, WN) then return false, "WM, WN must be 32 or 64" end
  if BM % WM ~= 0 or BN % WN ~= 0 then return false, "BM, BN must be multiples of WM, WN" end
  local warps = warps_of(cfg)
  if warps ~= 4 and warps ~= 8 then return false, string.format("%d warps; expected 4 or 8", warps) end
  if WM * WN // 32 > MAX_ACC then return false, "WM*WN/32 accumulators exceed " .. MAX_ACC end
  if cfg.STAGES < 2 or cfg.STAGES > 5 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..5" end
  if not tw.member({ 1, 8, 16 }, cfg.GROUP_M) then return false, "GROUP_M must be 1, 8 or 16" end
  if not tw.member({ 0, 1 }, cfg.WG) then return false, "WG must be 0 (mma.sync) or 1 (wgmma)" end
  if cfg.WG == 1 then
    if problem.arch ~= "sm_90a" then return false, "WG=1 (wgmma) needs sm_90a, the target is " .. tostring(problem.arch) end
    if BK ~= 64 then return false, "WG=1 needs BK=64 (128-byte swizzled rows)" end
    if BM ~= 64 * (warps // 4) then
      return false, string.format("WG=1 needs BM = 64 per warpgroup (%d warpgroups, BM=%d)", warps // 4, BM)
    end
    if BN // 2 > MAX_ACC then return false, "WG=1: BN/2 accumulators exceed " .. MAX_ACC end
  end
  if (BM * BK // 8) % (warps * 32) ~= 0 or (BN * BK // 8) % (warps * 32) ~= 0 then
    return false, "tile chunks must divide evenly among the threads"
  end
  local smem, limit = smem_bytes(cfg), tw.smem_limit(problem)
  if smem > limit then return false, string.format("shared memory %d bytes exceeds the target's %d", smem, limit) end
  if BM > math.max(64, tw.pow2_at_least(problem.M)) then return false, "BM is larger than M needs" end
  if BN > math.max(64, tw.pow2_at_least(problem.N)) then return false, "BN is larger than N needs" end
  return true
end

local function space(problem)
  return { BM = { 64, 128 }, BN = { 64, 128, 256 }, BK = { 32, 64 }, WM = { 32, 64 }, WN = { 32, 64 },
           STAGES = { 2, 3, 4, 5 }, GROUP_M = { 1, 8, 16 }, WG = { 0, 1 } }
end

-- twell_gate.lua's order of tiles (128 x 256 with wgmma was its fastest at every benchmark
-- shape on an H200; not measured for this epilogue yet): the first valid one that fills a wave
-- of ~132 SMs, with the deepest ring that fits. A problem nothing supports gets the first
-- candidate, so the generator reports valid()'s reason.
local DEFAULTS = {
  { BM = 128, BN = 256, WM = 64, WN = 64 },
  { BM = 128, BN = 128, WM = 64, WN = 32 },
  { BM = 64,  BN = 256, WM = 64, WN = 64 },
  { BM = 64,  BN = 128, WM = 64, WN = 32 },
  { BM = 64,  BN = 64,  WM = 32, WN = 32 },
}

local function default(problem)
  local chosen, first
  local wg = problem.arch == "sm_90a" and 1 or 0
  for _, d in ipairs(DEFAULTS) do
    for stages = 4, 2, -1 do
      local cfg = { BM = d.BM, BN = d.BN, BK = 64, WM = d.WM, WN = d.WN, STAGES = stages, GROUP_M = 8, WG = wg }
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

-- The dense gate: every (token, unit) pair is computed; only the writes are sparse.
local function flops(problem) return 2.0 * problem.M * problem.N * problem.K end

local function bytes(problem)
  -- inputs once; at the declared sparsity (0: unspecified, taken as 99%) 4 bytes per non-zero
  -- (value, column) in the ELL, nnz and slot per row
  local density = problem.SPARSITY > 0 and 1 - problem.SPARSITY or 0.01
  return (problem.M + problem.N) * problem.K * 2 + problem.M * problem.N * density * 4 + problem.M * 8
end

local function generate(problem, cfg)
  local dt = cuda.dtype(problem.dtype)
  local env = {
    prelude = cuda.prelude(problem.dtype),
    BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, WM = cfg.WM, WN = cfg.WN, STAGES = cfg.STAGES,
    GROUP_M = cfg.GROUP_M, WG = cfg.WG, THREADS = warps_of(cfg) * 32, WARPS = warps_of(cfg),
    WIDTH = problem.C, HPL = cfg.BN // 32, ctype = dt.ctype, pack2 = dt.pack2,
    wgmma = cfg.WG == 1 and cuda.wgmma(dt, cfg.BN) or "", hopper = cfg.WG == 1 and cuda.hopper() or "",
  }
  env.entry = string.format("sj_hybrid_gate_%s_w%d_%dx%dx%d_s%d_g%d_w%dx%d_wg%d", problem.dtype, problem.C, cfg.BM,
                            cfg.BN, cfg.BK, cfg.STAGES, cfg.GROUP_M, cfg.WM, cfg.WN, cfg.WG)
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
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
#define CLUSTER 1
#define WIDTH ${WIDTH}
#define HPL ${HPL}
#define CPR (BK / 8)
#define HS_LD (BN + 8)
typedef ${ctype} T;
$ if WG == 1 then
/* sm_90a helpers */ ${hopper}
/* wgmma of one warpgroup */ ${wgmma}
$ end

/* Origin (m0, n0) of tile u: a grouped raster (GROUP_M row tiles share their WgT columns in L2). */
__device__ __forceinline__ void sj_gate_tile(int u, int rank, int grid_m, int grid_n, int& m0, int& n0) {
  const int in_group = GROUP_M * grid_n;
  const int first_m = (u / in_group) * GROUP_M;
  const int rows_in_group = min(grid_m - first_m, GROUP_M);
  m0 = (first_m + (u % in_group) % rows_in_group) * BM;
  n0 = ((u % in_group) / rows_in_group) * BN;
}

/* +0 and -0 are zeros; everything else is a non-zero (ops/hybrid/hybrid_format.h). */
__device__ __forceinline__ bool sj_hybrid_nz(unsigned short bits) { return (bits & 0x7fffu) != 0; }

]], env) .. sync.helpers(env) .. emit.render(here(), [[
extern "C" __global__ void __launch_bounds__(THREADS, 1) ${entry}(
    const T* __restrict__ X, const T* __restrict__ WgT, unsigned short* __restrict__ values,
    unsigned short* __restrict__ columns, int* __restrict__ nnz, int* slot, int* __restrict__ owner,
    unsigned short* __restrict__ backup, int* __restrict__ counter, int M, int N, int K, int R)
{
  extern __shared__ __align__(128) unsigned char sj_smem_raw[];
  unsigned char* smem = sj_smem_raw + ((1024 - (sj_smem_addr(sj_smem_raw) & 1023)) & 1023);
  T* As = (T*)smem;
  T* Bs = As + STAGES * BM * BK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int units = grid_m * grid_n, rank = 0;
  const int KT = (K + BK - 1) / BK;

]], env) .. sync.mainloop(env) .. emit.render(here(), [[

  /* Hybrid rows: one warp per row of the tile; lane l holds columns l*HPL .. l*HPL+HPL-1 of the
   * chunk (columns past N were loaded as zeros, so they never count). */
  for (int r = warp; r < BM && m0 + r < M; r += WARPS) {
    const int row = m0 + r;
    const unsigned short* hs = (const unsigned short*)(Hs + r * HS_LD);
    unsigned short v[HPL];
    int nz = 0;
#pragma unroll
    for (int q = 0; q < HPL; q++) {
      v[q] = hs[lane * HPL + q];
      nz += sj_hybrid_nz(v[q]);
    }
    int incl = nz;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (total == 0) continue;
    int old = 0, s = -1;
    if (lane == 0) old = atomicAdd(nnz + row, total);   /* this chunk's positions in the row */
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old + total > WIDTH) {
      if (lane == 0) {
        if (old <= WIDTH) {              /* the first chunk past W: the row's backup slot */
          s = atomicAdd(counter, 1);
          if (s < R) owner[s] = row;
          atomicExch(slot + row, s);
        } else {                         /* published by a chunk that reserved before this one */
          while ((s = atomicAdd(slot + row, 0)) == -1) __nanosleep(32);
        }
      }
      s = __shfl_sync(0xffffffffu, s, 0);
    }
    unsigned short* bk = s >= 0 && s < R ? backup + (size_t)s * N + n0 : nullptr;
    int pos = old + incl - nz;
#pragma unroll
    for (int q = 0; q < HPL; q++)
      if (sj_hybrid_nz(v[q])) {
        const int c = lane * HPL + q;
        if (pos < WIDTH) {
          values[(size_t)row * WIDTH + pos] = v[q];
          columns[(size_t)row * WIDTH + pos] = (unsigned short)(n0 + c);
        } else if (bk) {
          bk[c] = v[q];
        }
        pos++;
      }
  }
}
]], env)
  local tiles = tw.cdiv(problem.M, cfg.BM) * tw.cdiv(problem.N, cfg.BN)
  return { source = src, entry = env.entry, grid = { tiles, 1, 1 }, block = { env.THREADS, 1, 1 },
           shared = smem_bytes(cfg) }
end

return {
  name = "hybrid_gate",
  op = "hybrid-gate",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
