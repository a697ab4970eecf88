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
    else:
        blocks.append(ProseBlock("no_kernels", "No kernel table: no device kernels in this trace (a CPU-only "
                                               "profile).", tone="empty"))
    return PageSection("ops", "Ops and kernels", [b for b in blocks if b is not None],
                       intro="opscope ops --by name,shapes and opscope kernels")
