"""Savings simulated on the trace's dependency graph: a finding whose remedy maps to an ``opscope whatif`` change
gets the saving the replay predicts, per step, in place of its rule's arithmetic.

The replay knows what the rule's arithmetic does not: whether the work the remedy removes or shortens is on the
step's critical path. Time the host would no longer wait while the device is still busy saves nothing; work off the
path saves nothing. The finding keeps the rule's reasoning in its ``estimate`` and says the simulated figure first,
with the command that reproduces it.
"""

from __future__ import annotations

from dataclasses import replace

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.model.trace import Trace
from opscope.units import format_ns


def simulated(trace: Trace, findings: list[Finding], ctx: AdviceContext,
              not_simulated: dict[str, str]) -> list[Finding]:
    """The findings, those with a ``change`` given the saving its replay predicts (per step of the window), the
    others' estimates saying why they are not simulated (``not_simulated``: per rule id, why)."""
    out = []
    for finding in findings:
        if finding.change:
            out.append(_simulated(trace, finding, ctx))
        elif finding.saving_ns is not None and finding.saving_method == "estimated":
            why = not_simulated.get(finding.rule) or "no change the replay can make stands for its remedy"
            out.append(replace(finding, estimate=f"{finding.estimate} (estimated, not simulated: {why})",
                               estimated_ns=finding.saving_ns))
        else:
            out.append(replace(finding, estimated_ns=finding.saving_ns))
    return out


def simulated_saving(trace: Trace, change: str) -> int | None:
    """The mean saving per step of ``change`` (``SELECTOR=FACTOR``, several joined by spaces) on the trace's
    replay: replayed less predicted, over the steps (the trace as one interval without steps); None when the trace
    has nothing to replay."""
    table, _ = whatif_table(trace, [parse_change(part) for part in change.split()])
    if not table.num_rows:
        return None
    gained = [r - p for r, p in zip(table["replayed_ns"].to_pylist(), table["predicted_ns"].to_pylist())]
    return round(sum(gained) / len(gained))


def _simulated(trace: Trace, finding: Finding, ctx: AdviceContext) -> Finding:
    assert finding.change is not None
    saving = simulated_saving(trace, finding.change)
    if saving is None:
        return replace(finding, change=None, estimate=f"{finding.estimate} (not simulated: nothing to replay)",
                       estimated_ns=finding.saving_ns)
    saving = max(saving, 0)
    said = (f"simulated: the trace's dependency graph replayed with {finding.change} saves {format_ns(saving)} per "
            f"{ctx.unit} (opscope whatif TRACE --change {' --change '.join(finding.change.split())}); the rule's "
            f"own arithmetic: {finding.estimate}")
    return replace(finding, saving_ns=saving, saving_pct=ctx.pct(saving), estimate=said, saving_method="simulated",
                   estimated_ns=finding.saving_ns)
