"""Advice for the terminal: one block per finding, largest estimated saving first."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console
from rich.markup import escape

from opscope.advise import Advice
from opscope.render.terminal import print_table
from opscope.units import format_ns


def print_advice(console: Console, advice: Advice, source: str, limit: int | None = None,
                 evidence_rows: int = 8) -> None:
    per = "per step" if advice.unit == "step" else "over the trace (no steps)"
    head = f"[bold]{escape(source)}[/bold]: {len(advice.findings)} finding(s) from {len(advice.checked)} rules"
    if advice.unit == "step":
        head += f"; mean step {format_ns(advice.step_ns)} over {advice.steps} step(s)"
    console.print(head, highlight=False)
    shown = advice.findings[:limit] if limit else advice.findings
    for rank, f in enumerate(shown, 1):
        console.print()
        saving = ("saving not estimated" if f.saving_ns is None else
                  f"saves ~{format_ns(f.saving_ns)} {per}"
                  + (f" ({f.saving_pct:.1f}% of the step)" if f.saving_pct is not None and advice.unit == "step"
                     else ""))
        console.print(f"[bold]{rank}. {escape(f.title)}[/bold]  [cyan]{escape(saving)}[/cyan]  "
                      f"[dim]\\[{escape(f.rule)}][/dim]", highlight=False)
        if f.evidence:
            print_table(console, pa.Table.from_pylist(f.evidence), f.evidence_title or None,
                        evidence_rows if evidence_rows else None)
        console.print(f"  [bold]estimate:[/bold] {escape(f.estimate)}", highlight=False)
        console.print(f"  [bold]try:[/bold] {escape(f.change)}", highlight=False)
    if limit and len(advice.findings) > limit:
        console.print(f"\n[dim]... {len(advice.findings) - limit} more finding(s) (use --limit 0 for all)[/dim]")
    if not advice.findings:
        console.print("no rule found anything to improve in this trace", highlight=False)
    if advice.not_applicable:
        console.print()
        console.print("[dim]rules that could not run on this trace:[/dim]")
        for rule_id, reason in advice.not_applicable.items():
            console.print(f"[dim]  {escape(rule_id)}: {escape(reason)}[/dim]", highlight=False)
    console.print("[dim]how each estimate is made: opscope advise --explain RULE[/dim]")
