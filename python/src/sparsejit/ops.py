"""The PyTorch ops: torch.library custom ops ``torch.ops.sparsejit.{vnm_compress, vnm_spmm,
vnm_dw, vnm_dx_exact, vnm_double_prune, gmp_prune, twell_gate, twell_ffn}`` with fake (meta) implementations, so torch.compile traces them without a
GPU and CUDA graphs capture them. Each runs on its tensors' device and torch's current stream,
with outputs and workspaces from torch's caching allocator; none allocates behind torch's back
or waits for the device (the first call of a shape loads its kernel: make it before capture).
One sparsejit context per device, on the primary context torch uses. Needs torch."""
from __future__ import annotations

import ctypes
from typing import Optional

import torch

from sparsejit._lib import GmpSchedule, GmpTarget, Problem, TwellDevice, VnmDevice, VnmLayout, call
from sparsejit.context import Context
from sparsejit.formats import SELECT, twell_layout, vnm_layout
from sparsejit.problem import workspace_size

_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def _name(dtype: torch.dtype, what: str, allowed=(torch.float16, torch.bfloat16)) -> str:
    if dtype not in allowed:
        raise ValueError(f"{what}: dtype {dtype} is not supported; expected one of {list(allowed)}")
    return _DTYPES[dtype]


def _check(t: torch.Tensor, what: str, ndim: int) -> None:
    if t.device.type != "cuda":
        raise ValueError(f"{what}: expected a CUDA tensor, got one on {t.device}")
    if t.dim() != ndim:
        raise ValueError(f"{what}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{what}: expected a contiguous tensor (call .contiguous())")


def _ctx_stream(t: torch.Tensor) -> tuple[Context, ctypes.c_void_p]:
    ctx = Context.for_device(t.device.index)
    return ctx, ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def _vnm_device(lay, values, meta, index) -> VnmDevice:
    d = VnmDevice()
    d.layout = lay
    d.values, d.meta, d.index = values.data_ptr(), meta.data_ptr(), index.data_ptr()
    return d


def vnm_sizes(rows: int, cols: int, vnm: str, dtype: torch.dtype) -> tuple[int, int, int]:
    """Elements of the values (dtype), meta (int32) and index (int32) of a compressed matrix."""
    lay = vnm_layout(rows, cols, vnm, _name(dtype, "vnm"))
    return lay.values_bytes // 2, lay.meta_bytes // 4, lay.index_bytes // 4


# ---------------------------------------------------------------- vnm_compress


@torch.library.custom_op("sparsejit::vnm_compress", mutates_args=())
def vnm_compress(a: torch.Tensor, vnm: str, select: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                  torch.Tensor]:
    """Compresses the dense a (rows x cols, f16/bf16) as V:N:M on its GPU: (values, meta, index,
    word). select: "l2" / "l1" (magnitude pruning) or "exact"; for exact, the int64 word is -1
    when a had the pattern, else where it broke it (check_pattern reads it, with a sync)."""
    _check(a, "vnm_compress: a", 2)
    if select not in SELECT:
        raise ValueError(f"vnm_compress: select {select!r}: expected exact, l2 or l1")
    lay = vnm_layout(a.shape[0], a.shape[1], vnm, _name(a.dtype, "vnm_compress: a"))
    nv, nm, ni = lay.values_bytes // 2, lay.meta_bytes // 4, lay.index_bytes // 4
    values = torch.empty(nv, dtype=a.dtype, device=a.device)
    meta = torch.empty(nm, dtype=torch.int32, device=a.device)
    index = torch.empty(ni, dtype=torch.int32, device=a.device)
    word = torch.empty(2, dtype=torch.int64, device=a.device)  # 16 bytes: sj_workspace_size
    ctx, stream = _ctx_stream(a)
    out = _vnm_device(lay, values, meta, index)
    call("sj_vnm_compress_device_ws", ctx.handle, ctypes.byref(lay), a.data_ptr(), a.shape[1], SELECT[select],
         ctypes.byref(out), word.data_ptr(), word.numel() * 8, stream)
    return values, meta, index, word[:1]


