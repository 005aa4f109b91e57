-- gmp_prune.lua: one gradual-magnitude-pruning step on the device (ops/vnm/vnm_gmp_api.c runs
-- the stages in order), bit for bit what sj_gmp_prune_host does to a dense W (problem.M rows x
-- problem.K cols, f16/bf16, leading dimension ldw) and its byte mask (1 = kept, ldm), with the
-- pattern V:2:M' of problem.V and problem.MS; problem.N unused. STAGE selects the kernel:
--   0 survivors  U = W (.) mask, dense rows x cols (ld = cols), for vnm-compress by magnitude;
--   1 pattern    mask &= the slots of U's V:2:M' compression (its meta and index) keeps;
--   2 histogram  of the survivors' 15-bit magnitudes (32768 bins) and the count masked out;
--   3 select     (one block) from the histogram and need = ceil(s_t * rows * cols): the
--                threshold key k (sel[0]) and how many survivors of key k go (sel[1]), those
--                of smaller key all going (0 and 0: nothing to prune);
--   4 ties       per chunk of CHUNK row-major positions, the survivors of key k;
--   5 scan       (one block) the exclusive prefix sums of the chunks' counts, in place;
--   6 apply      mask out survivors of key < k and the first sel[1] of key k in row-major order
--                (the host's tie rule: the lower index goes first), then W = W (.) mask.
-- Why a histogram and not a sort: magnitudes are 15-bit keys, so one pass counts them all and
-- the k-th smallest is a scan of 32768 bins; only the ties at the threshold need positions.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local PARAMS = { "STAGE", "THREADS" }
local ROUNDS = 16    -- a chunk is ROUNDS x THREADS consecutive positions

local cdiv = vnm.cdiv

local function layout(problem) return vnm.layout(problem.M, problem.K, problem.V, problem.MS) end

local function valid(problem, cfg)
  for _, k in ipairs(PARAMS) do
    if math.type(cfg[k]) ~= "integer" then return false, k .. " is missing or not an integer" end
  end
  if cfg.STAGE < 0 or cfg.STAGE > 6 then return false, "STAGE=" .. cfg.STAGE .. " must be 0..6" end
  if cfg.THREADS ~= 256 and cfg.THREADS ~= 1024 then return false, "THREADS=" .. cfg.THREADS .. " must be 256 or 1024" end
  if (cfg.STAGE == 3 or cfg.STAGE == 5) ~= (cfg.THREADS == 1024) then
    return false, "STAGE=3 and STAGE=5 (one block) take THREADS=1024, the others THREADS=256"
  end
  local ok, why = vnm.check_problem(problem)
  if not ok then return false, why end
  return true
end

local function default(problem) return { STAGE = 0, THREADS = 256 } end

local BODY = {}

BODY[0] = [[
    const unsigned short* __restrict__ W, long long ldw, const unsigned char* __restrict__ mask, long long ldm,
    unsigned short* __restrict__ U)
{
  const long long i = (long long)blockIdx.x * ${THREADS} + threadIdx.x;
  if (i >= (long long)${ROWS} * ${COLS}) return;
  const long long r = i / ${COLS}, c = i % ${COLS};
  U[i] = mask[r * ldm + c] ? W[r * ldw + c] : (unsigned short)0;
}
]]

-- The decoding of one kept slot is vnm_transpose.lua's (ops/vnm/vnm_format.h's order).
BODY[1] = [[
    const sj_u32* __restrict__ meta, const int* __restrict__ index, unsigned char* __restrict__ mask, long long ldm)
{
  const long long i = (long long)blockIdx.x * ${THREADS} + threadIdx.x;
  if (i >= (long long)${ROWS} * ${COLS}) return;
  const int r = (int)(i / ${COLS}), c = (int)(i % ${COLS});
  const int rb = r / ${V}, rr = r % 16, mt = r / 16, g = c / ${MS};
  const int4 sel = *(const int4*)(index + ((long long)rb * ${GP} + g) * 4);
  const int j = (sel.x == c) ? 0 : (sel.y == c) ? 1 : (sel.z == c) ? 2 : (sel.w == c) ? 3 : -1;
  int keep = 0;
  if (j >= 0) {
    const int kt = g / 8, cc = g % 8;
    const sj_u32 word = meta[((long long)mt * ${HKTP} + kt / 2) * 32 + 4 * (rr % 8) + 2 * (kt % 2) + cc / 4];
    const sj_u32 nib = (word >> (16 * (rr / 8) + 4 * (cc % 4))) & 0xfu;
    keep = (int)(nib & 3u) == j || (int)(nib >> 2) == j;
  }
  if (!keep) mask[(long long)r * ldm + c] = 0;
}
]]

