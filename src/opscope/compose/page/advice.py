"""The report's Advice section: ``opscope advise``'s findings, each with its saving, estimate, change and
evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opscope.compose.page.blocks import records_table
from opscope.render.html.page import Block, FindingBlock, PageSection, ProseBlock

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext


def advice(ctx: AdviceContext) -> PageSection:
    from opscope.advise import advise
    from opscope.advise.report import advice_report, saving_text

    found = advise(ctx.trace, run=ctx.run, peers=ctx.peers, context=ctx)
    report = advice_report(found, "trace", None)  # for its notes (the window, rules that did not run)
    blocks: list[Block] = [ProseBlock(f"advice_note_{i}", line) for i, line in enumerate(report.notes)]
    for rank, f in enumerate(found.findings, 1):
        saving = saving_text(f, found.unit)
        blocks.append(FindingBlock(f"finding_{rank}", f"{rank}. {f.title}", saving, f.rule, f.estimate, f.remedy,
                                   records_table(f"finding_{rank}_evidence", f.evidence_title or "evidence",
                                                 f.evidence, limit=12)))
    if not found.findings:
        blocks.append(ProseBlock("no_findings", "No findings: no rule found anything to improve in this trace.",
                                 tone="empty"))
    return PageSection("advice", "Advice", blocks, intro="opscope advise: findings ranked by estimated saving")
