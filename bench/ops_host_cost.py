"""Host time per call of each torch op in sparsejit.ops without a GPU: the argument checks, the
layout and problem structs, the output allocations and the custom-op dispatch, with the launch
itself (sj_vnm_spmm, sj_twell_gate, ...) replaced by a no-op stub.

    python bench/ops_host_cost.py [--calls N]

How it runs on a CPU-only machine (each stand-in costs the same for any version of ops.py, so
the numbers compare across commits on one machine; run it with PYTHONPATH at the tree to time):
the tensors are CPU tensors of a subclass that says it lives on cuda:0; torch.empty ignores the
device (CPU memory, no caching allocator); the current stream is a constant 0 (its real cost,
torch.cuda.current_stream or the raw getter, is not measured here); the context is a compile-only
one put in Context.for_device's table. Everything else, the library's layout and problem
functions included, runs for real. Rows: "op" through torch.ops (the dispatcher included),
"body" the op's Python function called directly. Needs torch."""
from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import torch

_LAUNCHES = ("sj_vnm_spmm", "sj_twell_gate", "sj_twell_ffn_ws", "sj_vnm_compress_device_ws", "sj_vnm_dw",
             "sj_vnm_dx_exact", "sj_vnm_double_prune", "sj_gmp_prune")


class OnCuda(torch.Tensor):
    """A CPU tensor that reports cuda:0 (the ops' device checks pass; the data stays on the host)."""
    __torch_function__ = torch._C._disabled_torch_function_impl
    device = property(lambda self: torch.device("cuda", 0))
    is_cuda = property(lambda self: True)

    def get_device(self) -> int:
        return 0


def _stand_ins() -> None:
    """Before sparsejit.ops is imported, so that whatever it binds at import time is the stand-in."""
    real_empty = torch.empty
    torch.empty = lambda *size, dtype=None, device=None: real_empty(*size, dtype=dtype)
    torch.cuda.current_stream = lambda device=None: SimpleNamespace(cuda_stream=0)
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    from sparsejit import _lib
    for name in _LAUNCHES:
        setattr(_lib.lib, name, lambda *args: 0)
    from sparsejit.context import Context
    Context._per_device[0] = Context(arch="sm_90a", cache_path="")


def _cases() -> dict[str, tuple]:
    import sparsejit.ops as sops

    def cuda(t: torch.Tensor) -> torch.Tensor:
        return t.as_subclass(OnCuda)

    f16, i32 = torch.float16, torch.int32
    rows, cols, n, vnm = 128, 128, 8, "64:2:8"
    nv, nm, ni = sops.vnm_sizes(rows, cols, vnm, f16)
    values, meta, index = cuda(torch.zeros(nv, dtype=f16)), cuda(torch.zeros(nm, dtype=i32)), cuda(torch.zeros(ni, dtype=i32))
    a, b = cuda(torch.zeros(rows, cols, dtype=f16)), cuda(torch.zeros(cols, n, dtype=f16))
    dy, x = cuda(torch.zeros(rows, n, dtype=f16)), cuda(torch.zeros(cols, n, dtype=f16))
    tokens, d_model, d_ff, tile, cap = 16, 128, 256, 128, 16
    xt, wt = cuda(torch.zeros(tokens, d_model, dtype=f16)), cuda(torch.zeros(d_ff, d_model, dtype=f16))
    entries = cuda(torch.zeros(tokens, d_ff // tile, cap, dtype=i32))
    counts = cuda(torch.zeros(tokens, d_ff // tile, dtype=i32))
    spill = cuda(torch.zeros(tokens, d_ff, dtype=f16))
    mask = cuda(torch.ones(rows, cols, dtype=torch.uint8))
    return {
        "vnm_spmm": (sops.vnm_spmm, (values, meta, index, b, rows, cols, vnm, None)),
        "vnm_compress": (sops.vnm_compress, (a, vnm, "l2")),
        "twell_gate": (sops.twell_gate, (xt, wt, tile, cap, 0.99)),
        "twell_ffn": (sops.twell_ffn, (xt, entries, counts, spill, wt, wt, tile, cap, 0.99, None)),
        "vnm_dw": (sops.vnm_dw, (dy, x, meta, index, rows, cols, vnm, None)),
        "vnm_dx_exact": (sops.vnm_dx_exact, (values, meta, index, dy, rows, cols, vnm, None)),
        "vnm_double_prune": (sops.vnm_double_prune, (values, meta, index, rows, cols, vnm)),
        "gmp_prune": (sops.gmp_prune, (a, mask, 0, 0.0, 0.75, 0, 1, 1, 64, 8)),
    }


def per_call_us(fn, args: tuple, calls: int, rounds: int = 5) -> float:
    fn(*args)  # the first call fills whatever the op caches
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed round (best of 5 rounds)")
    args = ap.parse_args()
    _stand_ins()
    print(f"# torch {torch.__version__}, host us per call (best of 5 rounds of {args.calls}), launch stubbed")
    print("op,via torch.ops,body only")
    for name, (op, op_args) in _cases().items():
        print(f"{name},{per_call_us(op, op_args, args.calls):.2f},{per_call_us(op._init_fn, op_args, args.calls):.2f}")


if __name__ == "__main__":
    main()
