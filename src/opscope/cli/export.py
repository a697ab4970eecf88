"""`opscope export`: the trace written back for chrome://tracing or the Perfetto UI, with opscope's findings."""

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import load, say, split, stderr, write_document
from opscope.cli.options import CaptureOpt, ForceOpt, NoCacheOpt, StepsOpt
from opscope.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from opscope.compose.export.select import Cut
    from opscope.model.trace import Trace
    from opscope.render.export import ExportRenderer


class ExportFormat(str, Enum):
    chrome = "chrome"
    perfetto = "perfetto"


ToOpt = Annotated[ExportFormat, typer.Option("--to", help="chrome: trace-event JSON (.json, or .json.gz for gzip); "
                                                           "perfetto: native protobuf (needs opscope[view]).")]
ExportOutputOpt = Annotated[Path, typer.Option("--output", "-o", help="File to write.", show_default=False)]
MinDurOpt = Annotated[float, typer.Option("--min-dur-us", help="Drop slices shorter than this (µs); arrows stay "
                                                               "only where both ends stay.", min=0)]
ExportKindsOpt = Annotated[str | None, typer.Option("--kinds", help="Only these kinds, e.g. kernel,cpu_op,runtime.")]
NoFindingsOpt = Annotated[bool, typer.Option("--no-findings", help="Leave out opscope's findings track (slowest "
                                                                   "steps, longest idle gaps).")]


JobTraceArg = Annotated[Path, typer.Argument(
    help="Trace file (any format opscope reads, plain or .gz), or with --to perfetto a job: a directory or quoted "
         "glob of rank traces, written as one timeline on one clock.", show_default=False, metavar="TRACE")]


@app.command()
def export(trace: JobTraceArg, to: ToOpt, output: ExportOutputOpt, force: ForceOpt = False, steps: StepsOpt = None,
           min_dur_us: MinDurOpt = 0.0, kinds: ExportKindsOpt = None, no_findings: NoFindingsOpt = False,
           no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Write the trace as a timeline: a track per process, thread and device stream ('GPU 0 stream 7'); arrows from
    each launch to its kernel, memcpy or memset; memory counters under their device; step boundaries on an
    'opscope' track; and opscope's findings (the slowest steps, the longest idle gaps of each device with their
    cause) on an 'opscope findings' track.

    Works for every format opscope reads. The Chrome JSON reads back into opscope with the same kinds and totals.
    The Perfetto file writes each name, category and annotation once (interned) and events refer to it.
    --steps 3-5, --min-dur-us and --kinds cut what is written; stderr says how many events were kept.

    A job (a directory or glob of rank traces) goes to one Perfetto file, every rank's tracks named 'rank N ...',
    and every rank's times put on the clock of the job's reference rank (the lowest rank with collectives to align
    on, as opscope job reports it): each rank's clock offset, estimated from the ends of the collectives all ranks
    took part in, is taken off its times, so that the ranks line up when opened together. A rank that cannot be
    aligned keeps its own clock (said on stderr).
    """
    from opscope.analyses.filters import parse_steps
    from opscope.compose.export.select import Cut, check_kinds
    from opscope.outfile import check_target
    from opscope.scale.discover import is_job_spec

    if not min_dur_us * 1000 < 2**62:
        raise UsageError(f"--min-dur-us takes a finite number of microseconds, not {min_dur_us}")
    writer = _writer(to, output)
    cut = Cut(steps=parse_steps(steps), min_dur_ns=round(min_dur_us * 1000),
              kinds=check_kinds(split(kinds)) if kinds is not None else None)
    check_target(output, force)
    if is_job_spec(trace):
        if to is not ExportFormat.perfetto:
            raise UsageError(f"{trace} names a job: a job exports to one Perfetto file (--to perfetto); for Chrome "
                             "JSON give one rank's trace")
        _export_job(trace, writer, cut, output, force, no_findings, no_cache)
        return
    from opscope.compose.export import plan

    model = load(trace, no_cache)
    phase = say if stderr().is_terminal else None
    p = plan(model, cut, findings=not no_findings, phase=phase)
    if phase:
        phase(f"writing {output.name}")
    size = write_document(writer, p, output, force)
    say(f"wrote {output} ({size:,} bytes): kept {len(p.rows):,} of {p.total:,} events, "
        f"{p.links.num_rows:,} launch arrows, {len(p.marks):,} opscope marks")


def _export_job(spec: Path, writer: "ExportRenderer", cut: "Cut", output: Path, force: bool, no_findings: bool,
                no_cache: bool) -> None:
    """Every rank of the job into one Perfetto file, on the reference rank's clock."""
    from opscope.cli.common import open_quietly
    from opscope.cli.job import run_job_from_env
    from opscope.compose.export import job_plan

    run = run_job_from_env([spec], use_cache=not no_cache)
    for line in run.problems:
        say(line)
    if not run.summaries or run.view is None:
        raise UsageError(f"{spec}: no rank could be read")
    def opener(path: Path) -> "Callable[[], Trace]":
        return lambda: open_quietly(path, no_cache)

    ranks = [(rank, opener(Path(s.path))) for rank, s in sorted(run.summaries.items())]
    doc = job_plan(ranks, run.view.clocks, run.view.clock_reference, cut, findings=not no_findings)
    unaligned = [r.rank for r in doc.ranks if not r.aligned]
    if doc.reference is None:
        say("the ranks' clocks could not be aligned (no collective ends to align on): each rank keeps its own clock")
    elif unaligned:
        say(f"rank(s) {', '.join(map(str, unaligned))} could not be aligned and keep their own clocks")
    size = write_document(writer, doc, output, force)
    clock = f"rank {doc.reference}'s clock" if doc.reference is not None else "each rank's own clock"
    say(f"wrote {output} ({size:,} bytes): {len(doc.ranks)} ranks on {clock}, kept {doc.kept:,} of {doc.total:,} "
        "events")


def _writer(to: ExportFormat, output: Path) -> "ExportRenderer":
    """The renderer of ``--to``, its package checked, gzip-compressing when the name ends in .gz (and it can)."""
    from opscope.render.export import ExportRenderer

    gz = output.name.endswith(".gz")
    writer = ExportRenderer.named(to.value)(gzip=gz)
    writer.require()
    if gz and not writer.gzip_ok:
        raise UsageError(f"{output}: gzip output is for --to chrome; Perfetto files are written as protobuf")
    return writer
