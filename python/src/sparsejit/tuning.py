"""Tuning from Python: ``sparsejit.tune(op, shape, ...)`` with the CLI's options (`sparsejit tune
--help`), a progress line on stderr (or a callback of your own), and the same SQLite cache as the
CLI unless told otherwise; ``sparsejit.bench`` times the kernel an op would use now."""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional, TextIO

from sparsejit._lib import (BenchResult, InvalidArgumentError, ProgressFn, TuneOptions, TuneProgress, TuneResult,
                            call, lib)
from sparsejit.context import Context
from sparsejit.problem import Shape, make_problem


@dataclass(frozen=True)
class Progress:
    done: int
    total: int           # -1: unknown
    rejected: int
    config: str
    status: str
    median_us: float
    best_config: str
    best_us: float
    elapsed_s: float
    eta_s: float         # < 0: unknown


@dataclass
class TuneOutcome:
    config: str
    template_name: str
    strategy: str
    median_us: float
    p20_us: float
    p80_us: float
    tflops: float
    space_size: int
    trials_done: int
    trials_rejected: int
    seconds: float
    saved: bool
    trials: list[dict] = field(default_factory=list)


def progress_bar(stream: TextIO = sys.stderr, width: int = 24) -> Callable[[Progress], None]:
    """A progress display like the CLI's: one redrawn line on a terminal, else a line a candidate."""
    tty = stream.isatty()

    def show(p: Progress) -> None:
        filled = min(width, round(p.done / p.total * width)) if p.total > 0 else 0
        eta = "?" if p.eta_s < 0 else f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}"
        best = f"best {p.best_us:.1f} us {p.best_config}" if p.best_config else "no winner yet"
        total = p.total if p.total > 0 else "?"
        line = f"[{'#' * filled}{'.' * (width - filled)}] {p.done}/{total} eta {eta}  {best}"
        if tty:
            stream.write("\r\x1b[K" + line)
        else:
            stream.write(f"{p.done}/{total} {p.config} {p.status} {p.median_us:.1f} us; {best}\n")
        stream.flush()

    return show


def _options(strategy: str, budget_trials: int, budget_seconds: float, seed: int, threads: int,
             warmup_ms: Optional[float], rep_ms: Optional[float], save: bool) -> TuneOptions:
    o = TuneOptions()
    lib.sj_tune_options_init(ctypes.byref(o))
    code = ctypes.c_int()
    call("sj_tune_strategy_parse", strategy.encode(), ctypes.byref(code))
    o.strategy = code.value
    if budget_trials < 0 or budget_seconds < 0 or threads < 0:
        raise InvalidArgumentError("budget_trials, budget_seconds and threads must be >= 0")
    o.budget_trials, o.budget_seconds, o.seed, o.threads = int(budget_trials), float(budget_seconds), int(seed), int(threads)
    if warmup_ms is not None:
        o.warmup_ms = float(warmup_ms)
    if rep_ms is not None:
        o.rep_ms = float(rep_ms)
    o.save = 1 if save else 0
    return o


def tune(op: str, shape: Shape, *, dtype: str = "f16", out_dtype: Optional[str] = None, vnm: Optional[str] = None,
         twell: Optional[str] = None, d_ff: Optional[int] = None, sparsity: Optional[float] = None,
         skew: float = 0.0, rank: int = 0, dead: float = 0.0, strategy: str = "random", budget_trials: int = 0,
         budget_seconds: float = 0.0,
         seed: int = 1, threads: int = 0, warmup_ms: Optional[float] = None, rep_ms: Optional[float] = None,
         save: bool = True, cache: Optional[str] = None, device: int = 0,
         progress: Optional[Callable[[Progress], Optional[bool]]] = None, context: Optional[Context] = None,
         ) -> TuneOutcome:
    """Tunes op at shape on the GPU (the CLI's `sparsejit tune`): every trial and the winner go to
    the cache (cache: its path; default $SPARSEJIT_CACHE or ~/.cache/sparsejit/kernels.db, the
    CLI's), where later calls find them. progress: called after every candidate (default: a
    progress bar on stderr; return True to stop early, the best so far still wins).
    Raises NoGPUError, saying why, on a machine without a GPU."""
    p = make_problem(op, shape, dtype, out_dtype, vnm, twell, d_ff, sparsity, skew, rank, dead)
    o = _options(strategy, budget_trials, budget_seconds, seed, threads, warmup_ms, rep_ms, save)
    show = progress if progress is not None else progress_bar()
    failure: list[BaseException] = []

    def on_progress(user, pp) -> int:
        v = pp.contents
        text = (lambda b: b.decode(errors="replace") if b else "")
        try:
            stop = show(Progress(v.done, v.total, v.rejected, text(v.config), text(v.status), v.median_us,
                                 text(v.best_config), v.best_us, v.elapsed_s, v.eta_s))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller after sj_tune returns
            failure.append(e)
            return 1
        return 1 if stop else 0

    o.progress = ProgressFn(on_progress)
    ctx = context or Context(device, cache_path=cache, require_gpu=False)
    ctx.require_gpu("sparsejit.tune")
    r = TuneResult()
    try:
        call("sj_tune", ctx.handle, ctypes.byref(p), ctypes.byref(o), ctypes.byref(r))
    finally:
        if progress is None and sys.stderr.isatty():
            sys.stderr.write("\n")
    try:
        if failure:
            raise failure[0]
        trials = [{"config": t.config.decode(), "status": t.status.decode(), "median_us": t.median_us,
                   "tflops": t.tflops, "rel_error": t.rel_error} for t in r.trials[:r.n_trials]]
        return TuneOutcome(r.config.decode(), r.template_name.decode(), r.strategy.decode(), r.median_us, r.p20_us,
                           r.p80_us, r.tflops, r.space_size, r.trials_done, r.trials_rejected, r.seconds,
                           bool(r.saved), trials)
    finally:
        lib.sj_tune_result_free(ctypes.byref(r))


def bench(op: str, shape: Shape, *, dtype: str = "f16", out_dtype: Optional[str] = None, vnm: Optional[str] = None,
          twell: Optional[str] = None, d_ff: Optional[int] = None, sparsity: Optional[float] = None,
          skew: float = 0.0, rank: int = 0, dead: float = 0.0, cache: Optional[str] = None, device: int = 0,
          context: Optional[Context] = None) -> dict:
    """Times the kernel the op would use now (forced, tuned or default config), checked first
    against the tuner's reference (VerifyError when it disagrees)."""
    p = make_problem(op, shape, dtype, out_dtype, vnm, twell, d_ff, sparsity, skew, rank, dead)
    ctx = context or Context(device, cache_path=cache)
    ctx.require_gpu("sparsejit.bench")
    r = BenchResult()
    call("sj_bench", ctx.handle, ctypes.byref(p), None, ctypes.byref(r))
    return {"median_us": r.median_us, "p20_us": r.p20_us, "p80_us": r.p80_us, "tflops": r.tflops,
            "rel_error": r.rel_error, "reps": r.reps, "config": r.config.decode()}
