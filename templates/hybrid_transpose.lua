-- hybrid_transpose.lua: the transpose of a hybrid matrix's pairs on the device, what the weight
-- gradients of the hybrid FFN need (templates/hybrid_ffn_dw.lua: per unit j, the tokens active at
-- j). ops/hybrid/hybrid_dw_launch.c launches the stages in order into the caller's workspace:
--   0 mark   every active pair (t, j) sets bit t of unit j's token bitmap (atomicOr: the bitmap
--            is the same whatever order the pairs arrive in);
--   1 count  one warp per unit: the popcounts of its bitmap words, their exclusive prefix within
--            the unit (wpre) and the unit's count (start[j]);
--   2 scan   (one block) the exclusive prefix sum of the counts in place, start[F] = the pairs;
--   3 fill   every active pair writes its position (below) at start[j] + wpre + the popcount of
--            its bitmap word below bit t: its rank among unit j's tokens.
-- and, for hybrid-ffn-dw's BUSY > 0 configs only, stages 4-6 around its dense GEMMs
-- (lib/hybrid_busy.lua): select the busy units, scatter their lists into dense coefficient
-- rows, copy the GEMMs' rows out to the gradients.
-- So each unit's list is in ascending token order, decided by counting, not by which atomic won:
-- the gradients summed over it are deterministic. A pair's position is its ELL slot t * W + i, or
-- M * W + s * F + j for backup row s (owner t); the pairs are the first min(nnz[t], W) ELL slots
-- of each row and the non-zeros of each backup row s < min(counter, R) whose owner t has
-- slot[t] = s. An incomplete matrix (counter > R) marks nothing (hybrid_ffn_dw writes NaN).
--
-- Problem: op "hybrid-transpose", M = tokens, N = d_ff, K unused, T = N, C = W.
-- Kernel ABI per STAGE (bits and wpre F x ceil(M / 32) words, start F + 1 ints, list one word a pair):
--   0, 3: (const unsigned short* columns, const int* nnz, const int* slot, const int* owner,
--          const unsigned short* backup, const int* counter, unsigned* bits, const int* wpre,
--          const int* start, unsigned* list, int R)
--   1:    (const unsigned* bits, int* wpre, int* start)
--   2:    (int* start)
--   4-6:  lib/hybrid_busy.lua's header
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local busy = require "lib.hybrid_busy"

local PARAMS = { "STAGE" }
local THREADS = 256
local SCAN_THREADS = 1024

local function valid(problem, cfg)
  local ok, why = tw.check_hybrid(problem, "hybrid-transpose", PARAMS, cfg, "N")
  if not ok then return false, why end
  if cfg.STAGE < 0 or cfg.STAGE > busy.LAST_STAGE then
    return false, "STAGE=" .. cfg.STAGE .. " must be 0..3 (the transpose) or 4..6 (hybrid-ffn-dw's busy units)"
  end
  return true
end

local function default(problem) return { STAGE = 0 } end

-- The pair enumeration of stages 0 and 3: a grid-stride loop over every ELL slot and backup
-- position (R is an argument, so the grid cannot follow it), visit(t, j, position) per pair.
local PAIRS = [[
  if (*counter > R) return;   /* incomplete: unplaced rows lost pairs */
  const int used = min(*counter, R);
  const long long ell = (long long)M * W, total = ell + (long long)R * F;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < total; i += (long long)gridDim.x * THREADS) {
    int t, j;
    if (i < ell) {
      t = (int)(i / W);
      if ((int)(i % W) >= min(nnz[t], W)) continue;
      j = columns[i];
    } else {
      const long long q = i - ell;
      const int s = (int)(q / F);
      if (s >= used || !sj_hybrid_nz(backup[q])) continue;
      t = owner[s];
      if (t < 0 || t >= M || slot[t] != s) continue;
      j = (int)(q % F);
    }
    unsigned* word = bits + (size_t)j * TW + (t >> 5);
]]

