"""``opscope tune-threads``: run a program under a small grid of intra-/inter-op thread settings and
compare their step times (warm-up and outlier steps left out, as ``opscope steps`` does): each setting's median,
p10-p90 and steps, and its median difference from the default's with a 95% interval
(:mod:`opscope.analyses.noise`). A setting is named best only when its interval says it is faster than the
default."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    #: the steps used (warm-up and slow outliers left out), in order
    kept: tuple[int, ...] = ()


def step_timing(durations_ns: list[int]) -> StepTiming | None:
    """Mean and median of the steps that are not flagged warm-up or slow; None without two steps."""
    if len(durations_ns) < 2:
        return None
    flags = outlier_flags(durations_ns)
    used = [d for d, f in zip(durations_ns, flags) if f is None] or durations_ns
    return StepTiming(len(durations_ns), len(used), round(statistics.fmean(used)), round(statistics.median(used)),
                      tuple(used))


def _pooled(runs: list[list[int]]) -> StepTiming | None:
    """Each run's steps have their own warm-up: drop outliers per run, then time the pooled steps."""
    kept: list[int] = []
    total = 0
    for durations in runs:
        if len(durations) < 2:
            return None
        flags = outlier_flags(durations)
        kept.extend(d for d, f in zip(durations, flags) if f is None)
        total += len(durations)
    timing = step_timing(kept) if len(kept) >= 2 else None
    if timing is None:
        return None
    return StepTiming(total, timing.used, timing.mean_ns, timing.median_ns, timing.kept)


def tune_threads(target: Target, settings: list[Setting], repeat: int = 1, show_output: bool = False,
                 on_run: Callable[[Setting, int], None] | None = None) -> pa.Table:
    """Run ``target`` ``repeat`` times per setting, round-robin so that drift of the machine hits every
    setting alike; one row per setting with its step timing and its speed-up over the default
    (:func:`compare_settings`)."""
    durations: dict[Setting, list[list[int]]] = {s: [] for s in settings}
    threads: dict[Setting, dict] = {}
    for round_ in range(repeat):
        for setting in settings:
            if on_run:
                on_run(setting, round_)
            options = RecordOptions(intra_op_threads=setting.intra, inter_op_threads=setting.inter)
            with tempfile.TemporaryDirectory(prefix="opscope-tune-") as tmp:
                run = run_program(target, Path(tmp), options, mode="time", quiet=not show_output)
            if run.info is None or run.exit_code != 0:
                why = (run.info or {}).get("crash") or f"exit code {run.exit_code}"
                raise UsageError(f"the program failed under {setting.label} ({why}); run it with opscope "
                                 "record to see its output")
            durations[setting].append(run.info.get("step_times_ns") or [])
            threads[setting] = run.info.get("threads") or {}
    timings = []
    for setting in settings:
        timing = _pooled(durations[setting])
        if timing is None:
            made = max((len(d) + 1 for d in durations[setting]), default=0)
            raise UsageError("tune-threads needs a program that steps at least 3 times (optimizer.step() or "
                             f"opscope.step()); it made {made}")
        timings.append(timing)
    return compare_settings(settings, timings, [threads[s] for s in settings])


COLUMNS = pa.schema([("setting", pa.string()), ("intra_op_threads", pa.int64()), ("inter_op_threads", pa.int64()),
                     ("steps", pa.int64()), ("steps_used", pa.int64()), ("mean_step_ns", pa.int64()),
                     ("median_step_ns", pa.int64()), ("p10_step_ns", pa.int64()), ("p90_step_ns", pa.int64()),
                     ("speedup", pa.float64()), ("speedup_low", pa.float64()), ("speedup_high", pa.float64()),
                     ("verdict", pa.string())])


def compare_settings(settings: list[Setting], timings: list[StepTiming], threads: list[dict]) -> pa.Table:
    """One row per setting: its steps' median, p10 and p90 and how many were used; its speed-up over the first
    setting (the default) with the 95% interval, and the verdict (faster, slower, no difference, too few runs to
    tell; the default's own row has none)."""
    from opscope.analyses import noise

    base = timings[0]
    rows: list[dict[str, Any]] = []
    for i, (setting, timing, used) in enumerate(zip(settings, timings, threads)):
        s = noise.spread(timing.kept)
        row: dict[str, Any] = {
            "setting": setting.label, "intra_op_threads": used.get("intra_op"),
            "inter_op_threads": used.get("inter_op"), "steps": timing.steps, "steps_used": timing.used,
            "mean_step_ns": timing.mean_ns,
            "median_step_ns": timing.median_ns, "p10_step_ns": round(s.p10) if s else None,
            "p90_step_ns": round(s.p90) if s else None, "speedup": None, "speedup_low": None, "speedup_high": None,
            "verdict": None}
        if i == 0:
            row["speedup"] = 1.0
        else:
            shift = noise.shift(base.kept, timing.kept)
            row["verdict"] = noise.verdict(shift)
            if shift is not None:
                row.update(speedup=_figure(shift.speedup), speedup_low=_figure(shift.speedup_low),
                           speedup_high=_figure(shift.speedup_high))
            elif timing.median_ns:
                row["speedup"] = _figure(base.median_ns / timing.median_ns)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=COLUMNS)


def _figure(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def best_setting(table: pa.Table) -> dict | None:
    """The setting with the lowest median step among those the interval finds faster than the default; None when
    none is."""
    faster = [r for r in table.to_pylist() if r["verdict"] == "faster"]
    return min(faster, key=lambda r: r["median_step_ns"]) if faster else None
