"""The sparsejit context (sj_context): a GPU's primary context, or a compile-only one without a
GPU; source generation and NVRTC compilation; device info and counters. ``Context.for_device``
keeps one context per device for the ops. The tune policy defaults to $SPARSEJIT_TUNE
(never | on_miss | pinned), else never."""
from __future__ import annotations

import ctypes
import logging
import os
import threading
from dataclasses import dataclass
from typing import Optional

from sparsejit._lib import (ContextOptions, DeviceInfo, Generated, InvalidArgumentError, KernelInfo, LogFn,
                            Problem, Stats, call, lib)

log = logging.getLogger("sparsejit")

TUNE_POLICIES = {"never": 0, "on_miss": 1, "pinned": 2}


def tune_policy_from_env(value: Optional[str] = None) -> str:
    """The policy named by value, else by $SPARSEJIT_TUNE, else "never"."""
    name = value if value is not None else os.environ.get("SPARSEJIT_TUNE", "never")
    key = name.strip().lower().replace("-", "_")
    if key not in TUNE_POLICIES:
        source = "tune_policy" if value is not None else "SPARSEJIT_TUNE"
        raise InvalidArgumentError(f"{source} = {name!r}: expected never, on_miss or pinned")
    return key


@dataclass(frozen=True)
class GeneratedSource:
    """One kernel's CUDA C as its template produced it."""
    source: str
    entry: str
    config: str
    template_name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


def _forward_log(user: Optional[int], message: bytes) -> None:
    log.info("%s", message.decode(errors="replace"))


_LOG_FN = LogFn(_forward_log)


class Context:
    """A libsparsejit context. Without a GPU (and require_gpu False) it still generates and
    compiles, for arch (default sm_90a); launches then raise NoGPUError saying why."""

    _per_device: dict[int, "Context"] = {}
    _per_device_lock = threading.Lock()

    def __init__(self, device: int = 0, *, cache_path: Optional[str] = None, arch: Optional[str] = None,
                 template_dir: Optional[str] = None, require_gpu: bool = False,
                 tune_policy: Optional[str] = None):
        self._ptr = ctypes.c_void_p()
        self.tune_policy = tune_policy_from_env(tune_policy)
        o = ContextOptions()
        lib.sj_context_options_init(ctypes.byref(o))
        # the bytes must outlive the call: keep them on the object
        self._strings = [s.encode() if s is not None else None for s in (cache_path, template_dir, arch)]
        o.cache_path, o.template_dir, o.arch = self._strings
        o.device_ordinal = int(device)
        o.require_gpu = 1 if require_gpu else 0
        o.tune_policy = TUNE_POLICIES[self.tune_policy]
        o.log = _LOG_FN
        call("sj_context_create", ctypes.byref(o), ctypes.byref(self._ptr))
        self.device = int(device)

    @classmethod
    def for_device(cls, device: int) -> "Context":
        """The one context of a device (on its primary context, shared with PyTorch), created on
        first use with the defaults and $SPARSEJIT_TUNE."""
        ctx = cls._per_device.get(device)  # every op call asks: no lock once the context exists
        if ctx is not None:
            return ctx
        with cls._per_device_lock:
            ctx = cls._per_device.get(device)
            if ctx is None:
                ctx = cls._per_device[device] = cls(device, require_gpu=True)
            return ctx

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._ptr:
            raise InvalidArgumentError("the context is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr:
            ptr, self._ptr = self._ptr, ctypes.c_void_p()
            call("sj_context_destroy", ptr)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_ptr", None):
            lib.sj_context_destroy(self._ptr)

    def device_info(self) -> dict:
        d = DeviceInfo()
        call("sj_get_device_info", self.handle, ctypes.byref(d))
        out = {}
        for name, _ in DeviceInfo._fields_:
            v = getattr(d, name)
            out[name] = v.decode(errors="replace") if isinstance(v, bytes) else v
        out["has_gpu"] = bool(out["has_gpu"])
        return out

    @property
    def has_gpu(self) -> bool:
        return self.device_info()["has_gpu"]

    def require_gpu(self, what: str) -> None:
        from sparsejit._lib import NoGPUError
        info = self.device_info()
        if not info["has_gpu"]:
            raise NoGPUError(f"{what} needs a GPU: {info['no_gpu_reason']}")

    def stats(self) -> dict:
        s = Stats()
        call("sj_get_stats", self.handle, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in Stats._fields_}

    def last_kernel_info(self) -> dict:
        k = KernelInfo()
        call("sj_last_kernel_info", self.handle, ctypes.byref(k))
        return {"source": {1: "table", 2: "cache", 3: "compile"}.get(k.source, "?"),
                "origin": {1: "tuned", 2: "default", 3: "explicit"}.get(k.origin, "?"),
                "config": k.config.decode(), "template_name": k.template_name.decode()}

    def set_config(self, problem: Problem, config: str) -> None:
        """Forces config for later calls with problem ("" clears it)."""
        call("sj_set_config", self.handle, ctypes.byref(problem), config.encode())

    def generate(self, problem: Problem, config: str = "") -> GeneratedSource:
        """Runs the op's template for problem and config ("": the template's default)."""
        g = ctypes.POINTER(Generated)()
        call("sj_generate", self.handle, ctypes.byref(problem), config.encode(), ctypes.byref(g))
        try:
            v = g.contents
            return GeneratedSource(source=v.source.decode(), entry=v.entry.decode(), config=v.config.decode(),
                                   template_name=v.template_name.decode(), grid=tuple(v.grid),
                                   block=tuple(v.block), shared_bytes=v.shared_bytes)
        finally:
            lib.sj_generated_free(g)

    def compile(self, problem: Problem, config: str = "") -> bytes:
        """Generates and compiles problem's kernel with NVRTC for the context's arch: the cubin."""
        g = ctypes.POINTER(Generated)()
        call("sj_generate", self.handle, ctypes.byref(problem), config.encode(), ctypes.byref(g))
        cubin, size, logp = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_char_p()
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        try:
            call("sj_compile", self.handle, g, ctypes.byref(cubin), ctypes.byref(size), ctypes.byref(logp))
            return ctypes.string_at(cubin, size.value)
        finally:
            lib.sj_generated_free(g)
            libc.free(cubin)
            libc.free(ctypes.cast(logp, ctypes.c_void_p))
