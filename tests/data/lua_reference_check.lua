-- test_lua_script.c's test_reference_matches_code: what the reference says beside what the module
-- does (functions it does not list, returned keys other than it lists) and the defaults it gives.
local ref = {}
for _, f in ipairs(sparsejit.reference()) do ref[f.name] = f end
for name in pairs(sparsejit) do
  if type(sparsejit[name]) == 'function' and not ref[name] then print('undocumented', name) end
end
local function keys(t) local k = {} for n in pairs(t) do k[#k + 1] = n end table.sort(k) return table.concat(k, ',') end
local function listed(name)
  local k = {} for n in ref[name].what:match('%b{}'):gmatch('[%w_]+') do k[#k + 1] = n end
  table.sort(k) return table.concat(k, ',')
end
local got = { info = sparsejit.info(), stats = sparsejit.stats(),
              vnm_layout = sparsejit.vnm_layout{ rows = 64, cols = 64 } }
for name, t in pairs(got) do
  if keys(t) ~= listed(name) then print('returns differ', name, keys(t), listed(name)) end
end
for _, fn in ipairs({ 'tune', 'bench' }) do
  for _, x in ipairs(ref[fn].fields) do print('default', fn, x.name, x.default) end
end
