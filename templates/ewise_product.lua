-- ewise_product.lua: the element-wise step of a dense FFN in the benches' cuBLAS baseline
-- (tuner/cublas_baseline.c): C = A (.) B, or relu(A) (.) B, over M x N values of the dtype, as a
-- dense framework's bandwidth-bound kernel does it: 8 values per thread in 16-byte loads and
-- stores, fp32 arithmetic, one rounding. Not an op's kernel: the baseline builds it through the
-- request path under the gemm op and its own template name, as the reference kernel is. ABI:
-- (const T* A, const T* B, T* C, long long n, int relu), n = M * N, the buffers 16-byte aligned.
local emit = require "lib.emit"
local cuda = require "lib.cuda"

local PARAMS = { "THREADS" }

local function space(problem) return { THREADS = { 256 } } end

local function vectors(problem) return (problem.M * problem.N + 7) // 8 end

local function valid(problem, cfg)
  if cfg.THREADS ~= 256 then return false, "the element-wise product runs 256 threads per block only" end
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if problem.out_dtype ~= problem.dtype then
    return false, "the output dtype must be the input's (" .. problem.dtype .. "), got " .. tostring(problem.out_dtype)
  end
  if (vectors(problem) + cfg.THREADS - 1) // cfg.THREADS > 2147483647 then
    return false, problem.M .. " x " .. problem.N .. " values need more than 2^31-1 blocks"
  end
  return true
end

local function default(problem) return { THREADS = 256 } end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("ewise_product: invalid config: " .. why, 0) end
  local d = cuda.dtype(problem.dtype)
  local e = {
    T = d.ctype, to_f32 = d.to_f32, from_f32 = d.from_f32, pack2 = d.pack2, THREADS = cfg.THREADS,
    entry = string.format("sj_ewise_product_%s", problem.dtype),
  }
  local kernel = emit.render(here(), [[
struct __align__(16) sj_ewise_v8 { sj_u32 w[4]; };

__device__ __forceinline__ float sj_ewise_a(float a, int relu) { return relu && a < 0.0f ? 0.0f : a; }

extern "C" __global__ void __launch_bounds__(${THREADS}) ${entry}(const ${T}* A, const ${T}* B, ${T}* C, long long n, int relu)
{
  const long long v = (long long)blockIdx.x * ${THREADS} + threadIdx.x;
  const long long i0 = v * 8;
  if (i0 >= n) return;
  if (i0 + 8 <= n) {
    const sj_ewise_v8 a = ((const sj_ewise_v8*)A)[v], b = ((const sj_ewise_v8*)B)[v];
    sj_ewise_v8 c;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float a0 = sj_ewise_a(${to_f32}((${T})(a.w[j] & 0xffffu)), relu);
      const float a1 = sj_ewise_a(${to_f32}((${T})(a.w[j] >> 16)), relu);
      c.w[j] = ${pack2}(a0 * ${to_f32}((${T})(b.w[j] & 0xffffu)), a1 * ${to_f32}((${T})(b.w[j] >> 16)));
    }
    ((sj_ewise_v8*)C)[v] = c;
  } else { /* the last, partial vector */
    for (long long i = i0; i < n; i++) C[i] = ${from_f32}(sj_ewise_a(${to_f32}(A[i]), relu) * ${to_f32}(B[i]));
  }
}
]], e)
  return {
    source = cuda.prelude(problem.dtype) .. kernel,
    entry = e.entry,
    grid = { (vectors(problem) + cfg.THREADS - 1) // cfg.THREADS, 1, 1 },
    block = { cfg.THREADS, 1, 1 },
    shared = 0,
  }
end

return {
  name = "ewise_product",
  op = "gemm",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
}
