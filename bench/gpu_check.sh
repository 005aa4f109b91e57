#!/usr/bin/env bash
# gpu_check.sh: the one command that re-checks sparsejit's numbers on a GPU machine. Builds
# (or takes a prebuilt build folder), runs every test binary (GPU tests included: they must pass,
# not skip), runs the benchmarks (each op against cuBLAS dense in the same process, interleaved),
# writes CSV/logs to $OUT (default bench/out), and prints a short table last.
#
#   bench/gpu_check.sh [--prebuilt BUILD_DIR] [--quick | --lean] [--only tests|bench]
# --quick: the largest V:N:M shape only, fewer TwELL cases, 3 tuner seeds; --lean (one device
# call, ~7 min on an H200 before the 4 training-step rows were added; not re-timed): also only the test programs that use the GPU, f16 V:N:M with V=128,
# the training step at 11008x4096 f16 2:8 and 2:16 only, 99%/99.9% TwELL at 8192 tokens (and
# 2048 at 99%), the hybrid FFN's dw and training step at 4096/11008 and 99% only, no FFN algorithm
# comparison and no tuner comparison (bench/tune_compare.sh).
# bench.log has every bench row's wall time, and the training step's parts timed alone.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=""
quick=0
lean=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) build=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --lean) quick=1; lean=1; shift ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-$root/bench/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="${build:+$build/lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ -z "$build" ]; then
  build="$root/build-gpu"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" >>"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
fi
cli="$build/sparsejit"
export SPARSEJIT_CLI="$cli"   # test_lua_script runs the CLI of this build
export SJ_SOURCE_DIR="$root"
work=$(mktemp -d /tmp/sparsejit-gpu-check-XXXXXX)
export SPARSEJIT_CACHE="$work/kernels.db"   # fresh: the numbers include no stale entry
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
"$cli" info

failed=0
summary="$out/tests.txt"
: >"$summary"
if [ "$only" != "bench" ]; then
  # Test programs run side by side (16 CPUs compile their kernels in parallel); each has its own cache.
  run_test() {
    local t=$1 name; name=$(basename "$t")
    local start; start=$(date +%s.%N)
    SPARSEJIT_CACHE="$work/$name.db" timeout 200 "$t" >"$out/$name.log" 2>&1
    echo "$? $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')" >"$work/$name.rc"
  }
  tests=$(ls "$build"/test_*)
  [ $lean -eq 1 ] && tests=$(ls "$build"/test_*gpu* "$build"/test_vnm_spmm "$build"/test_twell_ffn)
  for t in $tests; do [ -x "$t" ] && run_test "$t" & done
  wait
  for t in $tests; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    read -r rc secs <"$work/$name.rc"
    case $rc in
      0) status=pass ;;
      77) status=SKIPPED; failed=1 ;;   # on a GPU machine a skipped GPU test is a failure
      *) status=FAIL; failed=1 ;;
    esac
    printf '%-28s %-10s %6.1fs\n' "$name" "$status" "$secs" | tee -a "$summary"
    [ "$rc" -ne 0 ] && grep -E 'ERROR|FAIL|error|SKIP' "$out/$name.log" | head -20
  done
  "$root/tests/cli_smoke.sh" "$cli" >"$out/cli_smoke.log" 2>&1 && echo "cli_smoke                    pass" | tee -a "$summary" ||
    { echo "cli_smoke FAIL"; cat "$out/cli_smoke.log"; failed=1; }
fi
[ "$only" = "tests" ] && exit $failed

csv="$out/bench.csv"
"$cli" bench --op gemm --shape 64x64x64 --csv-header --rounds 1 --no-cublas 2>/dev/null | head -1 >"$csv"
# Each row's wall time goes to bench.log (input generation and the host reference dominate the big shapes).
bench() {
  local start; start=$(date +%s.%N)
  "$cli" bench --csv "$@" 2>>"$out/bench.log" | tail -1 >>"$csv" || echo "bench $* failed" | tee -a "$out/bench.log"
  awk -v a="$start" -v b="$(date +%s.%N)" -v c="$*" 'BEGIN{printf "bench %s: %.1f s\n", c, b - a}' >>"$out/bench.log"
}
for dt in f16 bf16; do
  bench --op gemm --shape 4096x4096x4096 --dtype $dt
  bench --op gemm --shape 8192x8192x8192 --dtype $dt
done
if [ $quick -eq 1 ]; then
  vnm_shapes="28672x8192x8192"; vnm_v="64 128"; dtypes="f16 bf16"
  [ $lean -eq 1 ] && { dtypes="f16"; vnm_v="128"; }   # rows take 3-30 s each, mostly host-side data
