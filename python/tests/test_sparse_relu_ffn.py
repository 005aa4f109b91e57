"""sparsejit.nn.SparseReLUFFN and the hybrid ops under it (hybrid_gate, hybrid_ffn_fwd,
hybrid_ffn_dx, hybrid_ffn_dw). Without a GPU: the ops' fake shapes, their refusals and the module's, the plans,
and the module's whole step (gate, backup growth, report, autograd, the weight gradients from the
compact per-pair values) on the CPU with stand-ins for the kernels (the three that write the hybrid
format's arrays as the C API documents them, and the weight gradients'), every unspecified slot poisoned. On a GPU: the step
through the real kernels against fp64 autograd of the dense block at 50% and 99% zeros, every
row overflowing in some cases, the eager bodies against the torch ops, and the variants that take
a workspace (ALGO=2, BUSY) forced: their workspaces from torch's allocator, the step against fp64.
Skips, saying why, where torch or a GPU is missing."""
from __future__ import annotations

import ctypes
import statistics

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch layer is not tested here")

import sparsejit  # noqa: E402
import sparsejit.nn  # noqa: E402
import sparsejit.ops  # noqa: E402

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")
F16, BF16 = torch.float16, torch.bfloat16
#: Relative error allowed against fp64 (norm of the difference over the reference's): fp32
#: accumulation, with a, u and the outputs rounded to the dtype (tests/test_hybrid_ffn_gpu.c's).
TOL = {F16: 1e-2, BF16: 3e-2}


# ---------------------------------------------------------------- data and the fp64 reference


def ffn_inputs(tokens: int, d_model: int, d_ff: int, sparsity: float, dtype: torch.dtype, device: str,
               seed: int) -> tuple[torch.Tensor, ...]:
    """x (tokens x d_model), wg_t, wu_t, wd (d_ff x d_model) and dy, random, with a gate bias that
    makes about `sparsity` of the gate negative: x's column 0 is 1 and wg_t's column 0 the bias."""
    gen = torch.Generator().manual_seed(seed)
    x, dy = (torch.randn(tokens, d_model, generator=gen) for _ in range(2))
    wg, wu, wd = (torch.randn(d_ff, d_model, generator=gen) * d_model ** -0.5 for _ in range(3))
    x[:, 0] = 1.0
    wg[:, 0] = -((d_model - 1) / d_model) ** 0.5 * statistics.NormalDist().inv_cdf(sparsity)
    return tuple(t.to(dtype).to(device) for t in (x, wg, wu, wd, dy))


def fp64_step(x, wg, wu, wd, dy) -> tuple[torch.Tensor, ...]:
    """y, dx, dWgT, dWuT, dWd of the dense block in fp64 autograd (the ReLU a mask of g > 0)."""
    x, wg, wu, wd = (t.detach().double().requires_grad_(True) for t in (x, wg, wu, wd))
    y = (torch.relu(x @ wg.t()) * (x @ wu.t())) @ wd
    y.backward(dy.double())
    return y.detach(), x.grad, wg.grad, wu.grad, wd.grad


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def check_step(m: "sparsejit.nn.SparseReLUFFN", tokens: int, sparsity: float, seed: int, lead: tuple) -> None:
    """One training step of m on fresh inputs (x shaped lead x d_model) against fp64_step."""
    x, wg, wu, wd, dy = ffn_inputs(tokens, m.d_model, m.d_ff, sparsity, m.wg_t.dtype, m.wg_t.device.type, seed)
    with torch.no_grad():
        for w, value in ((m.wg_t, wg), (m.wu_t, wu), (m.wd, wd)):
            w.copy_(value)
    xr = x.reshape(*lead, m.d_model).requires_grad_(True)
    y = m(xr)
    assert y.shape == xr.shape and y.dtype == x.dtype
    y.backward(dy.reshape(y.shape))
    ref = fp64_step(x, wg, wu, wd, dy)
    tol = TOL[x.dtype]
    for what, out, r in zip(("y", "dx", "dWgT", "dWuT", "dWd"),
                            (y.reshape(tokens, -1), xr.grad.reshape(tokens, -1), m.wg_t.grad, m.wu_t.grad, m.wd.grad),
                            ref):
        assert out.dtype == x.dtype, what
        assert rel_error(out, r) < tol, f"{what}: relative error {rel_error(out, r):g} (tolerance {tol:g})"
    g = x.double() @ wg.double().t()
    overflow = int(((g > 0).sum(1) > m.ell_width).sum())
    rep = m.last_report
    assert (rep.rows_unplaced, rep.rows_ell + rep.rows_backup) == (0, tokens)
    assert rep.rows_backup == pytest.approx(overflow, abs=1) and m.backup_rows >= rep.rows_backup
    assert rep.nnz == pytest.approx(int((g > 0).sum()), rel=1e-3, abs=1)
    assert rep.nnz_ell + rep.nnz_backup == rep.nnz


