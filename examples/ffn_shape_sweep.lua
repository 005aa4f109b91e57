-- ffn_shape_sweep.lua: the FFN layers of common LLMs at several token counts, with the weights
-- as the left operand (W . X): gate and up are d_ff x tokens x d_model, down is
-- d_model x tokens x d_ff. Each distinct GEMM shape is tuned once (the cache keeps it), timed,
-- and compared with cuBLAS dense; a layer's time is gate + up + down.
--
--   sparsejit run examples/ffn_shape_sweep.lua [op=vnm-spmm|gemm] [vnm=64:2:8] [dtype=bf16]
--       [tokens=128,512,2048] [models=llama-7b,llama-13b,llama-70b]
--       [tune=random|exhaustive|none] [budget=24] [csv=ffn_shape_sweep.csv]
local sj = require "sparsejit"

local MODELS = {
  ["llama-7b"] = { d = 4096, dff = 11008 },
  ["llama-13b"] = { d = 5120, dff = 13824 },
  ["llama-70b"] = { d = 8192, dff = 28672 },
  ["mistral-7b"] = { d = 4096, dff = 14336 },
}

local opt = { op = "vnm-spmm", vnm = "64:2:8", dtype = "bf16", tokens = "128,512,2048",
              models = "llama-7b,llama-13b,llama-70b", tune = "random", budget = "24", csv = "ffn_shape_sweep.csv" }
for _, a in ipairs({ ... }) do
  local key, value = a:match("^(%w+)=(.*)$")
  if not key or opt[key] == nil then error("unknown argument '" .. a .. "' (expected key=value)", 0) end
  opt[key] = value
end
local function list(s)
  local out = {}
  for item in s:gmatch("[^,]+") do out[#out + 1] = item end
  return out
end

local info = sj.info()
if not info.has_gpu then error("this sweep needs a GPU: " .. info.no_gpu_reason, 0) end
print(string.format("FFN sweep on %s: %s %s%s, tuning: %s", info.name, opt.op, opt.dtype,
                    opt.op == "vnm-spmm" and (" " .. opt.vnm) or "", opt.tune))

-- One shape: tuned (unless tune=none) and timed with its cuBLAS baseline; memoized.
local measured = {}
local function measure(m, n, k)
  local key = m .. "x" .. n .. "x" .. k
  if measured[key] then return measured[key] end
  local problem = { op = opt.op, dtype = opt.dtype, shape = { m, n, k } }
  if opt.op == "vnm-spmm" then problem.vnm = opt.vnm end
  if opt.tune ~= "none" then
    local t = {}
    for field, value in pairs(problem) do t[field] = value end
    t.strategy = opt.tune
    t.budget_trials = opt.tune == "random" and tonumber(opt.budget) or nil
    sj.tune(t)
  end
  measured[key] = sj.bench(problem)
  return measured[key]
end

print(string.format("%-11s %7s %10s %10s %10s %8s", "model", "tokens", "layer us", "cuBLAS us", "TFLOP/s", "speedup"))
local rows = {}
for _, name in ipairs(list(opt.models)) do
  local model = MODELS[name]
  if not model then error("unknown model '" .. name .. "'", 0) end
  for _, tok in ipairs(list(opt.tokens)) do
    local tokens = tonumber(tok)
    local up = measure(model.dff, tokens, model.d)     -- gate and up: same shape
    local down = measure(model.d, tokens, model.dff)
    local t = 2 * up.median_us + down.median_us
    local cublas = up.cublas_us and down.cublas_us and (2 * up.cublas_us + down.cublas_us)
    local useful = (2 * up.tflops * up.median_us + down.tflops * down.median_us) / t
    local row = { model = name, d_model = model.d, d_ff = model.dff, tokens = tokens, layer_us = t,
                  cublas_us = cublas, speedup = cublas and cublas / t, tflops = useful,
                  up_us = up.median_us, down_us = down.median_us, up_config = up.config, down_config = down.config }
    rows[#rows + 1] = row
    print(string.format("%-11s %7d %10.1f %10s %10.1f %8s", name, tokens, t, cublas and string.format("%.1f", cublas) or "-",
                        useful, row.speedup and string.format("%.2fx", row.speedup) or "-"))
  end
end
sj.write_csv(opt.csv, rows, { "model", "d_model", "d_ff", "tokens", "layer_us", "cublas_us", "speedup", "tflops",
                              "up_us", "down_us", "up_config", "down_config" })
print("wrote " .. opt.csv)
