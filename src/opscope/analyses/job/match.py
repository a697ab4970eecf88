"""Collective calls of every rank matched into instances: one collective call that all its member ranks made.

A call's key is (process group, its ranks, step, position within that group and step on its rank): NCCL makes every
member of a group call its collectives in the same order, so the n-th call of a group in a step is the same instance
on every member. Steps line up ranks whose profiling windows differ. Calls without a process group (traces without
collective args) are keyed by (collective, step, position) instead: that is an inference (``matched_by`` "order").

An instance whose ranks disagree on the collective, or on its size (but for all-to-all matched by group, whose
per-rank sizes may differ: uneven splits), is left out and named in a note, never mixed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from opscope.analyses.collectives import MATCHED_BY_ORDER, expand_ranks

LONG = pa.schema([
    ("instance", pa.int64()),
    ("rank", pa.int64()),
    ("pg", pa.string()),
    ("pg_ranks", pa.string()),
    ("collective", pa.string()),
    ("algorithm", pa.string()),
    ("protocol", pa.string()),
    ("dtype", pa.string()),
    ("bytes", pa.int64()),
    ("group_size", pa.int64()),
    ("step", pa.int64()),
    ("seq", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("device", pa.int64()),
    ("matched_by", pa.string()),
])

_CARRIED = [f.name for f in LONG if f.name not in ("instance", "rank")]


@dataclass
class Matched:
    """``long``: one row per (instance, rank) in the :data:`LONG` schema, instances numbered 0.. in (step, group,
    position) order; ``notes``: what was inferred, incomplete or left out."""
    long: pa.Table
    notes: list[str] = field(default_factory=list)


def match_instances(calls: Mapping[int, pa.Table]) -> Matched:
    """Match each rank's collective calls (rank -> its ``COLLECTIVE_CALLS`` table) into instances."""
    all_ranks = sorted(int(r) for r in calls)
    # each rank's columns as lists, and per key {rank: row index}: no Python object per call beyond its values
    columns: dict[int, dict[str, list]] = {}
    groups: dict[tuple, dict[int, int]] = {}
    duplicates = 0
    for rank in all_ranks:
        table = calls[rank]
        if table.num_rows == 0:
            continue
        cols = columns[rank] = {name: table[name].to_pylist() for name in _CARRIED}
        for i, key in enumerate(zip(cols["matched_by"], cols["pg"], cols["pg_ranks"], cols["collective"],
                                    cols["step"], cols["seq"])):
            at = groups.setdefault(_key(*key), {})
            if rank in at:
                duplicates += 1
                continue
            at[rank] = i
    notes: list[str] = []
    out: dict[str, list] = {f.name: [] for f in LONG}
    flagged: list[tuple] = []
    incomplete = strangers = by_order = 0
    expected_of: dict[str, frozenset[int]] = {}
    instance = 0
    for key in sorted(groups, key=_sort_key):
        members = {rank: _Row(columns[rank], i) for rank, i in groups[key].items()}
        problem = _disagreement(members)
        if problem:
            flagged.append((key, problem))
            continue
        first = next(iter(members.values()))
        if first["pg_ranks"] not in expected_of:
            expected_of[first["pg_ranks"]] = frozenset(_expected(first["pg_ranks"], all_ranks))
        expected = expected_of[first["pg_ranks"]]
        if not expected <= members.keys():
            incomplete += 1
        if members.keys() - expected:
            strangers += 1
        if first["matched_by"] == MATCHED_BY_ORDER:
            by_order += 1
        for rank in sorted(members):
            row = members[rank]
            out["instance"].append(instance)
            out["rank"].append(rank)
            for name in _CARRIED:
                out[name].append(row[name])
        instance += 1
    if by_order:
        notes.append(f"{by_order} collective instance(s) matched across ranks by order (collective, step, position) "
                     "because their calls record no process group: an inference")
    if incomplete:
        notes.append(f"{incomplete} collective instance(s) lack some of their member ranks (a rank's profiling "
                     "window or file may not cover them); kept with the ranks that have them")
    if strangers:
        notes.append(f"{strangers} collective instance(s) include a rank outside the process group's recorded ranks "
                     "(rank numbering may not match the traces)")
    if duplicates:
        notes.append(f"{duplicates} collective call(s) repeat another call's key on the same rank; the later ones "
                     "are left out")
    if flagged:
        key, problem = flagged[0]
        notes.append(f"{len(flagged)} collective instance(s) whose ranks disagree on the collective or its size are "
                     f"left out; the first: {_describe(key)}: {problem}")
    return Matched(pa.table(out, schema=LONG), notes)


class _Row:
    """One call: a row of a rank's column lists, read like a dict."""
    __slots__ = ("columns", "i")

    def __init__(self, columns: dict[str, list], i: int) -> None:
        self.columns, self.i = columns, i

    def __getitem__(self, name: str):
        return self.columns[name][self.i]


def _key(matched_by: str, pg: str, pg_ranks: str, collective: str, step: int | None, seq: int) -> tuple:
    if matched_by == MATCHED_BY_ORDER or not pg:
        return ("order", "", "", collective, step, seq)
    return ("group", pg, pg_ranks, "", step, seq)


def _sort_key(key: tuple) -> tuple:
    mode, pg, pg_ranks, collective, step, seq = key
    return (step is not None, step if step is not None else 0, mode, pg, pg_ranks, collective, seq)


def _expected(pg_ranks: str, all_ranks: list[int]) -> list[int]:
    """The ranks an instance should have: its group's recorded ranks, else every rank given."""
    ranks = expand_ranks(pg_ranks)
    return ranks if ranks else all_ranks


def _disagreement(members: dict[int, _Row]) -> str:
    """'' when the ranks agree on the collective and size; else which ranks say what."""
    sizes_may_differ = all(r["collective"] == "alltoall" and r["matched_by"] != MATCHED_BY_ORDER
                           for r in members.values())
    values: dict[tuple, list[int]] = {}
    for rank, row in members.items():
        values.setdefault((row["collective"], None if sizes_may_differ else row["bytes"]), []).append(rank)
    if len(values) <= 1:
        return ""
    parts = []
    for (collective, size), ranks in list(values.items())[:4]:
        shown = ", ".join(map(str, sorted(ranks)[:8])) + (" ..." if len(ranks) > 8 else "")
        parts.append(f"{collective} {'?' if size is None else size} B on rank(s) {shown}")
    return "; ".join(parts)


def _describe(key: tuple) -> str:
    mode, pg, _, collective, step, seq = key
    where = f"process group {_shown(pg)}" if mode == "group" else f"{collective} (by order)"
    return f"{where}, step {step if step is not None else '-'}, call #{seq}"


def _shown(text: str) -> str:
    """A process group's name as notes show it: trace text, so only plain characters, quoted, and short."""
    return "'" + re.sub(r"[^A-Za-z0-9_.:-]", "?", text[:40]) + "'"
