-- lib/twell_pairs.lua: ALGO=1 and 2 of templates/twell_ffn.lua, the FFN as a sampled product
-- and a sparse product over large (token x unit) tiles; ALGO=1's phases, on CUDA cores, are
-- here, ALGO=2's, on tensor cores, in lib/twell_pairs_mma.lua; both share the items, tickets,
-- workspace and pair list below:
--   phase A (SDDMM): for every non-zero h[t, j], p[t, j] = h[t, j] * (X[t, :] . WuT[j, :]);
--   phase B (SpMM):  Y[t, :] = sum_j p[t, j] * Wd[j, :].
-- Why: the token-block kernel (ALGO=0) reads the weight rows of the union of a block's active
-- units once per block of 8-16 tokens, which at 99% iid sparsity is ~14 GB of rows per call. Here
-- a CTA stages a d_model slice of UT unit rows in shared memory once for NTH tokens (phase A) and
-- a 64-column slice of Wd rows once for NTH tokens (phase B), so the weights are read
-- M / NTH times in all and every FMA is one of a real (token, unit) pair.
--
-- One kernel, one CTA per work item, items handed out by a ticket counter in the order: every
-- phase-A item (token tile tt, unit tile ut), then every phase-B item (token tile tt, 64-column
-- block cb; with DGROUP=1 in groups of DG token tiles, see P.geometry). A phase-B item waits
-- until the NUT phase-A items of its token tile are done; all of them hold tickets issued
-- earlier, to CTAs already running that wait on nothing, so the wait always ends. The last CTA to finish puts the counters back to zero for the next launch.
--
-- Workspace (the op's `work` argument, ops/twell/twell_api.c sizes it for both algorithms):
--   u32 [0] ticket, [1] finished CTAs, [2 .. 2 + NTT) phase-A items done per token tile, then,
--   from u32 PL_OFF, ALGO=2's counts and dealt slots (lib/twell_pairs_mma.lua) or ALGO=1's
--   pair list: row t (F entries of capacity) holds t's pairs as
--   (unit << 16) | p bits, in TwELL tile order (ascending tiles, a tile's entries in their
--   order), so the pairs of any tile-aligned unit range are contiguous. p is rounded to the
--   input dtype, as ALGO=0 rounds P before its down product.
-- Overflow: a tile whose count exceeds C is read from the spill (its non-zeros in column order);
-- it yields exactly `count` pairs (zeros pad, should the spill hold fewer), so list offsets,
-- computed from the counts alone, stay consistent.
-- Listed input (env.LISTED, ALGO=2 only; lib/hybrid_pairs.lua, the hybrid FFN's tensor-core
-- forward): instead of TwELL's fixed C slots a tile, every (token, tile) has its count and the
-- index of its first pair in one list of (entry, hybrid position) pairs, so no tile overflows and
-- the spill argument carries those starts; the kernel takes the hybrid-ffn-fwd ABI, finds the
-- list in its workspace, and the up phase also stores u at each pair's hybrid position.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local mma = require "lib.twell_pairs_mma"

local P = {}

P.KC = 16            -- d_model elements per phase-A chunk (two 16-byte pieces per row)
P.UB = 512           -- units per phase-B stage (a multiple of T)
P.NCOL = 64          -- output columns per phase-B item: 16 lanes x 4

-- u32 offset of the pair list in the workspace (room for the counters of 256-token tiles).
-- ops/twell/twell_api.c allocates 4 * (list_offset(M) + ceil64(M' / 8 * ceil(F / 256)) + M' * F')
-- bytes, M' and F' being M and F rounded up to 512: ALGO=1's M * F list entries, or ALGO=2's
-- counts and slots, fit for every config.
function P.list_offset(M) return (2 + tw.cdiv(M, 256) + 63) // 64 * 64 end

-- u32 words of that workspace for any config (ops/twell/twell_op.c's twell_ffn_workspace / 4 at
-- halves = 1; the listed DX kernel's slot counts and slots take twice that, halves = 2): where a
-- caller can put its own arrays after it.
function P.workspace_words(M, F, halves)
  local m512, f512 = tw.cdiv(M, 512) * 512, tw.cdiv(F, 512) * 512
  return P.list_offset(M) + (halves * m512 // 8 * tw.cdiv(F, 256) + 63) // 64 * 64 + halves * m512 * f512
end

function P.geometry(problem, cfg)
  local g = {}
  g.D, g.F, g.T = problem.N, problem.DFF, problem.T
  g.NTH = cfg.WARPS * 32
  g.UTT = cfg.UT // problem.T
  g.n_tiles = tw.cdiv(g.F, g.T)
  g.NUT = tw.cdiv(g.n_tiles, g.UTT)
  g.NCB = tw.cdiv(g.D, P.NCOL)
  g.NTT = tw.cdiv(problem.M, g.NTH)
  g.NKC = tw.cdiv(g.D, P.KC)
  g.NUB = tw.cdiv(g.F, P.UB)
  g.A_LIST = cfg.SLOTS * g.NTH * 4                       -- unit offsets (u16) and h bits (u16)
  g.A_STAGE = (2 * cfg.UT + 2 * g.NTH) * 16              -- WuT pieces 0 and 1, then X pieces
  g.A_SMEM = g.A_LIST + cfg.STAGES * g.A_STAGE
  g.B_STAGE = P.UB * P.NCOL * 2
  g.B_SMEM = 2 * g.B_STAGE + g.NTH * 8                   -- + cursor and length per token
  g.smem = math.max(g.A_SMEM, g.B_SMEM) + 16
  g.items = g.NTT * (g.NUT + g.NCB)
  -- DGROUP=1 (a tuning-space variant, not yet measured on a GPU, so no default takes it): down
  -- items go in groups of DG token tiles, column block outer and token tile inner, so the CTAs
  -- running at once stage the same Wd rows (DG token tiles read each stage together, and all of
  -- Wd crosses DRAM NTT / DG times, not once per wave of ~2 token tiles: 8 x 90 MB at 8192 x 4096
  -- / 11008). DG leaves out the token tiles whose up items are still in flight when the first
  -- down ticket is taken (the last SMS up tickets), so those first down items do not wait.
  -- DGROUP=0: one token tile at a time, column blocks inner.
  local sms = problem.SMS > 0 and problem.SMS or 132
  g.DG = cfg.DGROUP == 1 and math.max(1, g.NTT - tw.cdiv(sms, g.NUT)) or 0
  g.PL_OFF = P.list_offset(problem.M)
  if cfg.ALGO == 2 then mma.geometry(g, problem, cfg) end
  return g
end

function P.valid(problem, cfg)
  if cfg.PIPE ~= 0 or cfg.PERSIST ~= 0 or cfg.NT ~= 1 or cfg.ROUND ~= 1024 or cfg.UCAP ~= 128 then
    return false, string.format("ALGO=%d takes PIPE=0, PERSIST=0, NT=1, ROUND=1024, UCAP=128 (they belong to ALGO=0)", cfg.ALGO)
  end
  if cfg.ALGO == 2 then
    local ok, why = mma.valid(problem, cfg)
    if not ok then return false, why end
  else
    if not tw.member({ 256, 512, 1024, 2048 }, cfg.UT) then return false, "UT must be 256, 512, 1024 or 2048" end
    if not tw.member({ 16, 32 }, cfg.SLOTS) then return false, "SLOTS must be 16 or 32" end
  end
  if cfg.DGROUP ~= 0 and cfg.DGROUP ~= 1 then return false, "DGROUP must be 0 or 1" end
  if cfg.UT % problem.T ~= 0 then
    return false, string.format("UT=%d must be a multiple of the TwELL tile T=%d", cfg.UT, problem.T)
  end
  if P.UB % problem.T ~= 0 then
    return false, string.format("ALGO=%d needs the TwELL tile T=%d to divide %d", cfg.ALGO, problem.T, P.UB)
  end
  if problem.DFF > 65536 then return false, "ALGO=1 and 2 need d_ff <= 65536 (16-bit units in the pair list)" end
  local g = P.geometry(problem, cfg)
  if g.smem > tw.smem_limit(problem) then
    return false, string.format("shared memory %d bytes exceeds the target's %d", g.smem, tw.smem_limit(problem))
  end
  return true
end

-- The definitions both algorithms' phases use.
local function render_head(env) return emit.render(here(), [[
#define NTH ${NTH}
#define TT ${T}
#define CAP ${CAP}
#define UT ${UT}
#define UTT ${UTT}
#define STAGES ${STAGES}
#define NUT ${NUT}
#define NCB ${NCB}
#define NTT ${NTT}
$ if DG > 0 then
#define DG ${DG}
$ end
$ if LISTED then
#define MW ${MW}
#define CNT_OFF ${CNT_OFF}
#define ST_OFF ${ST_OFF}
#define LIST_OFF ${LIST_OFF}
$ end
#define NKC ${NKC}
#define NUB ${NUB}
#define UB ${UB}
#define ITEMS ${items}
#define PL_OFF ${PL_OFF}
#define A_STAGE ${A_STAGE}
#define B_STAGE ${B_STAGE}
typedef ${ctype} T;
typedef ${otype} OutT;
$ if LISTED then
/* Listed input: the third argument holds, per (token, tile), the index of the tile's first pair
 * in the list; a list pair is (entry, hybrid position of the pair, HPOS_NONE for none). */
typedef const int* sj_spill_t;
#define HPOS_NONE 0xffffffffu
$ else
/* TwELL: the third argument is the spill, read for a tile whose count exceeds C. */
typedef const T* sj_spill_t;
$ end

/* How many pairs token t has in tiles tile0 .. tile1 - 1 (the sum of their counts); none past the
 * last token. With tile0 = 0 it is where tile1's pairs start in the token's list. */
__device__ __forceinline__ int sj_tile_count(const int* __restrict__ counts, int t, int M, int n_tiles, int tile0,
                                             int tile1) {
  int c = 0;
  if (t < M)
#pragma unroll 8
    for (int tile = tile0; tile < tile1; tile++) c += counts[(size_t)t * n_tiles + tile];
  return c;
}

/* put(idx, unit - tile0 * TT, h bits) for the pairs idx in [a, b) of token t's tiles tile0 ..
 * tile1 - 1, in list order: tiles ascending, a tile's entries in order, and for a tile whose
 * count exceeds C (overflow) its non-zeros from the spill in column order. That tile yields
 * exactly `count` pairs (zero pairs pad a spill with fewer non-zeros), so list offsets computed
 * from the counts alone stay consistent. */
template <typename Put>
__device__ __forceinline__ void sj_tile_pairs(const unsigned* __restrict__ entries, const int* __restrict__ counts,
    sj_spill_t __restrict__ spill, int t, int n_tiles, int tile0, int tile1, int F, int a, int b, Put put) {
  int idx = 0;
$ if LISTED then
  for (int tile = tile0; tile < tile1 && idx < b; tile++) {
    const int cnt = counts[(size_t)t * n_tiles + tile];
    if (idx + cnt <= a) { idx += cnt; continue; }
    const uint2* e = (const uint2*)entries + spill[(size_t)t * n_tiles + tile];
    const int base = (tile - tile0) * TT;
    for (int c = 0; c < cnt && idx < b; c++, idx++)
      if (idx >= a) { const unsigned v = e[c].x; put(idx, base + (int)(v >> 16), (unsigned short)(v & 0xffffu)); }
  }
$ else
  for (int tile = tile0; tile < tile1 && idx < b; tile++) {
    const int cnt = counts[(size_t)t * n_tiles + tile];
    if (idx + cnt <= a) { idx += cnt; continue; }
    const int base = (tile - tile0) * TT;
    if (cnt <= CAP) {
      const unsigned* e = entries + ((size_t)t * n_tiles + tile) * CAP;
      for (int c = 0; c < cnt && idx < b; c++, idx++)
        if (idx >= a) { const unsigned v = e[c]; put(idx, base + (int)(v >> 16), (unsigned short)(v & 0xffffu)); }
    } else {
      const T* sp = spill + (size_t)t * F + (size_t)tile * TT;
      const int width = min(TT, F - tile * TT);
      int found = 0;
      for (int c = 0; c < width && found < cnt && idx < b; c++) {
        const unsigned short bits = sp[c];
        if (!sj_twell_nz(bits)) continue;
        if (idx >= a) put(idx, base + c, bits);
        idx++; found++;
      }
      for (; found < cnt && idx < b; found++, idx++)
        if (idx >= a) put(idx, base, (unsigned short)0);
    }
  }
$ end
}
$ if LISTED then

/* The hybrid position of token t's pair at local row `row` of unit tile ut (its tile's list is in
 * ascending columns: a binary search): flat, below MW = tokens x W an ELL slot, else MW + a
 * backup position; HPOS_NONE for an unplaced row's pair. */
__device__ __forceinline__ unsigned sj_pair_position(const unsigned* __restrict__ entries,
    const int* __restrict__ counts, sj_spill_t __restrict__ spill, int t, int ut, int row) {
  const uint2* e = (const uint2*)entries + spill[(size_t)t * NUT + ut];
  int lo = 0, hi = counts[(size_t)t * NUT + ut] - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if ((int)(e[mid].x >> 16) < row) lo = mid + 1; else hi = mid;
  }
  return e[lo].y;
}
$   if DX then

/* dh of the pair: dg = dh u (u as the forward stored it) and du = dh a, fp32, to the pair's
 * position; returns dg (NaN for an unplaced row's pair, which stores nothing). */
__device__ __forceinline__ float sj_keep_grads(const unsigned* __restrict__ entries, const int* __restrict__ counts,
    sj_spill_t __restrict__ spill, int t, int ut, int row, float dh, float a, ${KEEP_PARAMS}) {
  const unsigned pos = sj_pair_position(entries, counts, spill, t, ut, row);
  if (pos == HPOS_NONE) return __int_as_float(0x7fc00000);
  const bool ell = pos < (unsigned)MW;
  const unsigned at = ell ? pos : pos - (unsigned)MW;
  const float dg = dh * ${to_f32}((T)(ell ? u_values[at] : u_backup[at]));
  (ell ? dg_values : dg_backup)[at] = dg;
  (ell ? du_values : du_backup)[at] = dh * a;
  return dg;
}
$   else

/* u of the pair to its hybrid position (nothing for an unplaced row's pair). */
__device__ __forceinline__ void sj_keep_u(const unsigned* __restrict__ entries, const int* __restrict__ counts,
    sj_spill_t __restrict__ spill, int t, int ut, int row, float u, ${KEEP_PARAMS}) {
  const unsigned pos = sj_pair_position(entries, counts, spill, t, ut, row);
  if (pos == HPOS_NONE) return;
  const unsigned short bits = ${from_f32}(u);
  if (pos < (unsigned)MW) u_values[pos] = bits; else u_backup[pos - (unsigned)MW] = bits;
}
$   end
$ end
]], env) end

-- ALGO=1's phases.
local function render_cuda_cores(env) return emit.render(here(), [[
#define SLOTS ${SLOTS}

/* acc += x[0..15] . (16 values of w0, w1) */
__device__ __forceinline__ float sj_dot16(float acc, const float* x, uint4 w0, uint4 w1) {
  const sj_u32 w[8] = { w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w };
#pragma unroll
  for (int i = 0; i < 8; i++) {
    acc = fmaf(x[2 * i], ${to_f32}((T)(w[i] & 0xffffu)), acc);
    acc = fmaf(x[2 * i + 1], ${to_f32}((T)(w[i] >> 16)), acc);
  }
  return acc;
}

/* Phase A, item (tt, ut): thread tid owns token t; its pairs in the unit tile go to slots. */
__device__ __forceinline__ void sj_pairs_up(unsigned char* smem, int tt, int ut, const T* __restrict__ X,
    const unsigned* __restrict__ entries, const int* __restrict__ counts, const T* __restrict__ spill,
    const T* __restrict__ WuT, unsigned* plist, int M, int D, int F)
{
  unsigned short* jl = (unsigned short*)smem;                      /* [SLOTS][NTH] unit - u0 */
  unsigned short* hl = jl + SLOTS * NTH;                           /* [SLOTS][NTH] h bits */
  unsigned char* ring = smem + SLOTS * NTH * 4;
  const int tid = threadIdx.x, t = tt * NTH + tid;
  const int n_tiles = (F + TT - 1) / TT, tile0 = ut * UTT, u0 = tile0 * TT;
  const int tile1 = min(n_tiles, tile0 + UTT);
  const int off = sj_tile_count(counts, t, M, n_tiles, 0, tile0);
  const int total = sj_tile_count(counts, t, M, n_tiles, tile0, tile1);
  /* the copies of a chunk: thread i takes piece (i & 1) of unit / token (i >> 1) */
  auto load_chunk = [&](int kc, int stage) {
    unsigned char* st = ring + stage * A_STAGE;
    const int k = kc * 16;
    for (int i = tid; i < 2 * UT; i += NTH) {
      const int u = i >> 1, q = i & 1, row = u0 + u, kk = k + 8 * q;
      const bool ok = row < F && kk < D;
      sj_cp_async16(sj_smem_addr(st + (q * UT + u) * 16), ok ? WuT + (size_t)row * D + kk : WuT, ok ? 16 : 0);
    }
    for (int i = tid; i < 2 * NTH; i += NTH) {
      const int r = i >> 1, q = i & 1, row = tt * NTH + r, kk = k + 8 * q;
      const bool ok = row < M && kk < D;
      sj_cp_async16(sj_smem_addr(st + 2 * UT * 16 + (q * NTH + r) * 16), ok ? X + (size_t)row * D + kk : X, ok ? 16 : 0);
    }
  };
  for (int pass = 0;; pass++) {
    const int lo = pass * SLOTS;
    const int n = max(0, min(SLOTS, total - lo));
    /* this pass's pairs -> slots */
    if (n > 0)
      sj_tile_pairs(entries, counts, spill, t, n_tiles, tile0, tile1, F, lo, lo + SLOTS,
                    [&](int idx, int u, unsigned short bits) {
                      jl[(idx - lo) * NTH + tid] = (unsigned short)u;
                      hl[(idx - lo) * NTH + tid] = bits;
                    });
    if (!__syncthreads_or(n > 0)) break;              /* every thread's pairs are written */
    int jo[SLOTS];
    float acc[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; s++) { jo[s] = s < n ? jl[s * NTH + tid] * 16 : 0; acc[s] = 0.f; }

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) { if (s < NKC) load_chunk(s, s); sj_cp_async_commit(); }
    for (int kc = 0; kc < NKC; kc++) {
      sj_cp_async_wait<STAGES - 2>();
      __syncthreads();                                /* chunk kc landed; chunk kc - 1 is read by all */
      if (kc + STAGES - 1 < NKC) load_chunk(kc + STAGES - 1, (kc + STAGES - 1) % STAGES);
      sj_cp_async_commit();
      const unsigned char* st = ring + (kc % STAGES) * A_STAGE;
      const uint4 xa = *(const uint4*)(st + 2 * UT * 16 + tid * 16);
      const uint4 xb = *(const uint4*)(st + 2 * UT * 16 + (NTH + tid) * 16);
      const sj_u32 xw[8] = { xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w };
      float x[16];
#pragma unroll
      for (int i = 0; i < 8; i++) { x[2 * i] = ${to_f32}((T)(xw[i] & 0xffffu)); x[2 * i + 1] = ${to_f32}((T)(xw[i] >> 16)); }
#pragma unroll
      for (int s = 0; s < SLOTS; s++)
        if (s < n) {
          const uint4 w0 = *(const uint4*)(st + jo[s]);
          const uint4 w1 = *(const uint4*)(st + UT * 16 + jo[s]);
          acc[s] = sj_dot16(acc[s], x, w0, w1);
        }
    }
    sj_cp_async_wait<0>();
    /* p = h * u, rounded to the input dtype, -> t's list */
#pragma unroll
    for (int s = 0; s < SLOTS; s++)
      if (s < n) {
        const float p = acc[s] * ${to_f32}((T)hl[s * NTH + tid]);
        plist[(size_t)t * F + off + lo + s] = ((unsigned)(u0 + (jo[s] >> 4)) << 16) | (unsigned)${from_f32}(p);
      }
    __syncthreads();                                  /* the slots and the ring are free again */
  }
}

/* Phase B, item (tt, cb): warp w owns tokens 32w .. 32w + 31 of the tile, two at a time (one per
 * half warp), each lane 4 output columns of the 64 at c0. */
__device__ __forceinline__ void sj_pairs_down(unsigned char* smem, int tt, int cb, const int* __restrict__ counts,
    const T* __restrict__ Wd, const unsigned* plist, OutT* __restrict__ Y, int M, int D, int F)
{
  int* cur_s = (int*)(smem + 2 * B_STAGE);
  int* len_s = cur_s + NTH;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, h = lane >> 4, l16 = lane & 15;
  const int c0 = cb * 64, n_tiles = (F + TT - 1) / TT;
  {
    const int t = tt * NTH + tid;
    int len = 0;
    if (t < M) {
#pragma unroll 8
      for (int tile = 0; tile < n_tiles; tile++) len += counts[(size_t)t * n_tiles + tile];
    }
    cur_s[tid] = 0; len_s[tid] = len;
  }
  auto load_stage = [&](int ub, int stage) {
    unsigned char* st = smem + stage * B_STAGE;
    for (int i = tid; i < UB * 8; i += NTH) {
      const int r = i >> 3, q = i & 7, row = ub * UB + r, col = c0 + 8 * q;
      const bool ok = row < F && col < D;
      sj_cp_async16(sj_smem_addr(st + i * 16), ok ? Wd + (size_t)row * D + col : Wd, ok ? 16 : 0);
    }
  };
  float acc[16][4];
#pragma unroll
  for (int q = 0; q < 16; q++) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.f;
  load_stage(0, 0);
  sj_cp_async_commit();
  for (int ub = 0; ub < NUB; ub++) {
    sj_cp_async_wait<0>();
    __syncthreads();                                  /* stage ub landed; stage ub - 1 is read by all */
    if (ub + 1 < NUB) load_stage(ub + 1, (ub + 1) & 1);
    sj_cp_async_commit();
    const unsigned char* st = smem + (ub & 1) * B_STAGE + l16 * 8;
    const unsigned uend = (unsigned)(ub + 1) * UB;
#pragma unroll
    for (int q = 0; q < 16; q++) {
      const int lt = warp * 32 + 2 * q + h;
      const size_t row = (size_t)(tt * NTH + lt) * F;
      int cur = cur_s[lt];
      const int len = len_s[lt];
      for (;;) {
        /* the next 16 pairs of the token; those below uend are a prefix (tile order) */
        const int idx = cur + l16;
        const unsigned v = idx < len ? __ldcg(plist + row + idx) : 0xffffffffu;
        const bool in = idx < len && (v >> 16) < uend;
        const unsigned ball = __ballot_sync(0xffffffffu, in);
        const int n = __popc((ball >> (16 * h)) & 0xffffu);
        const int nmax = max(__popc(ball & 0xffffu), __popc(ball >> 16));
        for (int e = 0; e < nmax; e++) {
          const unsigned pv = __shfl_sync(0xffffffffu, v, 16 * h + e);
          if (e < n) {
            const float p = ${to_f32}((T)(pv & 0xffffu));
            const uint2 w = *(const uint2*)(st + ((pv >> 16) - uend + UB) * 128);
            acc[q][0] = fmaf(p, ${to_f32}((T)(w.x & 0xffffu)), acc[q][0]);
            acc[q][1] = fmaf(p, ${to_f32}((T)(w.x >> 16)), acc[q][1]);
            acc[q][2] = fmaf(p, ${to_f32}((T)(w.y & 0xffffu)), acc[q][2]);
            acc[q][3] = fmaf(p, ${to_f32}((T)(w.y >> 16)), acc[q][3]);
          }
        }
        cur += n;
        if (!__any_sync(0xffffffffu, n == 16)) break;
      }
      if (l16 == 0) cur_s[lt] = cur;
    }
  }
  /* Y, 4 columns per lane (D % 8 == 0, so a lane's 4 are all in or all out) */
#pragma unroll
  for (int q = 0; q < 16; q++) {
    const int t = tt * NTH + warp * 32 + 2 * q + h, col = c0 + 4 * l16;
    if (t >= M || col >= D) continue;
    OutT* y = Y + (size_t)t * D + col;
$ if out_f16 then
    *(uint2*)y = make_uint2(${opack2}(acc[q][0], acc[q][1]), ${opack2}(acc[q][2], acc[q][3]));
$ else
    *(float4*)y = make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]);
$ end
  }
}
]], env) end

-- The kernel: a ticket picks the item, an up item counts itself done, a down item waits for its
-- token tile's up items.
local function render_entry(env) return emit.render(here(), [[
__device__ __forceinline__ unsigned sj_ld_acquire(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }

$ if DX then
/* the hybrid-ffn-dx ABI (templates/hybrid_ffn_dx.lua) and its tail: the workspace, where the list
 * of the pairs is, then the descriptors of dY, Wd (the up product's), WgT and WuT (the down
 * product's); the hybrid arrays are read through the list */
extern "C" __global__ void __launch_bounds__(NTH, 1) ${entry}(
    const T* __restrict__ dY, const unsigned short* __restrict__ values, const unsigned short* __restrict__ columns,
    const int* __restrict__ nnz, const int* __restrict__ slot, const unsigned short* __restrict__ backup,
    ${KEEP_INPUTS}, const T* __restrict__ WgT, const T* __restrict__ WuT, const T* __restrict__ Wd,
    OutT* __restrict__ Y, ${KEEP_OUTPUTS}, int R, unsigned* work,
$ elseif LISTED then
/* the hybrid-ffn-fwd ABI (templates/hybrid_ffn_fwd.lua) and its tail: the workspace, where the
 * list of the pairs is, then the descriptors; the hybrid arrays are read through the list */
extern "C" __global__ void __launch_bounds__(NTH, 1) ${entry}(
    const T* __restrict__ X, const unsigned short* __restrict__ values, const unsigned short* __restrict__ columns,
    const int* __restrict__ nnz, const int* __restrict__ slot, const unsigned short* __restrict__ backup,
    const T* __restrict__ WuT, const T* __restrict__ Wd, OutT* __restrict__ Y, ${KEEP_PARAMS}, int R, unsigned* work,
$ else
extern "C" __global__ void __launch_bounds__(NTH, 1) ${entry}(
    const T* __restrict__ X, const unsigned* __restrict__ entries, const int* __restrict__ counts,
    const T* __restrict__ spill, const T* __restrict__ WuT, const T* __restrict__ Wd,
$ end
$ if ALGO == 2 then
$   if not LISTED then
    OutT* __restrict__ Y, int M, int D, int F, unsigned* work,
$   end
    const __grid_constant__ sj_tensor_map tm_x, const __grid_constant__ sj_tensor_map tm_wu,
$   if DX then
    const __grid_constant__ sj_tensor_map tm_wd, const __grid_constant__ sj_tensor_map tm_wd2)
$   else
    const __grid_constant__ sj_tensor_map tm_wd)
$   end
{
$   if LISTED then
  const int M = ${M}, D = ${D}, F = ${F};
  const unsigned* entries = work + LIST_OFF;
  const int* counts = (const int*)(work + CNT_OFF);
  sj_spill_t spill = (const int*)(work + ST_OFF);
$   end
  /* X, WuT and Wd arrive through the descriptors; the stages are 1024-byte aligned by hand (TMA
   * swizzles from absolute shared-memory address bits) */
  extern __shared__ __align__(128) unsigned char sj_smem_raw[];
  unsigned char* smem = sj_smem_raw + ((1024 - (sj_smem_addr(sj_smem_raw) & 1023)) & 1023);
$ else
    OutT* __restrict__ Y, int M, int D, int F, unsigned* work)
{
  extern __shared__ __align__(16) unsigned char smem[];
$ end
  __shared__ int item_s;
  unsigned* done = work + 2;
$ if ALGO ~= 2 then
  unsigned* plist = work + PL_OFF;
$ end
  if (threadIdx.x == 0) item_s = (int)atomicAdd(work, 1u);
  __syncthreads();
  const int item = item_s;
  if (item < NTT * NUT) {
    const int tt = item / NUT, ut = item % NUT;
$ if LISTED then
    sj_pairs_up(smem, tt, ut, entries, counts, spill, work, M, D, F, &tm_x, &tm_wu, ${KEEP_ARGS});
$ elseif ALGO == 2 then
    sj_pairs_up(smem, tt, ut, entries, counts, spill, work, M, D, F, &tm_x, &tm_wu);
$ else
    sj_pairs_up(smem, tt, ut, X, entries, counts, spill, WuT, plist, M, D, F);
$ end
    __threadfence();                                  /* this thread's pairs, before the count below */
    __syncthreads();
    if (threadIdx.x == 0) { __threadfence(); atomicAdd(done + tt, 1u); }
  } else {
$ if DG > 0 then
    /* group of DG token tiles (the last may hold fewer), then column block, then token tile */
    const int b = item - NTT * NUT, grp = b / (DG * NCB), r = b - grp * (DG * NCB);
    const int gs = min(DG, NTT - grp * DG), cb = r / gs, tt = grp * DG + r % gs;
$ else
    const int b = item - NTT * NUT, tt = b / NCB, cb = b % NCB;
$ end
    if (threadIdx.x == 0) while (sj_ld_acquire(done + tt) < (unsigned)NUT) __nanosleep(256);
    __syncthreads();
$ if DX then
    sj_pairs_down(smem, tt, cb, &tm_wd, &tm_wd2, work, Y, M, D, F);
$ elseif ALGO == 2 then
    sj_pairs_down(smem, tt, cb, &tm_wd, work, Y, M, D, F);
$ else
    sj_pairs_down(smem, tt, cb, counts, Wd, plist, Y, M, D, F);
$ end
  }
  /* the last CTA out resets the counters for the next launch */
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(work + 1, 1u) == (unsigned)(ITEMS - 1)) {
      for (int i = 0; i < NTT; i++) done[i] = 0u;
      work[1] = 0u;
      __threadfence();
      work[0] = 0u;
    }
  }
}
]], env) end

