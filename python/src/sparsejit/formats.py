"""The host sides of the sparse formats, on numpy arrays: V:N:M compression (exact, or magnitude
pruning by L2 / L1 column norms) and decompression, TwELL from and to dense. 16-bit values:
f16 as numpy float16; bf16 (which numpy lacks) as float32 holding bf16 values, or as uint16 bit
patterns. Inputs of another float dtype are rounded to the format's dtype (round to nearest even)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from sparsejit._lib import (InvalidArgumentError, TwellHost, TwellLayout, VnmHost, VnmLayout, call, lib)
from sparsejit.problem import DEFAULT_TWELL, DEFAULT_VNM, dtype_code, parse_ints

SELECT = {"exact": 0, "l2": 1, "l1": 2}


def float_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest even; NaN kept a NaN) as uint16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), rounded)


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """A 2-D array as the C-contiguous uint16 bits of dtype ("f16" or "bf16")."""
    a = np.asarray(a)
    if a.ndim != 2:
        raise InvalidArgumentError(f"expected a 2-D matrix, got shape {a.shape}")
    if a.dtype == np.uint16:
        return np.ascontiguousarray(a)
    if dtype == "f16":
        return np.ascontiguousarray(a, dtype=np.float16).view(np.uint16)
    if dtype == "bf16":
        return float_to_bf16_bits(a)
    raise InvalidArgumentError(f"dtype {dtype!r}: the formats hold f16 or bf16")


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bits of dtype as float16 (f16) or float32 (bf16, exact)."""
    return bits.view(np.float16) if dtype == "f16" else bf16_bits_to_float(bits)


def _dtype_of(a: np.ndarray, dtype: str | None) -> str:
    if dtype is not None:
        return dtype
    if np.asarray(a).dtype == np.float16:
        return "f16"
    raise InvalidArgumentError("dtype: give \"f16\" or \"bf16\" for an array that is not float16")


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


# ---------------------------------------------------------------- V:N:M


def vnm_layout(rows: int, cols: int, vnm: str = DEFAULT_VNM, dtype: str = "f16") -> VnmLayout:
    """The sizes of a rows x cols matrix compressed as V:N:M (sj_vnm_layout_init)."""
    v, n, m = parse_ints(vnm, 3, "vnm", "V:N:M such as 64:2:8")
    lay = VnmLayout()
    call("sj_vnm_layout_init", ctypes.byref(lay), dtype_code(dtype), v, n, m, int(rows), int(cols))
    return lay


@dataclass
class VNMMatrix:
    """A V:N:M matrix in host memory: the kernel's values, metadata and column index arrays."""
    layout: VnmLayout
    values: np.ndarray  # uint16, values_bytes / 2
    meta: np.ndarray    # uint32
    index: np.ndarray   # int32

    @property
    def dtype(self) -> str:
        return "f16" if self.layout.dtype == 1 else "bf16"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.layout.rows, self.layout.cols)

    @property
    def vnm(self) -> str:
        return f"{self.layout.v}:{self.layout.n}:{self.layout.m}"

    def _host(self) -> VnmHost:
        h = VnmHost()
        h.layout = self.layout
        h.values = self.values.ctypes.data_as(ctypes.POINTER(ctypes.c_uint16))
        h.meta = self.meta.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32))
        h.index = self.index.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        return h


