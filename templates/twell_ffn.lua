-- twell_ffn.lua: the fused sparse FFN, Y = (H (.) (X . Wu)) . Wd, from X, TwELL(H), Wu and Wd
-- in one kernel (fp32 accumulation, the up projection computed only at active d_ff units).
--
-- Problem: op "twell-ffn", M = tokens, N = d_model (output), K = d_model (input, N == K),
-- DFF = d_ff, T / C of the TwELL input, out_dtype = Y.
-- Kernel ABI: (const T* X, const unsigned* entries, const int* counts, const T* spill,
--              const T* WuT, const T* Wd, OutT* Y, int M, int D, int F, unsigned* work); X is
-- M x D, WuT and Wd are F x D (row j = Wu[:, j] and Wd[j, :]), Y is M x D, all row-major.
--
-- Three algorithms (ALGO), a file each; this file holds what they share (the parameters, the
-- common checks, the defaults and each algorithm's best-known config) and picks between them:
-- 0, lib/twell_blocks.lua, streams weight rows per block of tokens; 1 and 2, lib/twell_pairs.lua,
-- compute only the (token, unit) pairs over large tiles, on CUDA cores (1) or tensor cores (2,
-- lib/twell_pairs_mma.lua), and are the ones that use `work`. Each leaves the others'
-- parameters at fixed values.
local cuda = require "lib.cuda"
local tw = require "lib.twell_common"
local blocks_algo = require "lib.twell_blocks"
local pairs_algo = require "lib.twell_pairs"

local PARAMS = { "WARPS", "NT", "ROUND", "UCAP", "STAGES", "PIPE", "PERSIST", "ALGO", "UT", "SLOTS", "DGROUP" }

local function valid(problem, cfg)
  local ok, why = tw.check_ints(PARAMS, cfg)
  if not ok then return false, why end
  ok, why = tw.check_problem(problem, "twell-ffn")
  if not ok then return false, why end
  if not tw.member({ "f16", "bf16", "f32" }, problem.out_dtype) then
    return false, "out_dtype must be f16, bf16 or f32, got " .. tostring(problem.out_dtype)
  end
  if problem.N ~= problem.K then
    return false, string.format("N=%d (d_model out) must equal K=%d (d_model in)", problem.N, problem.K)
  end
  if problem.N % 8 ~= 0 then return false, "d_model=" .. problem.N .. " must be a multiple of 8" end
  if problem.DFF < 1 then return false, "DFF must be > 0" end
  if cfg.WARPS ~= 8 and cfg.WARPS ~= 16 then return false, "WARPS must be 8 or 16" end
  if cfg.STAGES < 2 or cfg.STAGES > 6 then return false, "STAGES must be 2..6" end
  if cfg.ALGO == 1 or cfg.ALGO == 2 then return pairs_algo.valid(problem, cfg) end
  if cfg.ALGO ~= 0 then return false, "ALGO must be 0 (token blocks), 1 (pairs, CUDA cores) or 2 (pairs, tensor cores)" end
  return blocks_algo.valid(problem, cfg)
end

local function space(problem)
  return { WARPS = { 8, 16 }, NT = { 1, 2 }, ROUND = { 1024, 4096, 16384 }, UCAP = { 128, 256, 512, 1024 },
           STAGES = { 2, 3, 4, 6 }, PIPE = { 0, 1 }, PERSIST = { 0, 1 }, ALGO = { 0, 1, 2 },
           UT = { 256, 512, 1024, 2048 }, SLOTS = { 16, 32 }, DGROUP = { 0, 1 } }
end

local DEFAULTS = {
  { WARPS = 8, NT = 2, ROUND = 16384, UCAP = 512, STAGES = 4 },
  { WARPS = 8, NT = 1, ROUND = 16384, UCAP = 512, STAGES = 4 },
  { WARPS = 8, NT = 1, ROUND = 4096, UCAP = 256, STAGES = 3 },
  { WARPS = 16, NT = 1, ROUND = 4096, UCAP = 256, STAGES = 2 },
  { WARPS = 8, NT = 1, ROUND = 1024, UCAP = 128, STAGES = 2 },
}

-- The pairs kernel on tensor cores where bench/RESULTS.md measured it ahead of the token blocks:
-- from 90% to 99% sparsity (8192 tokens, 4096 / 11008, tenth session: 1.14-1.30x at 99%, 0.47x
-- at 95%, against 0.61x and 0.18x for the token blocks), with unit tiles of 512 and 3 stages
-- (ahead of 2 stages and of 256-unit tiles at both). 16 warps where their up items fill the GPU,
-- else 8 (half the token tile, twice the items: at 2048 tokens, 99%, 811 us against the token
-- blocks' 1415 at 4096 / 11008 and 240 against 366 at 2048 / 5632, with 176 and 88 up items on
-- 132 SMs); below half the SMs' worth of items (not measured) the token blocks stay. Up to 99.8%:
-- on an H100, bf16 (tests/data/twell_ffn_block.csv), the block at 8192 tokens, 2048 / 5632 took
-- 622 us with ALGO=2 against 924 with the token blocks at 99.5% (the sparsity of L1-trained
-- models), 562 against 710 at 99.7%, and 555 against 573 at 99.8%; at 4096 / 11008, 2001 against
-- 2665 at 99.7%; from 99.8% the token blocks' union of active units is small enough for them to
-- win (1.37x against 1.35x and, at 2048 tokens, 1.39x against 1.07x at 99.8%; 1.65x against
-- 1.47x at 99.9%). An unspecified sparsity keeps the token blocks, and so does a target
-- without TMA (ALGO=2 is sm_90a only).
local function pairs_config(problem, algo)
  local sms = problem.SMS > 0 and problem.SMS or 132
  for _, warps in ipairs({ 16, 8 }) do
    local cfg = { WARPS = warps, NT = 1, ROUND = 1024, UCAP = 128, STAGES = 3, PIPE = 0, PERSIST = 0, ALGO = algo,
                  UT = 512, SLOTS = 16, DGROUP = 0 }
    if not valid(problem, cfg) then return nil end
    local g = pairs_algo.geometry(problem, cfg)
    if g.NTT * g.NUT >= (warps == 16 and sms or sms / 2) then return cfg end
  end
  return nil
end

local function default_pairs(problem)
  local s = problem.SPARSITY
  if not (s >= 0.9 and s < 0.998) then return nil end
  return pairs_config(problem, 2)
end

-- NT = 2 halves the weight rows read per token when blocks share units, but costs registers:
-- take it where it fits, else one n-tile of 8 tokens.
-- (A problem no config supports gets the last candidate, so the generator reports the reason.)
local function blocks_config(problem)
  local cfg
  for _, d in ipairs(DEFAULTS) do
    cfg = { WARPS = d.WARPS, NT = d.NT, ROUND = d.ROUND, UCAP = d.UCAP, STAGES = d.STAGES, PIPE = 0, PERSIST = 0,
            ALGO = 0, UT = 1024, SLOTS = 16, DGROUP = 0 }
    if valid(problem, cfg) then return cfg end
  end
  return cfg
end

local function default(problem)
  return default_pairs(problem) or blocks_config(problem)
end

-- Each algorithm's own best-known config, whatever the sparsity: the tuner measures them first,
-- so a budgeted search always sees every variant at its best and its winner can never be a
-- variant slower than another's default (the budgeted tune once kept ALGO=0 at 99.5% while
-- ALGO=2 ran the block 1.6x faster). A variant with no valid config here is left out.
local function variants(problem)
  local out = { blocks_config(problem) }
  for _, algo in ipairs({ 2, 1 }) do
    local cfg = pairs_config(problem, algo)
    if cfg then out[#out + 1] = cfg end
  end
  return out
end

-- Useful work at full density would be 2 GEMMs; the kernel does the active units only, which
-- a template cannot know, so flops() reports the dense equivalent (the bench counts the rest).
local function flops(problem) return 4.0 * problem.M * problem.N * problem.DFF end

local function bytes(problem)
  local osz = cuda.dtype(problem.out_dtype).size
  return problem.M * problem.N * (2 + osz)
end

local function generate(problem, cfg)
  local dt = cuda.dtype(problem.dtype)
  local ot = cuda.dtype(problem.out_dtype)
  if cfg.ALGO == 0 then return blocks_algo.generate(problem, cfg) end
  return pairs_algo.generate(problem, cfg, dt, ot)
end

return {
  name = "twell_ffn",
  op = "twell-ffn",
  params = PARAMS,
  space = space,
  valid = valid,
  default = default,
  variants = variants,
  generate = generate,
  flops = flops,
  bytes = bytes,
}
