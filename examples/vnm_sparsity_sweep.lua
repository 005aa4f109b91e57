-- vnm_sparsity_sweep.lua: how V:N:M SpMM speeds up over dense cuBLAS as the sparsity grows.
-- For M = 4, 8, 16, 32, 64, 128 (density 2/M, 2:4 inside each kept group of four columns) it
-- tunes the vnm_spmm kernel for one shape (cached: a second run measures only), times it
-- against the dense cuBLAS GEMM of the same shape, prints a table and writes a CSV.
--
--   sparsejit run examples/vnm_sparsity_sweep.lua [shape=4096x4096x4096] [v=64] [dtype=f16]
--       [tune=random|exhaustive|none] [budget=24] [csv=vnm_sparsity_sweep.csv]
local sj = require "sparsejit"

local opt = { shape = "4096x4096x4096", v = "64", dtype = "f16", tune = "random", budget = "24",
              csv = "vnm_sparsity_sweep.csv" }
for _, a in ipairs({ ... }) do
  local key, value = a:match("^(%w+)=(.*)$")
  if not key or opt[key] == nil then error("unknown argument '" .. a .. "' (expected key=value, keys: shape, v, dtype, tune, budget, csv)", 0) end
  opt[key] = value
end
local m, n, k = opt.shape:match("^(%d+)x(%d+)x(%d+)$")
if not m then error("shape '" .. opt.shape .. "': expected MxNxK (A is M x K, B is K x N)", 0) end
m, n, k = tonumber(m), tonumber(n), tonumber(k)

local info = sj.info()
if not info.has_gpu then error("this sweep needs a GPU: " .. info.no_gpu_reason, 0) end
print(string.format("V:N:M sweep on %s, %s %dx%dx%d, V=%s, tuning: %s", info.name, opt.dtype, m, n, k, opt.v, opt.tune))
print(string.format("%-10s %8s %10s %10s %10s %8s  %s", "V:N:M", "density", "us", "TFLOP/s", "cuBLAS us", "speedup", "config"))

local rows = {}
for _, M in ipairs({ 4, 8, 16, 32, 64, 128 }) do
  local problem = { op = "vnm-spmm", dtype = opt.dtype, shape = { m, n, k }, vnm = opt.v .. ":2:" .. M }
  local tuned
  if opt.tune ~= "none" then
    local t = {}
    for key, value in pairs(problem) do t[key] = value end
    t.strategy = opt.tune
    t.budget_trials = opt.tune == "random" and tonumber(opt.budget) or nil
    tuned = sj.tune(t)
  end
  local b = sj.bench(problem)
  local row = {
    vnm = problem.vnm, M = M, density = 2 / M, median_us = b.median_us, p20_us = b.p20_us, p80_us = b.p80_us,
    tflops = b.tflops, cublas_us = b.cublas_us, speedup = b.speedup, config = b.config, origin = b.origin,
    tune_seconds = tuned and tuned.seconds, trials = tuned and tuned.trials_done,
  }
  rows[#rows + 1] = row
  print(string.format("%-10s %8.4f %10.2f %10.1f %10s %8s  %s (%s)", row.vnm, row.density, row.median_us, row.tflops,
                      b.cublas_us and string.format("%.2f", b.cublas_us) or "-",
                      b.speedup and string.format("%.2fx", b.speedup) or "-", row.config, row.origin))
end
sj.write_csv(opt.csv, rows, { "vnm", "M", "density", "median_us", "p20_us", "p80_us", "tflops", "cublas_us",
                              "speedup", "config", "origin", "tune_seconds", "trials" })
print("wrote " .. opt.csv)
