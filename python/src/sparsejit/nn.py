"""PyTorch modules over the sparsejit ops: ``VNMLinear`` (a V:N:M-sparse nn.Linear, compressed
storage, forward on sparse tensor cores) and ``TwELLFFN`` (a ReLU-gated FFN block whose
activations travel as TwELL). Needs torch."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import nn

from sparsejit import ops
from sparsejit.formats import VNMMatrix, to_bits, vnm_decompress, vnm_layout


def _slot_positions(values_bits: np.ndarray, meta: np.ndarray, index: np.ndarray, rows: int, cols: int,
                    vnm: str, dtype: str) -> np.ndarray:
    """For every slot of the compressed values, its flat position in the dense rows x cols matrix,
    or -1 for a slot that holds a zero (padding, or a kept zero). Found on the host by
    decompressing slot ids, 14 bits at a time, as non-zero 16-bit patterns."""
    lay = vnm_layout(rows, cols, vnm, dtype)
    live = (values_bits & 0x7FFF) != 0
    ids = np.arange(values_bits.size, dtype=np.int64)
    pos = np.full(values_bits.size, -1, dtype=np.int64)
    found = None
    got = np.zeros(rows * cols, dtype=np.int64)
    for shift in (0, 14, 28):
        probe = np.where(live, ((ids >> shift) & 0x3FFF) + 1, 0).astype(np.uint16)
        dense = vnm_decompress(VNMMatrix(lay, probe, meta, index), bits=True).reshape(-1).astype(np.int64)
        found = dense != 0 if found is None else found
        got |= np.where(found, dense - 1, 0) << shift
    flat = np.flatnonzero(found)
    pos[got[flat]] = flat
    return pos


class _VNMLinearFn(torch.autograd.Function):
    """y = x . W^T through the sparse kernel; backward on the dense masked weight (see VNMLinear)."""

    @staticmethod
    def forward(ctx, x2, values, meta, index, positions, rows: int, cols: int, vnm: str):
        tokens = x2.shape[0]
        pad = (-tokens) % 8  # the kernel's n is a multiple of 8
        b = torch.nn.functional.pad(x2, (0, 0, 0, pad)).t().contiguous()
        c = torch.ops.sparsejit.vnm_spmm(values, meta, index, b, rows, cols, vnm, None)
        ctx.save_for_backward(x2, values, positions)
        ctx.shape = (rows, cols)
        return c[:, :tokens].t()

    @staticmethod
    def backward(ctx, gy):
        x2, values, positions = ctx.saved_tensors
        rows, cols = ctx.shape
        live = positions >= 0
        idx = positions.clamp(min=0)
        w = torch.zeros(rows * cols, dtype=values.dtype, device=values.device)
        w = w.index_put((idx[live],), values[live]).view(rows, cols)
        gx = gy.to(w.dtype) @ w if ctx.needs_input_grad[0] else None
        gv = None
        if ctx.needs_input_grad[1]:
            gw = (gy.t().to(torch.float32) @ x2.to(torch.float32)).reshape(-1)
            gv = torch.where(live, gw[idx], torch.zeros((), device=gw.device)).to(values.dtype)
        return gx, gv, None, None, None, None, None, None


class VNMLinear(nn.Module):
    """A linear layer whose weight is V:N:M sparse, stored compressed.

    ``values`` (a Parameter: the kept weights in the kernel's order), ``meta`` and ``index``
    (buffers) are the compressed weight, so a state_dict holds only compressed data; the layout
    (out x in, V:N:M, dtype) is extra state. The forward runs ``torch.ops.sparsejit.vnm_spmm``.

    Backward is a dense fallback, not a sparse kernel: the masked weight is rebuilt densely from
    ``values`` (zeros where pruned) and the gradients are those of dense autograd on it. The
    input gradient is ``grad_y @ W_masked``; the weight gradient ``grad_y^T @ x`` is kept at the
    kept positions only (a slot holding an exact zero counts as pruned), so training keeps the
    pattern. It costs a dense weight's memory and time per backward.
    """

    def __init__(self, in_features: int, out_features: int, vnm: str = "64:2:8", bias: bool = True,
                 dtype: torch.dtype = torch.float16, device: Optional[torch.device] = None):
        super().__init__()
        self.in_features, self.out_features, self.vnm = in_features, out_features, vnm
        nv, nm, ni = ops.vnm_sizes(out_features, in_features, vnm, dtype)
        self.values = nn.Parameter(torch.zeros(nv, dtype=dtype, device=device))
        self.register_buffer("meta", torch.zeros(nm, dtype=torch.int32, device=device))
        self.register_buffer("index", torch.zeros(ni, dtype=torch.int32, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        self._positions: Optional[torch.Tensor] = None

    @classmethod
    def from_dense(cls, linear: nn.Linear, vnm: str = "64:2:8", select: str = "l2",
                   dtype: Optional[torch.dtype] = None) -> "VNMLinear":
        """Prunes linear's weight to V:N:M by magnitude (select "l2" or "l1" column norms, or
        "exact" for a weight that already has the pattern) and compresses it, on its GPU."""
        w = linear.weight.detach()
        dt = dtype or (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16)
        m = cls(linear.in_features, linear.out_features, vnm, linear.bias is not None, dt, w.device)
        values, meta, index, word = torch.ops.sparsejit.vnm_compress(w.to(dt).contiguous(), vnm, select)
        if select == "exact":
            ops.check_pattern(word, m.out_features, m.in_features, vnm, dt)
        with torch.no_grad():
            m.values.copy_(values)
            m.meta.copy_(meta)
            m.index.copy_(index)
            if linear.bias is not None:
                m.bias.copy_(linear.bias.detach().to(dt))
        return m

    def get_extra_state(self) -> dict:
        return {"in_features": self.in_features, "out_features": self.out_features, "vnm": self.vnm,
                "dtype": str(self.values.dtype)}

    def set_extra_state(self, state: dict) -> None:
        mine = self.get_extra_state()
        if state != mine:
            raise ValueError(f"VNMLinear: the state_dict holds {state}, this module is {mine}")
        self._positions = None

    def masked_weight(self) -> torch.Tensor:
        """The dense out x in weight the compressed one stands for (zeros where pruned)."""
        pos = self.positions()
        live = pos >= 0
        w = torch.zeros(self.out_features * self.in_features, dtype=self.values.dtype, device=self.values.device)
        return w.index_put((pos[live],), self.values.detach()[live]).view(self.out_features, self.in_features)

    def positions(self) -> torch.Tensor:
        """Every value slot's flat position in the dense weight (-1: none); found once, on the host."""
        if self._positions is None or self._positions.device != self.values.device:
            dt = "f16" if self.values.dtype == torch.float16 else "bf16"
            bits = self.values.detach().view(torch.int16).cpu().numpy().view(np.uint16)
            pos = _slot_positions(bits, self.meta.cpu().numpy().view(np.uint32), self.index.cpu().numpy(),
                                  self.out_features, self.in_features, self.vnm, dt)
            self._positions = torch.from_numpy(pos).to(self.values.device)
        return self._positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(self.values.dtype)
        if torch.is_grad_enabled() and (x2.requires_grad or self.values.requires_grad):
            y = _VNMLinearFn.apply(x2, self.values, self.meta, self.index, self.positions(), self.out_features,
                                   self.in_features, self.vnm)
        else:
            pad = (-x2.shape[0]) % 8
            b = torch.nn.functional.pad(x2, (0, 0, 0, pad)).t().contiguous()
            y = torch.ops.sparsejit.vnm_spmm(self.values, self.meta, self.index, b, self.out_features,
                                             self.in_features, self.vnm, None)[:, :x2.shape[0]].t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, vnm={self.vnm}"