-- The kernel text; env holds the geometry, the config, T / C and the dtype names.
function P.render(env)
  local phases = env.ALGO == 2 and mma.render(env) or render_cuda_cores(env)
  return render_head(env) .. phases .. render_entry(env)
end

-- The kernel of ALGO=1 or 2 for problem and cfg (dt, ot: lib/cuda.lua's input and output dtypes).
-- listed (ALGO=2 only; nil for TwELL input): from lib/hybrid_pairs.lua, the listed kernel's entry
-- name, its workspace offsets (MW, CNT_OFF, ST_OFF, LIST_OFF), DX, and the per-pair outputs'
-- parameters (KEEP_PARAMS, their names KEEP_ARGS; for DX also KEEP_INPUTS and KEEP_OUTPUTS, the
-- same parameters in the ABI's order).
function P.generate(problem, cfg, dt, ot, listed)
  local g = P.geometry(problem, cfg)
  local env = { ALGO = cfg.ALGO, LISTED = listed ~= nil, DX = false, UT = cfg.UT, SLOTS = cfg.SLOTS, STAGES = cfg.STAGES,
                CAP = problem.C, UB = P.UB, ctype = dt.ctype, otype = ot.ctype, to_f32 = dt.to_f32,
                from_f32 = dt.from_f32, out_f16 = ot.size == 2, opack2 = ot.pack2, ofrom = ot.from_f32,
                M = problem.M }
  for k, v in pairs(g) do env[k] = v end
  for k, v in pairs(listed or {}) do env[k] = v end
  env.entry = listed and listed.entry or
              string.format("sj_twell_ffn_pairs%d_%s_%s_t%dc%d_m%d_d%d_f%d_w%d_u%d_s%d_st%d", cfg.ALGO, problem.dtype,
                            problem.out_dtype, problem.T, problem.C, problem.M, g.D, g.F, cfg.WARPS, cfg.UT,
                            cfg.SLOTS, cfg.STAGES) .. (g.DG > 0 and "_g" .. g.DG or "")
  return {
    source = cuda.prelude(problem.dtype) .. (cfg.ALGO == 2 and cuda.hopper() or "") .. tw.format_c .. P.render(env),
    entry = env.entry,
    grid = { g.items, 1, 1 }, block = { g.NTH, 1, 1 }, shared = g.smem,
  }
end

return P
