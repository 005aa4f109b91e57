#!/usr/bin/env bash
# ab_compare.sh: times two builds of sparsejit on the same bench rows, interleaved, to tell
# whether a kernel change moved anything. Why a script: cuBLAS and our kernels drift by up to 15%
# between processes under sustained load (bench/NOTES.md), and in paired runs the build that
# ran first in a pair came out slower or faster by ~2% depending on the call, so one pair per
# row decides nothing. Here each row runs --pairs times per build, each run its own process
# with its own cuBLAS baseline, and the order inside a pair alternates (A B, B A, ...).
#
#   bench/ab_compare.sh A_CLI B_CLI [--pairs N] [--csv FILE] < rows
# rows: one `sparsejit bench` argument list per line (e.g. `--op twell-ffn --shape
# 8192x4096x4096 --d-ff 11008 --sparsity 0.99`); blank lines and # comments are skipped.
# Each build keeps its own cache (A.db, B.db next to the CSV), so a tuned winner of one build is
# never timed for the other. Prints a table last: per row the mean of each build's medians, the
# change B vs A, and each build's mean speedup over cuBLAS. Exit status 1 if any run failed.
set -u -o pipefail
if [ $# -lt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,14p' "$0"; exit 2; fi
a_cli=$1 b_cli=$2; shift 2
pairs=3
csv=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    *) echo "ab_compare: unknown option $1 (expected --pairs N or --csv FILE)" >&2; exit 2 ;;
  esac
done
for cli in "$a_cli" "$b_cli"; do
  [ -x "$cli" ] || { echo "ab_compare: $cli is not an executable sparsejit CLI" >&2; exit 2; }
done
case "$pairs" in ''|*[!0-9]*|0) echo "ab_compare: --pairs takes a positive integer, got '$pairs'" >&2; exit 2 ;; esac
work=$(mktemp -d /tmp/sparsejit-ab-XXXXXX)
csv=${csv:-$work/ab.csv}
"$a_cli" bench --op gemm --shape 64x64x64 --csv-header --rounds 1 --no-cublas 2>/dev/null | head -1 |
  sed 's/^/build,row,/' >"$csv"
grep -q '^build,row,' "$csv" || { echo "ab_compare: $a_cli printed no CSV header" >&2; exit 1; }
failed=0
run() { # build cli row_index args...
  local b=$1 cli=$2 i=$3 line; shift 3
  line=$(SPARSEJIT_CACHE="$work/$b.db" "$cli" bench --csv "$@" 2>>"$work/$b.err" | tail -1)
  if [ -z "$line" ] || [ "$line" = "${line#*,}" ]; then
    echo "ab_compare: build $b failed on: $* (see $work/$b.err)" >&2; failed=1; return
  fi
  echo "$b,$i,$line" >>"$csv"
}
i=0
while IFS= read -r row; do
  case "$row" in ''|'#'*) continue ;; esac
  i=$((i + 1))
  echo "row $i: $row" >&2
  for p in $(seq 1 "$pairs"); do
    # shellcheck disable=SC2086   # the row is an argument list
    if [ $((p % 2)) -eq 1 ]; then run A "$a_cli" $i $row; run B "$b_cli" $i $row
    else run B "$b_cli" $i $row; run A "$a_cli" $i $row; fi
    echo "  pair $p/$pairs done" >&2
  done
done
python3 - "$csv" <<'PY'
import csv, sys
rows = {}
for r in csv.DictReader(open(sys.argv[1])):
    d = rows.setdefault(r["row"], {"A": [], "B": [], "name": "%s %s %sx%sx%s %s %s" % (
        r["op"], r["dtype"], r["m"], r["n"], r["k"], r["sparsity"], r["config"][:48])})
    d[r["build"]].append((float(r["median_us"]), float(r["speedup"])))
print("| row | A us (mean of medians) | B us | B vs A | A speedup | B speedup | runs |")
print("|---|---|---|---|---|---|---|")
for k in sorted(rows, key=int):
    d = rows[k]
    if not d["A"] or not d["B"]:
        print("| %s | (a build failed) | | | | | |" % d["name"]); continue
    mean = lambda v: sum(v) / len(v)
    a, b = mean([t for t, _ in d["A"]]), mean([t for t, _ in d["B"]])
    print("| %s | %.1f | %.1f | %+.1f%% | %.2fx | %.2fx | %d/%d |" % (d["name"], a, b, 100 * (b - a) / a,
          mean([s for _, s in d["A"]]), mean([s for _, s in d["B"]]), len(d["A"]), len(d["B"])))
PY
echo "csv: $csv" >&2
exit $failed
