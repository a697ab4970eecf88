"""Advice as a Report: one section per finding (evidence, estimate, change), the findings as the data document."""

from __future__ import annotations

import pyarrow as pa

from opscope.advise.finding import Finding, Rule
from opscope.report import Column, Report, Section
from opscope.units import format_ns

#: JSON has each finding's evidence rows, its program change and its re-run; a CSV line cannot hold them.
_NESTED = {"evidence": Column(show="json"), "evidence_title": Column(show="json"),
           "program_change": Column(show="json"), "measured": Column(show="json")}
#: Evidence fields for the JSON only: lists, and details the table's short text already says.
_EVIDENCE_JSON = {name: Column(show="json") for name in ("host_names", "thread", "frame", "host_op")}


def advice_report(advice, source: str, limit: int | None = None, evidence_rows: int | None = 8) -> Report:
    """Findings ranked by estimated saving (``advice``: an :class:`opscope.advise.Advice`)."""
    title = f"{source}: {len(advice.findings)} finding(s) from {len(advice.checked)} rules"
    if advice.subject:
        title = f"{source} ({advice.subject}): {len(advice.findings)} finding(s) from {len(advice.checked)} rules"
    if advice.unit == "step":
        title += f"; mean step {format_ns(advice.step_ns)} over {advice.steps} step(s)"
    sections = [Section("findings", records=advice.rows(), limit=limit or None, columns=_NESTED, terminal=False)]
    shown = advice.findings[: limit or None]
    prefix = f"{advice.subject}: " if advice.subject else ""
    sections += [_finding(rank, f, advice.unit, evidence_rows, prefix) for rank, f in enumerate(shown, 1)]
    notes = []
    if advice.subject:
        # several traces in, findings about one: say whose they are, and what the others were used for
        notes.append(f"the findings concern {advice.subject} ({source}) and its devices; the other traces "
                     f"({'; '.join(advice.compared)}) are compared only for stragglers and communication: "
                     "to see another rank's findings, give its trace first")
    notes += list(advice.window)
    if not advice.findings:
        notes.append("no rule found anything to improve in this trace")
    notes += [f"rule {rule_id} did not run: {reason}" for rule_id, reason in advice.not_applicable.items()]
    legend = "how each estimate is made: opscope advise --explain RULE"
    if limit and len(advice.findings) > limit:
        legend = f"... {len(advice.findings) - limit} more finding(s) (use --limit 0 for all)\n{legend}"
    return Report(sections, title=title, notes=notes, legend=legend)


def saving_text(f: Finding, unit: str) -> str:
    """A finding's saving in words, with how it was obtained (the terminal's and the HTML report's)."""
    if f.saving_ns is None:
        return "saving not estimated"
    per = "per step" if unit == "step" else "over the trace (no steps)"
    share = f"{f.saving_pct:.1f}% of the step; " if f.saving_pct is not None and unit == "step" else ""
    return f"saves ~{format_ns(f.saving_ns)} {per} ({share}{f.saving_method})"


def _finding(rank: int, f: Finding, unit: str, evidence_rows: int | None, prefix: str = "") -> Section:
    saving = saving_text(f, unit)
    return Section(f"finding_{rank}", f"{rank}. {prefix}{f.title}  {saving}  [{f.rule}]",
                   caption=f.evidence_title or None,
                   table=pa.Table.from_pylist(f.evidence) if f.evidence else None, limit=evidence_rows or None,
                   columns=_EVIDENCE_JSON,
                   fields=[("  estimate:", f.estimate), ("  try:", f.remedy)]
                   + ([("  re-run:", measured_text(f.measured))] if f.measured else []), data=False)


def measured_text(block: dict) -> str:
    """advise --measure's re-run of a finding in words: ``predicted X/step, re-run Y/step (p10-p90 A-B), within
    Z%``."""
    if block.get("failed"):
        return f"with {block.get('applied')}: not measured ({block['failed']})"
    parts = []
    if block.get("predicted_step_ns") is not None:
        parts.append(f"predicted {format_ns(block['predicted_step_ns'])}/step")
    parts.append(f"re-run {format_ns(block['step_ns'])}/step (p10-p90 {format_ns(block['p10_ns'])}-"
                 f"{format_ns(block['p90_ns'])}; {block['steps']} steps, {block['runs']} run(s) with "
                 f"{block['applied']})")
    if block.get("error_pct") is not None:
        parts.append(f"within {abs(block['error_pct']):.1f}%")
    if block.get("baseline_step_ns") is not None:
        parts.append(f"against {format_ns(block['baseline_step_ns'])}/step unrecorded in the recording")
    return ", ".join(parts)


def explain_report(rules: list[Rule]) -> Report:
    """How each rule decides and estimates (``opscope advise --explain``)."""
    return Report([Section(r.id, f"{r.id} — {r.title}", text=r.explain, data=False) for r in rules])
