-- lua_reference.lua: prints docs/lua.md, the reference of the Lua module of `sparsejit run`, from the
-- module's own descriptions (sparsejit.reference(), written beside the code that reads each field
-- in cli/lua_sparsejit.c). tests/cli_smoke.sh fails when docs/lua.md differs from this output:
--   build/sparsejit run tools/lua_reference.lua > docs/lua.md
local sj = require "sparsejit"

local function cell(s) return (s:gsub("|", "\\|")) end

local out = {}
local function say(s) out[#out + 1] = s or "" end

say("# The Lua module of `sparsejit run`")
say()
say("<!-- Generated: build/sparsejit run tools/lua_reference.lua > docs/lua.md (tests/cli_smoke.sh checks it). -->")
say()
say("`sparsejit run [--timeout S] [--device N] script.lua [args]` runs a Lua 5.4 script with the full")
say("standard library (a script is your own program; templates are what the sandbox is for) and this")
say("module, as `require \"sparsejit\"` and as the global `sparsejit`. `load`, `loadfile` and `dofile`")
say("take source text only. The script's arguments are in `arg` and `...`. `sparsejit.version` is the")
say("library's version string. `examples/vnm_sparsity_sweep.lua` and `examples/ffn_shape_sweep.lua` are")
say("complete sweeps.")
say()
say("Errors are Lua errors whose message starts with the function (`sparsejit.tune: ...`); an")
say("uncaught one stops the script with its file:line and exit code 1. A function that takes an option")
say("table refuses a field it does not list below, naming the fields it takes, and a field of the wrong")
say("type or out of its range, naming what it expects; an absent field takes its default. Every number")
say("the CLI refuses is refused here in the same words (`V:N:M`, `T:C` and shapes go through the same")
say("parser).")
say()
for _, f in ipairs(sj.reference()) do
  say("## sparsejit." .. f.name)
  say()
  say("    " .. f.call)
  say()
  say(f.what)
  say()
  say("Raises: " .. f.errors .. ".")
  say()
  if #f.fields > 0 then
    say("| field | type | default | meaning |")
    say("|---|---|---|---|")
    for _, x in ipairs(f.fields) do
      say(string.format("| `%s` | %s | %s | %s |", x.name, cell(x.type), cell(x.default), cell(x.what)))
    end
    say()
  end
end
io.write(table.concat(out, "\n"))
