"""The C ABI of libsparsejit through ctypes: the library found and loaded once, its ABI version
and every public struct's size checked against the layouts declared here, the exceptions that
each ``sj_status`` becomes (carrying ``sj_last_error()``), and the function prototypes."""
from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, c_char, c_char_p, c_double, c_float, c_int, c_int64, c_size_t,
                    c_uint, c_uint16, c_uint32, c_uint64, c_void_p)
from pathlib import Path

#: The ABI this binding is written for (SJ_ABI_VERSION in include/sparsejit.h).
ABI_VERSION = 4


class SparsejitError(RuntimeError):
    """A libsparsejit call failed; ``status`` is the sj_status name, the message sj_last_error()."""

    status = "error"

    def __init__(self, message: str, function: str = ""):
        super().__init__(f"{function}: {message}" if function else message)
        self.function = function


class InvalidArgumentError(SparsejitError, ValueError):
    status = "invalid argument"


class UnsupportedError(SparsejitError):
    status = "unsupported"


class NoGPUError(SparsejitError):
    status = "no GPU"


class CudaError(SparsejitError):
    status = "CUDA error"


class NvrtcError(SparsejitError):
    status = "NVRTC error"


class TemplateError(SparsejitError):
    status = "template error"


class CacheError(SparsejitError):
    status = "cache error"


class NotFoundError(SparsejitError, LookupError):
    status = "not found"


class VerifyError(SparsejitError):
    status = "verification failed"


class OutOfMemoryError(SparsejitError, MemoryError):
    status = "out of memory"


class IOError_(SparsejitError, OSError):
    status = "I/O error"


class PatternError(SparsejitError, ValueError):
    status = "sparsity pattern violated"


# sj_status values, in include/sparsejit.h's order.
_ERRORS: dict[int, type[SparsejitError]] = {
    1: InvalidArgumentError, 2: UnsupportedError, 3: NoGPUError, 4: CudaError, 5: NvrtcError,
    6: TemplateError, 7: CacheError, 8: NotFoundError, 9: VerifyError, 10: OutOfMemoryError,
    11: IOError_, 12: PatternError,
}

# ---------------------------------------------------------------- structs (include/sparsejit.h)


class Problem(ctypes.Structure):
    _fields_ = [("op", c_int), ("dtype", c_int), ("out_dtype", c_int),
                ("m", c_int64), ("n", c_int64), ("k", c_int64),
                ("vnm_v", c_int), ("vnm_n", c_int), ("vnm_m", c_int),
                ("twell_tile", c_int), ("twell_capacity", c_int), ("d_ff", c_int64),
                ("twell_sparsity", c_double), ("twell_skew", c_double), ("twell_dead", c_double),
                ("lowrank_rank", c_int)]


LogFn = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)


class ContextOptions(ctypes.Structure):
    _fields_ = [("cache_path", c_char_p), ("template_dir", c_char_p), ("arch", c_char_p),
                ("device_ordinal", c_int), ("require_gpu", c_int), ("tune_policy", c_int),
                ("log", LogFn), ("log_user", c_void_p)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("has_gpu", c_int), ("no_gpu_reason", c_char * 256), ("name", c_char * 256),
                ("arch", c_char * 16), ("cc_major", c_int), ("cc_minor", c_int), ("sm_count", c_int),
                ("driver_version", c_int), ("nvrtc_version", c_int), ("total_memory", c_size_t),
                ("l2_bytes", c_size_t), ("max_shared_per_block_optin", c_size_t),
                ("cache_path", c_char * 1024)]


class Stats(ctypes.Structure):
    _fields_ = [("lua_generations", c_uint64), ("nvrtc_compiles", c_uint64), ("cache_hits", c_uint64),
                ("cache_misses", c_uint64), ("table_hits", c_uint64), ("launches", c_uint64),
                ("nvrtc_seconds", c_double), ("lua_seconds", c_double)]


