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
--              float* du_values, float* du_backup, int R, unsigned* work, tm_dy, tm_wd, tm_wg, tm_wu);
-- dY and dX M x D, WgT, WuT, Wd d_ff x D, row-major, D % 8 == 0; the hybrid arrays of a and u as
-- hybrid-ffn-fwd left them; dg_* and du_* (M x W and R x d_ff floats) receive dg and du at the
-- active pairs' positions only. The last five (a workspace and TMA descriptors of dY, Wd, WgT and
-- WuT) only ALGO=2's kernels take; the others take the first 17.
-- Two algorithms (ALGO): 0, lib/hybrid_rows.lua, mode "dx", on CUDA cores (the default; SPLIT > 0
-- is its L2-blocked pair of kernels, STAGE=0 then STAGE=1 with the same arguments); 2,
-- lib/hybrid_pairs.lua, on tensor cores (sm_90a; a listing of the pairs, STAGE=0, then the TwELL
-- FFN's pairs kernel with dY and Wd in the up product and WgT, then WuT in the down, STAGE=1).
local rows = require "lib.hybrid_rows"

-- At the active pairs: the sampled dh (2 D) and the two products of dX (4 D).
local function flops(problem) return 6.0 * problem.M * problem.N * problem.DFF * rows.density(problem) end

local function bytes(problem)
  -- dY and dX once; per active pair the Wd, WgT and WuT rows (6 D bytes), 8 bytes of a, u and
  -- their position, 8 bytes of dg and du
  local pairs = problem.M * problem.DFF * rows.density(problem)
  local osz = problem.out_dtype == "f32" and 4 or 2
  return problem.M * problem.N * (2 + osz) + pairs * (6 * problem.N + 16)
end

return require("lib.hybrid_pairs").template("hybrid-ffn-dx", "dx", 8, {
  name = "hybrid_ffn_dx",
  op = "hybrid-ffn-dx",
  flops = flops,
  bytes = bytes,
})