else
  vnm_shapes="4096x4096x4096 11008x8192x4096 4096x8192x11008 28672x8192x8192"; vnm_v="64 128"; dtypes="f16 bf16"
fi
# vnm-spmm shapes are rows x N x K: the issue's (rows x K x N) 11008x4096x8192 is 11008x8192x4096 here
for dt in $dtypes; do for s in $vnm_shapes; do for v in $vnm_v; do for m in 4 8 16 32; do
  bench --op vnm-spmm --shape "$s" --dtype $dt --vnm "$v:2:$m"
done; done; done; done
# The same SpMM with SLoPe's low-rank term U . Z in the kernel (--rank R) against cuBLAS's dense
# GEMM plus its m x n over R GEMM U . Z; not yet run on a GPU.
lr_shapes="11008x8192x4096 28672x8192x8192"; lr_ranks="8 32 128"
[ $lean -eq 1 ] && { lr_shapes="11008x8192x4096"; lr_ranks="32"; }
for dt in $dtypes; do for s in $lr_shapes; do for v in 64 128; do for m in 8 16; do for r in $lr_ranks; do
  bench --op vnm-spmm --shape "$s" --dtype $dt --vnm "$v:2:$m" --rank $r
done; done; done; done; done
# vnm-spmm WG=1 (wgmma.sp, lib/vnm_spmm_wgmma.lua; the sm_90a default at V=128 on its 128 x 256
# tile since these rows said so, H100 a931ab9) against WG=0 (mma.sp) in adjacent rows, f16 at the training step's
# forward (11008x8192x4096) and the largest shape, 2:4 .. 2:16: V=128 with two warpgroups sharing
# the gathered B tile (BM=128) and with one (BM=64, two CTAs an SM), V=64 with one.
for s in 11008x8192x4096 28672x8192x8192; do for m in 4 8 16; do
  [ $lean -eq 1 ] && [ "$s" != 11008x8192x4096 ] && continue
  for c in "WG=0,BM=128,BN=128,WM=64,WN=64,STAGES=4" "" "WG=1,BM=64,BN=256,WM=64,WN=256,STAGES=3"; do
    bench --op vnm-spmm --shape "$s" --dtype f16 --vnm "128:2:$m" ${c:+--config $c}
  done
  for c in "" "WG=1,BM=64,BN=256,WM=64,WN=256,STAGES=3"; do
    bench --op vnm-spmm --shape "$s" --dtype f16 --vnm "64:2:$m" ${c:+--config $c}
  done
done; done
# One V:N:M linear layer's training step (forward, dX, dW) against the dense step's three cuBLAS
# GEMMs: W out x in over T = 8192 tokens, as the vnm-dw problem out x in x T; dX on the W^T
# double-pruned once per weight update (vnm-train) or exact, W^T rewritten each step
# (vnm-train-exact). Each row's parts timed alone go to bench.log. Run on an H100 at 11008 x 4096
# only (8260d7d, bench/RESULTS.md): the wall time of the larger rows (host check of 16 sampled
# rows each of Y, dX, dW) is unmeasured.
train_shapes="11008x4096x8192 4096x11008x8192 28672x8192x8192"; train_m="4 8 16"; train_dtypes="f16 bf16"
[ $quick -eq 1 ] && train_shapes="28672x8192x8192"
[ $lean -eq 1 ] && { train_shapes="11008x4096x8192"; train_m="8 16"; train_dtypes="f16"; }
for dt in $train_dtypes; do for s in $train_shapes; do for m in $train_m; do for b in vnm-train vnm-train-exact; do
  bench --op $b --shape "$s" --dtype $dt --vnm "128:2:$m"
done; done; done; done
# The exact dX from W's compressed form alone (vnm-dx, a candidate: not yet run on a GPU) against
# cuBLAS's dense W^T . dY of the same shape; compare its time with the dX part of the
# vnm-train-exact row above (sj_vnm_dx_exact: W^T rewritten, then the dense gemm).
for s in 11008x4096x8192 4096x11008x8192; do for m in 8 16; do
  [ $lean -eq 1 ] && [ "$s" != 11008x4096x8192 ] && continue
  for dt in f16 bf16; do bench --op vnm-dx --shape "$s" --dtype $dt --vnm "128:2:$m"; done
