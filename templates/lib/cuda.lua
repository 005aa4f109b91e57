-- lib/cuda.lua: the self-contained CUDA prelude every template emits (no #include, so NVRTC
-- parses a few hundred lines instead of cuda_fp16.h): 16-bit storage types, fp32 conversions,
-- and inline-PTX wrappers for cp.async, ldmatrix, shared loads and mma.sync. Templates pick the
-- dtype-specific names through cuda.dtype(problem.dtype). cuda.hopper() adds the sm_90a pieces:
-- wgmma fences and descriptors, mbarriers, TMA (tensor and bulk) loads, named barriers and
-- register reallocation.
local cuda = {}

local prelude = [[
typedef unsigned short sj_f16;   /* IEEE half, stored as bits */
typedef unsigned short sj_bf16;  /* bfloat16, stored as bits */
typedef unsigned int   sj_u32;
/* A TMA descriptor as the runtime passes it (runtime/tensor_map.c): CUtensorMap's 128 bytes. */
struct __align__(64) sj_tensor_map { unsigned long long opaque[16]; };

__device__ __forceinline__ float sj_f16_to_f32(sj_f16 h) {
  float f; asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ sj_f16 sj_f32_to_f16(float f) {
  sj_f16 h; asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float sj_bf16_to_f32(sj_bf16 h) { return __uint_as_float(((sj_u32)h) << 16); }
__device__ __forceinline__ sj_bf16 sj_f32_to_bf16(float f) {
  sj_bf16 h; asm("{ .reg .b16 t; cvt.rn.bf16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float sj_f32_to_f32(float f) { return f; }
/* Two fp32 -> packed pair (low half = a). */
__device__ __forceinline__ sj_u32 sj_pack_f16x2(float a, float b) {
  sj_u32 r; asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ sj_u32 sj_pack_bf16x2(float a, float b) {
  sj_u32 r; asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(a), "f"(b)); return r; }

__device__ __forceinline__ sj_u32 sj_smem_addr(const void *p) {
  return (sj_u32)__cvta_generic_to_shared(p); }
/* 16-byte async copy global -> shared; src_bytes < 16 zero-fills the rest (ragged edges). */
__device__ __forceinline__ void sj_cp_async16(sj_u32 dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes)); }
__device__ __forceinline__ void sj_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void sj_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

__device__ __forceinline__ void sj_ldmatrix_x4(sj_u32 r[4], sj_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); }
__device__ __forceinline__ void sj_ldmatrix_x4_trans(sj_u32 r[4], sj_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); }
__device__ __forceinline__ void sj_ldmatrix_x2_trans(sj_u32 r[2], sj_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(addr)); }
/* 4, 8 or 16 bytes of shared memory per lane (volatile, like ldmatrix, so they stay after the
 * barrier wait that makes the bytes visible). */
__device__ __forceinline__ sj_u32 sj_lds32(sj_u32 addr) {
  sj_u32 r; asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r) : "r"(addr)); return r; }
__device__ __forceinline__ void sj_lds64(sj_u32 r[2], sj_u32 addr) {
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr)); }
__device__ __forceinline__ void sj_lds128(sj_u32 r[4], sj_u32 addr) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); }
]]

local mma_f16 = [[
/* D = A.B + D, m16n8k16, A row-major fragment (4 regs), B col fragment (2 regs), fp32 acc. */
__device__ __forceinline__ void sj_mma_16816(float d[4], const sj_u32 a[4], const sj_u32 b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.@T@.@T@.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }
]]

local hopper = [[
__device__ __forceinline__ void sj_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void sj_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void sj_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void sj_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* K-major operand, 128-byte swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart. */
__device__ __forceinline__ unsigned long long sj_desc_sw128(sj_u32 addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62); }
__device__ __forceinline__ void sj_mbar_init(sj_u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory"); }
/* Makes initialised barriers visible to the async proxy (TMA) before anyone uses them. */
__device__ __forceinline__ void sj_mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void sj_mbar_arrive(sj_u32 bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" :: "r"(bar) : "memory"); }
/* Arrives once and announces the bytes the TMA loads of this phase will complete. */
__device__ __forceinline__ void sj_mbar_expect_tx(sj_u32 bar, sj_u32 bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" :: "r"(bar), "r"(bytes) : "memory"); }
__device__ __forceinline__ void sj_mbar_wait(sj_u32 bar, sj_u32 parity) {
  sj_u32 done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory"); }
/* One box (runtime/tensor_map.c) at column x, row y of the descriptor's matrix into dst. */
__device__ __forceinline__ void sj_tma_load_2d(sj_u32 dst, const sj_tensor_map* map, int x, int y, sj_u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"((unsigned long long)map), "r"(x), "r"(y), "r"(bar) : "memory"); }
/* The same box into the same offset of every CTA in cta_mask, signalling each one's barrier. */
__device__ __forceinline__ void sj_tma_load_2d_multicast(sj_u32 dst, const sj_tensor_map* map, int x, int y, sj_u32 bar,
                                                         unsigned short cta_mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"((unsigned long long)map), "r"(x), "r"(y), "r"(bar), "h"(cta_mask) : "memory"); }
/* Arrives on the barrier at the same offset in CTA cta of the cluster. */
__device__ __forceinline__ void sj_mbar_arrive_cta(sj_u32 bar, sj_u32 cta) {
  asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [ra]; }"
               :: "r"(bar), "r"(cta) : "memory"); }
/* A contiguous copy of bytes (a multiple of 16, both addresses 16-byte aligned) into dst,
 * completing that many bytes of bar's transaction. */
__device__ __forceinline__ void sj_bulk_load(sj_u32 dst, const void* src, sj_u32 bytes, sj_u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory"); }
/* Barrier id among count threads (a multiple of 32); id 0 is __syncthreads'. */
__device__ __forceinline__ void sj_named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory"); }
/* Every thread of every CTA in the cluster. */
__device__ __forceinline__ void sj_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
template <int R> __device__ __forceinline__ void sj_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R)); }
template <int R> __device__ __forceinline__ void sj_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R)); }
]]

