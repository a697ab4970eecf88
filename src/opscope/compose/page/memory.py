"""The report's Memory section: allocated and reserved memory over time with the peak marked, ``opscope memory``'s
peaks and what held the memory at each peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.compose.page import charts
from opscope.compose.page.blocks import TABLE_ROWS, table_block
from opscope.render.html.page import Block, ChartBlock, PageSection, ProseBlock

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext


def memory(ctx: AdviceContext) -> PageSection:
    trace = ctx.trace
    from opscope.analyses import memory as mem

    rec = mem.memory_records(trace)
    if rec.table.num_rows == 0:
        return PageSection("memory", "Memory", [ProseBlock("no_memory", f"No memory section: {mem.NO_RECORDS}",
                                                           tone="empty")], intro="opscope memory")
    peaks = mem.peak_table(rec)
    points = mem.timeline_table(rec, 200)
    blocks: list[Block | None] = [
        ChartBlock("memory_timeline", "Allocated and reserved memory over time",
                   charts.memory_over_time(points.to_pylist(), peaks.to_pylist()),
                   caption="each device's allocated (solid) and reserved (dashed) bytes, the maximum in each of "
                           "200 equal buckets of the trace; the triangle marks the allocated peak",
                   notes=list(rec.notes())),
        table_block("memory_peaks", "Peak memory per device (times after the trace start)", peaks),
    ]
    holders = mem.holders_table(rec, "bytes")
    if holders.num_rows:
        blocks.append(table_block("memory_holders", "Held at each device's peak, by the op that allocated it",
                                  holders, limit=TABLE_ROWS, searchable=True))
    return PageSection("memory", "Memory", [b for b in blocks if b is not None], intro="opscope memory")