BODY[2] = [[
    const unsigned short* __restrict__ W, long long ldw, const unsigned char* __restrict__ mask, long long ldm,
    unsigned* __restrict__ hist, unsigned long long* __restrict__ n_out)
{
  const long long i = (long long)blockIdx.x * ${THREADS} + threadIdx.x;
  int out = 0;
  if (i < (long long)${ROWS} * ${COLS}) {
    const long long r = i / ${COLS}, c = i % ${COLS};
    if (mask[r * ldm + c]) atomicAdd(&hist[W[r * ldw + c] & 0x7fffu], 1u);
    else out = 1;
  }
  /* one atomic per warp for the masked-out count */
  out = __popc(__ballot_sync(0xffffffffu, out));
  if ((threadIdx.x & 31) == 0 && out) atomicAdd(n_out, (unsigned long long)out);
}
]]

-- One block of 1024 threads, 32 bins each: per-thread sums, a block scan, then the one thread
-- whose bins hold the drop-th smallest survivor walks them.
BODY[3] = [[
    const unsigned* __restrict__ hist, const unsigned long long* __restrict__ n_out, long long need,
    unsigned* __restrict__ sel)
{
  __shared__ unsigned long long part[1024];
  const long long drop = need - (long long)*n_out;
  const int t = threadIdx.x;
  unsigned long long mine = 0;
  for (int b = 0; b < 32; b++) mine += hist[t * 32 + b];
  part[t] = mine;
  __syncthreads();
  for (int d = 1; d < 1024; d <<= 1) {           /* inclusive Hillis-Steele scan */
    unsigned long long v = t >= d ? part[t - d] : 0ull;
    __syncthreads();
    part[t] += v;
    __syncthreads();
  }
  if (drop <= 0) {                               /* key < 0 and 0 ties: nothing goes */
    if (t == 0) { sel[0] = 0u; sel[1] = 0u; }
    return;
  }
  unsigned long long before = part[t] - mine;
  if (before < (unsigned long long)drop && part[t] >= (unsigned long long)drop) {
    for (int b = 0; b < 32; b++) {
      const unsigned h = hist[t * 32 + b];
      if (before + h >= (unsigned long long)drop) {
        sel[0] = (unsigned)(t * 32 + b);
        sel[1] = (unsigned)((unsigned long long)drop - before);
        return;
      }
      before += h;
    }
  }
}
]]

BODY[4] = [[
    const unsigned short* __restrict__ W, long long ldw, const unsigned char* __restrict__ mask, long long ldm,
    const unsigned* __restrict__ sel, unsigned* __restrict__ counts)
{
  __shared__ unsigned warp_sum[${THREADS} / 32];
  const unsigned k = sel[0];
  const long long n = (long long)${ROWS} * ${COLS};
  unsigned mine = 0;
  for (int round = 0; round < ${ROUNDS}; round++) {
    const long long i = ((long long)blockIdx.x * ${ROUNDS} + round) * ${THREADS} + threadIdx.x;
    if (i < n) {
      const long long r = i / ${COLS}, c = i % ${COLS};
      mine += mask[r * ldm + c] && (W[r * ldw + c] & 0x7fffu) == k;
    }
  }
  for (int d = 16; d; d >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, d);
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned s = 0;
    for (int w = 0; w < ${THREADS} / 32; w++) s += warp_sum[w];
    counts[blockIdx.x] = s;
  }
}
]]