# ---------------------------------------------------------------- no GPU: the ops' fakes and refusals


def _fake_operands(tokens=40, d_model=64, d_ff=200, dtype=BF16):
    x = torch.empty(tokens, d_model, dtype=dtype, device="cuda")
    w = torch.empty(d_ff, d_model, dtype=dtype, device="cuda")
    return x, w


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("backup_rows", [0, 7])
def test_hybrid_ops_fake_shapes_without_a_gpu(dtype, backup_rows):
    from torch._subclasses.fake_tensor import FakeTensorMode
    tokens, d_model, d_ff, width = 40, 64, 200, 16
    with FakeTensorMode():
        x, w = _fake_operands(tokens, d_model, d_ff, dtype)
        h = torch.ops.sparsejit.hybrid_gate(x, w, width, backup_rows, 0.99)
        assert [(tuple(t.shape), t.dtype) for t in h] == list(
            sparsejit.ops.hybrid_shapes(tokens, d_ff, width, backup_rows, dtype))
        assert sparsejit.ops.hybrid_shapes(tokens, d_ff, width, backup_rows, dtype) == (
            ((tokens, width), dtype), ((tokens, width), torch.int16), ((tokens,), torch.int32),
            ((tokens,), torch.int32), ((backup_rows,), torch.int32), ((backup_rows, d_ff), dtype), ((1,), torch.int32))
        y, uv, ub = torch.ops.sparsejit.hybrid_ffn_fwd(x, h, w, w, 0.99, None)
        assert (y.shape, y.dtype) == ((tokens, d_model), dtype)
        assert (uv.shape, ub.shape, uv.dtype, ub.dtype) == ((tokens, width), (backup_rows, d_ff), dtype, dtype)
        y32 = torch.ops.sparsejit.hybrid_ffn_fwd(x, h, w, w, 0.99, torch.float32)[0]
        assert y32.dtype == torch.float32
        dx, dgv, dgb, duv, dub = torch.ops.sparsejit.hybrid_ffn_dx(x, h, uv, ub, w, w, w, 0.5, None)
        assert (dx.shape, dx.dtype) == ((tokens, d_model), dtype)
        for t, shape in ((dgv, (tokens, width)), (duv, (tokens, width)), (dgb, (backup_rows, d_ff)),
                         (dub, (backup_rows, d_ff))):
            assert (t.shape, t.dtype) == (shape, torch.float32)
        for out_dtype in (None, torch.float32):
            grads = torch.ops.sparsejit.hybrid_ffn_dw(x, x, h, uv, ub, dgv, dgb, duv, dub, 0.5, out_dtype)
            assert [(g.shape, g.dtype) for g in grads] == [((d_ff, d_model), out_dtype or dtype)] * 3


