"""The PyTorch layer: fake (meta) implementations without a GPU, VNMLinear with low-rank adapters
over CPU stand-ins of its kernels against fp64 autograd, then on a GPU every op against a
torch reference (fp64 where it matters), VNMLinear's gradients (each backward: exact, double
pruned, dense fallback; with adapters) against fp64 autograd on the masked weight, the training ops' fake shapes
and argument errors, a state_dict round trip, CUDA-graph capture of a forward and torch.compile of a
small model. Skips, saying why, where torch or a GPU is missing."""
from __future__ import annotations

import ctypes

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch layer is not tested here")

import sparsejit  # noqa: E402
import sparsejit.nn  # noqa: E402
import sparsejit.ops  # noqa: E402,F401

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")


def test_fake_shapes_without_a_gpu():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(256, 512, dtype=torch.float16, device="cuda")
        values, meta, index, word = torch.ops.sparsejit.vnm_compress(a, "64:2:8", "l2")
        nv, nm, ni = sparsejit.ops.vnm_sizes(256, 512, "64:2:8", torch.float16)
        assert (values.shape[0], meta.shape[0], index.shape[0]) == (nv, nm, ni)
        b = torch.empty(512, 64, dtype=torch.float16, device="cuda")
        c = torch.ops.sparsejit.vnm_spmm(values, meta, index, b, 256, 512, "64:2:8", torch.float32)
        assert c.shape == (256, 64) and c.dtype == torch.float32
        x = torch.empty(100, 256, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(1000, 256, dtype=torch.bfloat16, device="cuda")
        e, n, s = torch.ops.sparsejit.twell_gate(x, w, 128, 16, 0.99)
        assert e.shape == (100, 8, 16) and n.shape == (100, 8) and s.shape == (100, 1000)
        y = torch.ops.sparsejit.twell_ffn(x, e, n, s, w, w, 128, 16, 0.99, None)
        assert y.shape == (100, 256) and y.dtype == torch.bfloat16


def _fake_vnm_arrays(rows: int, cols: int, vnm: str, dtype: torch.dtype):
    """values, meta and index of a rows x cols compressed matrix (call under FakeTensorMode)."""
    nv, nm, ni = sparsejit.ops.vnm_sizes(rows, cols, vnm, dtype)
    return (torch.empty(nv, dtype=dtype, device="cuda"), torch.empty(nm, dtype=torch.int32, device="cuda"),
            torch.empty(ni, dtype=torch.int32, device="cuda"))


def test_training_ops_fake_shapes_without_a_gpu():
    from torch._subclasses.fake_tensor import FakeTensorMode
    rows, cols, tokens, vnm = 192, 320, 24, "64:2:8"
    with FakeTensorMode():
        values, meta, index = _fake_vnm_arrays(rows, cols, vnm, torch.bfloat16)
        dy = torch.empty(rows, tokens, dtype=torch.bfloat16, device="cuda")
        x = torch.empty(cols, tokens, dtype=torch.bfloat16, device="cuda")
        dw = torch.ops.sparsejit.vnm_dw(dy, x, meta, index, rows, cols, vnm, torch.float32)
        assert dw.shape == values.shape and dw.dtype == torch.float32
        dx = torch.ops.sparsejit.vnm_dx_exact(values, meta, index, dy, rows, cols, vnm, None)
        assert dx.shape == (cols, tokens) and dx.dtype == torch.bfloat16
        v2, m2, i2 = torch.ops.sparsejit.vnm_double_prune(values, meta, index, rows, cols, vnm)
        assert (v2.shape[0], m2.shape[0], i2.shape[0]) == sparsejit.ops.vnm_sizes(cols, rows, vnm, torch.bfloat16)
        assert v2.dtype == torch.bfloat16 and m2.dtype == i2.dtype == torch.int32


@pytest.mark.parametrize("case, message", [
    ("ragged tokens", "tokens = 20 must be a multiple of 8"),
    ("x rows", r"vnm_dw: x: expected 320 x tokens"),
    ("x dtype", "does not fit dy"),
    ("meta size", "do not hold a 192x320 64:2:8 matrix"),
])
def test_vnm_dw_refuses_bad_arguments_by_name(case, message):
    from torch._subclasses.fake_tensor import FakeTensorMode
    rows, cols, vnm = 192, 320, "64:2:8"
    nv, nm, ni = sparsejit.ops.vnm_sizes(rows, cols, vnm, torch.float16)
    with FakeTensorMode():
        tokens = 20 if case == "ragged tokens" else 16
        dy = torch.empty(rows, tokens, dtype=torch.float16, device="cuda")
        x = torch.empty(cols + (case == "x rows"), tokens, device="cuda",
                        dtype=torch.bfloat16 if case == "x dtype" else torch.float16)
        meta = torch.empty(nm + (case == "meta size"), dtype=torch.int32, device="cuda")
        index = torch.empty(ni, dtype=torch.int32, device="cuda")
        with pytest.raises(ValueError, match=message):
            torch.ops.sparsejit.vnm_dw(dy, x, meta, index, rows, cols, vnm, None)


def test_lowrank_fake_shape_and_refusals_without_a_gpu():
    from torch._subclasses.fake_tensor import FakeTensorMode
    rows, cols, n, vnm = 192, 320, 24, "64:2:8"
    with FakeTensorMode():
        values, meta, index = _fake_vnm_arrays(rows, cols, vnm, torch.float16)
        b = torch.empty(cols, n, dtype=torch.float16, device="cuda")
        u = torch.empty(rows, 32, dtype=torch.float16, device="cuda")
        z = torch.empty(32, n, dtype=torch.float16, device="cuda")
        c = torch.ops.sparsejit.vnm_spmm_lowrank(values, meta, index, b, u, z, rows, cols, vnm, torch.float32)
        assert c.shape == (rows, n) and c.dtype == torch.float32
        for bad_u, bad_z, message in [
            (u[:, :12], z[:12], "rank 12: expected a multiple of 8"),
            (u[:100], z, "do not fit"),
            (u, z[:, :16], "do not fit"),
            (u.bfloat16(), z, "but b is"),
        ]:
            with pytest.raises(ValueError, match=message):
                torch.ops.sparsejit.vnm_spmm_lowrank(values, meta, index, b, bad_u, bad_z, rows, cols, vnm, None)
    with pytest.raises(ValueError, match="rank 12: expected 0"):
        sparsejit.nn.VNMLinear(64, 64, rank=12)


def _host_vnm_linear(out_f: int, in_f: int, vnm: str, dtype: torch.dtype, rank: int, backward: str, seed: int):
    """A VNMLinear on the CPU whose compressed weight comes from the host compressor."""
    g = torch.Generator().manual_seed(seed)
    m = sparsejit.nn.VNMLinear(in_f, out_f, vnm, dtype=dtype, backward=backward, rank=rank)
    dt = "f16" if dtype == torch.float16 else "bf16"
    w = torch.randn(out_f, in_f, generator=g).to(dtype)
    host = sparsejit.vnm_compress(_host_bits(w), vnm, select="l2", dtype=dt)
    with torch.no_grad():
        m.values.copy_(torch.from_numpy(host.values.view("int16").copy()).view(dtype))
        m.meta.copy_(torch.from_numpy(host.meta.view("int32").copy()))
        m.index.copy_(torch.from_numpy(host.index.copy()))
        m.bias.copy_(torch.randn(out_f, generator=g).to(dtype))
        if rank:  # U non-zero, so that every adapter gradient is exercised
            m.lowrank_u.copy_((torch.randn(out_f, rank, generator=g) * 0.1).to(dtype))
    return m


class _StandInVnmKernels:
    """The V:N:M kernels VNMLinear calls, on the CPU in fp32 from a module's masked weight: what
    the device ops compute (tested against fp64 on the GPU), so the test below checks the module's
    autograd wiring alone."""

    def __init__(self, m):
        self.w = m.masked_weight().float()
        self.pos = m.positions()
        self.calls = []

    def vnm_spmm_lowrank(self, values, meta, index, b, u, z, rows, cols, vnm, out_dtype):
        self.calls.append("vnm_spmm_lowrank")
        return (self.w @ b.float() + u.float() @ z.float()).to(out_dtype or b.dtype)

    def vnm_dx_exact(self, values, meta, index, dy, rows, cols, vnm, out_dtype):
        self.calls.append("vnm_dx_exact")
        return (self.w.t() @ dy.float()).to(out_dtype or dy.dtype)

    def vnm_dw(self, dy, x, meta, index, rows, cols, vnm, out_dtype):
        self.calls.append("vnm_dw")
        gw = (dy.float() @ x.float().t()).reshape(-1)
        live = self.pos >= 0
        return torch.where(live, gw[self.pos.clamp(min=0)], torch.zeros(())).to(out_dtype or dy.dtype)


@pytest.mark.parametrize("backward", ["exact", "dense"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rank", [8, 32])
def test_lowrank_vnm_linear_gradients_on_the_cpu_with_stand_in_kernels(monkeypatch, backward, dtype, rank):
    """y = x . (W + U . V)^T + bias with Z = V . x^T by torch and U . Z inside the (stand-in) SpMM:
    the output and the gradients of x, W's values, U, V and the bias against fp64 autograd of the
    dense layer, ragged tokens (not a multiple of 8)."""
    out_f, in_f, tokens = 72, 96, 21
    m = _host_vnm_linear(out_f, in_f, "32:2:8", dtype, rank, backward, seed=rank)
    kernels = _StandInVnmKernels(m)
    for name in ("vnm_spmm_lowrank", "vnm_dx_exact", "vnm_dw"):
        monkeypatch.setattr(sparsejit.ops.EAGER, name, getattr(kernels, name))
    x = torch.randn(3, tokens // 3, in_f).to(dtype).requires_grad_(True)
    y = m(x)
    assert kernels.calls[0] == "vnm_spmm_lowrank"
    g = torch.randn_like(y)
    y.backward(g)
    w = kernels.w.double().requires_grad_(True)
    u = m.lowrank_u.detach().double().requires_grad_(True)
    v = m.lowrank_v.detach().double().requires_grad_(True)
    bias = m.bias.detach().double().requires_grad_(True)
    xr = x.detach().double().requires_grad_(True)
    ref = xr @ (w + u @ v).t() + bias
    ref.backward(g.double())

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert rel(y, ref) < tol
    assert rel(x.grad, xr.grad) < tol
    assert rel(m.lowrank_u.grad, u.grad) < tol
    assert rel(m.lowrank_v.grad, v.grad) < tol
    assert rel(m.bias.grad, bias.grad) < tol
    pos = m.positions()
    live = pos >= 0
    gw = torch.zeros(out_f * in_f, dtype=torch.float64)
    gw[pos[live]] = m.values.grad[live].double()
    ref_gw = w.grad * (kernels.w != 0)
    assert rel(gw.view(out_f, in_f), ref_gw) < tol
    # the forward without autograd takes the same fused path
    with torch.no_grad():
        assert rel(m(x), ref.detach()) < tol


def test_lowrank_state_dict_round_trip_on_the_cpu():
    m = _host_vnm_linear(64, 64, "64:2:8", torch.float16, 16, "exact", seed=3)
    assert set(m.state_dict()) == {"values", "meta", "index", "bias", "lowrank_u", "lowrank_v", "_extra_state"}
    m2 = sparsejit.nn.VNMLinear(64, 64, "64:2:8", rank=16)
    m2.load_state_dict(m.state_dict())
    assert torch.equal(m2.lowrank_u, m.lowrank_u) and torch.equal(m2.lowrank_v, m.lowrank_v)
    plain = sparsejit.nn.VNMLinear(64, 64, "64:2:8")
    assert "rank" not in plain.get_extra_state()  # state_dicts from before adapters still load
    with pytest.raises(ValueError, match="the state_dict holds"):  # adapters never load into a layer without
        plain.load_state_dict(m.state_dict(), strict=False)
    assert (m.lowrank_u.shape, m.lowrank_v.shape) == ((64, 16), (16, 64))
    assert torch.count_nonzero(sparsejit.nn.VNMLinear(64, 64, rank=8).lowrank_u) == 0  # starts as the sparse layer


@pytest.mark.parametrize("tokens", [16, 13])
def test_tokens_last_pads_with_zeros_and_skips_a_transposed_copy(tokens):
    """features x tokens' with zeros past the tokens; a contiguous C's transpose (a VNMLinear's
    output, or an element-wise op of it) comes back as C itself when no padding is needed."""
    from sparsejit.nn import _tokens_last
    g = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 24, generator=g)
    pad = (-tokens) % 8
    b = _tokens_last(x, pad)
    assert b.shape == (24, tokens + pad) and b.is_contiguous()
    assert torch.equal(b[:, :tokens], x.t()) and not b[:, tokens:].any()
    c = torch.randn(24, tokens + pad, generator=g)
    y = torch.relu(c[:, :tokens].t())  # keeps c's strides (column-major tokens x features)
    b = _tokens_last(y, pad)
    assert torch.equal(b[:, :tokens], y.t()) and not b[:, tokens:].any()
    if not pad:
        assert b.data_ptr() == y.data_ptr()  # no copy


def test_vnm_linear_refuses_an_unknown_backward():
    with pytest.raises(ValueError, match="backward 'sparse': expected one of"):
        sparsejit.nn.VNMLinear(64, 64, "64:2:8", backward="sparse")
    assert sparsejit.nn.VNMLinear(64, 64, "64:2:8").backward == "exact"


def test_training_ops_refuse_cpu_tensors_clearly():
    nv, nm, ni = sparsejit.ops.vnm_sizes(64, 64, "64:2:8", torch.float16)
    dy = torch.zeros(64, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="vnm_dw: dy: expected a CUDA tensor"):
        torch.ops.sparsejit.vnm_dw(dy, dy, torch.zeros(nm, dtype=torch.int32), torch.zeros(ni, dtype=torch.int32),
                                   64, 64, "64:2:8", None)


def test_ops_refuse_cpu_tensors_clearly():
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        torch.ops.sparsejit.vnm_compress(torch.randn(64, 64).half(), "64:2:8", "l2")


def _masked_reference(w: torch.Tensor, vnm: str, select: str = "l2") -> torch.Tensor:
    h = sparsejit.vnm_compress(w.cpu().numpy(), vnm, select=select)
    return torch.from_numpy(sparsejit.vnm_decompress(h)).to(w.device, w.dtype)


def test_modules_route_through_the_dispatcher_whenever_something_traces():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Tagged(torch.Tensor):
        pass

    plain = torch.empty(8, 8)
    assert sparsejit.ops.ops_for(plain, torch.nn.Parameter(torch.empty(2))) is sparsejit.ops.EAGER
    assert sparsejit.ops.ops_for(plain, plain.as_subclass(Tagged)) is torch.ops.sparsejit
    with Passthrough():
        assert sparsejit.ops.ops_for(plain) is torch.ops.sparsejit
    with FakeTensorMode():
        fake = torch.empty(8, 8, device="cuda")
        assert sparsejit.ops.ops_for(fake) is torch.ops.sparsejit
    for name in vars(sparsejit.ops.EAGER):  # every body stands for the op of its name
        assert getattr(torch.ops.sparsejit, name).default._schema.name == f"sparsejit::{name}"


@gpu
def test_eager_bodies_give_the_ops_results():
    rows, cols, n = 192, 320, 40
    a = torch.randn(rows, cols, device="cuda").half()
    ops, eager = torch.ops.sparsejit, sparsejit.ops.EAGER
    packed = ops.vnm_compress(a, "64:2:8", "l2")
    for x, y in zip(packed, eager.vnm_compress(a, "64:2:8", "l2")):
        assert torch.equal(x, y)
    b = torch.randn(cols, n, device="cuda").half()
    c = eager.vnm_spmm(*packed[:3], b, rows, cols, "64:2:8", None)
    assert torch.equal(c, ops.vnm_spmm(*packed[:3], b, rows, cols, "64:2:8", None)) and c.isfinite().all()
    dy = torch.randn(rows, n, device="cuda").half()
    assert torch.equal(eager.vnm_dw(dy, b, packed[1], packed[2], rows, cols, "64:2:8", None),
                       ops.vnm_dw(dy, b, packed[1], packed[2], rows, cols, "64:2:8", None))


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_vnm_compress_matches_host_and_spmm_matches_fp64(dtype):
    rows, cols, n = 256, 384, 72
    a = torch.randn(rows, cols, device="cuda").to(dtype)
    values, meta, index, word = torch.ops.sparsejit.vnm_compress(a, "64:2:8", "l2")
    dt = "f16" if dtype == torch.float16 else "bf16"
    host = sparsejit.vnm_compress(a.view(torch.int16).cpu().numpy().view("uint16"), "64:2:8", select="l2", dtype=dt)
    assert (values.view(torch.int16).cpu().numpy().view("uint16") == host.values).all()
    assert (meta.cpu().numpy().view("uint32") == host.meta).all() and (index.cpu().numpy() == host.index).all()
    b = torch.randn(cols, n, device="cuda").to(dtype)
    c = torch.ops.sparsejit.vnm_spmm(values, meta, index, b, rows, cols, "64:2:8", torch.float32)
    dense = torch.from_numpy(sparsejit.vnm_decompress(host).astype("float64")).cuda()
    ref = dense @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-5


@gpu
def test_twell_gate_and_ffn_match_fp64():
    tokens, d_model, d_ff = 256, 256, 1024
    x = torch.randn(tokens, d_model, device="cuda").bfloat16()
    wg, wu, wd = (torch.randn(d_ff, d_model, device="cuda").bfloat16() * d_model ** -0.5 for _ in range(3))
    wg = wg - 0.1  # most units below zero: sparse activations
    e, n, s = torch.ops.sparsejit.twell_gate(x, wg, 128, 16, 0.9)
    h_ref = torch.relu(x.double() @ wg.double().t())
    assert (n.cpu() >= 0).all()
    assert int((h_ref > 0).sum()) == pytest.approx(int(n.sum()), rel=0.01)  # counts, up to rounding at 0
    y = torch.ops.sparsejit.twell_ffn(x, e, n, s, wu, wd, 128, 16, 0.9, torch.float32)
    h = torch.relu((x.float() @ wg.float().t())).bfloat16().double()
    ref = ((h * (x.double() @ wu.double().t())).bfloat16().double()) @ wd.double()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-2


@gpu
def test_vnm_linear_forward_gradients_state_dict():
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128).cuda().half()
    m = sparsejit.nn.VNMLinear.from_dense(lin, "128:2:8")
    w = m.masked_weight().double()
    assert torch.equal(w.half(), _masked_reference(lin.weight.detach(), "128:2:8"))
    x = torch.randn(3, 20, 256, device="cuda", dtype=torch.float16, requires_grad=True)
    y = m(x)
    ref_w = w.clone().requires_grad_(True)
    xr = x.detach().double().requires_grad_(True)
    ref = xr @ ref_w.t() + m.bias.double()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3
    g = torch.randn_like(y)
    y.backward(g)
    ref.backward(g.double())
    assert ((x.grad.double() - xr.grad).norm() / xr.grad.norm()).item() < 2e-3
    gw = torch.zeros(128 * 256, dtype=torch.float64, device="cuda")
    pos = m.positions()
    live = pos >= 0
    gw[pos[live]] = m.values.grad[live].double()
    ref_gw = ref_w.grad * (w != 0)
    assert ((gw.view(128, 256) - ref_gw).norm() / ref_gw.norm()).item() < 2e-3
    m2 = sparsejit.nn.VNMLinear(256, 128, "128:2:8", device="cuda")
    m2.load_state_dict(m.state_dict())
    assert set(m.state_dict()) == {"values", "meta", "index", "bias", "_extra_state"}
    with torch.no_grad():
        assert torch.equal(m2(x), m(x))


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rank", [8, 32, 128])
def test_vnm_spmm_lowrank_and_linear_against_fp64(dtype, rank):
    """The fused op against fp64 (ragged n), and VNMLinear with adapters: output and every
    gradient against fp64 autograd of x . (W + U . V)^T, and a state_dict round trip."""
    rows, cols, n = 200, 328, 40
    lin = torch.nn.Linear(cols, rows).cuda().to(dtype)
    m = sparsejit.nn.VNMLinear.from_dense(lin, "64:2:8", rank=rank)
    with torch.no_grad():
        m.lowrank_u.normal_(0, 0.05)
    w = m.masked_weight().double()
    b = torch.randn(cols, n, device="cuda").to(dtype)
    u, z = m.lowrank_u.detach(), torch.randn(rank, n, device="cuda").to(dtype)
    c = torch.ops.sparsejit.vnm_spmm_lowrank(m.values, m.meta, m.index, b, u, z, rows, cols, "64:2:8", torch.float32)
    ref = w @ b.double() + u.double() @ z.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-5
    x = torch.randn(45, cols, device="cuda", dtype=dtype, requires_grad=True)
    y = m(x)
    g = torch.randn_like(y)
    y.backward(g)
    ur = u.double().requires_grad_(True)
    vr = m.lowrank_v.detach().double().requires_grad_(True)
    xr = x.detach().double().requires_grad_(True)
    yr = xr @ (w + ur @ vr).t() + m.bias.double()
    yr.backward(g.double())
    for got, want in ((y, yr), (x.grad, xr.grad), (m.lowrank_u.grad, ur.grad), (m.lowrank_v.grad, vr.grad)):
        assert ((got.double() - want).norm() / want.norm()).item() < 2e-2
    m2 = sparsejit.nn.VNMLinear(cols, rows, "64:2:8", dtype=dtype, device="cuda", rank=rank)
    m2.load_state_dict(m.state_dict())
    with torch.no_grad():
        assert torch.equal(m2(x), m(x))


@gpu
def test_cuda_graph_capture_of_a_forward():
    lin = torch.nn.Linear(256, 256).cuda().half()
    m = sparsejit.nn.VNMLinear.from_dense(lin, "64:2:8").requires_grad_(False)
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        m(x)  # loads the kernel before capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = m(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        assert torch.allclose(out, m(x))


@gpu
def test_torch_compile_of_a_small_model():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).cuda().half()
    model[0] = sparsejit.nn.VNMLinear.from_dense(model[0], "64:2:8")
    model[2] = sparsejit.nn.VNMLinear.from_dense(model[2], "64:2:8")
    model.requires_grad_(False)
    x = torch.randn(32, 256, device="cuda", dtype=torch.float16)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    assert torch.allclose(compiled(x), eager)


def _host_bits(t: torch.Tensor):
    return t.contiguous().view(torch.int16).cpu().numpy().view("uint16")


@gpu
@pytest.mark.parametrize("backward", sparsejit.nn.BACKWARDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vnm", ["64:2:4", "64:2:8", "128:2:16", "128:2:32"])
def test_vnm_linear_backward_against_fp64(backward, dtype, vnm):
    """Both gradients of each backward against fp64 autograd on the masked weight (for
    double_pruned: on W^T double-pruned on the host), ragged sizes and tokens (not a multiple of 8)."""
    out_f, in_f, tokens = 200, 328, 45
    lin = torch.nn.Linear(in_f, out_f).cuda().to(dtype)
    m = sparsejit.nn.VNMLinear.from_dense(lin, vnm, backward=backward)
    w = m.masked_weight().double()
    x = torch.randn(tokens, in_f, device="cuda", dtype=dtype, requires_grad=True)
    y = m(x)
    g = torch.randn_like(y)
    y.backward(g)
    wx = w
    if backward == "double_pruned":
        dt = "f16" if dtype == torch.float16 else "bf16"
        wt2 = sparsejit.vnm_compress(_host_bits(w.to(dtype).t()), vnm, select="l2", dtype=dt)
        wx = torch.from_numpy(sparsejit.vnm_decompress(wt2).astype("float64")).cuda().t()
    ref_x = g.double() @ wx
    assert ((x.grad.double() - ref_x).norm() / ref_x.norm()).item() < 1e-2
    gw = torch.zeros(out_f * in_f, dtype=torch.float64, device="cuda")
    pos = m.positions()
    live = pos >= 0
    gw[pos[live]] = m.values.grad[live].double()
    ref_w = (g.double().t() @ x.detach().double()) * (w != 0)
    assert ((gw.view(out_f, in_f) - ref_w).norm() / ref_w.norm()).item() < 1e-2
    assert (m.values.grad[~live] == 0).all()  # padding and pruned slots: no gradient


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sparse_backwards_match_the_dense_fallback(dtype):
    lin = torch.nn.Linear(256, 192).cuda().to(dtype)
    grads = {}
    x0 = torch.randn(64, 256, device="cuda", dtype=dtype)
    g = torch.randn(64, 192, device="cuda", dtype=dtype)
    for backward in ("exact", "dense"):
        m = sparsejit.nn.VNMLinear.from_dense(lin, "64:2:8", backward=backward)
        x = x0.clone().requires_grad_(True)
        m(x).backward(g)
        grads[backward] = (x.grad.float(), m.values.grad.float())
    for a, b in zip(grads["exact"], grads["dense"]):
        assert ((a - b).norm() / b.norm()).item() < 1e-2


def test_gmp_schedule_refusals_and_targets_on_the_host():
    with pytest.raises(sparsejit.InvalidArgumentError, match="final_sparsity = 0.5"):
        sparsejit.ops.gmp_schedule("64:2:8", final_sparsity=0.5)
    s = sparsejit.ops.gmp_schedule("64:2:8", start_step=10, interval=5, n_steps=4)
    assert sparsejit.ops.gmp_target(s, 9).prune_now == 0
    last = sparsejit.ops.gmp_target(s, 30)
    assert last.prune_now == 1 and last.sparsity == pytest.approx(0.75) and last.pattern_m == 8
    with pytest.raises(ValueError, match="no nn.Linear layer"):
        sparsejit.nn.GMP(torch.nn.ReLU(), "64:2:8")


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gmp_on_the_device_matches_the_host_and_ends_in_vnm_linear(dtype):
    """A whole schedule through sparsejit.nn.GMP against sj_gmp_prune_host driven from numpy."""
    import ctypes
    import numpy as np
    from sparsejit._lib import call
    model = torch.nn.Sequential(torch.nn.Linear(192, 136)).cuda().to(dtype)
    gmp = sparsejit.nn.GMP(model, "64:2:8", start_step=1, interval=2, n_steps=5)
    w = model[0].weight
    host_w = _host_bits(w).copy()
    host_mask = np.ones(w.shape, dtype=np.uint8)
    code = 1 if dtype == torch.float16 else 2
    for t in range(gmp.last_step + 2):
        with torch.no_grad():
            w.add_(torch.randn_like(w) * 0.01)  # an optimizer step: masked weights move too
        host_w = _host_bits(w).copy()
        call("sj_gmp_prune_host", ctypes.byref(gmp.schedule), t, code, w.shape[0], w.shape[1],
             host_w.ctypes.data_as(ctypes.c_void_p), w.shape[1], host_mask.ctypes.data_as(ctypes.c_void_p),
             w.shape[1])
        gmp.step(t)
        if sparsejit.ops.gmp_target(gmp.schedule, t).prune_now:
            assert (gmp.masks["0"].cpu().numpy() == host_mask).all()
            assert (_host_bits(w) == host_w).all()
    model = gmp.finish(model)
    assert isinstance(model[0], sparsejit.nn.VNMLinear)
    assert torch.equal(model[0].masked_weight(), w.detach())


# ---------------------------------------------------------------- the ops' plan caches (no GPU)


def _fields(s) -> tuple:
    """A struct's field values (not its bytes: the padding is not part of the value)."""
    return tuple(getattr(s, f) for f, _ in s._fields_)


def _fresh_problem(fn: str, *args):
    from sparsejit._lib import Problem, call
    p = Problem()
    call(fn, *[ctypes.byref(a) if hasattr(a, "_fields_") else a for a in args], ctypes.byref(p))
    return p


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cached_plans_equal_freshly_built_structs(rng, dtype):
    from sparsejit._lib import GmpSchedule, VnmLayout, call
    from sparsejit.formats import twell_layout, vnm_layout
    ops = sparsejit.ops
    name = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    codes = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3}
    for _ in range(6):
        rows, cols = (int(d) * 64 for d in rng.integers(1, 40, 2))
        vnm = f"{int(rng.choice([64, 128]))}:2:{int(rng.choice([4, 8, 16]))}"
        n = int(rng.integers(1, 64)) * 8
        out = [torch.float16, torch.bfloat16, torch.float32][int(rng.integers(3))]
        lay = vnm_layout(rows, cols, vnm, name)
        lay_c, sizes = ops._vnm_plan(rows, cols, vnm, dtype)
        assert _fields(lay_c) == _fields(lay)
        assert sizes == (lay.values_bytes // 2, lay.meta_bytes // 4, lay.index_bytes // 4)
        assert sizes == ops.vnm_sizes(rows, cols, vnm, dtype)
        _, _, p, _ = ops._spmm_plan(rows, cols, vnm, dtype, n, out)
        assert _fields(p) == _fields(_fresh_problem("sj_vnm_problem", lay, n, codes[out]))
        p = ops._dw_problem(rows, cols, vnm, dtype, n, out)
        assert _fields(p) == _fields(_fresh_problem("sj_vnm_dw_problem", lay, n, codes[out]))
        lt, t_sizes, need = ops._double_prune_plan(rows, cols, vnm, dtype)
        fresh_t, fresh_need = VnmLayout(), ctypes.c_size_t()
        call("sj_vnm_transpose_layout", ctypes.byref(lay), ctypes.byref(fresh_t))
        call("sj_vnm_double_prune_workspace", ctypes.byref(lay), ctypes.byref(fresh_need))
        assert (_fields(lt), need) == (_fields(fresh_t), fresh_need.value)
        assert t_sizes == ops.vnm_sizes(cols, rows, vnm, dtype)
        m = int(rng.choice([4, 8, 16]))
        s, need = ops._gmp_plan(0.0, 1.0 - 2.0 / m, 0, 1, 4, 64, m, dtype, rows, cols)
        fresh_s = GmpSchedule(0.0, 1.0 - 2.0 / m, 0, 1, 4, 64, m)
        call("sj_gmp_prune_workspace", ctypes.byref(fresh_s), codes[dtype], rows, cols, ctypes.byref(fresh_need))
        assert (_fields(s), need) == (_fields(fresh_s), fresh_need.value)

        tokens, d_model, d_ff = n, cols, rows
        tile, cap, sparsity = int(rng.choice([64, 128])), int(rng.choice([8, 16, 32])), float(rng.uniform(0.9, 1.0))
        tw = twell_layout(tokens, d_ff, f"{tile}:{cap}", name)
        lay_c, p = ops._twell_gate_plan(tokens, d_ff, tile, cap, dtype, d_model, sparsity)
        fresh = _fresh_problem("sj_twell_gate_problem", tw, d_model)
        fresh.twell_sparsity = sparsity
        assert (_fields(lay_c), _fields(p)) == (_fields(tw), _fields(fresh))
        lay_c, shapes, p, need = ops._twell_ffn_plan(tokens, d_ff, tile, cap, dtype, d_model, out, sparsity)
        fresh = _fresh_problem("sj_twell_ffn_problem", tw, d_model, codes[out])
        fresh.twell_sparsity = sparsity
        assert (_fields(lay_c), _fields(p)) == (_fields(tw), _fields(fresh))
        assert shapes == ((tokens, tw.n_tiles, cap), (tokens, tw.n_tiles), (tokens, d_ff))
        assert need == sparsejit.problem.workspace_size(fresh)


def test_cached_plans_are_not_shared_across_dtypes_or_patterns():
    ops = sparsejit.ops
    rows, cols, n = 256, 512, 64
    f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
    plans = {key: ops._spmm_plan(rows, cols, key[0], key[1], n, key[2]) for key in (
        ("64:2:8", f16, f16), ("64:2:8", bf16, bf16), ("64:2:8", f16, f32), ("64:2:4", f16, f16),
        ("128:2:8", f16, f16))}
    assert len({id(p) for _, _, p, _ in plans.values()}) == len(plans)
    for (vnm, dt, out), (lay, _, p, _) in plans.items():
        v, _, m = (int(x) for x in vnm.split(":"))
        assert (lay.dtype, p.dtype) == ({f16: 1, bf16: 2}[dt],) * 2
        assert p.out_dtype == {f16: 1, bf16: 2, f32: 3}[out]
        assert (lay.v, lay.m, p.vnm_v, p.vnm_m) == (v, m, v, m)
    # the same key gives the same plan; a twell sparsity is part of the key
    assert ops._spmm_plan(rows, cols, "64:2:8", f16, n, f16) is plans[("64:2:8", f16, f16)]
    _, p1 = ops._twell_gate_plan(64, 1024, 128, 16, f16, 256, 0.99)
    _, p2 = ops._twell_gate_plan(64, 1024, 128, 16, f16, 256, 0.9)
    _, p3 = ops._twell_gate_plan(64, 1024, 128, 16, bf16, 256, 0.99)
    assert (p1.twell_sparsity, p2.twell_sparsity, p1.dtype, p3.dtype) == (0.99, 0.9, 1, 2)


def test_plans_do_not_keep_a_refused_key():
    ops = sparsejit.ops
    before = ops._spmm_plan.cache_info().currsize, ops._vnm_plan.cache_info().currsize
    for _ in range(2):  # refused again, not answered from a cache
        with pytest.raises(ValueError, match="vnm_spmm: out_dtype"):
            ops._spmm_plan(256, 512, "64:2:8", torch.float16, 64, torch.int8)
        with pytest.raises(sparsejit.InvalidArgumentError):
            ops._vnm_plan(256, 512, "64:3:8", torch.float16)
    assert (ops._spmm_plan.cache_info().currsize, ops._vnm_plan.cache_info().currsize) == before
