-- vnm_spmm.lua: C = alpha * A . B + beta * C with A in V:N:M (VENOM) format on sparse tensor
-- cores. A (M rows x K) is stored as ops/vnm/vnm_format.c writes it: per V-row block and
-- M-column group four selected columns, inside them 2:4 per row, the kept values and the 2-bit
-- metadata already in mma.sp m16n8k32 fragment order (lib/mma_sp.lua) and per row block the B
-- row of every gathered column (-1 for padding). The reduction runs over the gathered k' = 4
-- per group: one k tile of 32 gathered columns is 8 groups. B (K x N) and C (M x N) are
-- row-major; fp32 accumulation; N must be a multiple of 8 (16-byte rows).
--
-- One CTA computes BM x BN of C with (BM/WM) x (BN/WN) warps; a warp's WM rows lie in one V
-- block, so it shares the gathered B tile of that block with the CTA's other warps (BM > V:
-- BM/V B tiles per stage, one per V block). Each stage of the STAGES-deep cp.async ring holds
-- BK gathered k: the B rows picked by the row block's column indices (one 16-byte cp.async per
-- row chunk, XOR-swizzled so ldmatrix.trans is conflict free), the A values (512 bytes per
-- 16 x 32 fragment, read back with one 16-byte load per lane) and the metadata (one word per
-- lane per pair of k tiles: selector 0 for the even tile, 1 for the odd). The B row indices of a
-- stage travel through their own shared ring, copied STAGES-1 iterations before the stage's B
-- rows, so no register holds them across the MMAs; each thread reads its rows' indices before
-- issuing its copies (BMAP picks which rows a thread copies). Blocks are rastered in groups of
-- GROUP_M tile rows so a wave of CTAs shares A and B in L2.
--
-- With problem.RANK = r > 0 (SLoPe's adapters), C = alpha * (A . B + U . Z) + beta * C: U (M x r)
-- and Z (r x N) row-major are two more arguments, and after the sparse loop each CTA stages
-- U's BM x RP and Z's RP x BN tiles (RP: r rounded up to 16, zeros past r) in the drained ring
-- and every warp runs RP/16 dense mma.sync m16n8k16 steps into the same accumulators, so C is
-- written once; r adds r/(2K/M) to the sparse loop's MMA work and one exposed tile load.
-- WG=1 (sm_90a, V >= 64; the default at V = 128 on its 128 x 256 tile, see default()):
-- lib/vnm_spmm_wgmma.lua, the same ring and format on wgmma.sp, one warpgroup per 64 rows;
-- WM=64 and WN=BN name the warpgroup's tile. WG=0: the warps above on mma.sp.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local mma_sp = require "lib.mma_sp"
local wgmma = require "lib.vnm_spmm_wgmma"

local PARAMS = { "BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "BMAP", "WG" }
local MAX_ACC = 128             -- fp32 accumulators per thread
local BM_EDGES = { 16, 32, 64, 128, 256 }
local BN_EDGES = { 64, 128, 256 }
local BK_EDGES = { 64, 128 }
local WM_EDGES = { 16, 32, 64 }
local WN_EDGES = { 16, 32, 64 }
local V_VALUES = { 16, 32, 64, 128 }

local function cdiv(a, b) return (a + b - 1) // b end

local function pow2_at_least(x)
  local p = 1
  while p < x do p = p * 2 end
  return p
end

local function member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- The compressed layout's geometry (must match ops/vnm/vnm_format.c).
local function layout(problem)
  local L = {}
  L.RB = cdiv(problem.M, problem.V)       -- row blocks
  L.RP = L.RB * problem.V                  -- rows padded to whole row blocks
  L.MT = L.RP // 16                        -- 16-row fragment tiles
  L.G = cdiv(problem.K, problem.MS)        -- column groups per row
  local kt = cdiv(L.G, 8)
  L.KTP = kt + kt % 2                      -- k tiles of 32 gathered columns, even
  L.KG = L.KTP * 32                        -- gathered k, padded
  return L
end

local function b_tiles(problem, cfg) return math.max(1, cfg.BM // problem.V) end

local function stage_bytes(problem, cfg)
  return b_tiles(problem, cfg) * cfg.BK * cfg.BN * 2 + cfg.BM * cfg.BK + cfg.BM * cfg.BK // 8
end

-- The ring of gathered-row indices: 2*STAGES slots of NBT x BK ints (none for 2:4).
local function index_bytes(problem, cfg)
  if problem.MS == 4 then return 0 end
  return 2 * cfg.STAGES * b_tiles(problem, cfg) * cfg.BK * 4
end

-- The low-rank tail's tiles: Z's RP rows of BN (the B tile's swizzled rows), then U's BM rows
-- of RP plus one 16-byte chunk, which staggers the rows over the banks for ldmatrix (RP/8 is
-- even, so a row is an odd number of chunks).
local function lowrank_geometry(problem, cfg)
  local G = { RP = (problem.RANK + 15) // 16 * 16 }
  G.UC = G.RP // 8                         -- 16-byte chunks of a U row
  G.U_OFF = G.RP * cfg.BN * 2
  G.U_ROWB = (G.UC + 1) * 16
  G.bytes = G.U_OFF + cfg.BM * G.U_ROWB
  return G
end

-- The tail reuses the ring once the sparse loop is done with it.
local function smem_bytes(problem, cfg)
  local ring = cfg.STAGES * stage_bytes(problem, cfg) + index_bytes(problem, cfg)
  if problem.RANK == 0 then return ring end
  return math.max(ring, lowrank_geometry(problem, cfg).bytes)
end

local function problem_ok(problem)
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "input dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if not member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "output dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if not member(V_VALUES, problem.V) then
    return false, "V=" .. tostring(problem.V) .. " must be 16, 32, 64 or 128"
  end
  if problem.NS ~= 2 then return false, "N of V:N:M must be 2, got " .. tostring(problem.NS) end
  if problem.MS < 4 or problem.MS > 128 then
    return false, "M of V:N:M must be 4..128, got " .. tostring(problem.MS)
  end
  if problem.M < 1 or problem.K < 1 or problem.N < 1 then
    return false, string.format("sizes must be positive, got %dx%dx%d", problem.M, problem.K, problem.N)
  end
  if problem.N % 8 ~= 0 then
    return false, "N=" .. problem.N .. " must be a multiple of 8 (16-byte rows of B and C)"
  end
  local r = problem.RANK
  if r ~= 0 and (r < 8 or r > 128 or r % 8 ~= 0) then
    return false, "RANK=" .. tostring(r) .. " must be 0 or a multiple of 8 in 8..128 (16-byte rows of U)"
  end
  return true
end

-- The checks of every config after its tile's (WG=0's warps, WG=1's warpgroups): k stages,
-- raster, shared memory, tiles no larger than the problem.
local function ring_ok(problem, cfg)
  local BM, BN, BK = cfg.BM, cfg.BN, cfg.BK
  local L = layout(problem)
  if L.KG % BK ~= 0 then
    return false, string.format("BK=%d does not divide the %d gathered columns", BK, L.KG)
  end
  local nks = L.KG // BK
  if cfg.STAGES < 2 or cfg.STAGES > 6 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..6" end
  if cfg.STAGES > nks + 1 then
    return false, string.format("STAGES=%d exceeds the %d k stages plus one", cfg.STAGES, nks)
  end
  if cfg.GROUP_M < 1 or cfg.GROUP_M > 64 then return false, "GROUP_M=" .. cfg.GROUP_M .. " must be 1..64" end
  if cfg.BMAP ~= 0 and cfg.BMAP ~= 1 then return false, "BMAP=" .. cfg.BMAP .. " must be 0 or 1" end
  local smem = cfg.WG == 1 and wgmma.smem_bytes(problem, cfg) or smem_bytes(problem, cfg)
  if smem > problem.SMEM then
    return false, string.format("shared memory %d bytes exceeds the %s limit of %d", smem, problem.arch, problem.SMEM)
  end
  if BM > math.max(16, pow2_at_least(L.RP)) then
    return false, string.format("BM=%d is too large for %d (padded) rows", BM, L.RP)
  end
  if BN > math.max(64, pow2_at_least(problem.N)) then
    return false, string.format("BN=%d is too large for N=%d", BN, problem.N)
  end
  return true
end

local function valid(problem, cfg)
  for _, p in ipairs(PARAMS) do
    if math.type(cfg[p]) ~= "integer" then return false, p .. " is missing or not an integer" end
  end
  local ok, why = problem_ok(problem)
  if not ok then return false, why end
  local BM, BN, BK, WM, WN, V = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN, problem.V
  if not member(BM_EDGES, BM) then return false, "BM=" .. BM .. " must be 16, 32, 64, 128 or 256" end
  if not member(BN_EDGES, BN) then return false, "BN=" .. BN .. " must be 64, 128 or 256" end
  if not member(BK_EDGES, BK) then return false, "BK=" .. BK .. " must be 64 or 128" end
  if cfg.WG == 1 then
    if problem.RANK > 0 then return false, "WG=1 (wgmma.sp) has no low-rank tail: RANK must be 0" end
    local ok_wg, why_wg = wgmma.valid(problem, cfg)
    if not ok_wg then return false, why_wg end
    return ring_ok(problem, cfg)
  end
  if cfg.WG ~= 0 then return false, "WG=" .. cfg.WG .. " must be 0 (mma.sp) or 1 (wgmma.sp)" end
  if not member(WM_EDGES, WM) then return false, "WM=" .. WM .. " must be 16, 32 or 64" end
  if not member(WN_EDGES, WN) then return false, "WN=" .. WN .. " must be 16, 32 or 64" end
  if BM % WM ~= 0 then return false, "BM=" .. BM .. " is not a multiple of WM=" .. WM end
  if BN % WN ~= 0 then return false, "BN=" .. BN .. " is not a multiple of WN=" .. WN end
  if WM > V then return false, string.format("WM=%d exceeds V=%d: a warp must lie in one V block", WM, V) end
  if BM <= V and V % BM ~= 0 then return false, string.format("V=%d is not a multiple of BM=%d", V, BM) end
  if BM > V and BM % V ~= 0 then return false, string.format("BM=%d is not a multiple of V=%d", BM, V) end
  local warps = (BM // WM) * (BN // WN)
  if warps ~= 4 and warps ~= 8 then
    return false, string.format("(BM/WM)*(BN/WN) = %d warps, must be 4 or 8", warps)
  end
  if WM * WN // 32 > MAX_ACC then
    return false, string.format("WM*WN/32 = %d accumulators per thread, at most %d", WM * WN // 32, MAX_ACC)
  end
  return ring_ok(problem, cfg)
end

local function space(problem)
  local wn, wg = { table.unpack(WN_EDGES) }, { 0 }
  if problem.arch == "sm_90a" then wn[#wn + 1] = 128; wn[#wn + 1] = 256; wg[2] = 1 end
  return {
    BM = BM_EDGES, BN = BN_EDGES, BK = BK_EDGES, WM = WM_EDGES, WN = wn,
    STAGES = { 2, 3, 4, 5, 6 }, GROUP_M = { 8, 16, 32, 64 }, BMAP = { 0, 1 }, WG = wg,
  }
end

-- Candidates in order of preference; the first valid one (shared memory within the target's
-- problem.SMEM) that still gives about a wave of CTAs wins, else the last valid one. The first
-- of each V were the fastest on an H200 (28672 x 8192 x 8192, 2:4 .. 2:32): V >= 128 shares a
-- B tile over 128 rows with 4 warps, 2 CTAs per SM; V = 64 keeps 64 rows and widens to BN = 256
-- so A is read half as often (the gathered B, rows/V * k' * N, dominates the L2 traffic).
local PREFERRED = {
  [128] = { BM = 128, BN = 128, WM = 64, WN = 64, STAGES = 4 },
  [64]  = { BM = 64,  BN = 256, WM = 64, WN = 64, STAGES = 3 },
  [32]  = { BM = 64,  BN = 128, WM = 32, WN = 64, STAGES = 4 },
  [16]  = { BM = 32,  BN = 128, WM = 16, WN = 64, STAGES = 4 },
}
local FALLBACK_TILES = {
  { BM = 64, BN = 128, WM = 32, WN = 64, STAGES = 4 },
  { BM = 64, BN = 64,  WM = 32, WN = 32, STAGES = 4 },
  { BM = 64, BN = 64,  WM = 16, WN = 32, STAGES = 3 },
  { BM = 32, BN = 64,  WM = 16, WN = 16, STAGES = 3 },
  { BM = 16, BN = 64,  WM = 16, WN = 16, STAGES = 3 },
}
local WAVE_CTAS = 128

-- WG=0's default: the first of the preferred and fallback tiles that is valid, stopping at one
-- that fills a wave.
local function default_mma_sync(problem)
  local L = layout(problem)
  local chosen
  local tiles = { PREFERRED[problem.V] }
  for _, t in ipairs(FALLBACK_TILES) do tiles[#tiles + 1] = t end
  for _, t in ipairs(tiles) do
    -- BMAP: gathered rows in runs per thread (vector index loads; 2-6% faster than strided on
    -- the H200); for 2:4 the two mappings measured within noise of each other.
    local cfg = { BM = t.BM, BN = t.BN, WM = t.WM, WN = t.WN, BK = 64, GROUP_M = 32,
                  BMAP = problem.MS == 4 and 0 or 1, WG = 0 }
    cfg.STAGES = math.min(t.STAGES, L.KG // 64 + 1)
    if valid(problem, cfg) then
      chosen = cfg
      if cdiv(L.RP, cfg.BM) * cdiv(problem.N, cfg.BN) >= WAVE_CTAS then break end
    end
  end
  return chosen
end

local function default(problem)
  local ok, why = problem_ok(problem)
  if not ok then error("vnm_spmm: unsupported problem: " .. why, 0) end
  -- sm_90a, V = 128: wgmma.sp (WG=1) at its 128 x 256 tile, 4 stages, where the problem fills a
  -- wave: 5-16% faster than WG=0's default at every point measured (H100, 2:4 to 2:16,
  -- bench/RESULTS.md). V = 64, its other tiles and smaller problems are not measured yet.
  if problem.arch == "sm_90a" and problem.V == 128 and problem.RANK == 0 then
    local cfg = wgmma.first_valid(problem, valid)
    if cfg and cfg.BM == 128 and cfg.BN == 256 and
       cdiv(layout(problem).RP, 128) * cdiv(problem.N, 256) >= WAVE_CTAS then
      return cfg
    end
  end
  return default_mma_sync(problem)
end

-- The tuner's first candidates, one per algorithm: on sm_90a the first WG=1 tile valid for the
-- problem (lib/vnm_spmm_wgmma.lua's list), then WG=0's default.
local function variants(problem)
  local out = {}
  if problem.arch == "sm_90a" then out[1] = wgmma.first_valid(problem, valid) end
  out[#out + 1] = default_mma_sync(problem)
  return out
end

-- Useful FLOPs: only the kept non-zeros (2 of every M per row) count, plus the low-rank term's.
local function flops(problem)
  return 2.0 * problem.M * problem.N * problem.K * problem.NS / problem.MS + 2.0 * problem.M * problem.N * problem.RANK
end

-- Fewest bytes: compressed A (values, metadata, column indices), B, C, U and Z once each.
local function bytes(problem)
  local L = layout(problem)
  local osz = cuda.dtype(problem.out_dtype).size
  local a = L.RP * L.KG + L.RP * L.KG // 8 + L.RB * L.KG * 4
  return a + problem.K * problem.N * 2 + problem.M * problem.N * osz + (problem.M + problem.N) * problem.RANK * 2
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("vnm_spmm: invalid config: " .. why, 0) end
  if cfg.WG == 1 then return wgmma.generate(problem, cfg) end
  local M, N, K, V, MS = problem.M, problem.N, problem.K, problem.V, problem.MS
  local BM, BN, BK, WM, WN, STAGES = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN, cfg.STAGES
  local L = layout(problem)
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local WARPS_M, WARPS_N = BM // WM, BN // WN
  local THREADS = WARPS_M * WARPS_N * 32
  local NBT = b_tiles(problem, cfg)
  local TM, TN = cdiv(L.RP, BM), cdiv(N, BN)
  local CPR = BN // 8                       -- 16-byte chunks per B tile row
  local RSB = THREADS // CPR                -- B rows one pass of the CTA covers
  local B_STAGE = NBT * BK * BN * 2
  local A_STAGE = BM * BK
  local E_STAGE = BM * BK // 8
  local e = {
    M = M, N = N, K = K, V = V, BM = BM, BN = BN, BK = BK, WM = WM, WN = WN, STAGES = STAGES, BMAP = cfg.BMAP,
    T = din.ctype, OT = dout.ctype, THREADS = THREADS, WARPS_N = WARPS_N,
    TM = TM, TN = TN, GROUP_M = math.min(cfg.GROUP_M, TM),
    RB = L.RB, MT = L.MT, KTP = L.KTP, KG = L.KG, NKS = L.KG // BK,
    MI = WM // 16, NI = WN // 8, KSTEPS = BK // 32, PAIRS = BK // 64, NBT = NBT,
    CPR = CPR, RSB = RSB, IT_B = NBT * BK // RSB, IVW = math.min(4, NBT * BK // RSB), ROWB = BN * 2, B_TILE = BK * BN * 2,
    AC = BM * BK // 16, IT_A = cdiv(BM * BK // 16, THREADS),
    EC = BM * BK // 128, IT_E = cdiv(BM * BK // 128, THREADS),
    A_OFF = B_STAGE, E_OFF = B_STAGE + A_STAGE, STAGE_BYTES = B_STAGE + A_STAGE + E_STAGE,
    IDX_OFF = STAGES * (B_STAGE + A_STAGE + E_STAGE),
    IC = NBT * BK // 4, IT_I = cdiv(NBT * BK // 4, THREADS),
    MTILES = BM // 16,
    gather = MS ~= 4,                       -- 2:4 reads B rows in order: no index array
    multi_b = NBT > 1,
    b_cols = N % BN ~= 0,
    rb_tail = NBT > 1 and L.RB % NBT ~= 0,  -- the last CTA row has V blocks past the end
    mt_tail = L.RP % BM ~= 0,               -- ... or fragment tiles past the end
    row_guard = M ~= L.RP,
    k_tail = L.KG ~= K,                     -- 2:4: gathered k past K reads zeros
    out_f32 = problem.out_dtype == "f32",
    to_f32_out = dout.to_f32, pack_out = dout.pack2,
    prelude = cuda.prelude(problem.dtype), ptx = mma_sp.source(problem.dtype),
    lowrank = problem.RANK > 0, lowrank_params = "",
  }
  e.entry = string.format("sj_vnm_spmm_%s_%s_v%d_m%d_bm%d_bn%d_bk%d_wm%d_wn%d_s%d_g%d_b%d",
                          problem.dtype, problem.out_dtype, V, MS, BM, BN, BK, WM, WN, STAGES, e.GROUP_M, cfg.BMAP)
  if e.lowrank then
    local G = lowrank_geometry(problem, cfg)
    e.entry = e.entry .. "_r" .. problem.RANK
    e.lowrank_params = ",\n    const InT* __restrict__ U, const InT* __restrict__ Z"
    e.RANK, e.RP, e.UC, e.U_OFF, e.U_ROWB = problem.RANK, G.RP, G.UC, G.U_OFF, G.U_ROWB
    e.KK = G.RP // 16                       -- k16 steps of the tail
    e.IT_Z = cdiv(G.RP, RSB)
    e.z_guard = G.RP % RSB ~= 0
    e.IT_U = cdiv(BM * G.UC, THREADS)
    e.u_guard = (BM * G.UC) % THREADS ~= 0
    e.rank_pad = problem.RANK ~= G.RP       -- Z rows and U chunks past r read zeros
  end
  -- 64-bit offsets only where a buffer can pass 2^31 elements.
  local big = math.max(L.MT * L.KTP * 512, K * N, M * N, L.RB * L.KG, M * problem.RANK, problem.RANK * N) >= 2147483647
  e.IDX = big and "long long" or "int"

  local kernel = emit.render(here(), [[
typedef ${T} InT;
typedef ${OT} OutT;
$ -- Shape, V:N:M and config are constants; the int arguments only keep the op's ABI.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
    const sj_u32* __restrict__ A_values, const sj_u32* __restrict__ A_meta,
    const int* __restrict__ B_rows, const InT* __restrict__ B, OutT* __restrict__ C,
    int M_arg, int N_arg, int K_arg, float alpha, float beta${lowrank_params})
{
  (void)M_arg; (void)N_arg; (void)K_arg;
$ if not gather then
  (void)B_rows;
$ end
  extern __shared__ __align__(128) unsigned char sj_smem[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / ${WARPS_N};
  const int warp_n = warp % ${WARPS_N};

  /* Grouped raster: GROUP_M tile rows walk the tile columns together. */
  const int pid = blockIdx.x;
  const int group = pid / ${GROUP_M * TN};
  const int first_m = group * ${GROUP_M};
  const int group_rows = (${TM} - first_m < ${GROUP_M}) ? ${TM} - first_m : ${GROUP_M};
  const int in_group = pid - group * ${GROUP_M * TN};
  const int row0 = (first_m + in_group % group_rows) * ${BM};
  const int col0 = (in_group / group_rows) * ${BN};
  const int mt0 = row0 / 16;            /* first 16-row fragment tile of the CTA */
  const int rb0 = row0 / ${V};          /* its V block */

  const sj_u32 smem0 = sj_smem_addr(sj_smem);
  const unsigned char* a_g = (const unsigned char*)A_values;
  const unsigned char* e_g = (const unsigned char*)A_meta;

  /* B copy mapping: thread tid moves 16-byte chunk b_c of IT_B gathered rows of the stage's
     NBT tiles of BK rows: BMAP 1 the consecutive rows b_r * IT_B + i (their indices come in
     vector loads; a run never straddles two tiles), BMAP 0 the rows b_r + i * RSB. */
  const int b_c = tid % ${CPR}, b_r = tid / ${CPR};
$ if b_cols then
  const bool b_cok = col0 + b_c * 8 < ${N};
$ end
  const InT* b_g = B + col0 + b_c * 8;
$ if gather then
  /* Index ring: slot j % (2*STAGES) holds the NBT x BK gathered B rows of stage j (-1: zeros). */
  const int* rows_g = B_rows + (${IDX})rb0 * ${KG};
  const sj_u32 idx_s = smem0 + ${IDX_OFF};
  auto load_rows = [&](int j) {
    if (j >= ${NKS}) return;
    const sj_u32 slot = idx_s + (j % ${2 * STAGES}) * ${NBT * BK * 4};
#pragma unroll
    for (int i = 0; i < ${IT_I}; ++i) {
      const int c = tid + i * ${THREADS};
$   if IC % THREADS ~= 0 then
      if (c >= ${IC}) break;
$   end
      const int bt = c / ${BK // 4}, r4 = c % ${BK // 4};
$   if rb_tail then
      const bool ok = rb0 + bt < ${RB};
$   else
      const bool ok = true;
$   end
      sj_cp_async16(slot + c * 16, ok ? (const void *)(rows_g + (${IDX})bt * ${KG} + j * ${BK} + r4 * 4) : (const void *)B_rows,
                    ok ? 16 : 0);
    }
  };
$ end

  /* Copies k stage ks (gathered columns ks*BK ..) into the ring slot at shared address s. */
  auto load_stage = [&](int ks, sj_u32 s) {
$ if gather then
    /* All of this thread's gathered rows first, then the copies (the loads are asm volatile:
       interleaved, each copy would wait for its own index load). */
    int rows[${IT_B}];
    {
      const sj_u32 src = idx_s + (ks % ${2 * STAGES}) * ${NBT * BK * 4};
$   if BMAP == 1 then
$     for v = 0, IT_B // IVW - 1 do
$       if IVW == 4 then
      sj_lds128((sj_u32 *)rows + ${v * 4}, src + b_r * ${IT_B * 4} + ${v * 16});
$       elseif IVW == 2 then
      sj_lds64((sj_u32 *)rows + ${v * 2}, src + b_r * ${IT_B * 4} + ${v * 8});
$       else
      rows[${v}] = (int)sj_lds32(src + b_r * ${IT_B * 4} + ${v * 4});
$       end
$     end
$   else
#pragma unroll
      for (int i = 0; i < ${IT_B}; ++i) rows[i] = (int)sj_lds32(src + (b_r + i * ${RSB}) * 4);
$   end
    }
$ end
#pragma unroll
    for (int i = 0; i < ${IT_B}; ++i) {
$ if BMAP == 1 then
      const int fr = b_r * ${IT_B} + i;
$ else
      const int fr = b_r + i * ${RSB};
$ end
      const int bt = fr / ${BK}, r = fr % ${BK};
      const sj_u32 dst = s + bt * ${B_TILE} + r * ${ROWB} + ((b_c ^ (r & 7)) << 4);
$ if gather then
      const int row = rows[i];
      bool ok = row >= 0;
$ else
      const int row = ks * ${BK} + r;
$   if k_tail then
      bool ok = row < ${K};
$   else
      bool ok = true;
$   end
$ end
$ if b_cols then
      ok = ok && b_cok;
$ end
      sj_cp_async16(dst, ok ? (const void *)(b_g + (${IDX})row * ${N}) : (const void *)B, ok ? 16 : 0);
    }
$ if gather then
    load_rows(ks + ${STAGES - 1});
$ end
    /* A values: per fragment tile, the stage's BK/32 k tiles are 512 contiguous bytes each. */
#pragma unroll
    for (int i = 0; i < ${IT_A}; ++i) {
      const int c = tid + i * ${THREADS};
$ if AC % THREADS ~= 0 then
      if (c < ${AC}) {
$ else
      {
$ end
        const int mt = c / ${BK}, rem = c % ${BK};
$ if mt_tail then
        const bool ok = mt0 + mt < ${MT};
$ else
        const bool ok = true;
$ end
        const ${IDX} off = ((${IDX})(mt0 + mt) * ${KTP} + ks * ${KSTEPS}) * 512 + rem * 16;
        sj_cp_async16(s + ${A_OFF} + c * 16, ok ? (const void *)(a_g + off) : (const void *)a_g, ok ? 16 : 0);
      }
    }
    /* Metadata: per fragment tile, the stage's BK/64 tile pairs are 128 bytes each. */
#pragma unroll
    for (int i = 0; i < ${IT_E}; ++i) {
      const int c = tid + i * ${THREADS};
$ if EC % THREADS ~= 0 then
      if (c < ${EC}) {
$ else
      {
$ end
        const int mt = c / ${BK // 8}, rem = c % ${BK // 8};
$ if mt_tail then
        const bool ok = mt0 + mt < ${MT};
$ else
        const bool ok = true;
$ end
        const ${IDX} off = ((${IDX})(mt0 + mt) * ${KTP // 2} + ks * ${PAIRS}) * 128 + rem * 16;
        sj_cp_async16(s + ${E_OFF} + c * 16, ok ? (const void *)(e_g + off) : (const void *)e_g, ok ? 16 : 0);
      }
    }
  };

  /* This warp's fragment addresses inside a stage. */
  const int mtl = warp_m * ${MI};       /* first local fragment tile */
$ if multi_b then
  const int bt = (warp_m * ${WM}) / ${V};
$ else
  const int bt = 0;
$ end
  const sj_u32 a_f = ${A_OFF} + mtl * ${BK * 16} + lane * 16;
  const sj_u32 e_f = ${E_OFF} + mtl * ${BK * 2} + lane * 4;
  sj_u32 b_f[${NI}];
#pragma unroll
  for (int ni = 0; ni < ${NI}; ++ni)
    b_f[ni] = bt * ${B_TILE} + lane * ${ROWB} + (((warp_n * ${NI} + ni) ^ (lane & 7)) << 4);
$ if mt_tail then
  /* Warps whose rows are past the padded rows compute nothing (warps never straddle). */
  const bool active = mt0 + mtl < ${MT};
$ else
  const bool active = true;
$ end

  float acc[${MI}][${NI}][4];
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
    for (int ni = 0; ni < ${NI}; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;

$ if gather then
  /* The rows of the first STAGES-1 stages; load_stage(ks) copies those of ks + STAGES - 1. */
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) load_rows(st);
  sj_cp_async_commit();
  sj_cp_async_wait<0>();
  __syncthreads();
$ end
  /* Prologue: STAGES-1 stages in flight (an empty group where there are fewer). */
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) {
    if (st < ${NKS}) load_stage(st, smem0 + st * ${STAGE_BYTES});
    sj_cp_async_commit();
  }

  int read_stage = 0, write_stage = ${STAGES - 1};
#pragma unroll 1
  for (int ks = 0; ks < ${NKS}; ++ks) {
    /* Stage ks has landed once at most STAGES-2 younger groups are pending; the barrier also
       says every warp is done with the slot the next copy overwrites (read at ks-1). */
    sj_cp_async_wait<${STAGES - 2}>();
    __syncthreads();
    if (ks + ${STAGES - 1} < ${NKS}) load_stage(ks + ${STAGES - 1}, smem0 + write_stage * ${STAGE_BYTES});
    sj_cp_async_commit();
    write_stage = (write_stage == ${STAGES - 1}) ? 0 : write_stage + 1;
    const sj_u32 s = smem0 + read_stage * ${STAGE_BYTES};
    read_stage = (read_stage == ${STAGES - 1}) ? 0 : read_stage + 1;
    if (!active) continue;

    sj_u32 ef[${PAIRS}][${MI}];
#pragma unroll
    for (int q = 0; q < ${PAIRS}; ++q)
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi) ef[q][mi] = sj_lds32(s + e_f + mi * ${BK * 2} + q * 128);
#pragma unroll
    for (int j = 0; j < ${KSTEPS}; ++j) {
      sj_u32 af[${MI}][4];
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi) sj_lds128(af[mi], s + a_f + mi * ${BK * 16} + j * 512);
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni) {
        sj_u32 bf[4];
        sj_ldmatrix_x4_trans(bf, s + b_f[ni] + j * ${32 * ROWB});
#pragma unroll
        for (int mi = 0; mi < ${MI}; ++mi) {
          if (j & 1) sj_mma_sp_16832<1>(acc[mi][ni], af[mi], bf, ef[j >> 1][mi]);
          else       sj_mma_sp_16832<0>(acc[mi][ni], af[mi], bf, ef[j >> 1][mi]);
        }
      }
    }
  }
  sj_cp_async_wait<0>();
$ if lowrank then
  /* Low-rank tail: acc += U . Z over RP more reduction columns. Every warp is past its last
     stage (the barrier), so the ring takes Z's RP x BN tile, rows swizzled like B's, and U's
     BM x RP tile, rows U_ROWB bytes apart; zeros past r, M and N. */
  __syncthreads();
  /* U and Z through opaque moves placed here: otherwise ptxas keeps a pointer of theirs live
     across the k loop and, at 64 x 64 warp tiles on sm_80, spills it there. */
  const InT *z_g, *u_g;
  asm volatile("mov.b64 %0, %1;" : "=l"(z_g) : "l"(Z));
  asm volatile("mov.b64 %0, %1;" : "=l"(u_g) : "l"(U));
#pragma unroll
  for (int i = 0; i < ${IT_Z}; ++i) {
    const int r = b_r + i * ${RSB};
$   if z_guard then
    if (r >= ${RP}) break;
$   end
$   if rank_pad then
    bool ok = r < ${RANK};
$   else
    bool ok = true;
$   end
$   if b_cols then
    ok = ok && b_cok;
$   end
    sj_cp_async16(smem0 + r * ${ROWB} + ((b_c ^ (r & 7)) << 4),
                  ok ? (const void *)(z_g + (${IDX})r * ${N} + col0 + b_c * 8) : (const void *)z_g, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < ${IT_U}; ++i) {
    const int c = tid + i * ${THREADS};
$   if u_guard then
    if (c >= ${BM * UC}) break;
$   end
    const int r = c / ${UC}, uc = c % ${UC};
$   if rank_pad then
    const bool ok = row0 + r < ${M} && uc < ${RANK // 8};
$   else
    const bool ok = row0 + r < ${M};
$   end
    sj_cp_async16(smem0 + ${U_OFF} + r * ${U_ROWB} + uc * 16,
                  ok ? (const void *)(u_g + (${IDX})(row0 + r) * ${RANK} + uc * 8) : (const void *)u_g, ok ? 16 : 0);
  }
  sj_cp_async_commit();
  sj_cp_async_wait<0>();
  __syncthreads();
  if (!active) return;
  {
    /* Per k16 step: A (U, row-major) by ldmatrix.x4, lanes 0-15 rows 0-15 of its first 8
       columns, lanes 16-31 of its second 8; B (Z, k x n) by ldmatrix.x2.trans, lanes 0-15 its
       16 rows. A rolled loop: unrolled, ptxas hoists the next steps' fragments beside the
       accumulators and spills at 64 x 64 warp tiles. */
    const sj_u32 u_f = smem0 + ${U_OFF} + (warp_m * ${WM} + (lane & 15)) * ${U_ROWB} + (lane >> 4) * 16;
    sj_u32 z_f[${NI}];
#pragma unroll
    for (int ni = 0; ni < ${NI}; ++ni)
      z_f[ni] = smem0 + lane * ${ROWB} + (((warp_n * ${NI} + ni) ^ (lane & 7)) << 4);
#pragma unroll 1
    for (int j = 0; j < ${KK}; ++j) {
      sj_u32 uf[${MI}][4];
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi) sj_ldmatrix_x4(uf[mi], u_f + mi * ${16 * U_ROWB} + j * 32);
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni) {
        sj_u32 zf[2];
        sj_ldmatrix_x2_trans(zf, z_f[ni] + j * ${16 * ROWB});
#pragma unroll
        for (int mi = 0; mi < ${MI}; ++mi) sj_mma_16816(acc[mi][ni], uf[mi], zf);
      }
    }
  }
$ else
  if (!active) return;
$ end

  /* Epilogue: accumulator (mi, ni) holds rows +g and +g+8, columns +2q and +2q+1. */
  const int g = lane >> 2, q = lane & 3;
  const bool use_c = beta != 0.0f;
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + warp_m * ${WM} + mi * 16 + h * 8 + g;
$ if row_guard then
      if (row >= ${M}) continue;
$ end
      OutT* crow = C + (${IDX})row * ${N};
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni) {
        const int col = col0 + warp_n * ${WN} + ni * 8 + 2 * q;
$ if b_cols then
        if (col >= ${N}) continue;
$ end
        float v0 = alpha * acc[mi][ni][2 * h], v1 = alpha * acc[mi][ni][2 * h + 1];
$ if out_f32 then
        if (use_c) { v0 += beta * crow[col]; v1 += beta * crow[col + 1]; }
        sj_stg_f32x2(crow + col, v0, v1);
$ else
        if (use_c) {
          const sj_u32 old = *(const sj_u32 *)(crow + col);
          v0 += beta * ${to_f32_out}((OutT)(old & 0xffffu));
          v1 += beta * ${to_f32_out}((OutT)(old >> 16));
        }
        *(sj_u32 *)(crow + col) = ${pack_out}(v0, v1);
$ end
      }
    }
  }
}
]], e)

  return {
    source = e.prelude .. e.ptx .. kernel,
    entry = e.entry,
    grid = { TM * TN, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = smem_bytes(problem, cfg),
  }
end

return {
  name = "vnm_spmm",
  op = "vnm-spmm",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  variants = variants,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