def _call(case: str):
    """One op call with the argument `case` names made wrong (under fake tensors)."""
    x, w = _fake_operands()
    h = torch.ops.sparsejit.hybrid_gate(x, w, 16, 4, 0.99)
    uv, ub = torch.empty(40, 16, dtype=BF16, device="cuda"), torch.empty(4, 200, dtype=BF16, device="cuda")
    ops = torch.ops.sparsejit
    calls = {
        "x dtype": lambda: ops.hybrid_gate(x.float(), w.float(), 16, 4, 0.99),
        "d_model": lambda: ops.hybrid_gate(x[:, :60].contiguous(), w[:, :60].contiguous(), 16, 4, 0.99),
        "wg_t": lambda: ops.hybrid_gate(x, w[:, :32].contiguous(), 16, 4, 0.99),
        "width 0": lambda: ops.hybrid_gate(x, w, 0, 4, 0.99),
        "width > d_ff": lambda: ops.hybrid_gate(x, w, 201, 4, 0.99),
        "backup_rows": lambda: ops.hybrid_gate(x, w, 16, 41, 0.99),
        "sparsity": lambda: ops.hybrid_gate(x, w, 16, 4, 1.0),
        "h length": lambda: ops.hybrid_ffn_fwd(x, list(h)[:6], w, w, 0.99, None),
        "h.columns": lambda: ops.hybrid_ffn_fwd(x, [*h[:1], h[1].int(), *h[2:]], w, w, 0.99, None),
        "h tokens": lambda: ops.hybrid_ffn_fwd(x[:32].contiguous(), h, w, w, 0.99, None),
        "wd": lambda: ops.hybrid_ffn_fwd(x, h, w, w[:100].contiguous(), 0.99, None),
        "out_dtype": lambda: ops.hybrid_ffn_fwd(x, h, w, w, 0.99, torch.int8),
        "u_backup": lambda: ops.hybrid_ffn_dx(x, h, uv, ub[:3].contiguous(), w, w, w, 0.99, None),
        "wg_t of dx": lambda: ops.hybrid_ffn_dx(x, h, uv, ub, w.half(), w, w, 0.99, None),
        "dg of dw": lambda: ops.hybrid_ffn_dw(x, x, h, uv, ub, uv, ub.float(), uv.float(), ub.float(), 0.99, None),
        "dy of dw": lambda: ops.hybrid_ffn_dw(x, x[:32].contiguous(), h, uv, ub, uv.float(), ub.float(), uv.float(),
                                              ub.float(), 0.99, None),
    }
    return calls[case]()


@pytest.mark.parametrize("case, message", [
    ("x dtype", r"hybrid_gate: x: dtype torch.float32 is not supported"),
    ("d_model", r"hybrid_gate: x is \(40, 60\); expected tokens x d_model with d_model a multiple of 8"),
    ("wg_t", r"hybrid_gate: wg_t \(200, 32\) .* does not fit x"),
    ("width 0", r"width W = 0: expected 1..cols \(cols = 200\)"),
    ("width > d_ff", r"width W = 201: expected 1..cols"),
    ("backup_rows", r"backup_rows = 41: expected 0..rows \(rows = 40\)"),
    ("sparsity", r"twell_sparsity = 1: expected a fraction of zeros in \[0, 1\)"),
    ("h length", r"hybrid_ffn_fwd: h holds 6 tensors; expected hybrid_gate's 7 \(values, columns"),
    ("h.columns", r"hybrid_ffn_fwd: h.columns is \(40, 16\) torch.int32; expected \(40, 16\) torch.int16"),
    ("h tokens", r"hybrid_ffn_fwd: h.values is \(40, 16\) .* expected \(32, 16\)"),
    ("wd", r"hybrid_ffn_fwd: wd is \(100, 64\) .* expected \(200, 64\)"),
    ("out_dtype", r"hybrid_ffn: out_dtype: dtype torch.int8 is not supported"),
    ("u_backup", r"hybrid_ffn_dx: u_backup is \(3, 200\) .* expected \(4, 200\)"),
    ("wg_t of dx", r"hybrid_ffn_dx: wg_t is \(200, 64\) torch.float16; expected \(200, 64\) torch.bfloat16"),
    ("dg of dw", r"hybrid_ffn_dw: dg_values is \(40, 16\) torch.bfloat16; expected \(40, 16\) torch.float32"),
    ("dy of dw", r"hybrid_ffn_dw: x \(40, 64\) torch.bfloat16 and dy \(32, 64\) torch.bfloat16: expected both"),
])
def test_hybrid_ops_refuse_bad_arguments_by_name(case, message):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(), pytest.raises(ValueError, match=message):
        _call(case)


