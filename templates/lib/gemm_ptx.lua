-- lib/gemm_ptx.lua: the few inline-PTX wrappers the dense GEMM needs beyond lib/cuda.lua's
-- prelude (emitted after it, so sj_u32 is defined): shared stores for the element-wise loader of
-- unaligned operands and for staging the C tile, the 16-byte shared load and global store that
-- write the staged tile out, and an 8-byte global store for paired fp32 outputs.
local gemm_ptx = {}

gemm_ptx.source = [[
/* 16-byte store to shared memory (addr from sj_smem_addr, 16-byte aligned). */
__device__ __forceinline__ void sj_gemm_st_shared_v4(sj_u32 addr, sj_u32 a, sj_u32 b, sj_u32 c, sj_u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory"); }
/* Two adjacent fp32 values to global memory (p 8-byte aligned). */
__device__ __forceinline__ void sj_gemm_st_global_f32x2(float *p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1,%2};" :: "l"(p), "f"(a), "f"(b) : "memory"); }
__device__ __forceinline__ void sj_gemm_st_shared_b32(sj_u32 addr, sj_u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory"); }
__device__ __forceinline__ void sj_gemm_st_shared_f32x2(sj_u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1,%2};" :: "r"(addr), "f"(a), "f"(b) : "memory"); }
__device__ __forceinline__ void sj_gemm_ld_shared_v4(sj_u32 addr, sj_u32 &a, sj_u32 &b, sj_u32 &c, sj_u32 &d) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr) : "memory"); }
/* 16 bytes to global memory (p 16-byte aligned). */
__device__ __forceinline__ void sj_gemm_st_global_v4(void *p, sj_u32 a, sj_u32 b, sj_u32 c, sj_u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory"); }
]]

return gemm_ptx
