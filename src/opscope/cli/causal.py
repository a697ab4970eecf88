"""The commands on the trace's dependency graph: its critical path, and what-if replays."""

from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import load, show
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, TraceArg, TraceOrJobArg
from opscope.errors import UsageError

TopOpt = Annotated[int, typer.Option("--top", min=1, help="Names with the most time on the path, per step.")]
RegionOpt = Annotated[str | None, typer.Option(
    "--region", metavar="REGEX",
    help="Instead of the steps, each instance of the host regions whose name matches (record_function regions, "
         "annotations, ops; outermost where they nest), numbered from 1.")]
ChangeOpt = Annotated[list[str] | None, typer.Option(
    "--change", "-c", metavar="SELECTOR=FACTOR",
    help="Multiply the durations the selector picks (repeatable): op:REGEX (host time in matching ops and "
         "record_function regions), kernel:REGEX, copy, comm, sync (0: the host no longer waits; sync:REGEX: "
         "its waits inside matching ops and regions), launch, loader, idle (the waits the trace does not explain, "
         "down to the lane's usual lag), idle:CAUSE (the host time and explained lags inside the device idle time "
         "put down to CAUSE: sync, input_pipeline, launch_overhead, kernel_gap, host_wait, other; idle:unexplained "
         "is idle). Add @rank:N to change one rank of a job. FACTOR: 0 removes, 0.5 halves.")]


@app.command("critical-path")
def critical_path(trace: TraceArg, top: TopOpt = 5, region: RegionOpt = None, format: FormatOpt = "table",
                  limit: LimitOpt = 0, no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Per step, what set its length: the critical path through the trace's dependency graph, by category.

    The graph ties each host thread's work in program order, each kernel, copy and collective to its launch and to
    the work before it on its stream, and each synchronising call to the device work it waited for. From a step's
    end the path walks back through whatever bound each start. Categories: host compute, python, host untraced,
    launch/runtime, device compute, copies, communication, sync waits, input pipeline, unexplained (a wait the trace
    does not show the cause of). JSON/CSV: one row per step and category (step, category, ns, share).
    """
    from opscope.analyses.filters import checked_pattern
    from opscope.analyses.reports import critical_path_report

    show(critical_path_report(load(trace, no_cache), top, limit, checked_pattern(region)), format)


@app.command()
def whatif(trace: TraceOrJobArg, change: ChangeOpt = None, format: FormatOpt = "table", limit: LimitOpt = 0,
           no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Predict each step's time if some work took another time: the dependency graph replayed with changes.

    Per step (and rank): measured_ns (recorded), replayed_ns (replayed with no change: its distance to measured_ns
    is the model's error) and predicted_ns (replayed with the --change's). Example: opscope whatif trace.json
    --change sync=0 --change kernel:gemm=0.5. Given a job (a directory or glob of rank traces), the ranks' graphs
    are put on one clock and joined at their collectives (one ends when its last rank has arrived, plus its
    transfer), so a change on one rank (--change idle@rank:3=0) moves the others. The prediction is simulated from
    the trace's dependencies and durations; a change that would alter what the program does (fewer launches, other
    kernels) is not modelled.
    """
    from opscope.analyses.reports import job_whatif_report, whatif_report
    from opscope.analyses.whatif import parse_change
    from opscope.scale.discover import is_job_spec

    changes = [parse_change(text) for text in change or []]
    if is_job_spec(trace):
        show(job_whatif_report(_job_traces(trace, no_cache), changes, limit, str(trace)), format)
        return
    show(whatif_report(load(trace, no_cache), changes, limit), format)


def _job_traces(spec: Path, no_cache: bool) -> dict[int, Any]:
    """Every rank's trace of a job, read into the cache in parallel, then opened here (rank -> trace)."""
    from opscope.cli.common import open_quietly, say
    from opscope.cli.job import run_job_from_env
    from opscope.cli.options import capture_given

    if capture_given():
        raise UsageError(f"--capture goes with one trace, and {spec} names a job: give one rank's trace and its "
                         "capture traces")
    run = run_job_from_env([spec], use_cache=not no_cache, summarize=False)
    for line in run.problems:
        say(line)
    if len(run.summaries) < 1:
        raise UsageError(f"{spec}: no rank could be read")
    return {rank: open_quietly(Path(summary.path), no_cache) for rank, summary in sorted(run.summaries.items())}
