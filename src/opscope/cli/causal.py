"""The commands on the trace's dependency graph: its critical path, and what-if replays."""

from typing import Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import load, show
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, TraceArg

TopOpt = Annotated[int, typer.Option("--top", min=1, help="Names with the most time on the path, per step.")]
RegionOpt = Annotated[str | None, typer.Option(
    "--region", metavar="REGEX",
    help="Instead of the steps, each instance of the host regions whose name matches (record_function regions, "
         "annotations, ops; outermost where they nest), numbered from 1.")]
ChangeOpt = Annotated[list[str] | None, typer.Option(
    "--change", "-c", metavar="SELECTOR=FACTOR",
    help="Multiply the durations the selector picks (repeatable): op:REGEX (host time in matching ops and "
         "record_function regions), kernel:REGEX, copy, comm, sync (0: the host no longer waits; sync:REGEX: "
         "its waits inside matching ops and regions), launch, loader, "
         "idle (the lags the trace does not explain). FACTOR: 0 removes, 0.5 halves.")]


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
def whatif(trace: TraceArg, change: ChangeOpt = None, format: FormatOpt = "table", limit: LimitOpt = 0,
           no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Predict each step's time if some work took another time: the dependency graph replayed with changes.

    Per step: measured_ns (recorded), replayed_ns (replayed with no change: its distance to measured_ns is the
    model's error) and predicted_ns (replayed with the --change's). Example: opscope whatif trace.json
    --change sync=0 --change kernel:gemm=0.5. The prediction is simulated from the trace's dependencies and
    durations; a change that would alter what the program does (fewer launches, other kernels) is not modelled.
    """
    from opscope.analyses.reports import whatif_report
    from opscope.analyses.whatif import parse_change

    changes = [parse_change(text) for text in change or []]
    show(whatif_report(load(trace, no_cache), changes, limit), format)
