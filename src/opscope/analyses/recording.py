"""How much the profiler slowed the steps it recorded, from a recording's run.json.

``opscope record`` times every step of the program, profiled or not (``step_times_ns``: step N's duration at
index N - 1, without the profiler's own work at the step boundaries), and lists the steps the profiler ran in
(``profiled_steps``: warm-up and recorded) and those it saved (``recorded_steps``). The recorded steps are compared
with the steps the profiler did not run in, from the second step on (the unrecorded baseline,
:func:`runner_step_times`): the ratio of their medians, and the judgement of :mod:`opscope.analyses.noise` on the
median difference's 95% interval, in its words. Only ``slower`` (the whole interval above no change) means the
profiler inflated every time the trace shows; ``faster`` is not the profiler's doing (the unrecorded steps were
slower for another reason: other work in the program's later steps, a busier machine); ``no difference`` is within
the noise; with too few steps there is no judgement.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opscope.analyses import noise

#: Recorded steps an interval needs: ``opscope record`` records 3 by default. With 3 recorded steps and at least 5
#: unrecorded ones (or 4 and 4) an exact 95% interval exists: the whole range of the pairwise differences, so that
#: the judgement is "slower" only when every recorded step ran longer than every unrecorded one.
MIN_STEPS = 3


@dataclass(frozen=True)
class Inflation:
    """Recorded vs unrecorded step times of one recording."""

    ratio: float  # median recorded step / median unrecorded step
    recorded_ns: int  # median recorded step
    unrecorded_ns: int  # median unrecorded step
    recorded: int  # how many steps each median is of
    unrecorded: int
    #: the median difference recorded - unrecorded with its 95% interval; None with too few steps for one
    shift: noise.Shift | None = None

    @property
    def verdict(self) -> str:
        """faster, slower, no difference (:mod:`opscope.analyses.noise`) or too few runs to tell."""
        return noise.verdict(self.shift)

    @property
    def inflated(self) -> bool:
        """The recorded steps ran slower than the unrecorded ones beyond the noise: the profiler's overhead."""
        return self.verdict == noise.SLOWER

    def line(self) -> str:
        """One sentence for the output of record, summary and advise (the same judgement and words everywhere)."""
        from opscope.units import format_ns

        medians = (f"median {format_ns(self.recorded_ns)} over {_steps(self.recorded, 'recorded')} vs "
                   f"{format_ns(self.unrecorded_ns)} over {_steps(self.unrecorded, 'unrecorded')}")
        if self.shift is not None:
            medians += (f"; 95% CI of the difference {_signed(self.shift.low)}..{_signed(self.shift.high)}")
        head = f"recorded steps ran {self.ratio:.2f}x the time of unrecorded ones ({medians}): "
        verdict = self.verdict
        if verdict == noise.SLOWER:
            return (head + "slower, so this recording's times are inflated by the profiler (record without --stack, "
                    "or with --no-shapes --no-memory, to lower its overhead)")
        if verdict == noise.FASTER:
            return (head + "faster, which the profiler does not cause: the unrecorded steps were slower for another "
                    "reason (other work in the program's later steps, a busier machine); the recorded times are "
                    "not inflated by the profiler")
        if verdict == noise.NO_DIFFERENCE:
            return head + "no difference within the noise"
        return (head + f"too few steps to tell (an interval needs {MIN_STEPS} recorded and 5 unrecorded steps: run "
                "more steps after the recorded window)")


def _signed(ns: int) -> str:
    from opscope.units import format_ns

    return ("-" if ns < 0 else "+") + format_ns(abs(ns))


def _steps(n: int, which: str) -> str:
    return f"{n} {which} step{'s' if n != 1 else ''}"


