"""`opscope scope` and `opscope code`: op time by nn.Module and by Python stack frame."""

from typing import Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import event_filter, load, per_rank, show
from opscope.cli.options import (
    CaptureOpt,
    ExcludeOpt,
    FormatOpt,
    LimitOpt,
    MatchOpt,
    NoCacheOpt,
    StepsOpt,
    TraceOrJobArg,
)

_VIEW_SORT_HELP = ("Order of siblings in the tree (flat: of rows): total_ns, self_ns, wall_ns, calls, ops, order "
                   "(first call), name; prefix - to reverse.")


@app.command()
def scope(
    trace: TraceOrJobArg,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Only modules at most this deep (0 = the "
                                                                      "top modules); totals still include the "
                                                                      "modules below.", min=0)] = None,
    sort: Annotated[str, typer.Option(help=_VIEW_SORT_HELP)] = "total_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = "table",
    limit: LimitOpt = 30,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Op time by nn.Module (like tfprof's scope view): a tree of module paths such as Net_0/Sequential_1/Conv2d_5.

    Modules come from the Python events of nn.Module calls (record with with_stack=True, with_modules=True).
    An op belongs to the innermost module call on its thread that is running when it starts. total_ns is
    the op time inside the module and everything under it, self_ns the op time directly in it (an op's
    time excludes the ops nested in it, so nothing counts twice); wall_ns is the duration of the module's
    calls, Python included. Ops outside every module (backward, optimizer) form the '(no module)' row.
    --match/--exclude/--steps choose the ops counted (by op name and step).
    """
    from opscope.analyses.reports import scope_report

    filt = event_filter("cpu_op", match, exclude, steps)
    job = per_rank(trace, scope_report, no_cache, filt=filt, sort=sort, max_depth=max_depth, limit=limit)
    show(job if job is not None else scope_report(load(trace, no_cache), filt, sort, max_depth, limit), format)


@app.command()
def code(
    trace: TraceOrJobArg,
    flat: Annotated[bool, typer.Option("--flat", help="One row per frame (file:line function) instead of a tree "
                                                      "of call paths.")] = False,
    frames: Annotated[str | None, typer.Option("--frames", help="Keep only frames matching this regex (e.g. "
                                                                "'train.py|model/'); ops count for their nearest "
                                                                "kept frame.")] = None,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Tree: only frames at most this deep "
                                                                      "(0 = outermost).", min=0)] = None,
    sort: Annotated[str | None, typer.Option(help=_VIEW_SORT_HELP + " Default total_ns for the tree, self_ns with "
                                                  "--flat.", show_default=False)] = None,
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = "table",
    limit: LimitOpt = 30,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Op time by Python stack frame (like tfprof's code view), as a tree of call paths or a flat list.

    Frames come from the python_function events (record with with_stack=True) and read 'file:line
    function'. An op's time counts for every frame on its Python stack (total_ns) and as self_ns for the
    innermost one; a frame that recurses counts once per stack in --flat. Ops with no Python frame around
    them (e.g. backward ops on autograd threads) form the '(no python frame)' row. In JSON/CSV the tree's
    path joins the frames with ';' (the folded-stack format of flame graph tools). --match/--exclude/--steps
    choose the ops counted (by op name and step); --frames chooses the frames shown.
    """
    from opscope.analyses.reports import code_report

    filt = event_filter("cpu_op", match, exclude, steps)
    order = sort or ("self_ns" if flat else "total_ns")
    job = per_rank(trace, code_report, no_cache, filt=filt, frames=frames, flat=flat, sort=order, max_depth=max_depth,
                   limit=limit)
    show(job if job is not None else code_report(load(trace, no_cache), filt, frames, flat, order, max_depth, limit),
         format)
