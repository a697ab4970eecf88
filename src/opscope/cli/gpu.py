"""`opscope gpu`: where device time goes per device and stream, why the device idles, launches."""

from typing import Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import load, per_rank, show
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, TraceOrJobArg
from opscope.errors import UsageError


@app.command()
def gpu(
    trace: TraceOrJobArg,
    idle: Annotated[bool, typer.Option("--idle", help="Only the idle-causes table (JSON/CSV: its rows).")] = False,
    launches: Annotated[bool, typer.Option("--launches", help="Only the launches-and-concurrency table (JSON/CSV: "
                                                              "its rows).")] = False,
    short_gap_us: Annotated[float, typer.Option("--short-gap-us", help="Idle gaps between busy periods shorter "
                                                                       "than this (µs) are launch_overhead (next "
                                                                       "work launched late) or kernel_gap (next "
                                                                       "work already queued).", min=0)]
    = 10.0,
    format: FormatOpt = "table",
    limit: LimitOpt = 0,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Where GPU time goes per device and stream: compute, memcpy by direction, memset, communication, idle.

    Window: from the start of the first ProfilerStep#N to the end of the last one; in a trace without
    steps, from its first event (of any kind) to the end of its last. Work outside the window is not
    counted and percentages are of the window. Unseen busy: when a device's first recorded work started
    more than 100 us after its launch call returned, it was queued behind work the trace does not show
    (launched before the profiler started, as in graph-replay servers); the stretch before it is
    unseen_busy_ns, left out of the device's window, its idle time and advise's savings. Work = kernels,
    collectives (comm: NCCL/RCCL), memcpys, memsets. Busy = the union of their intervals (overlaps count
    once); a device's busy time is the union over its streams (its row has stream '-'). An event that runs
    past the start of the next one on its stream is cut there (counted in 'clipped'). concurrent_ns: time
    with two or more streams busy.

    The terminal shows the breakdown, then the idle time of each device by cause (every idle ns has one
    cause, the first that holds: sync = host in a synchronising call, input_pipeline = host in the
    DataLoader, launch_overhead = short gap whose next work was launched after it began, kernel_gap =
    short gap with the next work already queued, host_wait = nothing launched and not started, other),
    then concurrency and launches (kernels per step, median kernel time, launch delay median/p90, graph
    launches, clock skew). --idle or --launches shows one of them; JSON/CSV give the breakdown unless one
    is chosen.
    """
    from opscope.analyses.reports import GpuPart, gpu_report

    if idle and launches:
        raise UsageError("choose one of --idle and --launches")
    only: GpuPart | None = "idle" if idle else "launches" if launches else None
    if not short_gap_us * 1000 < 2**62:  # inf and nan too: the threshold becomes int64 nanoseconds
        raise UsageError(f"--short-gap-us takes a finite number of microseconds, not {short_gap_us}")
    job = per_rank(trace, gpu_report, no_cache, short_gap_ns=round(short_gap_us * 1000), only=only, limit=limit)
    show(job if job is not None else gpu_report(load(trace, no_cache), round(short_gap_us * 1000), only, limit),
         format)
