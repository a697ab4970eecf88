"""Step outlier flags worked out by hand, traces of steps of given durations, and the warm-up findings."""

from __future__ import annotations

import statistics

from opscope.ingest import open_trace
from support.tracefiles import write_trace, x


def flags(durs):
    """The step table's outlier flags, written out: slow > 1.5x the median of all, warm-up (first step only)
    > 1.2x the median of the others."""
    median = statistics.median(durs)
    out = ["slow" if d > 1.5 * median else None for d in durs]
    if durs[0] > 1.2 * statistics.median(durs[1:]):
        out[0] = "warm-up"
    return out


def warmup(findings):
    return [f for f in findings if f.title.startswith("Warm-up")]


def steps_trace(tmp_path, durs, extra=None):
    """Steps of the given durations (us), each running aten::mm for 500 us; ``extra`` maps a step number to
    (op name, dur) run after it."""
    events, t = [], 0
    for n, dur in enumerate(durs, start=1):
        events.append(x(f"ProfilerStep#{n}", t, dur, cat="user_annotation"))
        events.append(x("aten::mm", t + 10, 500))
        if extra and n in extra:
            name, length = extra[n]
            events.append(x(name, t + 600, length))
        t += dur
    return open_trace(write_trace(tmp_path / "t.json", events))
