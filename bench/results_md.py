#!/usr/bin/env python3
"""results_md.py: bench/gpu_check.sh's bench CSV as bench/RESULTS.md's tables, one per op or benchmark.

    bench/results_md.py BENCH_CSV --gpu NAME --commit SHA [--date YYYY-MM-DD]

Each row is one `sparsejit bench` process: the sparsejit time and its cuBLAS baseline were
measured in that process, interleaved; speedup = cuBLAS time / sparsejit time. The tables are
the current state: gpu_check.sh writes them to $OUT/RESULTS.fragment.md and RESULTS.md takes
them whole (git keeps the history)."""
import argparse
import csv
import datetime
import sys

# The order and headings of the ops' tables; an op not listed here gets a table after them.
OPS = [
    ("gemm", "Dense GEMM (the template) vs cuBLAS"),
    ("vnm-spmm", "V:N:M SpMM vs cuBLAS dense of the same shape"),
    ("twell-gate", "TwELL gate (GEMM + ReLU + TwELL epilogue) vs one cuBLAS GEMM"),
    ("twell-ffn", "twell-ffn: the fused FFN alone (TwELL H given) vs cuBLAS up GEMM + H (.) up + down GEMM"),
    ("twell-ffn-block", "twell-ffn-block: TwELL FFN block (gate + fused FFN) vs cuBLAS's three GEMMs + relu(gate) (.) up"),
    ("vnm-train", "vnm-train: a V:N:M layer's training step (forward, dX on the double-pruned W^T, dW; out x in x T) "
                  "vs cuBLAS's three GEMMs of the dense step"),
    ("vnm-train-exact", "vnm-train-exact: the same step with the exact dX (W^T rewritten each step, dense gemm) "
                        "vs cuBLAS's three GEMMs of the dense step"),
    ("hybrid-ffn-dw", "hybrid-ffn-dw: the hybrid FFN's three weight gradients (transpose + gather kernel) "
                      "vs cuBLAS's three weight-gradient GEMMs"),
    ("ffn-train", "ffn-train: one training step of the ReLU FFN block over hybrid activations (gate, fwd, dx, dw; "
                  "tokens x d_model x d_model) vs the dense step's 9 cuBLAS GEMMs + 3 element-wise products"),
]


def saved(r):
    """The activations a training step's row keeps for its backward, in bytes (sparse, dense), or None:
    a row that is not a training step's, or from a CSV before the saved_bytes columns."""
    if float(r.get("saved_bytes") or -1) < 0:
        return None
    return float(r["saved_bytes"]), float(r["dense_saved_bytes"])


def row_text(r, with_saved):
    f = lambda k: float(r[k])
    check = "%.1e" % f("check_rel_err") if f("check_rel_err") >= 0 else "-"
    shape = "%sx%sx%s" % (r["m"], r["n"], r["k"])
    text = "| %s | %s | %s | `%s` (%s) | %.1f (%.1f-%.1f) | %.0f | %.1f | **%.2fx** | %s |" % (
        r["dtype"], shape, r["sparsity"] or "dense", r["config"], r["origin"], f("median_us"), f("p20_us"),
        f("p80_us"), f("tflops"), f("cublas_us"), f("speedup"), check)
    if with_saved:
        b = saved(r)
        text += " %.1f / %.1f (%.0fx) |" % (b[0] / 1e6, b[1] / 1e6, b[1] / b[0]) if b else " - |"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    if not rows:
        sys.exit("results_md: %s holds no bench rows" % a.csv)
    by_op = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    order = [op for op, _ in OPS if op in by_op] + sorted(op for op in by_op if op not in dict(OPS))
    out = []
    for op in order:
        out.append("## %s" % dict(OPS).get(op, op))
        out.append("")
        out.append("%s, %s, commit %s; `sparsejit bench`, speedup = cuBLAS time / sparsejit time in the same "
                   "process, interleaved; median (p20-p80) of runs with L2 flushed." % (a.gpu, a.date, a.commit))
        out.append("")
        with_saved = any(saved(r) for r in by_op[op])
        out.append("| dtype | M x N x K | sparsity | config (origin) | sparsejit us (p20-p80) | TFLOP/s | cuBLAS us | speedup "
                   "| checked (rel err) |" + (" saved for the backward, MB: sparse / dense |" if with_saved else ""))
        out.append("|---|---|---|---|---|---|---|---|---|" + ("---|" if with_saved else ""))
        out.extend(row_text(r, with_saved) for r in by_op[op])
        out.append("")
    print("\n".join(out).rstrip())


if __name__ == "__main__":
    main()