class Generated(ctypes.Structure):
    _fields_ = [("source", c_char_p), ("entry", c_char_p), ("config", c_char_p),
                ("template_name", c_char_p), ("grid", c_uint * 3), ("block", c_uint * 3),
                ("shared_bytes", c_uint)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("source", c_int), ("origin", c_int), ("config", c_char * 256),
                ("template_name", c_char * 64)]


class VnmLayout(ctypes.Structure):
    _fields_ = [("dtype", c_int), ("v", c_int), ("n", c_int), ("m", c_int), ("rows", c_int64),
                ("cols", c_int64), ("row_blocks", c_int64), ("groups", c_int64), ("k_tiles", c_int64),
                ("values_bytes", c_size_t), ("meta_bytes", c_size_t), ("index_bytes", c_size_t)]


class VnmHost(ctypes.Structure):
    _fields_ = [("layout", VnmLayout), ("values", POINTER(c_uint16)), ("meta", POINTER(c_uint32)),
                ("index", POINTER(ctypes.c_int32))]


class VnmDevice(ctypes.Structure):
    _fields_ = [("layout", VnmLayout), ("values", c_uint64), ("meta", c_uint64), ("index", c_uint64)]


class TwellLayout(ctypes.Structure):
    _fields_ = [("dtype", c_int), ("rows", c_int64), ("cols", c_int64), ("tile", c_int),
                ("capacity", c_int), ("n_tiles", c_int64), ("entries_bytes", c_size_t),
                ("counts_bytes", c_size_t), ("spill_bytes", c_size_t)]


class TwellHost(ctypes.Structure):
    _fields_ = [("layout", TwellLayout), ("entries", POINTER(c_uint32)), ("counts", POINTER(ctypes.c_int32)),
                ("spill", POINTER(c_uint16))]


class TwellDevice(ctypes.Structure):
    _fields_ = [("layout", TwellLayout), ("entries", c_uint64), ("counts", c_uint64), ("spill", c_uint64)]


class HybridLayout(ctypes.Structure):
    _fields_ = [("dtype", c_int), ("rows", c_int64), ("cols", c_int64), ("width", c_int), ("backup_rows", c_int64),
                ("values_bytes", c_size_t), ("columns_bytes", c_size_t), ("nnz_bytes", c_size_t),
                ("slot_bytes", c_size_t), ("owner_bytes", c_size_t), ("backup_bytes", c_size_t),
                ("counter_bytes", c_size_t), ("total_bytes", c_size_t)]


class HybridReport(ctypes.Structure):
    _fields_ = [("rows_ell", c_int64), ("rows_backup", c_int64), ("rows_unplaced", c_int64),
                ("backup_needed", c_int64), ("nnz", c_int64), ("nnz_ell", c_int64), ("nnz_backup", c_int64)]


class HybridDevice(ctypes.Structure):
    _fields_ = [("layout", HybridLayout), ("values", c_uint64), ("columns", c_uint64), ("nnz", c_uint64),
                ("slot", c_uint64), ("owner", c_uint64), ("backup", c_uint64), ("counter", c_uint64)]


class TuneProgress(ctypes.Structure):
    _fields_ = [("done", c_int), ("total", c_int), ("rejected", c_int), ("config", c_char_p),
                ("status", c_char_p), ("median_us", c_double), ("best_config", c_char_p),
                ("best_us", c_double), ("elapsed_s", c_double), ("eta_s", c_double)]


ProgressFn = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(TuneProgress))


class TuneOptions(ctypes.Structure):
    _fields_ = [("strategy", c_int), ("budget_trials", c_int), ("budget_seconds", c_double),
                ("seed", c_uint64), ("warmup_ms", c_double), ("rep_ms", c_double), ("min_reps", c_int),
                ("threads", c_int), ("save", c_int), ("progress", ProgressFn), ("progress_user", c_void_p)]


class TuneTrial(ctypes.Structure):
    _fields_ = [("config", c_char * 256), ("status", c_char * 32), ("median_us", c_double),
                ("p20_us", c_double), ("p80_us", c_double), ("tflops", c_double),
                ("compile_seconds", c_double), ("rel_error", c_double)]


