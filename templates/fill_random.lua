-- fill_random.lua: the benchmarks' random inputs, written on the device from a counter-based
-- generator (tuner/counter_rng.h, whose host functions give the same bits: keep the arithmetic
-- of both the same). Element i of a stream is splitmix64's i-th output under the stream's key;
-- its top 24 bits make a uniform value in [-1, 1), or its top 32 bits decide whether a unit
-- fires and its low 24 bits make the value in (0, 1]; one round-to-nearest-even to the dtype.
-- Not an op's kernel: tuner/random_fill.c builds it through the request path under the gemm op
-- with a 1 x 1 x 1 problem (sizes are arguments, so one kernel per dtype and distribution).
--   DIST=0, a matrix: (T* dst, long long rows, long long cols, int transposed,
--     unsigned long long key, const T* col0): the logical rows x cols matrix L, L[r][c] from
--     index r * cols + c, or col0[r] for c = 0 when col0 is not NULL; written row-major, or as
--     its transpose (cols x rows) when transposed is 1.
--   DIST=1, ReLU-like activations written straight as TwELL (ops/twell/twell_format.h):
--     (sj_u32* entries, int* counts, T* spill, long long rows, long long cols, int tile,
--     int capacity, unsigned long long key, const sj_u32* threshold): element (r, c) fires when
--     the top 32 bits of index r * cols + c are below threshold[c]; every count, every slot
--     (0 past the count, as the host's converter leaves it) and the spill of tiles of more than
--     capacity non-zeros. One warp per (row, tile), in column order by ballots.
-- Both loop over their work with a grid of a few blocks per SM, so the geometry is fixed.
local emit = require "lib.emit"
local cuda = require "lib.cuda"

local PARAMS = { "DIST" }

local function space(problem) return { DIST = { 0, 1 } } end

local function valid(problem, cfg)
  if cfg.DIST ~= 0 and cfg.DIST ~= 1 then return false, "DIST must be 0 (a matrix) or 1 (TwELL activations)" end
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  return true
end

local function default(problem) return { DIST = 0 } end

local THREADS = 256

local COMMON = [[
__device__ __forceinline__ unsigned long long sj_crng_mix(unsigned long long z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ unsigned long long sj_crng_bits(unsigned long long key, unsigned long long index)
{
  return sj_crng_mix(key + (index + 1ull) * 0x9e3779b97f4a7c15ull);
}
]]

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("fill_random: invalid config: " .. why, 0) end
  local d = cuda.dtype(problem.dtype)
  local e = { T = d.ctype, from_f32 = d.from_f32, THREADS = THREADS }
  local kernel
  if cfg.DIST == 0 then
    e.entry = string.format("sj_fill_random_%s", problem.dtype)
    kernel = emit.render(here(), [[
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(${T}* dst, long long rows, long long cols,
    int transposed, unsigned long long key, const ${T}* col0)
{
  const long long n = rows * cols;
  for (long long o = (long long)blockIdx.x * ${THREADS} + threadIdx.x; o < n; o += (long long)gridDim.x * ${THREADS}) {
    long long r = o / cols, c = o - r * cols;   /* dst is L */
    if (transposed) {                           /* dst is L^T: o = c * rows + r */
      c = o / rows;
      r = o - c * rows;
    }
    ${T} v;
    if (c == 0 && col0) {
      v = col0[r];
    } else {
      const unsigned long long bits = sj_crng_bits(key, (unsigned long long)(r * cols + c));
      /* exact: a 24-bit integer times 2^-23, minus 1 */
      v = ${from_f32}((float)(int)(bits >> 40) * 0x1p-23f - 1.0f);
    }
    dst[o] = v;
  }
}
]], e)
  else
    e.entry = string.format("sj_fill_twell_%s", problem.dtype)
    kernel = emit.render(here(), [[
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(sj_u32* entries, int* counts, ${T}* spill,
    long long rows, long long cols, int tile, int capacity, unsigned long long key, const sj_u32* threshold)
{
  const int lane = threadIdx.x & 31;
  const long long tiles = (cols + tile - 1) / tile, cells = rows * tiles;
  const long long warps = (long long)gridDim.x * (${THREADS} / 32);
  for (long long cell = ((long long)blockIdx.x * ${THREADS} + threadIdx.x) >> 5; cell < cells; cell += warps) {
    const long long r = cell / tiles, c0 = (cell - r * tiles) * tile;
    const int width = (int)(cols - c0 < tile ? cols - c0 : tile);
    const unsigned long long row0 = (unsigned long long)(r * cols + c0);
    sj_u32* slots = entries + cell * capacity;
    int count = 0;
    for (int base = 0; base < width; base += 32) {
      const int c = base + lane;
      bool on = false;
      ${T} v = 0;
      if (c < width) {
        const unsigned long long bits = sj_crng_bits(key, row0 + c);
        on = (sj_u32)(bits >> 32) < threshold[c0 + c];
        /* exact: (2^24 - low 24 bits) times 2^-24, in (0, 1] */
        if (on) v = ${from_f32}((float)(int)(0x1000000u - (sj_u32)(bits & 0xffffffull)) * 0x1p-24f);
      }
      const unsigned mask = __ballot_sync(0xffffffffu, on);
      const int slot = count + __popc(mask & ((1u << lane) - 1u));
      if (on && slot < capacity) slots[slot] = ((sj_u32)c << 16) | v;
      count += __popc(mask);
    }
    for (int s = (count < capacity ? count : capacity) + lane; s < capacity; s += 32) slots[s] = 0u;
    if (lane == 0) counts[cell] = count;
    if (count > capacity) { /* the whole tile to the spill, as the host's converter does */
      for (int c = lane; c < width; c += 32) {
        const unsigned long long bits = sj_crng_bits(key, row0 + c);
        ${T} v = 0;
        if ((sj_u32)(bits >> 32) < threshold[c0 + c])
          v = ${from_f32}((float)(int)(0x1000000u - (sj_u32)(bits & 0xffffffull)) * 0x1p-24f);
        spill[r * cols + c0 + c] = v;
      }
    }
  }
}
]], e)
  end
  local blocks = problem.SMS > 0 and problem.SMS * 8 or 1024
  return {
    source = cuda.prelude(problem.dtype) .. COMMON .. kernel,
    entry = e.entry,
    grid = { blocks, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = 0,
  }
end

return {
  name = "fill_random",
  op = "gemm",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
}