def unprofiled_steps(run: dict[str, Any]) -> list[int]:
    """Complete steps the profiler did not run in (from run.json; older ones without ``profiled_steps``
    use torch's schedule: step N's state is schedule(N) with the recording's wait/warmup/active/repeat)."""
    complete = range(1, len(run.get("step_times_ns") or []) + 1)
    profiled = run.get("profiled_steps")
    if profiled is None:
        options = run.get("options")
        o: dict[str, Any] = options if isinstance(options, dict) else {}
        # a value that is not a count (run.json is a file anyone can write) reads as the default
        wait, warmup, active, repeat = (v if isinstance(v := o.get(k, d), int) and not isinstance(v, bool) and v >= 0
                                        else d for k, d in (("wait", 1), ("warmup", 1), ("active", 3), ("repeat", 1)))
        cycle = max(1, wait + warmup + active)
        profiled = [n for n in complete if not (repeat and n // cycle >= repeat) and n % cycle >= wait]
    skip = set(profiled)
    return [n for n in complete if n not in skip]


#: The first complete step whose runner-timed duration is a steady-state sample: step 1, the first after start-up,
#: still pays for first-use work (advise --measure's baseline leaves it out too).
FIRST_STEADY_STEP = 2


def runner_step_times(run: dict[str, Any] | None) -> list[int]:
    """The durations of the steps the runner timed without the profiler running in them (its unrecorded steps, from
    :data:`FIRST_STEADY_STEP` on), in step order: samples of the program's own step time. Empty when run.json has
    none."""
    if not isinstance(run, dict):
        return []
    times = run.get("step_times_ns") or []
    return [times[n - 1] for n in unprofiled_steps(run) if n >= FIRST_STEADY_STEP]


def step_inflation(run: dict[str, Any] | None) -> Inflation | None:
    """Recorded vs unrecorded step times (:func:`compare_steps`), or None when the run lacks either (too few steps, a
    traced window without steps, step times only)."""
    if not isinstance(run, dict):
        return None
    times = run.get("step_times_ns") or []
    recorded = [times[n - 1] for n in run.get("recorded_steps") or [] if isinstance(n, int) and 1 <= n <= len(times)]
    return compare_steps(recorded, runner_step_times(run))


def compare_steps(recorded: list[int], unrecorded: list[int]) -> Inflation | None:
    """The recorded steps' durations against the unrecorded ones' (ns): the ratio of their medians and the noise
    helper's interval of the median difference; None when either side is empty or the unrecorded median is 0."""
    if not recorded or not unrecorded:
        return None
    rec, base = statistics.median(recorded), statistics.median(unrecorded)
    if base <= 0:
        return None
    return Inflation(ratio=rec / base, recorded_ns=round(rec), unrecorded_ns=round(base), recorded=len(recorded),
                     unrecorded=len(unrecorded), shift=noise.shift(unrecorded, recorded, min_samples=MIN_STEPS))


def find_run_info(trace_path: Path) -> dict[str, Any] | None:
    """The run.json of the recording a trace belongs to (``opscope record`` writes it beside its traces)."""
    candidate = trace_path.parent / "run.json"
    if not candidate.is_file():
        return None
    try:
        run = json.loads(candidate.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or trace_path.name not in trace_names(run):
        return None
    return clean_run(run)


def trace_names(run: Any) -> list[str]:
    """The trace file names a run.json lists: plain names only (``a.json``), so a hostile run.json cannot make
    opscope open a path elsewhere (``/etc/passwd``, ``../x``)."""
    names = run.get("traces") if isinstance(run, dict) else None
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and n not in ("", ".", "..") and "/" not in n and "\\" not in n]


#: The names ``opscope record`` (and ``opscope.profile``) give the traces it saves; only complete files get one.
TRACE_NAME = re.compile(r"^trace-([0-9]{1,9})\.pt\.trace\.json\.gz$")


def saved_traces(directory: Path) -> list[str]:
    """The complete trace files a recording saved in ``directory`` (regular files, not links), in the order
    they were saved: what to read when its run.json lists none (the program died before it could say)."""
    found = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for entry in entries:
        match = TRACE_NAME.match(entry.name)
        if match and entry.is_file() and not entry.is_symlink():
            found.append((int(match.group(1)), entry.name))
    return [name for _, name in sorted(found)]


def recording_traces(directory: Path, run: Any) -> tuple[list[str], str | None]:
    """The traces of the recording in ``directory``: those its run.json lists, else the complete trace files
    present, with a note saying so (None when run.json listed them)."""
    listed = trace_names(run)
    if listed:
        return listed, None
    found = saved_traces(directory)
    if not found:
        return [], None
    status = run.get("status") if isinstance(run, dict) and isinstance(run.get("status"), str) else "unknown"
    return found, (f"{directory / 'run.json'} lists no trace (status {status!r}: the program may have died before "
                   f"it could); reading the trace files in the directory: {', '.join(found)}")


#: The shape the readers of run.json expect: keys that must hold an object, and lists with their items' type.
_OBJECTS = ("cpu", "threads", "environment", "options")
_LISTS: dict[str, type | tuple[type, ...]] = {"gpus": dict, "step_times_ns": int, "recorded_steps": int,
                                              "profiled_steps": int, "traces": str}


def clean_run(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with values of the wrong type left out (run.json is a file anyone can write; a number where an
    object belongs must not crash advise)."""
    out = dict(run)
    for key in _OBJECTS:
        if key in out and not isinstance(out[key], dict):
            del out[key]
    for key, kind in _LISTS.items():
        if key in out:
            value = out[key]
            out[key] = [v for v in value if isinstance(v, kind) and not isinstance(v, bool)] \
                if isinstance(value, list) else []
    out["traces"] = trace_names(run)
    return out