class TuneResult(ctypes.Structure):
    _fields_ = [("config", c_char * 256), ("template_name", c_char * 64), ("strategy", c_char * 16),
                ("median_us", c_double), ("p20_us", c_double), ("p80_us", c_double), ("tflops", c_double),
                ("space_size", c_int), ("trials_done", c_int), ("trials_rejected", c_int),
                ("seconds", c_double), ("compile_seconds", c_double), ("saved", c_int), ("finalists", c_int),
                ("trials", POINTER(TuneTrial)), ("n_trials", c_int)]


class GmpSchedule(ctypes.Structure):
    _fields_ = [("initial_sparsity", c_double), ("final_sparsity", c_double), ("start_step", c_int64),
                ("interval", c_int64), ("n_steps", c_int64), ("v", c_int), ("m", c_int)]


class GmpTarget(ctypes.Structure):
    _fields_ = [("prune_now", c_int), ("sparsity", c_double), ("pattern_m", c_int)]


class BenchResult(ctypes.Structure):
    _fields_ = [("median_us", c_double), ("p20_us", c_double), ("p80_us", c_double), ("tflops", c_double),
                ("rel_error", c_double), ("reps", c_int), ("config", c_char * 256), ("origin", c_int),
                ("source", c_int)]


STRUCTS: dict[str, type[ctypes.Structure]] = {
    "sj_problem": Problem, "sj_context_options": ContextOptions, "sj_device_info": DeviceInfo,
    "sj_stats": Stats, "sj_generated": Generated, "sj_kernel_info": KernelInfo,
    "sj_vnm_layout": VnmLayout, "sj_vnm_host": VnmHost, "sj_vnm_device": VnmDevice,
    "sj_twell_layout": TwellLayout, "sj_twell_host": TwellHost, "sj_twell_device": TwellDevice,
    "sj_hybrid_layout": HybridLayout, "sj_hybrid_report": HybridReport, "sj_hybrid_device": HybridDevice,
    "sj_tune_progress": TuneProgress, "sj_tune_options": TuneOptions, "sj_tune_trial": TuneTrial,
    "sj_tune_result": TuneResult, "sj_bench_result": BenchResult, "sj_gmp_schedule": GmpSchedule,
    "sj_gmp_target": GmpTarget,
}

# ---------------------------------------------------------------- functions