local dtypes = {
  f16  = { ctype = "sj_f16",  ptx = "f16",  to_f32 = "sj_f16_to_f32",  from_f32 = "sj_f32_to_f16",
           pack2 = "sj_pack_f16x2",  size = 2 },
  bf16 = { ctype = "sj_bf16", ptx = "bf16", to_f32 = "sj_bf16_to_f32", from_f32 = "sj_f32_to_bf16",
           pack2 = "sj_pack_bf16x2", size = 2 },
  f32  = { ctype = "float",   ptx = "f32",  to_f32 = "sj_f32_to_f32",  from_f32 = "sj_f32_to_f32",
           size = 4 },
}

-- Names and sizes for one dtype ("f16", "bf16", "f32"); errors on anything else.
function cuda.dtype(name)
  local d = dtypes[name]
  if not d then error("unknown dtype '" .. tostring(name) .. "'", 2) end
  return d
end

-- The prelude plus the mma.sync wrapper for the input dtype (f16 or bf16).
function cuda.prelude(in_dtype)
  local d = cuda.dtype(in_dtype)
  if d.size ~= 2 then error("mma inputs must be f16 or bf16, got " .. in_dtype, 2) end
  return prelude .. (mma_f16:gsub("@T@", d.ptx))
end

-- The sm_90a helpers (wgmma synchronisation and descriptors, mbarriers, TMA, setmaxnreg).
function cuda.hopper() return hopper end

-- The "{%0,...}" list and the "+f" constraints of a 64 x BN fp32 accumulator d[BN/8][4]: one
-- register per thread for every 2 columns (the wgmma D fragment).
local function accumulator_operands(BN)
  local regs, cons = {}, {}
  for i = 0, BN // 2 - 1 do
    regs[#regs + 1] = "%" .. i
    cons[#cons + 1] = string.format('"+f"(d[%d][%d])', i // 4, i % 4)
  end
  return table.concat(regs, ","), table.concat(cons, ", ")
end

-- The wgmma instruction of one warpgroup, both operands K-major in shared memory (128-byte
-- swizzle descriptors): D(64 x BN, fp32) += A(desc) . B(desc), accumulating unless acc is 0.
-- dt: cuda.dtype of the inputs. Used by the gates (twell_gate.lua, hybrid_gate.lua) and vnm_dw.lua.
function cuda.wgmma(dt, BN)
  local n = BN // 2
  local regs, cons = accumulator_operands(BN)
  return string.format([[
__device__ __forceinline__ void sj_wgmma_n%d(float d[%d][4], unsigned long long da, unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %%%d, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 0;\n}\n"
    : %s
    : "l"(da), "l"(db), "r"(acc)); }
]], BN, BN // 8, n + 2, BN, dt.ptx, dt.ptx, regs, n, n + 1, cons)
end

-- The sparse wgmma of one warpgroup (PTX ISA 9.7.15.6, sm_90a): D(64 x BN, fp32) += A . B with
-- A (64 x 32, 2:4 inside, compressed 64 x 16) from registers, four per thread in the fragment
-- order of mma.sp m16n8k32 (warp w%4 of the warpgroup supplies rows 16w..16w+15), e the
-- metadata word and SEL the sparsity selector (0: lanes t = 0, 1 of a quad supply it, 1: t = 2,
-- 3), and B (32 x BN) N-major in shared memory (imm-trans-b = 1): row-major k x n as 64-column
-- panels of 128-byte rows under the 128-byte swizzle, described by sj_desc_sw128_mn. Accumulates
-- unless acc is 0. dt: cuda.dtype of the inputs. Used by lib/vnm_spmm_wgmma.lua.
function cuda.wgmma_sp(dt, BN)
  local n = BN // 2
  local regs, cons = accumulator_operands(BN)
  return string.format([[
/* N-major operand under the 128-byte swizzle: 8-row (k) atoms of 128-byte rows 1024 bytes apart
   (the stride byte offset), 64-column panels panel_bytes apart (the leading byte offset). */
__device__ __forceinline__ unsigned long long sj_desc_sw128_mn(sj_u32 addr, sj_u32 panel_bytes) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(panel_bytes >> 4) << 16) | (64ull << 32) | (1ull << 62); }
template <int SEL>
__device__ __forceinline__ void sj_wgmma_sp_n%d(float d[%d][4], const sj_u32 a[4], unsigned long long db, sj_u32 e, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %%%d, 0;\n"
    "wgmma.mma_async.sp.sync.aligned.m64n%dk32.f32.%s.%s {%s}, {%%%d,%%%d,%%%d,%%%d}, %%%d, %%%d, %%%d, p, 1, 1, 1;\n}\n"
    : %s
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(e), "n"(SEL), "r"(acc)); }
]], BN, BN // 8, n + 7, BN, dt.ptx, dt.ptx, regs, n, n + 1, n + 2, n + 3, n + 4, n + 5, n + 6, cons)
end

return cuda
