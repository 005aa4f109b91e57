-- gemm_reference.lua: the tuner's correctness gate for GEMM-shaped ops. Deliberately simple and
-- obviously correct, and sharing no code path with the tuned kernels beyond the dtype
-- conversions: one thread per output element walks the whole K row/column in fp32 and writes
-- C[row][col] once. No tiling, no shared memory, no tensor cores. Same ABI as gemm:
-- (const T* A, const T* B, OutT* C, int M, int N, int K), row-major, sizes read at run time.
local emit = require "lib.emit"
local cuda = require "lib.cuda"

local PARAMS = { "TX", "TY" }

local function space(problem) return { TX = { 32 }, TY = { 8 } } end

local function valid(problem, cfg)
  if cfg.TX ~= 32 or cfg.TY ~= 8 then return false, "the reference runs 32 x 8 thread blocks only" end
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "input dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if problem.out_dtype ~= "f16" and problem.out_dtype ~= "bf16" and problem.out_dtype ~= "f32" then
    return false, "output dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if (problem.M + cfg.TY - 1) // cfg.TY > 65535 then
    return false, "M=" .. problem.M .. " needs more than 65535 blocks along grid y"
  end
  return true
end

local function default(problem) return { TX = 32, TY = 8 } end

local function flops(problem) return 2.0 * problem.M * problem.N * problem.K end

local function generate(problem, cfg)
  local ok, why = valid(problem, cfg)
  if not ok then error("gemm_reference: invalid config: " .. why, 0) end
  local din, dout = cuda.dtype(problem.dtype), cuda.dtype(problem.out_dtype)
  local e = {
    T = din.ctype, OT = dout.ctype, to_f32 = din.to_f32, from_f32 = dout.from_f32,
    TX = cfg.TX, TY = cfg.TY,
    entry = string.format("sj_gemm_reference_%s_%s", problem.dtype, problem.out_dtype),
  }
  local kernel = emit.render(here(), [[
extern "C" __global__ void ${entry}(const ${T}* A, const ${T}* B, ${OT}* C, int M, int N, int K)
{
  const long long row = (long long)blockIdx.y * ${TY} + threadIdx.y;
  const long long col = (long long)blockIdx.x * ${TX} + threadIdx.x;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (long long p = 0; p < K; p++)
    acc += ${to_f32}(A[row * K + p]) * ${to_f32}(B[p * N + col]);
  C[row * N + col] = ${from_f32}(acc);
}
]], e)
  return {
    source = cuda.prelude(problem.dtype) .. kernel,
    entry = e.entry,
    grid = { (problem.N + cfg.TX - 1) // cfg.TX, (problem.M + cfg.TY - 1) // cfg.TY, 1 },
    block = { cfg.TX, cfg.TY, 1 },
    shared = 0,
  }
end

return {
  name = "gemm_reference",
  op = "gemm",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  generate = generate,
  flops = flops,
}
