"""PyTorch modules over the sparsejit ops: ``VNMLinear`` (a V:N:M-sparse nn.Linear, compressed
storage, forward on sparse tensor cores), ``TwELLFFN`` (a ReLU-gated FFN block whose
activations travel as TwELL, inference) and ``SparseReLUFFN`` (the same block for training, its
activations kept for the backward in the hybrid ELL + dense-backup format). Needs torch."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import nn

from sparsejit import ops as sops
from sparsejit._lib import HybridReport
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


BACKWARDS = ("exact", "double_pruned", "dense")


def _tokens_last(t: torch.Tensor, pad: int) -> torch.Tensor:
    """tokens x features -> features x (tokens + pad), tokens contiguous, zeros in the padding
    (the kernels take tokens in multiples of 8; zero tokens add nothing to any product).
    Without padding, a t whose transpose is contiguous is returned as that view, uncopied: a
    VNMLinear's output is the transpose of its kernel's contiguous C, and element-wise ops keep
    those strides, so in a stack of VNMLinear layers only the first input is transposed. With
    padding: one transposing copy into a buffer whose padding is zeroed."""
    if not pad:
        return t.t().contiguous()
    tokens, features = t.shape
    out = t.new_empty((features, tokens + pad))
    out[:, :tokens].copy_(t.t())
    out[:, tokens:].zero_()
    return out


def _spmm(b, values, meta, index, u, z, rows: int, cols: int, vnm: str) -> torch.Tensor:
    """W . B (rows x tokens'), plus U . Z in the same kernel when the layer has adapters (u given)."""
    ops = sops.ops_for(b, values)
    if u is None:
        return ops.vnm_spmm(values, meta, index, b, rows, cols, vnm, None)
    return ops.vnm_spmm_lowrank(values, meta, index, b, u, z, rows, cols, vnm, None)


class _VNMLinearFn(torch.autograd.Function):
    """y = x . W^T (+ (U . Z)^T, Z = V . x^T computed by the caller) through the sparse kernel;
    backward as VNMLinear's ``backward`` option says for x and W, and for the adapters
    dU = dY^T . Z^T and dZ = U^T . dY^T (autograd takes dZ on to V and x through Z = V . x^T)."""

    @staticmethod
    def forward(ctx, x2, values, meta, index, positions, u, z, rows: int, cols: int, vnm: str, backward: str):
        tokens = x2.shape[0]
        b = _tokens_last(x2, (-tokens) % 8)  # X^T: cols x tokens', kept for dW
        c = _spmm(b, values, meta, index, u, z, rows, cols, vnm)
        ctx.save_for_backward(b, values, meta, index, positions, u, z)
        ctx.shape, ctx.tokens, ctx.backward_mode = (rows, cols, vnm), tokens, backward
        return c[:, :tokens].t()

    @staticmethod
    def backward(ctx, gy):
        b, values, meta, index, positions, u, z = ctx.saved_tensors
        (rows, cols, vnm), tokens = ctx.shape, ctx.tokens
        want_x, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dy = _tokens_last(gy.to(values.dtype), b.shape[1] - tokens)  # rows x tokens', zeros past the tokens
        gu = dy @ z.t() if u is not None and ctx.needs_input_grad[5] else None
        gz = u.t() @ dy if u is not None and ctx.needs_input_grad[6] else None
        if ctx.backward_mode == "dense":
            return (*_dense_backward(gy, b[:, :tokens].t(), values, positions, rows, cols, want_x, want_w),
                    None, None, None, gu, gz, None, None, None, None)
        ops = sops.ops_for(dy, b, values)
        gx = gv = None
        if want_x:
            if ctx.backward_mode == "exact":
                dxt = ops.vnm_dx_exact(values, meta, index, dy, rows, cols, vnm, None)
            else:
                v2, m2, i2 = ops.vnm_double_prune(values, meta, index, rows, cols, vnm)
                dxt = ops.vnm_spmm(v2, m2, i2, dy, cols, rows, vnm, None)
            gx = dxt[:, :tokens].t()
        if want_w:
            gv = ops.vnm_dw(dy, b, meta, index, rows, cols, vnm, None)
            # A kept slot holding an exact zero is pruned (GMP's unstructured mask inside the
            # pattern): its gradient stays 0 so an optimizer never revives it, as in "dense".
            gv = torch.where(values != 0, gv, torch.zeros((), dtype=gv.dtype, device=gv.device))
        return gx, gv, None, None, None, gu, gz, None, None, None, None


def _dense_backward(gy, x2, values, positions, rows: int, cols: int, want_x: bool, want_w: bool):
    """The dense fallback, for checking: dense autograd on the masked weight rebuilt from values."""
    live = positions >= 0
    idx = positions.clamp(min=0)
    w = torch.zeros(rows * cols, dtype=values.dtype, device=values.device)
    w = w.index_put((idx[live],), values[live]).view(rows, cols)
    gx = gy.to(w.dtype) @ w if want_x else None
    gv = None
    if want_w:
        gw = (gy.t().to(torch.float32) @ x2.to(torch.float32)).reshape(-1)
        gv = torch.where(live, gw[idx], torch.zeros((), device=gw.device)).to(values.dtype)
    return gx, gv


class VNMLinear(nn.Module):
    """A linear layer whose weight is V:N:M sparse, stored compressed.

    ``values`` (a Parameter: the kept weights in the kernel's order), ``meta`` and ``index``
    (buffers) are the compressed weight, so a state_dict holds only compressed data; the layout
    (out x in, V:N:M, dtype) is extra state. The forward runs ``torch.ops.sparsejit.vnm_spmm``
    (in plain eager mode its body, without the dispatcher: ``sparsejit.ops.ops_for``).

    ``backward`` picks how the gradients are computed (all keep the pattern: a slot holding an
    exact zero counts as pruned and gets no gradient):

    - ``"exact"`` (default): dX = dY . W through the exact product (the dense masked W^T on the
      device, then the dense tensor-core gemm, ``vnm_dx_exact``); dW through ``vnm_dw``, the
      sampled product written straight into ``values``' layout (fp32 accumulation).
    - ``"double_pruned"``: dX on sparse tensor cores through SLoPe's second copy of W^T, pruned
      again to V:N:M along its own rows (``vnm_double_prune`` then ``vnm_spmm``); dW as above.
      Faster, but very lossy beyond 2:4: the copy keeps about 4/M of W^T's non-zeros, so the
      input gradient is about 33% off at 2:4, 72% at 2:8 and 85% at 2:16 (relative norm,
      docs/training.md). Use it at 2:4, or where training is shown to tolerate it.
    - ``"dense"``: a dense fallback for checking: the masked weight is rebuilt densely (positions
      found once on the host) and the gradients are dense autograd's on it; a dense weight's
      memory and time per backward.

    ``rank`` r > 0 (a multiple of 8 in 8..128) adds SLoPe's low-rank adapters, y = x . (W + U . V)^T:
    ``lowrank_u`` (out x r, zeros at first, so the layer starts as the sparse one) and
    ``lowrank_v`` (r x in, random), both Parameters in the layer's dtype. Z = V . x^T (r x tokens)
    is a torch.mm, and the U . Z term is added inside the sparse kernel
    (``torch.ops.sparsejit.vnm_spmm_lowrank``): extra reduction columns, one write of y. The
    adapters' gradients are dU = dY^T . Z^T, dZ = U^T . dY^T, and through Z = V . x^T autograd's
    dV and the x^T V term of dX (torch.mm).
        """

    def __init__(self, in_features: int, out_features: int, vnm: str = "64:2:8", bias: bool = True,
                 dtype: torch.dtype = torch.float16, device: Optional[torch.device] = None,
                 backward: str = "exact", rank: int = 0):
        super().__init__()
        if backward not in BACKWARDS:
            raise ValueError(f"VNMLinear: backward {backward!r}: expected one of {BACKWARDS}")
        if rank and not (8 <= rank <= 128 and rank % 8 == 0):
            raise ValueError(f"VNMLinear: rank {rank}: expected 0 (no adapters) or a multiple of 8 in 8..128")
        self.in_features, self.out_features, self.vnm, self.backward = in_features, out_features, vnm, backward
        self.rank = rank
        if rank:
            self.lowrank_u = nn.Parameter(torch.zeros(out_features, rank, dtype=dtype, device=device))
            v = torch.empty(rank, in_features, dtype=torch.float32, device=device)
            nn.init.kaiming_uniform_(v, a=5 ** 0.5)  # nn.Linear's (and LoRA's down-projection's) init
            self.lowrank_v = nn.Parameter(v.to(dtype))
        else:
            self.lowrank_u = self.lowrank_v = None
        nv, nm, ni = sops.vnm_sizes(out_features, in_features, vnm, dtype)
        self.values = nn.Parameter(torch.zeros(nv, dtype=dtype, device=device))
        self.register_buffer("meta", torch.zeros(nm, dtype=torch.int32, device=device))
        self.register_buffer("index", torch.zeros(ni, dtype=torch.int32, device=device))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        self._positions: Optional[torch.Tensor] = None

    @classmethod
    def from_dense(cls, linear: nn.Linear, vnm: str = "64:2:8", select: str = "l2",
                   dtype: Optional[torch.dtype] = None, backward: str = "exact", rank: int = 0) -> "VNMLinear":
        """Prunes linear's weight to V:N:M by magnitude (select "l2" or "l1" column norms, or
        "exact" for a weight that already has the pattern) and compresses it, on its GPU; rank:
        adapters as the constructor makes them (U zeros: the layer computes the pruned linear)."""
        w = linear.weight.detach()
        dt = dtype or (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16)
        m = cls(linear.in_features, linear.out_features, vnm, linear.bias is not None, dt, w.device, backward, rank)
        values, meta, index, word = torch.ops.sparsejit.vnm_compress(w.to(dt).contiguous(), vnm, select)
        if select == "exact":
            sops.check_pattern(word, m.out_features, m.in_features, vnm, dt)
        with torch.no_grad():
            m.values.copy_(values)
            m.meta.copy_(meta)
            m.index.copy_(index)
            if linear.bias is not None:
                m.bias.copy_(linear.bias.detach().to(dt))
        return m

    def get_extra_state(self) -> dict:
        state = {"in_features": self.in_features, "out_features": self.out_features, "vnm": self.vnm,
                 "dtype": str(self.values.dtype)}
        if self.rank:  # absent without adapters: state_dicts saved before ranks existed still load
            state["rank"] = self.rank
        return state

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
        pad = (-x2.shape[0]) % 8
        u, z = self.lowrank_u, None
        if self.rank:
            z = _tokens_last(x2 @ self.lowrank_v.t(), pad)  # Z = V . X^T: r x tokens', a torch.mm
        params = (self.values,) if u is None else (self.values, u, self.lowrank_v)
        if torch.is_grad_enabled() and (x2.requires_grad or any(t.requires_grad for t in params)):
            # the slots' dense positions are the host's work: only the dense fallback needs them
            pos = self.positions() if self.backward == "dense" else None
            y = _VNMLinearFn.apply(x2, self.values, self.meta, self.index, pos, u, z, self.out_features,
                                   self.in_features, self.vnm, self.backward)
        else:
            b = _tokens_last(x2, pad)
            y = _spmm(b, self.values, self.meta, self.index, u, z, self.out_features, self.in_features,
                      self.vnm)[:, :x2.shape[0]].t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, vnm={self.vnm}, "
                f"backward={self.backward}" + (f", rank={self.rank}" if self.rank else ""))


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
        ops = sops.ops_for(x2, self.wg_t)
        entries, counts, spill = ops.twell_gate(x2, self.wg_t, self.tile, self.capacity, self.sparsity)
        y = ops.twell_ffn(x2, entries, counts, spill, self.wu_t, self.wd, self.tile, self.capacity,
                                          self.sparsity, None)
        return y.reshape(*lead, self.d_model)


