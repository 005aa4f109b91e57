-- lib/hybrid_busy.lua: hybrid-transpose's stages 4-6, what hybrid-ffn-dw's BUSY > 0 configs
-- launch around two dense GEMMs (ops/hybrid/hybrid_dw_launch.c; written without a GPU). A unit
-- whose token count is at least ceil(M / 64) is busy: at a rate of 1/64 the gather kernel's bytes
-- for the unit (an X and a dY row a token: rate x M x 4 D) cost about what tensor cores take for a
-- dense product over all M tokens (6 M D FLOPs) on an H100 (~6 TB/s from L2 against ~600 TFLOP/s
-- dense: break-even at ~1.5%).
--   4 select  (one block) flags the busy units and ranks them in ascending j: the first
--             `capacity` get slots 0, 1, ... (slot_of[j]; -1 for every other unit, busy ones past
--             the capacity included, which stay on CUDA cores), unit_of[s] the slot's unit (-1
--             past the count) and unit_of[capacity] the count. Decided by counting: deterministic.
--   5 scatter each slot's list (the transpose's, decoded by lib/hybrid_list_pair.lua) written
--             densely, rounded to the input dtype, into A (3 capacity rows of M tokens, zeroed by
--             the launch first): row s dg, row capacity + s du, row 2 capacity + s h = a u.
--   6 copy    rows s < count of C (3 capacity rows of the gradients, the GEMMs' A . X and A . dY
--             in A's row order) to dWgT, dWuT, dWd at row unit_of[s], a block a row, in 16-byte
--             words (row_words a row), so it reads no dtype.
-- Kernel ABI per stage (the problem is hybrid-transpose's: M tokens, F = d_ff, W, dtype T):
--   4: (const int* start, int* slot_of, int* unit_of, int capacity)
--   5: (const unsigned short* values, const int* owner, const unsigned short* backup,
--       const unsigned short* u_values, const unsigned short* u_backup, const float* dg_values,
--       const float* dg_backup, const float* du_values, const float* du_backup, const int* start,
--       const unsigned* list, const int* unit_of, T* A, int capacity)
--   6: (const int* unit_of, const uint4* C, uint4* dWgT, uint4* dWuT, uint4* dWd, int capacity,
--       int row_words)
local pair = require "lib.hybrid_list_pair"

local B = {}

B.FIRST_STAGE, B.LAST_STAGE = 4, 6

-- ceil(M / 64): the least token count of a busy unit (the host's hybrid_dw_busy_threshold).
local HEAD = [[
#define BUSY_MIN ((M + 63) / 64)
#define ELL ((unsigned)M * (unsigned)W)
]]

local SELECT = [[
  /* thread i flags units [i PER, (i + 1) PER); warp scans, then the first warp scans the warps'
   * totals; each thread ranks its busy units from its exclusive prefix */
  __shared__ int warp_base[THREADS / 32];
  __shared__ int busy_total;
  const int PER = (F + THREADS - 1) / THREADS, i = threadIdx.x, lane = i & 31, warp = i >> 5;
  const int lo = min(F, i * PER), hi = min(F, lo + PER);
  int mine = 0;
  for (int j = lo; j < hi; j++) mine += start[j + 1] - start[j] >= BUSY_MIN;
  int incl = mine;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += y;
  }
  if (lane == 31) warp_base[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int warp_busy = lane < THREADS / 32 ? warp_base[lane] : 0;
    int run = warp_busy;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, run, off);
      if (lane >= off) run += y;
    }
    if (lane < THREADS / 32) warp_base[lane] = run - warp_busy;
    if (lane == 31) busy_total = run;
  }
  __syncthreads();
  int rank = warp_base[warp] + incl - mine;
  for (int j = lo; j < hi; j++) {
    const bool busy = start[j + 1] - start[j] >= BUSY_MIN;
    slot_of[j] = busy && rank < capacity ? rank : -1;
    if (busy && rank < capacity) unit_of[rank] = j;
    rank += busy;
  }
  const int count = min(busy_total, capacity);
  for (int s = count + i; s < capacity; s += THREADS) unit_of[s] = -1;
  if (i == 0) unit_of[capacity] = count;
]]

local function scatter(env) return [[
  const int count = unit_of[capacity];
  for (int s = blockIdx.x; s < count; s += gridDim.x) {
    const int j = unit_of[s];
    T* const dg_row = A + (size_t)s * M;
    T* const du_row = A + (size_t)(capacity + s) * M;
    T* const h_row = A + (size_t)(2 * capacity + s) * M;
    for (int c = start[j] + threadIdx.x; c < start[j + 1]; c += THREADS) {
      const unsigned i = list[c];
]] .. pair.decode(env) .. string.format([[
      dg_row[p.t] = %s(p.dg);
      du_row[p.t] = %s(p.du);
      h_row[p.t] = %s(p.h);
    }
  }
]], env.from_f32, env.from_f32, env.from_f32) end

local COPY = [[
  const int count = unit_of[capacity];
  for (int row = blockIdx.x; row < 3 * count; row += gridDim.x) {
    const int g = row / count, s = row - g * count;
    uint4* const out = (g == 0 ? dWgT : g == 1 ? dWuT : dWd) + (size_t)unit_of[s] * row_words;
    const uint4* const in = C + ((size_t)g * capacity + s) * row_words;
    for (int k = threadIdx.x; k < row_words; k += THREADS) out[k] = __ldg(in + k);
  }
]]

local ARGS = {
  [4] = "const int* __restrict__ start, int* __restrict__ slot_of, int* __restrict__ unit_of, int capacity",
  [5] = [[const unsigned short* __restrict__ values, const int* __restrict__ owner,
    const unsigned short* __restrict__ backup, const unsigned short* __restrict__ u_values,
    const unsigned short* __restrict__ u_backup, const float* __restrict__ dg_values,
    const float* __restrict__ dg_backup, const float* __restrict__ du_values, const float* __restrict__ du_backup,
    const int* __restrict__ start, const unsigned* __restrict__ list, const int* __restrict__ unit_of,
    T* __restrict__ A, int capacity]],
  [6] = [[const int* __restrict__ unit_of, const uint4* __restrict__ C, uint4* __restrict__ dWgT,
    uint4* __restrict__ dWuT, uint4* __restrict__ dWd, int capacity, int row_words]],
}

-- Stage's kernel pieces for the transpose's generate: the definitions after its own (the input
-- type T, the decode's names and struct), the arguments, the body, the block and the grid.
-- dt: lib.cuda's dtype of the problem; sms: the target's SMs.
function B.stage(stage, dt, sms)
  local env = { to_f32 = dt.to_f32, from_f32 = dt.from_f32 }
  local body = stage == 4 and SELECT or stage == 5 and scatter(env) or COPY
  return {
    head = HEAD .. "typedef " .. dt.ctype .. " T;\n" .. pair.STRUCT,
    args = ARGS[stage],
    body = body,
    threads = stage == 4 and 1024 or 256,
    -- the scatter a block per slot, the copy a block per row, strided over a fixed grid (the
    -- count is known on the device only)
    grid = stage == 4 and 1 or stage == 5 and 4 * sms or 8 * sms,
  }
end

return B
