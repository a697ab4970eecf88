"""Device time per op and per kernel class in two traces, matched so that runs on different vendors compare:
an op's kernels are named differently on an H100 and an MI300, the op that launched them is not.

Op rows: the device time (and count) of the device work charged to each op and its input shapes
(:func:`opscope.analyses.op_device.device_work`), per step, matched first by op and input shapes, then what is
left by op alone (the shapes that found no partner, summed per op); every row says how it was matched
(``matched_by``: ``op+shapes``, ``op`` or ``unmatched``). Class rows: the device time of each kernel class in
both traces (:mod:`opscope.analyses.kernel_classes`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import share_pct
from opscope.analyses.kernel_classes import CLASSES
from opscope.diff.normalize import Span
from opscope.diff.rows import per_step_calls, per_step_ns

#: How an op row was matched, in the order rows are matched.
MATCHED_BY = ("op+shapes", "op", "unmatched")
#: The op of device work whose launch has no op around it (one row, never matched).
NO_OP = "(no launching op)"

OP_ROW_FIELDS = ("op", "shapes", "class", "matched_by", "base_ns", "new_ns", "delta_ns", "calls_base", "calls_new")
CLASS_ROW_FIELDS = ("class", "base_ns", "new_ns", "delta_ns", "base_pct", "new_pct", "calls_base", "calls_new")


@dataclass
class Totals:
    """Device time and count of device events over the span, with the time per kernel class."""

    ns: int = 0
    calls: int = 0
    by_class: Counter = field(default_factory=Counter)

    def add(self, other: Totals) -> None:
        self.ns += other.ns
        self.calls += other.calls
        self.by_class.update(other.by_class)


OpTotals = dict[tuple[str | None, str], Totals]  # (op or None, shapes or "") -> totals


@dataclass(frozen=True)
class DeviceMatch:
    """The share (%) of each trace's device time in the compared span by how it was matched: ``op+shapes``,
    ``op``, ``unmatched`` (op rows); ``class`` (kernel classes other than ``other`` found in both traces) and
    ``other`` (the ``other`` class). None where the trace has no device time."""

    base: dict[str, float | None]
    new: dict[str, float | None]
    base_ns: int
    new_ns: int

    @property
    def any_device_work(self) -> bool:
        return bool(self.base_ns or self.new_ns)


def in_span(work: pa.Table, span: Span) -> pa.Table:
    """The device work launched in the span's steps (all of it for a whole-trace span)."""
    if span.steps is None:
        return work
    return work.filter(pc.fill_null(pc.is_in(work["step"], pa.array(span.steps, pa.int64())), False))


def op_totals(work: pa.Table) -> OpTotals:
    """Per (op, shapes): device time, count, time per class (``work`` as :func:`device_work` gives it)."""
    table = pa.table({"op": work["op"], "shapes": pc.fill_null(work["shapes"], ""), "class": work["class"],
                      "dur_ns": work["dur_ns"]})
    grouped = table.group_by(["op", "shapes", "class"], use_threads=False).aggregate([("dur_ns", "sum"),
                                                                                     ("dur_ns", "count")])
    out: OpTotals = {}
    for op, shapes, cls, ns, calls in zip(*(grouped[c].to_pylist() for c in ("op", "shapes", "class", "dur_ns_sum",
                                                                              "dur_ns_count"))):
        totals = out.setdefault((op, shapes), Totals())
        totals.add(Totals(ns, calls, Counter({cls: ns})))
    return out


def class_totals(work: pa.Table) -> dict[str, Totals]:
    grouped = work.group_by("class", use_threads=False).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    return {cls: Totals(ns, calls, Counter({cls: ns})) for cls, ns, calls in
            zip(grouped["class"].to_pylist(), grouped["dur_ns_sum"].to_pylist(), grouped["dur_ns_count"].to_pylist())}


class Match(NamedTuple):
    """One op row before it is put per step: its key, how it was matched, each trace's totals (None: absent)."""

    op: str
    shapes: str | None
    matched_by: str
    base: Totals | None
    new: Totals | None