def test_hybrid_ops_refuse_cpu_tensors_clearly():
    x, w = torch.zeros(16, 64, dtype=BF16), torch.zeros(128, 64, dtype=BF16)
    with pytest.raises(ValueError, match="hybrid_gate: x: expected a CUDA tensor"):
        torch.ops.sparsejit.hybrid_gate(x, w, 16, 0, 0.99)


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": torch.float32}, r"dtype torch.float32: expected torch.float16 or torch.bfloat16"),
    ({"d_model": 100}, r"d_model = 100: expected a positive multiple of 8"),
    ({"d_ff": 0}, r"d_ff = 0: expected 1..65536"),
    ({"d_ff": 65537}, r"d_ff = 65537: expected 1..65536"),
    ({"ell_width": 0}, r"ell_width = 0: expected 1..96"),
    ({"ell_width": 97}, r"ell_width = 97: expected 1..96"),
    ({"backup_rows": -1}, r"backup_rows = -1: expected 0 or more"),
    ({"sparsity": 1.0}, r"sparsity = 1.0: expected a fraction of zeros in \[0, 1\)"),
])
def test_sparse_relu_ffn_refuses_bad_arguments_by_name(kwargs, message):
    args = {"d_model": 64, "d_ff": 96, "ell_width": 8, **kwargs}
    with pytest.raises(ValueError, match="SparseReLUFFN: " + message):
        sparsejit.nn.SparseReLUFFN(**args, device="meta")


def test_sparse_relu_ffn_parameters_and_state_dict():
    m = sparsejit.nn.SparseReLUFFN(64, 96, ell_width=8, dtype=F16, device="meta")
    assert set(m.state_dict()) == {"wg_t", "wu_t", "wd"}
    assert all(p.shape == (96, 64) and p.dtype == F16 and p.requires_grad for p in m.parameters())
    assert "ell_width=8" in repr(m) and m.last_report is None


def _fields(s) -> tuple:
    return tuple(getattr(s, f) for f, _ in s._fields_)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_hybrid_plans_equal_fresh_structs_and_refusals_are_not_kept(dtype):
    from sparsejit._lib import HybridLayout, Problem, call
    ops, code = sparsejit.ops, {F16: 1, BF16: 2}[dtype]
    tokens, d_ff, width, rows, d_model = 77, 3001, 64, 9, 1032
    lay = HybridLayout()
    call("sj_hybrid_layout_init", ctypes.byref(lay), code, tokens, d_ff, width, rows)
    lay_c, p = ops._hybrid_gate_plan(tokens, d_ff, width, rows, dtype, d_model, 0.95)
    fresh = Problem()
    call("sj_hybrid_gate_problem", ctypes.byref(lay), d_model, ctypes.byref(fresh))
    fresh.twell_sparsity = 0.95
    assert (_fields(lay_c), _fields(p)) == (_fields(lay), _fields(fresh))
    for op in (10, 11, 12):  # hybrid-ffn-fwd, hybrid-ffn-dx, hybrid-ffn-dw
        lay_c, p = ops._hybrid_ffn_plan(op, tokens, d_ff, width, rows, dtype, d_model, torch.float32, 0.95)
        call("sj_hybrid_ffn_problem", ctypes.byref(lay), op, d_model, ctypes.byref(fresh))
        fresh.out_dtype, fresh.twell_sparsity = 3, 0.95
        assert (_fields(lay_c), _fields(p)) == (_fields(lay), _fields(fresh))
    before = ops._hybrid_gate_plan.cache_info().currsize
    for _ in range(2):
        with pytest.raises(sparsejit.InvalidArgumentError, match="backup_rows"):
            ops._hybrid_gate_plan(tokens, d_ff, width, tokens + 1, dtype, d_model, 0.95)
    assert ops._hybrid_gate_plan.cache_info().currsize == before


# ---------------------------------------------------------------- no GPU: the whole step over stand-in kernels

_NAN = float("nan")


def hybrid_from_dense(a: torch.Tensor, width: int, backup_rows: int, gen: torch.Generator) -> list[torch.Tensor]:
    """The arrays the gate kernel may write for the activations a (tokens x d_ff, 16-bit), as
    include/sparsejit.h allows: W of each row's non-zeros in the ELL, any W and in any order; an
    overflow row's rest in the backup row the counter hands it (tokens arrive in any order) while
    there is one, else unplaced (slot = the counter's value); counter = the overflow rows. Every
    slot the format leaves unspecified holds garbage: NaN values, random columns and owners."""
    tokens, d_ff = a.shape
    values = torch.full((tokens, width), _NAN, dtype=a.dtype)
    columns = torch.randint(-2 ** 15, 2 ** 15, (tokens, width), generator=gen).to(torch.int16)
    nnz = torch.zeros(tokens, dtype=torch.int32)
    slot = torch.full((tokens,), -1, dtype=torch.int32)
    owner = torch.randint(-2 ** 31, 2 ** 31 - 1, (backup_rows,), generator=gen).to(torch.int32)
    backup = torch.zeros(backup_rows, d_ff, dtype=a.dtype)
    counter = 0
    for t in torch.randperm(tokens, generator=gen).tolist():
        cols = torch.nonzero(a[t]).flatten()
        cols = cols[torch.randperm(len(cols), generator=gen)]
        nnz[t] = len(cols)
        ell, rest = cols[:width], cols[width:]
        values[t, :len(ell)] = a[t, ell]
        columns[t, :len(ell)] = ell.to(torch.int32).to(torch.int16)
        if len(rest):
            slot[t] = counter
            if counter < backup_rows:
                owner[counter] = t
                backup[counter, rest] = a[t, rest]
            counter += 1
    return [values, columns, nnz, slot, owner, backup, torch.tensor([counter], dtype=torch.int32)]