done; done
# and the step with it (vnm-train-sparse-dx: forward, vnm-dx, dW), exact like vnm-train-exact
for m in 8 16; do bench --op vnm-train-sparse-dx --shape 11008x4096x8192 --dtype f16 --vnm "128:2:$m"; done
# dW alone: the default (WG=1 on sm_90a) against the warp-specialised WG=2 (in the tuning space;
# 1.4-1.9x slower than WG=1 where measured, H100 489becb), W 11008 x 4096 and 28672 x 8192 over 8192 tokens.
for s in 11008x4096x8192 28672x8192x8192; do for m in 8 16; do
  [ $lean -eq 1 ] && [ "$s" != 11008x4096x8192 ] && continue
  for c in "" "BG=32,BK=64,BM=128,STAGES=4,WG=2,WM=64,WN=128" "BG=64,BK=64,BM=64,STAGES=4,WG=2,WM=64,WN=256"; do
    bench --op vnm-dw --shape "$s" --dtype bf16 --vnm "128:2:$m" ${c:+--config $c}
  done
done; done
# The hybrid FFN's three weight gradients alone (the transpose and the gather kernel, timed
# together) against the three dense weight-gradient GEMMs, and the whole training step of the
# block (ffn-train: gate, fwd, dx, dw) against the dense step (9 cuBLAS GEMMs + 3 element-wise),
# 8192 tokens, bf16, W = 128; bench/NOTES.md has the roofline the dw rows check. ffn-train's parts
# and the dense forward and backward timed alone, and the activations each step keeps, go to
# bench.log. --lean: (4096, 11008) at 99% only.
for dims in "2048 5632" "4096 11008"; do for sp in 0.95 0.99 0.995 0.999; do for skew in 0 1; do
  set -- $dims
  [ $lean -eq 1 ] && { [ "$1" != 4096 ] || [ "$sp" != 0.99 ]; } && continue
  for b in hybrid-ffn-dw ffn-train; do
    bench --op $b --shape "8192x$1x$1" --d-ff "$2" --dtype bf16 --sparsity $sp --skew $skew
  done
done; done; done
# skewed with a fifth of the units dead (--dead: trained models' never-firing units), 99%
bench --op ffn-train --shape 8192x4096x4096 --d-ff 11008 --dtype bf16 --sparsity 0.99 --skew 1 --dead 0.2
# dw's busy units on tensor cores (BUSY, not the default; bench/NOTES.md expects ~2.4x at skew 1
# with 512 slots and ~13% lost at skew 0, where no unit is busy), 4096 / 11008 at 99%. --lean:
# skew 1, BUSY=512 only (the default's row is above).
for skew in 0 1; do for busy in 128 256 512; do
  [ $lean -eq 1 ] && { [ $skew != 1 ] || [ $busy != 512 ]; } && continue
  bench --op hybrid-ffn-dw --shape 8192x4096x4096 --d-ff 11008 --dtype bf16 --sparsity 0.99 --skew $skew --config BUSY=$busy
done; done
# The hybrid forward (u at the pairs, Y) and dx (dg, du at the pairs, dX) alone, against the dense
# products they replace: the default (CUDA cores, a CTA per token), its L2-blocked pair (SPLIT=4
# fwd, 8 dx) and the tensor-core variant (ALGO=2: the listing of the pairs, then the TwELL FFN's
# pairs kernel; sm_90a), neither of the last two the default nor measured yet (bench/NOTES.md
# counts their bounds). --lean: (4096, 11008) at 99% only.
for dims in "2048 5632" "4096 11008"; do for sp in 0.99 0.999; do for skew in 0 1; do
  set -- $dims
  [ $lean -eq 1 ] && { [ "$1" != 4096 ] || [ "$sp" != 0.99 ] || [ $skew != 0 ]; } && continue
  for op in "hybrid-ffn-fwd SPLIT=4" "hybrid-ffn-dx SPLIT=8"; do for c in "" "${op#* }" "ALGO=2,WARPS=16,UT=512,STAGES=3"; do
    bench --op "${op%% *}" --shape "8192x$1x$1" --d-ff "$2" --dtype bf16 --sparsity $sp --skew $skew ${c:+--config $c}
  done; done
done; done; done
for tok in 2048 8192; do for dims in "2048 5632" "4096 11008"; do for sp in 0.90 0.95 0.99 0.999; do
  set -- $dims
  # --quick keeps one 2048-token row, where the default takes 8 warps (templates/twell_ffn.lua)
  [ $quick -eq 1 ] && [ "$tok" = 2048 ] && { [ "$sp" != 0.99 ] || [ "$1" != 4096 ]; } && continue
  [ $lean -eq 1 ] && { [ "$sp" = 0.90 ] || [ "$sp" = 0.95 ]; } && continue
  bench --op twell-ffn-block --shape "${tok}x$1x$1" --d-ff "$2" --dtype f16 --sparsity $sp
done; done; done
# The fused FFN alone (what the tuner times and `tune --op twell-ffn` picks by) against the dense
# products it replaces: the up GEMM, H (.) up and the down GEMM.
for dims in "2048 5632" "4096 11008"; do for sp in 0.99 0.999; do
  set -- $dims
  bench --op twell-ffn --shape "8192x$1x$1" --d-ff "$2" --dtype f16 --sparsity $sp
