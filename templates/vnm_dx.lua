-- vnm_dx.lua: the exact input gradient of a V:N:M layer, dX = W^T . dY, straight from W's
-- compressed form on dense tensor cores (issue 33; a candidate beside sj_vnm_dx_exact's dense
-- W^T + gemm, not the default anywhere: 4x slower than it on the H100, bench/RESULTS.md). problem.M = rows of W (out),
-- problem.N = columns of W (in), problem.K = tokens; dY is M x K and dX is N x K, row-major
-- (tokens contiguous), K a multiple of 8; fp32 accumulation; every element of dX is written
-- (out_dtype f16, bf16 or f32; 0 where no row block selects a column). The reference is
-- ops/vnm/vnm_dx_host.c.
--
-- Per V-row block rb, W's kept values in the block's 4 selected columns of each group form a
-- dense (4 G) x V matrix Wc_rb^T (half of it zeros: the 2:4 inside), and
--   dX[sel_rb(j), :] += (Wc_rb^T . dY[rows of rb, :])[j, :],
-- so summed over the row blocks the tensor work is 4/M of the dense W^T . dY, with a reduction
-- of only V rows per block. Why not sparse tensor cores: the 2:4 inside runs along W's rows,
-- i.e. along this product's reduction axis only in the transposed sense: compact row j of
-- Wc_rb^T holds, for every row r of the block, W[r][sel(j)] or zero, and which rows keep it
-- is arbitrary (any 2 of 4 per row), so along the reduction (r) the zeros follow no pattern.
--
-- A CTA owns BG whole column groups (BG * M rows of dX) x BN tokens and walks every row block
-- in order (deterministic, no atomics). Per stage (BK rows of one block):
--   A: the 4 BG compact rows x BK, built in shared memory from W's values and metadata (each
--      (row, group) holds its 2 kept values at 2 of the 4 positions its nibble names, zeros at
--      the other 2), stored reduction-major (At[BK][4 BG], one 8-byte store per (row, group));
--      its global loads are issued into registers before the stage's mma and stored after it;
--   B: dY[rows of the stage, BN tokens], contiguous rows: a STAGES-deep cp.async ring;
-- both read by ldmatrix.trans (16-byte chunks XOR-swizzled by row: conflict free), mma.sync
-- m16n8k16 into a register accumulator of the compact rows. After a block's last stage each
-- thread adds its accumulators into the CTA's fp32 shared-memory tile of BG * M rows x BN at
-- the rows the block's index names (compact row j of group g: dX row index[rb][g][j % 4];
-- distinct within a block, so each thread owns its adds; the stage barriers order the blocks)
-- and zeroes them: 1/V of the mma work in shared-memory adds. At the end the tile is written
-- to dX, 16 bytes (8 tokens) a thread-step.
--
-- Bytes per CTA: all of dY's M x BN (2 bytes) and W's values and metadata of its BG groups (4.5
-- bytes per row and group), so over the grid G K M (4.5 / BN + 2 / BG) bytes from L2; the CTAs
-- of a wave walk the group tiles of a token tile together (group tiles inner), so a wave reads
-- a few token tiles' dY slabs and all of W, which stays in L2.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local PARAMS = { "BG", "BN", "BK", "WM", "WN", "STAGES" }
local MAX_ACC = 128             -- fp32 accumulators per thread
local BG_EDGES = { 4, 8, 16, 32, 64 }
local BN_EDGES = { 32, 64, 128, 256 }
local BK_EDGES = { 16, 32, 64 }
local WM_EDGES = { 16, 32, 64 }
local WN_EDGES = { 16, 32, 64 }
local PAD = 4                   -- floats of padding per row of the fp32 tile

local cdiv, member = vnm.cdiv, vnm.member

-- The compressed layout's geometry (lib/vnm_common.lua), W = M x N.
local function layout(problem) return vnm.layout(problem.M, problem.N, problem.V, problem.MS) end