-- One block: the chunks' counts in tiles of 1024, each tile scanned and offset by the last.
BODY[5] = [[
    unsigned* __restrict__ counts, long long n_chunks)
{
  __shared__ unsigned part[1024];
  __shared__ unsigned carry;
  const int t = threadIdx.x;
  if (t == 0) carry = 0;
  for (long long base = 0; base < n_chunks; base += 1024) {
    const unsigned mine = base + t < n_chunks ? counts[base + t] : 0u;
    part[t] = mine;
    __syncthreads();
    for (int d = 1; d < 1024; d <<= 1) {
      unsigned v = t >= d ? part[t - d] : 0u;
      __syncthreads();
      part[t] += v;
      __syncthreads();
    }
    if (base + t < n_chunks) counts[base + t] = carry + part[t] - mine;
    __syncthreads();
    if (t == 1023) carry += part[1023];
    __syncthreads();
  }
}
]]

-- Each round ranks the block's ties in position order: a ballot per warp, then the warps' counts
-- before it from shared memory; the running total carries to the next round.
BODY[6] = [[
    unsigned short* __restrict__ W, long long ldw, unsigned char* __restrict__ mask, long long ldm,
    const unsigned* __restrict__ sel, const unsigned* __restrict__ offsets)
{
  __shared__ unsigned warp_ties[${THREADS} / 32];
  const unsigned k = sel[0], drop = sel[1];
  const long long n = (long long)${ROWS} * ${COLS};
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  unsigned rank0 = offsets[blockIdx.x];
  for (int round = 0; round < ${ROUNDS}; round++) {
    const long long i = ((long long)blockIdx.x * ${ROUNDS} + round) * ${THREADS} + threadIdx.x;
    long long r = 0, c = 0;
    int kept = 0;
    unsigned key = 0;
    if (i < n) {
      r = i / ${COLS};
      c = i % ${COLS};
      kept = mask[r * ldm + c];
      key = W[r * ldw + c] & 0x7fffu;
    }
    const int tie = kept && key == k;
    const unsigned ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) warp_ties[warp] = __popc(ballot);
    __syncthreads();
    unsigned rank = rank0 + __popc(ballot & ((1u << lane) - 1u)), total = 0;
    for (int w = 0; w < ${THREADS} / 32; w++) {
      if (w < warp) rank += warp_ties[w];
      total += warp_ties[w];
    }
    __syncthreads();
    rank0 += total;
    if (i < n) {
      if (kept && (key < k || (tie && rank < drop))) {
        mask[r * ldm + c] = 0;
        kept = 0;
      }
      if (!kept) W[r * ldw + c] = 0;
    }
  }
}
]]

local NAMES = { [0] = "survivors", "pattern", "histogram", "select", "ties", "scan", "apply" }

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("gmp_prune: invalid config: " .. why, 0) end
  local L = layout(problem)
  local e = {
    THREADS = cfg.THREADS, ROWS = problem.M, COLS = problem.K, V = problem.V, MS = problem.MS, GP = L.GP,
    HKTP = L.KTP // 2, ROUNDS = ROUNDS,
  }
  e.entry = string.format("sj_gmp_%s_%s_v%d_m%d_%dx%d", NAMES[cfg.STAGE], problem.dtype, problem.V, problem.MS,
                          problem.M, problem.K)
  local head = emit.render(here(), [[
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(
]], e)
  local kernel = head .. emit.render(here(), BODY[cfg.STAGE], e)
  local n = problem.M * problem.K
  local blocks = ({ [0] = cdiv(n, cfg.THREADS), cdiv(n, cfg.THREADS), cdiv(n, cfg.THREADS), 1,
                    cdiv(n, cfg.THREADS * ROUNDS), 1, cdiv(n, cfg.THREADS * ROUNDS) })[cfg.STAGE]
  return {
    source = cuda.prelude(problem.dtype) .. kernel,
    entry = e.entry,
    grid = { blocks, 1, 1 },
    block = { cfg.THREADS, 1, 1 },
    shared = 0,
  }
end

return {
  name = "gmp_prune",
  op = "gmp-prune",
  params = PARAMS,
  space = function(problem) return { STAGE = { 0, 1, 2, 3, 4, 5, 6 }, THREADS = { 256, 1024 } } end,
  valid = valid,
  default = default,
  generate = generate,
}
