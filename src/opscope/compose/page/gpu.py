"""The report's GPU section: ``opscope gpu``'s breakdown per device and stream, idle causes and launches, with
their charts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.compose.page import charts
from opscope.compose.page.blocks import part, section_table
from opscope.render.html.page import Block, ChartBlock, PageSection, ProseBlock

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext

#: opscope gpu's default --short-gap-us, in ns
SHORT_GAP_NS = 10_000


def gpu(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses.reports import gpu_report

    report = gpu_report(trace, SHORT_GAP_NS, None, None, analysis=ctx.gpu)
    if report.empty is not None:
        return PageSection("gpu", "GPU", [ProseBlock("no_gpu", f"No GPU section: {report.empty}", tone="empty")],
                           intro="opscope gpu")
    breakdown, idle, launches = (part(report, k) for k in ("breakdown", "idle", "launches"))
    blocks: list[Block | None] = []
    if breakdown is not None and breakdown.arrow is not None:
        rows = breakdown.arrow.to_pylist()
        blocks.append(ChartBlock("gpu_parts", "Device time per device and stream", charts.device_parts(rows),
                                 caption="compute, memcpy, memset, communication and idle time in the window "
                                         "(the steps' span; the whole trace when it has no steps); a device's "
                                         "'all streams' bar is the union over its streams"))
        blocks.append(section_table(breakdown, "gpu_breakdown", "GPU time per device and stream"))
    if idle is not None and idle.arrow is not None:
        blocks.append(ChartBlock("gpu_idle", "Why the device idles", charts.idle_causes(idle.arrow.to_pylist()),
                                 caption="each device's idle time in the window, by cause (every idle ns has one "
                                         "cause); shares are of the device's idle time"))
        blocks.append(section_table(idle, "gpu_idle_causes", "Idle time by cause, per device"))
    if launches is not None and launches.arrow is not None:
        blocks.append(section_table(launches, "gpu_launches", "Concurrency and launches, per device"))
    return PageSection("gpu", "GPU", [b for b in blocks if b is not None], intro="opscope gpu")
