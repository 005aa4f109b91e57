#!/usr/bin/env bash
# cli_smoke.sh: the CLI on any machine: help for every command, info without a GPU, gen of
# every op's default kernel, clear errors (exit 2) for bad options, bench/ab_compare.sh on
# stand-in CLIs; with a GPU, a tuned winner reaching bench, the TwELL bench's output check and
# ab_compare on the real CLI.
set -u
cli="$1"
fail() { echo "FAIL: $*"; exit 1; }
"$cli" --help | grep -q "commands:" || fail "--help"
for c in info gen bench tune cache run; do
  "$cli" "$c" --help >/dev/null || fail "$c --help"
done
"$cli" info | grep -qE "^(GPU|arch):" || fail "info"
"$cli" info --json | grep -q '"nvrtc_version":' || fail "info --json"
# valid JSON when a string holds a quote, a backslash or a tab (the cache path here)
jtmp=$(mktemp -d)
odd="$jtmp/q\"b\\s	t.db"
SPARSEJIT_CACHE="$odd" "$cli" info --json | python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(d["cache_path"] != sys.argv[1])' "$odd" ||
  fail "info --json: invalid JSON or a wrong cache_path for a path with a quote"
rm -rf "$jtmp"
"$cli" gen --op gemm --shape 256x128x64 --dtype bf16 --out f32 | grep -q "mma.sync" || fail "gen gemm"
out=$("$cli" gen --op gemm --shape 0x1x1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "shape '0x1x1': M = '0' is out of range; expected an integer in 1..1073741824" ||
  fail "gen with m=0 must exit 2 naming m (got $rc: $out)"
# strict numbers: no value is truncated, wrapped or replaced by a default; one exit code (2), the
# argument and its range named, the text as given (never an overflowed value)
check2() { # expected-text command...
  want=$1; shift
  out=$("$cli" "$@" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" || fail "$* must exit 2 saying '$want' (got $rc: $out)"
}
v="gen --op vnm-spmm --shape 256x256x256 --vnm"
check2 "--vnm '0:0:0': V = '0' is out of range; expected an integer in 1..2147483647" $v 0:0:0
check2 "--vnm '0:2:8': V = '0' is out of range" $v 0:2:8
check2 "--vnm '4294967360:2:8': V = '4294967360' is out of range" $v 4294967360:2:8
check2 "--vnm '64:0:8': N = '0' is out of range" $v 64:0:8
check2 "problem.vnm_v = 48: V must be 16, 32, 64 or 128" $v 48:2:8
t="gen --op twell-gate --shape 256x1024x512 --twell"
check2 "--twell '0:5': T = '0' is out of range; expected an integer in 1..65536" $t 0:5
check2 "--twell '1048576:5': T = '1048576' is out of range" $t 1048576:5
check2 "--twell '128:0': C = '0' is out of range" $t 128:0
check2 "--d-ff '99999999999999999999' is out of range; expected an integer in 1..1073741824" gen --op twell-ffn --shape 64x256x256 --d-ff 99999999999999999999
check2 "BM = '4294967360' is out of range; expected an integer in -2147483648..2147483647" gen --op gemm --shape 64x64x64 --config BM=4294967360
check2 "STAGES = '3888888888888888888' is out of range" gen --op gemm --shape 64x64x64 --config STAGES=3888888888888888888
check2 "is not valid for this problem" gen --op gemm --shape 64x64x64 --config STAGES=99
check2 "--rounds '5x' is not an integer; expected an integer in 1..100" bench --op gemm --shape 64x64x64 --rounds 5x
check2 "--seed '99999999999999999999' is out of range" tune --op gemm --shape 64x64x64 --seed 99999999999999999999
# --device N on every command that uses a GPU: a bad N exits 2 naming the option and its range
dtmp=$(mktemp -d)
dev_cmds=("info" "gen --op gemm --shape 64x64x64" "tune --op gemm --shape 64x64x64" "bench --op gemm --shape 64x64x64"
          "run" "cache --db $dtmp/c.db import $dtmp/e.db")
for c in "${dev_cmds[@]}"; do
  for d in -1 x 1024 1e3; do
    if [ "${c%% *}" = run ]; then set -- run --device "$d" /nonexistent.lua; else set -- $c --device "$d"; fi
    check2 "--device '$d' is " "$@"
    check2 "expected an integer in 0..1023" "$@"
  done
  "$cli" ${c%% *} --help | grep -q -- "--device N" || fail "${c%% *} --help must list --device"
done
out=$(printf 'sparsejit.configure{device = -1}\n' | "$cli" run /dev/stdin 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -qF "field 'device' = -1 is out of range; expected an integer in 0..1023" ||
  fail "configure{device = -1} (got $rc: $out)"
# docs/lua.md is what the Lua module says of itself (tools/lua_reference.lua)
src="$(dirname "$0")/.."
"$cli" run "$src/tools/lua_reference.lua" | diff -u "$src/docs/lua.md" - >&2 ||
  fail "docs/lua.md differs from the Lua module's reference: build/sparsejit run tools/lua_reference.lua > docs/lua.md"
out=$("$cli" gen --op gemm --shape 64x64 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "expected MxNxK" || fail "bad --shape (got $rc: $out)"
out=$("$cli" gen --op nope --shape 1x1x1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown op 'nope'" || fail "bad --op (got $rc: $out)"
out=$("$cli" gen --op gemm --shape 64x64x64 --dtype f64 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown dtype 'f64'" || fail "bad --dtype (got $rc: $out)"
"$cli" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --sparsity 0.95 | grep -q "mma.sync" || fail "gen twell-ffn"
for s in 1 0 1.5 -0.1 0.9x; do
  out=$("$cli" bench --op twell-ffn --shape 64x256x256 --d-ff 1024 --sparsity "$s" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "sparsity '$s': expected a fraction of zeros in (0, 1)" ||
    fail "bad --sparsity $s must exit 2 naming it (got $rc: $out)"
done
for a in -1 4.5 x; do
  out=$("$cli" bench --op twell-ffn --shape 64x256x256 --d-ff 1024 --skew "$a" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "skew '$a': expected a number in \[0, 4\]" ||
    fail "bad --skew $a must exit 2 naming it (got $rc: $out)"
done
# twell-ffn-block: a benchmark beside the ops, listed in bench's help, refused by tune and gen naming the ops
"$cli" bench --op twell-ffn-block --help | grep -q "or a benchmark of several kernels: twell-ffn-block" || fail "bench --help must list twell-ffn-block"
"$cli" bench --help | grep -qE "^  twell-ffn +the fused FFN alone" || fail "bench --help must say what twell-ffn times"
"$cli" tune --help | grep -q -- "--op OP            an op: gemm, vnm-spmm, twell-gate, twell-ffn, vnm-dw, vnm-dx, hybrid-gate, hybrid-ffn-fwd, hybrid-ffn-dx, hybrid-ffn-dw (default gemm)" || fail "tune --help: the tunable ops"
"$cli" gen --help | grep -q -- "--op OP            one of gemm, vnm-spmm, twell-gate, twell-ffn, vnm-compress, vnm-dw, vnm-transpose" || fail "gen --help: every op"
for c in tune gen; do
  out=$("$cli" $c --op twell-ffn-block --shape 64x256x256 --d-ff 1024 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "twell-ffn-block is a benchmark of twell-gate + twell-ffn, not an op" &&
    echo "$out" | grep -q "one of gemm, vnm-spmm, twell-gate, twell-ffn" || fail "$c --op twell-ffn-block must exit 2 naming the ops (got $rc: $out)"
done
out=$("$cli" bench --op nope --shape 1x1x1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown op 'nope'; expected an op (gemm, vnm-spmm, twell-gate, twell-ffn, vnm-dw, vnm-dx, hybrid-gate, hybrid-ffn-fwd, hybrid-ffn-dx, hybrid-ffn-dw) or a benchmark (twell-ffn-block, vnm-train, vnm-train-exact, vnm-train-sparse-dx, ffn-train)" ||
  fail "bench --op nope must exit 2 naming ops and benchmarks (got $rc: $out)"
# an option the op does not read is refused, not ignored
for c in "gen --op gemm --vnm 64:2:8|--vnm does not apply to --op gemm (ops that read it: vnm-spmm" \
         "tune --op vnm-spmm --sparsity 0.9|--sparsity does not apply to --op vnm-spmm (ops that read it: twell-gate" \
         "bench --op vnm-train --twell 128:16|--twell does not apply to --op vnm-train" \
         "gen --op twell-gate --d-ff 256|--d-ff does not apply to --op twell-gate" \
         "gen --op gemm --rank 32|--rank does not apply to --op gemm (ops that read it: vnm-spmm)" \
         "bench --op vnm-train --rank 32|--rank does not apply to --op vnm-train"; do
  out=$("$cli" ${c%%|*} --shape 64x256x64 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -qF -- "${c#*|}" || fail "${c%%|*}: must exit 2 with '${c#*|}' (got $rc: $out)"
done
out=$("$cli" bench --op vnm-compress --shape 64x64x64 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "vnm-compress is a conversion" || fail "bench --op vnm-compress must exit 2 (got $rc: $out)"
out=$("$cli" bench --op twell-ffn-block --shape 64x256x256 --d-ff 1024 --sparsity 1.5 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "sparsity '1.5': expected a fraction of zeros in (0, 1)" || fail "block with a bad --sparsity (got $rc: $out)"
out=$("$cli" bench --op twell-ffn-block --shape 64x256x256 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "problem.d_ff = 0" || fail "block without --d-ff must exit 2 naming d_ff (got $rc: $out)"
for r in 0 101 x; do
  out=$("$cli" bench --op twell-ffn-block --shape 64x256x256 --d-ff 1024 --rounds $r 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "rounds '$r' is .*; expected an integer in 1..100" || fail "bench --rounds $r must exit 2 (got $rc: $out)"
done
# vnm-train, vnm-train-exact: a V:N:M layer's training step on the vnm-dw problem (out x in x tokens),
# listed in bench's help with its shape; tune refuses it naming its parts; a bad argument exits 2
"$cli" bench --help | grep -qE "^  vnm-train +forward, dX on W\^T double-pruned" || fail "bench --help must say what vnm-train times"
"$cli" bench --help | grep -qE "^  vnm-train-exact +forward, exact dX" || fail "bench --help must say what vnm-train-exact times"
"$cli" bench --help | grep -qE "^  vnm-train-sparse-dx +forward, exact dX from W's compressed form" ||
  fail "bench --help must say what vnm-train-sparse-dx times"
"$cli" bench --help | grep -qF "vnm-dw, vnm-dx, vnm-train*: rows of W x cols of W x tokens" || fail "bench --help: vnm-train's shape"
out=$("$cli" tune --op vnm-train --shape 512x256x64 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "vnm-train is a benchmark of vnm-spmm + vnm-dw, not an op" || fail "tune --op vnm-train must exit 2 (got $rc: $out)"
check2 "problem.k = 60 (tokens) must be a multiple of 8" bench --op vnm-train --shape 512x256x60 --vnm 64:2:8
check2 "problem.vnm_m = 2: M must be in 4..128" bench --op vnm-train-exact --shape 512x256x64 --vnm 64:2:2
check2 "--vnm '64:2': expected V:N:M" bench --op vnm-train --shape 512x256x64 --vnm 64:2
check2 "--rounds '0' is out of range" bench --op vnm-train --shape 512x256x64 --rounds 0
# ffn-train: the FFN block's training step over hybrid activations on the hybrid-ffn-dw problem
# (tokens x d_model x d_model, --d-ff, --twell d_ff:W), listed in bench's help; tune refuses it
# naming its parts; a bad argument exits 2
"$cli" bench --help | grep -qE "^  ffn-train +one training step of the ReLU FFN over hybrid activations" || fail "bench --help must say what ffn-train times"
"$cli" bench --help | grep -q "twell-ffn, twell-ffn-block, hybrid-ffn-\*, ffn-train: tokens x d_model x" || fail "bench --help: ffn-train's shape"
out=$("$cli" tune --op ffn-train --shape 264x256x256 --d-ff 1000 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "ffn-train is a benchmark of hybrid-gate + hybrid-ffn-fwd + hybrid-ffn-dx + hybrid-ffn-dw, not an op" ||
  fail "tune --op ffn-train must exit 2 (got $rc: $out)"
check2 "problem.n = 252, k = 252: hybrid-ffn-dw needs both d_model, a multiple of 8" bench --op ffn-train --shape 264x252x252 --d-ff 1000
check2 "needs it equal to d_ff = 1000 (a row is one tile)" bench --op ffn-train --shape 264x256x256 --d-ff 1000 --twell 128:16
check2 "the ELL width W) = 2000: expected 1..d_ff (1000)" bench --op ffn-train --shape 264x256x256 --d-ff 1000 --twell 1000:2000
check2 "--vnm does not apply to --op ffn-train" bench --op ffn-train --shape 264x256x256 --d-ff 1000 --vnm 64:2:8
check2 "sparsity '1': expected a fraction of zeros in (0, 1)" bench --op ffn-train --shape 264x256x256 --d-ff 1000 --sparsity 1
out=$("$cli" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --sparsity 0.3 --skew 1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "needs problem.twell_sparsity >= 0.5" || fail "--skew at sparsity 0.3 must exit 2 (got $rc: $out)"
"$cli" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --skew 1 | head -1 | grep -q "S=0.99,A=1" || fail "gen --skew: the problem must carry it"
# --dead: the share of never-firing units, in the key; refused outside [0, 0.9], where the live
# units cannot carry the sparsity's non-zeros, and by ops that do not generate activations
"$cli" gen --op hybrid-ffn-fwd --shape 64x256x256 --d-ff 1024 --skew 1 --dead 0.25 | head -1 | grep -q "S=0.99,A=1,D=0.25" ||
  fail "gen --dead: the problem must carry it"
for d in -0.1 0.95 x; do
  check2 "--dead '$d': expected a share of units in [0, 0.9]" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --dead "$d"
done
check2 "problem.twell_dead = 0.9 with problem.twell_sparsity = 0.9 leaves the live units a mean rate of 1: expected at most 0.5" \
  gen --op hybrid-ffn-dx --shape 64x256x256 --d-ff 1024 --sparsity 0.9 --dead 0.9
check2 "--dead does not apply to --op vnm-spmm" gen --op vnm-spmm --shape 256x64x512 --dead 0.2
# --rank: vnm-spmm's low-rank term, in the key and the kernel's arguments; refused outside 8..128 or off a multiple of 8
check2 "--rank '256' is out of range; expected an integer in 8..128" gen --op vnm-spmm --shape 256x64x512 --rank 256
check2 "problem.lowrank_rank = 12: expected 0 (none) or a multiple of 8 in 8..128" gen --op vnm-spmm --shape 256x64x512 --rank 12
out=$("$cli" gen --op vnm-spmm --shape 256x64x512 --rank 24) || fail "gen --rank 24 must succeed"
echo "$out" | head -1 | grep -q "V=64,NS=2,MS=8,R=24" || fail "gen --rank: the problem must carry it"
echo "$out" | grep -q "float beta,$" && echo "$out" | grep -q "const InT\* __restrict__ U, const InT\* __restrict__ Z)" ||
  fail "gen --rank: the kernel must take U and Z after beta"
"$cli" gen --op vnm-spmm --shape 256x64x512 | grep -q "__restrict__ U" && fail "gen without --rank: the kernel must not take U"
# a cache that cannot be opened never stops the CLI: info runs without one and says so once
out=$(SPARSEJIT_CACHE=/proc/sparsejit-no/kernels.db "$cli" info 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c "warning: running without a kernel cache")" -eq 1 ] &&
  echo "$out" | grep -q "cache:    (disabled)" || fail "info with an unopenable cache (got $rc: $out)"
out=$("$cli" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] || fail "unknown command must exit 2"
tmp=$(mktemp -d)
"$cli" cache --db "$tmp/c.db" list --json | grep -q '^\[' || fail "cache list --json"
# read commands never create a file
for c in list "list --json" show "export $tmp/out.db"; do
  "$cli" cache --db "$tmp/typo.db" $c >/dev/null 2>&1
  [ ! -e "$tmp/typo.db" ] || fail "cache $c created $tmp/typo.db"
done
# gen --cubin writes the whole file or nothing: a full disk (RLIMIT_FSIZE: EFBIG with SIGXFSZ
# ignored) or a kill mid-write (SIGXFSZ's default) leaves the earlier cubin intact and no other file
mkdir "$tmp/cubins"
g="gen --op gemm --shape 256x128x64 --cubin $tmp/cubins/k.cubin"
"$cli" $g >/dev/null 2>&1 || fail "gen --cubin"
cp "$tmp/cubins/k.cubin" "$tmp/k.ref"
[ "$(stat -c %s "$tmp/k.ref")" -gt 2048 ] || fail "gen --cubin: a cubin under 2 KB"
out=$( (trap '' XFSZ; ulimit -f 2; "$cli" $g 2>&1 >/dev/null) ); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "cannot write $tmp/cubins/k.cubin" || fail "gen --cubin on a full disk (got $rc: $out)"
( ulimit -f 2; exec "$cli" $g >/dev/null 2>&1 ); rc=$?
[ $rc -gt 128 ] || fail "gen --cubin past RLIMIT_FSIZE must be killed by SIGXFSZ (got $rc)"
cmp -s "$tmp/cubins/k.cubin" "$tmp/k.ref" && [ "$(ls -A "$tmp/cubins")" = "k.cubin" ] ||
  fail "a failed or killed gen --cubin damaged k.cubin or left a file: $(ls -lA "$tmp/cubins")"
# a cache path that is not a regular file: refused (exit 2), nothing created beside it
ls -A /dev > "$tmp/dev.before"
out=$("$cli" cache --db /dev/null list 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "cache /dev/null is not a regular file (a device)" || fail "cache --db /dev/null (got $rc: $out)"
ls -A /dev | cmp -s - "$tmp/dev.before" || fail "cache --db /dev/null created a file in /dev"
out=$("$cli" cache --db "$tmp/typo.db" show 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "there is no cache at $tmp/typo.db" || fail "cache show of no file (got $rc: $out)"
out=$("$cli" cache --db "$tmp/c.db" clear 2>&1); rc=$?
[ $rc -eq 2 ] || fail "cache clear without --yes must exit 2 (got $rc: $out)"
rm -rf "$tmp"
# bench/ab_compare.sh: bad arguments exit 2 naming them
ab="$(dirname "$0")/../bench/ab_compare.sh"
out=$(bash "$ab" "$cli" /nonexistent/sparsejit </dev/null 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "/nonexistent/sparsejit is not an executable" || fail "ab_compare with a missing CLI (got $rc: $out)"
out=$(bash "$ab" "$cli" "$cli" --pairs 0 </dev/null 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "pairs takes a positive integer, got '0'" || fail "ab_compare --pairs 0 (got $rc: $out)"
# ... and on two stand-in CLIs that print a bench CSV row with a fixed time each, it runs every
# row in both orders, skips comments and blank lines, and reports B's change against A
tmp=$(mktemp -d)
for b in a:100 b:90; do
  {
    echo '#!/usr/bin/env bash'
    echo 'case " $* " in *" --csv-header "*) echo "gpu,op,dtype,out_dtype,m,n,k,sparsity,config,origin,first_call_ms,source,median_us,p20_us,p80_us,tflops,cublas_us,cublas_tflops,speedup,check_rel_err" ;; esac'
    echo "echo 'H,twell-gate,f16,f16,2048,5632,2048,0.99@T128:C16,\"BM=128,BN=256\",default,1,jit,${b#*:},1,1,1,72,1,0.8,1e-4'"
  } >"$tmp/${b%%:*}"
  chmod +x "$tmp/${b%%:*}"
done
table=$(printf -- '# a comment\n--op twell-gate --shape 2048x5632x2048\n\n' | bash "$ab" "$tmp/a" "$tmp/b" --pairs 2 --csv "$tmp/ab.csv" 2>/dev/null) ||
  fail "ab_compare on stand-in CLIs: $table"
echo "$table" | grep -qF '| twell-gate f16 2048x5632x2048 0.99@T128:C16 BM=128,BN=256 | 100.0 | 90.0 | -10.0% | 0.80x | 0.80x | 2/2 |' ||
  fail "ab_compare table: $table"
[ "$(tail -n +2 "$tmp/ab.csv" | cut -c1-4 | tr -d '\n')" = "A,1,B,1,B,1,A,1," ] || fail "ab_compare must alternate the order: $(cat "$tmp/ab.csv")"
rm -rf "$tmp"
# With a GPU: a bench row comes from the tuned winner once there is one, and every bench
# checks its output (check_rel_err, the last CSV column) before it reports a time.
if "$cli" info --json | grep -q '"has_gpu":true'; then
  tmp=$(mktemp -d)
  export SPARSEJIT_CACHE="$tmp/k.db"
  g="--op twell-gate --shape 300x512x256 --sparsity 0.95"
  "$cli" tune $g --budget-trials 6 --warmup-ms 2 --rep-ms 5 >"$tmp/tune.txt" 2>&1 || { cat "$tmp/tune.txt"; fail "tune twell-gate"; }
  row=$("$cli" bench $g --rounds 1 --csv 2>&1) || fail "bench twell-gate: $row"
  echo "$row" | grep -q ',tuned,' || fail "bench twell-gate after tune must use the tuned winner: $row"
  row=$("$cli" bench --op twell-ffn --shape 300x256x256 --d-ff 1024 --rounds 1 --csv 2>&1) || fail "bench twell-ffn: $row"
  echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 5e-3) }' || fail "bench twell-ffn must report its check: $row"
  row=$("$cli" bench --op gemm --shape 264x136x200 --rounds 1 --csv 2>&1) || fail "bench gemm: $row"
  echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 5e-3) }' || fail "bench gemm must report its check: $row"
  row=$("$cli" bench --op vnm-spmm --shape 256x136x512 --vnm 64:2:8 --rounds 1 --csv 2>&1) || fail "bench vnm-spmm: $row"
  echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 5e-3) }' || fail "bench vnm-spmm must report its check: $row"
  row=$("$cli" bench --op twell-ffn-block --shape 300x256x256 --d-ff 1024 --rounds 1 --csv 2>&1) || fail "bench twell-ffn-block: $row"
  echo "$row" | grep -q ',twell-ffn-block,' || fail "bench twell-ffn-block must name itself: $row"
  echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 5e-3) }' || fail "bench twell-ffn-block must report its check: $row"
  for b in vnm-train vnm-train-exact vnm-train-sparse-dx; do
    row=$("$cli" bench --op $b --shape 264x203x136 --vnm 64:2:8 --rounds 1 --csv 2>/dev/null) || fail "bench $b: $row"
    echo "$row" | grep -q ",$b,f16,f16,264,203,136,64:2:8," || fail "bench $b must name itself and its problem: $row"
    echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 5e-3) }' || fail "bench $b must report its check: $row"
    "$cli" bench --op $b --shape 264x203x136 --vnm 64:2:8 --rounds 1 --json |
      python3 -c 'import json, sys; p = json.load(sys.stdin)["parts_us"]; sys.exit(sorted(p) != ["dw", "dx", "forward"] or min(p.values()) <= 0)' ||
      fail "bench $b --json must time forward, dx and dw alone"
  done
  # ffn-train on ragged tokens and d_ff: W = 128 (few rows overflow) and W = 16 at 95% zeros with
  # skew (every row overflows, the backup grows in setup); checked, named, its parts and the dense
  # step's forward and backward timed alone, its saved activations below the dense step's
  for a in "--sparsity 0.99" "--twell 1000:16 --sparsity 0.95 --skew 1 --dtype bf16"; do
    g="--op ffn-train --shape 264x256x256 --d-ff 1000 $a --rounds 1"
    row=$("$cli" bench $g --csv 2>/dev/null) || fail "bench $g: $row"
    echo "$row" | grep -q ",ffn-train,.*,264,256,256," || fail "bench $g must name itself and its problem: $row"
    echo "$row" | awk -F, '{ e = $NF + 0; exit !(e > 0 && e < 1e-2) }' || fail "bench $g must report its check: $row"
    "$cli" bench $g --json | python3 -c 'import json, sys
r = json.load(sys.stdin)
p, d = r["parts_us"], r["dense_parts_us"]
ok = sorted(p) == ["dw", "dx", "fwd", "gate"] and sorted(d) == ["backward", "forward"] and min(list(p.values()) + list(d.values())) > 0
sys.exit(not (ok and 0 < r["saved_bytes"] < r["dense_saved_bytes"] == 3 * 264 * 1000 * 2))' ||
      fail "bench $g --json must time gate, fwd, dx, dw and the dense forward and backward alone, and count the saved bytes"
  done
  row=$("$cli" bench --op twell-ffn --shape 300x256x256 --d-ff 1024 --skew 1 --rounds 1 --csv 2>&1) || fail "bench --skew: $row"
  echo "$row" | grep -q ',0.99/A1@T128:C16,' || fail "bench --skew must say its input law: $row"
  table=$(printf -- '--op gemm --shape 264x136x200 --rounds 1\n' | bash "$ab" "$cli" "$cli" --pairs 1 --csv "$tmp/ab.csv" 2>&1) ||
    fail "ab_compare on a gemm row: $table"
  echo "$table" | grep -qE '^\| gemm .*\| [+-][0-9.]+% \| .*\| 1/1 \|$' || fail "ab_compare must print the change per row: $table"
  rm -rf "$tmp"
  # a GPU past the last one: exit 2 naming --device and the GPUs there are
  out=$("$cli" info --device 1023 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -qE -- "--device 1023: out of range; this machine has [0-9]+ GPUs?: expected 0\.\.[0-9]+" ||
    fail "info --device 1023 (got $rc: $out)"
  "$cli" info --device 0 | grep -q "^GPU: " || fail "info --device 0"
  rm -rf "$dtmp"
else
  # without a GPU, --device (which names one) is an error that says there is none, exit 1
  for c in "${dev_cmds[@]}"; do
    if [ "${c%% *}" = run ]; then
      out=$(printf 'sparsejit.info()\n' | "$cli" run --device 0 /dev/stdin 2>&1); rc=$?
    else
      out=$("$cli" $c --device 0 2>&1); rc=$?
    fi
    want=$([ "${c%% *}" = cache ] && echo 2 || echo 1)  # cache import: say --arch, --driver, --nvrtc
    [ $rc -eq "$want" ] && echo "$out" | grep -q -- "--device 0 names a GPU, and this machine has none: " ||
      fail "$c --device 0 without a GPU must exit $want saying there is none (got $rc: $out)"
  done
  # an import refused before it starts creates no cache file
  [ ! -e "$dtmp/c.db" ] || fail "cache import refused for --device left $dtmp/c.db behind"
  rm -rf "$dtmp"
  # without a GPU, tune and bench do what needs none (generate, compile) and say timing needs one,
  # so the README's main job runs to its end
  out=$("$cli" tune --op vnm-spmm --shape 256x256x256 --vnm 64:2:8 2>&1) || fail "tune without a GPU must exit 0: $out"
  echo "$out" | grep -q "nothing was timed" && echo "$out" | grep -q "compiled with NVRTC" || fail "tune without a GPU: $out"
  out=$("$cli" bench --op twell-ffn-block --shape 256x256x256 --d-ff 512 2>&1) || fail "bench without a GPU must exit 0: $out"
  echo "$out" | grep -q "nothing was timed" || fail "bench without a GPU: $out"
  for b in vnm-train vnm-train-exact vnm-train-sparse-dx; do
    out=$("$cli" bench --op $b --shape 11008x4096x8192 --vnm 128:2:8 --dtype bf16 2>&1) || fail "bench $b without a GPU must exit 0: $out"
    echo "$out" | grep -q "nothing was timed" && echo "$out" | grep -q "vnm-dw bf16->bf16 11008x4096x8192" || fail "bench $b without a GPU: $out"
  done
  out=$("$cli" bench --op ffn-train --shape 8192x4096x4096 --d-ff 11008 --sparsity 0.99 --skew 1 --dtype bf16 2>&1) ||
    fail "bench ffn-train without a GPU must exit 0: $out"
  echo "$out" | grep -q "nothing was timed" && echo "$out" | grep -q "hybrid-ffn-dw bf16->bf16 8192x4096x4096 W=128,S=0.99,A=1,DFF=11008" ||
    fail "bench ffn-train without a GPU: $out"
  out=$("$cli" bench --op gemm --shape 64x64x64 --config BM=999 2>&1); rc=$?
  [ $rc -eq 2 ] || fail "bench without a GPU with a bad config must exit 2 (got $rc: $out)"
fi
echo "cli smoke: ok"
