"""The numpy-only core on a machine with or without a GPU: import and the load-time ABI checks,
exceptions carrying sj_last_error, problems and their argument errors, source generation and
NVRTC compilation, the workspace query, $SPARSEJIT_TUNE, and clear errors without a GPU."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

import sparsejit
from sparsejit import _lib


def test_import_needs_no_torch():
    # a fresh interpreter: in this one, test_torch.py's collection has imported the torch layer
    probe = ("import sys, sparsejit; "
             "sys.exit(any(m.startswith(('sparsejit.ops', 'sparsejit.nn', 'torch')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0
    assert sparsejit.__version__.count(".") == 2


def test_abi_and_struct_sizes_match_the_library():
    assert _lib.lib.sj_abi_version() == _lib.ABI_VERSION
    for name, cls in _lib.STRUCTS.items():
        size = ctypes.c_size_t()
        _lib.call("sj_struct_size", name.encode(), ctypes.byref(size))
        assert size.value == ctypes.sizeof(cls), name


def test_unknown_struct_is_an_exception_with_the_last_error():
    with pytest.raises(sparsejit.InvalidArgumentError, match="sj_struct_size: .*sj_context.*known: sj_problem"):
        _lib.call("sj_struct_size", b"sj_context", ctypes.byref(ctypes.c_size_t()))


def test_every_status_has_its_exception():
    for code, cls in _lib._ERRORS.items():
        assert _lib.lib.sj_status_name(code).decode() == cls.status
        with pytest.raises(cls):
            _lib.check(code, "f")


@pytest.mark.parametrize("kwargs, message", [
    (dict(op="conv", shape="8x8x8"), "conv"),
    (dict(op="gemm", shape="8x8"), "expected MxNxK"),
    (dict(op="gemm", shape=(0, 8, 8)), "problem.m = 0"),
    (dict(op="gemm", shape="8x8x8", dtype="f64"), "f64"),
    (dict(op="vnm-spmm", shape="64x64x64", vnm="48:2:8"), "V must be 16, 32, 64 or 128"),
    (dict(op="vnm-spmm", shape="64x64x64", vnm="64-2-8"), "expected V:N:M"),
    (dict(op="twell-ffn", shape="64x64x64"), "needs d_ff"),
    (dict(op="vnm-spmm", shape="64x64x64", rank=12), "lowrank_rank = 12: expected 0 \\(none\\) or a multiple of 8"),
    (dict(op="gemm", shape="64x64x64", rank=16), "gemm takes no low-rank term"),
    (dict(op="twell-gate", shape="256x512x128", dead=0.95), "twell_dead = 0.95: expected a share"),
    (dict(op="twell-ffn", shape="64x256x256", d_ff=1024, sparsity=0.9, dead=0.9),
     "leaves the live units a mean rate of 1: expected at most 0.5"),
])
def test_problem_argument_errors(kwargs, message):
    with pytest.raises(sparsejit.InvalidArgumentError, match=message):
        sparsejit.make_problem(**kwargs)


def test_describe():
    p = sparsejit.make_problem("vnm-spmm", "512x256x1024", dtype="bf16", out_dtype="f32", vnm="128:2:8")
    assert sparsejit.describe(p) == "vnm-spmm bf16->f32 512x256x1024 V=128,NS=2,MS=8"
    p = sparsejit.make_problem("vnm-spmm", "512x256x1024", vnm="128:2:8", rank=32)
    assert sparsejit.describe(p) == "vnm-spmm f16->f16 512x256x1024 V=128,NS=2,MS=8,R=32"
    p = sparsejit.make_problem("twell-gate", "256x512x128", skew=1, dead=0.25)
    assert sparsejit.describe(p).endswith("T=128,C=16,S=0.99,A=1,D=0.25")


def test_lowrank_kernel_generates_and_compiles(compile_ctx):
    p = sparsejit.make_problem("vnm-spmm", "300x136x1000", dtype="bf16", vnm="64:2:8", rank=40)
    g = compile_ctx.generate(p)
    assert g.entry.endswith("_r40") and "const InT* __restrict__ U, const InT* __restrict__ Z)" in g.source
    assert len(compile_ctx.compile(p)) > 0


def test_generate_and_compile(compile_ctx):
    p = sparsejit.make_problem("twell-gate", "256x512x128", dtype="bf16")
    g = compile_ctx.generate(p)
    assert g.template_name == "twell_gate" and "__global__" in g.source and g.entry in g.source
    assert all(b > 0 for b in g.block) and all(x > 0 for x in g.grid)
    # a named config comes back canonical (sorted), and the default is reproducible
    again = compile_ctx.generate(p, g.config)
    assert again.source == g.source and again.config == g.config
    cubin = compile_ctx.compile(sparsejit.make_problem("gemm", "128x128x128"))
    assert cubin[:4] == b"\x7fELF"


def test_generate_top_level_and_bad_config():
    g = sparsejit.generate("gemm", (256, 256, 256), "BM=128,BN=128,WM=64,WN=64")
    assert "BM=128" in g.config and "BN=128" in g.config
    with pytest.raises(sparsejit.SparsejitError, match="BM"):
        sparsejit.generate("gemm", (256, 256, 256), "BM=7")


def test_workspace_size():
    ffn = sparsejit.make_problem("twell-ffn", "1000x256x256", d_ff=3000)
    assert sparsejit.workspace_size(ffn) >= 4 * 1000 * 3000
    assert sparsejit.workspace_size(sparsejit.make_problem("vnm-compress", "300x1x200")) == 16
    assert sparsejit.workspace_size(sparsejit.make_problem("gemm", "64x64x64")) == 0


def test_tune_policy_from_environment(monkeypatch):
    monkeypatch.setenv("SPARSEJIT_TUNE", "pinned")
    with sparsejit.Context(cache_path="") as ctx:
        assert ctx.tune_policy == "pinned"
    monkeypatch.setenv("SPARSEJIT_TUNE", "on-miss")
    with sparsejit.Context(cache_path="") as ctx:
        assert ctx.tune_policy == "on_miss"
    with sparsejit.Context(cache_path="", tune_policy="never") as ctx:
        assert ctx.tune_policy == "never"
    monkeypatch.setenv("SPARSEJIT_TUNE", "always")
    with pytest.raises(sparsejit.InvalidArgumentError, match="SPARSEJIT_TUNE = 'always'.*never, on_miss or pinned"):
        sparsejit.Context(cache_path="")


def _has_gpu() -> bool:
    with sparsejit.Context(cache_path="") as ctx:
        return ctx.has_gpu


needs_no_gpu = pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the no-GPU errors cannot be seen")


@needs_no_gpu
def test_no_gpu_errors_say_why(tmp_path):
    with pytest.raises(sparsejit.NoGPUError, match="no GPU: .*libcuda|no CUDA device"):
        sparsejit.Context(require_gpu=True)
    with pytest.raises(sparsejit.NoGPUError, match="sparsejit.tune needs a GPU: "):
        sparsejit.tune("vnm-spmm", "256x256x256", cache=str(tmp_path / "k.db"), progress=lambda p: None)
    with pytest.raises(sparsejit.NoGPUError, match="sparsejit.bench needs a GPU"):
        sparsejit.bench("gemm", "256x256x256", cache="")
    with sparsejit.Context(cache_path="") as ctx:
        info = ctx.device_info()
        assert not info["has_gpu"] and info["no_gpu_reason"]


def test_tune_argument_errors():
    with pytest.raises(sparsejit.InvalidArgumentError, match="annealing"):
        sparsejit.tune("gemm", "256x256x256", strategy="annealing", cache="")
    with pytest.raises(sparsejit.InvalidArgumentError, match="budget_trials"):
        sparsejit.tune("gemm", "256x256x256", budget_trials=-1, cache="")
    # the CLI's --rank: vnm-spmm only, a multiple of 8 in 8..128
    with pytest.raises(sparsejit.InvalidArgumentError, match="rank"):
        sparsejit.tune("gemm", "256x256x256", rank=8, cache="")
    with pytest.raises(sparsejit.InvalidArgumentError, match="rank"):
        sparsejit.bench("vnm-spmm", "256x256x256", vnm="64:2:8", rank=12, cache="")
