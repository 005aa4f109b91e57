-- lib/emit.lua: the line-prefix template syntax used to write CUDA C inside Lua templates.
-- A line whose first non-blank character is '$' (not followed by '{') is Lua code; any other
-- line is output text,
-- with ${expr} replaced by tostring(expr). '#' stays free for the C preprocessor.
local emit = {}

local function quote(s) return string.format("%q", s) end

-- Translates the template text into a Lua chunk that appends to the table `_out`.
local function translate(text, file, first_line)
  local code = { "local _out = ... " }
  local lineno = first_line - 1
  local need_line = true
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do
    lineno = lineno + 1
    local lua = line:match("^%s*%$(.*)$")
    if lua and lua:sub(1, 1) == "{" then lua = nil end -- "${x} = ..." is text, not Lua
    if lua then
      code[#code + 1] = lua
      need_line = true
    else
      if need_line and file then
        code[#code + 1] = "_out[#_out+1] = " .. quote(string.format('#line %d "%s"\n', lineno, file))
        need_line = false
      end
      local pos = 1
      local parts = {}
      while true do
        local s, e = line:find("%${", pos)
        if not s then break end
        local depth, j = 1, e + 1
        while j <= #line and depth > 0 do
          local c = line:sub(j, j)
          if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
          j = j + 1
        end
        if depth ~= 0 then error(string.format("%s:%d: unterminated ${", file or "?", lineno), 0) end
        if s > pos then parts[#parts + 1] = quote(line:sub(pos, s - 1)) end
        parts[#parts + 1] = "tostring(" .. line:sub(e + 1, j - 2) .. ")"
        pos = j
      end
      if pos <= #line then parts[#parts + 1] = quote(line:sub(pos)) end
      parts[#parts + 1] = quote("\n")
      code[#code + 1] = "_out[#_out+1] = " .. table.concat(parts, " .. ")
    end
  end
  return table.concat(code, "\n")
end

-- origin: the table here() returned on the line where the long string opens (or nil).
function emit.render(origin, text, env)
  local file, first = nil, 1
  if origin then file, first = origin.file, origin.line + 1 end
  local scope = setmetatable({}, { __index = function(_, k)
    local v = env and env[k]
    if v == nil then v = _ENV[k] end
    -- a misspelt or missing parameter would read as nil and quietly pick a branch of the
    -- template: refuse it instead
    if v == nil then error(string.format("emit: the template reads '%s', which its environment does not set", k), 2) end
    return v
  end })
  local chunk, err = load(translate(text, file, first), "=" .. (file or "emit"), "t", scope)
  if not chunk then error("emit: " .. err, 2) end
  local out = {}
  chunk(out)
  return table.concat(out)
end

return emit
