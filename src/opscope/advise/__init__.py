"""Advice: rules that look at a trace's analyses and report ranked findings with estimated savings.

Each rule is a small module in :mod:`opscope.advise.rules` exposing ``RULE`` (a :class:`Rule`); the registry
below (:data:`RULES`) lists them, imported explicitly, in the order they run. :func:`advise` runs them on one
trace and ranks what they find.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from opscope.advise.context import AdviceContext, MeasuredFactor
from opscope.advise.finding import Finding, NotApplicable, Rule, ranked
from opscope.advise.rules import (
    communication,
    copies,
    dominant,
    input_pipeline,
    launch_bound,
    memory,
    roofline,
    sync,
    threads,
    utilization,
    warmup,
)
from opscope.advise.simulate import simulated
from opscope.errors import UsageError
from opscope.model.memo import Releases, kept_results, memoized
from opscope.model.trace import Trace
from opscope.threads import side_by_side, usable_cores

if TYPE_CHECKING:
    from opscope.analyses.job.view import JobView

#: The rules, in the order they run (and are listed by --explain). A new rule is one module and one line here.
RULES: tuple[Rule, ...] = (
    utilization.RULE,
    input_pipeline.RULE,
    dominant.RULE,
    roofline.RULE,
    launch_bound.RULE,
    sync.RULE,
    copies.RULE,
    communication.RULE,
    warmup.RULE,
    threads.RULE,
    memory.RULE,
)
_BY_ID = {r.id: r for r in RULES}
#: The order two threads take the rules in: the costliest first (measured on a 1 GB trace: the gpu-idle finding, which
#: builds the dependency graph first while the other thread's rules make the device work it reads next, then the
#: copies with their launches), so that neither thread is left with a long rule at the end; but
#: the memory rule before the copies: its records (let go once it has run: ``Rule.releases``) are then made while
#: the dependency graph is being built, not beside the graph's idle parts (1 GB trace: advise's peak anonymous
#: memory 557 against 576 MiB in runs of the same hour; BENCHMARKS.md, "Owned memory"). Results and errors still
#: come out in the rules' order.
_COSTLIEST_FIRST = ("gpu-idle", "memory", "memcpy", "dominant-op", "roofline", "communication", "launch-bound",
                    "host-sync")
if len(_BY_ID) != len(RULES):
    raise RuntimeError(f"two rules share an id: {[r.id for r in RULES]}")

__all__ = ["RULES", "Advice", "AdviceContext", "Finding", "MeasuredFactor", "NotApplicable", "Rule", "advise",
           "all_rules", "rule"]


def all_rules() -> list[Rule]:
    """Every rule, in the order they run."""
    return list(RULES)


def rule(rule_id: str) -> Rule:
    """The rule with this id; a usage error naming the rules when there is none."""
    found = _BY_ID.get(rule_id)
    if found is None:
        raise UsageError(f"no rule {rule_id!r}; rules are: {', '.join(r.id for r in RULES)}")
    return found


@dataclass
class Advice:
    """Ranked findings, and for every rule that could not run on this trace, why."""

    findings: list[Finding]
    not_applicable: dict[str, str] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    unit: str = "step"
    step_ns: int = 0
    steps: int = 1
    window: list[str] = field(default_factory=list)  #: which window the savings are of, and what it leaves out
    #: with other ranks' traces: which rank the findings concern ("rank 0"), and the others as "rank 1 (file)";
    #: without, both empty (one trace: nothing to tell apart)
    subject: str = ""
    compared: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        rows = [f.to_dict() for f in self.findings]
        if self.subject:  # several ranks given: every finding says whose it is
            rows = [{"concerns": self.subject, **r} for r in rows]
        return rows


def advise(trace: Trace, run: dict[str, Any] | None = None, peers: tuple[Trace, ...] = (),
           only: list[str] | None = None, measured: Mapping[str, MeasuredFactor] | None = None,
           context: AdviceContext | None = None, job: JobView | None = None) -> Advice:
    """Run every rule (or those named in ``only``) on ``trace``; findings ranked by estimated saving.
    ``measured``: speed-ups measured here that replace the dominant-op rule's assumed ones (advise --measure).

    On one cached trace (no other ranks, no measured factors, no context given) the advice is kept in the trace's
    cache entry: the next ``opscope advise`` with the same rules and run.json reads it."""
    if context is None and not peers and not measured and job is None and kept_results(trace) is not None:
        kept = _kept_advice(trace, only, json.dumps(run, sort_keys=True, default=repr), run)
        return Advice(**{**kept, "findings": [Finding(**f) for f in kept["findings"]]})
    return _advise(trace, run, only, peers, measured, context, job)


@memoized(keep=True, ignore=("run",))
def _kept_advice(trace: Trace, only: list[str] | None, run_json: str, run: dict[str, Any] | None) -> dict[str, Any]:
    """:func:`advise` as a JSON value, for the cache entry: ``run_json`` names ``run`` (which may hold values that
    have no canonical form)."""
    return _as_dict(_advise(trace, run, only))


def _as_dict(advice: Advice) -> dict[str, Any]:
    return {f.name: getattr(advice, f.name) if f.name != "findings" else [x.to_dict() for x in advice.findings]
            for f in fields(advice)}


def _advise(trace: Trace, run: dict[str, Any] | None, only: list[str] | None, peers: tuple[Trace, ...] = (),
            measured: Mapping[str, MeasuredFactor] | None = None, context: AdviceContext | None = None,
            job: JobView | None = None) -> Advice:
    # ``context``: one a caller already filled (the HTML report shares its analyses with the rules)
    ctx = context or AdviceContext(trace, run=run, peers=peers, measured=measured, job=job)
    rules = [rule(r) for r in only] if only else all_rules()
    findings: list[Finding] = []
    not_applicable: dict[str, str] = {}
    for r, (found, reason) in zip(rules, _checked(rules, ctx)):
        if reason is not None:
            not_applicable[r.id] = reason
        else:
            findings.extend(found)
    findings = referring_to_found(simulated(trace, findings, ctx, {r.id: r.not_simulated for r in rules}))
    subject, compared = "", []
    if peers:
        subject = _rank_label(trace, 0)
        compared = [f"{_rank_label(p, i)} ({_file_name(p)})" for i, p in enumerate(peers, start=1)]
    elif job is not None:
        subject = _rank_label(trace, 0)
        compared = [f"rank {r} ({_file_name_of(p)})" for r, p in zip(job.ranks["rank"].to_pylist(),
                                                                     job.ranks["file"].to_pylist())
                    if job.ranks.num_rows and r != trace.metadata.get("rank")]
    return Advice(ranked(findings), not_applicable, [r.id for r in rules], ctx.unit, ctx.step_ns, ctx.steps,
                  ctx.window_lines(), subject, compared)


#: How a remedy points to another finding: "(see the RULE finding)".
_REFERENCE = re.compile(r" \(see the ([\w-]+) finding\)")


def referring_to_found(findings: list[Finding]) -> list[Finding]:
    """The findings with every "(see the RULE finding)" in a remedy to a rule that found nothing (or did not run)
    taken out: a finding never points to one the reader cannot see."""
    found = {f.rule for f in findings}

    def kept(match: re.Match) -> str:
        return match.group(0) if match.group(1) in found else ""

    return [replace(f, remedy=_REFERENCE.sub(kept, f.remedy)) if _REFERENCE.search(f.remedy) else f
            for f in findings]


def _checked(rules: list[Rule], ctx: AdviceContext) -> list[tuple[list[Finding], str | None]]:
    """Each rule's findings, or the reason it does not apply, in the rules' order. Two threads take the rules in
    turn: most of a rule's work is Arrow and C that runs without the GIL, and the analyses rules share are computed
    once (Trace.memo and the context's properties wait for a computation under way); once every rule is taken, a
    thread left without one computes the analyses the rules name in ``prepare``, which the rules still running then
    read. A rule's error is raised as running them in order would: the first failing rule's."""
    outcomes: list[tuple[list[Finding], str | None] | BaseException | None] = [None] * len(rules)
    claim = threading.Lock()
    cost = {rule_id: i for i, rule_id in enumerate(_COSTLIEST_FIRST)}
    order = sorted(range(len(rules)), key=lambda i: cost.get(rules[i].id, len(cost)))
    taken = iter(order)

    # once every rule is taken, a worker left without one computes what the rules still running will read
    prepared = iter([(i, step) for i in order for step in rules[i].prepare])
    releases = Releases(ctx.trace, (r.releases for r in rules))

    def work() -> None:
        while True:
            with claim:
                i = next(taken, None)
            if i is None:
                return prepare()
            try:
                outcomes[i] = (rules[i].check(ctx), None)
            except NotApplicable as reason:
                outcomes[i] = ([], str(reason))
            except BaseException as exc:  # raised in the caller, in the rules' order
                outcomes[i] = exc
            releases.done(rules[i].releases)

    def prepare() -> None:
        while True:
            with claim:
                i, step = next(prepared, (None, None))
            if i is None or step is None:
                return
            if outcomes[i] is not None:  # the rule is done (or found it does not apply): nothing to compute for it
                continue
            with contextlib.suppress(Exception):  # the rule computes it again and says what went wrong
                step(ctx)

    if len(rules) > 1 and usable_cores() > 1:
        side_by_side(work, work, "opscope-advise")
    else:
        work()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [o for o in outcomes if isinstance(o, tuple)]


def _rank_label(trace: Trace, i: int) -> str:
    """"rank 3" from the trace's distributed info, else its place among the traces given ("trace 2")."""
    rank = trace.metadata.get("rank")
    return f"rank {rank}" if isinstance(rank, int) else f"trace {i + 1}"


def _file_name_of(source: str | None) -> str:
    return str(source or "?").replace("\\", "/").rsplit("/", 1)[-1]


def _file_name(trace: Trace) -> str:
    source = str(trace.metadata.get("source") or "?")
    return source.replace("\\", "/").rsplit("/", 1)[-1]