class _SparseReLUFFNFn(torch.autograd.Function):
    """y = Wd . (a (.) (Wu . x)) from the hybrid activations a (hybrid_gate's arrays, an input
    without gradient); forward hybrid_ffn_fwd, backward hybrid_ffn_dx then hybrid_ffn_dw.
    Saves x, the weights' references, H and u: no dense tokens x d_ff tensor."""

    @staticmethod
    def forward(ctx, x2, wg_t, wu_t, wd, sparsity: float, *h):
        y, u_values, u_backup = sops.ops_for(x2, wu_t).hybrid_ffn_fwd(x2, list(h), wu_t, wd, sparsity, None)
        ctx.save_for_backward(x2, wg_t, wu_t, wd, u_values, u_backup, *h)
        ctx.sparsity = sparsity
        return y

    @staticmethod
    def backward(ctx, gy):
        x2, wg_t, wu_t, wd, u_values, u_backup, *h = ctx.saved_tensors
        dy = gy.to(x2.dtype).contiguous()
        ops = sops.ops_for(dy, x2)
        dx, dg_values, dg_backup, du_values, du_backup = ops.hybrid_ffn_dx(dy, h, u_values, u_backup, wg_t, wu_t, wd,
                                                                           ctx.sparsity, None)
        want = ctx.needs_input_grad[1:4]
        grads = (None, None, None)
        if any(want):  # one kernel gives all three: a frozen weight's gradient is dropped, not skipped
            grads = ops.hybrid_ffn_dw(x2, dy, h, u_values, u_backup, dg_values, dg_backup, du_values, du_backup,
                                      ctx.sparsity, None)
        return (dx if ctx.needs_input_grad[0] else None, *(g if w else None for g, w in zip(grads, want)),
                None, *(None for _ in h))


