"""sparsejit: sparse GPU kernels for LLMs (V:N:M weights, TwELL activations), generated from Lua
templates, compiled with NVRTC and tuned at run time, from Python.

The core (contexts, source generation, the host formats, tuning, the cache) needs numpy only.
The PyTorch layer loads on first use and needs torch: ``sparsejit.ops`` (custom ops
``torch.ops.sparsejit.*``, which work under torch.compile and CUDA graphs) and ``sparsejit.nn``
(``VNMLinear``, ``TwELLFFN``)."""
from __future__ import annotations

import importlib
from typing import Any

from sparsejit._lib import (ABI_VERSION, CacheError, CudaError, InvalidArgumentError, IOError_, NoGPUError,
                            NotFoundError, NvrtcError, OutOfMemoryError, PatternError, SparsejitError,
                            TemplateError, UnsupportedError, VerifyError, version)
from sparsejit.context import Context, GeneratedSource
from sparsejit.formats import (TwELLMatrix, VNMMatrix, twell_from_dense, twell_to_dense, vnm_check, vnm_compress,
                               vnm_decompress)
from sparsejit.problem import describe, make_problem, workspace_size
from sparsejit.tuning import Progress, TuneOutcome, bench, progress_bar, tune

__version__ = version()

__all__ = [
    "ABI_VERSION", "CacheError", "Context", "CudaError", "GeneratedSource", "IOError_", "InvalidArgumentError",
    "NoGPUError", "NotFoundError", "NvrtcError", "OutOfMemoryError", "PatternError", "Progress", "SparsejitError",
    "TemplateError", "TuneOutcome", "TwELLMatrix", "UnsupportedError", "VNMMatrix", "VerifyError", "bench",
    "describe", "generate", "make_problem", "progress_bar", "tune", "twell_from_dense", "twell_to_dense",
    "vnm_check", "vnm_compress", "vnm_decompress", "workspace_size",
]

_LAZY = {"ops", "nn"}


def generate(op: str, shape, config: str = "", *, arch: str = "sm_90a", **problem: Any):
    """The CUDA C of op at shape (problem: dtype, out_dtype, vnm, twell, d_ff, sparsity, skew),
    as `sparsejit gen` prints it; needs no GPU."""
    with Context(arch=arch, cache_path="") as ctx:
        return ctx.generate(make_problem(op, shape, **problem), config)


def __getattr__(name: str):
    # the torch layer: imported on first use, so that the core never needs torch
    if name in _LAZY:
        module = importlib.import_module(f"sparsejit.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'sparsejit' has no attribute {name!r}")
