"""The report's Ops and kernels section: the module -> op -> kernel icicle, ``opscope ops --by name,shapes`` and
``opscope kernels``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.analyses.filters import EventFilter
from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS, section_table
from opscope.render.html.page import Block, ChartBlock, PageSection, ProseBlock
from opscope.units import format_ns

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext


def ops_and_kernels(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses.hierarchy import time_hierarchy
    from opscope.analyses.reports import kernels_report, ops_report

    blocks: list[Block | None] = []
    tree = time_hierarchy(trace)
    if tree.total_ns:
        blocks.append(ChartBlock("hierarchy", "Where the time goes: module → op → kernel",
                                 charts.icicle(tree.table.to_pylist(), tree.measure),
                                 caption=f"{tree.measure}; width is the share of "
                                         f"{format_ns(tree.total_ns)}; entries under 0.1% are folded into "
                                         "'(smaller entries)'; hover for names and times"))
    ops = ops_report(trace, ["name", "shapes"], EventFilter(kinds=("cpu_op",)), "self_ns", "cpu_op", TABLE_ROWS)
    blocks.append(section_table(ops.sections[0], "ops", "Operators by self time (per input shapes)",
                                searchable=True))
    kernels = kernels_report(trace, EventFilter(kinds=("kernel", "memcpy", "memset", "comm")), False, "total_ns",
                             "short", TABLE_ROWS)
    table = kernels.sections[0].arrow
    if table is not None and table.num_rows:
        blocks.append(section_table(kernels.sections[0], "kernels", "Device kernels, copies and memsets",
                                    searchable=True))
        blocks.append(_launch_details(trace))
    else:
        blocks.append(ProseBlock("no_kernels", "No kernel table: no device kernels in this trace (a CPU-only "
                                               "profile).", tone="empty"))
    return PageSection("ops", "Ops and kernels", [b for b in blocks if b is not None],
                       intro="opscope ops --by name,shapes, opscope kernels and opscope kernels --details")


def _launch_details(trace) -> Block | None:
    """``opscope kernels --details`` (the launch fields the profiler recorded per kernel and grid/block), when the
    trace records any."""
    from opscope.analyses.kernel_launch import recorded
    from opscope.analyses.reports import kernel_launch_report

    report = kernel_launch_report(trace, EventFilter(kinds=("kernel", "comm")), "total_ns", "short", TABLE_ROWS)
    table = report.sections[0].arrow
    if table is None or not recorded(table)[0]:
        return None
    return section_table(report.sections[0], "kernel_launch", "Kernel launch details (per grid and block)",
                         searchable=True)
