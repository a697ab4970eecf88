"""The samples a side's step time is judged on: one duration per step.

A comparison's step time is a mean over the compared steps; how sure a difference between two runs is comes from
the steps one by one. Two kinds of samples, the same kind on both sides:

- ``runner``: the steps ``opscope record``'s runner timed while the profiler was not running
  (:func:`opscope.analyses.recording.runner_step_times`: run.json's ``step_times_ns`` of the unprofiled steps,
  the first step after start-up left out). They are the program's own speed, without the profiler's overhead, and
  a run has many more of them than recorded steps. Used when both sides' run.json have at least
  :data:`~opscope.analyses.noise.MIN_SAMPLES` and the comparison takes every step (no ``--steps``);
- ``recorded``: the durations of the compared steps in each trace (``ProfilerStep#N``): otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.noise import MIN_SAMPLES, Spread, spread
from opscope.analyses.recording import runner_step_times
from opscope.analyses.steps import step_table
from opscope.diff.normalize import Span
from opscope.model.trace import Trace

#: What each kind of sample is, as the output says it.
SOURCES = {"recorded": "recorded step", "runner": "step timed by the runner"}


@dataclass(frozen=True)
class StepSample:
    """The step durations (ns) one side's step time is judged on, and where they come from (:data:`SOURCES`)."""

    values: tuple[int, ...]
    source: str

    def describe(self) -> str:
        """``12 recorded steps``, ``40 steps timed by the runner``."""
        n = len(self.values)
        what = SOURCES[self.source]
        if n != 1:
            what = what.replace("step", "steps", 1)
        return f"{n} {what}"

    @property
    def spread(self) -> Spread | None:
        return spread(self.values)


def recorded_step_times(trace: Trace, span: Span) -> list[int]:
    """The durations of the span's steps, in the span's order (none for a whole-trace span)."""
    if span.steps is None:
        return []
    table = step_table(trace)
    chosen = table.filter(pc.is_in(table["step"], pa.array(span.steps, pa.int64())))
    durations = dict(zip(chosen["step"].to_pylist(), chosen["dur_ns"].to_pylist()))
    return [durations[n] for n in span.steps if n in durations]


def step_samples(base: Trace, new: Trace, span_base: Span, span_new: Span,
                 runs: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
                 steps_chosen: bool = False) -> tuple[StepSample, StepSample]:
    """Both sides' samples: the runner's when both runs have enough and every step is compared, else the recorded
    steps (empty for a whole-trace comparison)."""
    if span_base.per_step and not steps_chosen:
        timed = [runner_step_times(run) for run in runs]
        if all(len(t) >= MIN_SAMPLES for t in timed):
            return StepSample(tuple(timed[0]), "runner"), StepSample(tuple(timed[1]), "runner")
    return (StepSample(tuple(recorded_step_times(base, span_base)), "recorded"),
            StepSample(tuple(recorded_step_times(new, span_new)), "recorded"))


def samples_text(base: StepSample, new: StepSample) -> str:
    """``12 recorded steps each``, ``base 40 steps timed by the runner, new 38``."""
    if len(base.values) == len(new.values):
        return f"{base.describe()} each"
    return f"base {base.describe()}, new {len(new.values)}"
