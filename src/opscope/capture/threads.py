"""``opscope tune-threads``: run a program under a small grid of intra-/inter-op thread settings and
compare their mean step times (warm-up and outlier steps left out, as ``opscope steps`` does)."""

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
    spread_pct: float  # standard deviation of the used steps, in % of their mean


def step_timing(durations_ns: list[int]) -> StepTiming | None:
    """Mean and median of the steps that are not flagged warm-up or slow; None without two steps."""
    if len(durations_ns) < 2:
        return None
    flags = outlier_flags(durations_ns)
    used = [d for d, f in zip(durations_ns, flags) if f is None] or durations_ns
    mean = statistics.fmean(used)
    spread = 100.0 * statistics.stdev(used) / mean if len(used) > 1 and mean else 0.0
    return StepTiming(len(durations_ns), len(used), round(mean), round(statistics.median(used)), round(spread, 1))


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
    return StepTiming(total, timing.used, timing.mean_ns, timing.median_ns, timing.spread_pct)


def tune_threads(target: Target, settings: list[Setting], repeat: int = 1, show_output: bool = False,
                 on_run: Callable[[Setting, int], None] | None = None) -> pa.Table:
    """Run ``target`` ``repeat`` times per setting, round-robin so that drift of the machine hits every
    setting alike; one row per setting with its step timing and speed-up over the default."""
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
    rows: list[dict[str, Any]] = []
    for setting in settings:
        timing = _pooled(durations[setting])
        if timing is None:
            made = max((len(d) + 1 for d in durations[setting]), default=0)
            raise UsageError("tune-threads needs a program that steps at least 3 times (optimizer.step() or "
                             f"opscope.step()); it made {made}")
        rows.append({"setting": setting.label, "intra_op_threads": threads[setting].get("intra_op"),
                     "inter_op_threads": threads[setting].get("inter_op"), "steps": timing.steps,
                     "steps_used": timing.used, "mean_step_ns": timing.mean_ns,
                     "median_step_ns": timing.median_ns, "spread_pct": timing.spread_pct})
    base = rows[0]["mean_step_ns"]
    for r in rows:
        r["speedup"] = round(base / r["mean_step_ns"], 3) if r["mean_step_ns"] else None
    return pa.Table.from_pylist(rows)


def best_setting(table: pa.Table) -> dict:
    rows = table.to_pylist()
    return min(rows, key=lambda r: r["mean_step_ns"])


def within_noise(best: dict, default: dict) -> bool:
    """True when the best setting's gain is smaller than twice the step-to-step spread of either run."""
    gain_pct = 100.0 * (default["mean_step_ns"] / best["mean_step_ns"] - 1) if best["mean_step_ns"] else 0.0
    return gain_pct < 2 * max(best["spread_pct"], default["spread_pct"])
