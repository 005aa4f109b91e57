-- lib/hybrid_list_pair.lua: one entry of a unit's token list (templates/hybrid_transpose.lua's
-- list: a pair's hybrid position) decoded into its token and the coefficients of the three weight
-- gradients, as hybrid-ffn-dw sums them: dg and du (fp32, stored by hybrid-ffn-dx at the
-- position) and h = a u (the activation times u as stored by hybrid-ffn-fwd, an fp32 product).
-- One text for the two readers, so they cannot disagree on the layout: the gather kernel
-- (templates/hybrid_ffn_dw.lua) and the busy units' coefficient scatter (lib/hybrid_busy.lua).
--
-- The reader defines T (the 16-bit input type), ELL (tokens x W), W and F (d_ff) and names its
-- arguments values, owner, backup, u_values, u_backup, dg_values, dg_backup, du_values and
-- du_backup as the dw kernel's ABI does; the decode reads position `i` (unsigned) and declares
-- `p` (an sj_pair), `a` and `uu` in the enclosing scope.
local emit = require "lib.emit"

local P = {}

P.STRUCT = [[
/* One pair of the unit being summed: its token and its three coefficients. */
struct sj_pair { int t; float dg, du, h; };
]]

-- env.to_f32: the input dtype's conversion to float.
function P.decode(env) return emit.render(here(), [[
        sj_pair p;
        unsigned short a, uu;
        if (i < ELL) {
          p.t = (int)(i / W);
          a = values[i];
          uu = u_values[i];
          p.dg = dg_values[i];
          p.du = du_values[i];
        } else {
          const unsigned q = i - ELL;
          p.t = owner[q / F];
          a = backup[q];
          uu = u_backup[q];
          p.dg = dg_backup[q];
          p.du = du_backup[q];
        }
        p.h = ${to_f32}((T)a) * ${to_f32}((T)uu);
]], env) end

return P