def match_ops(base: OpTotals, new: OpTotals) -> list[Match]:
    """First every (op, shapes) found in both traces; then, per op, the shapes of it left in both traces, summed
    (shapes None); then what is left, unmatched, as each trace has it. Device work without an op is one
    unmatched row, :data:`NO_OP`."""
    both = sorted((op, shapes) for op, shapes in base.keys() & new.keys() if op is not None)
    rows = [Match(op, shapes or None, "op+shapes", base[(op, shapes)], new[(op, shapes)]) for op, shapes in both]
    rest_base, rest_new = _rest_by_op(base, set(both)), _rest_by_op(new, set(both))
    by_op = sorted(rest_base.keys() & rest_new.keys())
    rows += [Match(op, None, "op", _sum(base, rest_base[op]), _sum(new, rest_new[op])) for op in by_op]
    rows += [Match(op, shapes or None, "unmatched", base[(op, shapes)], None)
             for op in sorted(rest_base.keys() - set(by_op)) for _, shapes in rest_base[op]]
    rows += [Match(op, shapes or None, "unmatched", None, new[(op, shapes)])
             for op in sorted(rest_new.keys() - set(by_op)) for _, shapes in rest_new[op]]
    if (None, "") in base or (None, "") in new:
        rows.append(Match(NO_OP, None, "unmatched", base.get((None, "")), new.get((None, ""))))
    return rows


def _rest_by_op(totals: OpTotals, paired: set) -> dict[str, list[tuple[str, str]]]:
    """The keys not matched by op and shapes, per op (work without an op left out)."""
    rest: dict[str, list[tuple[str, str]]] = {}
    for op, shapes in totals:
        if op is not None and (op, shapes) not in paired:
            rest.setdefault(op, []).append((op, shapes))
    return {op: sorted(keys) for op, keys in rest.items()}


def _sum(totals: OpTotals, keys: list[tuple[str, str]]) -> Totals:
    out = Totals()
    for key in keys:
        out.add(totals[key])
    return out


@dataclass(frozen=True)
class DeviceComparison:
    """The op rows, the class rows and the shares of device time by how it was matched."""

    ops: pa.Table
    classes: pa.Table
    match: DeviceMatch


def compare_device(base_work: pa.Table, new_work: pa.Table, span_base: Span, span_new: Span) -> DeviceComparison:
    """Op rows and class rows of two traces' device work (each as :func:`device_work` gives it), over their
    spans, per step."""
    base, new = in_span(base_work, span_base), in_span(new_work, span_new)
    base_total, new_total = _total(base), _total(new)
    ops, op_ns = op_rows(op_totals(base), op_totals(new), span_base, span_new)
    classes, class_ns = class_rows(class_totals(base), class_totals(new), span_base, span_new)
    shares = {side: {how: share_pct(ns, total, 1) for how, ns in {**op_ns[side], **class_ns[side]}.items()}
              for side, total in (("base", base_total), ("new", new_total))}
    return DeviceComparison(ops, classes, DeviceMatch(shares["base"], shares["new"], base_total, new_total))


def op_rows(base: OpTotals, new: OpTotals, span_base: Span, span_new: Span) -> tuple[pa.Table,
                                                                                      dict[str, dict[str, int]]]:
    """The op rows (per step, sorted by absolute change) and each trace's device time by ``matched_by``."""
    rows: list[dict[str, Any]] = []
    matched_ns = {side: dict.fromkeys(MATCHED_BY, 0) for side in ("base", "new")}
    for op, shapes, how, b, n in match_ops(base, new):
        base_ns = per_step_ns(b.ns, span_base) if b else 0
        new_ns = per_step_ns(n.ns, span_new) if n else 0
        classes = (b.by_class if b else Counter()) + (n.by_class if n else Counter())
        rows.append({"op": op, "shapes": shapes, "class": _dominant(classes), "matched_by": how,
                     "base_ns": base_ns, "new_ns": new_ns, "delta_ns": new_ns - base_ns,
                     "calls_base": per_step_calls(b.calls, span_base) if b else 0,
                     "calls_new": per_step_calls(n.calls, span_new) if n else 0})
        matched_ns["base"][how] += b.ns if b else 0
        matched_ns["new"][how] += n.ns if n else 0
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), r["op"], r["shapes"] or ""))
    return pa.Table.from_pylist(rows, schema=_schema(OP_ROW_FIELDS, span_base)), matched_ns


