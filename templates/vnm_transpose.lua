-- vnm_transpose.lua: the dense masked W^T from a compressed V:N:M W (problem.M rows x problem.K
-- columns, ops/vnm/vnm_format.h; problem.N unused): WT[c][r] = W[r][c] where W keeps a value,
-- 0 elsewhere, WT cols x rows row-major with leading dimension ldt. It feeds the two dX paths
-- of training: vnm-compress of WT by magnitude gives the double-pruned copy (byte for byte the
-- host's sj_vnm_double_prune_host), and the dense tensor-core gemm on WT gives the exact dX.
--
-- One thread per element of WT, consecutive threads along a WT row (consecutive rows r of W),
-- so the stores are coalesced; each element is gathered, not scattered, so nothing has to be
-- zeroed first and no two threads write one place: the 4 selected columns of (row block,
-- group c / M) tell whether c is kept in the block and at which of the 4 positions j, and the
-- row's metadata nibble whether its 2 kept slots include j. The V threads of a row block read
-- the same index entry (a broadcast); the values and metadata of 8 consecutive rows lie in one
-- 512-byte fragment tile.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local PARAMS = { "THREADS" }

local cdiv = vnm.cdiv

local function layout(problem) return vnm.layout(problem.M, problem.K, problem.V, problem.MS) end

local MAX_GRID_Y = 65535

local function valid(problem, cfg)
  if math.type(cfg.THREADS) ~= "integer" then return false, "THREADS is missing or not an integer" end
  if cfg.THREADS ~= 128 and cfg.THREADS ~= 256 then return false, "THREADS=" .. cfg.THREADS .. " must be 128 or 256" end
  local ok, why = vnm.check_problem(problem)
  if not ok then return false, why end
  return true
end

-- Moves every element once: reads the kept values, metadata and index, writes WT.
local function bytes(problem)
  local L = layout(problem)
  local rp = L.RB * problem.V
  return rp * L.GP * 4 + rp * L.GP // 2 + L.RB * L.GP * 16 + problem.M * problem.K * 2
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("vnm_transpose: invalid config: " .. why, 0) end
  local L = layout(problem)
  local d = cuda.dtype(problem.dtype)
  local e = {
    T = d.ctype, THREADS = cfg.THREADS, ROWS = problem.M, COLS = problem.K, V = problem.V, MS = problem.MS,
    GP = L.GP, KTP = L.KTP, HKTP = L.KTP // 2,
  }
  e.entry = string.format("sj_vnm_transpose_%s_v%d_m%d_%dx%d_t%d", problem.dtype, problem.V, problem.MS,
                          problem.M, problem.K, cfg.THREADS)
  local kernel = emit.render(here(), [[
typedef ${T} InT;
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
    const InT* __restrict__ values, const sj_u32* __restrict__ meta, const int* __restrict__ index,
    InT* __restrict__ WT, long long ldt)
{
  const int r = blockIdx.x * ${THREADS} + threadIdx.x;   /* row of W = column of WT */
  if (r >= ${ROWS}) return;
  const int rb = r / ${V}, rr = r % 16, mt = r / 16;
  /* Columns c of W (rows of WT) in steps of the grid's height (at most 65535). */
  for (int c = blockIdx.y; c < ${COLS}; c += gridDim.y) {
    const int g = c / ${MS};
    const int4 sel = *(const int4*)(index + ((long long)rb * ${GP} + g) * 4);
    const int j = (sel.x == c) ? 0 : (sel.y == c) ? 1 : (sel.z == c) ? 2 : (sel.w == c) ? 3 : -1;
    InT out = (InT)0;
    if (j >= 0) {
      const int kt = g / 8, cc = g % 8;
      const sj_u32 word = meta[((long long)mt * ${HKTP} + kt / 2) * 32 + 4 * (rr % 8) + 2 * (kt % 2) + cc / 4];
      const sj_u32 nib = (word >> (16 * (rr / 8) + 4 * (cc % 4))) & 0xfu;
      const int half = ((int)(nib & 3u) == j) ? 0 : ((int)(nib >> 2) == j) ? 1 : -1;
      if (half >= 0)
        out = values[((((long long)mt * ${KTP} + kt) * 32 + 4 * (rr % 8) + cc % 4) * 4 + rr / 8 + 2 * (cc / 4)) * 2 + half];
    }
    WT[(long long)c * ldt + r] = out;
  }
}
]], e)
  return {
    source = cuda.prelude(problem.dtype) .. kernel,
    entry = e.entry,
    grid = { cdiv(problem.M, cfg.THREADS), math.min(problem.K, MAX_GRID_Y), 1 },
    block = { cfg.THREADS, 1, 1 },
    shared = 0,
  }
end

return {
  name = "vnm_transpose",
  op = "vnm-transpose",
  params = PARAMS,
  space = function(problem) return { THREADS = { 128, 256 } } end,
  valid = valid,
  default = function(problem) return { THREADS = 256 } end,
  generate = generate,
  bytes = bytes,
}