_P = POINTER
_ctx = c_void_p
_S = c_int  # sj_status
# name: (restype, argtypes); every function returning sj_status is wrapped by call().
PROTOTYPES: dict[str, tuple] = {
    "sj_last_error": (c_char_p, []),
    "sj_status_name": (c_char_p, [c_int]),
    "sj_version_string": (c_char_p, []),
    "sj_abi_version": (c_int, []),
    "sj_struct_size": (_S, [c_char_p, _P(c_size_t)]),
    "sj_dtype_parse": (_S, [c_char_p, _P(c_int)]),
    "sj_op_parse": (_S, [c_char_p, _P(c_int)]),
    "sj_tune_strategy_parse": (_S, [c_char_p, _P(c_int)]),
    "sj_context_options_init": (None, [_P(ContextOptions)]),
    "sj_context_create": (_S, [_P(ContextOptions), _P(_ctx)]),
    "sj_context_destroy": (_S, [_ctx]),
    "sj_get_device_info": (_S, [_ctx, _P(DeviceInfo)]),
    "sj_get_stats": (_S, [_ctx, _P(Stats)]),
    "sj_synchronize": (_S, [_ctx]),
    "sj_problem_init": (None, [_P(Problem), c_int, c_int, c_int64, c_int64, c_int64]),
    "sj_problem_validate": (_S, [_P(Problem)]),
    "sj_problem_describe": (_S, [_P(Problem), c_char_p, c_size_t]),
    "sj_workspace_size": (_S, [_P(Problem), _P(c_size_t)]),
    "sj_generate": (_S, [_ctx, _P(Problem), c_char_p, _P(_P(Generated))]),
    "sj_generated_free": (None, [_P(Generated)]),
    "sj_compile": (_S, [_ctx, _P(Generated), _P(c_void_p), _P(c_size_t), _P(c_char_p)]),
    "sj_last_kernel_info": (_S, [_ctx, _P(KernelInfo)]),
    "sj_set_config": (_S, [_ctx, _P(Problem), c_char_p]),
    "sj_vnm_layout_init": (_S, [_P(VnmLayout), c_int, c_int, c_int, c_int, c_int64, c_int64]),
    "sj_vnm_compress": (_S, [_P(VnmLayout), c_void_p, c_int64, c_int, _P(VnmHost)]),
    "sj_vnm_check": (_S, [_P(VnmLayout), c_void_p, c_int64]),
    "sj_vnm_decompress": (_S, [_P(VnmHost), c_void_p, c_int64]),
    "sj_vnm_host_free": (None, [_P(VnmHost)]),
    "sj_vnm_problem": (_S, [_P(VnmLayout), c_int64, c_int, _P(Problem)]),
    "sj_vnm_spmm": (_S, [_ctx, _P(Problem), _P(VnmDevice), c_uint64, c_uint64, c_float, c_float, c_void_p]),
    "sj_vnm_spmm_lowrank": (_S, [_ctx, _P(Problem), _P(VnmDevice), c_uint64, c_uint64, c_uint64, c_uint64, c_float,
                                 c_float, c_void_p]),
    "sj_vnm_compress_device_ws": (_S, [_ctx, _P(VnmLayout), c_uint64, c_int64, c_int, _P(VnmDevice), c_uint64,
                                       c_size_t, c_void_p]),
    "sj_vnm_pattern_status": (_S, [_P(VnmLayout), c_uint64]),
    "sj_vnm_transpose_layout": (_S, [_P(VnmLayout), _P(VnmLayout)]),
    "sj_vnm_dw_problem": (_S, [_P(VnmLayout), c_int64, c_int, _P(Problem)]),
    "sj_vnm_dw": (_S, [_ctx, _P(Problem), _P(VnmDevice), c_uint64, c_uint64, c_uint64, c_void_p]),
    "sj_vnm_double_prune_workspace": (_S, [_P(VnmLayout), _P(c_size_t)]),
    "sj_vnm_double_prune": (_S, [_ctx, _P(VnmDevice), _P(VnmDevice), c_uint64, c_size_t, c_void_p]),
    "sj_gmp_target_at": (_S, [_P(GmpSchedule), c_int64, _P(GmpTarget)]),
    "sj_gmp_prune_host": (_S, [_P(GmpSchedule), c_int64, c_int, c_int64, c_int64, c_void_p, c_int64, c_void_p,
                               c_int64]),
    "sj_gmp_prune_workspace": (_S, [_P(GmpSchedule), c_int, c_int64, c_int64, _P(c_size_t)]),
    "sj_gmp_prune": (_S, [_ctx, _P(GmpSchedule), c_int64, c_int, c_int64, c_int64, c_uint64, c_int64, c_uint64,
                          c_int64, c_uint64, c_size_t, c_void_p]),
    "sj_vnm_dx_exact": (_S, [_ctx, _P(VnmDevice), c_uint64, c_uint64, c_uint64, c_int64, c_int, c_void_p]),
    "sj_twell_layout_init": (_S, [_P(TwellLayout), c_int, c_int64, c_int64, c_int, c_int]),
    "sj_twell_from_dense": (_S, [_P(TwellLayout), c_void_p, c_int64, _P(TwellHost), _P(c_int64)]),
    "sj_twell_to_dense": (_S, [_P(TwellHost), c_void_p, c_int64]),
    "sj_twell_host_free": (None, [_P(TwellHost)]),
    "sj_twell_gate_problem": (_S, [_P(TwellLayout), c_int64, _P(Problem)]),
    "sj_twell_ffn_problem": (_S, [_P(TwellLayout), c_int64, c_int, _P(Problem)]),
    "sj_twell_gate": (_S, [_ctx, _P(Problem), c_uint64, c_uint64, _P(TwellDevice), c_void_p]),
    "sj_twell_ffn_ws": (_S, [_ctx, _P(Problem), c_uint64, _P(TwellDevice), c_uint64, c_uint64, c_uint64,
                             c_uint64, c_size_t, c_void_p]),
    "sj_hybrid_layout_init": (_S, [_P(HybridLayout), c_int, c_int64, c_int64, c_int, c_int64]),
    "sj_hybrid_gate_problem": (_S, [_P(HybridLayout), c_int64, _P(Problem)]),
    "sj_hybrid_gate": (_S, [_ctx, _P(Problem), c_uint64, c_uint64, _P(HybridDevice), c_void_p]),
    "sj_hybrid_ffn_problem": (_S, [_P(HybridLayout), c_int, c_int64, _P(Problem)]),
    "sj_hybrid_ffn_workspace": (_S, [_ctx, _P(Problem), _P(HybridLayout), _P(c_size_t)]),
    "sj_hybrid_ffn_fwd": (_S, [_ctx, _P(Problem), c_uint64, _P(HybridDevice), c_uint64, c_uint64, c_uint64,
                               c_uint64, c_uint64, c_uint64, c_size_t, c_void_p]),
    "sj_hybrid_ffn_dx": (_S, [_ctx, _P(Problem), c_uint64, _P(HybridDevice), c_uint64, c_uint64, c_uint64,
                              c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_size_t,
                              c_void_p]),
    "sj_hybrid_ffn_dw": (_S, [_ctx, _P(Problem), c_uint64, c_uint64, _P(HybridDevice), c_uint64, c_uint64, c_uint64,
                              c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_size_t,
                              c_void_p]),
    "sj_tune_options_init": (None, [_P(TuneOptions)]),
    "sj_tune": (_S, [_ctx, _P(Problem), _P(TuneOptions), _P(TuneResult)]),
    "sj_tune_result_free": (None, [_P(TuneResult)]),
    "sj_bench": (_S, [_ctx, _P(Problem), _P(TuneOptions), _P(BenchResult)]),
}


