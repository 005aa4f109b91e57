-- lib/mma_sp.lua: inline-PTX pieces of the V:N:M SpMM beyond lib/cuda.lua's prelude (emitted
-- after it, so sj_u32 is defined): the sparse tensor-core MMA m16n8k32 with ordered metadata
-- (PTX ISA 8.5+, sm_80 and later) and a paired fp32 global store; the 16/8/4-byte shared loads
-- of its pre-arranged fragments are lib/cuda.lua's.
--
-- Fragments of mma.sp::ordered_metadata m16n8k32 .f16/.bf16 (PTX ISA, "Matrix fragments for
-- sparse mma.m16n8k32 with .f16/.bf16"), lane L, g = L >> 2, t = L & 3:
--   A (16 x 32 logical, 16 x 16 stored): 4 registers of 2 values; reg 0: row g, 4-wide chunk t;
--     reg 1: row g+8, chunk t; reg 2: row g, chunk t+4; reg 3: row g+8, chunk t+4. The low
--     half of a register is the kept element with the smaller index.
--   B (32 x 8): 4 registers; reg r holds k = 8r + 2t and 8r + 2t + 1 of column g, which is what
--     ldmatrix.x4.trans returns when lane L points at k row L of a row-major k x n tile.
--   C/D: c0,c1 row g, columns 2t, 2t+1; c2,c3 row g+8.
--   metadata: with sparsity selector s, lanes with t = 2s and t = 2s+1 supply it; lane t = 2s
--     covers chunks 0..3, lane t = 2s+1 chunks 4..7; bits [4j+3:4j] hold the two 2-bit indices
--     (ascending, lower bits first) of chunk j (+4) of row g, bits [16+4j+3:16+4j] of row g+8.
local mma_sp = {}

local source = [[
/* D = A.B + D on sparse tensor cores; e: metadata word; SEL: sparsity selector (0 or 1). */
template <int SEL>
__device__ __forceinline__ void sj_mma_sp_16832(float d[4], const sj_u32 a[4], const sj_u32 b[4], sj_u32 e) {
  asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.@T@.@T@.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, %13;"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                 "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e), "n"(SEL)); }
/* Two adjacent fp32 values to global memory (p 8-byte aligned). */
__device__ __forceinline__ void sj_stg_f32x2(float *p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1,%2};" :: "l"(p), "f"(a), "f"(b) : "memory"); }
]]

-- The wrappers for input dtype "f16" or "bf16".
function mma_sp.source(dtype)
  if dtype ~= "f16" and dtype ~= "bf16" then
    error("mma.sp inputs must be f16 or bf16, got " .. tostring(dtype), 2)
  end
  return (source:gsub("@T@", dtype))
end

return mma_sp