@vnm_compress.register_fake
def _(a, vnm, select):
    nv, nm, ni = vnm_sizes(a.shape[0], a.shape[1], vnm, a.dtype)
    return (a.new_empty(nv), a.new_empty(nm, dtype=torch.int32), a.new_empty(ni, dtype=torch.int32),
            a.new_empty(1, dtype=torch.int64))


def check_pattern(word: torch.Tensor, rows: int, cols: int, vnm: str, dtype: torch.dtype) -> None:
    """Raises PatternError naming where the matrix broke V:N:M (reads the word: synchronises)."""
    lay = vnm_layout(rows, cols, vnm, _name(dtype, "check_pattern"))
    call("sj_vnm_pattern_status", ctypes.byref(lay), int(word.item()) & ((1 << 64) - 1))


# ---------------------------------------------------------------- vnm_spmm


@torch.library.custom_op("sparsejit::vnm_spmm", mutates_args=())
def vnm_spmm(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, b: torch.Tensor, rows: int, cols: int,
             vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """C = A . B on sparse tensor cores: A the V:N:M matrix (rows x cols) of values/meta/index,
    B dense cols x n (n a multiple of 8), C rows x n in out_dtype (default B's dtype)."""
    for t, what, nd in ((values, "values", 1), (meta, "meta", 1), (index, "index", 1), (b, "b", 2)):
        _check(t, f"vnm_spmm: {what}", nd)
    dt = _name(b.dtype, "vnm_spmm: b")
    if values.dtype != b.dtype:
        raise ValueError(f"vnm_spmm: values are {values.dtype} but b is {b.dtype}")
    if b.shape[0] != cols:
        raise ValueError(f"vnm_spmm: b has {b.shape[0]} rows; A has {cols} columns")
    lay = vnm_layout(rows, cols, vnm, dt)
    if (values.numel() * 2, meta.numel() * 4, index.numel() * 4) != (lay.values_bytes, lay.meta_bytes, lay.index_bytes):
        raise ValueError(f"vnm_spmm: values/meta/index do not hold a {rows}x{cols} {vnm} matrix")
    out_dt = out_dtype or b.dtype
    c = torch.empty(rows, b.shape[1], dtype=out_dt, device=b.device)
    p = Problem()
    call("sj_vnm_problem", ctypes.byref(lay), b.shape[1], _ctypes_dtype(out_dt), ctypes.byref(p))
    ctx, stream = _ctx_stream(b)
    a = _vnm_device(lay, values, meta, index)
    call("sj_vnm_spmm", ctx.handle, ctypes.byref(p), ctypes.byref(a), b.data_ptr(), c.data_ptr(), 1.0, 0.0, stream)
    return c


@vnm_spmm.register_fake
def _(values, meta, index, b, rows, cols, vnm, out_dtype=None):
    return b.new_empty(rows, b.shape[1], dtype=out_dtype or b.dtype)


def _ctypes_dtype(dtype: torch.dtype) -> int:
    return {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3}[dtype]


# ---------------------------------------------------------------- V:N:M training (docs/training.md)
# W (rows x cols) is the compressed weight of a linear layer y = W . x; the products take the
# tokens contiguous: dY rows x tokens, X cols x tokens, dX cols x tokens, tokens a multiple of 8.


def _vnm_arrays(values: Optional[torch.Tensor], meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
                vnm: str, dtype: torch.dtype, what: str):
    """W's layout, after checking that its arrays hold a rows x cols vnm matrix of dtype
    (values may be None: vnm_dw reads only meta and index)."""
    lay = vnm_layout(rows, cols, vnm, _name(dtype, what))
    nv = values.numel() * 2 if values is not None else lay.values_bytes
    if (nv, meta.numel() * 4, index.numel() * 4) != (lay.values_bytes, lay.meta_bytes, lay.index_bytes):
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


@torch.library.custom_op("sparsejit::vnm_dw", mutates_args=())
def vnm_dw(dy: torch.Tensor, x: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
           vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The weight gradient dW = dY . X^T at W's kept slots, written in W's value layout (one
    element per slot of ``values``, 0 in padding slots), so it is ``values``' gradient as is:
    dy rows x tokens, x cols x tokens (f16/bf16), fp32 accumulation on tensor cores; out_dtype
    (default dy's) f16, bf16 or f32. Reads W's meta and index only."""
    for t, what, nd in ((dy, "dy", 2), (x, "x", 2), (meta, "meta", 1), (index, "index", 1)):
        _check(t, f"vnm_dw: {what}", nd)
    lay = _dw_checks(dy, x, meta, index, rows, cols, vnm)
    out_dt = out_dtype or dy.dtype
    _name(out_dt, "vnm_dw: out_dtype", tuple(_DTYPES))
    dw = torch.empty(lay.values_bytes // 2, dtype=out_dt, device=dy.device)
    p = Problem()
    call("sj_vnm_dw_problem", ctypes.byref(lay), dy.shape[1], _ctypes_dtype(out_dt), ctypes.byref(p))
    ctx, stream = _ctx_stream(dy)
    w = VnmDevice()
    w.layout, w.values, w.meta, w.index = lay, 0, meta.data_ptr(), index.data_ptr()
    call("sj_vnm_dw", ctx.handle, ctypes.byref(p), ctypes.byref(w), dy.data_ptr(), x.data_ptr(), dw.data_ptr(), stream)
    return dw


@vnm_dw.register_fake
def _(dy, x, meta, index, rows, cols, vnm, out_dtype=None):
    lay = _dw_checks(dy, x, meta, index, rows, cols, vnm)
    return dy.new_empty(lay.values_bytes // 2, dtype=out_dtype or dy.dtype)


def _dx_checks(values, meta, index, dy, rows, cols, vnm):
    _tokens_operand(dy, rows, "vnm_dx_exact: dy")
    return _vnm_arrays(values, meta, index, rows, cols, vnm, dy.dtype, "vnm_dx_exact")


@torch.library.custom_op("sparsejit::vnm_dx_exact", mutates_args=())
def vnm_dx_exact(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, dy: torch.Tensor, rows: int,
                 cols: int, vnm: str, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The exact input gradient dX = W^T . dY (cols x tokens, out_dtype, default dy's): the dense
    masked W^T into a workspace from torch's allocator, then the dense tensor-core gemm."""
    for t, what, nd in ((values, "values", 1), (meta, "meta", 1), (index, "index", 1), (dy, "dy", 2)):
        _check(t, f"vnm_dx_exact: {what}", nd)
    lay = _dx_checks(values, meta, index, dy, rows, cols, vnm)
    out_dt = out_dtype or dy.dtype
    _name(out_dt, "vnm_dx_exact: out_dtype", tuple(_DTYPES))
    wt = torch.empty(cols * rows, dtype=dy.dtype, device=dy.device)
    dx = torch.empty(cols, dy.shape[1], dtype=out_dt, device=dy.device)
    ctx, stream = _ctx_stream(dy)
    w = _vnm_device(lay, values, meta, index)
    call("sj_vnm_dx_exact", ctx.handle, ctypes.byref(w), wt.data_ptr(), dy.data_ptr(), dx.data_ptr(), dy.shape[1],
         _ctypes_dtype(out_dt), stream)
    return dx


@vnm_dx_exact.register_fake
def _(values, meta, index, dy, rows, cols, vnm, out_dtype=None):
    _dx_checks(values, meta, index, dy, rows, cols, vnm)
    return dy.new_empty(cols, dy.shape[1], dtype=out_dtype or dy.dtype)


@torch.library.custom_op("sparsejit::vnm_double_prune", mutates_args=())
def vnm_double_prune(values: torch.Tensor, meta: torch.Tensor, index: torch.Tensor, rows: int, cols: int,
                     vnm: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """WT2, the double-pruned copy of W^T (cols x rows, the same V:N:M; SLoPe): W^T re-pruned by
    magnitude along its own rows, as (values, meta, index) for vnm_spmm(..., cols, rows, vnm).
    It keeps about 4/M of W^T's non-zeros: dX through it is far from exact beyond 2:4."""
    for t, what in ((values, "values"), (meta, "meta"), (index, "index")):
        _check(t, f"vnm_double_prune: {what}", 1)
    lay = _vnm_arrays(values, meta, index, rows, cols, vnm, values.dtype, "vnm_double_prune")
    lt = VnmLayout()
    call("sj_vnm_transpose_layout", ctypes.byref(lay), ctypes.byref(lt))
    need = ctypes.c_size_t()
    call("sj_vnm_double_prune_workspace", ctypes.byref(lay), ctypes.byref(need))
    ws = torch.empty(need.value, dtype=torch.uint8, device=values.device)
    v2 = torch.empty(lt.values_bytes // 2, dtype=values.dtype, device=values.device)
    m2 = torch.empty(lt.meta_bytes // 4, dtype=torch.int32, device=values.device)
    i2 = torch.empty(lt.index_bytes // 4, dtype=torch.int32, device=values.device)
    ctx, stream = _ctx_stream(values)
    w, wt2 = _vnm_device(lay, values, meta, index), _vnm_device(lt, v2, m2, i2)
    call("sj_vnm_double_prune", ctx.handle, ctypes.byref(w), ctypes.byref(wt2), ws.data_ptr(), ws.numel(), stream)
    return v2, m2, i2


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
    call("sj_gmp_target_at", ctypes.byref(schedule), step, ctypes.byref(t))
    return t


@torch.library.custom_op("sparsejit::gmp_prune", mutates_args=("w", "mask"))
def gmp_prune(w: torch.Tensor, mask: torch.Tensor, step: int, initial_sparsity: float, final_sparsity: float,
              start_step: int, interval: int, n_steps: int, v: int, m: int) -> None:
    """One GMP step on the device, in place: w (rows x cols, f16/bf16) and mask (uint8, 1 = kept)
    pruned by magnitude as sj_gmp_prune_host does (nothing unless step is a pruning step); the
    workspace from torch's allocator."""
    _check(w, "gmp_prune: w", 2)
    _check(mask, "gmp_prune: mask", 2)
    if mask.dtype != torch.uint8 or mask.shape != w.shape:
        raise ValueError(f"gmp_prune: mask is {tuple(mask.shape)} {mask.dtype}; expected {tuple(w.shape)} uint8")
    _name(w.dtype, "gmp_prune: w")
    s = GmpSchedule(initial_sparsity, final_sparsity, start_step, interval, n_steps, v, m)
    need = ctypes.c_size_t()
    call("sj_gmp_prune_workspace", ctypes.byref(s), _ctypes_dtype(w.dtype), w.shape[0], w.shape[1], ctypes.byref(need))
    ws = torch.empty(need.value, dtype=torch.uint8, device=w.device)
    ctx, stream = _ctx_stream(w)
    call("sj_gmp_prune", ctx.handle, ctypes.byref(s), step, _ctypes_dtype(w.dtype), w.shape[0], w.shape[1],
         w.data_ptr(), w.shape[1], mask.data_ptr(), mask.shape[1], ws.data_ptr(), ws.numel(), stream)


@gmp_prune.register_fake
def _(w, mask, step, initial_sparsity, final_sparsity, start_step, interval, n_steps, v, m):
    return None


# ---------------------------------------------------------------- TwELL




def _twell_device(lay, entries, counts, spill) -> TwellDevice:
    d = TwellDevice()
    d.layout = lay
    d.entries, d.counts, d.spill = entries.data_ptr(), counts.data_ptr(), spill.data_ptr()
    return d


@torch.library.custom_op("sparsejit::twell_gate", mutates_args=())
def twell_gate(x: torch.Tensor, wg_t: torch.Tensor, tile: int, capacity: int,
               sparsity: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H = relu(x . Wg) as TwELL (entries int32 [tokens, tiles, C], counts int32 [tokens, tiles],
    spill [tokens, d_ff] of x's dtype): x tokens x d_model, wg_t d_ff x d_model. sparsity: the
    activations' expected fraction of zeros, which picks the tuned kernel."""
    _check(x, "twell_gate: x", 2)
    _check(wg_t, "twell_gate: wg_t", 2)
    dt = _name(x.dtype, "twell_gate: x")
    if wg_t.dtype != x.dtype or wg_t.shape[1] != x.shape[1]:
        raise ValueError(f"twell_gate: wg_t {tuple(wg_t.shape)} {wg_t.dtype} does not fit x "
                         f"{tuple(x.shape)} {x.dtype} (expected d_ff x d_model of x's dtype)")
    tokens, d_ff = x.shape[0], wg_t.shape[0]
    lay = twell_layout(tokens, d_ff, f"{tile}:{capacity}", dt)
    entries = torch.empty(tokens, lay.n_tiles, capacity, dtype=torch.int32, device=x.device)
    counts = torch.empty(tokens, lay.n_tiles, dtype=torch.int32, device=x.device)
    spill = torch.empty(tokens, d_ff, dtype=x.dtype, device=x.device)
    p = Problem()
    call("sj_twell_gate_problem", ctypes.byref(lay), x.shape[1], ctypes.byref(p))
    p.twell_sparsity = sparsity
    ctx, stream = _ctx_stream(x)
    h = _twell_device(lay, entries, counts, spill)
    call("sj_twell_gate", ctx.handle, ctypes.byref(p), x.data_ptr(), wg_t.data_ptr(), ctypes.byref(h), stream)
    return entries, counts, spill


@twell_gate.register_fake
def _(x, wg_t, tile, capacity, sparsity):
    n_tiles = -(-wg_t.shape[0] // tile)
    return (x.new_empty(x.shape[0], n_tiles, capacity, dtype=torch.int32),
            x.new_empty(x.shape[0], n_tiles, dtype=torch.int32), x.new_empty(x.shape[0], wg_t.shape[0]))


@torch.library.custom_op("sparsejit::twell_ffn", mutates_args=())
def twell_ffn(x: torch.Tensor, entries: torch.Tensor, counts: torch.Tensor, spill: torch.Tensor,
              wu_t: torch.Tensor, wd: torch.Tensor, tile: int, capacity: int, sparsity: float,
              out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """y = (H (.) (x . Wu)) . Wd with H the TwELL of twell_gate; wu_t and wd d_ff x d_model. The
    pairs kernels' workspace comes from torch's allocator (sj_twell_ffn_ws)."""
    for t, what, nd in ((x, "x", 2), (entries, "entries", 3), (counts, "counts", 2), (spill, "spill", 2),
                        (wu_t, "wu_t", 2), (wd, "wd", 2)):
        _check(t, f"twell_ffn: {what}", nd)
    dt = _name(x.dtype, "twell_ffn: x")
    tokens, d_model, d_ff = x.shape[0], x.shape[1], wu_t.shape[0]
    for t, what in ((wu_t, "wu_t"), (wd, "wd")):
        if t.dtype != x.dtype or tuple(t.shape) != (d_ff, d_model):
            raise ValueError(f"twell_ffn: {what} is {tuple(t.shape)} {t.dtype}; expected ({d_ff}, {d_model}) {x.dtype}")
    lay = twell_layout(tokens, d_ff, f"{tile}:{capacity}", dt)
    if (tuple(entries.shape), tuple(counts.shape), tuple(spill.shape)) != (
            (tokens, lay.n_tiles, capacity), (tokens, lay.n_tiles), (tokens, d_ff)):
        raise ValueError("twell_ffn: entries/counts/spill do not hold the TwELL of "
                         f"{tokens} x {d_ff} at {tile}:{capacity} (see twell_gate)")
    out_dt = out_dtype or x.dtype
    p = Problem()
    call("sj_twell_ffn_problem", ctypes.byref(lay), d_model, _ctypes_dtype(out_dt), ctypes.byref(p))
    p.twell_sparsity = sparsity
    y = torch.empty(tokens, d_model, dtype=out_dt, device=x.device)
    ws = torch.empty(workspace_size(p), dtype=torch.uint8, device=x.device)
    ctx, stream = _ctx_stream(x)
    h = _twell_device(lay, entries, counts, spill)
    call("sj_twell_ffn_ws", ctx.handle, ctypes.byref(p), x.data_ptr(), ctypes.byref(h), wu_t.data_ptr(),
         wd.data_ptr(), y.data_ptr(), ws.data_ptr(), ws.numel(), stream)
    return y


@twell_ffn.register_fake
def _(x, entries, counts, spill, wu_t, wd, tile, capacity, sparsity, out_dtype=None):
    return x.new_empty(x.shape[0], x.shape[1], dtype=out_dtype or x.dtype)
