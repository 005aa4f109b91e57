-- gemm_dense.lua: dense C = A.B (row-major; A M x K, B K x N, C M x N) on tensor cores.
-- f16/bf16 inputs, fp32 accumulation, f16/bf16/f32 output. One CTA computes a BM x BN tile
-- with (BM/WM) x (BN/WN) warps; each warp owns a WM x WN sub-tile of m16n8k16 mma.sync
-- accumulators. K is walked in BK slices through a STAGES-deep cp.async ring in XOR-swizzled
-- shared memory (ldmatrix conflict free: the 8 row addresses of every 8x8 matrix land on 8
-- distinct 16-byte bank groups), A fragments via ldmatrix, B (K x N) via ldmatrix.trans.
-- The shape is baked in: the bounds checks of a dimension the tile divides are not emitted, and
-- an operand whose rows are not 16-byte aligned (K or N not a multiple of 8) is loaded element
-- by element instead of by cp.async. Blocks are rastered in groups of GROUP_M tile rows so a
-- wave of CTAs shares A rows and B columns in L2. EPI=1 stages the C tile through shared
-- memory so every thread stores whole 16-byte row pieces; EPI=0 stores fragments directly
-- (any N, and no shared memory beyond the pipeline's).
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local gemm_ptx = require "lib.gemm_ptx"

local PARAMS = { "BM", "BN", "BK", "WM", "WN", "STAGES", "GROUP_M", "EPI" }
-- problem.SMEM: the opt-in dynamic shared memory per block of the target (227 KB on sm_90,
-- 163 KB on sm_80), so a config is only valid where it can launch.
local MAX_ACC = 128             -- fp32 accumulators per thread: more leaves no room for fragments
local TILE_EDGES = { 32, 64, 128, 256 }
local K_TILES = { 32, 64 }
local WARP_EDGES = { 16, 32, 64 }

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

-- The largest tile edge worth using along an extent: a bigger tile is more than half padding.
local function edge_cap(extent) return math.max(32, pow2_at_least(extent)) end
local function k_cap(K) return math.max(32, pow2_at_least(K)) end

local function out_size(problem) return cuda.dtype(problem.out_dtype).size end

-- Row pitch of the staged C tile: 16 bytes of padding (32 for fp32, whose 8-byte fragment
-- stores go a half warp at a time) put the 8 rows of one fragment store on distinct banks.
local function epi_pitch(problem, BN)
  local osz = out_size(problem)
  return BN * osz + (osz == 4 and 32 or 16)
end

local function pipeline_bytes(cfg)
  return cfg.STAGES * (cfg.BM * cfg.BK + cfg.BK * cfg.BN) * 2
end

-- The staged C tile reuses the pipeline's shared memory once the main loop is done.
local function smem_bytes(problem, cfg)
  local pipe = pipeline_bytes(cfg)
  if cfg.EPI == 1 then return math.max(pipe, cfg.BM * epi_pitch(problem, cfg.BN)) end
  return pipe
end

-- EPI=1 stores 16-byte pieces of C rows: N must keep every row 16-byte aligned.
local function epi_ok(problem) return (problem.N * out_size(problem)) % 16 == 0 end

-- Deeper rings than k tiles + 1 only load nothing.
local function max_stages(problem, BK)
  return math.max(2, cdiv(problem.K, BK) + 1)
end

local function valid(problem, cfg)
  for _, p in ipairs(PARAMS) do
    if math.type(cfg[p]) ~= "integer" then return false, p .. " is missing or not an integer" end
  end
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "input dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if not member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "output dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  local BM, BN, BK, WM, WN = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN
  if not member(WARP_EDGES, WM) then return false, "WM=" .. WM .. " must be 16, 32 or 64" end
  if not member(WARP_EDGES, WN) then return false, "WN=" .. WN .. " must be 16, 32 or 64" end
  if BM % WM ~= 0 then return false, "BM=" .. BM .. " is not a multiple of WM=" .. WM end
  if BN % WN ~= 0 then return false, "BN=" .. BN .. " is not a multiple of WN=" .. WN end
  if not member(TILE_EDGES, BM) then return false, "BM=" .. BM .. " must be 32, 64, 128 or 256" end
  if not member(TILE_EDGES, BN) then return false, "BN=" .. BN .. " must be 32, 64, 128 or 256" end
  if not member(K_TILES, BK) then return false, "BK=" .. BK .. " must be 32 or 64" end
  local warps = (BM // WM) * (BN // WN)
  if warps ~= 4 and warps ~= 8 then
    return false, string.format("(BM/WM)*(BN/WN) = %d warps, must be 4 or 8", warps)
  end
  if WM * WN // 32 > MAX_ACC then
    return false, string.format("WM*WN/32 = %d accumulators per thread, at most %d", WM * WN // 32, MAX_ACC)
  end
  if cfg.STAGES < 2 or cfg.STAGES > 5 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..5" end
  if cfg.GROUP_M < 1 or cfg.GROUP_M > 64 then return false, "GROUP_M=" .. cfg.GROUP_M .. " must be 1..64" end
  if cfg.EPI ~= 0 and cfg.EPI ~= 1 then return false, "EPI=" .. cfg.EPI .. " must be 0 or 1" end
  if cfg.EPI == 1 and not epi_ok(problem) then
    return false, string.format("EPI=1 needs rows of C in 16-byte pieces: N=%d is not a multiple of %d",
                                problem.N, 16 // out_size(problem))
  end
  local smem = smem_bytes(problem, cfg)
  if smem > problem.SMEM then
    return false, string.format("shared memory %d bytes exceeds the %s limit of %d", smem, problem.arch, problem.SMEM)
  end
  if BM > edge_cap(problem.M) then return false, string.format("BM=%d is too large for M=%d", BM, problem.M) end
  if BN > edge_cap(problem.N) then return false, string.format("BN=%d is too large for N=%d", BN, problem.N) end
  if BK > k_cap(problem.K) then return false, string.format("BK=%d is too large for K=%d", BK, problem.K) end
  if cfg.STAGES > max_stages(problem, BK) then
    return false, string.format("STAGES=%d exceeds the %d k tiles of K=%d plus one", cfg.STAGES,
                                cdiv(problem.K, BK), problem.K)
  end
  return true
end

local function space(problem)
  local function upto(list, cap)
    local out = {}
    for _, v in ipairs(list) do if v <= cap then out[#out + 1] = v end end
    return out
  end
  local stages = {}
  for s = 2, math.min(5, max_stages(problem, 32)) do stages[#stages + 1] = s end
  return {
    BM = upto(TILE_EDGES, edge_cap(problem.M)),
    BN = upto(TILE_EDGES, edge_cap(problem.N)),
    BK = upto(K_TILES, k_cap(problem.K)),
    WM = WARP_EDGES,
    WN = WARP_EDGES,
    STAGES = stages,
    GROUP_M = { 1, 8, 16 },
    EPI = epi_ok(problem) and { 0, 1 } or { 0 },
  }
end

-- Largest tiles first; the first that is valid and still gives about a wave of CTAs wins
-- (a machine of ~132 SMs), else the smallest valid one. Measured on an H200 (f16, against the
-- alternatives below): 128x256 best from 2048^3 up and at 8192x1024x4096, 64x128 best at 1024^3;
-- GROUP_M=8 beat 1, 4 and 16; the staged epilogue (EPI=1) gained 10-25% for 16-bit outputs and
-- nothing for fp32, which keeps the direct stores and a smaller shared footprint.
local DEFAULT_TILES = {
  { BM = 128, BN = 256, WM = 64, WN = 64 },
  { BM = 128, BN = 128, WM = 64, WN = 32 },
  { BM = 64,  BN = 128, WM = 32, WN = 64 },
  { BM = 64,  BN = 64,  WM = 32, WN = 32 },
  { BM = 32,  BN = 64,  WM = 16, WN = 32 },
  { BM = 32,  BN = 32,  WM = 16, WN = 16 },
}
local WAVE_CTAS = 128

local function default(problem)
  local chosen
  for _, t in ipairs(DEFAULT_TILES) do
    local cfg = { BM = t.BM, BN = t.BN, WM = t.WM, WN = t.WN, BK = 32, GROUP_M = 8,
                  EPI = (epi_ok(problem) and out_size(problem) == 2) and 1 or 0 }
    cfg.STAGES = math.min(4, max_stages(problem, cfg.BK))
    if valid(problem, cfg) then
      chosen = cfg
      if cdiv(problem.M, cfg.BM) * cdiv(problem.N, cfg.BN) >= WAVE_CTAS then break end
    end
  end
  return chosen
end

local function flops(problem) return 2.0 * problem.M * problem.N * problem.K end

local function bytes(problem)
  local isz = cuda.dtype(problem.dtype).size
  local osz = cuda.dtype(problem.out_dtype).size
  return (problem.M * problem.K + problem.K * problem.N) * isz + problem.M * problem.N * osz
end

-- The XOR swizzle of 16-byte chunk columns for a row of `cpr` chunks, as C over `row`:
-- rows of >= 8 chunks XOR the chunk with row % 8; rows of 4 chunks (two rows per 128 bytes)
-- with (row / 2) % 4. Either way 8 consecutive rows at one logical chunk hit 8 bank groups.
local function swizzle(cpr, row)
  if cpr >= 8 then return "((" .. row .. ") & 7)" end
  assert(cpr == 4, "swizzle for rows of " .. cpr .. " chunks")
  return "(((" .. row .. ") >> 1) & 3)"
end

local function join_and(list)
  if #list == 0 then return nil end
  return table.concat(list, " && ")
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("gemm_dense: invalid config: " .. why, 0) end
  local M, N, K = problem.M, problem.N, problem.K
  local BM, BN, BK, WM, WN, STAGES, GROUP_M = cfg.BM, cfg.BN, cfg.BK, cfg.WM, cfg.WN, cfg.STAGES, cfg.GROUP_M
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local WARPS_M, WARPS_N = BM // WM, BN // WN
  local THREADS = WARPS_M * WARPS_N * 32
  local GM, GN = cdiv(M, BM), cdiv(N, BN)
  local big = math.max(M * K, K * N, M * N) >= 2147483647
  local e = {
    M = M, N = N, K = K, BM = BM, BN = BN, BK = BK, WM = WM, WN = WN, STAGES = STAGES,
    T = din.ctype, OT = dout.ctype, THREADS = THREADS, WARPS_N = WARPS_N,
    GM = GM, GN = GN, GROUP_M = math.min(GROUP_M, GM),
    KT = cdiv(K, BK), KSTEPS = BK // 16, MI = WM // 16, NI = WN // 8, NJ = WN // 16,
    CPR_A = BK // 8, ROWB_A = BK * 2, RS_A = THREADS // (BK // 8),
    IT_A = cdiv(BM * BK // 8, THREADS),
    CPR_B = BN // 8, ROWB_B = BN * 2, RS_B = THREADS // (BN // 8),
    IT_B = cdiv(BK * BN // 8, THREADS),
    A_BYTES = BM * BK * 2, STAGE_BYTES = (BM * BK + BK * BN) * 2,
    IDX = big and "long long" or "int", LL = big and "LL" or "",
    A_VEC = K % 8 == 0, B_VEC = N % 8 == 0,
    prelude = cuda.prelude(problem.dtype), ptx = gemm_ptx.source,
    to_out = dout.from_f32, pack_out = dout.pack2,
  }
  e.entry = string.format("sj_gemm_%s_%s_bm%d_bn%d_bk%d_wm%d_wn%d_s%d_g%d_e%d",
                          problem.dtype, problem.out_dtype, BM, BN, BK, WM, WN, STAGES, e.GROUP_M, cfg.EPI)
  e.swz_a = function(row) return swizzle(e.CPR_A, row) end
  e.swz_b = function(row) return swizzle(e.CPR_B, row) end

  -- Which guards this shape needs. A thread with no chunk of a tile smaller than the CTA
  -- (a_part/b_part) copies nothing (a zero-fill would land outside the tile); rows past M,
  -- k past K and columns past N read as zero.
  local a_part = BM * BK // 8 < THREADS
  local b_part = BK * BN // 8 < THREADS
  local a_rows = M % BM ~= 0
  local k_tail = K % BK ~= 0
  local b_cols = N % BN ~= 0
  e.a_rows, e.b_cols, e.a_part, e.b_part = a_rows, b_cols, a_part, b_part
  -- C condition for "row i of this thread's A chunks is inside A" (nil: always).
  e.a_row_ok = function(i)
    local c = {}
    if a_rows then c[#c + 1] = "a_ok" .. i end
    return join_and(c)
  end
  e.a_chunk_ok = function(i)  -- the whole 16-byte chunk (vector path)
    local c = { e.a_row_ok(i) }
    if k_tail then c[#c + 1] = "kb + a_c * 8 < " .. K end
    return join_and(c)
  end
  e.b_row_ok = function(i)
    local c = {}
    if k_tail then c[#c + 1] = string.format("kb + b_r + %d < %d", i * e.RS_B, K) end
    return join_and(c)
  end
  e.b_chunk_ok = function(i)
    local c = { e.b_row_ok(i) }
    if b_cols then c[#c + 1] = "b_cok" end
    return join_and(c)
  end
  e.cond = function(c, yes, no) if c then return "(" .. c .. ") ? " .. yes .. " : " .. no end return yes end
  e.both = function(a, b) if a and b then return a .. " && " .. b end return a or b end

  -- Output stores: pairs (4 or 8 bytes) when N is even, so every pair is aligned.
  e.pair_store = N % 2 == 0
  e.out_f32 = problem.out_dtype == "f32"
  e.EPI = cfg.EPI
  e.OSZ = dout.size
  e.PITCH = epi_pitch(problem, BN)
  e.CPR_C = BN * dout.size // 16                -- 16-byte pieces per C tile row
  e.EPC = 16 // dout.size                       -- elements per piece
  e.IT_C = BM * e.CPR_C // THREADS

  -- (A line whose first non-blank character is '$' is Lua to emit, so no text line starts
  -- with ${...}.)
  local kernel = emit.render(here(), [[
typedef ${T} InT;
typedef ${OT} OutT;
$ -- The kernel: shape and config are constants, the int arguments only keep the op's ABI.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
    const InT* __restrict__ A, const InT* __restrict__ B, OutT* __restrict__ C,
    int M_arg, int N_arg, int K_arg)
{
  (void)M_arg; (void)N_arg; (void)K_arg;
  extern __shared__ __align__(128) unsigned char sj_smem[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / ${WARPS_N};
  const int warp_n = warp % ${WARPS_N};

  /* Grouped raster: GROUP_M tile rows walk the tile columns together. */
  const int pid = blockIdx.x;
  const int group = pid / ${GROUP_M * GN};
  const int first_m = group * ${GROUP_M};
  const int group_rows = (${GM} - first_m < ${GROUP_M}) ? ${GM} - first_m : ${GROUP_M};
  const int in_group = pid - group * ${GROUP_M * GN};
  const int row0 = (first_m + in_group % group_rows) * ${BM};
  const int col0 = (in_group / group_rows) * ${BN};

  const sj_u32 smem0 = sj_smem_addr(sj_smem);

  /* Copy mapping: thread tid moves 16-byte chunks tid, tid + THREADS, ... of each tile;
     A's tile is BM rows of CPR_A chunks, B's is BK rows of CPR_B chunks. */
  const int a_r = tid / ${CPR_A}, a_c = tid % ${CPR_A};
  const int b_r = tid / ${CPR_B}, b_c = tid % ${CPR_B};
$ for i = 0, IT_A - 1 do
  const sj_u32 a_s${i} = (a_r + ${i * RS_A}) * ${ROWB_A} + ((a_c ^ ${swz_a("a_r + " .. i * RS_A)}) << 4);
$   if a_rows then
  const bool a_ok${i} = row0 + a_r + ${i * RS_A} < ${M};
$   end
$ end
$ for i = 0, IT_B - 1 do
  const sj_u32 b_s${i} = ${A_BYTES} + (b_r + ${i * RS_B}) * ${ROWB_B} + ((b_c ^ ${swz_b("b_r + " .. i * RS_B)}) << 4);
$ end
$ if b_cols then
$   if B_VEC then
  const bool b_cok = col0 + b_c * 8 < ${N};
$   end
$ end
  const InT* a_g = A + (${IDX})(row0 + a_r) * ${K} + a_c * 8;
  const InT* b_g = B + (${IDX})b_r * ${N} + col0 + b_c * 8;
  int kb = 0; /* k of the next tile to copy */

  /* Copies the next k tile of A and B into the stage at shared address s. */
  auto load_tile = [&](sj_u32 s) {
$ if a_part then
    if (a_r < ${BM}) {
$ end
$ for i = 0, IT_A - 1 do
$   if A_VEC then
$     local ok = a_chunk_ok(i)
    sj_cp_async16(s + a_s${i}, ${cond(ok, "(const void *)(a_g + " .. i * RS_A * K .. LL .. ")", "(const void *)A")}, ${cond(ok, "16", "0")});
$   else
$     -- K % 8 != 0: rows are not 16-byte aligned; gather 8 elements with per-element k checks.
    {
      const InT* p = a_g + ${i * RS_A * K}${LL};
      sj_u32 w[4];
$     local rok = a_row_ok(i)
$     for j = 0, 7 do
$       local c = both(rok, "kb + a_c * 8 + " .. j .. " < " .. K)
      const sj_u32 x${j} = (${c}) ? (sj_u32)p[${j}] : 0u;
$     end
$     for j = 0, 3 do
      w[${j}] = x${2 * j} | (x${2 * j + 1} << 16);
$     end
      sj_gemm_st_shared_v4(s + a_s${i}, w[0], w[1], w[2], w[3]);
    }
$   end
$ end
$ if a_part then
    }
$ end
$ if b_part then
    if (b_r < ${BK}) {
$ end
$ for i = 0, IT_B - 1 do
$   if B_VEC then
$     local ok = b_chunk_ok(i)
    sj_cp_async16(s + b_s${i}, ${cond(ok, "(const void *)(b_g + " .. i * RS_B * N .. LL .. ")", "(const void *)B")}, ${cond(ok, "16", "0")});
$   else
$     -- N % 8 != 0: rows are not 16-byte aligned; gather 8 elements with per-element n checks.
    {
      const InT* p = b_g + ${i * RS_B * N}${LL};
      sj_u32 w[4];
$     local rok = b_row_ok(i)
$     for j = 0, 7 do
$       local c = both(rok, "col0 + b_c * 8 + " .. j .. " < " .. N)
      const sj_u32 x${j} = (${c}) ? (sj_u32)p[${j}] : 0u;
$     end
$     for j = 0, 3 do
      w[${j}] = x${2 * j} | (x${2 * j + 1} << 16);
$     end
      sj_gemm_st_shared_v4(s + b_s${i}, w[0], w[1], w[2], w[3]);
    }
$   end
$ end
$ if b_part then
    }
$ end
    a_g += ${BK};
    b_g += (${IDX})${BK} * ${N};
    kb += ${BK};
  };

  /* ldmatrix addresses of this lane inside a stage: A rows warp_m*WM + lane%16, chunk
     2*kk + lane/16; B k rows 16*kk + lane%16, chunk (warp_n*WN)/8 + 2*nj + lane/16. The
     swizzle of a row depends only on lane%16, since warp and fragment offsets are multiples
     of 16 rows. */
  const int lr = lane & 15, lh = lane >> 4;
  sj_u32 a_f[${KSTEPS}], b_f[${NJ}];
#pragma unroll
  for (int kk = 0; kk < ${KSTEPS}; ++kk)
    a_f[kk] = (warp_m * ${WM} + lr) * ${ROWB_A} + (((2 * kk + lh) ^ ${swz_a("lr")}) << 4);
#pragma unroll
  for (int nj = 0; nj < ${NJ}; ++nj)
    b_f[nj] = ${A_BYTES} + lr * ${ROWB_B} + (((warp_n * ${WN // 8} + 2 * nj + lh) ^ ${swz_b("lr")}) << 4);

  float acc[${MI}][${NI}][4];
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
    for (int ni = 0; ni < ${NI}; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;

  /* Fragments of k step kk of the stage at s into buffer p. */
  sj_u32 af[2][${MI}][4], bf[2][${NI}][2];
  auto load_frags = [&](sj_u32 s, int p, int kk) {
#pragma unroll
    for (int mi = 0; mi < ${MI}; ++mi) sj_ldmatrix_x4(af[p][mi], s + a_f[kk] + mi * ${16 * ROWB_A});
#pragma unroll
    for (int nj = 0; nj < ${NJ}; ++nj) {
      sj_u32 t[4];
      sj_ldmatrix_x4_trans(t, s + b_f[nj] + kk * ${16 * ROWB_B});
      bf[p][2 * nj][0] = t[0]; bf[p][2 * nj][1] = t[1];
      bf[p][2 * nj + 1][0] = t[2]; bf[p][2 * nj + 1][1] = t[3];
    }
  };

  /* Prologue: STAGES-1 tiles in flight (an empty group where K has fewer tiles), then tile 0
     landed and its first fragments in registers. */
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) {
    if (st < ${KT}) load_tile(smem0 + st * ${STAGE_BYTES});
    sj_cp_async_commit();
  }
  sj_cp_async_wait<${STAGES - 2}>();
  __syncthreads();
  load_frags(smem0, 0, 0);

  /* Main loop. Fragments of k step kk+1 are read while the mma of step kk run; at the step
     before last, the ring moves on (tile kt+1 landed: at most STAGES-2 younger groups pending;
     the barrier also says no warp still reads the stage that the copy issued at the next tile's
     step 0 overwrites), so the last step's mma cover the first fragment loads of tile kt+1. */
  int read_stage = 0, write_stage = ${STAGES - 1};
  sj_u32 s = smem0;
#pragma unroll 1
  for (int kt = 0; kt < ${KT}; ++kt) {
#pragma unroll
    for (int kk = 0; kk < ${KSTEPS}; ++kk) {
      if (kk + 1 < ${KSTEPS}) load_frags(s, (kk + 1) & 1, kk + 1);
      else if (kt + 1 < ${KT}) load_frags(s, 0, 0);
      if (kk == 0) {
        if (kt + ${STAGES - 1} < ${KT}) load_tile(smem0 + write_stage * ${STAGE_BYTES});
        sj_cp_async_commit();
        write_stage = (write_stage == ${STAGES - 1}) ? 0 : write_stage + 1;
      }
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
        for (int ni = 0; ni < ${NI}; ++ni) sj_mma_16816(acc[mi][ni], af[kk & 1][mi], bf[kk & 1][ni]);
      if (kk == ${KSTEPS - 2}) {
        sj_cp_async_wait<${STAGES - 2}>();
        __syncthreads();
        read_stage = (read_stage == ${STAGES - 1}) ? 0 : read_stage + 1;
        s = smem0 + read_stage * ${STAGE_BYTES};
      }
    }
  }

  /* Epilogue: accumulator (mi, ni) holds rows +g and +g+8, columns +2q and +2q+1. */
  const int g = lane >> 2, q = lane & 3;
$ if EPI == 1 then
  /* Staged: every warp is past its last ldmatrix, so the pipeline's shared memory takes the
     C tile (row pitch PITCH bytes); then each thread stores 16-byte row pieces. */
  sj_cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni) {
        const sj_u32 at = smem0 + (warp_m * ${WM} + mi * 16 + h * 8 + g) * ${PITCH}
                          + (warp_n * ${WN} + ni * 8 + 2 * q) * ${OSZ};
$   if out_f32 then
        sj_gemm_st_shared_f32x2(at, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
$   else
        sj_gemm_st_shared_b32(at, ${pack_out}(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]));
$   end
      }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ${IT_C}; ++i) {
    const int piece = tid + i * ${THREADS};
    const int r = piece / ${CPR_C}, c = piece % ${CPR_C};
$   local conds = {}
$   if a_rows then conds[#conds + 1] = "row0 + r < " .. M end
$   if b_cols then conds[#conds + 1] = "col0 + c * " .. EPC .. " < " .. N end
$   if #conds > 0 then
    if (!(${table.concat(conds, " && ")})) continue;
$   end
    sj_u32 w0, w1, w2, w3;
    sj_gemm_ld_shared_v4(smem0 + r * ${PITCH} + c * 16, w0, w1, w2, w3);
    sj_gemm_st_global_v4(C + (${IDX})(row0 + r) * ${N} + col0 + c * ${EPC}, w0, w1, w2, w3);
  }
$ else
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + warp_m * ${WM} + mi * 16 + h * 8 + g;
$ if a_rows then
      if (row >= ${M}) continue;
$ end
      OutT* crow = C + (${IDX})row * ${N};
#pragma unroll
      for (int ni = 0; ni < ${NI}; ++ni) {
        const int col = col0 + warp_n * ${WN} + ni * 8 + 2 * q;
        const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
$ if pair_store then
$   if b_cols then
        if (col >= ${N}) continue;
$   end
$   if out_f32 then
        sj_gemm_st_global_f32x2(crow + col, v0, v1);
$   else
        *(sj_u32 *)(crow + col) = ${pack_out}(v0, v1);
$   end
$ else
        if (col < ${N}) crow[col] = ${to_out}(v0);
        if (col + 1 < ${N}) crow[col + 1] = ${to_out}(v1);
$ end
      }
    }
  }
$ end
}
]], e)

  return {
    source = e.prelude .. e.ptx .. kernel,
    entry = e.entry,
    grid = { GM * GN, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = smem_bytes(problem, cfg),
  }
end

return {
  name = "gemm_dense",
  op = "gemm",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