def vnm_compress(a: np.ndarray, vnm: str = DEFAULT_VNM, select: str = "exact",
                 dtype: str | None = None) -> VNMMatrix:
    """Compresses the dense a (rows x cols) as V:N:M. select: "exact" (a must have the pattern,
    else PatternError naming the first offending block or row), "l2" or "l1" (magnitude
    pruning: per block the 4 columns of largest norm, then per row the 2 largest |a|)."""
    if select not in SELECT:
        raise InvalidArgumentError(f"select {select!r}: expected exact, l2 or l1")
    dt = _dtype_of(a, dtype)
    bits = to_bits(a, dt)
    lay = vnm_layout(bits.shape[0], bits.shape[1], vnm, dt)
    h = VnmHost()
    call("sj_vnm_compress", ctypes.byref(lay), _ptr(bits), bits.shape[1], SELECT[select], ctypes.byref(h))
    try:
        values = np.ctypeslib.as_array(h.values, (lay.values_bytes // 2,)).copy()
        meta = np.ctypeslib.as_array(h.meta, (lay.meta_bytes // 4,)).copy()
        index = np.ctypeslib.as_array(h.index, (lay.index_bytes // 4,)).copy()
    finally:
        lib.sj_vnm_host_free(ctypes.byref(h))
    return VNMMatrix(lay, values, meta, index)


def vnm_check(a: np.ndarray, vnm: str = DEFAULT_VNM, dtype: str | None = None) -> None:
    """Raises PatternError naming where a breaks the V:N:M pattern; returns when it has it."""
    dt = _dtype_of(a, dtype)
    bits = to_bits(a, dt)
    lay = vnm_layout(bits.shape[0], bits.shape[1], vnm, dt)
    call("sj_vnm_check", ctypes.byref(lay), _ptr(bits), bits.shape[1])


def vnm_decompress(h: VNMMatrix, bits: bool = False) -> np.ndarray:
    """The dense matrix (zeros where pruned): float16 / float32 values, or uint16 bits."""
    out = np.empty((h.layout.rows, h.layout.cols), dtype=np.uint16)
    host = h._host()
    call("sj_vnm_decompress", ctypes.byref(host), _ptr(out), out.shape[1])
    return out if bits else from_bits(out, h.dtype)


# ---------------------------------------------------------------- TwELL


def twell_layout(rows: int, cols: int, twell: str = DEFAULT_TWELL, dtype: str = "f16") -> TwellLayout:
    tile, capacity = parse_ints(twell, 2, "twell", "T:C such as 128:16")
    lay = TwellLayout()
    call("sj_twell_layout_init", ctypes.byref(lay), dtype_code(dtype), int(rows), int(cols), tile, capacity)
    return lay


@dataclass
class TwELLMatrix:
    """A TwELL matrix in host memory (include/sparsejit.h describes the arrays)."""
    layout: TwellLayout
    entries: np.ndarray  # uint32 [rows, n_tiles, C]: (local column << 16) | value bits
    counts: np.ndarray   # int32 [rows, n_tiles]: true non-zeros per tile (may exceed C)
    spill: np.ndarray    # uint16 [rows, cols]: whole tiles whose count exceeds C
    n_overflow: int

    @property
    def dtype(self) -> str:
        return "f16" if self.layout.dtype == 1 else "bf16"

    def _host(self) -> TwellHost:
        h = TwellHost()
        h.layout = self.layout
        h.entries = self.entries.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32))
        h.counts = self.counts.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        h.spill = self.spill.ctypes.data_as(ctypes.POINTER(ctypes.c_uint16))
        return h


def twell_from_dense(h: np.ndarray, twell: str = DEFAULT_TWELL, dtype: str | None = None) -> TwELLMatrix:
    """Converts the dense activations h (tokens x d_ff) to TwELL with tile T and capacity C."""
    dt = _dtype_of(h, dtype)
    bits = to_bits(h, dt)
    lay = twell_layout(bits.shape[0], bits.shape[1], twell, dt)
    host, overflow = TwellHost(), ctypes.c_int64()
    call("sj_twell_from_dense", ctypes.byref(lay), _ptr(bits), bits.shape[1], ctypes.byref(host),
         ctypes.byref(overflow))
    try:
        entries = np.ctypeslib.as_array(host.entries, (lay.entries_bytes // 4,)).copy()
        counts = np.ctypeslib.as_array(host.counts, (lay.counts_bytes // 4,)).copy()
        spill = np.ctypeslib.as_array(host.spill, (lay.spill_bytes // 2,)).copy()
    finally:
        lib.sj_twell_host_free(ctypes.byref(host))
    return TwELLMatrix(lay, entries.reshape(lay.rows, lay.n_tiles, lay.capacity),
                       counts.reshape(lay.rows, lay.n_tiles), spill.reshape(lay.rows, lay.cols),
                       int(overflow.value))


def twell_to_dense(t: TwELLMatrix, bits: bool = False) -> np.ndarray:
    """The dense matrix (+0 where it has no non-zero); InvalidArgumentError naming the row and
    tile when the arrays are inconsistent."""
    for name, arr, dt in (("entries", t.entries, np.uint32), ("counts", t.counts, np.int32),
                          ("spill", t.spill, np.uint16)):
        if arr.dtype != dt or not arr.flags.c_contiguous:
            raise InvalidArgumentError(f"TwELLMatrix.{name}: expected a C-contiguous {np.dtype(dt).name} array")
    out = np.empty((t.layout.rows, t.layout.cols), dtype=np.uint16)
    host = t._host()
    call("sj_twell_to_dense", ctypes.byref(host), _ptr(out), out.shape[1])
    return out if bits else from_bits(out, t.dtype)
