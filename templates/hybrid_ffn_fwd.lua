-- hybrid_ffn_fwd.lua: the forward of the ReLU FFN block for training over hybrid activations
-- (docs/training.md): from a = relu(X . Wg) in the hybrid format (templates/hybrid_gate.lua),
-- u = X[t] . WuT[j] only at the active pairs (a sampled product), stored at the same positions
-- for the backward, and Y[t] = sum_j (a u) Wd[j] over the active units.
--
-- Problem: op "hybrid-ffn-fwd", M = tokens, N = K = d_model, DFF = d_ff, T = DFF (a row is one
-- tile), C = W (the ELL width), out_dtype = Y's.
-- Kernel ABI: (const T* X, const unsigned short* values, const unsigned short* columns,
--              const int* nnz, const int* slot, const unsigned short* backup, const T* WuT,
--              const T* Wd, OutT* Y, unsigned short* u_values, unsigned short* u_backup, int R,
--              unsigned* work, tm_x, tm_wu, tm_wd);
-- X M x D, WuT and Wd d_ff x D, Y M x D, all row-major, D % 8 == 0; the hybrid arrays as
-- ops/hybrid/hybrid_format.h lays them out (R backup rows); u_values (M x W) and u_backup
-- (R x d_ff) receive u in the input dtype at the ELL slots and backup positions of the active
-- pairs (nothing else of them is written). The last four (a workspace and TMA descriptors of X,
-- WuT and Wd) only ALGO=2's kernels take; the others take the first 12.
-- Two algorithms (ALGO): 0, lib/hybrid_rows.lua, mode "fwd", on CUDA cores (the default; SPLIT > 0
-- is its L2-blocked pair of kernels, STAGE=0 then STAGE=1 with the same arguments); 2,
-- lib/hybrid_pairs.lua, on tensor cores (sm_90a; a listing of the pairs, STAGE=0, then the TwELL
-- FFN's pairs kernel over it, STAGE=1). Each leaves the other's parameters at fixed values.
local rows = require "lib.hybrid_rows"

-- What a dense FFN does at the active pairs only: the up and the down product, 2 D FLOPs each.
local function flops(problem) return 4.0 * problem.M * problem.N * problem.DFF * rows.density(problem) end

local function bytes(problem)
  -- X and Y once; per active pair a WuT and a Wd row (4 D bytes) and 6 bytes of hybrid + u
  local pairs = problem.M * problem.DFF * rows.density(problem)
  local osz = problem.out_dtype == "f32" and 4 or 2
  return problem.M * problem.N * (2 + osz) + pairs * (4 * problem.N + 6)
end

return require("lib.hybrid_pairs").template("hybrid-ffn-fwd", "fwd", 4, {
  name = "hybrid_ffn_fwd",
  op = "hybrid-ffn-fwd",
  flops = flops,
  bytes = bytes,
})
