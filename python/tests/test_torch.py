"""The PyTorch layer: fake (meta) implementations without a GPU, then on a GPU every op against a
torch reference (fp64 where it matters), VNMLinear's gradients against dense autograd on the
masked weight, a state_dict round trip, CUDA-graph capture of a forward and torch.compile of a
small model. Skips, saying why, where torch or a GPU is missing."""
from __future__ import annotations

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


def test_ops_refuse_cpu_tensors_clearly():
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        torch.ops.sparsejit.vnm_compress(torch.randn(64, 64).half(), "64:2:8", "l2")


def _masked_reference(w: torch.Tensor, vnm: str, select: str = "l2") -> torch.Tensor:
    h = sparsejit.vnm_compress(w.cpu().numpy(), vnm, select=select)
    return torch.from_numpy(sparsejit.vnm_decompress(h)).to(w.device, w.dtype)


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