def class_rows(base: dict[str, Totals], new: dict[str, Totals], span_base: Span, span_new: Span) -> tuple[
        pa.Table, dict[str, dict[str, int]]]:
    """One row per class found in either trace, in :data:`CLASSES` order: per-step device time in both, the
    change, each class's share of its trace's device time, device events per step. Also each trace's device time
    in the classes both traces have (``class``; ``other`` is not a match) and in ``other``."""
    base_total = sum(t.ns for t in base.values())
    new_total = sum(t.ns for t in new.values())
    rows = []
    for cls in CLASSES:
        b, n = base.get(cls), new.get(cls)
        if b is None and n is None:
            continue
        base_ns = per_step_ns(b.ns, span_base) if b else 0
        new_ns = per_step_ns(n.ns, span_new) if n else 0
        rows.append({"class": cls, "base_ns": base_ns, "new_ns": new_ns, "delta_ns": new_ns - base_ns,
                     "base_pct": share_pct(b.ns if b else 0, base_total),
                     "new_pct": share_pct(n.ns if n else 0, new_total),
                     "calls_base": per_step_calls(b.calls, span_base) if b else 0,
                     "calls_new": per_step_calls(n.calls, span_new) if n else 0})
    shared = (base.keys() & new.keys()) - {"other"}
    matched_ns = {side: {"class": sum(totals[c].ns for c in shared),
                         "other": totals["other"].ns if "other" in totals else 0}
                  for side, totals in (("base", base), ("new", new))}
    return pa.Table.from_pylist(rows, schema=_schema(CLASS_ROW_FIELDS, span_base)), matched_ns


_TYPES = {"op": pa.string(), "shapes": pa.string(), "class": pa.string(), "matched_by": pa.string(),
          "base_ns": pa.int64(), "new_ns": pa.int64(), "delta_ns": pa.int64(), "base_pct": pa.float64(),
          "new_pct": pa.float64()}


def _schema(fields: tuple[str, ...], span: Span) -> pa.Schema:
    calls = pa.float64() if span.per_step else pa.int64()  # per step: a mean, whole trace: a count
    return pa.schema([(f, _TYPES.get(f, calls)) for f in fields])


def _dominant(by_class: Counter) -> str | None:
    """The class holding most of a row's device time (ties: the first in :data:`CLASSES` order)."""
    if not by_class:
        return None
    return max(CLASSES, key=lambda c: (by_class.get(c, 0), -CLASSES.index(c)))


def _total(work: pa.Table) -> int:
    return (pc.sum(work["dur_ns"]).as_py() or 0) if work.num_rows else 0


# --- what the figures mean, in words ---------------------------------------------------------------------------

def matched_text(shares: dict[str, float | None], keys: tuple[str, ...] = MATCHED_BY) -> str:
    """``"op+shapes 71.0%, op 18.0%, unmatched 11.0%"``: the shares of one trace's device time."""
    return ", ".join(f"{key} {pct_text(shares.get(key))}" for key in keys)


def matched_sentence(match: DeviceMatch) -> str:
    """The headline's part: how much of each trace's device time found its op in the other trace."""
    def matched(shares: dict[str, float | None]) -> str:
        unmatched = shares.get("unmatched")
        return pct_text(None if unmatched is None else 100.0 - unmatched)

    return (f"device time matched by op (and input shapes): {matched(match.base)} of base, {matched(match.new)} of "
            f"new")


def pct_text(value: float | None) -> str:
    """A share with one decimal (``71.0%``); ``-`` without one."""
    return "-" if value is None else f"{value:.1f}%"
