-- vnm_dw.lua: the sampled weight gradient of a V:N:M layer, dW = dY . X^T only at the slots W's
-- compressed form keeps, written straight into W's value layout (ops/vnm/vnm_format.h) so an
-- optimizer updates W's values in place. problem.M = rows of W (out), problem.N = columns of W
-- (in), problem.K = tokens; dY is M x K and X is N x K, row-major (tokens contiguous), K a
-- multiple of 8; fp32 accumulation; the output has out_dtype (f16, bf16 or f32) elements in the
-- order of W's values (half 0 = the slot at metadata position p0, half 1 at p1), 0 in padding rows
-- and columns. The reference is ops/vnm/vnm_dw_host.c.
--
-- A sampled dense-dense product (SDDMM) on tensor cores: a CTA owns BM rows of one V-row block
-- and BG column groups, i.e. the BN = 4 BG columns the block selected in them (the index array,
-- -1 for padding). It computes the dense BM x BN tile dY[rows] . X[gathered columns]^T with
-- mma.sync m16n8k16 over the tokens (both operands are K-contiguous: A row-major, B "col"),
-- through a STAGES-deep cp.async ring of BK tokens (16-byte chunks, XOR-swizzled so ldmatrix is
-- conflict free); the gathered X rows come straight from the index, no copy of X. Then the tile
-- goes through shared memory and each (row, group) keeps the 2 of its 4 columns that its
-- metadata nibble names, one 4- or 8-byte store per pair in fragment order (consecutive threads,
-- consecutive words). Work: 4/M of the dense dW's, of which half is kept (the 2:4 inside).
--
-- WG=1 (sm_90a; the default there from V=128 with 64+ column groups, bench/RESULTS.md): the
-- same ring, gather and epilogue, but each warpgroup multiplies a 64 x BN slab with
-- wgmma.mma_async from shared-memory descriptors (BK=64: the ring's XOR swizzle is then exactly
-- wgmma's 128-byte pattern, the ring aligned to 1024 bytes), as the twell gate's WG=1 does; WM=64
-- and WN=BN name the warpgroup's tile. WG=0: warps of WM x WN on ldmatrix + mma.sync.
--
-- GROUP_M: the order of the CTAs. 0 (the default): every row tile of a column tile before the next
-- column tile; 1..64: GROUP_M row tiles walk all column tiles together (as the SpMM's raster), so a
-- wave streams fewer distinct dY rows from HBM (a tuning-space variant, not yet timed).
--
-- WG=2 (sm_90a; a tuning-space variant, correct but 1.4-1.9x slower than WG=1 on the H100): warp
-- specialised. Warpgroup 0 produces: it waits for a stage to be empty (mbarrier), gathers its dY
-- and X rows with cp.async, and STAGES-2 stages later, once its own copies of a stage have
-- landed (cp.async.wait_group), fences them into the async proxy and arrives on the stage's full
-- mbarrier; warpgroups 1.. consume: wait for full, wgmma over the stage, and release the stage
-- before through its empty mbarrier once their wgmmas on it are done. The loads no longer wait
-- for the slowest warp at two block barriers per stage, as WG=1's do. WM=64 and WN=BN as for WG=1.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local PARAMS = { "BM", "BG", "BK", "WM", "WN", "STAGES", "WG", "GROUP_M", "TMA" }
local MAX_ACC = 128             -- fp32 accumulators per thread
local BM_EDGES = { 16, 32, 64, 128 }
local BG_EDGES = { 8, 16, 32, 64 }
local BK_EDGES = { 32, 64 }
local WM_EDGES = { 16, 32, 64 }
local WN_EDGES = { 16, 32, 64 }     -- WG=0's warp tiles; WG=1 takes WN = 4 * BG
local PAD = 8                   -- floats of padding per row of the epilogue's tile: 8 rows' float2
                                -- stores (a half warp: 4 rows x 4 column pairs) hit distinct banks

local cdiv, member = vnm.cdiv, vnm.member

-- The compressed layout's geometry (lib/vnm_common.lua), W = M x N.
local function layout(problem) return vnm.layout(problem.M, problem.N, problem.V, problem.MS) end

local function pipe_bytes(cfg) return cfg.STAGES * (cfg.BM + 4 * cfg.BG) * cfg.BK * 2 end
local function epi_bytes(cfg) return cfg.BM * (4 * cfg.BG + PAD) * 4 end
-- WG >= 1 adds 1024 bytes to align the ring by hand (wgmma's swizzle atoms use absolute smem
-- bits); WG=2 also holds a full and an empty mbarrier per stage after the column index, TMA=1 a
-- full mbarrier per stage there.
local function smem_bytes(cfg)
  return math.max(pipe_bytes(cfg), epi_bytes(cfg)) + 4 * cfg.BG * 4 + (cfg.WG >= 1 and 1024 or 0)
         + (cfg.WG == 2 and 16 * cfg.STAGES or 0) + (cfg.TMA == 1 and 8 * cfg.STAGES or 0)
end

-- Registers a thread may use at THREADS per block (64K a block, one block per SM).
local function regs_per_thread(threads) return 65536 // threads end

local problem_ok = vnm.check_training_problem

local function valid(problem, cfg)
  for _, p in ipairs(PARAMS) do
    if math.type(cfg[p]) ~= "integer" then return false, p .. " is missing or not an integer" end
  end
  local ok, why = problem_ok(problem)
  if not ok then return false, why end
  local BM, BN, BK, WM, WN = cfg.BM, 4 * cfg.BG, cfg.BK, cfg.WM, cfg.WN
  if not member(BM_EDGES, BM) then return false, "BM=" .. BM .. " must be 16, 32, 64 or 128" end
  if not member(BG_EDGES, cfg.BG) then return false, "BG=" .. cfg.BG .. " must be 8, 16, 32 or 64" end
  if not member(BK_EDGES, BK) then return false, "BK=" .. BK .. " must be 32 or 64" end
  if BM > problem.V then return false, string.format("BM=%d exceeds V=%d: a CTA's rows share one V block's columns", BM, problem.V) end
  if cfg.WG == 1 or cfg.WG == 2 then
    local wg = "WG=" .. cfg.WG
    if problem.arch ~= "sm_90a" then return false, wg .. " (wgmma) needs sm_90a, the target is " .. tostring(problem.arch) end
    if BK ~= 64 then return false, wg .. " needs BK=64 (128-byte rows: wgmma's swizzle), got BK=" .. BK end
    if BM % 64 ~= 0 then return false, wg .. " needs BM a multiple of 64 (one warpgroup per 64 rows), got BM=" .. BM end
    if WM ~= 64 or WN ~= BN then
      return false, string.format("%s takes WM=64 and WN=4*BG=%d (the warpgroup's tile), got WM=%d, WN=%d", wg, BN, WM, WN)
    end
    if BN // 2 > MAX_ACC then return false, string.format("4*BG=%d: %d accumulators per thread, at most %d", BN, BN // 2, MAX_ACC) end
    -- WG=2's producer warpgroup shares the register file: the consumers' accumulators and ~72
    -- more registers must fit what 64K leaves each of the block's threads
    local threads = (BM // 64 + 1) * 128
    if cfg.WG == 2 and BN // 2 + 72 > regs_per_thread(threads) then
      return false, string.format("WG=2 with BM=%d, 4*BG=%d: %d threads leave %d registers each, %d accumulators need ~%d",
                                  BM, BN, threads, regs_per_thread(threads), BN // 2, BN // 2 + 72)
    end
  elseif cfg.WG == 0 then
    if not member(WM_EDGES, WM) then return false, "WM=" .. WM .. " must be 16, 32 or 64" end
    if not member(WN_EDGES, WN) then return false, "WN=" .. WN .. " must be 16, 32 or 64" end
    if BM % WM ~= 0 then return false, "BM=" .. BM .. " is not a multiple of WM=" .. WM end
    if BN % WN ~= 0 then return false, string.format("4*BG=%d is not a multiple of WN=%d", BN, WN) end
    local warps = (BM // WM) * (BN // WN)
    if warps ~= 2 and warps ~= 4 and warps ~= 8 then
      return false, string.format("(BM/WM)*(4*BG/WN) = %d warps, must be 2, 4 or 8", warps)
    end
    if WM * WN // 32 > MAX_ACC then
      return false, string.format("WM*WN/32 = %d accumulators per thread, at most %d", WM * WN // 32, MAX_ACC)
    end
  else
    return false, "WG=" .. cfg.WG .. " must be 0 (mma.sync), 1 (wgmma) or 2 (wgmma, warp specialised)"
  end
  if cfg.STAGES < 2 or cfg.STAGES > 4 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..4" end
  if cfg.TMA ~= 0 and cfg.TMA ~= 1 then return false, "TMA=" .. cfg.TMA .. " must be 0 (cp.async) or 1 (dY by TMA)" end
  if cfg.TMA == 1 and cfg.WG ~= 1 then return false, "TMA=1 (dY by TMA) needs WG=1, got WG=" .. cfg.WG end
  if cfg.GROUP_M < 0 or cfg.GROUP_M > 64 then
    return false, "GROUP_M=" .. cfg.GROUP_M .. " must be 0 (every row tile inner) or 1..64 (row tiles per raster group)"
  end
  local nk = cdiv(problem.K, BK)
  if cfg.STAGES > nk + 1 then return false, string.format("STAGES=%d exceeds the %d token stages plus one", cfg.STAGES, nk) end
  local L = layout(problem)
  if cfg.BG > math.max(8, L.GP) then return false, string.format("BG=%d is too large for %d (padded) groups", cfg.BG, L.GP) end
  local smem = smem_bytes(cfg)
  if smem > problem.SMEM then
    return false, string.format("shared memory %d bytes exceeds the %s limit of %d", smem, problem.arch, problem.SMEM)
  end
  return true
end

local function space(problem)
  local wn = { table.unpack(WN_EDGES) }
  local wg = { 0 }
  if problem.arch == "sm_90a" then wn[#wn + 1] = 128; wn[#wn + 1] = 256; wg[2] = 1; wg[3] = 2 end
  return { BM = BM_EDGES, BG = BG_EDGES, BK = BK_EDGES, WM = WM_EDGES, WN = wn, STAGES = { 2, 3, 4 }, WG = wg, GROUP_M = { 0, 8, 16, 32 },
           TMA = problem.arch == "sm_90a" and { 0, 1 } or { 0 } }
end

-- Candidates in order of preference, first valid wins. On sm_90a with V >= 128 and at least 64
-- column groups: WG=1 over 128 x 256 tiles with dY's stages by TMA, 4 stages, row tiles rastered
-- in groups of 16 (H100, 2026-12-07, f16 2:8 over 8192 tokens, one process: 836 us at
-- 11008 x 4096 against 959 for the same tile with cp.async, 3 stages and no grouping, and ~1056
-- before the gathered addresses were hoisted; bench/RESULTS.md). WG=1 itself against the WG=0
-- default below (H100, bf16: 1006 vs 1179 us at 11008 x 4096 2:8, 4826 vs 6174 at 28672 x 8192);
-- WG=1 with 128 gathered columns was no faster than WG=0. Elsewhere WG=0: BM as large as the V
-- block allows (the gathered X rows are shared by more rows), 128 gathered columns, 64-token
-- stages.
local PREFERRED = {
  { BM = 128, BG = 64, BK = 64, WM = 64, WN = 256, STAGES = 4, WG = 1, GROUP_M = 16, TMA = 1 },
  { BM = 128, BG = 32, BK = 64, WM = 64, WN = 64, STAGES = 3, WG = 0, GROUP_M = 0, TMA = 0 },
  { BM = 64,  BG = 32, BK = 64, WM = 32, WN = 64, STAGES = 3, WG = 0, GROUP_M = 0, TMA = 0 },
  { BM = 32,  BG = 16, BK = 64, WM = 32, WN = 32, STAGES = 3, WG = 0, GROUP_M = 0, TMA = 0 },
  { BM = 16,  BG = 16, BK = 64, WM = 16, WN = 32, STAGES = 3, WG = 0, GROUP_M = 0, TMA = 0 },
  { BM = 16,  BG = 8,  BK = 32, WM = 16, WN = 16, STAGES = 2, WG = 0, GROUP_M = 0, TMA = 0 },
}

-- The first of tiles that is valid for problem and accepted (accept may be nil), STAGES clamped to
-- the token stages there are; nil when none is.
local function first_valid(problem, tiles, accept)
  local nk = cdiv(problem.K, 64)
  for _, t in ipairs(tiles) do
    local cfg = {}
    for k, v in pairs(t) do cfg[k] = v end
    if cfg.BK == 64 then cfg.STAGES = math.min(cfg.STAGES, nk + 1) end
    if valid(problem, cfg) and (not accept or accept(cfg)) then return cfg end
  end
end

local function default(problem)
  local ok, why = problem_ok(problem)
  if not ok then error("vnm_dw: unsupported problem: " .. why, 0) end
  -- WG=1 only where it was measured: a full 256-column tile of groups
  local cfg = first_valid(problem, PREFERRED, function(c) return c.WG == 0 or layout(problem).GP >= 64 end)
  if not cfg then error("vnm_dw: no default config fits " .. problem.arch, 0) end
  return cfg
end

-- The tuner's first candidates (so a budgeted search sees each algorithm at its best-known tile):
-- WG=0's default tile, and on sm_90a the default where it is WG=1 and the first valid WG=1 tile
-- below (cp.async, for the shapes the default's tile does not fit). WG=2 (the producer
-- warpgroup) stays in the space but not here: 1.4-1.9x slower than WG=1 where measured
-- (bench/NOTES.md). An algorithm with no valid tile for the problem is left out.
local WGMMA_TILES = {}
for _, t in ipairs({ { 128, 64, 3 }, { 64, 32, 3 }, { 64, 16, 3 }, { 64, 8, 2 } }) do
  WGMMA_TILES[#WGMMA_TILES + 1] = { BM = t[1], BG = t[2], BK = 64, WM = 64, WN = 4 * t[2], STAGES = t[3], WG = 1, GROUP_M = 0, TMA = 0 }
end

local function variants(problem)
  local out = { first_valid(problem, PREFERRED, function(c) return c.WG == 0 end) or default(problem) }
  if problem.arch == "sm_90a" then
    local wgmma_default = default(problem)
    if wgmma_default.WG == 1 then out[#out + 1] = wgmma_default end
    local cfg = first_valid(problem, WGMMA_TILES)
    if cfg then out[#out + 1] = cfg end
  end
  return out
end

-- Useful FLOPs: the 2 kept slots of every M columns of every row, over the tokens.
local function flops(problem) return 2.0 * problem.M * problem.N * problem.K * problem.NS / problem.MS end

-- Fewest bytes: dY once, the gathered X rows once per row block, metadata, index, the output.
local function bytes(problem)
  local L = layout(problem)
  local osz = cuda.dtype(problem.out_dtype).size
  return problem.M * problem.K * 2 + L.RB * L.GP * 4 * problem.K * 2 + L.RP * L.GP // 2
         + L.RB * L.GP * 16 + L.RP * L.GP * 2 * osz
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("vnm_dw: invalid config: " .. why, 0) end
  local M, N, K, V, MS = problem.M, problem.N, problem.K, problem.V, problem.MS
  local BM, BG, BK, WM, WN, STAGES, WG = cfg.BM, cfg.BG, cfg.BK, cfg.WM, cfg.WN, cfg.STAGES, cfg.WG
  local BN = 4 * BG
  local L = layout(problem)
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local WARPS_N = BN // WN
  local THREADS = WG == 2 and (BM // 64 + 1) * 128 or WG == 1 and BM // 64 * 128 or (BM // WM) * WARPS_N * 32
  local LT = WG == 2 and 128 or THREADS    -- the threads that load the ring
  local CH = BK // 8                       -- 16-byte chunks per row of a stage
  local TM, TN = L.RP // BM, cdiv(L.GP, BG)
  local e = {
    M = M, N = N, K = K, V = V, BM = BM, BG = BG, BN = BN, BK = BK, WM = WM, WN = WN, STAGES = STAGES,
    T = din.ctype, OT = dout.ctype, THREADS = THREADS, WARPS_N = WARPS_N, CH = CH,
    ROWB = BK * 2, A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2,
    IT_A = cdiv(BM * CH, LT), IT_B = cdiv(BN * CH, LT), A_CH = BM * CH, B_CH = BN * CH, LT = LT,
    LAG = STAGES - 2, BAR_OFF = math.max(pipe_bytes(cfg), epi_bytes(cfg)) + BN * 4,
    NK = cdiv(K, BK), TM = TM, TN = TN, G = L.G, GP = L.GP, KTP = L.KTP, HKTP = L.KTP // 2,
    MI = WM // 16, NI = WN // 8, NJ = WN // 16, KK = BK // 16,
    LDS = BN + PAD, IDX_OFF = math.max(pipe_bytes(cfg), epi_bytes(cfg)),
    ITEMS = (BM // 16) * (BG // 8) * 128, KTC = BG // 8,
    -- the swizzle: a 16-byte chunk's place in its row; 8 consecutive rows at one chunk hit 8
    -- distinct bank groups (64-byte rows pair up, so BK=32 XORs with row/2)
    SWZ = CH == 8 and "(r & 7)" or "((r >> 1) & 3)",
    gp_tail = L.GP % BG ~= 0,
    out_f32 = problem.out_dtype == "f32", pack_out = dout.pack2, WG = WG, GROUP_M = math.min(cfg.GROUP_M, TM),
    -- WG=2's consumers would hold the producer's row addresses in registers their accumulators need
    hoist = WG ~= 2, k_tail = K % BK ~= 0, tma = cfg.TMA == 1, BOXES = BM // 64,
    prelude = cuda.prelude(problem.dtype) .. (WG >= 1 and cuda.hopper() .. cuda.wgmma(din, BN) or ""),
  }
  e.entry = string.format("sj_vnm_dw_%s_%s_v%d_m%d_bm%d_bg%d_bk%d_wm%d_wn%d_s%d%s",
                          problem.dtype, problem.out_dtype, V, MS, BM, BG, BK, WM, WN, STAGES, WG == 2 and "_ws" or WG == 1 and "_wg" or "")
            .. (cfg.GROUP_M > 0 and "_g" .. cfg.GROUP_M or "") .. (cfg.TMA == 1 and "_tma" or "")

  local kernel = emit.render(here(), [[
typedef ${T} InT;
typedef ${OT} OutT;
__device__ __forceinline__ sj_u32 sj_dw_swz(int r, int c) { return (sj_u32)(r * ${ROWB} + ((c ^ ${SWZ}) << 4)); }

$ -- Shape, V:N:M and config are constants; the int arguments only keep the op's ABI.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
    const InT* __restrict__ dY, const InT* __restrict__ X, const sj_u32* __restrict__ W_meta,
    const int* __restrict__ W_index, OutT* __restrict__ dW, int M_arg, int N_arg, int K_arg,
    const __grid_constant__ sj_tensor_map tm_dy)
{
  (void)M_arg; (void)N_arg; (void)K_arg;
  extern __shared__ __align__(128) unsigned char sj_smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / ${WARPS_N}, warp_n = warp % ${WARPS_N};
$ if GROUP_M == 0 then
  /* Row tiles inner: the CTAs of one wave share the groups' metadata rows and, per V block, X. */
  const int tile_m = blockIdx.x % ${TM}, tile_n = blockIdx.x / ${TM};
$ else
  /* Grouped raster: GROUP_M row tiles walk the column tiles together, so a wave reads the dY rows
     of GROUP_M row tiles (streamed over the tokens) once from HBM instead of every row tile's once
     per column tile, and X's gathered rows stay shared within a V block's column tiles. */
  const int group = blockIdx.x / ${GROUP_M * TN}, in_group = blockIdx.x - group * ${GROUP_M * TN};
  const int first_m = group * ${GROUP_M};
  const int group_rows = (${TM} - first_m < ${GROUP_M}) ? ${TM} - first_m : ${GROUP_M};
  const int tile_m = first_m + in_group % group_rows, tile_n = in_group / group_rows;
$ end
  const int row0 = tile_m * ${BM}, g0 = tile_n * ${BG};
  const int rb = row0 / ${V};
$ if WG >= 1 then
  unsigned char* const base = sj_smem + ((1024u - (sj_smem_addr(sj_smem) & 1023u)) & 1023u);
$ else
  unsigned char* const base = sj_smem;
$ end
  const sj_u32 smem0 = sj_smem_addr(base);
  int* cols = (int*)(base + ${IDX_OFF});

  /* The BN gathered columns: the index of (rb, g0 ..) is BN consecutive ints (-1: padding). */
  for (int j = tid; j < ${BN}; j += ${THREADS}) {
$ if gp_tail then
    cols[j] = (g0 + j / 4 < ${GP}) ? W_index[((long long)rb * ${GP} + g0) * 4 + j] : -1;
$ else
    cols[j] = W_index[((long long)rb * ${GP} + g0) * 4 + j];
$ end
  }
$ if WG == 2 then
  /* full[s]: the producer's 128 threads arrive once their copies of stage s landed; empty[s]:
     every consumer thread arrives once its wgmmas on stage s are done. */
  const sj_u32 full0 = smem0 + ${BAR_OFF}, empty0 = full0 + 8 * ${STAGES};
  if (tid == 0)
    for (int s = 0; s < ${STAGES}; ++s) {
      sj_mbar_init(full0 + 8 * s, 128);
      sj_mbar_init(empty0 + 8 * s, ${THREADS - 128});
    }
$ elseif tma then
  /* full[s]: stage s's dY rows have landed (the TMA's bytes); the X rows are cp.async's. */
  const sj_u32 full0 = smem0 + ${BAR_OFF};
  if (tid == 0) {
    for (int s = 0; s < ${STAGES}; ++s) sj_mbar_init(full0 + 8 * s, 1);
    sj_mbar_fence_init();
  }
$ end
  __syncthreads();
$ if hoist then

  /* This thread's gathered X rows are the CTA's for every stage (only the tokens move): their
     addresses are resolved once here, not re-read from the index and rebuilt at every stage. */
  const InT* x_row[${IT_B}];
#pragma unroll
  for (int i = 0; i < ${IT_B}; ++i) {
    const int q = tid + i * ${LT};
$   if B_CH % LT ~= 0 then
    const int col = q < ${B_CH} ? cols[q / ${CH}] : -1;
$   else
    const int col = cols[q / ${CH}];
$   end
    x_row[i] = col >= 0 ? X + (long long)col * ${K} + (q % ${CH}) * 8 : nullptr;
  }
$ end

  /* Copies tokens [ks*BK, ks*BK + BK) of the BM dY rows and the BN gathered X rows; rows past M,
     padding columns and tokens past K are zero-filled. */
  auto load_stage = [&](int ks, sj_u32 s) {
    const int t0 = ks * ${BK};
$ if tma then
    /* dY's BM x BK box(es) by TMA (rows past M and tokens past K arrive as zeros), 128-byte
       swizzled as sj_dw_swz lays out the ring, completing on full[ks % STAGES] */
    if (tid == 0) {
      const sj_u32 bar = full0 + 8 * (ks % ${STAGES});
      sj_mbar_expect_tx(bar, ${BM * BK * 2});
#pragma unroll
      for (int b = 0; b < ${BOXES}; ++b) sj_tma_load_2d(s + b * ${64 * BK * 2}, &tm_dy, t0, row0 + 64 * b, bar);
    }
$ else
#pragma unroll
    for (int i = 0; i < ${IT_A}; ++i) {
      const int q = tid + i * ${LT};
$ if A_CH % LT ~= 0 then
      if (q >= ${A_CH}) break;
$ end
      const int r = q / ${CH}, c = q % ${CH};
      const bool ok = row0 + r < ${M} && t0 + c * 8 < ${K};
      sj_cp_async16(s + sj_dw_swz(r, c), ok ? (const void*)(dY + (long long)(row0 + r) * ${K} + t0 + c * 8) : (const void*)dY,
                    ok ? 16 : 0);
    }
$ end
#pragma unroll
    for (int i = 0; i < ${IT_B}; ++i) {
      const int q = tid + i * ${LT};
$ if B_CH % LT ~= 0 then
      if (q >= ${B_CH}) break;
$ end
      const int r = q / ${CH}, c = q % ${CH};
$ if hoist then
      const bool ok = x_row[i] != nullptr${k_tail and " && t0 + c * 8 < " .. K or ""};
      sj_cp_async16(s + ${A_BYTES} + sj_dw_swz(r, c), ok ? (const void*)(x_row[i] + t0) : (const void*)X, ok ? 16 : 0);
$ else
      const int col = cols[r];
      const bool ok = col >= 0 && t0 + c * 8 < ${K};
      sj_cp_async16(s + ${A_BYTES} + sj_dw_swz(r, c), ok ? (const void*)(X + (long long)col * ${K} + t0 + c * 8) : (const void*)X,
                    ok ? 16 : 0);
$ end
    }
  };

$ if WG == 2 then
  const int wg = warp >> 2;
  float acc[${BN // 8}][4];
  if (wg == 0) {
    /* The producer: stage ks once its slot is empty; stage ks - LAG announced full once this
       thread's copies of it landed (LAG = STAGES - 2 < STAGES - 1, so the slot the producer
       waits for is always one whose full barrier it has already arrived on). */
#pragma unroll 1
    for (int ks = 0; ks < ${NK}; ++ks) {
      const int s = ks % ${STAGES};
      if (ks >= ${STAGES}) sj_mbar_wait(empty0 + 8 * s, ((ks / ${STAGES}) - 1) & 1);
      load_stage(ks, smem0 + s * ${STAGE_BYTES});
      sj_cp_async_commit();
      if (ks >= ${LAG}) {
        sj_cp_async_wait<${LAG}>();
        sj_fence_proxy_async();        /* this thread's cp.async writes -> the async proxy (wgmma) */
        sj_mbar_arrive(full0 + 8 * ((ks - ${LAG}) % ${STAGES}));
      }
    }
    sj_cp_async_wait<0>();
    sj_fence_proxy_async();
    for (int ks = ${NK} > ${LAG} ? ${NK} - ${LAG} : 0; ks < ${NK}; ++ks) sj_mbar_arrive(full0 + 8 * (ks % ${STAGES}));
  } else {
    /* Consumer warpgroup wg - 1 owns rows 64(wg-1)..64(wg-1)+63 of the tile, all BN columns. */
#pragma unroll
    for (int j = 0; j < ${BN // 8}; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 1
    for (int ks = 0; ks < ${NK}; ++ks) {
      const int s = ks % ${STAGES};
      sj_mbar_wait(full0 + 8 * s, (ks / ${STAGES}) & 1);
      const sj_u32 a0 = smem0 + s * ${STAGE_BYTES} + (wg - 1) * 64 * ${ROWB}, b0 = smem0 + s * ${STAGE_BYTES} + ${A_BYTES};
      sj_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < ${KK}; ++kk)
        sj_wgmma_n${BN}(acc, sj_desc_sw128(a0 + kk * 32), sj_desc_sw128(b0 + kk * 32), ks > 0 || kk > 0);
      sj_wgmma_commit();
      sj_wgmma_wait<1>();              /* the wgmmas on stage ks - 1 are done: release it */
      if (ks > 0) sj_mbar_arrive(empty0 + 8 * ((ks - 1) % ${STAGES}));
    }
    sj_wgmma_wait<0>();
  }
  __syncthreads();   /* every wgmma and copy is done: the tile goes where the stages were */

  float* tile = (float*)base;
  if (wg > 0) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < ${BN // 8}; ++j) {
      const int r = (wg - 1) * 64 + (warp & 3) * 16 + g, c = j * 8 + 2 * q;
      *(float2*)(tile + r * ${LDS} + c) = make_float2(acc[j][0], acc[j][1]);
      *(float2*)(tile + (r + 8) * ${LDS} + c) = make_float2(acc[j][2], acc[j][3]);
    }
  }
  __syncthreads();
$ elseif WG == 1 then
  /* Warpgroup wg owns rows 64wg..64wg+63 of the tile, all BN gathered columns. */
  const int wg = warp >> 2;
  float acc[${BN // 8}][4];
#pragma unroll
  for (int j = 0; j < ${BN // 8}; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) {
    if (st < ${NK}) load_stage(st, smem0 + st * ${STAGE_BYTES});
    sj_cp_async_commit();
  }
#pragma unroll 1
  for (int ks = 0; ks < ${NK}; ++ks) {
    const sj_u32 s = smem0 + (ks % ${STAGES}) * ${STAGE_BYTES};
    sj_cp_async_wait<${STAGES - 2}>();
    sj_fence_proxy_async();            /* the cp.async writes, visible to wgmma (the async proxy) */
$ if tma then
    sj_mbar_wait(full0 + 8 * (ks % ${STAGES}), (ks / ${STAGES}) & 1);
$ end
    __syncthreads();
    const sj_u32 a0 = s + wg * 64 * ${ROWB}, b0 = s + ${A_BYTES};
    sj_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < ${KK}; ++kk)
      sj_wgmma_n${BN}(acc, sj_desc_sw128(a0 + kk * 32), sj_desc_sw128(b0 + kk * 32), ks > 0 || kk > 0);
    sj_wgmma_commit();
    sj_wgmma_wait<1>();                /* this warpgroup's wgmmas of stage ks-1 are done ... */
    __syncthreads();                   /* ... in every warpgroup: that stage may be refilled */
    if (ks + ${STAGES - 1} < ${NK}) load_stage(ks + ${STAGES - 1}, smem0 + ((ks + ${STAGES - 1}) % ${STAGES}) * ${STAGE_BYTES});
    sj_cp_async_commit();
  }
  sj_wgmma_wait<0>();
  sj_cp_async_wait<0>();
  __syncthreads();   /* the ring is free: the tile goes where the stages were */

  /* Accumulator j of a warpgroup's 64 x BN slab holds rows 16(warp%4) + g and + 8, columns 8j + 2q, + 1. */
  float* tile = (float*)base;
  {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < ${BN // 8}; ++j) {
      const int r = wg * 64 + (warp & 3) * 16 + g, c = j * 8 + 2 * q;
      *(float2*)(tile + r * ${LDS} + c) = make_float2(acc[j][0], acc[j][1]);
      *(float2*)(tile + (r + 8) * ${LDS} + c) = make_float2(acc[j][2], acc[j][3]);
    }
  }
  __syncthreads();
$ else
  float acc[${MI}][${NI}][4];
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
    for (int ni = 0; ni < ${NI}; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;

  /* Prologue: STAGES-1 stages in flight (an empty group where there are fewer). */
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) {
    if (st < ${NK}) load_stage(st, smem0 + st * ${STAGE_BYTES});
    sj_cp_async_commit();
  }
  /* ldmatrix rows of this lane: A x4 = rows +0..15 at chunks 2kk, 2kk+1; B x4 = two n8 tiles
     (n +0..7, +8..15) at chunks 2kk, 2kk+1. */
  const int a_r = warp_m * ${WM} + (lane & 15), a_c = lane >> 4;
  const int b_r = warp_n * ${WN} + (lane & 7) + ((lane >> 4) << 3), b_c = (lane >> 3) & 1;

  int read_stage = 0, write_stage = ${STAGES - 1};
#pragma unroll 1
  for (int ks = 0; ks < ${NK}; ++ks) {
    /* Stage ks has landed once at most STAGES-2 younger groups are pending; the barrier also
       says every warp is done with the slot the next copy overwrites (read at ks-1). */
    sj_cp_async_wait<${STAGES - 2}>();
    __syncthreads();
    if (ks + ${STAGES - 1} < ${NK}) load_stage(ks + ${STAGES - 1}, smem0 + write_stage * ${STAGE_BYTES});
    sj_cp_async_commit();
    write_stage = (write_stage == ${STAGES - 1}) ? 0 : write_stage + 1;
    const sj_u32 s = smem0 + read_stage * ${STAGE_BYTES};
    read_stage = (read_stage == ${STAGES - 1}) ? 0 : read_stage + 1;
#pragma unroll
    for (int kk = 0; kk < ${KK}; ++kk) {
      sj_u32 af[${MI}][4], bf[${NJ}][4];
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi) sj_ldmatrix_x4(af[mi], s + sj_dw_swz(a_r + mi * 16, 2 * kk + a_c));
#pragma unroll
      for (int nj = 0; nj < ${NJ}; ++nj) sj_ldmatrix_x4(bf[nj], s + ${A_BYTES} + sj_dw_swz(b_r + nj * 16, 2 * kk + b_c));
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
        for (int ni = 0; ni < ${NI}; ++ni) sj_mma_16816(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);
    }
  }
  sj_cp_async_wait<0>();
  __syncthreads();   /* the ring is free: the tile goes where the stages were */

  /* Accumulator (mi, ni) holds rows +g and +g+8, gathered columns +2q and +2q+1. */
  float* tile = (float*)base;
  {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp_m * ${WM} + mi * 16 + h * 8 + g, c = warp_n * ${WN} + ni * 8 + 2 * q;
          *(float2*)(tile + r * ${LDS} + c) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        }
  }
  __syncthreads();

$ end

  /* Keep the 2 of 4 each (row, group) names: item w of a (16-row, 8-group) fragment tile is lane
     w/4, register w%4, i.e. row 8*(reg&1) + lane/4 and group 4*(reg>>1) + lane%4 of the tile;
     its pair of values is word w of the tile's 512 bytes (vnm_format.h). */
  for (int w = tid; w < ${ITEMS}; w += ${THREADS}) {
    const int t = w >> 7, item = w & 127, ln = item >> 2, reg = item & 3;
    const int mtl = t / ${KTC}, ktl = t % ${KTC};
    const int r = 8 * (reg & 1) + (ln >> 2), c = 4 * (reg >> 1) + (ln & 3);
    const int rl = mtl * 16 + r, gl = ktl * 8 + c;
    const int row = row0 + rl, g = g0 + gl;
$ if gp_tail then
    if (g >= ${GP}) continue;
$ end
    float v0 = 0.0f, v1 = 0.0f;
    if (row < ${M} && g < ${G}) {
      const int kt = g / 8;
      const sj_u32 word = W_meta[((long long)(row / 16) * ${HKTP} + kt / 2) * 32 + 4 * (r % 8) + 2 * (kt % 2) + c / 4];
      const sj_u32 nib = (word >> (16 * (r / 8) + 4 * (c % 4))) & 0xfu;
      v0 = tile[rl * ${LDS} + 4 * gl + (int)(nib & 3u)];
      v1 = tile[rl * ${LDS} + 4 * gl + (int)(nib >> 2)];
    }
    const long long off = ((((long long)(row / 16) * ${KTP} + g / 8) * 32 + ln) * 4 + reg) * 2;
$ if out_f32 then
    *(float2*)(dW + off) = make_float2(v0, v1);
$ else
    *(sj_u32*)(dW + off) = ${pack_out}(v0, v1);
$ end
  }
}
]], e)

  return {
    source = e.prelude .. kernel,
    entry = e.entry,
    grid = { TM * TN, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = smem_bytes(cfg),
  }
end

return {
  name = "vnm_dw",
  op = "vnm-dw",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  variants = variants,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
