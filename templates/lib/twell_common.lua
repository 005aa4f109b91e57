-- lib/twell_common.lua: what the TwELL templates (twell_gate.lua, twell_ffn.lua) share: the
-- checks of a TwELL problem, small integer helpers, and the CUDA text of the format (entry
-- packing, the non-zero test) so both kernels read and write the same bits as
-- ops/twell/twell_format.h.
local M = {}

function M.cdiv(a, b) return (a + b - 1) // b end

function M.member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

function M.pow2_at_least(x)
  local p = 1
  while p < x do p = p * 2 end
  return p
end

-- Dynamic shared memory a block may opt into on the target (problem.SMEM, set by the generator).
function M.smem_limit(problem)
  if math.type(problem.SMEM) ~= "integer" then error("problem.SMEM (the target's shared memory) is missing", 2) end
  return problem.SMEM
end

-- Every config value named in params must be an integer.
function M.check_ints(params, cfg)
  for _, p in ipairs(params) do
    if math.type(cfg[p]) ~= "integer" then return false, p .. " is missing or not an integer" end
  end
  return true
end

-- The fields every TwELL problem needs; op is "twell-gate" or "twell-ffn".
function M.check_problem(problem, op)
  if problem.op ~= op then return false, "op is " .. tostring(problem.op) .. ", expected " .. op end
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "input dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if not (problem.T >= 1 and problem.C >= 1 and problem.C <= problem.T and problem.T <= 65536) then
    return false, string.format("TwELL T=%d, C=%d: expected 1 <= C <= T <= 65536", problem.T, problem.C)
  end
  return true
end

-- The checks every hybrid template starts with: its config's integers, the TwELL problem of op,
-- and a hybrid row as one tile (T equal to the problem field named cols: "N" or "DFF").
function M.check_hybrid(problem, op, params, cfg, cols)
  local ok, why = M.check_ints(params, cfg)
  if not ok then return false, why end
  ok, why = M.check_problem(problem, op)
  if not ok then return false, why end
  if problem.T ~= problem[cols] then
    return false, string.format("T=%d must equal %s=%d (a hybrid row is one tile)", problem.T, cols, problem[cols])
  end
  return true
end

-- CUDA helpers of the format: an entry is (local column << 16) | value bits; +0 and -0 are zeros.
M.format_c = [[
__device__ __forceinline__ unsigned sj_twell_entry(int col, unsigned short bits) {
  return ((unsigned)col << 16) | (unsigned)bits; }
__device__ __forceinline__ bool sj_twell_nz(unsigned short bits) { return (bits & 0x7fffu) != 0; }
]]

return M
