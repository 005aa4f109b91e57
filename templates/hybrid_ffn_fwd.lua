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
local hp = require "lib.hybrid_pairs"
local tw = require "lib.twell_common"

local PARAMS = {}
for _, p in ipairs(rows.PARAMS) do PARAMS[#PARAMS + 1] = p end
for _, p in ipairs(hp.PARAMS) do PARAMS[#PARAMS + 1] = p end

-- ALGO=0 ignores WARPS, UT and STAGES, ALGO=2 THREADS, B and SPLIT: they take these values.
local ROWS_FIXED = { WARPS = 16, UT = 512, STAGES = 3 }
local function pairs_fixed(problem) return { THREADS = rows.default(problem).THREADS, B = 8, SPLIT = 0 } end

local function fixed(cfg, values, algo)
  for k, v in pairs(values) do
    if cfg[k] ~= v then return false, string.format("ALGO=%d takes %s=%d (it belongs to the other algorithm)", algo, k, v) end
  end
  return true
end

local function valid(problem, cfg)
  local ok, why = tw.check_ints(PARAMS, cfg)
  if not ok then return false, why end
  if cfg.ALGO == 0 then
    ok, why = fixed(cfg, ROWS_FIXED, 0)
    if not ok then return false, why end
    return rows.valid(problem, cfg, "hybrid-ffn-fwd")
  end
  if cfg.ALGO ~= 2 then return false, "ALGO=" .. cfg.ALGO .. " must be 0 (rows, CUDA cores) or 2 (pairs, tensor cores)" end
  ok, why = fixed(cfg, pairs_fixed(problem), 2)
  if not ok then return false, why end
  local common = {}
  for k, v in pairs(cfg) do common[k] = v end
  common.STAGE = 0 -- the rows' checks of the problem; ALGO=2's STAGE is its own
  ok, why = rows.valid(problem, common, "hybrid-ffn-fwd")
  if not ok then return false, why end
  return hp.valid(problem, cfg)
end

local function with(cfg, values)
  for k, v in pairs(values) do cfg[k] = v end
  return cfg
end

local function space(problem)
  return with(rows.space(problem), { ALGO = { 0, 2 }, WARPS = { 8, 16 }, UT = { 256, 512 }, STAGES = { 2, 3, 4 } })
end

local function default(problem) return with(rows.default(problem), with({ ALGO = 0 }, ROWS_FIXED)) end

-- The tuner's first candidates: the rows' (the default and its L2-blocked form at SPLIT=4, the
-- per-pass working set bench/NOTES.md counts), then the tensor-core pairs where the target has them.
local function variants(problem)
  local out = {}
  for _, cfg in ipairs(rows.variants(problem, 4, "hybrid-ffn-fwd")) do out[#out + 1] = with(cfg, with({ ALGO = 0 }, ROWS_FIXED)) end
  local tc = hp.config(problem, with(pairs_fixed(problem), { STAGE = 0 }))
  if tc then out[#out + 1] = tc end
  return out
end

-- What a dense FFN does at the active pairs only: the up and the down product, 2 D FLOPs each.
local function flops(problem) return 4.0 * problem.M * problem.N * problem.DFF * rows.density(problem) end

local function bytes(problem)
  -- X and Y once; per active pair a WuT and a Wd row (4 D bytes) and 6 bytes of hybrid + u
  local pairs = problem.M * problem.DFF * rows.density(problem)
  local osz = problem.out_dtype == "f32" and 4 or 2
  return problem.M * problem.N * (2 + osz) + pairs * (4 * problem.N + 6)
end

local function generate(problem, cfg)
  if cfg.ALGO == 2 then return hp.generate(problem, cfg) end
  return rows.generate(problem, cfg, "fwd")
end

return {
  name = "hybrid_ffn_fwd",
  op = "hybrid-ffn-fwd",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  variants = variants,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
