"""``advise --measure`` on a recording: the recorded program re-run with each finding's remedy applied, the measured
step time put beside the predicted one.

A finding whose remedy opscope's runner can apply without editing the program has a ``program_change``
(:mod:`opscope.capture.changes`: DataLoader workers, pinned batches, intra-op threads; skipping the synchronize
calls of a ``record_function`` region the user names). The program is run again as run.json records it (its
command, working directory, interpreter and the performance-relevant environment variables over this process's
environment) with that change, its step clock only (no profiler: a profiler's pauses at step boundaries, which the
step times leave out, let DataLoader workers fill their queue and shorten the steps after them).

The steady-state step time of the re-runs: each run's first steps are left out (:func:`warmup_steps`: with N workers
``3 x prefetch_factor x N``, the batches prefetched while the program started and the steps that drain them), the
rest are grouped in windows of N consecutive steps (:func:`window_steps`: N workers that take the same time per batch
deliver N batches at once, so the steps alternate between one long wait and N - 1 steps that find their batch
ready, and the median of single steps would pick one of the two), and the figure is the median of the windows'
means, with their 10th and 90th percentiles, pooled over the runs.

The ``measured`` block a re-run finding gets (JSON; None when the finding was not re-run):

- ``settings``: the change applied (``num_workers``, ``persistent_workers``, ``pin_memory``, ``intra_op_threads``,
  ``skip_sync_in``), ``applied`` the same in words;
- ``command`` (the program's command line), ``cwd``: what was re-run, and where;
- ``runs``, ``steps`` (steady-state steps used over all runs), ``warmup_steps`` (left out at the start of each run),
  ``window_steps``;
- ``step_ns``, ``p10_ns``, ``p90_ns``: the re-run's steady-state step time and its spread;
- ``baseline_step_ns``: the recording's own unrecorded steps by the same measure (None when run.json lacks them);
- ``saving_ns``: ``baseline_step_ns - step_ns``;
- ``trace_step_ns``, ``predicted_step_ns``: the medians over the trace's steps of the step time as replayed and as
  ``opscope whatif`` predicts it with the finding's change (None when the finding is not simulated);
  ``simulated_saving_ns``: the finding's simulated saving. The prediction is of the trace's profiled steps and is
  compared as it is: scaling it by the recording's unprofiled/profiled step ratio made it worse
  (bench/advise_measure.py: the profiler slows the Python of the compute, not the loader's waits that set the step
  with workers);
- ``error_pct``: ``100 x (predicted_step_ns - step_ns) / step_ns``;
- ``failed``: why no step time was measured (the program failed, made too few steps), else None.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from opscope.advise.finding import Finding
from opscope.advise.report import measured_text
from opscope.analyses.noise import spread
from opscope.analyses.recording import step_inflation, unprofiled_steps
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.capture.changes import ProgramChanges
from opscope.capture.launch import Target, parse_command, run_program
from opscope.capture.runinfo import PERF_ENV, perf_environment
from opscope.capture.session import RecordOptions
from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.units import format_ns

#: Re-runs per finding (their steady-state steps are pooled).
DEFAULT_RUNS = 2
#: torch's DataLoader prefetch_factor when workers run and the program gives none.
PREFETCH_FACTOR = 2
#: Steady-state steps (over all runs) a measurement needs.
MIN_STEPS = 8
#: Steps left out at the start of every run, workers or not: the first step after start-up.
MIN_WARMUP = 2
#: The host-sync rule's findings: re-run only when the user names a region (``--measure-region``).
SYNC_RULE = "host-sync"


@dataclass(frozen=True)
class Steady:
    """A steady-state step time: the median of window means, their 10th-90th percentiles."""

    step_ns: int
    p10_ns: int
    p90_ns: int
    steps: int


def warmup_steps(changes: ProgramChanges) -> int:
    """Steps left out at the start of a run: with N workers, ``3 x prefetch_factor x N`` (the prefetched batches
    and the steps that drain them while the workers refill), else :data:`MIN_WARMUP`."""
    return max(MIN_WARMUP, 3 * PREFETCH_FACTOR * (changes.num_workers or 0))


def window_steps(changes: ProgramChanges) -> int:
    """Consecutive steps whose mean is one sample: the number of workers (they deliver that many batches at once)."""
    return max(1, changes.num_workers or 1)


def steady_state(runs: list[list[int]], skip: int, window: int) -> Steady | None:
    """The steady-state step time of ``runs`` (each a run's step durations, in order): the first ``skip`` steps of
    each left out, the means of every ``window`` consecutive steps pooled; None with fewer than :data:`MIN_STEPS`
    steps left."""
    means: list[float] = []
    used = 0
    for durations in runs:
        kept = durations[skip:]
        if len(kept) < window:
            continue
        used += len(kept)
        means += [sum(kept[i:i + window]) / window for i in range(len(kept) - window + 1)]
    if used < MIN_STEPS or not means:
        return None
    found = spread(means)
    assert found is not None  # means is not empty
    return Steady(round(found.median), round(found.p10), round(found.p90), used)


def baseline(run: dict[str, Any], window: int = 1) -> Steady | None:
    """The recording's own steady-state step time by the re-run's measure: its unrecorded steps (the profiler did not
    run in them) after the first, the means of ``window`` consecutive ones."""
    times = run.get("step_times_ns") or []
    steps = [n for n in unprofiled_steps(run) if n >= MIN_WARMUP]
    return steady_state([[times[n - 1] for n in steps]], 0, window)


@dataclass(frozen=True)
class Program:
    """The recorded program, as a re-run starts it."""

    target: Target
    cwd: Path
    env: dict[str, str]
    options: RecordOptions

    @property
    def command(self) -> str:
        return shlex.join(self.target.command)


def recorded_program(run: dict[str, Any] | None) -> Program:
    """The program a recording's run.json names, ready to re-run; a UsageError saying why not."""
    if not run or not isinstance(run.get("command"), list) or not run["command"]:
        raise UsageError("advise --measure re-runs the recorded program: give a recording directory of opscope record "
                         "(or a trace with its run.json beside it, or --run run.json)")
    command = [str(part) for part in run["command"]]
    cwd = Path(str(run.get("cwd") or "."))
    if not cwd.is_dir():
        raise UsageError(f"advise --measure: the recording's working directory {cwd} is gone; cannot re-run "
                         f"{shlex.join(command)}")
    target = parse_command(command, cwd)
    executable = (run.get("versions") or {}).get("executable")
    if isinstance(executable, str) and Path(executable).is_file():
        target = replace(target, interpreter=executable)  # the interpreter that ran it (its venv)
    env = {k: v for k, v in os.environ.items() if k not in perf_environment(dict(os.environ))}
    recorded = run.get("environment") or {}
    env.update({str(k): str(v) for k, v in recorded.items() if PERF_ENV.match(str(k))})
    known = {k: v for k, v in (run.get("options") or {}).items() if k in RecordOptions.__dataclass_fields__}
    try:
        options = RecordOptions(**known).validate()
    except (TypeError, UsageError):
        options = RecordOptions()
    return Program(target, cwd, env, options)


def predicted_step(trace: Trace, change: str | None) -> tuple[int, int] | None:
    """The medians over the trace's steps of the step time as replayed and as ``opscope whatif`` predicts it with
    ``change``; None without a change or steps to replay."""
    if not change:
        return None
    table, _ = whatif_table(trace, [parse_change(part) for part in change.split()])
    if not table.num_rows:
        return None
    return (round(statistics.median(table["replayed_ns"].to_pylist())),
            round(statistics.median(table["predicted_ns"].to_pylist())))


def rerun(program: Program, changes: ProgramChanges, runs: int,
          progress: Callable[[str], None] | None = None) -> tuple[list[list[int]], str | None]:
    """Each run's step durations with ``changes`` applied; and why a run failed (None when none did)."""
    options = replace(program.options, intra_op_threads=changes.intra_op_threads or program.options.intra_op_threads)
    durations: list[list[int]] = []
    for k in range(runs):
        if progress:
            progress(f"advise --measure: re-running {program.command} (in {program.cwd}) with {changes.describe()}, "
                     f"run {k + 1}/{runs}")
        with tempfile.TemporaryDirectory(prefix="opscope-rerun-") as tmp:
            errors = Path(tmp) / "stderr"
            with errors.open("w") as sink:
                run = run_program(program.target, Path(tmp), options, mode="time", quiet=True,
                                  changes=changes.to_dict(), cwd=program.cwd, base_env=program.env, stderr=sink)
            if run.info is None or run.exit_code != 0:
                tail = _tail(errors)
                why = (run.info or {}).get("crash") or f"exit code {run.exit_code}"
                return durations, f"the program failed with {changes.describe()} ({why})" + (f": {tail}" if tail
                                                                                               else "")
        durations.append(list(run.info.get("step_times_ns") or []))
    return durations, None


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        return " / ".join(lines[-3:])
    return ""


def finding_changes(finding: Finding, region: str | None) -> tuple[ProgramChanges, str | None] | None:
    """What a re-run of ``finding`` applies and the whatif change that predicts it (None: not simulated); None when
    the finding has nothing opscope can apply."""
    if finding.rule == SYNC_RULE and finding.change:
        if region is None:
            return None
        return ProgramChanges(skip_sync_in=region), f"sync:^{re.escape(region)}$=0"
    if not finding.program_change:
        return None
    return ProgramChanges.from_dict(finding.program_change), finding.change


def measure_findings(findings: list[Finding], trace: Trace, run: dict[str, Any] | None, runs: int = DEFAULT_RUNS,
                     region: str | None = None,
                     progress: Callable[[str], None] | None = None) -> tuple[list[Finding], list[str]]:
    """``findings`` with those the runner can apply re-run (``measured`` filled, ``saving_method`` measured where a
    step time came out); and notes for the user."""
    plans = [(i, planned) for i, f in enumerate(findings) if (planned := finding_changes(f, region)) is not None]
    notes: list[str] = []
    if region is not None and not any(findings[i].rule == SYNC_RULE for i, _ in plans):
        notes.append(f"--measure-region {region}: no {SYNC_RULE} finding to re-run without the region's syncs")
    if not plans:
        notes.append("advise --measure: no finding has a change opscope can apply to the program (DataLoader workers, "
                     "pinned batches, thread counts, or --measure-region for a host-sync finding)")
        return findings, notes
    try:
        program = recorded_program(run)
    except UsageError as exc:  # the findings are still worth showing: say why none was re-run
        notes.append(str(exc))
        return findings, notes
    inflation = step_inflation(run)
    if inflation is not None and inflation.inflated:
        notes.append(f"advise --measure: the predictions come from recorded steps that ran {inflation.ratio:.2f}x "
                     "the time of the unrecorded ones: they carry the profiler's slowdown, the re-runs (no profiler) "
                     "do not")
    out = list(findings)
    for i, (changes, change) in plans:
        base = baseline(run or {}, window_steps(changes))
        out[i] = _measured(findings[i], trace, program, changes, change, base, runs, progress)
        if progress:
            progress(f"advise --measure: {findings[i].rule}: {measured_text(out[i].measured or {})}")
    return out, notes


def _measured(finding: Finding, trace: Trace, program: Program, changes: ProgramChanges, change: str | None,
              base: Steady | None, runs: int, progress: Callable[[str], None] | None) -> Finding:
    replayed = predicted_step(trace, change)
    predicted = replayed[1] if replayed else None
    skip, window = warmup_steps(changes), window_steps(changes)
    block: dict[str, Any] = {
        "settings": changes.to_dict(), "applied": changes.describe(), "command": program.command,
        "cwd": str(program.cwd), "runs": runs, "steps": 0, "warmup_steps": skip, "window_steps": window,
        "step_ns": None, "p10_ns": None, "p90_ns": None, "baseline_step_ns": base.step_ns if base else None,
        "saving_ns": None, "trace_step_ns": replayed[0] if replayed else None, "predicted_step_ns": predicted,
        "simulated_saving_ns": finding.saving_ns if finding.saving_method == "simulated" else None,
        "error_pct": None, "failed": None,
    }
    durations, failed = rerun(program, changes, runs, progress)
    steady = steady_state(durations, skip, window) if failed is None else None
    if steady is None:
        made = max((len(d) for d in durations), default=0)
        block["failed"] = failed or (f"too few steps: a run made {made} complete step(s); {skip} are left out as "
                                     f"warm-up and {MIN_STEPS} are needed after them")
        return replace(finding, measured=block)
    block.update(steps=steady.steps, step_ns=steady.step_ns, p10_ns=steady.p10_ns, p90_ns=steady.p90_ns)
    if predicted is not None and steady.step_ns:
        block["error_pct"] = round(100.0 * (predicted - steady.step_ns) / steady.step_ns, 1)
    if base is None:
        return replace(finding, measured=block)
    saving = base.step_ns - steady.step_ns
    block["saving_ns"] = saving
    return replace(finding, measured=block, saving_ns=saving, saving_method="measured",
                   saving_pct=round(100.0 * saving / base.step_ns, 2) if base.step_ns else None,
                   estimate=f"measured: {format_ns(base.step_ns)}/step unrecorded in the recording less "
                            f"{format_ns(steady.step_ns)}/step re-run with {changes.describe()}; {finding.estimate}")