class TwELLFFN(nn.Module):
    """y = (relu(x . Wg) (.) (x . Wu)) . Wd for inference, the activations as TwELL: the gate GEMM
    writes them sparse (twell_gate) and the fused FFN reads only the units each token activates
    (twell_ffn). Weights one row per d_ff unit: wg_t, wu_t, wd (d_ff x d_model). tile, capacity:
    TwELL's T and C; sparsity: the activations' expected fraction of zeros (picks the tuned kernel)."""

    def __init__(self, d_model: int, d_ff: int, tile: int = 128, capacity: int = 16, sparsity: float = 0.99,
                 dtype: torch.dtype = torch.bfloat16, device: Optional[torch.device] = None):
        super().__init__()
        self.d_model, self.d_ff, self.tile, self.capacity, self.sparsity = d_model, d_ff, tile, capacity, sparsity
        self.wg_t = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device), requires_grad=False)
        self.wu_t = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device), requires_grad=False)
        self.wd = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device), requires_grad=False)
        for w in (self.wg_t, self.wu_t, self.wd):
            nn.init.normal_(w, std=d_model ** -0.5)

    @classmethod
    def from_linears(cls, gate: nn.Linear, up: nn.Linear, down: nn.Linear, **kwargs) -> "TwELLFFN":
        """From the three nn.Linear of a ReLU-gated FFN (gate, up: d_model -> d_ff; down: d_ff -> d_model)."""
        dtype = kwargs.pop("dtype", gate.weight.dtype if gate.weight.dtype != torch.float32 else torch.bfloat16)
        m = cls(gate.in_features, gate.out_features, dtype=dtype, device=gate.weight.device, **kwargs)
        with torch.no_grad():
            m.wg_t.copy_(gate.weight)
            m.wu_t.copy_(up.weight)
            m.wd.copy_(down.weight.t())
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.d_model).to(self.wg_t.dtype).contiguous()
        entries, counts, spill = torch.ops.sparsejit.twell_gate(x2, self.wg_t, self.tile, self.capacity, self.sparsity)
        y = torch.ops.sparsejit.twell_ffn(x2, entries, counts, spill, self.wu_t, self.wd, self.tile, self.capacity,
                                          self.sparsity, None)
        return y.reshape(*lead, self.d_model)
