"""VNMLinear's forward from Python against torch.mm (dense) and cuSPARSELt 2:4
(torch.sparse.to_sparse_semi_structured) in the same process, at the V:N:M benchmark shapes,
and the Python cost of one launch against a bare C launch through the same binding.

    python bench/torch_vnm_bench.py [--csv FILE] [--quick] [--launch-only]

Rows: out x in weight, 8192 tokens, f16 and bf16, V = 128 at 2:4, 2:8, 2:16. Each time is the
median of torch.utils.benchmark's blocked_autorange (>= 1 s per case), the cases of a shape
interleaved. The launch cost: host time per call, over 2000 calls without synchronising, of
torch.ops.sparsejit.vnm_spmm on a 128 x 128 x 8 problem (the GPU keeps up: the kernel takes a few
us) and of its body as sparsejit's modules call it in eager mode (ops_for's choice, then
sparsejit.ops.EAGER: no dispatcher) against sj_vnm_spmm called directly with prebuilt arguments
(what both wrap), and the eager body's pieces each alone (ops_for, the output's torch.empty, the
context and stream, the data pointers). Needs torch and a GPU."""
from __future__ import annotations

import argparse
import ctypes
import csv
import sys
import time

import torch
from torch.utils import benchmark

import sparsejit.nn
import sparsejit.ops as sops
from sparsejit._lib import Problem, VnmDevice, call
from sparsejit.formats import vnm_layout


def median_ms(fn) -> float:
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1.0).median * 1e3


def semi_structured_linear(w: torch.Tensor):
    keep = w.abs().view(-1, 4).argsort(dim=1)[:, 2:]
    mask = torch.zeros_like(w.view(-1, 4), dtype=torch.bool).scatter_(1, keep, True).view_as(w)
    try:
        ws = torch.sparse.to_sparse_semi_structured(w * mask)
    except (RuntimeError, NotImplementedError):
        return None
    return lambda x: torch.nn.functional.linear(x, ws)


def forward_rows(dtypes, shapes, patterns, tokens):
    for dt in dtypes:
        for out_f, in_f in shapes:
            lin = torch.nn.Linear(in_f, out_f, bias=False, device="cuda", dtype=dt).requires_grad_(False)
            x = torch.randn(tokens, in_f, device="cuda", dtype=dt)
            semi = semi_structured_linear(lin.weight)
            cases = {"torch.mm": lambda: torch.mm(x, lin.weight.t())}
            if semi is not None:
                cases["cusparselt 2:4"] = lambda: semi(x)
            for p in patterns:
                m = sparsejit.nn.VNMLinear.from_dense(lin, f"128:{p}").requires_grad_(False)
                m(x)   # loads the kernel (a cached winner or the default)
                cases[f"sparsejit 128:{p}"] = (lambda m=m: m(x))
            times = {k: [] for k in cases}
            with torch.no_grad():
                for _ in range(2):            # interleaved rounds
                    for k, fn in cases.items():
                        times[k].append(median_ms(fn))
            dense = min(times["torch.mm"])
            for k, ts in times.items():
                yield {"dtype": str(dt).split(".")[1], "out x in": f"{out_f}x{in_f}", "tokens": tokens, "case": k,
                       "ms": round(min(ts), 4), "vs torch.mm": round(dense / min(ts), 3)}


def launch_cost(calls: int = 2000) -> dict:
    rows, cols, n = 128, 128, 8
    a = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    values, meta, index, _ = torch.ops.sparsejit.vnm_compress(a, "64:2:8", "l2")
    b = torch.randn(cols, n, device="cuda", dtype=torch.float16)
    op = lambda: torch.ops.sparsejit.vnm_spmm(values, meta, index, b, rows, cols, "64:2:8", None)
    eager = lambda: sops.ops_for(b, values).vnm_spmm(values, meta, index, b, rows, cols, "64:2:8", None)
    c = op()
    lay = vnm_layout(rows, cols, "64:2:8", "f16")
    p = Problem()
    call("sj_vnm_problem", ctypes.byref(lay), n, 1, ctypes.byref(p))
    handle, stream = sops._ctx_stream(b)
    dev = VnmDevice(lay, values.data_ptr(), meta.data_ptr(), index.data_ptr())
    args = (handle, ctypes.byref(p), ctypes.byref(dev), b.data_ptr(), c.data_ptr(), 1.0, 0.0, stream)
    bare = lambda: call("sj_vnm_spmm", *args)
    # pieces of the eager body, each alone, to say where its overhead goes
    pieces = (("piece: ops_for", lambda: sops.ops_for(b, values)),
              ("piece: torch.empty (cuda)", lambda: torch.empty(rows, n, dtype=b.dtype, device=b.device)),
              ("piece: context + stream", lambda: sops._ctx_stream(b)),
              ("piece: 4 data_ptr", lambda: (values.data_ptr(), meta.data_ptr(), index.data_ptr(), b.data_ptr())))
    out = {}
    for name, fn in (("torch op", op), ("eager body", eager), ("bare sj_vnm_spmm", bare), *pieces) * 2:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()
        out[name] = min(out.get(name, host), host)
    out["python overhead us"] = out["torch op"] - out["bare sj_vnm_spmm"]
    out["eager overhead us"] = out["eager body"] - out["bare sj_vnm_spmm"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", help="also write the forward rows to this CSV file")
    ap.add_argument("--quick", action="store_true", help="one shape, f16 only")
    ap.add_argument("--launch-only", action="store_true", help="the host cost per launch only, no forward rows")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    cost = launch_cost()
    print("# host us per call: " + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()))
    if args.launch_only:
        return
    dtypes = [torch.float16] if args.quick else [torch.float16, torch.bfloat16]
    shapes = [(11008, 4096)] if args.quick else [(11008, 4096), (4096, 11008), (28672, 8192)]
    rows = []
    w = csv.DictWriter(sys.stdout, fieldnames=["dtype", "out x in", "tokens", "case", "ms", "vs torch.mm"])
    w.writeheader()
    for r in forward_rows(dtypes, shapes, ["2:4", "2:8", "2:16"], 8192):
        w.writerow(r)
        sys.stdout.flush()
        rows.append(r)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            cw = csv.DictWriter(f, fieldnames=list(rows[0]))
            cw.writeheader()
            cw.writerows(rows)


if __name__ == "__main__":
    main()
