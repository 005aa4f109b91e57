-- tune_recheck.lua: times a list of configs of one V:N:M shape in the same process, interleaved
-- over several rounds, so configs that one sweep measured at different moments are compared on
-- one clock. bench/tune_compare.sh uses it to score each budgeted pick against the exhaustive
-- sweep's fastest configs: a single sweep's minimum is biased low by its own noise.
--
--   sparsejit run bench/tune_recheck.lua shape=MxNxK vnm=V:N:M dtype=f16 rounds=5 configs=A;B;...
-- Prints "config median_us" per config, the median over rounds of each round's median.
local sj = require "sparsejit"

local opt = { shape = "2048x2048x2048", vnm = "64:2:8", dtype = "f16", rounds = "5", configs = "",
              warmup_ms = "10", rep_ms = "40" }
for _, a in ipairs({ ... }) do
  local key, value = a:match("^([%w_]+)=(.*)$")
  if not key or opt[key] == nil then error("unknown argument '" .. a .. "' (expected key=value)", 0) end
  opt[key] = value
end
local m, n, k = opt.shape:match("^(%d+)x(%d+)x(%d+)$")
if not m then error("shape=" .. opt.shape .. ": expected MxNxK", 0) end
local configs = {}
for c in opt.configs:gmatch("[^;]+") do configs[#configs + 1] = c end
if #configs == 0 then error("configs=: expected one or more configs separated by ';'", 0) end
local rounds = tonumber(opt.rounds)
if not rounds or rounds < 1 then error("rounds=" .. opt.rounds .. ": expected a positive integer", 0) end

local times = {}
for r = 1, rounds do
  for i, c in ipairs(configs) do
    local res = sj.bench { op = "vnm-spmm", dtype = opt.dtype, m = tonumber(m), n = tonumber(n), k = tonumber(k),
                           vnm = opt.vnm, config = c, cublas = false,
                           warmup_ms = tonumber(opt.warmup_ms), rep_ms = tonumber(opt.rep_ms) }
    times[i] = times[i] or {}
    times[i][r] = res.median_us
  end
end
for i, c in ipairs(configs) do
  table.sort(times[i])
  print(string.format("%s %.3f", c, times[i][(rounds + 1) // 2]))
end