local BODY = {}
BODY[0] = PAIRS .. [[
    atomicOr(word, 1u << (t & 31));
  }
]]
BODY[3] = PAIRS .. [[
    const int rank = start[j] + wpre[(size_t)j * TW + (t >> 5)] + __popc(*word & ((1u << (t & 31)) - 1u));
    list[rank] = (unsigned)i;
  }
]]
BODY[1] = [[
  const int lane = threadIdx.x & 31, j = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  if (j >= F) return;
  int base = 0;
  for (int w0 = 0; w0 < TW; w0 += 32) {
    const int w = w0 + lane;
    const int c = w < TW ? __popc(bits[(size_t)j * TW + w]) : 0;
    int incl = c;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    if (w < TW) wpre[(size_t)j * TW + w] = base + incl - c;
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) start[j] = base;
]]
BODY[2] = [[
  /* thread i sums the counts of units [i PER, (i + 1) PER), the block scans the sums, and each
   * thread writes its units' exclusive prefixes */
  __shared__ int part[THREADS];
  const int PER = (F + THREADS - 1) / THREADS, i = threadIdx.x, lo = min(F, i * PER), hi = min(F, lo + PER);
  int sum = 0;
  for (int j = lo; j < hi; j++) sum += start[j];
  part[i] = sum;
  __syncthreads();
  for (int off = 1; off < THREADS; off <<= 1) {
    const int y = i >= off ? part[i - off] : 0;
    __syncthreads();
    part[i] += y;
    __syncthreads();
  }
  int run = part[i] - sum;
  for (int j = lo; j < hi; j++) {
    const int c = start[j];
    start[j] = run;
    run += c;
  }
  if (i == THREADS - 1) start[F] = part[i];
]]

local ARGS = {}
ARGS[0] = [[const unsigned short* __restrict__ columns, const int* __restrict__ nnz, const int* __restrict__ slot,
    const int* __restrict__ owner, const unsigned short* __restrict__ backup, const int* __restrict__ counter,
    unsigned* __restrict__ bits, const int* __restrict__ wpre, const int* __restrict__ start,
    unsigned* __restrict__ list, int R]]
ARGS[3] = ARGS[0]
ARGS[1] = "const unsigned* __restrict__ bits, int* __restrict__ wpre, int* __restrict__ start"
ARGS[2] = "int* __restrict__ start"

local function generate(problem, cfg)
  local stage = cfg.STAGE
  local threads = stage == 2 and SCAN_THREADS or THREADS
  local grid
  if stage == 1 then grid = tw.cdiv(problem.N, THREADS // 32)
  elseif stage == 2 then grid = 1
  else grid = 8 * math.max(1, problem.SMS or 132) end
  local env = {
    prelude = cuda.prelude(problem.dtype), M = problem.M, F = problem.N, W = problem.C, TW = tw.cdiv(problem.M, 32),
    THREADS = threads, args = ARGS[stage], body = BODY[stage], head = false,
  }
  if stage >= busy.FIRST_STAGE then
    local b = busy.stage(stage, cuda.dtype(problem.dtype), math.max(1, problem.SMS or 132))
    env.THREADS, env.args, env.body, env.head, grid = b.threads, b.args, b.body, b.head, b.grid
    threads = b.threads
  end
  env.entry = string.format("sj_hybrid_transpose_s%d_m%d_f%d_w%d", stage, problem.M, problem.N, problem.C)
  local src = emit.render(here(), [[
/* prelude */ ${prelude}
#define M ${M}
#define F ${F}
#define W ${W}
#define TW ${TW}
#define THREADS ${THREADS}
$ if head then
${head}
$ end

__device__ __forceinline__ bool sj_hybrid_nz(unsigned short bits) { return (bits & 0x7fffu) != 0; }

extern "C" __global__ void __launch_bounds__(THREADS) ${entry}(
    ${args})
{
${body}}
]], env)
  return { source = src, entry = env.entry, grid = { grid, 1, 1 }, block = { threads, 1, 1 }, shared = 0 }
end

return {
  name = "hybrid_transpose",
  op = "hybrid-transpose",
  params = PARAMS,
  space = function(problem) return { STAGE = { 0, 1, 2, 3, 4, 5, 6 } } end,
  valid = valid,
  default = default,
  generate = generate,
}
