"""Which steps two traces are compared over, and what "per step" divides by."""

from __future__ import annotations

from dataclasses import dataclass

from opscope.analyses.filters import parse_steps
from opscope.analyses.intervals import span_bounds
from opscope.analyses.steps import mean_step_ns, step_table
from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.threads import side_by_side, usable_cores


@dataclass(frozen=True)
class Span:
    """What one trace is compared over: ``steps`` (step numbers; None = the whole trace), the ``divisor`` that
    turns totals into per-step figures (1 for the whole trace) and the mean time of one step (the trace's span,
    first event start to last event end, for the whole trace)."""

    steps: tuple[int, ...] | None
    divisor: int
    step_ns: int
    #: a first step flagged as warm-up among the compared steps (said in a note: --steps leaves it out)
    warmup_step: int | None = None

    @property
    def per_step(self) -> bool:
        return self.steps is not None


def spans(base: Trace, new: Trace, labels: tuple[str, str], steps: str | None = None,
          whole_trace: bool = False) -> tuple[Span, Span]:
    """The spans of both traces. Per step when both have ProfilerSteps (all of them, or those ``steps`` names), the
    whole trace when neither has or ``whole_trace`` is set."""
    counts = (base.steps.num_rows, new.steps.num_rows)
    if whole_trace or counts == (0, 0):
        if steps:
            raise UsageError("--steps needs steps in both traces (and no --whole-trace)")
        return _whole(base), _whole(new)
    if 0 in counts:
        has, lacks = (labels[0], labels[1]) if counts[0] else (labels[1], labels[0])
        n = max(counts)
        raise UsageError(f"{has} has {n} steps and {lacks} has none, so there is no per-step comparison; pass "
                         "--whole-trace to compare whole-trace totals")
    chosen = parse_steps(steps) if steps else None
    if base is new or usable_cores() < 2:  # one trace given twice, or one core: in turn
        return _stepped(base, chosen, labels[0]), _stepped(new, chosen, labels[1])
    # the two step tables at once (the new trace's on a helper thread; the base trace's error is raised first)
    span_new, span_base = side_by_side(lambda: _stepped(new, chosen, labels[1]),
                                       lambda: _stepped(base, chosen, labels[0]), "opscope-diff")
    return span_base, span_new


def _whole(trace: Trace) -> Span:
    ev = trace.select(["ts_ns", "dur_ns"])
    bounds = span_bounds(ev["ts_ns"], ev["dur_ns"])  # in one pass, no column of ends
    if bounds is None:
        return Span(None, 1, 0)
    return Span(None, 1, bounds[1] - bounds[0])


def _stepped(trace: Trace, chosen: list[int] | None, label: str) -> Span:
    table = step_table(trace)
    numbers = table["step"].to_pylist()
    durs = dict(zip(numbers, table["dur_ns"].to_pylist()))
    warmup = None
    if chosen is None:  # every step, as the mean step of every other command; a warm-up step is said, not left out
        used = numbers
        flags = table["outlier"].to_pylist()
        if len(numbers) > 1 and flags[0] == "warm-up":
            warmup = numbers[0]
    else:
        used = [n for n in chosen if n in durs]
        if not used:
            raise UsageError(f"{label} has none of the steps {', '.join(map(str, chosen))} (its steps: "
                             f"{_ranges(numbers)})")
    mean = mean_step_ns([durs[n] for n in used]) or 0
    return Span(tuple(used), len(used), mean, warmup)


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    return f"{min(numbers)}-{max(numbers)}" if len(numbers) > 1 else str(numbers[0])


def steps_text(steps: tuple[int, ...] | list[int] | None) -> str:
    """``step 3``, ``steps 2-5,7``; ``the whole trace`` for None."""
    if steps is None:
        return "the whole trace"
    numbers = sorted(set(steps))
    if not numbers:
        return "no steps"
    parts, start, prev = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ("step " if len(numbers) == 1 else "steps ") + ",".join(parts)
