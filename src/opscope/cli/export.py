"""`opscope export`: the trace written back for chrome://tracing or the Perfetto UI, with opscope's findings."""

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import load, say, split, stderr, write_document
from opscope.cli.options import CaptureOpt, ForceOpt, NoCacheOpt, StepsOpt, TraceArg
from opscope.errors import UsageError

if TYPE_CHECKING:
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


@app.command()
def export(trace: TraceArg, to: ToOpt, output: ExportOutputOpt, force: ForceOpt = False, steps: StepsOpt = None,
           min_dur_us: MinDurOpt = 0.0, kinds: ExportKindsOpt = None, no_findings: NoFindingsOpt = False,
           no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Write the trace as a timeline: a track per process, thread and device stream; arrows from each launch to its
    kernel, memcpy or memset; memory counters; step boundaries on an 'opscope' track; and opscope's findings (the
    slowest steps, the longest idle gaps of each device with their cause) on an 'opscope findings' track.

    Works for every format opscope reads. The Chrome JSON reads back into opscope with the same kinds and totals.
    --steps 3-5, --min-dur-us and --kinds cut what is written; stderr says how many events were kept.
    """
    from opscope.analyses.filters import parse_steps
    from opscope.compose.export import plan
    from opscope.compose.export.select import Cut, check_kinds
    from opscope.outfile import check_target

    if not min_dur_us * 1000 < 2**62:
        raise UsageError(f"--min-dur-us takes a finite number of microseconds, not {min_dur_us}")
    writer = _writer(to, output)
    cut = Cut(steps=parse_steps(steps), min_dur_ns=round(min_dur_us * 1000),
              kinds=check_kinds(split(kinds)) if kinds is not None else None)
    check_target(output, force)
    model = load(trace, no_cache)
    phase = say if stderr().is_terminal else None
    p = plan(model, cut, findings=not no_findings, phase=phase)
    if phase:
        phase(f"writing {output.name}")
    size = write_document(writer, p, output, force)
    say(f"wrote {output} ({size:,} bytes): kept {len(p.rows):,} of {p.total:,} events, "
        f"{p.links.num_rows:,} launch arrows, {len(p.marks):,} opscope marks")


def _writer(to: ExportFormat, output: Path) -> "ExportRenderer":
    """The renderer of ``--to``, its package checked, gzip-compressing when the name ends in .gz (and it can)."""
    from opscope.render.export import ExportRenderer

    gz = output.name.endswith(".gz")
    writer = ExportRenderer.named(to.value)(gzip=gz)
    writer.require()
    if gz and not writer.gzip_ok:
        raise UsageError(f"{output}: gzip output is for --to chrome; Perfetto files are written as protobuf")
    return writer