def library_path() -> Path:
    """The libsparsejit the package loads: $SPARSEJIT_LIBRARY if set, else the one installed
    inside the package."""
    env = os.environ.get("SPARSEJIT_LIBRARY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("libsparsejit.so*"))
    if not found:
        raise ImportError(f"sparsejit: no libsparsejit.so in {here}; install the package with "
                          "`pip install ./python` (it builds the library) or set SPARSEJIT_LIBRARY")
    return found[0]


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise ImportError(f"sparsejit: cannot load {path}: {e}") from e
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"sparsejit: {path} lacks {name}: the library is older than this package") from None
        fn.restype, fn.argtypes = restype, argtypes
    abi = lib.sj_abi_version()
    if abi != ABI_VERSION:
        raise ImportError(f"sparsejit: {path} has ABI version {abi}; this package is written for "
                          f"{ABI_VERSION} (reinstall both from one checkout)")
    for cname, cls in STRUCTS.items():
        size = c_size_t()
        if lib.sj_struct_size(cname.encode(), ctypes.byref(size)) != 0:
            raise ImportError(f"sparsejit: {path} does not know struct {cname}: "
                              f"{lib.sj_last_error().decode()}")
        if size.value != ctypes.sizeof(cls):
            raise ImportError(f"sparsejit: struct {cname} is {size.value} bytes in {path} but "
                              f"{ctypes.sizeof(cls)} in this package's binding: refusing to misread it")
    return lib


lib = _load()


def last_error() -> str:
    return lib.sj_last_error().decode(errors="replace")


def check(status: int, function: str = "") -> None:
    """Raises the exception of a failed sj_status with the thread's sj_last_error()."""
    if status == 0:
        return
    cls = _ERRORS.get(status, SparsejitError)
    raise cls(last_error(), function)


def call(name: str, *args) -> None:
    """Calls the sj_status-returning function name and raises on failure."""
    check(getattr(lib, name)(*args), name)


def version() -> str:
    return lib.sj_version_string().decode()
