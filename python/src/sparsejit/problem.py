"""Kernel requests (sj_problem) from Python values, with the CLI's defaults and parsing: an op
name ("vnm-spmm"), a shape ("MxNxK" or a tuple), dtypes by name, V:N:M as "64:2:8", TwELL as
"128:16" with the activations' expected sparsity (0.99 unless told)."""
from __future__ import annotations

import ctypes
from typing import Optional, Sequence, Union

from sparsejit._lib import InvalidArgumentError, Problem, call, lib

DTYPES = ("f16", "bf16", "f32")
OPS = ("gemm", "vnm-spmm", "twell-gate", "twell-ffn", "vnm-compress", "vnm-dw", "vnm-transpose", "hybrid-gate", "gmp-prune",
       "hybrid-ffn-fwd", "hybrid-ffn-dx", "hybrid-ffn-dw", "hybrid-transpose", "vnm-dx")
#: The front ends' values for parameters left unset (the CLI's and the Lua module's).
DEFAULT_VNM = "64:2:8"
DEFAULT_TWELL = "128:16"
DEFAULT_SPARSITY = 0.99

Shape = Union[str, Sequence[int]]


def dtype_code(name: str) -> int:
    code = ctypes.c_int()
    call("sj_dtype_parse", str(name).encode(), ctypes.byref(code))
    return code.value


def op_code(name: str) -> int:
    code = ctypes.c_int()
    call("sj_op_parse", str(name).encode(), ctypes.byref(code))
    return code.value


def parse_shape(shape: Shape) -> tuple[int, int, int]:
    """"4096x4096x4096" or (m, n, k) -> (m, n, k)."""
    if isinstance(shape, str):
        parts = shape.lower().split("x")
        try:
            dims = tuple(int(p) for p in parts)
        except ValueError:
            dims = ()
    else:
        dims = tuple(int(d) for d in shape)
    if len(dims) != 3:
        raise InvalidArgumentError(f"shape {shape!r}: expected MxNxK (three integers)")
    return dims  # type: ignore[return-value]


def parse_ints(text: str, count: int, what: str, example: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(p) for p in str(text).split(":"))
    except ValueError:
        vals = ()
    if len(vals) != count:
        raise InvalidArgumentError(f"{what} {text!r}: expected {example}")
    return vals


def make_problem(op: str, shape: Shape, dtype: str = "f16", out_dtype: Optional[str] = None,
                 vnm: Optional[str] = None, twell: Optional[str] = None, d_ff: Optional[int] = None,
                 sparsity: Optional[float] = None, skew: float = 0.0, rank: int = 0, dead: float = 0.0) -> Problem:
    """The sj_problem of op at shape (the CLI's --op --shape --dtype --out --vnm --twell --d-ff
    --sparsity --skew --rank --dead), validated by the library (which refuses a rank other ops than
    vnm-spmm would ignore)."""
    m, n, k = parse_shape(shape)
    p = Problem()
    code = op_code(op)
    lib.sj_problem_init(ctypes.byref(p), code, dtype_code(dtype), m, n, k)
    if out_dtype is not None:
        p.out_dtype = dtype_code(out_dtype)
    if op in ("vnm-spmm", "vnm-compress", "vnm-dw", "vnm-transpose"):
        p.vnm_v, p.vnm_n, p.vnm_m = parse_ints(vnm or DEFAULT_VNM, 3, "vnm", "V:N:M such as 64:2:8")
    if op in ("twell-gate", "twell-ffn"):
        p.twell_tile, p.twell_capacity = parse_ints(twell or DEFAULT_TWELL, 2, "twell", "T:C such as 128:16")
        p.twell_sparsity = DEFAULT_SPARSITY if sparsity is None else float(sparsity)
        p.twell_skew = float(skew)
        p.twell_dead = float(dead)
        if op == "twell-ffn":
            if d_ff is None:
                raise InvalidArgumentError("twell-ffn needs d_ff (the FFN's inner size)")
            p.d_ff = int(d_ff)
    p.lowrank_rank = int(rank)
    call("sj_problem_validate", ctypes.byref(p))
    return p


def describe(p: Problem) -> str:
    buf = ctypes.create_string_buffer(256)
    call("sj_problem_describe", ctypes.byref(p), buf, len(buf))
    return buf.value.decode()


def workspace_size(p: Problem) -> int:
    """Bytes of device workspace the op needs from a caller that provides it (0: none)."""
    n = ctypes.c_size_t()
    call("sj_workspace_size", ctypes.byref(p), ctypes.byref(n))
    return n.value
