-- lib/vnm_spmm_wgmma.lua: the WG=1 algorithm of templates/vnm_spmm.lua, the V:N:M SpMM on
-- sm_90a's sparse warpgroup MMA (wgmma.mma_async.sp m64nNk32, A from registers, B from shared
-- memory), with the op's kernel ABI, compressed format and epilogue unchanged.
--
-- The compressed A feeds wgmma.sp as it is stored (ops/vnm/vnm_format.h), no shuffle (PTX ISA
-- 9.7.15.6.2, "Matrix fragments for warpgroup-level multiply-accumulate operation with sparse
-- matrix A"): warp w%4 of a warpgroup supplies the sparsity information of rows 16w..16w+15;
-- 9.7.15.6.2.1 gives the m64nNk32 .f16/.bf16 A fragment in registers as four .b32 of two kept
-- values of a 4-wide chunk each (Figure 175), per warp the layout of mma.sp m16n8k32's A (CUTLASS's
-- GMMA::ALayout_64x32, "register source layout for 8-bit (sparse 16-bit) value types": row
-- 16w + g + 8*(reg&1), chunk t + 4*(reg>>1) for lane 4g+t), and the metadata layout of Figure 176
-- is the very figure of mma.sp m16n8k32 (sparse-mma-metadata-16832-f16bf16), with the same
-- sparsity selector (9.7.15.6.3: 0, threads T0/T1 of a quad, or 1, T2/T3). So one 16-byte load
-- per lane of a 16 x 32 fragment's 512 bytes and one metadata word per lane are a warp's part of
-- a m64nNk32 A operand, exactly as they are mma.sp's.
--
-- A CTA is BM/64 warpgroups (BM = 64 or 128 rows, V >= 64: a warpgroup's rows lie in one V block)
-- and BN columns; each warpgroup multiplies its 64 rows by the whole BN with one wgmma.sp
-- m64n<BN>k32 per 32 gathered k (WM=64, WN=BN name that tile). Every thread loads: a STAGES-deep
-- cp.async ring of BK gathered k holds per stage the gathered B rows of each V block (row-major
-- k x n, stored as 64-column panels of BK 128-byte rows with the 16-byte chunks XOR row%8, i.e.
-- wgmma's N-major 128-byte swizzle, so imm-trans-b = 1 reads B as it is in global memory), the A
-- values and the metadata; the gathered row indices travel STAGES-1 stages ahead through their own
-- ring, as in the mma.sync path. Per stage a warp loads its A fragments and metadata into one of
-- two register sets (alternating stages, so the set a still running wgmma reads is never
-- rewritten), issues BK/32 wgmma.sp, commits, and waits until only this stage's group is in
-- flight: the previous stage's ring slot is then free for the copies of STAGES-1 stages ahead.
local emit = require "lib.emit"
local cuda = require "lib.cuda"
local vnm = require "lib.vnm_common"

local W = {}

-- Tiles in order of preference per V: { BM, BN, STAGES }. V = 128: two warpgroups share one
-- gathered B tile (the gathered B, read once per 64 or 128 rows, is most of the L2 traffic);
-- V = 64: one warpgroup per CTA, two CTAs an SM at BN = 256.
local TILES = {
  [128] = { { 128, 256, 4 }, { 128, 128, 4 }, { 64, 256, 3 }, { 64, 128, 4 }, { 64, 64, 4 } },
  [64]  = { { 64, 256, 3 }, { 64, 128, 4 }, { 128, 128, 4 }, { 64, 64, 4 } },
}

local function b_tiles(problem, cfg) return math.max(1, cfg.BM // problem.V) end

-- The ring: STAGES x (B tiles, A values, metadata), the index ring (gather only: 2*STAGES slots
-- of NBT x BK ints) and 1024 bytes to align the ring by hand (wgmma's swizzle atoms use absolute
-- shared-memory address bits).
local function regions(problem, cfg)
  local r = {}
  r.B_TILE = cfg.BK * cfg.BN * 2
  r.B_STAGE = b_tiles(problem, cfg) * r.B_TILE
  r.A_STAGE = cfg.BM * cfg.BK
  r.E_STAGE = cfg.BM * cfg.BK // 8
  r.A_OFF = cfg.STAGES * r.B_STAGE
  r.E_OFF = r.A_OFF + cfg.STAGES * r.A_STAGE
  r.IDX_OFF = r.E_OFF + cfg.STAGES * r.E_STAGE
  r.IDX_SLOT = b_tiles(problem, cfg) * cfg.BK * 4
  r.bytes = r.IDX_OFF + (problem.MS == 4 and 0 or 2 * cfg.STAGES * r.IDX_SLOT) + 1024
  return r
end

function W.smem_bytes(problem, cfg) return regions(problem, cfg).bytes end

-- The checks of WG=1 beyond those the template makes of every config (tile edges, shared memory).
function W.valid(problem, cfg)
  if problem.arch ~= "sm_90a" then return false, "WG=1 (wgmma.sp) needs sm_90a, the target is " .. tostring(problem.arch) end
  if problem.V < 64 then
    return false, string.format("WG=1 needs V >= 64 (a warpgroup's 64 rows in one V block), V=%d", problem.V)
  end
  if cfg.BM ~= 64 and cfg.BM ~= 128 then
    return false, "WG=1 needs BM=64 or 128 (one warpgroup per 64 rows, at most two), got BM=" .. cfg.BM
  end
  if cfg.WM ~= 64 or cfg.WN ~= cfg.BN then
    return false, string.format("WG=1 takes WM=64 and WN=BN=%d (the warpgroup's tile), got WM=%d, WN=%d", cfg.BN, cfg.WM, cfg.WN)
  end
  return true
end

-- The first tile of TILES[V] that valid (the template's) accepts, as a full WG=1 config; nil when none.
function W.first_valid(problem, valid)
  local L = vnm.layout(problem.M, problem.K, problem.V, problem.MS)
  for _, t in ipairs(TILES[problem.V] or {}) do
    local cfg = { BM = t[1], BN = t[2], BK = 64, WM = 64, WN = t[2], STAGES = math.min(t[3], L.GP * 4 // 64 + 1),
                  GROUP_M = 32, BMAP = problem.MS == 4 and 0 or 1, WG = 1 }
    if valid(problem, cfg) then return cfg end
  end
end

function W.generate(problem, cfg)
  local M, N, K, V, MS = problem.M, problem.N, problem.K, problem.V, problem.MS
  local BM, BN, BK, STAGES = cfg.BM, cfg.BN, cfg.BK, cfg.STAGES
  local L = vnm.layout(M, K, V, MS)
  local MT, KG = L.RP // 16, L.GP * 4
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local THREADS = BM // 64 * 128
  local NBT = b_tiles(problem, cfg)
  local TM, TN = vnm.cdiv(L.RP, BM), vnm.cdiv(N, BN)
  local CPR = BN // 8
  local RSB = THREADS // CPR
  local IT_B = NBT * BK // RSB
  local r = regions(problem, cfg)
  local e = {
    M = M, N = N, K = K, V = V, BM = BM, BN = BN, BK = BK, STAGES = STAGES, BMAP = cfg.BMAP,
    T = din.ctype, OT = dout.ctype, THREADS = THREADS, NBT = NBT, MT = MT, KG = KG, RB = L.RB,
    TM = TM, TN = TN, GROUP_M = math.min(cfg.GROUP_M, TM), NKS = KG // BK, KSTEPS = BK // 32, PAIRS = BK // 64,
    CPR = CPR, RSB = RSB, IT_B = IT_B, IVW = math.min(4, IT_B), PANEL = BK * 128,
    A_RUN = BK * 16, A_TILE = L.KTP * 512, E_RUN = BK * 2, E_TILE = L.KTP * 64,
    IC = NBT * BK // 4,
    gather = MS ~= 4,
    b_cols = N % BN ~= 0,
    rb_tail = NBT > 1 and L.RB % NBT ~= 0,
    mt_tail = L.RP % BM ~= 0,
    row_guard = M ~= L.RP,
    k_tail = KG ~= K,
    out_f32 = problem.out_dtype == "f32", to_f32_out = dout.to_f32, pack_out = dout.pack2,
  }
  for k, v in pairs(r) do e[k] = v end
  e.entry = string.format("sj_vnm_spmm_%s_%s_v%d_m%d_bm%d_bn%d_bk%d_s%d_g%d_b%d_wg",
                          problem.dtype, problem.out_dtype, V, MS, BM, BN, BK, STAGES, e.GROUP_M, cfg.BMAP)
  local big = math.max(MT * L.KTP * 512, K * N, M * N, L.RB * KG) >= 2147483647
  e.IDX = big and "long long" or "int"

  local kernel = emit.render(here(), [[
typedef ${T} InT;
typedef ${OT} OutT;

/* p[0], p[1] = alpha * (v0, v1) + beta * (p[0], p[1]); with beta 0 the old values are not read. */
__device__ __forceinline__ void sj_spmm_put2(OutT* p, float v0, float v1, float alpha, float beta) {
  v0 *= alpha;
  v1 *= alpha;
$ if out_f32 then
  if (beta != 0.0f) { const float2 old = *(const float2*)p; v0 += beta * old.x; v1 += beta * old.y; }
  *(float2*)p = make_float2(v0, v1);
$ else
  if (beta != 0.0f) {
    const sj_u32 old = *(const sj_u32*)p;
    v0 += beta * ${to_f32_out}((OutT)(old & 0xffffu));
    v1 += beta * ${to_f32_out}((OutT)(old >> 16));
  }
  *(sj_u32*)p = ${pack_out}(v0, v1);
$ end
}

/* Byte offset of 16-byte chunk c (columns 8c..8c+7) of row r in a B tile: 64-column panels of
   BK rows of 128 bytes, the chunk XOR r%8 inside its panel (the N-major 128-byte swizzle). */
__device__ __forceinline__ sj_u32 sj_b_at(int r, int c) {
  return (sj_u32)((c >> 3) * ${PANEL} + r * 128 + (((c & 7) ^ (r & 7)) << 4)); }

/* Stage ks of the A values or the metadata: for each of the CTA's fragment tiles the RUN bytes
   at (mt0 + tile) * TILE + ks * RUN, side by side at dst; tiles past the padded rows read zeros. */
template <int RUN, long long TILE>
__device__ __forceinline__ void sj_copy_runs(sj_u32 dst, const unsigned char* src, int mt0, int ks, int tid) {
  constexpr int PER_TILE = RUN / 16;
#pragma unroll
  for (int i = 0; i < (${BM // 16} * PER_TILE + ${THREADS} - 1) / ${THREADS}; ++i) {
    const int c = tid + i * ${THREADS};
    if (${BM // 16} * PER_TILE % ${THREADS} != 0 && c >= ${BM // 16} * PER_TILE) break;
    const int tile = c / PER_TILE;
$ if mt_tail then
    const bool ok = mt0 + tile < ${MT};
$ else
    const bool ok = true;
$ end
    const ${IDX} at = (${IDX})(mt0 + tile) * TILE + (${IDX})ks * RUN + (c % PER_TILE) * 16;
    sj_cp_async16(dst + c * 16, ok ? (const void*)(src + at) : (const void*)src, ok ? 16 : 0);
  }
}

$ -- The op's ABI (templates/vnm_spmm.lua); shape, V:N:M and config are constants.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(const sj_u32* __restrict__ A_values,
    const sj_u32* __restrict__ A_meta, const int* __restrict__ B_rows, const InT* __restrict__ B,
    OutT* __restrict__ C, int M_arg, int N_arg, int K_arg, float alpha, float beta)
{
  (void)M_arg; (void)N_arg; (void)K_arg;
$ if not gather then
  (void)B_rows;
$ end
  extern __shared__ __align__(128) unsigned char sj_smem[];
  const sj_u32 ring = sj_smem_addr(sj_smem) + ((1024u - (sj_smem_addr(sj_smem) & 1023u)) & 1023u);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;

  /* GROUP_M tile rows walk the tile columns together: a wave of CTAs shares A and B in L2. */
  const int per_group = ${GROUP_M * TN};
  const int first_m = (int)blockIdx.x / per_group * ${GROUP_M}, in_group = (int)blockIdx.x % per_group;
  const int rows_here = ${TM} - first_m < ${GROUP_M} ? ${TM} - first_m : ${GROUP_M};
  const int row0 = (first_m + in_group % rows_here) * ${BM}, col0 = in_group / rows_here * ${BN};
  const int mt0 = row0 / 16, rb0 = row0 / ${V};

  /* B copies: thread tid moves chunk b_c of IT_B of the stage's NBT x BK gathered rows, BMAP 1
     the run b_r*IT_B .. (its indices in vector loads), BMAP 0 the rows b_r + i*RSB. */
  const int b_c = tid % ${CPR}, b_r = tid / ${CPR};
$ if b_cols then
  const bool b_in = col0 + b_c * 8 < ${N};
$ end
  const InT* const b_src = B + col0 + b_c * 8;
$ if gather then
  /* Index slot j % (2*STAGES) holds the NBT x BK gathered B rows of stage j (-1: a zero row). */
  const int* const index_g = B_rows + (${IDX})rb0 * ${KG};
  const sj_u32 index_ring = ring + ${IDX_OFF};
  auto fetch_index = [&](int j) {
    if (j >= ${NKS}) return;
#pragma unroll
    for (int i = 0; i < (${IC} + ${THREADS} - 1) / ${THREADS}; ++i) {
      const int c = tid + i * ${THREADS};
      if (${IC} % ${THREADS} != 0 && c >= ${IC}) break;
      const int tile = c / ${BK // 4};
$   if rb_tail then
      const bool ok = rb0 + tile < ${RB};
$   else
      const bool ok = true;
$   end
      const int* const src = index_g + (${IDX})tile * ${KG} + j * ${BK} + (c % ${BK // 4}) * 4;
      sj_cp_async16(index_ring + (j % ${2 * STAGES}) * ${IDX_SLOT} + c * 16, ok ? (const void*)src : (const void*)B_rows,
                    ok ? 16 : 0);
    }
  };
$ end

  /* Copies k stage ks (gathered columns ks*BK ..) into ring slot `slot`. */
  auto load_stage = [&](int ks, int slot) {
$ if gather then
    /* This thread's row indices first, then its copies (each load is asm volatile: interleaved,
       every copy would wait for its own index). */
    int src_row[${IT_B}];
    const sj_u32 idx_at = index_ring + (ks % ${2 * STAGES}) * ${IDX_SLOT};
$   -- BMAP 1: a run of IT_B indices, IVW a load; BMAP 0: one a load, RSB rows apart
$   local width = BMAP == 1 and IVW or 1
$   for v = 0, IT_B // width - 1 do
$     local at = BMAP == 1 and string.format("idx_at + b_r * %d + %d", IT_B * 4, v * width * 4)
$                          or string.format("idx_at + (b_r + %d) * 4", v * RSB)
$     if width == 1 then
    src_row[${v}] = (int)sj_lds32(${at});
$     else
    sj_lds${width * 32}((sj_u32*)src_row + ${v * width}, ${at});
$     end
$   end
$ end
    const sj_u32 b_dst = ring + slot * ${B_STAGE};
#pragma unroll
    for (int i = 0; i < ${IT_B}; ++i) {
      const int fr = ${BMAP == 1 and "b_r * " .. IT_B .. " + i" or "b_r + i * " .. RSB};   /* the i-th row this thread copies */
$ if gather then
      const int row = src_row[i];
      bool ok = row >= 0;
$ elseif k_tail then
      const int row = ks * ${BK} + fr % ${BK};
      bool ok = row < ${K};
$ else
      const int row = ks * ${BK} + fr % ${BK};
      bool ok = true;
$ end
$ if b_cols then
      ok = ok && b_in;
$ end
      sj_cp_async16(b_dst + fr / ${BK} * ${B_TILE} + sj_b_at(fr % ${BK}, b_c),
                    ok ? (const void*)(b_src + (${IDX})row * ${N}) : (const void*)B, ok ? 16 : 0);
    }
$ if gather then
    fetch_index(ks + ${STAGES - 1});
$ end
    sj_copy_runs<${A_RUN}, ${A_TILE}>(ring + ${A_OFF} + slot * ${A_STAGE}, (const unsigned char*)A_values, mt0, ks, tid);
    sj_copy_runs<${E_RUN}, ${E_TILE}>(ring + ${E_OFF} + slot * ${E_STAGE}, (const unsigned char*)A_meta, mt0, ks, tid);
  };

  /* Warp warp%4 of warpgroup wg holds rows 16*(warp%4).. of the warpgroup's 64: local fragment
     tile 4wg + warp%4; the warpgroup multiplies the B tile of its V block. */
  const int frag = 4 * wg + (warp & 3);
  const sj_u32 a_at = ring + ${A_OFF} + frag * ${A_RUN} + lane * 16;
  const sj_u32 e_at = ring + ${E_OFF} + frag * ${E_RUN} + lane * 4;
  const sj_u32 b_at = ring + (64 * wg / ${V}) * ${B_TILE};
$ if mt_tail then
  /* A warpgroup past the padded rows (the last tile row, V=64, BM=128) only loads. */
  const bool active = mt0 + 4 * wg < ${MT};
$ else
  const bool active = true;
$ end

  float acc[${BN // 8}][4];
#pragma unroll
  for (int j = 0; j < ${BN // 8}; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  sj_u32 af[2][${KSTEPS}][4], ef[2][${PAIRS}];

  /* Stages 0 .. STAGES-2 in flight, a commit group each (empty past the last stage); with a
     gather, their row indices land first (load_stage(ks) reads those of ks and fetches those of
     ks + STAGES - 1). */
$ if gather then
  for (int j = 0; j < ${STAGES - 1}; ++j) fetch_index(j);
  sj_cp_async_commit(); sj_cp_async_wait<0>();
  __syncthreads();
$ end
  for (int st = 0; st < ${STAGES - 1}; ++st, sj_cp_async_commit())
    if (st < ${NKS}) load_stage(st, st);

  /* Two stages an iteration, register set 0 then 1. */
#pragma unroll 1
  for (int ks = 0; ks < ${NKS}; ks += 2) {
$ for set = 0, 1 do
$   if set == 1 and NKS % 2 == 1 then
    if (ks + 1 == ${NKS}) break;
$   end
    {
      const int k = ks + ${set}, slot = k % ${STAGES};
      sj_cp_async_wait<${STAGES - 2}>();
      sj_fence_proxy_async();        /* this thread's landed copies, visible to wgmma (the async proxy) */
      __syncthreads();
      if (active) {
#pragma unroll
        for (int j = 0; j < ${KSTEPS}; ++j) sj_lds128(af[${set}][j], a_at + slot * ${A_STAGE} + j * 512);
#pragma unroll
        for (int q = 0; q < ${PAIRS}; ++q) ef[${set}][q] = sj_lds32(e_at + slot * ${E_STAGE} + q * 128);
        sj_wgmma_fence();
$   for j = 0, BK // 32 - 1 do
        sj_wgmma_sp_n${BN}<${j % 2}>(acc, af[${set}][${j}], sj_desc_sw128_mn(b_at + slot * ${B_STAGE} + ${j * 4096}, ${PANEL}),
                              ef[${set}][${j // 2}], 1);
$   end
        sj_wgmma_commit();
        sj_wgmma_wait<1>();          /* stage k-1's wgmmas are done: its registers and slot are free ... */
      }
      __syncthreads();               /* ... in every warpgroup */
      if (k + ${STAGES - 1} < ${NKS}) load_stage(k + ${STAGES - 1}, (k + ${STAGES - 1}) % ${STAGES});
      sj_cp_async_commit();
    }
$ end
  }
  sj_wgmma_wait<0>();
  sj_cp_async_wait<0>();
  if (!active) return;

  /* Accumulator j holds rows 16*(warp%4) + g and + 8 of the warpgroup's 64, columns 8j + 2q, + 1. */
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 64 * wg + 16 * (warp & 3) + 8 * h + g;
$ if row_guard then
    if (row >= ${M}) continue;
$ end
    OutT* const c_at = C + (${IDX})row * ${N} + col0 + 2 * q;
#pragma unroll
    for (int j = 0; j < ${BN // 8}; ++j) {
$ if b_cols then
      if (col0 + 8 * j + 2 * q >= ${N}) break;
$ end
      sj_spmm_put2(c_at + 8 * j, acc[j][2 * h], acc[j][2 * h + 1], alpha, beta);
    }
  }
}
]], e)

  return {
    source = cuda.prelude(problem.dtype) .. cuda.hopper() .. cuda.wgmma_sp(din, BN) .. kernel,
    entry = e.entry,
    grid = { TM * TN, 1, 1 },
    block = { THREADS, 1, 1 },
    shared = r.bytes,
  }
end

return W
