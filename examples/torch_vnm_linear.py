"""Swap the nn.Linear layers of a small MLP for sparsejit's VNMLinear at 2:8, check the outputs
against the same MLP with its weights masked identically, and time both beside torch.mm and
cuSPARSELt 2:4 (torch.sparse.to_sparse_semi_structured) on this GPU. Needs torch and a GPU.

    python examples/torch_vnm_linear.py [--tokens 8192] [--d-model 4096] [--d-ff 11008] [--vnm 128:2:8]
"""
from __future__ import annotations

import argparse
import copy

import torch
from torch.utils import benchmark

import sparsejit
import sparsejit.nn


def mlp(d_model: int, d_ff: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(d_model, d_ff), torch.nn.ReLU(), torch.nn.Linear(d_ff, d_model))


def sparsify(model: torch.nn.Sequential, vnm: str) -> torch.nn.Sequential:
    """The same model with every nn.Linear pruned to V:N:M and replaced by a VNMLinear."""
    out = copy.deepcopy(model)
    for i, layer in enumerate(out):
        if isinstance(layer, torch.nn.Linear):
            out[i] = sparsejit.nn.VNMLinear.from_dense(layer, vnm)
    return out


def masked_dense(model: torch.nn.Sequential, sparse: torch.nn.Sequential) -> torch.nn.Sequential:
    """model with each Linear's weight replaced by the weight its VNMLinear stands for."""
    out = copy.deepcopy(model)
    for layer, s in zip(out, sparse):
        if isinstance(layer, torch.nn.Linear):
            with torch.no_grad():
                layer.weight.copy_(s.masked_weight())
    return out


def semi_structured(model: torch.nn.Sequential) -> torch.nn.Sequential | None:
    """model with 2:4-pruned weights held by cuSPARSELt (None where torch cannot)."""
    out = copy.deepcopy(model)
    try:
        for layer in out:
            if isinstance(layer, torch.nn.Linear):
                w = layer.weight.detach()
                keep = w.abs().view(-1, 4).argsort(dim=1)[:, 2:]   # the 2 largest of each 4
                mask = torch.zeros_like(w.view(-1, 4), dtype=torch.bool).scatter_(1, keep, True).view_as(w)
                layer.weight = torch.nn.Parameter(torch.sparse.to_sparse_semi_structured(w * mask), requires_grad=False)
        return out
    except (RuntimeError, NotImplementedError) as e:
        print(f"cuSPARSELt 2:4 not available here: {e}")
        return None


def time_ms(fn, x) -> float:
    t = benchmark.Timer(stmt="fn(x)", globals={"fn": fn, "x": x}).blocked_autorange(min_run_time=1.0)
    return t.median * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--d-ff", type=int, default=11008)
    ap.add_argument("--vnm", default="128:2:8")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this example needs a CUDA GPU")
    torch.manual_seed(0)
    dense = mlp(args.d_model, args.d_ff).cuda().half().requires_grad_(False)
    sparse = sparsify(dense, args.vnm).requires_grad_(False)
    masked = masked_dense(dense, sparse)
    x = torch.randn(args.tokens, args.d_model, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        y, ref = sparse(x), masked(x)
        ref64 = copy.deepcopy(masked).double()(x.double())
        err = ((y.double() - ref64).norm() / ref64.norm()).item()
        err_dense = ((ref.double() - ref64).norm() / ref64.norm()).item()
    print(f"{torch.cuda.get_device_name()}: MLP {args.d_model} -> {args.d_ff} -> {args.d_model}, "
          f"{args.tokens} tokens, fp16, weights {args.vnm}")
    print(f"relative error against the masked model in fp64: sparsejit {err:.2e}, torch fp16 {err_dense:.2e}")
    if err > 10 * max(err_dense, 1e-3):
        raise SystemExit("sparsejit's output disagrees with the masked model")
    rows = [("torch dense (torch.mm)", dense), (f"sparsejit VNMLinear {args.vnm}", sparse)]
    semi = semi_structured(dense)
    if semi is not None:
        rows.append(("cuSPARSELt 2:4 (to_sparse_semi_structured)", semi))
    with torch.no_grad():
        for _, m in rows:
            m(x)   # the first call loads (and, untuned, generates) its kernels
        times = [(name, time_ms(m, x)) for name, m in rows]
    base = times[0][1]
    print(f"{'forward':44s} {'ms':>8s} {'vs dense':>9s}")
    for name, ms in times:
        print(f"{name:44s} {ms:8.3f} {base / ms:8.2f}x")


if __name__ == "__main__":
    main()
