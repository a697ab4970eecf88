"""`opscope memory`: peaks per device, who holds memory at the peak, allocations by op, a timeline."""

from enum import Enum
from typing import Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import load, per_rank, show, split
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, StepsOpt, TraceOrJobArg


class MemoryView(str, Enum):
    peak = "peak"
    holders = "holders"
    allocations = "allocations"
    timeline = "timeline"
    counters = "counters"


@app.command()
def memory(
    trace: TraceOrJobArg,
    view: Annotated[MemoryView | None, typer.Option(help="One table: peak (per device), holders (ops holding "
                                                         "memory at each peak), allocations (by op), timeline, "
                                                         "counters. Default: all but timeline as sections (JSON/"
                                                         "CSV: peak, or timeline with --timeline).",
                                                    show_default=False)] = None,
    timeline: Annotated[int, typer.Option("--timeline", help="Add a timeline of N equal time buckets per device "
                                                             "(most allocated/reserved in each).", min=0)] = 0,
    device: Annotated[str | None, typer.Option("--device", help="Only these devices, e.g. cuda:0 or cpu,cuda:1.")]
    = None,
    sort: Annotated[str, typer.Option(help="holders/allocations: column to sort by (prefix - for ascending).")]
    = "bytes",
    steps: StepsOpt = None,
    format: FormatOpt = "table",
    limit: LimitOpt = 10,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Memory per device from profile_memory records: peaks, the ops holding memory at the peak, allocations by op.

    The peak is the largest 'Total Allocated' of a device (also reserved, for caching allocators), with
    when it happened (time after the trace start) and its step. Holders: the allocations made before the
    peak and not freed by then (a free matches the allocation at the same address), charged to the op
    that made them (the innermost cpu_op running on the allocating thread); memory allocated before the
    trace (or before --steps) is one more row, so the rows add up to the peak. Allocations: per op, how
    many, bytes in all, largest, average. --timeline N: the most allocated in each of N time buckets.
    """
    from opscope.analyses.filters import parse_steps
    from opscope.analyses.reports import memory_report

    chosen: Any = view.value if view else None
    devices = split(device) if device else None
    job = per_rank(trace, memory_report, no_cache, view=chosen, timeline=timeline, devices=devices, sort=sort,
                   steps=parse_steps(steps), limit=limit)
    show(job if job is not None else memory_report(load(trace, no_cache), chosen, timeline, devices, sort,
                                                   parse_steps(steps), limit), format)