def _in_range(what: str, value: int, lo: int, hi: Optional[int] = None) -> None:
    """Refuses a SparseReLUFFN argument outside lo..hi (no upper bound when hi is None), naming it."""
    if value < lo or (hi is not None and value > hi):
        accepted = f"{lo}..{hi}" if hi is not None else f"{lo} or more"
        raise ValueError(f"SparseReLUFFN: {what} = {value}: expected {accepted}")


class SparseReLUFFN(nn.Module):
    """The ReLU-gated FFN block y = Wd . (relu(Wg . x) (.) (Wu . x)) for training, its activations
    kept in the hybrid format (docs/training.md, "Training with sparse activations"): per token up
    to ``ell_width`` non-zeros in an ELL row, an overflow token's rest in a row of a dense backup.

    Weights one row per d_ff unit, as Parameters: wg_t, wu_t, wd (d_ff x d_model, f16 or bf16).
    Per call: the gate GEMM writes the activations hybrid (``hybrid_gate``, tensor cores), the
    forward computes u only at the active pairs and y from them (``hybrid_ffn_fwd``), and the
    backward gets dh, dg, du at the active pairs and dx (``hybrid_ffn_dx``); what is kept for the
    backward is x, H and u, no dense tokens x d_ff tensor. The three weight gradients come from
    those compact per-pair values through ``hybrid_ffn_dw``, sparse products over the active pairs
    only (per unit, its tokens' rows of x and dy; no dense pass).

    The backup: ``backup_rows`` is its capacity (clamped to the tokens of a call). After the gate
    the module reads back how many rows overflowed - a synchronisation, so a forward is not
    CUDA-graph capturable and does not trace under torch.compile (the ops alone do) - and when
    they exceed the capacity it grows ``backup_rows`` to them plus an eighth (at most the tokens)
    and runs the gate again: no row is ever dropped. ``last_report`` (an sj_hybrid_report) says
    where the last call's rows went. ``sparsity``: the activations' expected fraction of zeros
    (picks the tuned kernels)."""

    def __init__(self, d_model: int, d_ff: int, ell_width: int = 128, backup_rows: int = 0, sparsity: float = 0.99,
                 dtype: torch.dtype = torch.bfloat16, device: Optional[torch.device] = None):
        super().__init__()
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"SparseReLUFFN: dtype {dtype}: expected torch.float16 or torch.bfloat16")
        if d_model < 8 or d_model % 8:
            raise ValueError(f"SparseReLUFFN: d_model = {d_model}: expected a positive multiple of 8")
        _in_range("d_ff", d_ff, 1, 65536)
        _in_range("ell_width", ell_width, 1, d_ff)
        _in_range("backup_rows", backup_rows, 0)
        if not 0.0 <= sparsity < 1.0:
            raise ValueError(f"SparseReLUFFN: sparsity = {sparsity}: expected a fraction of zeros in [0, 1)")
        self.d_model, self.d_ff, self.ell_width, self.sparsity = d_model, d_ff, ell_width, sparsity
        self.backup_rows = backup_rows
        self.last_report: Optional[HybridReport] = None
        self.wg_t = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device))
        self.wu_t = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device))
        self.wd = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype, device=device))
        for w in (self.wg_t, self.wu_t, self.wd):
            nn.init.normal_(w, std=d_model ** -0.5)

    def activations(self, x2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """relu(x2 . Wg) as hybrid_gate's arrays, complete: the gate, one read of the overflow
        count (synchronises), and when the backup was too small a larger one and the gate again."""
        tokens, w = x2.shape[0], self.ell_width
        ops = sops.ops_for(x2, self.wg_t)
        x2, wg_t = x2.detach(), self.wg_t.detach()
        rows = min(self.backup_rows, tokens)
        h = ops.hybrid_gate(x2, wg_t, w, rows, self.sparsity)
        nnz = h[2]
        overflow, total, ell = torch.stack((h[6][0].to(torch.int64), nnz.sum(dtype=torch.int64),
                                            nnz.clamp(max=w).sum(dtype=torch.int64))).tolist()
        if overflow > rows:
            self.backup_rows = min(tokens, overflow + overflow // 8)
            h = ops.hybrid_gate(x2, wg_t, w, self.backup_rows, self.sparsity)
        self.last_report = HybridReport(rows_ell=tokens - overflow, rows_backup=overflow, rows_unplaced=0,
                                        backup_needed=overflow, nnz=total, nnz_ell=ell, nnz_backup=total - ell)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.d_model).to(self.wg_t.dtype).contiguous()
        y = _SparseReLUFFNFn.apply(x2, self.wg_t, self.wu_t, self.wd, self.sparsity, *self.activations(x2))
        return y.reshape(*lead, self.d_model)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_ff={self.d_ff}, ell_width={self.ell_width}, "
                f"backup_rows={self.backup_rows}, sparsity={self.sparsity}")


