"""``opscope tune-threads``: run a program under a small grid of intra-/inter-op thread settings and
compare their mean step times (warm-up and outlier steps left out, as ``opscope steps`` does)."""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from opscope.analyses.steps import outlier_flags
from opscope.capture.launch import Target, run_program
from opscope.capture.session import RecordOptions
from opscope.errors import UsageError


@dataclass(frozen=True)
class Setting:
    intra: int | None  # None: torch's default
    inter: int | None

    @property
    def label(self) -> str:
        if self.intra is None and self.inter is None:
            return "default"
        return f"intra={self.intra} inter={self.inter}"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_grid(cores: int) -> list[Setting]:
    """The default, then intra-op counts 1, 2, 4... up to the cores (and the core count itself), each
    with 1 and 2 inter-op threads (2 only where there are 2 cores)."""
    intra = sorted({1 << k for k in range(cores.bit_length()) if 1 << k <= cores} | {cores})
    inter = [1, 2] if cores >= 2 else [1]
    return [Setting(None, None)] + [Setting(a, b) for a in intra for b in inter]


@dataclass(frozen=True)
class StepTiming:
    steps: int
    used: int
    mean_ns: int
    median_ns: int


def step_timing(durations_ns: list[int]) -> StepTiming | None:
    """Mean and median of the steps that are not flagged warm-up or slow; None without two steps."""
    if len(durations_ns) < 2:
        return None
    flags = outlier_flags(durations_ns)
    used = [d for d, f in zip(durations_ns, flags) if f is None] or durations_ns
    return StepTiming(len(durations_ns), len(used), round(statistics.fmean(used)), round(statistics.median(used)))


def tune_threads(target: Target, settings: list[Setting], show_output: bool = False,
                 on_run: Callable[[Setting], None] | None = None) -> pa.Table:
    """Run ``target`` once per setting; one row per setting with its step timing and speed-up."""
    rows = []
    for setting in settings:
        if on_run:
            on_run(setting)
        options = RecordOptions(intra_op_threads=setting.intra, inter_op_threads=setting.inter)
        with tempfile.TemporaryDirectory(prefix="opscope-tune-") as tmp:
            run = run_program(target, Path(tmp), options, mode="time", quiet=not show_output)
        if run.info is None or run.exit_code != 0:
            why = (run.info or {}).get("crash") or f"exit code {run.exit_code}"
            raise UsageError(f"the program failed under {setting.label} ({why}); run it with opscope record "
                             "to see its output")
        timing = step_timing(run.info.get("step_times_ns") or [])
        if timing is None:
            raise UsageError("tune-threads needs a program that steps at least 3 times (optimizer.step() or "
                             f"opscope.step()); it made {run.info.get('steps', 0)}")
        threads = run.info.get("threads") or {}
        rows.append({"setting": setting.label, "intra_op_threads": threads.get("intra_op"),
                     "inter_op_threads": threads.get("inter_op"), "steps": timing.steps,
                     "steps_used": timing.used, "mean_step_ns": timing.mean_ns,
                     "median_step_ns": timing.median_ns})
    base = rows[0]["mean_step_ns"]
    for r in rows:
        r["speedup"] = round(base / r["mean_step_ns"], 3) if r["mean_step_ns"] else None
    return pa.Table.from_pylist(rows)


def best_setting(table: pa.Table) -> dict:
    rows = table.to_pylist()
    return min(rows, key=lambda r: r["mean_step_ns"])
