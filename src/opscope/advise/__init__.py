"""Advice: rules that look at a trace's analyses and report ranked findings with estimated savings.

Each rule is a small module in :mod:`opscope.advise.rules` exposing ``RULE`` (a :class:`Rule`); the registry
below lists them in the order they run. :func:`advise` runs them on one trace and ranks what they find.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule, ranked
from opscope.errors import UsageError
from opscope.model.trace import Trace

#: Rule modules under opscope.advise.rules, in the order they run (and are listed by --explain).
RULE_MODULES = (
    "utilization",
    "input_pipeline",
    "dominant",
    "launch_bound",
    "sync",
    "copies",
    "communication",
    "warmup",
    "threads",
    "memory",
)

__all__ = ["Advice", "AdviceContext", "Finding", "NotApplicable", "Rule", "advise", "all_rules", "rule"]


def all_rules() -> list[Rule]:
    rules = []
    for name in RULE_MODULES:
        try:
            module = importlib.import_module(f"opscope.advise.rules.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"opscope.advise.rules.{name}":
                raise
            continue  # a rule not written yet
        rules.append(module.RULE)
    return rules


def rule(rule_id: str) -> Rule:
    rules = all_rules()
    for r in rules:
        if r.id == rule_id:
            return r
    raise UsageError(f"no rule {rule_id!r}; rules are: {', '.join(r.id for r in rules)}")


@dataclass
class Advice:
    """Ranked findings, and for every rule that could not run on this trace, why."""

    findings: list[Finding]
    not_applicable: dict[str, str] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    unit: str = "step"
    step_ns: int = 0
    steps: int = 1

    def rows(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.findings]


def advise(trace: Trace, run: dict[str, Any] | None = None, peers: tuple[Trace, ...] = (),
           only: list[str] | None = None) -> Advice:
    """Run every rule (or those named in ``only``) on ``trace``; findings ranked by estimated saving."""
    ctx = AdviceContext(trace, run=run, peers=peers)
    rules = [rule(r) for r in only] if only else all_rules()
    findings: list[Finding] = []
    not_applicable: dict[str, str] = {}
    for r in rules:
        try:
            findings.extend(r.check(ctx))
        except NotApplicable as reason:
            not_applicable[r.id] = str(reason)
    return Advice(ranked(findings), not_applicable, [r.id for r in rules], ctx.unit, ctx.step_ns, ctx.steps)