local function ring_bytes(cfg) return cfg.STAGES * cfg.BK * (4 * cfg.BG + cfg.BN) * 2 end
local function tile_bytes(problem, cfg) return cfg.BG * problem.MS * (cfg.BN + PAD) * 4 end
local function smem_bytes(problem, cfg) return ring_bytes(cfg) + tile_bytes(problem, cfg) end

local problem_ok = vnm.check_training_problem

local function valid(problem, cfg)
  for _, p in ipairs(PARAMS) do
    if math.type(cfg[p]) ~= "integer" then return false, p .. " is missing or not an integer" end
  end
  local ok, why = problem_ok(problem)
  if not ok then return false, why end
  local CR, BN, BK, WM, WN = 4 * cfg.BG, cfg.BN, cfg.BK, cfg.WM, cfg.WN
  if not member(BG_EDGES, cfg.BG) then return false, "BG=" .. cfg.BG .. " must be 4, 8, 16, 32 or 64" end
  if not member(BN_EDGES, BN) then return false, "BN=" .. BN .. " must be 32, 64, 128 or 256" end
  if not member(BK_EDGES, BK) then return false, "BK=" .. BK .. " must be 16, 32 or 64" end
  if BK > problem.V then return false, string.format("BK=%d exceeds V=%d: a stage's rows lie in one row block", BK, problem.V) end
  if not member(WM_EDGES, WM) then return false, "WM=" .. WM .. " must be 16, 32 or 64" end
  if not member(WN_EDGES, WN) then return false, "WN=" .. WN .. " must be 16, 32 or 64" end
  if CR % WM ~= 0 then return false, string.format("4*BG=%d (compact rows) is not a multiple of WM=%d", CR, WM) end
  if BN % WN ~= 0 then return false, "BN=" .. BN .. " is not a multiple of WN=" .. WN end
  local warps = (CR // WM) * (BN // WN)
  if not member({ 1, 2, 4, 8 }, warps) then
    return false, string.format("(4*BG/WM)*(BN/WN) = %d warps, must be 1, 2, 4 or 8", warps)
  end
  if WM * WN // 32 > MAX_ACC then
    return false, string.format("WM*WN/32 = %d accumulators per thread, at most %d", WM * WN // 32, MAX_ACC)
  end
  if cfg.STAGES < 2 or cfg.STAGES > 4 then return false, "STAGES=" .. cfg.STAGES .. " must be 2..4" end
  local L = layout(problem)
  local nst = L.RB * (problem.V // BK)
  if cfg.STAGES > nst + 1 then return false, string.format("STAGES=%d exceeds the %d row stages plus one", cfg.STAGES, nst) end
  if cfg.BG > L.GP then return false, string.format("BG=%d is more than the %d (padded) column groups", cfg.BG, L.GP) end
  local smem = smem_bytes(problem, cfg)
  if smem > problem.SMEM then
    return false, string.format("shared memory %d bytes (ring %d, fp32 tile of %d x %d) exceeds the %s limit of %d", smem,
                                ring_bytes(cfg), cfg.BG * problem.MS, BN, problem.arch, problem.SMEM)
  end
  return true
end

local function space(problem)
  return { BG = BG_EDGES, BN = BN_EDGES, BK = BK_EDGES, WM = WM_EDGES, WN = WN_EDGES, STAGES = { 2, 3, 4 } }
end

-- A tile of BG groups x BN tokens with 8 warps where the compact rows allow: WM up to 32 rows,
-- the rest of the warps across the tokens (WN at least 16, at most 64).
local function tile(BG, BN, BK, STAGES)
  local CR = 4 * BG
  local WM = math.min(32, CR)
  local warps_n = math.max(1, 8 // (CR // WM))
  local WN = math.max(16, math.min(64, BN // warps_n))
  return { BG = BG, BN = BN, BK = BK, WM = WM, WN = WN, STAGES = STAGES }
end

-- The largest tile the shared memory holds (H100, 2026-12-07: 7107 us at 11008 x 4096 x 8192 2:8,
-- one CTA an SM at 12.5% occupancy, latency-bound: bench/NOTES.md), aiming at 256 rows of dX (fewer column tiles re-read dY) with at most 128 compact rows, 128 tokens
-- (fewer token tiles re-read W), 32-row stages, 3 deep.
local function default(problem)
  local ok, why = problem_ok(problem)
  if not ok then error("vnm_dx: unsupported problem: " .. why, 0) end
  local BK = math.min(32, problem.V)
  local bg = 4
  while bg < 32 and 2 * bg * problem.MS <= 256 do bg = 2 * bg end
  for _, BN in ipairs({ 128, 64, 32 }) do
    local g = bg
    while g >= 4 do
      for _, S in ipairs({ 3, 2 }) do
        local cfg = tile(g, BN, BK, S)
        if valid(problem, cfg) then return cfg end
      end
      g = g // 2
    end
  end
  error("vnm_dx: no default config fits " .. problem.arch, 0)
end

-- Useful FLOPs: the 2 kept values of every M columns of every row of W, over the tokens.
local function flops(problem) return 2.0 * problem.M * problem.N * problem.K * problem.NS / problem.MS end

-- Fewest bytes: dY, W's values, metadata and index once, dX once.
local function bytes(problem)
  local L = layout(problem)
  local osz = cuda.dtype(problem.out_dtype).size
  return problem.M * problem.K * 2 + L.RP * L.GP * 4 + L.RP * L.GP // 2 + L.RB * L.GP * 16 + problem.N * problem.K * osz
end

-- The C expression of the swizzled 16-byte chunk c of row r for rows of ch chunks: 8 rows at one
-- chunk fall on 8 distinct 16-byte bank groups (rows of 64 or 32 bytes pair or quadruple up in
-- 128 bytes, so they XOR with r/2 or r/4).
local function swizzle(ch)
  if ch >= 8 then return "(c ^ (r & 7))" end
  if ch == 4 then return "(c ^ ((r >> 1) & 3))" end
  if ch == 2 then return "(c ^ ((r >> 2) & 1))" end
  return "c"
end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("vnm_dx: invalid config: " .. why, 0) end
  local M, N, K, V, MS = problem.M, problem.N, problem.K, problem.V, problem.MS
  local BG, BN, BK, WM, WN, STAGES = cfg.BG, cfg.BN, cfg.BK, cfg.WM, cfg.WN, cfg.STAGES
  local CR = 4 * BG
  local L = layout(problem)
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local WARPS_N = BN // WN
  local THREADS = (CR // WM) * WARPS_N * 32
  local KTC = math.max(1, BG // 8)            -- 8-group fragment tiles a stage's A covers
  local A_ITEMS = (BK // 16) * KTC * 128      -- (row, group) pairs a stage reads, in value order
  local B_CH = BK * BN // 8
  local TG, TT = cdiv(L.G, BG), cdiv(K, BN)
  local e = {
    M = M, N = N, K = K, V = V, MS = MS, BG = BG, BN = BN, BK = BK, WM = WM, WN = WN, STAGES = STAGES,
    T = din.ctype, OT = dout.ctype, THREADS = THREADS, WARPS_N = WARPS_N, CR = CR,
    ROWA = CR * 2, ROWB = BN * 2, A_BYTES = BK * CR * 2, STAGE_BYTES = BK * (CR + BN) * 2,
    TILE_OFF = ring_bytes(cfg), LDS = BN + PAD, PAD = PAD, ROWS = BG * MS,
    A_ITEMS = A_ITEMS, IT_A = cdiv(A_ITEMS, THREADS), KTC = KTC,
    B_CH = B_CH, IT_B = cdiv(B_CH, THREADS), BCH = BN // 8,
    KPB = V // BK, NST = L.RB * (V // BK), TG = TG, GP = L.GP, HKTP = L.KTP // 2, KTP = L.KTP,
    MI = WM // 16, NI = WN // 8, NJ = WN // 16, KK = BK // 16,
    OUT_CH = BG * MS * (BN // 8),
    SWZ_A = swizzle(CR // 8), SWZ_B = swizzle(BN // 8),
    out_f32 = problem.out_dtype == "f32", pack_out = dout.pack2,
    prelude = cuda.prelude(problem.dtype),
  }
  e.entry = string.format("sj_vnm_dx_%s_%s_v%d_m%d_bg%d_bn%d_bk%d_wm%d_wn%d_s%d",
                          problem.dtype, problem.out_dtype, V, MS, BG, BN, BK, WM, WN, STAGES)

  local kernel = emit.render(here(), [[
typedef ${T} InT;
typedef ${OT} OutT;
/* Byte offsets of 16-byte chunk c of row r in a stage's A (compact rows) and B (tokens). */
__device__ __forceinline__ sj_u32 sj_dx_swz_a(int r, int c) { return (sj_u32)(r * ${ROWA} + (${SWZ_A} << 4)); }
__device__ __forceinline__ sj_u32 sj_dx_swz_b(int r, int c) { return (sj_u32)(r * ${ROWB} + (${SWZ_B} << 4)); }
__device__ __forceinline__ void sj_dx_sts64(sj_u32 addr, unsigned long long v) {
  asm volatile("st.shared.b64 [%0], %1;" :: "r"(addr), "l"(v) : "memory"); }

$ -- Shape, V:N:M and config are constants; the int arguments only keep the op's ABI.
extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${entry}(
    const InT* __restrict__ W_values, const sj_u32* __restrict__ W_meta, const int* __restrict__ W_index,
    const InT* __restrict__ dY, OutT* __restrict__ dX, int M_arg, int N_arg, int K_arg)
{
  (void)M_arg; (void)N_arg; (void)K_arg;
  extern __shared__ __align__(128) unsigned char sj_smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / ${WARPS_N}, warp_n = warp % ${WARPS_N};
  /* Group tiles inner: the CTAs of a wave share a few token tiles' dY slabs. */
  const int tile_g = blockIdx.x % ${TG}, tile_t = blockIdx.x / ${TG};
  const int g0 = tile_g * ${BG}, t0 = tile_t * ${BN};
  const sj_u32 smem0 = sj_smem_addr(sj_smem);
  float* tile = (float*)(sj_smem + ${TILE_OFF});

  for (int i = tid; i < ${ROWS * (BN + PAD) // 4}; i += ${THREADS})
    ((float4*)tile)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  /* Stage ks covers rows rb * V + kk * BK .. + BK - 1 of W and dY (rb = ks / KPB, kk = ks % KPB). */
  auto load_b = [&](int ks, sj_u32 s) {
    const int row0 = (ks / ${KPB}) * ${V} + (ks % ${KPB}) * ${BK};
#pragma unroll
    for (int i = 0; i < ${IT_B}; ++i) {
      const int q = tid + i * ${THREADS};
$ if B_CH % THREADS ~= 0 then
      if (q >= ${B_CH}) break;
$ end
      const int r = q / ${BCH}, c = q % ${BCH};
      const bool ok = row0 + r < ${M} && t0 + c * 8 < ${K};
      sj_cp_async16(s + ${A_BYTES} + sj_dx_swz_b(r, c),
                    ok ? (const void*)(dY + (long long)(row0 + r) * ${K} + t0 + c * 8) : (const void*)dY, ok ? 16 : 0);
    }
  };
  /* A's (row, group) pairs of stage ks in W's value order (vnm_format.h: a fragment tile of 16
     rows x 8 groups is 128 consecutive pairs), so consecutive threads read consecutive words: the
     pair of values and the metadata nibble into registers; nib bit 4 marks a pair of this CTA's
     groups (bits 0-3: positions p0 | p1 << 2; 0 past the padded groups, whose value is 0). */
  sj_u32 a_val[${IT_A}], a_nib[${IT_A}];
  auto fetch_a = [&](int ks) {
    const int row0 = (ks / ${KPB}) * ${V} + (ks % ${KPB}) * ${BK};
#pragma unroll
    for (int i = 0; i < ${IT_A}; ++i) {
      const int w = tid + i * ${THREADS};
      const int t = w >> 7, item = w & 127, ln = item >> 2, reg = item & 3;
      const int r = 8 * (reg & 1) + (ln >> 2), c = 4 * (reg >> 1) + (ln & 3);
      const int row = row0 + (t / ${KTC}) * 16 + r, g = (g0 & ~7) + (t % ${KTC}) * 8 + c;
      const bool mine = ${A_ITEMS % THREADS ~= 0 and "w < " .. A_ITEMS .. " && " or ""}g >= g0 && g < g0 + ${BG};
      sj_u32 val = 0u, nib = mine ? 16u : 0u;
      if (mine && g < ${GP}) {
        const int kt = g >> 3;
        val = *(const sj_u32*)(W_values + ((((long long)(row >> 4) * ${KTP} + kt) * 32 + ln) * 4 + reg) * 2);
        const sj_u32 word = W_meta[((long long)(row >> 4) * ${HKTP} + (kt >> 1)) * 32 + 4 * (r & 7) + 2 * (kt & 1) + (c >> 2)];
        nib |= (word >> (16 * (r >> 3) + 4 * (c & 3))) & 0xfu;
      }
      a_val[i] = val;
      a_nib[i] = nib;
    }
  };
  /* At[row][4 gl + p] of the fetched pairs: the 2 kept values at their positions, zeros at the
     other 2 (every pair of the CTA's groups is stored, so no stale slot survives in the ring). */
  auto store_a = [&](sj_u32 s) {
#pragma unroll
    for (int i = 0; i < ${IT_A}; ++i) {
      const int w = tid + i * ${THREADS};
      if (!(a_nib[i] & 16u)) continue;
      const int t = w >> 7, item = w & 127, ln = item >> 2, reg = item & 3;
      const int r = (t / ${KTC}) * 16 + 8 * (reg & 1) + (ln >> 2);
      const int gl = (g0 & ~7) + (t % ${KTC}) * 8 + 4 * (reg >> 1) + (ln & 3) - g0;
      const unsigned long long v = ((unsigned long long)(a_val[i] & 0xffffu) << (16 * (a_nib[i] & 3u))) |
                                   ((unsigned long long)(a_val[i] >> 16) << (16 * ((a_nib[i] >> 2) & 3u)));
      sj_dx_sts64(s + sj_dx_swz_a(r, gl >> 1) + (gl & 1) * 8, v);
    }
  };

  float acc[${MI}][${NI}][4];
#pragma unroll
  for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
    for (int ni = 0; ni < ${NI}; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  /* The tile row each of this thread's accumulator rows (compact rows +g and +g+8 of each mi) lands
     on in the current row block, -1 for a padding column. */
  int dst[${MI}][2];

  /* Prologue: STAGES-1 stages in flight (an empty group where there are fewer). */
#pragma unroll
  for (int st = 0; st < ${STAGES - 1}; ++st) {
    if (st < ${NST}) {
      load_b(st, smem0 + st * ${STAGE_BYTES});
      fetch_a(st);
      store_a(smem0 + st * ${STAGE_BYTES});
    }
    sj_cp_async_commit();
  }
  /* ldmatrix.trans rows of this lane: matrix i = lane / 8 reads k rows +(lane & 7) and, for A,
     +8 from i = 2 on at compact rows +8 (i & 1); for B +8 at odd i, tokens +8 from i = 2 on. */
  const int a_k = (lane & 7) + ((lane >> 4) << 3), a_m = warp_m * ${WM} + (((lane >> 3) & 1) << 3);
  const int b_k = (lane & 7) + (((lane >> 3) & 1) << 3), b_n = warp_n * ${WN} + ((lane >> 4) << 3);

  int read_stage = 0, write_stage = ${STAGES - 1};
#pragma unroll 1
  for (int ks = 0; ks < ${NST}; ++ks) {
    /* Stage ks has landed once at most STAGES-2 younger groups are pending; the barrier also
       says every warp is done with the slot refilled now (read at ks-1) and orders one block's
       adds into the tile after the previous block's. */
    sj_cp_async_wait<${STAGES - 2}>();
    __syncthreads();
    const bool more = ks + ${STAGES - 1} < ${NST};
    if (more) {
      load_b(ks + ${STAGES - 1}, smem0 + write_stage * ${STAGE_BYTES});
      fetch_a(ks + ${STAGES - 1});
    }
    sj_cp_async_commit();
    const int rb = ks / ${KPB}, kk = ks - rb * ${KPB};
    if (kk == 0) {
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int j = warp_m * ${WM} + mi * 16 + h * 8 + (lane >> 2), g = g0 + (j >> 2);
          const int col = g < ${GP} ? W_index[((long long)rb * ${GP} + g) * 4 + (j & 3)] : -1;
          dst[mi][h] = col >= 0 ? col - g0 * ${MS} : -1;
        }
    }
    const sj_u32 s = smem0 + read_stage * ${STAGE_BYTES};
#pragma unroll
    for (int k16 = 0; k16 < ${KK}; ++k16) {
      sj_u32 af[${MI}][4], bf[${NJ}][4];
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
        sj_ldmatrix_x4_trans(af[mi], s + sj_dx_swz_a(k16 * 16 + a_k, (a_m + mi * 16) >> 3));
#pragma unroll
      for (int nj = 0; nj < ${NJ}; ++nj)
        sj_ldmatrix_x4_trans(bf[nj], s + ${A_BYTES} + sj_dx_swz_b(k16 * 16 + b_k, (b_n + nj * 16) >> 3));
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
        for (int ni = 0; ni < ${NI}; ++ni) sj_mma_16816(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);
    }
    if (more) store_a(smem0 + write_stage * ${STAGE_BYTES});
    write_stage = (write_stage == ${STAGES - 1}) ? 0 : write_stage + 1;
    read_stage = (read_stage == ${STAGES - 1}) ? 0 : read_stage + 1;
    if (kk == ${KPB - 1}) {
      /* The block's products into the tile: accumulator (mi, ni) holds compact rows +g, +g+8 and
         tokens +2q, +2q+1. */
      const int q = lane & 3;
#pragma unroll
      for (int mi = 0; mi < ${MI}; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (dst[mi][h] >= 0) {
            float* row = tile + dst[mi][h] * ${LDS} + warp_n * ${WN} + 2 * q;
#pragma unroll
            for (int ni = 0; ni < ${NI}; ++ni) {
              float2 v = *(float2*)(row + ni * 8);
              v.x += acc[mi][ni][2 * h];
              v.y += acc[mi][ni][2 * h + 1];
              *(float2*)(row + ni * 8) = v;
            }
          }
#pragma unroll
          for (int ni = 0; ni < ${NI}; ++ni) acc[mi][ni][2 * h] = acc[mi][ni][2 * h + 1] = 0.0f;
        }
    }
  }
  sj_cp_async_wait<0>();
  __syncthreads();

  /* The tile to dX: 8 tokens (16 or 32 bytes) a thread-step, rows past N and tokens past K left out. */
  for (int i = tid; i < ${OUT_CH}; i += ${THREADS}) {
    const int rl = i / ${BCH}, c8 = i % ${BCH};
    const int row = g0 * ${MS} + rl, t = t0 + c8 * 8;
    if (row >= ${N} || t >= ${K}) continue;
    const float4 lo = *(const float4*)(tile + rl * ${LDS} + c8 * 8), hi = *(const float4*)(tile + rl * ${LDS} + c8 * 8 + 4);
    OutT* out = dX + (long long)row * ${K} + t;
$ if out_f32 then
    *(float4*)out = lo;
    *(float4*)(out + 4) = hi;
$ else
    *(uint4*)out = make_uint4(${pack_out}(lo.x, lo.y), ${pack_out}(lo.z, lo.w), ${pack_out}(hi.x, hi.y), ${pack_out}(hi.z, hi.w));
$ end
  }
}
]], e)

  return {
    source = e.prelude .. kernel,
    entry = e.entry,
    grid = { TG * TT, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = smem_bytes(problem, cfg),
  }
end

return {
  name = "vnm_dx",
  op = "vnm-dx",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
