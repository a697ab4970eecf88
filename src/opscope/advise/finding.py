"""What a rule reports: a Finding, and the Rule that produces findings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext


@dataclass
class Finding:
    """One problem found in a trace, with the numbers behind it.

    ``saving_ns`` is the time saved *per step* (per trace window when the trace has no steps) if ``remedy`` is
    applied, ``saving_pct`` the same as a share of the window's time per step (the mean step where the steps tile
    the window); both are None when the rule cannot put a number on
    it (the finding then ranks after every one that has one). ``saving_method`` says how the figure was obtained:
    ``simulated`` (the trace's dependency graph replayed with ``change``, a ``opscope whatif`` change that gives the
    same saving), ``measured`` (a re-run with the remedy, advise --measure) or ``estimated`` (from the rule's own
    arithmetic; ``estimate`` says why it could not be simulated). ``estimate`` says how the figure was reached, with
    its inputs, so a reader can check it. ``evidence`` holds rows from the analyses (plain dicts of JSON-able
    values; times in ns, with the step and time of each row where it has one).
    """

    rule: str
    title: str
    saving_ns: int | None
    saving_pct: float | None
    estimate: str
    remedy: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    evidence_title: str = ""
    #: the ``opscope whatif --change`` that simulates the remedy (None: not simulated)
    change: str | None = None
    saving_method: str = "estimated"
    #: the rule's own arithmetic per step (``estimate`` says it), kept beside a simulated ``saving_ns``
    estimated_ns: int | None = None
    #: the remedy as settings opscope's runner can apply to the program without editing it, for advise --measure's
    #: re-run (keys of :class:`opscope.capture.changes.ProgramChanges`: num_workers, persistent_workers, pin_memory,
    #: intra_op_threads, skip_sync_in); None: the remedy needs the user's code changed
    program_change: dict[str, Any] | None = None
    #: advise --measure's re-run of the program with ``program_change`` (:mod:`opscope.capture.rerun` lists the
    #: fields): the measured step time beside the predicted one; None when not re-run
    measured: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """Raised by a rule whose inputs the trace does not have (the reason is shown to the user)."""


@dataclass(frozen=True)
class Rule:
    """A detector: ``check`` looks at the analyses of a trace and returns findings (or raises NotApplicable).

    ``explain`` is the text of ``opscope advise --explain ID``: what triggers the rule, how the saving is
    estimated and what the estimate leaves out.
    """

    id: str
    title: str
    explain: str
    check: Callable[[AdviceContext], list[Finding]]
    #: why the rule's savings are its own arithmetic, not simulated on the dependency graph ("": they are, where
    #: its findings give a ``change``)
    not_simulated: str = ""
    #: analyses the rule reads that wait for nothing else the rule computes (each memoized, so the rule then reads
    #: its value): a worker with no rule left to run computes them while the rule still runs (advise._checked)
    prepare: tuple[Callable[[AdviceContext], object], ...] = ()
    #: modules whose analyses the rule reads: their values are let go once every rule naming the module has run, so
    #: that the rules still running do not peak on top of them (advise._checked; asked for again, they are computed
    #: again: a rule that reads them and is not named costs time, never a wrong value)
    releases: tuple[str, ...] = ()


def ranked(findings: list[Finding]) -> list[Finding]:
    """Largest estimated saving first; findings without an estimate last (in rule order)."""
    return sorted(findings, key=lambda f: (f.saving_ns is None, -(f.saving_ns or 0)))
