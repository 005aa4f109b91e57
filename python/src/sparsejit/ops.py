"""The PyTorch ops: torch.library custom ops ``torch.ops.sparsejit.{vnm_compress, vnm_spmm,
vnm_spmm_lowrank, vnm_dw, vnm_dx_exact, vnm_double_prune, gmp_prune, twell_gate, twell_ffn, hybrid_gate,
hybrid_ffn_fwd, hybrid_ffn_dx, hybrid_ffn_dw}`` with fake (meta) implementations, so torch.compile
traces them without a GPU and CUDA graphs capture them. Each runs on its tensors' device and torch's current stream,
with outputs and workspaces from torch's caching allocator; none allocates behind torch's back
or waits for the device (the first call of a shape loads its kernel: make it before capture).
One sparsejit context per device, on the primary context torch uses. Needs torch.

Host cost: what depends only on the call's plain arguments (shape, pattern, dtypes) - the layout,
the sj_problem, the expected array sizes, the workspace size and the checks on those - is built
once per key and kept (the ``_plan`` caches below; the C side reads the structs through const
pointers, so one copy serves every call and thread). Per call remain the checks on the tensors
themselves, the output allocations and the launch (bench/ops_host_cost.py times this path), and
for the hybrid FFN ops the size of their workspace, which depends on the kernel the call resolves
(sj_hybrid_ffn_workspace: a kernel-table lookup once loaded, so a new winner or sj_set_config is
followed at once)."""
from __future__ import annotations

import ctypes
import functools
from types import SimpleNamespace
from typing import Optional

import torch

from sparsejit._lib import GmpSchedule, GmpTarget, HybridDevice, HybridLayout, Problem, TwellDevice, TwellLayout, \
    VnmDevice, VnmLayout, call, check, lib
from sparsejit.context import Context
from sparsejit.formats import SELECT, twell_layout, vnm_layout
from sparsejit.problem import workspace_size

_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_SJ_DTYPE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3}  # sj_dtype (include/sparsejit.h)
_HALF = (torch.float16, torch.bfloat16)
_ALL = tuple(_DTYPES)
#: Entries per plan cache: a model has a few shapes per layer kind, times its token counts.
_PLANS = 4096

# The launches, resolved once: lib.<name> is an attribute lookup through CDLL per use.
_VNM_SPMM, _VNM_COMPRESS, _VNM_DW = lib.sj_vnm_spmm, lib.sj_vnm_compress_device_ws, lib.sj_vnm_dw
_VNM_SPMM_LOWRANK = lib.sj_vnm_spmm_lowrank
_VNM_DX_EXACT, _VNM_DOUBLE_PRUNE, _GMP_PRUNE = lib.sj_vnm_dx_exact, lib.sj_vnm_double_prune, lib.sj_gmp_prune
_TWELL_GATE, _TWELL_FFN = lib.sj_twell_gate, lib.sj_twell_ffn_ws
_HYBRID_GATE, _HYBRID_FFN_FWD, _HYBRID_FFN_DX = lib.sj_hybrid_gate, lib.sj_hybrid_ffn_fwd, lib.sj_hybrid_ffn_dx
_HYBRID_FFN_DW, _HYBRID_FFN_WORKSPACE = lib.sj_hybrid_ffn_dw, lib.sj_hybrid_ffn_workspace
# The current stream's cudaStream_t as an int (what torch.compile's generated code calls):
# torch.cuda.current_stream builds a Stream object per call, several us.
# Absent from CPU-only builds of torch, which have no CUDA tensors for an op to launch on.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_byref = ctypes.byref


def _name(dtype: torch.dtype, what: str, allowed: tuple = _HALF) -> str:
    if dtype not in allowed:
        raise ValueError(f"{what}: dtype {dtype} is not supported; expected one of {list(allowed)}")
    return _DTYPES[dtype]