def _pairs(h: list[torch.Tensor]):
    """Per token: its ELL slots' columns (k of them) and its backup row (None without one)."""
    values, columns, nnz, slot, owner, backup, _ = h
    width, rows = values.shape[1], backup.shape[0]
    for t in range(values.shape[0]):
        k = min(int(nnz[t]), width)
        s = int(slot[t]) if int(nnz[t]) > width else None
        yield t, k, columns[t, :k].to(torch.int64) & 0xFFFF, s if s is None or s < rows else -1


def dense_of(h: list[torch.Tensor], ell: torch.Tensor, bk: torch.Tensor) -> torch.Tensor:
    """The fp64 tokens x d_ff matrix of per-pair values ell / bk at h's pairs; NaN rows for
    unplaced overflow rows (what the kernels give them)."""
    out = torch.zeros(h[0].shape[0], h[5].shape[1], dtype=torch.float64)
    for t, k, cols, s in _pairs(h):
        out[t, cols] = ell[t, :k].double()
        if s == -1:
            out[t] = _NAN
        elif s is not None:
            held = h[5][s] != 0
            out[t, held] = bk[s, held].double()
    return out


def at_pairs(h: list[torch.Tensor], dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dense's values at h's pairs in ELL- and backup-shaped arrays; NaN everywhere else."""
    ell = torch.full(h[0].shape, _NAN, dtype=dense.dtype)
    bk = torch.full(h[5].shape, _NAN, dtype=dense.dtype)
    for t, k, cols, s in _pairs(h):
        ell[t, :k] = dense[t, cols]
        if s is not None and s >= 0:
            held = h[5][s] != 0
            bk[s, held] = dense[t, held]
    return ell, bk


STAND_INS = ("hybrid_gate", "hybrid_ffn_fwd", "hybrid_ffn_dx", "hybrid_ffn_dw")


class StandInKernels:
    """The ops of STAND_INS on the CPU, to the C API's contracts (fp64 products, a, u and the
    outputs rounded to the dtype, the per-pair gradients fp32; the weight gradients read only the
    pairs' values, a u from the stored a and u); counts the gates run."""

    def __init__(self, seed: int):
        self.gen = torch.Generator().manual_seed(seed)
        self.gates = 0

    def hybrid_gate(self, x, wg_t, width, backup_rows, sparsity):
        self.gates += 1
        a = torch.relu(x.double() @ wg_t.double().t()).to(x.dtype)
        return hybrid_from_dense(a, width, backup_rows, self.gen)

    def hybrid_ffn_fwd(self, x, h, wu_t, wd, sparsity, out_dtype=None):
        u = (x.double() @ wu_t.double().t()).to(x.dtype)
        y = (dense_of(h, h[0], h[5]) * u.double()) @ wd.double()
        return (y.to(out_dtype or x.dtype), *at_pairs(h, u))

    def hybrid_ffn_dx(self, dy, h, u_values, u_backup, wg_t, wu_t, wd, sparsity, out_dtype=None):
        dh = dy.double() @ wd.double().t()
        dg, du = dh * dense_of(h, u_values, u_backup), dh * dense_of(h, h[0], h[5])
        dx = dg @ wg_t.double() + du @ wu_t.double()
        return (dx.to(out_dtype or dy.dtype), *at_pairs(h, dg.float()), *at_pairs(h, du.float()))

    def hybrid_ffn_dw(self, x, dy, h, u_values, u_backup, dg_values, dg_backup, du_values, du_backup, sparsity,
                      out_dtype=None):
        hu = dense_of(h, h[0], h[5]) * dense_of(h, u_values, u_backup)
        grads = (dense_of(h, dg_values, dg_backup).t() @ x.double(), dense_of(h, du_values, du_backup).t() @ x.double(),
                 hu.t() @ dy.double())
        return tuple(g.to(out_dtype or x.dtype) for g in grads)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("sparsity, width, backup_rows, case", [
    (0.5, 8, 2, "every row overflows; the backup grows"),
    (0.5, 8, 30, "every row overflows into a backup that holds them"),
    (0.9, 6, 30, "some rows overflow; backup rows past the counter"),
    (0.99, 8, 0, "nothing overflows"),
])
def test_step_on_the_cpu_with_stand_in_kernels(monkeypatch, dtype, sparsity, width, backup_rows, case):
    """Everything of SparseReLUFFN but the kernels: the gate and its growth, the report, the
    autograd function passing the compact values among poisoned slots to the weight gradients."""
    kernels = StandInKernels(seed=1)
    for name in STAND_INS:
        monkeypatch.setattr(sparsejit.ops.EAGER, name, getattr(kernels, name))
    m = sparsejit.nn.SparseReLUFFN(64, 96, ell_width=width, backup_rows=backup_rows, sparsity=sparsity, dtype=dtype)
    check_step(m, 30, sparsity, seed=2, lead=(3, 10))
    grew = m.last_report.backup_needed > backup_rows
    assert kernels.gates == 1 + grew
    assert m.backup_rows == (min(30, m.last_report.backup_needed * 9 // 8) if grew else backup_rows)
    if case.startswith("every row"):
        assert m.last_report.rows_backup == 30
    m.zero_grad()
    check_step(m, 30, sparsity, seed=2, lead=(30,))  # the grown backup holds them: one gate
    assert kernels.gates == 2 + grew


def test_weight_gradients_that_are_not_wanted_are_not_returned(monkeypatch):
    kernels = StandInKernels(seed=3)
    for name in STAND_INS:
        monkeypatch.setattr(sparsejit.ops.EAGER, name, getattr(kernels, name))
    m = sparsejit.nn.SparseReLUFFN(64, 96, ell_width=8, backup_rows=30, sparsity=0.9, dtype=BF16)
    m.wu_t.requires_grad_(False)
    x = torch.randn(30, 64, dtype=BF16)
    m(x).sum().backward()
    assert m.wu_t.grad is None and m.wg_t.grad is not None and m.wd.grad is not None


# ---------------------------------------------------------------- GPU


@gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("tokens, d_model, d_ff, width, backup_rows, sparsity", [
    (256, 512, 1024, 128, 32, 0.99),
    (130, 264, 768, 32, 8, 0.50),     # every row overflows; the backup grows to all of them
    (130, 264, 768, 32, 130, 0.50),   # every row overflows into a backup that holds them
    (77, 1032, 3001, 64, 0, 0.50),    # ragged; every row overflows; the backup grows from nothing
    (96, 136, 5632, 16, 8, 0.99),     # ragged d_model, narrow ELL
    (129, 2048, 2048, 256, 0, 0.99),  # nothing overflows
])
def test_step_matches_fp64_on_the_gpu(dtype, tokens, d_model, d_ff, width, backup_rows, sparsity):
    """Forward, input gradient and all three weight gradients through the kernels against fp64
    autograd of the dense block, twice (the second step with the backup the first one grew)."""
    m = sparsejit.nn.SparseReLUFFN(d_model, d_ff, ell_width=width, backup_rows=backup_rows, sparsity=sparsity,
                                   dtype=dtype, device="cuda")
    check_step(m, tokens, sparsity, seed=tokens + d_ff, lead=(tokens,))
    if sparsity == 0.5:
        assert m.last_report.rows_backup == tokens and m.backup_rows == tokens
    m.zero_grad()
    check_step(m, tokens, sparsity, seed=tokens + d_ff + 1, lead=(1, tokens))


@gpu
def test_eager_bodies_give_the_hybrid_ops_results():
    ops, eager = torch.ops.sparsejit, sparsejit.ops.EAGER
    x, wg, wu, wd, dy = ffn_inputs(200, 256, 1024, 0.9, BF16, "cuda", seed=5)
    h = ops.hybrid_gate(x, wg, 64, 200, 0.9)
    h2 = eager.hybrid_gate(x, wg, 64, 200, 0.9)
    for name, a, b in zip(sparsejit.ops.HYBRID_ARRAYS, h, h2):
        if name in ("nnz", "counter"):  # the rest is written in the order the thread blocks arrive
            assert torch.equal(a, b), name
    fwd = ops.hybrid_ffn_fwd(x, h, wu, wd, 0.9, None)
    assert torch.equal(fwd[0], eager.hybrid_ffn_fwd(x, h, wu, wd, 0.9, None)[0])
    dx = ops.hybrid_ffn_dx(dy, h, fwd[1], fwd[2], wg, wu, wd, 0.9, torch.float32)[0]
    assert torch.equal(dx, eager.hybrid_ffn_dx(dy, h, fwd[1], fwd[2], wg, wu, wd, 0.9, torch.float32)[0])
    assert dx.dtype == torch.float32 and dx.isfinite().all()
    pairs = ops.hybrid_ffn_dx(dy, h, fwd[1], fwd[2], wg, wu, wd, 0.9, None)[1:]
    for a, b in zip(ops.hybrid_ffn_dw(x, dy, h, fwd[1], fwd[2], *pairs, 0.9, None),
                    eager.hybrid_ffn_dw(x, dy, h, fwd[1], fwd[2], *pairs, 0.9, None)):
        assert torch.equal(a, b) and a.isfinite().all()  # deterministic: the sums run in token order


def _taking_torch_memory(call, workspace: int):
    """call()'s outputs, after checking that torch's allocator peaked at least at the outputs'
    bytes and workspace more during it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = call()
    torch.cuda.synchronize()
    outputs = sum(t.numel() * t.element_size() for t in out)
    assert torch.cuda.max_memory_allocated() - before >= outputs + workspace
    return out


@gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_workspace_variants_take_torch_memory_and_match_fp64(dtype):
    """The tensor-core fwd and dx (ALGO=2) and the busy units' dw (BUSY=128) forced: each op's
    workspace comes from torch's caching allocator (the peak grows by the outputs and at least
    sj_hybrid_ffn_workspace's bytes, which are not 0), and a training step still matches fp64."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("ALGO=2 needs sm_90a (an H100)")
    tokens, d_model, d_ff, width, sparsity = 512, 256, 1024, 64, 0.9
    ops, sops = torch.ops.sparsejit, sparsejit.ops
    fwd_op, dx_op, dw_op = sops._OP_HYBRID_FFN_FWD, sops._OP_HYBRID_FFN_DX, sops._OP_HYBRID_FFN_DW
    ctx = sparsejit.Context.for_device(torch.cuda.current_device())
    configs = {fwd_op: "ALGO=2", dx_op: "ALGO=2", dw_op: "BUSY=128"}
    plans = {op: sops._hybrid_ffn_plan(op, tokens, d_ff, width, tokens, dtype, d_model, dtype, sparsity)
             for op in configs}
    try:
        for op, config in configs.items():
            ctx.set_config(plans[op][1], config)
        x, wg, wu, wd, dy = ffn_inputs(tokens, d_model, d_ff, sparsity, dtype, "cuda", seed=3)
        need = {op: sops._hybrid_workspace(ctx.handle, p, lay, x.device).numel() for op, (lay, p) in plans.items()}
        assert all(need.values()), need
        h = ops.hybrid_gate(x, wg, width, tokens, sparsity)
        fwd = _taking_torch_memory(lambda: ops.hybrid_ffn_fwd(x, h, wu, wd, sparsity, None), need[fwd_op])
        dx = _taking_torch_memory(lambda: ops.hybrid_ffn_dx(dy, h, *fwd[1:], wg, wu, wd, sparsity, None), need[dx_op])
        _taking_torch_memory(lambda: ops.hybrid_ffn_dw(x, dy, h, *fwd[1:], *dx[1:], sparsity, None), need[dw_op])
        m = sparsejit.nn.SparseReLUFFN(d_model, d_ff, ell_width=width, backup_rows=tokens, sparsity=sparsity,
                                       dtype=dtype, device="cuda")
        check_step(m, tokens, sparsity, seed=4, lead=(tokens,))
    finally:
        for op in configs:
            ctx.set_config(plans[op][1], "")
