-- lib/vnm_common.lua: what the V:N:M conversion and training templates share (vnm_compress,
-- vnm_transpose, gmp_prune, vnm_dw, vnm_dx): the compressed layout's geometry, which must match
-- ops/vnm/vnm_format.c, and the problem checks of a 2:M pattern on 16-bit values.
local C = {}

function C.cdiv(a, b) return (a + b - 1) // b end

-- A rows x cols matrix compressed as V:2:MS: RB row blocks (RP rows padded), G column groups of
-- MS, padded to GP = 8 * KTP (KTP k tiles of 8 groups, even).
function C.layout(rows, cols, V, MS)
  local L = {}
  L.RB = C.cdiv(rows, V)
  L.RP = L.RB * V
  L.G = C.cdiv(cols, MS)
  local kt = C.cdiv(L.G, 8)
  L.KTP = kt + kt % 2
  L.GP = L.KTP * 8
  return L
end

-- The V:2:M pattern on f16/bf16 that every one of these kernels supports; rows = problem.M and
-- cols = problem.K. Returns true, or false and the reason.
function C.check_problem(problem)
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  local V = problem.V
  if V ~= 16 and V ~= 32 and V ~= 64 and V ~= 128 then return false, "V=" .. tostring(V) .. " must be 16, 32, 64 or 128" end
  if problem.NS ~= 2 then return false, "N of V:N:M must be 2" end
  if problem.MS < 4 or problem.MS > 128 then return false, "M of V:N:M must be 4..128" end
  if problem.M < 1 or problem.K < 1 then return false, "rows and cols must be positive" end
  return true
end

function C.member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- The problem of a training product over tokens (vnm_dw, vnm_dx: M x N = W, K = tokens, a multiple
-- of 8 so every token row is whole 16-byte chunks). Returns true, or false and the reason.
function C.check_training_problem(problem)
  if problem.dtype ~= "f16" and problem.dtype ~= "bf16" then
    return false, "input dtype must be f16 or bf16, got " .. tostring(problem.dtype)
  end
  if not C.member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "output dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  local V = problem.V
  if V ~= 16 and V ~= 32 and V ~= 64 and V ~= 128 then return false, "V=" .. tostring(V) .. " must be 16, 32, 64 or 128" end
  if problem.NS ~= 2 then return false, "N of V:N:M must be 2, got " .. tostring(problem.NS) end
  if problem.MS < 4 or problem.MS > 128 then return false, "M of V:N:M must be 4..128, got " .. tostring(problem.MS) end
  if problem.M < 1 or problem.N < 1 or problem.K < 1 then
    return false, string.format("sizes must be positive, got %dx%dx%d", problem.M, problem.N, problem.K)
  end
  if problem.K % 8 ~= 0 then
    return false, "K=" .. problem.K .. " (tokens) must be a multiple of 8 (16-byte token rows)"
  end
  return true
end

return C
