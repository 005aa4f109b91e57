-- vnm_compress.lua: the GPU compressor of a dense row-major matrix (problem.M rows x problem.K
-- columns, f16/bf16, on the device) into the V:N:M format of ops/vnm/vnm_format.h, choosing
-- exactly what the host compressor (ops/vnm/vnm_format.c) chooses: the same fp64 column norms
-- summed in the same row order, the same tie rules (strict >, lower column / position first),
-- padding columns last. One CTA owns one row block and one pair of k tiles (16 column groups):
--   1. column norms (|a| or a*a summed in fp64, or EXACT: non-zero flags) of its 16 M columns,
--      a thread per column, rows in order (coalesced across the warp);
--   2. one thread per group picks the 4 columns and writes the group's B row indices;
--   3. a thread per (row, group) picks the 2 of 4, stores them as one 32-bit word in fragment
--      order, and leaves the metadata nibble in shared memory;
--   4. a thread per lane word assembles the metadata words of the CTA's fragment tiles.
-- EXACT (select 0) records the first violation (in the host's scan order) with atomicMin on a
-- 64-bit key ((row block * GP + group) * (V + 1) + 0 for the columns, 1 + row for a row).
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local PARAMS = { "THREADS" }

local function layout(problem) return vnm.layout(problem.M, problem.K, problem.V, problem.MS) end

local function valid(problem, cfg)
  if math.type(cfg.THREADS) ~= "integer" then return false, "THREADS is missing or not an integer" end
  if cfg.THREADS ~= 128 and cfg.THREADS ~= 256 then return false, "THREADS=" .. cfg.THREADS .. " must be 128 or 256" end
  local ok, why = vnm.check_problem(problem)
  if not ok then return false, why end
  if problem.V * 2 > cfg.THREADS then return false, "THREADS must cover the 2*V metadata words of a CTA" end
  return true
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("vnm_compress: invalid config: " .. why, 0) end
  local L = layout(problem)
  local d = cuda.dtype(problem.dtype)
  local e = {
    T = d.ctype, to_f32 = d.to_f32, THREADS = cfg.THREADS,
    ROWS = problem.M, COLS = problem.K, V = problem.V, MS = problem.MS, G = L.G, GP = L.GP,
    KTP = L.KTP, HKTP = L.KTP // 2, NCOL = 16 * problem.MS, NTASK = problem.V * 16,
    MTV = problem.V // 16, VP1 = problem.V + 1,
  }
  e.entry = string.format("sj_vnm_compress_%s_v%d_m%d_%dx%d_t%d", problem.dtype, problem.V, problem.MS,
                          problem.M, problem.K, cfg.THREADS)
  local kernel = emit.render(here(), [[
typedef ${T} InT;
/* select: 0 exact (pattern check), 1 prune by L2 column norm, 2 prune by L1. */
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
    const InT* __restrict__ A, long long lda, int select, sj_u32* __restrict__ values,
    sj_u32* __restrict__ meta, int* __restrict__ index, unsigned long long* __restrict__ error)
{
  __shared__ double norm[${NCOL}];
  __shared__ int sel[16][4];
  __shared__ unsigned char nib[${V}][16];
  const int tid = threadIdx.x;
  const int rb = blockIdx.x, p = blockIdx.y;
  const int r0 = rb * ${V};
  const int r1 = (r0 + ${V} < ${ROWS}) ? r0 + ${V} : ${ROWS};
  const long long col0 = (long long)p * ${NCOL};   /* first column of group 16p */

  /* 1. Column norms (prune) or non-zero flags (exact), rows in order like the host. */
  for (int j = tid; j < ${NCOL}; j += ${THREADS}) {
    const int g = p * 16 + j / ${MS}, c = j % ${MS};
    const int width = (g < ${G}) ? ((${COLS} - g * ${MS} < ${MS}) ? ${COLS} - g * ${MS} : ${MS}) : 0;
    double s = 0.0;
    if (c < width) {
      const InT* a = A + (long long)r0 * lda + col0 + j;
      for (int r = r0; r < r1; ++r, a += lda) {
        const InT x = *a;
        if (select == 0) { if ((x & 0x7fff) != 0) s = 1.0; }
        else {
          const double m = (double)fabsf(${to_f32}(x));
          s = (select == 2) ? s + m : s + m * m;
        }
      }
    }
    norm[j] = s;
  }
  __syncthreads();

  /* 2. The 4 columns of each group (ascending offsets). */
  if (tid < 16) {
    const int lg = tid, g = p * 16 + lg;
    const int width = (g < ${G}) ? ((${COLS} - g * ${MS} < ${MS}) ? ${COLS} - g * ${MS} : ${MS}) : 0;
    const double* nm = norm + lg * ${MS};
    bool chosen[${MS}];
    for (int c = 0; c < ${MS}; ++c) chosen[c] = false;
    int n = 0;
    if (select == 0) {
      for (int c = 0; c < width; ++c)
        if (nm[c] != 0.0) { if (n < 4) chosen[c] = true; ++n; }
      if (n > 4) atomicMin(error, ((unsigned long long)rb * ${GP} + g) * ${VP1});
    } else {
      for (; n < 4; ++n) {
        int best = -1;
        for (int c = 0; c < ${MS}; ++c)
          if (!chosen[c] && (best < 0 || nm[c] > nm[best])) best = c;
        chosen[best] = true;
      }
    }
    for (int c = 0; n < 4 && c < ${MS}; ++c)
      if (!chosen[c]) { chosen[c] = true; ++n; }
    int k = 0;
    for (int c = 0; c < ${MS} && k < 4; ++c)
      if (chosen[c]) {
        sel[lg][k] = c;
        index[((long long)rb * ${GP} + g) * 4 + k] = (c < width) ? g * ${MS} + c : -1;
        ++k;
      }
  }
  __syncthreads();

  /* 3. The 2 of 4 of every (row, group): one 32-bit store in fragment order. */
  for (int t = tid; t < ${NTASK}; t += ${THREADS}) {
    const int rl = t / 16, lg = t % 16, g = p * 16 + lg, row = r0 + rl;
    const int width = (g < ${G}) ? ((${COLS} - g * ${MS} < ${MS}) ? ${COLS} - g * ${MS} : ${MS}) : 0;
    InT v[4];
    for (int j = 0; j < 4; ++j) {
      const int c = sel[lg][j];
      v[j] = (row < ${ROWS} && c < width) ? A[(long long)row * lda + (long long)g * ${MS} + c] : (InT)0;
    }
    int a = -1, b = -1;
    if (select == 0) {
      int nz = 0;
      for (int j = 0; j < 4; ++j) {
        if ((v[j] & 0x7fff) == 0) continue;
        if (nz == 0) a = j; else if (nz == 1) b = j;
        ++nz;
      }
      if (nz > 2) atomicMin(error, ((unsigned long long)rb * ${GP} + g) * ${VP1} + 1 + rl);
    } else {
      for (int j = 0; j < 4; ++j) if (a < 0 || (v[j] & 0x7fff) > (v[a] & 0x7fff)) a = j;
      for (int j = 0; j < 4; ++j) if (j != a && (b < 0 || (v[j] & 0x7fff) > (v[b] & 0x7fff))) b = j;
    }
    for (int j = 0; a < 0 && j < 4; ++j) if (j != b) a = j;
    for (int j = 0; b < 0 && j < 4; ++j) if (j != a) b = j;
    const int p0 = a < b ? a : b, p1 = a < b ? b : a;
    nib[rl][lg] = (unsigned char)(p0 | (p1 << 2));
    /* Fragment order (vnm_format.h): tile (row/16, g/8), lane 4*(r%8) + c%4, reg r/8 + 2*(c/4). */
    const int r = row % 16, c = g % 8;
    const long long w = (((long long)(row / 16) * ${KTP} + g / 8) * 32 + 4 * (r % 8) + c % 4) * 4 + r / 8 + 2 * (c / 4);
    values[w] = (sj_u32)v[p0] | ((sj_u32)v[p1] << 16);
  }
  __syncthreads();

  /* 4. Metadata words: lane 4*(r%8) + 2*(kt%2) + c/4 of tile pair p; nibble at 16*(r/8) + 4*(c%4). */
  if (tid < ${MTV * 32}) {
    const int mtl = tid / 32, lane = tid % 32, g8 = lane >> 2, s = (lane >> 1) & 1, half = lane & 1;
    sj_u32 word = 0;
    for (int j = 0; j < 4; ++j) {
      const int lg = s * 8 + half * 4 + j;
      word |= (sj_u32)nib[mtl * 16 + g8][lg] << (4 * j);
      word |= (sj_u32)nib[mtl * 16 + g8 + 8][lg] << (16 + 4 * j);
    }
    meta[((long long)(rb * ${MTV} + mtl) * ${HKTP} + p) * 32 + lane] = word;
  }
}
]], e)
  return {
    source = cuda.prelude(problem.dtype) .. kernel,
    entry = e.entry,
    grid = { L.RB, L.KTP // 2, 1 },
    block = { cfg.THREADS, 1, 1 },
    shared = 0,
  }
end

return {
  name = "vnm_compress",
  op = "vnm-compress",
  params = PARAMS,
  space = function(problem) return { THREADS = { 128, 256 } } end,
  valid = valid,
  default = function(problem) return { THREADS = 256 } end,
  generate = generate,
}
