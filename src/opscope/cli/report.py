"""`opscope report`: one self-contained HTML file with a trace's analyses as charts and tables."""

from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import announce, open_quietly, say, write_document
from opscope.cli.options import CaptureOpt, ForceOpt, NoCacheOpt, PeaksOpt
from opscope.errors import UsageError
from opscope.scale.discover import is_job_spec

#: what the report adds up to on a big trace; said when a file grows past it (mail and bug trackers refuse more)
SIZE_GOAL = 5 * 10**6


@app.command()
def report(
    traces: Annotated[list[Path], typer.Argument(help="A trace or recording directory; two: BASE NEW (a comparison); "
                                                      "a directory or glob of rank traces, three or more traces (or "
                                                      "two with --ranks): the ranks of one job.",
                                                 show_default=False, metavar="TRACE")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.", show_default=False)],
    force: ForceOpt = False,
    ranks: Annotated[bool, typer.Option("--ranks", help="Two traces are two ranks of one job, not BASE and NEW.")]
    = False,
    peaks: PeaksOpt = None, no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
    timeline_steps: Annotated[str | None, typer.Option(
        "--timeline-steps", metavar="N,M", help="The steps the timeline draws (ProfilerStep numbers, comma "
                                                "separated); default: the median step and the slowest one.")] = None,
) -> None:
    """Write an HTML report: one file with every script, style and chart inside, that opens offline in any
    browser and can be mailed or attached to a bug.

    One trace: overview (wall time, a step-time chart with outliers marked, device busy/idle per step, CPU busy),
    timeline (the host threads and device streams of the median and the slowest step, or --timeline-steps N,M: ops
    nested on their thread, kernels and copies on their stream, zoom and pan, each launch linked to its work), GPU
    (per device and stream: compute/memcpy/memset/comm/idle, idle causes, concurrency, launches), ops and kernels (a
    module -> op -> kernel icicle; sortable tables with a filter box, input shapes and the Python API), roofline
    (opscope roofline's ops on log-log axes under the device's roofs, and its table: where the trace names a known
    device, or --peaks FILE gives its peaks), memory (allocated/reserved over time with the peak marked, what held
    it), advice (findings with their evidence, estimates and changes). Every number comes from the function the
    matching command uses (opscope summary, steps, gpu, ops, kernels, roofline, memory, advise), so the page and the
    CLI agree.

    BASE NEW: the comparison opscope diff prints, with its headline as a chart. A job (a directory or glob of
    rank traces, three or more traces, or two with --ranks): opscope job's view, read rank by rank in parallel
    (ranks, heat maps of each rank's delay and step time per step, the slowest rank per step, why the
    stragglers are slow, the collectives), then the lowest rank's own sections.

    The report holds aggregates and a few steps' events, not the whole trace (tables keep their first 300 rows,
    the timeline at most 50,000 events per step; the JSON output of each command has every row), so it stays
    small. OUTPUT is never replaced unless --force is given.
    """
    from opscope.outfile import check_target
    from opscope.render.html import HtmlRenderer

    writer = HtmlRenderer.named("html")()
    writer.require()
    if not output.name.lower().endswith((".html", ".htm")):
        raise UsageError(f"{output}: give the report a .html name (-o report.html)")
    check_target(output, force)  # before minutes of analysis, not after
    steps = _checked_options(len(traces) == 2 and not ranks, peaks, timeline_steps)
    if len(traces) >= 3 or (len(traces) == 2 and ranks) or (len(traces) == 1 and is_job_spec(traces[0])):
        page = _whole_job_page(traces, no_cache, peaks, steps)
    else:
        page = _page(traces, ranks, no_cache, peaks, steps)
    say("writing the report")
    size = write_document(writer, page, output, force)
    say(f"wrote {output} ({size / 1e6:.2f} MB); open it in a browser (it needs no network)")
    if size > SIZE_GOAL:
        say(f"the report is over {SIZE_GOAL / 1e6:.0f} MB: some mail and bug trackers refuse files that big")


def _checked_options(comparison: bool, peaks: Path | None, timeline_steps: str | None) -> list[int] | None:
    """--peaks and --timeline-steps refused before the analysis where they do not apply or do not read; the
    timeline's steps."""
    if peaks is not None:
        from opscope.analyses.peaks import read_peaks_file

        if comparison:
            raise UsageError("--peaks is for one trace's report (its roofline) or a job's; a comparison (BASE NEW) "
                             "draws no roofline")
        read_peaks_file(peaks)  # a bad peaks file is refused before the analysis too
    steps = _steps(timeline_steps)
    if steps is not None and comparison:
        raise UsageError("--timeline-steps is for one trace's report or a job's; a comparison (BASE NEW) draws no "
                         "timeline")
    return steps


def _steps(text: str | None) -> list[int] | None:
    """--timeline-steps N,M as step numbers."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.lstrip("-").isdigit() and len(p) < 19 for p in parts):
        raise UsageError(f"--timeline-steps: give step numbers separated by commas (3,7), not {text!r}")
    return [int(p) for p in parts]


def _page(traces: list[Path], ranks: bool, no_cache: bool, peaks: Path | None, steps: list[int] | None):
    paths, run = _inputs(traces)
    if len(paths) == 2 and not ranks:
        return _diff_page(paths, no_cache)
    return _trace_page(paths[0], run, no_cache, peaks, steps)


def _whole_job_page(traces: list[Path], no_cache: bool, peaks: Path | None, steps: list[int] | None):
    """A job: the job view computed rank by rank in parallel (as opscope job), then the lowest rank's sections."""
    from opscope.analyses.job.report import job_report
    from opscope.analyses.recording import find_run_info
    from opscope.cli.job import run_job_from_env
    from opscope.compose.page.job import job_view_page

    run = run_job_from_env(traces, use_cache=not no_cache)
    assert run.view is not None
    report = job_report(run.view, spec=", ".join(map(str, traces)), files=len(run.inputs.files),
                        world_size=run.world_size, executor=run.executor, problems=run.problems)
    if not run.summaries:
        return job_view_page(report, run.view.rank_steps, None)
    path = Path(run.summaries[min(run.summaries)].path)
    trace = open_quietly(path, no_cache)
    announce(trace, path)
    return job_view_page(report, run.view.rank_steps, (str(path), trace), find_run_info(path), _progress, peaks,
                         steps)


def _inputs(traces: list[Path]) -> tuple[list[Path], Any]:
    from opscope.analyses.recording import find_run_info
    from opscope.cli.advice import recording_trace

    if not traces:
        raise UsageError("give a trace to report on; see opscope report --help")
    paths, run = [], None
    for i, path in enumerate(traces):
        if path.is_dir():
            path, found = recording_trace(path)
        else:
            found = find_run_info(path) if i == 0 else None
        if i == 0:
            run = found
        paths.append(path)
    return paths, run


def _progress(what: str) -> None:
    say(f"analysing: {what}")


def _trace_page(path: Path, run: Any, no_cache: bool, peaks: Path | None, steps: list[int] | None):
    from opscope.compose.page import trace_page

    trace = open_quietly(path, no_cache)
    announce(trace, path)
    return trace_page(trace, str(path), run, _progress, peaks, steps)


def _diff_page(paths: list[Path], no_cache: bool):
    from opscope.cli.advice import open_pair
    from opscope.compose.page.diff import diff_page
    from opscope.diff import compare

    base, new = paths
    a, b = open_pair(base, new, no_cache, hint="give two different traces (a baseline and a new run), or one trace "
                                               "for its own report")
    _progress("the comparison")
    result = compare(a, b, labels=(str(base), str(new)))
    return diff_page(result, str(base), str(new))