done; done
# The same block on inputs whose tokens share busy units (--skew 1: the busiest fifth of d_ff
# fires about 3/4 of the non-zeros), as activations trained with an L1 penalty do; iid stays the headline.
for sp in 0.95 0.99; do
  bench --op twell-ffn-block --shape 8192x4096x4096 --d-ff 11008 --dtype f16 --sparsity $sp --skew 1
done
# At 95% and 99% the default is the pairs kernel on tensor cores (ALGO=2); the token-block kernel
# (ALGO=0, the default elsewhere) and the CUDA-core pairs kernel (ALGO=1) in the same run.
if [ $lean -eq 0 ]; then
  blocks="ALGO=0,NT=1,PERSIST=0,PIPE=0,ROUND=16384,SLOTS=16,STAGES=4,UCAP=512,UT=1024,WARPS=8"
  pairs="ALGO=1,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0"
  for sp in 0.95 0.99; do
    bench --op twell-ffn-block --shape 8192x4096x4096 --d-ff 11008 --dtype f16 --sparsity $sp --config $blocks
  done
  bench --op twell-ffn-block --shape 8192x4096x4096 --d-ff 11008 --dtype f16 --sparsity 0.95 --config $pairs,WARPS=16,UT=256,SLOTS=32,STAGES=3
  bench --op twell-ffn-block --shape 8192x4096x4096 --d-ff 11008 --dtype f16 --sparsity 0.99 --config $pairs,WARPS=16,UT=512,SLOTS=16,STAGES=3
  # ALGO=2 at 99.9%, where the default switches to ALGO=0 (templates/twell_ffn.lua, default_pairs)
  bench --op twell-ffn-block --shape 8192x4096x4096 --d-ff 11008 --dtype f16 --sparsity 0.999 --config ALGO=2,NT=1,ROUND=1024,UCAP=128,PIPE=0,PERSIST=0,SLOTS=16,WARPS=16,UT=512,STAGES=3
fi
# The gate alone (dense GEMM + ReLU + TwELL epilogue) against one cuBLAS GEMM of its shape.
for dt in $dtypes; do for shape in 2048x5632x2048 8192x11008x4096; do
  bench --op twell-gate --shape "$shape" --dtype $dt --sparsity 0.99
done; done
# Tuning one V:N:M shape: exhaustive, then the budgeted strategy over several seeds, each pick scored
# by its time in the exhaustive sweep; the bench after it uses the exhaustive winner from the cache.
# --lean leaves it out: the exhaustive sweep alone takes ~150 s on an H200.
seeds=5; [ $quick -eq 1 ] && seeds=3
: >"$out/tune.txt"
[ $lean -eq 0 ] && OUT="$out" bash "$root/bench/tune_compare.sh" "$cli" $seeds --warmup-ms 10 --rep-ms 40 2>&1 | tee "$out/tune.txt"
bench --op vnm-spmm --shape 2048x2048x2048 --vnm 64:2:8
"$build/sparsejit_bench_jit" | tee "$out/jit.txt"
# The Python cost per launch (and its pieces) where torch is installed: the package from this tree
# over this build's library.
: >"$out/launch.txt"
if [ -e "$build/libsparsejit.so" ] && python3 -c "import torch" 2>/dev/null; then
  PYTHONPATH="$root/python/src:$root/bench${PYTHONPATH:+:$PYTHONPATH}" SPARSEJIT_LIBRARY="$build/libsparsejit.so" \
    python3 "$root/bench/torch_vnm_bench.py" --launch-only 2>&1 | tail -1 | tee "$out/launch.txt"
fi

# The bench rows as bench/RESULTS.md's tables, one per op (bench/results_md.py). The commit: git's, or
# $SPARSEJIT_COMMIT where the tree came without its .git (a device machine's copy).
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "${SPARSEJIT_COMMIT:-unknown}")
gpu=$("$cli" info --json | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')
python3 "$root/bench/results_md.py" "$csv" --gpu "$gpu" --commit "$commit" >"$out/RESULTS.fragment.md"

echo
echo "== tests"; cat "$summary"
echo "== tuning"; cat "$out/tune.txt"
echo "== Python host cost per launch"; cat "$out/launch.txt"
echo "== training step: parts timed alone (median us)"; grep "parts, each alone" "$out/bench.log"
echo "== training step: activations kept for the backward"; grep "activations: " "$out/bench.log"
echo "== bench (median us; speedup = cuBLAS dense time / sparsejit time, same process, interleaved)"
cat "$out/RESULTS.fragment.md"
rm -rf "$work"
exit $failed
