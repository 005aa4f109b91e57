#!/usr/bin/env bash
# tune_compare.sh: times the tuner on one V:N:M shape, exhaustively and with the budgeted (random,
# model-guided) strategy over several seeds, and scores each budgeted pick by its time in the
# exhaustive run (one sweep, one measurement of every config), and again in one process: the
# sweep's three fastest configs and every pick are re-timed interleaved (bench/tune_recheck.lua,
# RECHECK_ROUNDS rounds, default 5), because the minimum of one noisy sweep is biased low. Prints
# one line per run; writes the JSON of every run to $OUT.
#
#   bench/tune_compare.sh SPARSEJIT_CLI [SEEDS [TUNE_OPTIONS...]]   (default SEEDS: 5; the options,
#   e.g. --warmup-ms 10 --rep-ms 40, go to every tune alike). EXHAUSTIVE_JSON=FILE scores against
#   an earlier exhaustive run instead of a new one: its `sparsejit tune --strategy exhaustive
#   --json` output, or a "config median_us" table such as tests/data/tune_space_vnm_h200_2568.txt
#   (the H200 sweep of 2026-12-02, 10/40 ms budgets).
set -u -o pipefail
cli=$1
seeds=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
out=${OUT:-.}
mnk=2048x2048x2048 vnm=64:2:8 dtype=f16   # the one shape, for the tunes and the re-timing alike
shape="--op vnm-spmm --shape $mnk --vnm $vnm --dtype $dtype"
if [ -n "${EXHAUSTIVE_JSON:-}" ]; then
  cp "$EXHAUSTIVE_JSON" "$out/tune_exhaustive.json"
else
  "$cli" tune $shape --strategy exhaustive "$@" --json >"$out/tune_exhaustive.json" 2>>"$out/tune_progress.log" ||
    { echo "tune_compare: exhaustive tune failed"; exit 1; }
fi
for s in $(seq 1 "$seeds"); do
  "$cli" tune $shape --strategy random --seed "$s" --no-save "$@" --json >"$out/tune_random_$s.json" 2>>"$out/tune_progress.log" ||
    { echo "tune_compare: random tune (seed $s) failed"; exit 1; }
done
python3 - "$out" "$seeds" "$cli" "$(dirname "$0")/tune_recheck.lua" "${RECHECK_ROUNDS:-5}" "shape=$mnk" "vnm=$vnm" "dtype=$dtype" ${EXHAUSTIVE_JSON:+earlier} <<'PY'
import json, subprocess, sys
out, seeds, cli, recheck, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
problem = sys.argv[6:9]
earlier = len(sys.argv) > 9
text = open(f"{out}/tune_exhaustive.json").read()
if text.lstrip().startswith("{"):
    ex = json.loads(text)
    times = {t["config"]: t["median_us"] for t in ex["trials"] if t["status"] in ("ok", "noisy")}
else:  # a "config median_us" table
    times = {c: float(us) for c, us in (l.split() for l in text.splitlines() if l.strip()) if float(us) > 0}
    ex = {"space_size": len(times), "trials_done": len(times), "seconds": float("nan"),
          "winner": {"config": min(times, key=times.get)}}
best = min(times.values())
print(f"tune exhaustive{' (earlier run)' if earlier else ''}: {ex['space_size']} configs, {ex['trials_done']} measured, {ex['seconds']:.1f} s, "
      f"best {best:.1f} us ({ex['winner']['config']})")
runs = [json.load(open(f"{out}/tune_random_{s}.json")) for s in range(1, seeds + 1)]
top = sorted(times, key=times.get)[:3]
configs = list(dict.fromkeys(top + [r["winner"]["config"] for r in runs]))
res = subprocess.run([cli, "run", recheck, *problem, f"rounds={rounds}",
                      "configs=" + ";".join(configs)], capture_output=True, text=True)
if res.returncode != 0:
    sys.exit(f"tune_compare: the same-process re-timing failed: {res.stderr.strip()}")
again = {c: float(us) for c, us in (l.split() for l in res.stdout.splitlines() if l.strip())}
best_again = min(again[c] for c in top)
print(f"re-timed in one process ({rounds} interleaved rounds): the sweep's 3 fastest "
      + ", ".join(f"{again[c]:.2f}" for c in top) + " us")
within = within_again = 0
for s, r in enumerate(runs, 1):
    pick = r["winner"]["config"]
    ratio, ratio_again = times.get(pick, float("nan")) / best, again[pick] / best_again
    within += ratio <= 1.03
    within_again += ratio_again <= 1.03
    print(f"tune random seed {s}: {r['trials_done']} trials, {r['seconds']:.1f} s, pick {pick}: "
          f"{ratio:.3f}x of the sweep's best, {ratio_again:.3f}x re-timed "
          f"(own run {r['winner']['median_us']:.1f} us, {r.get('finalists', 0)}-way run-off)")
print(f"tune random: {within}/{seeds} seeds within 3% of the exhaustive best by the sweep's times, "
      f"{within_again}/{seeds} re-timed in one process")
PY
