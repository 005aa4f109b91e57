#!/usr/bin/env bash
# cli_smoke.sh: the CLI on any machine: help for every command, info without a GPU, gen of
# every op's default kernel, and clear errors (exit 2) for bad options; with a GPU, a tuned
# winner reaching bench and the TwELL bench's output check.
set -u
cli="$1"
fail() { echo "FAIL: $*"; exit 1; }
"$cli" --help | grep -q "commands:" || fail "--help"
for c in info gen bench tune cache run; do
  "$cli" "$c" --help >/dev/null || fail "$c --help"
done
"$cli" info | grep -qE "^(GPU|arch):" || fail "info"
"$cli" info --json | grep -q '"nvrtc_version":' || fail "info --json"
"$cli" gen --op gemm --shape 256x128x64 --dtype bf16 --out f32 | grep -q "mma.sync" || fail "gen gemm"
out=$("$cli" gen --op gemm --shape 0x1x1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "problem.m = 0" || fail "gen with m=0 must exit 2 naming m (got $rc: $out)"
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
out=$("$cli" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --sparsity 0.3 --skew 1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "needs problem.twell_sparsity >= 0.5" || fail "--skew at sparsity 0.3 must exit 2 (got $rc: $out)"
"$cli" gen --op twell-ffn --shape 64x256x256 --d-ff 1024 --skew 1 | head -1 | grep -q "S=0.99,A=1" || fail "gen --skew: the problem must carry it"
out=$("$cli" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] || fail "unknown command must exit 2"
tmp=$(mktemp -d)
"$cli" cache --db "$tmp/c.db" list --json | grep -q '^\[' || fail "cache list --json"
out=$("$cli" cache --db "$tmp/c.db" clear 2>&1); rc=$?
[ $rc -eq 2 ] || fail "cache clear without --yes must exit 2 (got $rc: $out)"
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
  row=$("$cli" bench --op twell-ffn --shape 300x256x256 --d-ff 1024 --skew 1 --rounds 1 --csv 2>&1) || fail "bench --skew: $row"
  echo "$row" | grep -q ',0.99/A1@T128:C16,' || fail "bench --skew must say its input law: $row"
  rm -rf "$tmp"
fi
echo "cli smoke: ok"
