"""`opscope roofline`: each op's (or kernel's) distance from what the device can do."""

from typing import Annotated, Literal

import typer

from opscope.cli.app import app
from opscope.cli.common import load, show
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, PeaksOpt, RecordingArg

ByOpt = Annotated[Literal["op", "kernel"], typer.Option(
    "--by", help="op: one row per op, shapes and dtype; kernel: one row per kernel (each taking its op's work in "
                 "proportion to its time).")]


@app.command()
def roofline(trace: RecordingArg, by: ByOpt = "op", peaks: PeaksOpt = None, format: FormatOpt = "table",
             limit: LimitOpt = 0, no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """How far each op is from what the device can do: its FLOPs and bytes (from its shapes) over its device time,
    against the device's roofs.

    The device comes from the trace (Kineto deviceProperties, xplane, rocprof agents, nsys) and its dense peaks per
    dtype and memory bandwidth from opscope's table (opscope peaks --help); --peaks FILE overrides them. Each kernel,
    copy and fill counts for the innermost op around its launch that has a work model (matmuls, convolutions,
    attention, elementwise, normalisations, reductions, embeddings, copies; XLA ops from their HLO instruction); the
    device time no modelled op holds is named in a note. pct_of_roof is the achieved rate over the roof at the row's
    intensity; rows are sorted by the device time they would save at their roof.
    """
    from opscope.analyses.peaks import trace_peaks
    from opscope.analyses.reports import roofline_report

    if trace.is_dir():
        from opscope.cli.advice import recording_trace

        trace = recording_trace(trace)[0]
    t = load(trace, no_cache)
    found, how = trace_peaks(t, peaks)
    show(roofline_report(t, found, how, by, limit), format)
