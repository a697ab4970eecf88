"""The sections of one trace's report, each from the report function its command uses (``summary``, ``steps``,
``gpu``, ``ops``, ``kernels``, ``roofline``, ``memory``, ``advise``), so the page shows the same numbers the CLI prints.

A section with nothing to show (no steps, no device work, no memory records) says why in one line instead of
drawing an empty chart. Each section is one module with one function ``AdviceContext -> PageSection``, listed in
:data:`SECTIONS` (the roofline's also takes the ``--peaks FILE`` given to the report).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from opscope.analyses.depgraph import CAUSAL_MODULES
from opscope.compose.page.advice import advice
from opscope.compose.page.gpu import gpu
from opscope.compose.page.memory import memory
from opscope.compose.page.ops import ops_and_kernels
from opscope.compose.page.overview import overview
from opscope.compose.page.roofline import roofline
from opscope.compose.page.timeline import chosen_steps, timeline
from opscope.model.memo import Releases
from opscope.render.html.page import PageSection
from opscope.runtime import stage_done, working

if TYPE_CHECKING:
    from opscope.model.trace import Trace


@dataclass(frozen=True)
class SectionSpec:
    """One section of the page: its id (what the progress line says), the function that builds it, and the modules
    whose analyses it reads (let go once every section naming them is built: :class:`~opscope.model.memo.Releases`)."""

    id: str
    build: Callable[..., PageSection]  # (AdviceContext, **the page's options it takes) -> PageSection
    reads: tuple[str, ...] = ()


_GPU = ("opscope.analyses.gpu", "opscope.analyses.idle", "opscope.advise.context")
_LINKS = ("opscope.analyses.links",)

#: The sections in reading order.
SECTIONS = (
    SectionSpec("overview", overview, (*CAUSAL_MODULES, *_GPU)),  # its critical path: the graph, on shorter traces
    SectionSpec("timeline", timeline, _LINKS),
    SectionSpec("gpu", gpu, _GPU),
    SectionSpec("ops", ops_and_kernels, (*_LINKS, "opscope.analyses.ops", "opscope.analyses.kernels",
                                         "opscope.analyses.kernel_launch")),
    SectionSpec("roofline", roofline, (*_LINKS, "opscope.analyses.roofline")),
    SectionSpec("memory", memory, ("opscope.analyses.memory",)),
    SectionSpec("advice", advice, (*CAUSAL_MODULES, *_GPU)),
)


#: The order the sections are built in: the advice first, whose rules need the most while they run, with nothing
#: else held (the charts' libraries not yet imported); then the sections that read what it leaves behind (the
#: overview its dependency graph, where the trace is short enough for the critical path; the GPU section its GPU
#: analysis), which then goes; then the ops and kernels, which need the most after the advice (BENCHMARKS.md,
#: "Owned memory"); the timeline holds only a few steps' events.
BUILD_ORDER = ("advice", "overview", "gpu", "ops", "roofline", "memory", "timeline")


def trace_sections(trace: Trace, run: dict | None = None, progress: Callable[[str], None] | None = None,
                   peaks: Path | None = None, timeline_steps: Sequence[int] | None = None) -> list[PageSection]:
    """Every section of one trace's report, in reading order; ``peaks``: a peaks file for the roofline (as
    ``opscope roofline --peaks FILE``), else the table's peaks for the device the trace names;
    ``timeline_steps``: the steps the timeline draws (checked before any section is built), else the median and
    the slowest step.

    One context for every section: the GPU analysis, step table and the like are computed once and the advice
    rules reuse them. The sections are built one after the other, in :data:`BUILD_ORDER`: on two threads a 1 GB
    trace's report took the same time and more memory, each thread holding its analysis' working columns at once."""
    from opscope.advise.context import AdviceContext

    if timeline_steps is not None:
        chosen_steps(trace, timeline_steps)  # a step the trace does not have is said before minutes of analysis
    ctx = AdviceContext(trace, run=run)
    specs = {s.id: s for s in SECTIONS}
    options: dict[str, dict] = {"roofline": {"peaks": peaks}, "timeline": {"steps": timeline_steps}}
    built = {}
    releases = Releases(trace, (specs[name].reads for name in BUILD_ORDER))
    for name in BUILD_ORDER:
        if progress is not None:
            progress(name)
        with working():  # the section's own work (not only the analyses it asks the memo for) trimmed by growth
            built[name] = specs[name].build(ctx, **options.get(name, {}))
        releases.done(specs[name].reads)
        stage_done()  # the section's working columns back before the next one allocates its own (tuned)
    return [built[s.id] for s in SECTIONS]
