"""The sections of one trace's report, each from the report function its command uses (``summary``, ``steps``,
``gpu``, ``ops``, ``kernels``, ``memory``, ``advise``), so the page shows the same numbers the CLI prints.

A section with nothing to show (no steps, no device work, no memory records) says why in one line instead of
drawing an empty chart. Each section is one module with one function ``AdviceContext -> PageSection``, listed in
:data:`SECTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opscope.compose.page.advice import advice
from opscope.compose.page.gpu import gpu
from opscope.compose.page.memory import memory
from opscope.compose.page.ops import ops_and_kernels
from opscope.compose.page.overview import overview
from opscope.render.html.page import PageSection

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext
    from opscope.model.trace import Trace


@dataclass(frozen=True)
class SectionSpec:
    """One section of the page: its id (what the progress line says), the function that builds it, and whether
    it reads the GPU analysis (it waits for the analysis the context computes once)."""

    id: str
    build: Callable[[AdviceContext], PageSection]
    needs_gpu: bool


#: The sections in reading order.
SECTIONS = (
    SectionSpec("overview", overview, needs_gpu=True),
    SectionSpec("gpu", gpu, needs_gpu=True),
    SectionSpec("ops", ops_and_kernels, needs_gpu=False),
    SectionSpec("memory", memory, needs_gpu=False),
    SectionSpec("advice", advice, needs_gpu=True),
)
#: The order they start in: the longest first, so that the two threads finish together.
LONGEST_FIRST = ("ops", "advice", "memory", "overview", "gpu")


def trace_sections(trace: Trace, run: dict | None = None, progress: Callable[[str], None] | None = None,
                   ) -> list[PageSection]:
    """Every section of one trace's report, in reading order."""
    from opscope.advise.context import AdviceContext

    # One context for every section: the GPU analysis, step table and the like are computed once and the advice
    # rules reuse them. The sections are built two at a time, the longest first (Arrow's kernels and cache reads
    # release the GIL, so two threads keep two cores busy); those that need the GPU analysis wait for it, the ops
    # and memory sections start at once.
    ctx = AdviceContext(trace, run=run)
    specs = {s.id: s for s in SECTIONS}

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="opscope-report") as pool:
        gpu_ready = pool.submit(lambda: ctx.gpu)

        def build(spec: SectionSpec) -> PageSection:
            if spec.needs_gpu:
                gpu_ready.result()
            if progress is not None:
                progress(spec.id)
            return spec.build(ctx)

        futures = {name: pool.submit(build, specs[name]) for name in LONGEST_FIRST}
        return [futures[s.id].result() for s in SECTIONS]  # reading order
