"""The profiled window, per-step durations, device busy time, and the outliers that distort averages."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.intervals import span_bounds, union_by_group
from opscope.analyses.kernels import DEVICE_WORK
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: A step slower than this multiple of the median of all steps is flagged ``slow``.
SLOW_FACTOR = 1.5
#: The first step is flagged ``warm-up`` when slower than this multiple of the others' median.
WARMUP_FACTOR = 1.2


@dataclass(frozen=True)
class StepStats:
    """The steps' durations: ``mean_ns`` is THE mean step of a trace, the one every command shows (summary, steps,
    advise's per-step shares, diff, the report): the mean of all its steps, outliers included, since every per-step
    figure is a total over all of them divided by their number. ``median_ns``/``p90_ns`` are of all steps too;
    ``excluded`` are the steps flagged as outliers (warm-up, slow) and ``typical_mean_ns`` the mean without them
    (``used`` steps), said beside the mean, never instead of it."""

    count: int
    used: int
    mean_ns: int | None
    median_ns: int | None
    p90_ns: int | None
    excluded: tuple[int, ...]
    typical_mean_ns: int | None = None


def step_window(trace: Trace) -> tuple[int, int]:
    """The profiled window ``(start, end)``: the first ``ProfilerStep#N``'s start to the last one's end; in a
    trace without steps, its first event's start to its last event's end; ``(0, 0)`` for an empty trace."""
    steps = trace.steps
    if steps.num_rows:
        return (pc.min(steps["ts_ns"]).as_py(), pc.max(pc.add(steps["ts_ns"], steps["dur_ns"])).as_py())
    events = trace.select(["ts_ns", "dur_ns"])
    bounds = span_bounds(events["ts_ns"], events["dur_ns"])  # in one pass, no column of ends
    return bounds if bounds else (0, 0)


#: What a trace without steps lacks, for the messages that say so.
NO_STEPS = ("no steps (no ProfilerStep#N annotations, nor the step marks of its format: ONNX Runtime's model_run, "
            "XProf's steps, NVTX step ranges)")


def step_marker(trace: Trace) -> str:
    """How the trace names its steps, for labels: ``ProfilerStep#`` (Kineto), the format's own mark followed by
    `` #`` when every step has that one name (``model_run #``), else ``step #``."""
    names = set(trace.steps["name"].to_pylist()) if trace.steps.num_rows else set()
    if not names or all(isinstance(n, str) and n.startswith("ProfilerStep#") for n in names):
        return "ProfilerStep#"
    if len(names) == 1 and isinstance(next(iter(names)), str) and next(iter(names)):
        return f"{next(iter(names))} #"
    return "step #"


def window_line(trace: Trace) -> str:
    """Which window the window-dependent figures use, and why, in one line."""
    from opscope.units import format_ns

    w0, w1 = step_window(trace)
    steps = trace.steps
    if steps.num_rows:
        numbers = steps["step"].to_pylist()
        marker = step_marker(trace)
        which = f"{marker}{numbers[0]}" if len(numbers) == 1 else \
            f"{len(numbers)} steps, {marker}{min(numbers)} to #{max(numbers)}"
        return (f"window: {which}, first step's start to last step's end ({format_ns(w1 - w0)}); device work "
                "outside it is not counted")
    return (f"window: the whole trace, first to last event of any kind ({format_ns(w1 - w0)}): it has "
            f"{NO_STEPS}")


@memoized(keep=True)
def step_table(trace: Trace) -> pa.Table:
    """One row per ``ProfilerStep#N``: duration, ``launched_gpu_ns`` (the union of the device work launched in
    the step, wherever it ran: work launched near a step's end runs into the next one, so this can exceed the
    step's duration and is no share of it), outlier flag. The device busy time *inside* each step's interval
    is :func:`opscope.analyses.gpu.step_device_table`."""
    return _step_table(trace)


def _step_table(trace: Trace) -> pa.Table:
    steps = trace.steps
    if steps.num_rows == 0:
        return pa.table({"step": pa.array([], pa.int64()), "dur_ns": pa.array([], pa.int64()),
                         "launched_gpu_ns": pa.array([], pa.int64()), "outlier": pa.array([], pa.string())})
    events = trace.select(["kind", "ts_ns", "dur_ns", "step"])
    device = events.select(["ts_ns", "dur_ns", "step"]).filter(kind_mask(events, DEVICE_WORK))
    has_device = device.num_rows > 0
    numbers = steps["step"].to_pylist()
    durs = steps["dur_ns"].to_pylist()
    if has_device:
        per_step = union_by_group(device["ts_ns"], device["dur_ns"], device["step"])
        busy: list[int | None] = [per_step.get(k, 0) for k in numbers]
    else:
        busy = [None] * len(numbers)
    return pa.table({
        "step": pa.array(numbers, pa.int64()),
        "dur_ns": pa.array(durs, pa.int64()),
        "launched_gpu_ns": pa.array(busy, pa.int64()),
        "outlier": pa.array(outlier_flags(durs), pa.string()),
    })


def outlier_flags(durs: list[int]) -> list[str | None]:
    """``warm-up`` for a slow first step, ``slow`` for any step > 1.5x the median, else None."""
    if len(durs) < 2:
        return [None] * len(durs)
    median = statistics.median(durs)
    flags: list[str | None] = ["slow" if d > SLOW_FACTOR * median else None for d in durs]
    rest_median = statistics.median(durs[1:])
    if durs[0] > WARMUP_FACTOR * rest_median:
        flags[0] = "warm-up"
    return flags


def step_stats(table: pa.Table) -> StepStats:
    """Mean, median and p90 of all the steps' durations, and the mean without the flagged outliers."""
    durs = table["dur_ns"].to_pylist()
    if not durs:
        return StepStats(0, 0, None, None, None, ())
    flags = table["outlier"].to_pylist()
    steps = table["step"].to_pylist()
    typical = [d for d, f in zip(durs, flags) if f is None] or durs
    excluded = tuple(s for s, f in zip(steps, flags) if f is not None)
    ordered = sorted(durs)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return StepStats(len(durs), len(typical), mean_step_ns(durs), round(statistics.median(durs)), p90, excluded,
                     round(statistics.fmean(typical)))


def mean_step_ns(durations: list[int]) -> int | None:
    """The mean step: the mean of the steps' durations (None without steps). The one definition (StepStats)."""
    return round(statistics.fmean(durations)) if durations else None