def _check(t: torch.Tensor, what: str, ndim: int) -> None:
    if t.is_cuda and t.dim() == ndim and t.is_contiguous():
        return
    if not t.is_cuda:
        raise ValueError(f"{what}: expected a CUDA tensor, got one on {t.device}")
    if t.dim() != ndim:
        raise ValueError(f"{what}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    raise ValueError(f"{what}: expected a contiguous tensor (call .contiguous())")


def _ctx_stream(t: torch.Tensor) -> tuple[ctypes.c_void_p, int]:
    """The context handle and current stream of t's device."""
    device = t.get_device()
    return Context.for_device(device).handle, _raw_stream(device)


# ---------------------------------------------------------------- plans (cached per plain key)


@functools.lru_cache(maxsize=_PLANS)
def _vnm_plan(rows: int, cols: int, vnm: str, dtype: torch.dtype) -> tuple[VnmLayout, tuple[int, int, int]]:
    """The layout of a rows x cols V:N:M matrix of dtype (f16/bf16) and its arrays' element
    counts (values, meta, index)."""
    lay = vnm_layout(rows, cols, vnm, _DTYPES[dtype])
    return lay, (lay.values_bytes // 2, lay.meta_bytes // 4, lay.index_bytes // 4)


@functools.lru_cache(maxsize=_PLANS)
def _spmm_plan(rows: int, cols: int, vnm: str, dtype: torch.dtype, n: int, out_dtype: torch.dtype,
               rank: int = 0) -> tuple[VnmLayout, tuple[int, int, int], Problem, object]:
    """The layout, array sizes, problem and the problem by reference (as the launch takes it) of
    C = A . B (+ U . Z of rank ``rank``)."""
    _name(out_dtype, "vnm_spmm: out_dtype", _ALL)
    lay, sizes = _vnm_plan(rows, cols, vnm, dtype)
    p = Problem()
    call("sj_vnm_problem", _byref(lay), n, _SJ_DTYPE[out_dtype], _byref(p))
    if rank:
        p.lowrank_rank = rank
        call("sj_problem_validate", _byref(p))  # names a rank off 8..128 or not a multiple of 8
    return lay, sizes, p, _byref(p)


@functools.lru_cache(maxsize=_PLANS)
def _vnm_device_ref(rows: int, cols: int, vnm: str, dtype: torch.dtype, values: int, meta: int, index: int):
    """The sj_vnm_device of a compressed matrix at these addresses, by reference: a layer's weight
    keeps its addresses from call to call, so the struct is built once (~1.5 us a call saved)."""
    return _byref(VnmDevice(_vnm_plan(rows, cols, vnm, dtype)[0], values, meta, index))


@functools.lru_cache(maxsize=_PLANS)
def _dw_problem(rows: int, cols: int, vnm: str, dtype: torch.dtype, tokens: int, out_dtype: torch.dtype) -> Problem:
    _name(out_dtype, "vnm_dw: out_dtype", _ALL)
    p = Problem()
    call("sj_vnm_dw_problem", _byref(_vnm_plan(rows, cols, vnm, dtype)[0]), tokens, _SJ_DTYPE[out_dtype], _byref(p))
    return p


@functools.lru_cache(maxsize=_PLANS)
def _double_prune_plan(rows: int, cols: int, vnm: str, dtype: torch.dtype) -> tuple[VnmLayout, tuple[int, int, int],
                                                                                   int]:
    """W^T's layout and element counts, and the workspace bytes of sj_vnm_double_prune."""
    lay = _vnm_plan(rows, cols, vnm, dtype)[0]
    lt = VnmLayout()
    call("sj_vnm_transpose_layout", _byref(lay), _byref(lt))
    need = ctypes.c_size_t()
    call("sj_vnm_double_prune_workspace", _byref(lay), _byref(need))
    return lt, (lt.values_bytes // 2, lt.meta_bytes // 4, lt.index_bytes // 4), need.value


@functools.lru_cache(maxsize=_PLANS)
def _gmp_plan(initial_sparsity: float, final_sparsity: float, start_step: int, interval: int, n_steps: int, v: int,
              m: int, dtype: torch.dtype, rows: int, cols: int) -> tuple[GmpSchedule, int]:
    """The schedule struct and the workspace bytes of sj_gmp_prune (which checks the schedule)."""
    s = GmpSchedule(initial_sparsity, final_sparsity, start_step, interval, n_steps, v, m)
    need = ctypes.c_size_t()
    call("sj_gmp_prune_workspace", _byref(s), _SJ_DTYPE[dtype], rows, cols, _byref(need))
    return s, need.value


@functools.lru_cache(maxsize=_PLANS)
def _twell_gate_plan(tokens: int, d_ff: int, tile: int, capacity: int, dtype: torch.dtype, d_model: int,
                     sparsity: float) -> tuple[TwellLayout, Problem]:
    lay = twell_layout(tokens, d_ff, f"{tile}:{capacity}", _DTYPES[dtype])
    p = Problem()
    call("sj_twell_gate_problem", _byref(lay), d_model, _byref(p))
    p.twell_sparsity = sparsity
    return lay, p


@functools.lru_cache(maxsize=_PLANS)
def _twell_ffn_plan(tokens: int, d_ff: int, tile: int, capacity: int, dtype: torch.dtype, d_model: int,
                    out_dtype: torch.dtype, sparsity: float) -> tuple[TwellLayout, tuple, Problem, int]:
    """The layout, the shapes (entries, counts, spill) of the TwELL it describes, the problem and
    the pairs kernels' workspace bytes."""
    _name(out_dtype, "twell_ffn: out_dtype", _ALL)
    lay = twell_layout(tokens, d_ff, f"{tile}:{capacity}", _DTYPES[dtype])
    p = Problem()
    call("sj_twell_ffn_problem", _byref(lay), d_model, _SJ_DTYPE[out_dtype], _byref(p))
    p.twell_sparsity = sparsity
    shapes = ((tokens, lay.n_tiles, capacity), (tokens, lay.n_tiles), (tokens, d_ff))
    return lay, shapes, p, workspace_size(p)


def vnm_sizes(rows: int, cols: int, vnm: str, dtype: torch.dtype) -> tuple[int, int, int]:
    """Elements of the values (dtype), meta (int32) and index (int32) of a compressed matrix."""
    _name(dtype, "vnm")
    return _vnm_plan(rows, cols, vnm, dtype)[1]


# ---------------------------------------------------------------- vnm_compress


def _vnm_compress(a: torch.Tensor, vnm: str, select: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                  torch.Tensor]:
    """Compresses the dense a (rows x cols, f16/bf16) as V:N:M on its GPU: (values, meta, index,
    word). select: "l2" / "l1" (magnitude pruning) or "exact"; for exact, the int64 word is -1
    when a had the pattern, else where it broke it (check_pattern reads it, with a sync)."""
    _check(a, "vnm_compress: a", 2)
    code = SELECT.get(select)
    if code is None:
        raise ValueError(f"vnm_compress: select {select!r}: expected exact, l2 or l1")
    _name(a.dtype, "vnm_compress: a")
    rows, cols = a.shape
    lay, (nv, nm, ni) = _vnm_plan(rows, cols, vnm, a.dtype)
    values = torch.empty(nv, dtype=a.dtype, device=a.device)
    meta = torch.empty(nm, dtype=torch.int32, device=a.device)
    index = torch.empty(ni, dtype=torch.int32, device=a.device)
    word = torch.empty(2, dtype=torch.int64, device=a.device)  # 16 bytes: sj_workspace_size
    handle, stream = _ctx_stream(a)
    out = VnmDevice(lay, values.data_ptr(), meta.data_ptr(), index.data_ptr())
    check(_VNM_COMPRESS(handle, _byref(lay), a.data_ptr(), cols, code, _byref(out), word.data_ptr(), 16, stream),
          "sj_vnm_compress_device_ws")
    return values, meta, index, word[:1]


vnm_compress = torch.library.custom_op("sparsejit::vnm_compress", _vnm_compress, mutates_args=())


@vnm_compress.register_fake
def _(a, vnm, select):
    nv, nm, ni = vnm_sizes(a.shape[0], a.shape[1], vnm, a.dtype)
    return (a.new_empty(nv), a.new_empty(nm, dtype=torch.int32), a.new_empty(ni, dtype=torch.int32),
            a.new_empty(1, dtype=torch.int64))


def check_pattern(word: torch.Tensor, rows: int, cols: int, vnm: str, dtype: torch.dtype) -> None:
    """Raises PatternError naming where the matrix broke V:N:M (reads the word: synchronises)."""
    _name(dtype, "check_pattern")
    lay = _vnm_plan(rows, cols, vnm, dtype)[0]
    call("sj_vnm_pattern_status", _byref(lay), int(word.item()) & ((1 << 64) - 1))


# ---------------------------------------------------------------- vnm_spmm


def _spmm_prepare(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, b: torch.Tensor, rows: int,
                  cols: int, vnm: str, out_dtype: Optional[torch.dtype], rank: int, what: str):
    """What vnm_spmm and vnm_spmm_lowrank check and allocate alike: (problem, A, C, context,
    stream), the problem and A by reference."""
    labels = _SPMM_LABELS[what]  # formatted once: an f-string per check costs on every call
    _check(values, labels[0], 1)
    _check(meta, labels[1], 1)
    _check(index, labels[2], 1)
    _check(b, labels[3], 2)
    dt = b.dtype
    _name(dt, labels[3])
    if values.dtype != dt:
        raise ValueError(f"{what}: values are {values.dtype} but b is {dt}")
    k, n = b.shape
    if k != cols:
        raise ValueError(f"{what}: b has {k} rows; A has {cols} columns")
    out_dt = out_dtype or dt
    _, sizes, _, p = _spmm_plan(rows, cols, vnm, dt, n, out_dt, rank)
    if (values.numel(), meta.numel(), index.numel()) != sizes:
        raise ValueError(f"{what}: values/meta/index do not hold a {rows}x{cols} {vnm} matrix")
    c = torch.empty(rows, n, dtype=out_dt, device=b.device)
    handle, stream = _ctx_stream(b)
    a = _vnm_device_ref(rows, cols, vnm, dt, values.data_ptr(), meta.data_ptr(), index.data_ptr())
    return p, a, c, handle, stream


_SPMM_LABELS = {w: tuple(f"{w}: {arg}" for arg in ("values", "meta", "index", "b")) for w in
                ("vnm_spmm", "vnm_spmm_lowrank")}


def _vnm_spmm(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, b: torch.Tensor, rows: int, cols: int,
             vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """C = A . B on sparse tensor cores: A the V:N:M matrix (rows x cols) of values/meta/index,
    B dense cols x n (n a multiple of 8), C rows x n in out_dtype (default B's dtype)."""
    p, a, c, handle, stream = _spmm_prepare(values, meta, index, b, rows, cols, vnm, out_dtype, 0, "vnm_spmm")
    check(_VNM_SPMM(handle, p, a, b.data_ptr(), c.data_ptr(), 1.0, 0.0, stream), "sj_vnm_spmm")
    return c


vnm_spmm = torch.library.custom_op("sparsejit::vnm_spmm", _vnm_spmm, mutates_args=())


@vnm_spmm.register_fake
def _(values, meta, index, b, rows, cols, vnm, out_dtype=None):
    return b.new_empty(rows, b.shape[1], dtype=out_dtype or b.dtype)


def _lowrank_checks(b: torch.Tensor, u: torch.Tensor, z: torch.Tensor, rows: int) -> int:
    """The rank r of U (rows x r) and Z (r x n, n = b's columns), after checking that they fit b."""
    if u.dim() != 2 or z.dim() != 2:
        raise ValueError(f"vnm_spmm_lowrank: u and z must be 2-D, got shapes {tuple(u.shape)} and {tuple(z.shape)}")
    r = u.shape[1]
    if u.shape[0] != rows or tuple(z.shape) != (r, b.shape[1]):
        raise ValueError(f"vnm_spmm_lowrank: u {tuple(u.shape)} and z {tuple(z.shape)} do not fit: expected u "
                         f"{rows} x r and z r x {b.shape[1]}")
    if u.dtype != b.dtype or z.dtype != b.dtype:
        raise ValueError(f"vnm_spmm_lowrank: u and z are {u.dtype} and {z.dtype} but b is {b.dtype}")
    if not (8 <= r <= 128 and r % 8 == 0):
        raise ValueError(f"vnm_spmm_lowrank: rank {r}: expected a multiple of 8 in 8..128")
    return r


def _vnm_spmm_lowrank(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, b: torch.Tensor, u: torch.Tensor,
                     z: torch.Tensor, rows: int, cols: int, vnm: str,
                     out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """C = A . B + U . Z in one kernel (SLoPe's low-rank adapters): A and B as in vnm_spmm, U
    rows x r and Z r x n dense in B's dtype, r a multiple of 8 in 8..128; U's r columns are extra
    reduction columns of the sparse product, so C is written once. Z = V . B is the caller's."""
    _check(b, "vnm_spmm_lowrank: b", 2)
    _check(u, "vnm_spmm_lowrank: u", 2)
    _check(z, "vnm_spmm_lowrank: z", 2)
    r = _lowrank_checks(b, u, z, rows)
    p, a, c, handle, stream = _spmm_prepare(values, meta, index, b, rows, cols, vnm, out_dtype, r, "vnm_spmm_lowrank")
    check(_VNM_SPMM_LOWRANK(handle, p, a, b.data_ptr(), c.data_ptr(), u.data_ptr(), z.data_ptr(), 1.0, 0.0, stream),
          "sj_vnm_spmm_lowrank")
    return c


vnm_spmm_lowrank = torch.library.custom_op("sparsejit::vnm_spmm_lowrank", _vnm_spmm_lowrank, mutates_args=())


@vnm_spmm_lowrank.register_fake
def _(values, meta, index, b, u, z, rows, cols, vnm, out_dtype=None):
    _lowrank_checks(b, u, z, rows)
    return b.new_empty(rows, b.shape[1], dtype=out_dtype or b.dtype)


# ---------------------------------------------------------------- V:N:M training (docs/training.md)
# W (rows x cols) is the compressed weight of a linear layer y = W . x; the products take the
# tokens contiguous: dY rows x tokens, X cols x tokens, dX cols x tokens, tokens a multiple of 8.


def _vnm_arrays(values: Optional[torch.Tensor], meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
                vnm: str, dtype: torch.dtype, what: str) -> VnmLayout:
    """W's layout, after checking that its arrays hold a rows x cols vnm matrix of dtype
    (values may be None: vnm_dw reads only meta and index)."""
    _name(dtype, what)
    lay, sizes = _vnm_plan(rows, cols, vnm, dtype)
    nv = values.numel() if values is not None else sizes[0]
    if (nv, meta.numel(), index.numel()) != sizes:
        raise ValueError(f"{what}: values/meta/index do not hold a {rows}x{cols} {vnm} matrix (see vnm_sizes)")
    if values is not None and values.dtype != dtype:
        raise ValueError(f"{what}: values are {values.dtype} but the dense operand is {dtype}")
    if meta.dtype != torch.int32 or index.dtype != torch.int32:
        raise ValueError(f"{what}: meta and index must be int32, got {meta.dtype} and {index.dtype}")
    return lay


def _tokens_operand(t: torch.Tensor, rows: int, what: str) -> None:
    if t.dim() != 2 or t.shape[0] != rows:
        raise ValueError(f"{what}: expected {rows} x tokens (tokens contiguous), got shape {tuple(t.shape)}")
    if t.shape[1] % 8:
        raise ValueError(f"{what}: tokens = {t.shape[1]} must be a multiple of 8 (pad with zeros)")


def _dw_checks(dy, x, meta, index, rows, cols, vnm):
    _tokens_operand(dy, rows, "vnm_dw: dy")
    _tokens_operand(x, cols, "vnm_dw: x")
    if x.dtype != dy.dtype or x.shape[1] != dy.shape[1]:
        raise ValueError(f"vnm_dw: x {tuple(x.shape)} {x.dtype} does not fit dy {tuple(dy.shape)} {dy.dtype} "
                         "(expected the same tokens and dtype)")
    return _vnm_arrays(None, meta, index, rows, cols, vnm, dy.dtype, "vnm_dw")


def _vnm_dw(dy: torch.Tensor, x: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
           vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The weight gradient dW = dY . X^T at W's kept slots, written in W's value layout (one
    element per slot of ``values``, 0 in padding slots), so it is ``values``' gradient as is:
    dy rows x tokens, x cols x tokens (f16/bf16), fp32 accumulation on tensor cores; out_dtype
    (default dy's) f16, bf16 or f32. Reads W's meta and index only."""
    _check(dy, "vnm_dw: dy", 2)
    _check(x, "vnm_dw: x", 2)
    _check(meta, "vnm_dw: meta", 1)
    _check(index, "vnm_dw: index", 1)
    lay = _dw_checks(dy, x, meta, index, rows, cols, vnm)
    out_dt = out_dtype or dy.dtype
    tokens = dy.shape[1]
    p = _dw_problem(rows, cols, vnm, dy.dtype, tokens, out_dt)
    dw = torch.empty(lay.values_bytes // 2, dtype=out_dt, device=dy.device)
    handle, stream = _ctx_stream(dy)
    w = VnmDevice(lay, 0, meta.data_ptr(), index.data_ptr())
    check(_VNM_DW(handle, _byref(p), _byref(w), dy.data_ptr(), x.data_ptr(), dw.data_ptr(), stream), "sj_vnm_dw")
    return dw


vnm_dw = torch.library.custom_op("sparsejit::vnm_dw", _vnm_dw, mutates_args=())


@vnm_dw.register_fake
def _(dy, x, meta, index, rows, cols, vnm, out_dtype=None):
    lay = _dw_checks(dy, x, meta, index, rows, cols, vnm)
    return dy.new_empty(lay.values_bytes // 2, dtype=out_dtype or dy.dtype)


def _dx_checks(values, meta, index, dy, rows, cols, vnm):
    _tokens_operand(dy, rows, "vnm_dx_exact: dy")
    return _vnm_arrays(values, meta, index, rows, cols, vnm, dy.dtype, "vnm_dx_exact")


def _vnm_dx_exact(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, dy: torch.Tensor, rows: int,
                 cols: int, vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The exact input gradient dX = W^T . dY (cols x tokens, out_dtype, default dy's): the dense
    masked W^T into a workspace from torch's allocator, then the dense tensor-core gemm."""
    _check(values, "vnm_dx_exact: values", 1)
    _check(meta, "vnm_dx_exact: meta", 1)
    _check(index, "vnm_dx_exact: index", 1)
    _check(dy, "vnm_dx_exact: dy", 2)
    lay = _dx_checks(values, meta, index, dy, rows, cols, vnm)
    out_dt = out_dtype or dy.dtype
    _name(out_dt, "vnm_dx_exact: out_dtype", _ALL)
    tokens = dy.shape[1]
    wt = torch.empty(cols * rows, dtype=dy.dtype, device=dy.device)
    dx = torch.empty(cols, tokens, dtype=out_dt, device=dy.device)
    handle, stream = _ctx_stream(dy)
    w = VnmDevice(lay, values.data_ptr(), meta.data_ptr(), index.data_ptr())
    check(_VNM_DX_EXACT(handle, _byref(w), wt.data_ptr(), dy.data_ptr(), dx.data_ptr(), tokens, _SJ_DTYPE[out_dt],
                        stream), "sj_vnm_dx_exact")
    return dx


vnm_dx_exact = torch.library.custom_op("sparsejit::vnm_dx_exact", _vnm_dx_exact, mutates_args=())


@vnm_dx_exact.register_fake
def _(values, meta, index, dy, rows, cols, vnm, out_dtype=None):
    _dx_checks(values, meta, index, dy, rows, cols, vnm)
    return dy.new_empty(cols, dy.shape[1], dtype=out_dtype or dy.dtype)


def _vnm_double_prune(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
                     vnm: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """WT2, the double-pruned copy of W^T (cols x rows, the same V:N:M; SLoPe): W^T re-pruned by
    magnitude along its own rows, as (values, meta, index) for vnm_spmm(..., cols, rows, vnm).
    It keeps about 4/M of W^T's non-zeros: dX through it is far from exact beyond 2:4."""
    _check(values, "vnm_double_prune: values", 1)
    _check(meta, "vnm_double_prune: meta", 1)
    _check(index, "vnm_double_prune: index", 1)
    lay = _vnm_arrays(values, meta, index, rows, cols, vnm, values.dtype, "vnm_double_prune")
    lt, (nv, nm, ni), need = _double_prune_plan(rows, cols, vnm, values.dtype)
    ws = torch.empty(need, dtype=torch.uint8, device=values.device)
    v2 = torch.empty(nv, dtype=values.dtype, device=values.device)
    m2 = torch.empty(nm, dtype=torch.int32, device=values.device)
    i2 = torch.empty(ni, dtype=torch.int32, device=values.device)
    handle, stream = _ctx_stream(values)
    w = VnmDevice(lay, values.data_ptr(), meta.data_ptr(), index.data_ptr())
    wt2 = VnmDevice(lt, v2.data_ptr(), m2.data_ptr(), i2.data_ptr())
    check(_VNM_DOUBLE_PRUNE(handle, _byref(w), _byref(wt2), ws.data_ptr(), need, stream), "sj_vnm_double_prune")
    return v2, m2, i2


vnm_double_prune = torch.library.custom_op("sparsejit::vnm_double_prune", _vnm_double_prune, mutates_args=())


@vnm_double_prune.register_fake
def _(values, meta, index, rows, cols, vnm):
    _vnm_arrays(values, meta, index, rows, cols, vnm, values.dtype, "vnm_double_prune")
    nv, nm, ni = vnm_sizes(cols, rows, vnm, values.dtype)
    return values.new_empty(nv), meta.new_empty(nm), index.new_empty(ni)


# ---------------------------------------------------------------- gradual magnitude pruning


def gmp_schedule(vnm: str, final_sparsity: Optional[float] = None, initial_sparsity: float = 0.0,
                 start_step: int = 0, interval: int = 1, n_steps: int = 1) -> GmpSchedule:
    """Zhu and Gupta's cubic schedule ending in the V:2:M of vnm ("128:2:8"); final_sparsity
    defaults to the pattern's, 1 - 2/M (sparsejit.h, sj_gmp_schedule)."""
    v, n, m = (int(p) for p in vnm.split(":"))
    if n != 2:
        raise ValueError(f"gmp_schedule: vnm {vnm!r}: the pattern is V:2:M")
    s = GmpSchedule(initial_sparsity, 1.0 - 2.0 / m if final_sparsity is None else final_sparsity, start_step,
                    interval, n_steps, v, m)
    gmp_target(s, 0)  # checks the schedule, naming the bad field
    return s


def gmp_target(schedule: GmpSchedule, step: int) -> GmpTarget:
    """What the schedule asks at step: prune_now, sparsity, pattern_m (0: no pattern yet)."""
    t = GmpTarget()
    call("sj_gmp_target_at", _byref(schedule), step, _byref(t))
    return t


def _gmp_prune(w: torch.Tensor, mask: torch.Tensor, step: int, initial_sparsity: float, final_sparsity: float,
              start_step: int, interval: int, n_steps: int, v: int, m: int) -> None:
    """One GMP step on the device, in place: w (rows x cols, f16/bf16) and mask (uint8, 1 = kept)
    pruned by magnitude as sj_gmp_prune_host does (nothing unless step is a pruning step); the
    workspace from torch's allocator."""
    _check(w, "gmp_prune: w", 2)
    _check(mask, "gmp_prune: mask", 2)
    if mask.dtype != torch.uint8 or mask.shape != w.shape:
        raise ValueError(f"gmp_prune: mask is {tuple(mask.shape)} {mask.dtype}; expected {tuple(w.shape)} uint8")
    _name(w.dtype, "gmp_prune: w")
    rows, cols = w.shape
    s, need = _gmp_plan(initial_sparsity, final_sparsity, start_step, interval, n_steps, v, m, w.dtype, rows, cols)
    ws = torch.empty(need, dtype=torch.uint8, device=w.device)
    handle, stream = _ctx_stream(w)
    check(_GMP_PRUNE(handle, _byref(s), step, _SJ_DTYPE[w.dtype], rows, cols, w.data_ptr(), cols, mask.data_ptr(),
                     cols, ws.data_ptr(), need, stream), "sj_gmp_prune")


gmp_prune = torch.library.custom_op("sparsejit::gmp_prune", _gmp_prune, mutates_args=("w", "mask"))


@gmp_prune.register_fake
def _(w, mask, step, initial_sparsity, final_sparsity, start_step, interval, n_steps, v, m):
    return None


# ---------------------------------------------------------------- TwELL


def _weights_fit(what: str, dtype: torch.dtype, d_ff: int, d_model: int, **weights: torch.Tensor) -> None:
    """Refuses an FFN weight that is not d_ff x d_model of dtype, naming it."""
    for name, t in weights.items():
        if t.dtype != dtype or tuple(t.shape) != (d_ff, d_model):
            raise ValueError(f"{what}: {name} is {tuple(t.shape)} {t.dtype}; expected ({d_ff}, {d_model}) {dtype}")


def _twell_gate(x: torch.Tensor, wg_t: torch.Tensor, tile: int, capacity: int,
               sparsity: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H = relu(x . Wg) as TwELL (entries int32 [tokens, tiles, C], counts int32 [tokens, tiles],
    spill [tokens, d_ff] of x's dtype): x tokens x d_model, wg_t d_ff x d_model. sparsity: the
    activations' expected fraction of zeros, which picks the tuned kernel."""
    _check(x, "twell_gate: x", 2)
    _check(wg_t, "twell_gate: wg_t", 2)
    _name(x.dtype, "twell_gate: x")
    if wg_t.dtype != x.dtype or wg_t.shape[1] != x.shape[1]:
        raise ValueError(f"twell_gate: wg_t {tuple(wg_t.shape)} {wg_t.dtype} does not fit x "
                         f"{tuple(x.shape)} {x.dtype} (expected d_ff x d_model of x's dtype)")
    tokens, d_model = x.shape
    d_ff = wg_t.shape[0]
    lay, p = _twell_gate_plan(tokens, d_ff, tile, capacity, x.dtype, d_model, sparsity)
    entries = torch.empty(tokens, lay.n_tiles, capacity, dtype=torch.int32, device=x.device)
    counts = torch.empty(tokens, lay.n_tiles, dtype=torch.int32, device=x.device)
    spill = torch.empty(tokens, d_ff, dtype=x.dtype, device=x.device)
    handle, stream = _ctx_stream(x)
    h = TwellDevice(lay, entries.data_ptr(), counts.data_ptr(), spill.data_ptr())
    check(_TWELL_GATE(handle, _byref(p), x.data_ptr(), wg_t.data_ptr(), _byref(h), stream), "sj_twell_gate")
    return entries, counts, spill


twell_gate = torch.library.custom_op("sparsejit::twell_gate", _twell_gate, mutates_args=())


@twell_gate.register_fake
def _(x, wg_t, tile, capacity, sparsity):
    n_tiles = -(-wg_t.shape[0] // tile)
    return (x.new_empty(x.shape[0], n_tiles, capacity, dtype=torch.int32),
            x.new_empty(x.shape[0], n_tiles, dtype=torch.int32), x.new_empty(x.shape[0], wg_t.shape[0]))


def _twell_ffn(x: torch.Tensor, entries: torch.Tensor, counts: torch.Tensor, spill: torch.Tensor,
              wu_t: torch.Tensor, wd: torch.Tensor, tile: int, capacity: int, sparsity: float,
              out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """y = (H (.) (x . Wu)) . Wd with H the TwELL of twell_gate; wu_t and wd d_ff x d_model. The
    pairs kernels' workspace comes from torch's allocator (sj_twell_ffn_ws)."""
    _check(x, "twell_ffn: x", 2)
    _check(entries, "twell_ffn: entries", 3)
    _check(counts, "twell_ffn: counts", 2)
    _check(spill, "twell_ffn: spill", 2)
    _check(wu_t, "twell_ffn: wu_t", 2)
    _check(wd, "twell_ffn: wd", 2)
    dt = x.dtype
    _name(dt, "twell_ffn: x")
    tokens, d_model = x.shape
    d_ff = wu_t.shape[0]
    _weights_fit("twell_ffn", dt, d_ff, d_model, wu_t=wu_t, wd=wd)
    out_dt = out_dtype or dt
    lay, shapes, p, need = _twell_ffn_plan(tokens, d_ff, tile, capacity, dt, d_model, out_dt, sparsity)
    if (entries.shape, counts.shape, spill.shape) != shapes:
        raise ValueError("twell_ffn: entries/counts/spill do not hold the TwELL of "
                         f"{tokens} x {d_ff} at {tile}:{capacity} (see twell_gate)")
    y = torch.empty(tokens, d_model, dtype=out_dt, device=x.device)
    ws = torch.empty(need, dtype=torch.uint8, device=x.device)
    handle, stream = _ctx_stream(x)
    h = TwellDevice(lay, entries.data_ptr(), counts.data_ptr(), spill.data_ptr())
    check(_TWELL_FFN(handle, _byref(p), x.data_ptr(), _byref(h), wu_t.data_ptr(), wd.data_ptr(), y.data_ptr(),
                     ws.data_ptr(), need, stream), "sj_twell_ffn_ws")
    return y


twell_ffn = torch.library.custom_op("sparsejit::twell_ffn", _twell_ffn, mutates_args=())


@twell_ffn.register_fake
def _(x, entries, counts, spill, wu_t, wd, tile, capacity, sparsity, out_dtype=None):
    return x.new_empty(x.shape[0], x.shape[1], dtype=out_dtype or x.dtype)


# ---------------------------------------------------------------- hybrid activations (training)
# H = relu(x . Wg) (tokens x d_ff) in the hybrid format of include/sparsejit.h: per token up to
# W non-zeros in an ELL row, an overflow row's rest in a row of a dense backup of backup_rows
# rows. Its arrays are torch tensors (HYBRID_ARRAYS, sj_hybrid_device's order) that hybrid_gate
# returns and the FFN ops take as ``h``; the backup's capacity is the caller's argument, so every
# output shape follows from the arguments and the fakes need no data. Whether the backup held
# every overflow row is the counter's to say (h[6] > backup_rows: run the gate again with a
# larger backup); sparsejit.nn.SparseReLUFFN does that.

#: The arrays of a hybrid matrix in sj_hybrid_device's order.
HYBRID_ARRAYS = ("values", "columns", "nnz", "slot", "owner", "backup", "counter")
_OP_HYBRID_FFN_FWD, _OP_HYBRID_FFN_DX, _OP_HYBRID_FFN_DW = 10, 11, 12  # sj_op (include/sparsejit.h)


def hybrid_shapes(tokens: int, d_ff: int, width: int, backup_rows: int,
                  dtype: torch.dtype) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
    """(shape, dtype) of each of HYBRID_ARRAYS: values (tokens x W, dtype), columns (tokens x W,
    int16 holding the uint16 column), nnz and slot (tokens, int32), owner (backup_rows, int32),
    backup (backup_rows x d_ff, dtype), counter (1, int32: the overflow rows, placed or not)."""
    return (((tokens, width), dtype), ((tokens, width), torch.int16), ((tokens,), torch.int32),
            ((tokens,), torch.int32), ((backup_rows,), torch.int32), ((backup_rows, d_ff), dtype),
            ((1,), torch.int32))


@functools.lru_cache(maxsize=_PLANS)
def _hybrid_layout(tokens: int, d_ff: int, width: int, backup_rows: int, dtype: torch.dtype) -> HybridLayout:
    lay = HybridLayout()
    call("sj_hybrid_layout_init", _byref(lay), _SJ_DTYPE[dtype], tokens, d_ff, width, backup_rows)
    return lay


def _with_law(p: Problem, sparsity: float) -> Problem:
    """p with the activations' expected fraction of zeros (which picks the tuned kernel), checked."""
    p.twell_sparsity = sparsity
    call("sj_problem_validate", _byref(p))
    return p


@functools.lru_cache(maxsize=_PLANS)
def _hybrid_gate_plan(tokens: int, d_ff: int, width: int, backup_rows: int, dtype: torch.dtype, d_model: int,
                      sparsity: float) -> tuple[HybridLayout, Problem]:
    lay = _hybrid_layout(tokens, d_ff, width, backup_rows, dtype)
    p = Problem()
    call("sj_hybrid_gate_problem", _byref(lay), d_model, _byref(p))
    return lay, _with_law(p, sparsity)


@functools.lru_cache(maxsize=_PLANS)
def _hybrid_ffn_plan(op: int, tokens: int, d_ff: int, width: int, backup_rows: int, dtype: torch.dtype,
                     d_model: int, out_dtype: torch.dtype, sparsity: float) -> tuple[HybridLayout, Problem]:
    """The layout and the problem of hybrid-ffn-fwd, hybrid-ffn-dx or hybrid-ffn-dw (op, an sj_op)."""
    _name(out_dtype, "hybrid_ffn: out_dtype", _ALL)
    lay = _hybrid_layout(tokens, d_ff, width, backup_rows, dtype)
    p = Problem()
    call("sj_hybrid_ffn_problem", _byref(lay), op, d_model, _byref(p))
    p.out_dtype = _SJ_DTYPE[out_dtype]
    return lay, _with_law(p, sparsity)


def _hybrid_workspace(handle, p: Problem, lay: HybridLayout, device: torch.device) -> torch.Tensor:
    """The workspace of the hybrid FFN kernel that p resolves to now (sj_hybrid_ffn_workspace: the
    forced config, else the tuned winner, else the default; a table lookup once the kernel is
    loaded, so it is asked every call and follows sj_set_config and new winners) as a uint8
    tensor from torch's caching allocator, empty when the kernel needs none. Keep it until the
    launch is queued: freed after that, it goes back stream-ordered."""
    need = ctypes.c_size_t()
    check(_HYBRID_FFN_WORKSPACE(handle, _byref(p), _byref(lay), _byref(need)), "sj_hybrid_ffn_workspace")
    return torch.empty(need.value, dtype=torch.uint8, device=device)


def _gate_checks(x: torch.Tensor, wg_t: torch.Tensor, width: int, backup_rows: int,
                 sparsity: float) -> tuple[HybridLayout, Problem]:
    """The plan of a gate call after checking its operands (the fake's checks too)."""
    _name(x.dtype, "hybrid_gate: x")
    if x.dim() != 2 or x.shape[1] % 8:
        raise ValueError(f"hybrid_gate: x is {tuple(x.shape)}; expected tokens x d_model with d_model a multiple "
                         "of 8 (pad with zeros)")
    if wg_t.dim() != 2 or wg_t.dtype != x.dtype or wg_t.shape[1] != x.shape[1]:
        raise ValueError(f"hybrid_gate: wg_t {tuple(wg_t.shape)} {wg_t.dtype} does not fit x "
                         f"{tuple(x.shape)} {x.dtype} (expected d_ff x d_model of x's dtype)")
    return _hybrid_gate_plan(x.shape[0], wg_t.shape[0], width, backup_rows, x.dtype, x.shape[1], sparsity)


def _hybrid_gate(x: torch.Tensor, wg_t: torch.Tensor, width: int, backup_rows: int,
                 sparsity: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                           torch.Tensor, torch.Tensor]:
    """H = relu(x . Wg) in the hybrid format, the row partition decided on the GPU (sj_hybrid_gate:
    the gate GEMM on tensor cores, its epilogue writing the ELL and claiming backup rows with an
    atomic counter): x tokens x d_model (d_model a multiple of 8), wg_t d_ff x d_model (d_ff up to
    65536); width W: 1..d_ff; backup_rows: 0..tokens; sparsity: the activations' expected fraction
    of zeros in [0, 1), which picks the tuned kernel. Returns HYBRID_ARRAYS (hybrid_shapes).
    Asynchronous: when counter > backup_rows the surplus overflow rows are unplaced and the FFN
    ops give NaN rows for them; run it again with backup_rows >= counter (a read: synchronises)."""
    _check(x, "hybrid_gate: x", 2)
    _check(wg_t, "hybrid_gate: wg_t", 2)
    lay, p = _gate_checks(x, wg_t, width, backup_rows, sparsity)
    h = tuple(torch.empty(shape, dtype=dt, device=x.device)
              for shape, dt in hybrid_shapes(x.shape[0], wg_t.shape[0], width, backup_rows, x.dtype))
    handle, stream = _ctx_stream(x)
    check(_HYBRID_GATE(handle, _byref(p), x.data_ptr(), wg_t.data_ptr(), _byref(_hybrid_device(lay, h)), stream),
          "sj_hybrid_gate")
    return h


hybrid_gate = torch.library.custom_op("sparsejit::hybrid_gate", _hybrid_gate, mutates_args=())


@hybrid_gate.register_fake
def _(x, wg_t, width, backup_rows, sparsity):
    _gate_checks(x, wg_t, width, backup_rows, sparsity)
    return tuple(x.new_empty(shape, dtype=dt) for shape, dt in hybrid_shapes(
        x.shape[0], wg_t.shape[0], width, backup_rows, x.dtype))


def _hybrid_device(lay: HybridLayout, h) -> HybridDevice:
    return HybridDevice(lay, *(t.data_ptr() for t in h))


def _hybrid_arrays(h, tokens: int, d_ff: int, dtype: torch.dtype, what: str) -> tuple[int, int]:
    """(W, backup_rows) of h after checking that its arrays are those of hybrid_gate for tokens x d_ff."""
    if len(h) != len(HYBRID_ARRAYS):
        raise ValueError(f"{what}: h holds {len(h)} tensors; expected hybrid_gate's {len(HYBRID_ARRAYS)} "
                         f"({', '.join(HYBRID_ARRAYS)})")
    width = h[0].shape[-1] if h[0].dim() else 0
    backup_rows = h[5].shape[0] if h[5].dim() else 0
    for name, t, (shape, dt) in zip(HYBRID_ARRAYS, h, hybrid_shapes(tokens, d_ff, width, backup_rows, dtype)):
        if tuple(t.shape) != shape or t.dtype != dt:
            raise ValueError(f"{what}: h.{name} is {tuple(t.shape)} {t.dtype}; expected {shape} {dt} "
                             f"(hybrid_gate's arrays for {tokens} tokens x d_ff {d_ff})")
    return width, backup_rows


def _pairs_fit(what: str, width: int, backup_rows: int, d_ff: int, tokens: int, dtype: torch.dtype,
               **pairs: torch.Tensor) -> None:
    """Per-pair arrays: name_values tokens x W, name_backup backup_rows x d_ff, of dtype."""
    for name, t in pairs.items():
        shape = (tokens, width) if name.endswith("values") else (backup_rows, d_ff)
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"{what}: {name} is {tuple(t.shape)} {t.dtype}; expected {shape} {dtype} (h's pairs)")


def _fwd_checks(x, h, wu_t, wd, sparsity, out_dtype) -> tuple[HybridLayout, Problem]:
    """The plan of a hybrid_ffn_fwd call after checking its operands (the fake's checks too)."""
    _name(x.dtype, "hybrid_ffn_fwd: x")
    if x.dim() != 2:
        raise ValueError(f"hybrid_ffn_fwd: x is {tuple(x.shape)}; expected tokens x d_model")
    (tokens, d_model), d_ff = x.shape, wu_t.shape[0]
    _weights_fit("hybrid_ffn_fwd", x.dtype, d_ff, d_model, wu_t=wu_t, wd=wd)
    width, backup_rows = _hybrid_arrays(h, tokens, d_ff, x.dtype, "hybrid_ffn_fwd")
    return _hybrid_ffn_plan(_OP_HYBRID_FFN_FWD, tokens, d_ff, width, backup_rows, x.dtype, d_model,
                            out_dtype or x.dtype, sparsity)


def _hybrid_ffn_fwd(x: torch.Tensor, h: list[torch.Tensor], wu_t: torch.Tensor, wd: torch.Tensor, sparsity: float,
                    out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training forward over hybrid_gate's H (sj_hybrid_ffn_fwd, CUDA cores, one CTA a token):
    (y, u_values, u_backup) with u = x[t] . WuT[j] at H's active pairs only (a sampled product;
    u_values tokens x W at the pairs' ELL slots, u_backup backup_rows x d_ff at their backup
    positions, x's dtype, nothing else of them written) and y = sum_j a u Wd[j] (tokens x
    d_model, out_dtype, default x's). wu_t, wd d_ff x d_model. What the backward needs is x, H
    and u. A kernel that needs a workspace (the tensor-core variant, ALGO=2, if tuned or forced)
    gets it from torch's caching allocator (sj_hybrid_ffn_workspace's bytes), as do the dx and
    the dw."""
    _check(x, "hybrid_ffn_fwd: x", 2)
    _check(wu_t, "hybrid_ffn_fwd: wu_t", 2)
    _check(wd, "hybrid_ffn_fwd: wd", 2)
    lay, p = _fwd_checks(x, h, wu_t, wd, sparsity, out_dtype)
    for name, t in zip(HYBRID_ARRAYS, h):
        _check(t, f"hybrid_ffn_fwd: h.{name}", t.dim())
    y = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    u_values = torch.empty(x.shape[0], lay.width, dtype=x.dtype, device=x.device)
    u_backup = torch.empty(lay.backup_rows, lay.cols, dtype=x.dtype, device=x.device)
    handle, stream = _ctx_stream(x)
    work = _hybrid_workspace(handle, p, lay, x.device)
    check(_HYBRID_FFN_FWD(handle, _byref(p), x.data_ptr(), _byref(_hybrid_device(lay, h)), wu_t.data_ptr(),
                          wd.data_ptr(), y.data_ptr(), u_values.data_ptr(), u_backup.data_ptr(), work.data_ptr(),
                          work.numel(), stream), "sj_hybrid_ffn_fwd")
    return y, u_values, u_backup


hybrid_ffn_fwd = torch.library.custom_op("sparsejit::hybrid_ffn_fwd", _hybrid_ffn_fwd, mutates_args=())


@hybrid_ffn_fwd.register_fake
def _(x, h, wu_t, wd, sparsity, out_dtype=None):
    lay, _ = _fwd_checks(x, h, wu_t, wd, sparsity, out_dtype)
    return (x.new_empty(x.shape, dtype=out_dtype or x.dtype), x.new_empty(x.shape[0], lay.width),
            x.new_empty(lay.backup_rows, lay.cols))


def _dx_hybrid_checks(dy, h, u_values, u_backup, wg_t, wu_t, wd, sparsity,
                      out_dtype) -> tuple[HybridLayout, Problem]:
    """The plan of a hybrid_ffn_dx call after checking its operands (the fake's checks too)."""
    _name(dy.dtype, "hybrid_ffn_dx: dy")
    if dy.dim() != 2:
        raise ValueError(f"hybrid_ffn_dx: dy is {tuple(dy.shape)}; expected tokens x d_model")
    (tokens, d_model), d_ff = dy.shape, wd.shape[0]
    _weights_fit("hybrid_ffn_dx", dy.dtype, d_ff, d_model, wg_t=wg_t, wu_t=wu_t, wd=wd)
    width, backup_rows = _hybrid_arrays(h, tokens, d_ff, dy.dtype, "hybrid_ffn_dx")
    _pairs_fit("hybrid_ffn_dx", width, backup_rows, d_ff, tokens, dy.dtype, u_values=u_values, u_backup=u_backup)
    return _hybrid_ffn_plan(_OP_HYBRID_FFN_DX, tokens, d_ff, width, backup_rows, dy.dtype, d_model,
                            out_dtype or dy.dtype, sparsity)


def _hybrid_ffn_dx(dy: torch.Tensor, h: list[torch.Tensor], u_values: torch.Tensor, u_backup: torch.Tensor,
                   wg_t: torch.Tensor, wu_t: torch.Tensor, wd: torch.Tensor, sparsity: float,
                   out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                     torch.Tensor, torch.Tensor]:
    """The backward through the activations (sj_hybrid_ffn_dx, CUDA cores, one CTA a token), from
    dy (tokens x d_model) and what hybrid_ffn_fwd left (H, u): per active pair the sampled
    dh = dy[t] . Wd[j], du = dh a, dg = dh u, as fp32 (dg_values, du_values tokens x W;
    dg_backup, du_backup backup_rows x d_ff; at the pairs' positions only), and
    dx = sum_j dg WgT[j] + du WuT[j] (tokens x d_model, out_dtype, default dy's). Returns
    (dx, dg_values, dg_backup, du_values, du_backup); the weight gradients are sums of these
    compact values times rows of x and dy (hybrid_ffn_dw)."""
    for t, what in ((dy, "dy"), (u_values, "u_values"), (u_backup, "u_backup"), (wg_t, "wg_t"), (wu_t, "wu_t"),
                    (wd, "wd")):
        _check(t, f"hybrid_ffn_dx: {what}", 2)
    lay, p = _dx_hybrid_checks(dy, h, u_values, u_backup, wg_t, wu_t, wd, sparsity, out_dtype)
    for name, t in zip(HYBRID_ARRAYS, h):
        _check(t, f"hybrid_ffn_dx: h.{name}", t.dim())
    dx = torch.empty(dy.shape, dtype=out_dtype or dy.dtype, device=dy.device)
    dg_values, du_values = (torch.empty(dy.shape[0], lay.width, dtype=torch.float32, device=dy.device)
                            for _ in range(2))
    dg_backup, du_backup = (torch.empty(lay.backup_rows, lay.cols, dtype=torch.float32, device=dy.device)
                            for _ in range(2))
    handle, stream = _ctx_stream(dy)
    work = _hybrid_workspace(handle, p, lay, dy.device)
    check(_HYBRID_FFN_DX(handle, _byref(p), dy.data_ptr(), _byref(_hybrid_device(lay, h)), u_values.data_ptr(),
                         u_backup.data_ptr(), wg_t.data_ptr(), wu_t.data_ptr(), wd.data_ptr(), dx.data_ptr(),
                         dg_values.data_ptr(), dg_backup.data_ptr(), du_values.data_ptr(), du_backup.data_ptr(),
                         work.data_ptr(), work.numel(), stream), "sj_hybrid_ffn_dx")
    return dx, dg_values, dg_backup, du_values, du_backup


hybrid_ffn_dx = torch.library.custom_op("sparsejit::hybrid_ffn_dx", _hybrid_ffn_dx, mutates_args=())


@hybrid_ffn_dx.register_fake
def _(dy, h, u_values, u_backup, wg_t, wu_t, wd, sparsity, out_dtype=None):
    lay, _ = _dx_hybrid_checks(dy, h, u_values, u_backup, wg_t, wu_t, wd, sparsity, out_dtype)
    ell, bk = (dy.shape[0], lay.width), (lay.backup_rows, lay.cols)
    f32 = torch.float32
    return (dy.new_empty(dy.shape, dtype=out_dtype or dy.dtype), dy.new_empty(ell, dtype=f32),
            dy.new_empty(bk, dtype=f32), dy.new_empty(ell, dtype=f32), dy.new_empty(bk, dtype=f32))



def _hybrid_dw_checks(x, dy, h, u_values, u_backup, dg_values, dg_backup, du_values, du_backup, sparsity,
               out_dtype) -> tuple[HybridLayout, Problem]:
    """The plan of a hybrid_ffn_dw call after checking its operands (the fake's checks too)."""
    _name(x.dtype, "hybrid_ffn_dw: x")
    if x.dim() != 2 or dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"hybrid_ffn_dw: x {tuple(x.shape)} {x.dtype} and dy {tuple(dy.shape)} {dy.dtype}: expected "
                         "both tokens x d_model of one dtype")
    (tokens, d_model), d_ff = x.shape, h[5].shape[1] if h[5].dim() == 2 else 0
    width, backup_rows = _hybrid_arrays(h, tokens, d_ff, x.dtype, "hybrid_ffn_dw")
    _pairs_fit("hybrid_ffn_dw", width, backup_rows, d_ff, tokens, x.dtype, u_values=u_values, u_backup=u_backup)
    _pairs_fit("hybrid_ffn_dw", width, backup_rows, d_ff, tokens, torch.float32, dg_values=dg_values,
               dg_backup=dg_backup, du_values=du_values, du_backup=du_backup)
    return _hybrid_ffn_plan(_OP_HYBRID_FFN_DW, tokens, d_ff, width, backup_rows, x.dtype, d_model,
                            out_dtype or x.dtype, sparsity)


def _hybrid_ffn_dw(x: torch.Tensor, dy: torch.Tensor, h: list[torch.Tensor], u_values: torch.Tensor,
                   u_backup: torch.Tensor, dg_values: torch.Tensor, dg_backup: torch.Tensor, du_values: torch.Tensor,
                   du_backup: torch.Tensor, sparsity: float,
                   out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three weight gradients from the compact per-pair values (sj_hybrid_ffn_dw): over H's
    active pairs (t, j) only, dWgT[j] = sum_t dg x[t], dWuT[j] = sum_t du x[t], dWd[j] = sum_t a u
    dy[t] (d_ff x d_model each, out_dtype, default x's), fp32 sums in token order (deterministic).
    x, dy tokens x d_model; h hybrid_gate's arrays; u_* hybrid_ffn_fwd's, dg_*, du_* hybrid_ffn_dx's.
    The transpose of H's pairs (and a BUSY > 0 config's busy units' buffers) goes into a workspace
    from torch's caching allocator (sj_hybrid_ffn_workspace's bytes for the kernel the call
    resolves, freed when the call returns: stream-ordered). An incomplete H (counter >
    backup_rows) gives NaN gradients. Returns (dwg_t, dwu_t, dwd)."""
    pairs = (u_values, u_backup, dg_values, dg_backup, du_values, du_backup)
    for t, what in ((x, "x"), (dy, "dy")) + tuple(zip(pairs, ("u_values", "u_backup", "dg_values", "dg_backup",
                                                            "du_values", "du_backup"))):
        _check(t, f"hybrid_ffn_dw: {what}", 2)
    lay, p = _hybrid_dw_checks(x, dy, h, *pairs, sparsity, out_dtype)
    for name, t in zip(HYBRID_ARRAYS, h):
        _check(t, f"hybrid_ffn_dw: h.{name}", t.dim())
    grads = tuple(torch.empty(lay.cols, x.shape[1], dtype=out_dtype or x.dtype, device=x.device) for _ in range(3))
    handle, stream = _ctx_stream(x)
    work = _hybrid_workspace(handle, p, lay, x.device)
    check(_HYBRID_FFN_DW(handle, _byref(p), x.data_ptr(), dy.data_ptr(), _byref(_hybrid_device(lay, h)),
                         *(t.data_ptr() for t in pairs), *(g.data_ptr() for g in grads), work.data_ptr(), work.numel(),
                         stream), "sj_hybrid_ffn_dw")
    return grads


hybrid_ffn_dw = torch.library.custom_op("sparsejit::hybrid_ffn_dw", _hybrid_ffn_dw, mutates_args=())


@hybrid_ffn_dw.register_fake
def _(x, dy, h, u_values, u_backup, dg_values, dg_backup, du_values, du_backup, sparsity, out_dtype=None):
    lay, _ = _hybrid_dw_checks(x, dy, h, u_values, u_backup, dg_values, dg_backup, du_values, du_backup, sparsity,
                               out_dtype)
    return tuple(x.new_empty(lay.cols, x.shape[1], dtype=out_dtype or x.dtype) for _ in range(3))


# ---------------------------------------------------------------- eager calls without the dispatcher

#: The ops' Python bodies under the torch.ops names: the same checks, allocations and launch as
#: torch.ops.sparsejit.<name>, without the custom-op dispatch around them (tens of us of host
#: time per call; bench/torch_vnm_bench.py's launch cost measures both).
EAGER = SimpleNamespace(**{n: globals()["_" + n] for n in (
    "vnm_compress", "vnm_spmm", "vnm_spmm_lowrank", "vnm_dw", "vnm_dx_exact", "vnm_double_prune", "gmp_prune",
    "twell_gate", "twell_ffn", "hybrid_gate", "hybrid_ffn_fwd", "hybrid_ffn_dx", "hybrid_ffn_dw")})


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def ops_for(*tensors: torch.Tensor):
    """Where sparsejit's modules take their ops from for these operands: EAGER in plain eager
    mode, torch.ops.sparsejit whenever something must see the op itself - torch.compile or
    torch.export tracing, FX tracing (make_fx), an active TorchDispatchMode (fake tensors, flop
    counters), or a tensor subclass other than Parameter."""
    if (torch.compiler.is_compiling() or torch.fx._symbolic_trace.is_fx_tracing()
            or torch._C._len_torch_dispatch_stack() > 0 or any(type(t) not in _PLAIN for t in tensors)):
        return torch.ops.sparsejit
    return EAGER