class GMP:
    """Gradual magnitude pruning of a model's nn.Linear layers on the device (Zhu and Gupta's
    cubic schedule, ending in V:2:M; docs/training.md), then the swap to VNMLinear.

    A VNMLinear's compressed layout holds one pattern, so the dense-to-pattern part of the
    schedule runs on the dense weights with a uint8 mask per layer: call ``step(t)`` after each
    optimizer step; at a pruning step it runs ``torch.ops.sparsejit.gmp_prune`` (the pattern's
    slots, then unstructured magnitude pruning inside them; no host round trip), otherwise it
    re-applies the mask to what the optimizer moved. ``finish(model)`` swaps every pruned layer for
    a VNMLinear of the final pattern (compressed exactly: the weight has it), whose backward runs
    on the training products. Weights must be f16 or bf16 on a GPU."""

    def __init__(self, model: nn.Module, vnm: str, final_sparsity: Optional[float] = None,
                 initial_sparsity: float = 0.0, start_step: int = 0, interval: int = 1, n_steps: int = 1):
        self.vnm = vnm
        self.schedule = sops.gmp_schedule(vnm, final_sparsity, initial_sparsity, start_step, interval, n_steps)
        self.layers = {name: mod for name, mod in model.named_modules() if isinstance(mod, nn.Linear)}
        if not self.layers:
            raise ValueError("GMP: the model has no nn.Linear layer to prune")
        self.masks = {name: torch.ones(mod.weight.shape, dtype=torch.uint8, device=mod.weight.device)
                      for name, mod in self.layers.items()}

    @property
    def last_step(self) -> int:
        """The schedule's last pruning step: finish() after it."""
        s = self.schedule
        return s.start_step + s.interval * s.n_steps

    @torch.no_grad()
    def step(self, step: int) -> float:
        """Prunes (at a pruning step) or re-masks every layer; returns the target sparsity."""
        t = sops.gmp_target(self.schedule, step)
        s = self.schedule
        for name, lin in self.layers.items():
            if t.prune_now:
                torch.ops.sparsejit.gmp_prune(lin.weight, self.masks[name], step, s.initial_sparsity,
                                              s.final_sparsity, s.start_step, s.interval, s.n_steps, s.v, s.m)
            else:
                lin.weight.mul_(self.masks[name])
        return t.sparsity

    def finish(self, model: nn.Module, backward: str = "exact") -> nn.Module:
        """model with every pruned nn.Linear replaced by a VNMLinear of the final pattern."""
        for name in self.layers:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, VNMLinear.from_dense(self.layers[name], self.vnm, select="exact",
                                                        backward=backward))
        return model
