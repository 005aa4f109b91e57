-- hybrid_ffn_dx.lua: the backward of the ReLU FFN block through its activations, over the hybrid
-- matrix the forward stored (docs/training.md): per active pair (t, j) the sampled
-- dh = dY[t] . Wd[j], du = dh a and dg = dh u (relu' = 1 there), kept in fp32 at the pair's
-- position for the weight gradients, and the input gradient dX[t] = sum_j dg WgT[j] + du WuT[j]
-- over the active units. Nothing visits an inactive pair.
--
-- Problem: op "hybrid-ffn-dx", M = tokens, N = K = d_model, DFF = d_ff, T = DFF, C = W,
-- out_dtype = dX's.
-- Kernel ABI: (const T* dY, const unsigned short* values, const unsigned short* columns,
--              const int* nnz, const int* slot, const unsigned short* backup,
--              const unsigned short* u_values, const unsigned short* u_backup, const T* WgT,
--              const T* WuT, const T* Wd, OutT* dX, float* dg_values, float* dg_backup,
--              float* du_values, float* du_backup, int R);
-- dY and dX M x D, WgT, WuT, Wd d_ff x D, row-major, D % 8 == 0; the hybrid arrays of a and u as
-- hybrid-ffn-fwd left them; dg_* and du_* (M x W and R x d_ff floats) receive dg and du at the
-- active pairs' positions only. The kernel: lib/hybrid_rows.lua, mode "dx"; SPLIT > 0 is its
-- L2-blocked pair of kernels (STAGE=0, then STAGE=1 with the same arguments).
local rows = require "lib.hybrid_rows"

local function valid(problem, cfg) return rows.valid(problem, cfg, "hybrid-ffn-dx") end

-- At the active pairs: the sampled dh (2 D) and the two products of dX (4 D).
local function flops(problem) return 6.0 * problem.M * problem.N * problem.DFF * rows.density(problem) end

local function bytes(problem)
  -- dY and dX once; per active pair the Wd, WgT and WuT rows (6 D bytes), 8 bytes of a, u and
  -- their position, 8 bytes of dg and du
  local pairs = problem.M * problem.DFF * rows.density(problem)
  local osz = problem.out_dtype == "f32" and 4 or 2
  return problem.M * problem.N * (2 + osz) + pairs * (6 * problem.N + 16)
end

return {
  name = "hybrid_ffn_dx",
  op = "hybrid-ffn-dx",
  params = rows.PARAMS,
  space = rows.space,
  valid = valid,
  default = function(problem) return rows.default(problem, 8, "hybrid-ffn-dx") end,
  variants = function(problem) return rows.variants(problem, 8, "hybrid-ffn-dx") end,
  generate = function(problem, cfg) return rows.generate(problem, cfg, "dx") end,
  flops = flops,
  bytes = bytes,
}
