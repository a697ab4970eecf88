"""An execution trace given the ops its graph replays ran at capture: the merged attribution every command uses.

:mod:`opscope.analyses.graph_capture` matches each replayed kernel to a kernel launch of a capture trace. Here the
ops and annotations around the matched launches are copied into the execution trace's events (kinds ``captured_op``
and ``captured_annotation``, nested as at capture, with no time of their own: they ran at capture, not in this
trace), and :attr:`Trace.replayed` says, per replayed kernel, which of them stand for its launching op, top-level
op and annotation. :func:`opscope.analyses.links.device_links` gives those rows for the replayed kernels, so the
analyses that charge device time to ops (``kernels --by-op``, ``ops --gpu``, diff by op, advise, the report) read
the captured ops' names, shapes and arguments as they read any op's; host-time analyses count ``cpu_op`` alone and
leave the copies out.

Each graph launch of the trace gets its own copies, at the launch's start, thread, process and step, with zero
duration: a captured op counts once per replay, and a step cut keeps the replays of those steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.analyses.graph_capture import CaptureMatch, captured_graphs, match_replays
from opscope.analyses.links import device_links, op_ancestors
from opscope.ingest.capture_files import CAPTURE_FOLDER, capture_files
from opscope.model import ranges
from opscope.model.lookup import index_in
from opscope.model.schema import EVENTS
from opscope.model.trace import REPLAYED, ColumnLoader, Trace

#: kind at capture -> kind of the copy
COPIED_KINDS = {"cpu_op": "captured_op", "user_annotation": "captured_annotation"}
_STEP_ANNOTATION = re.compile(r"^ProfilerStep#")
_CARRIED = ("name", "cat", "shapes", "dtypes", "strides", "concrete_inputs", "output_shapes")


def with_capture(trace: Trace, path: Path, given: Sequence[Path] | None, open_capture: Callable[[Path], Trace],
                 ) -> Trace:
    """``trace`` (read from ``path``) merged with its capture traces: those ``given`` (files or folders; ``none``: none)
    or else those in ``capture_traces/`` beside it (:func:`opscope.ingest.capture_files.capture_files`), each opened
    with ``open_capture``. The trace itself where there is none; :func:`capture_note` says what was used."""
    rank = trace.metadata.get("rank")
    files, how = capture_files(path, given, rank if isinstance(rank, int) else None)
    if not files:
        return trace
    merged, match = merge_capture(trace, [open_capture(f) for f in files])
    where = (", ".join(str(f) for f in files) if how == "given"
             else f"{len(files)} file(s) in {path.parent / CAPTURE_FOLDER}")
    note = f"{match.describe()} ({how}: {where})"
    if merged is trace:  # nothing matched: the trace as read, with the note alone
        return trace.replace(metadata={**trace.metadata, "graph_capture": {**match.facts(), "note": note}})
    merged.metadata["graph_capture"]["note"] = note
    return merged


def capture_note(trace: Trace) -> str | None:
    """What :func:`with_capture` used and matched, in a line (None: no capture trace)."""
    facts = trace.metadata.get("graph_capture")
    return facts.get("note") if isinstance(facts, dict) else None


def merge_capture(trace: Trace, captures: Sequence[Trace]) -> tuple[Trace, CaptureMatch]:
    """``trace`` with the captured ops of its graph replays (see the module), and the match that found them; the
    trace itself where nothing matched."""
    graphs = [graph for source, capture in enumerate(captures) for graph in captured_graphs(capture, source)]
    match = match_replays(trace, graphs)
    if not match.matched_kernels:
        return trace, match
    attribution = match.attribution
    replay_of = _replay_launches(trace, attribution)
    chains: dict[tuple[int, int], list[int]] = {}  # (capture, launch row) -> its ops and annotations, innermost first
    for source, capture in enumerate(captures):
        launches = pc.unique(pc.filter(attribution["launch_row"], pc.equal(attribution["source"], source)))
        for launch, chain in _ancestor_chains(capture, launches).items():
            chains[(source, launch)] = chain
    copies = _Copies(captures, trace.num_events)
    replayed: dict[str, list] = {f.name: [] for f in REPLAYED}
    for device_row, source, launch, replay in zip(attribution["device_row"].to_pylist(),
                                                  attribution["source"].to_pylist(),
                                                  attribution["launch_row"].to_pylist(), replay_of):
        chain = chains.get((source, launch), [])
        rows = [copies.row(replay, source, chain, k) for k in range(len(chain))]
        ops = [row for row in rows if copies.kind_of(row) == "captured_op"]
        annotations = [row for row in rows if copies.kind_of(row) == "captured_annotation"]
        replayed["device_row"].append(device_row)
        replayed["op_row"].append(ops[0] if ops else None)
        replayed["top_row"].append(ops[-1] if ops else None)
        replayed["annotation_row"].append(annotations[0] if annotations else None)
    extra = copies.events(trace)
    merged = trace.replace(events=_appended_events(trace, extra), args=_appended_args(trace, captures, copies),
                           copy_args=lambda: trace.copy_args, replayed=pa.table(replayed, schema=REPLAYED),
                           metadata={**trace.metadata,
                                     "graph_capture": {**match.facts(), "copied_events": extra.num_rows}})
    return merged, match


def _replay_launches(trace: Trace, attribution: pa.Table) -> list[int]:
    """The graph launch (a row of ``trace``) that ran each matched kernel."""
    links = device_links(trace)
    where = index_in(attribution["device_row"], links["device_row"])
    return pc.take(links["launch_row"], where).to_pylist()


def _ancestor_chains(capture: Trace, launches: pa.Array) -> dict[int, list[int]]:
    """Per launch row, its ops and annotations (not ``ProfilerStep#``) innermost first."""
    events = capture.select(["kind", "name", "parent"])
    index, rows = op_ancestors(events, launches, kinds=tuple(COPIED_KINDS))
    names = pc.take(events["name"], rows).cast(pa.string()).to_pylist() if len(rows) else []
    launch_list = launches.to_pylist()
    chains: dict[int, list[int]] = {launch: [] for launch in launch_list}
    for i, row, name in zip(index.to_pylist(), rows.to_pylist(), names):  # level by level: innermost first
        if not _STEP_ANNOTATION.match(name or ""):
            chains[launch_list[i]].append(row)
    return chains


class _Copies:
    """The copied rows: one per graph launch of the trace (a replay) and op or annotation of the capture, so that a
    captured op counts once per replay, at the replay's time, thread and step."""

    def __init__(self, captures: Sequence[Trace], first: int) -> None:
        self.captures = captures
        self.first = first  #: the row number of the first copy
        self.keys: list[tuple[int, int, int]] = []  # (replay, capture, capture row), in row order
        self.parents: list[int | None] = []
        self.depths: list[int] = []
        self._row_of: dict[tuple[int, int, int], int] = {}
        self._kinds: list[str] = []
        self._kind_at: dict[tuple[int, int], str] = {}

    def row(self, replay: int, source: int, chain: list[int], k: int) -> int:
        """The copy, for ``replay``, of ``chain[k]`` (innermost first) of capture ``source``: made with its parents."""
        key = (replay, source, chain[k])
        found = self._row_of.get(key)
        if found is not None:
            return found
        parent = self.row(replay, source, chain, k + 1) if k + 1 < len(chain) else None
        new = self.first + len(self.keys)
        self._row_of[key] = new
        self.keys.append(key)
        self.parents.append(parent)
        self.depths.append(len(chain) - k - 1)
        self._kinds.append(self._capture_kind(source, chain[k]))
        return new

    def kind_of(self, row: int) -> str:
        return self._kinds[row - self.first]

    def _capture_kind(self, source: int, row: int) -> str:
        if (source, row) not in self._kind_at:
            kind = self.captures[source].select(["kind"])["kind"][row].as_py()
            self._kind_at[(source, row)] = COPIED_KINDS[str(kind)]
        return self._kind_at[(source, row)]

    def _carried(self) -> pa.Table:
        """The copied rows' name, category, shapes and arguments from their capture traces, in the copies' order."""
        parts, order = [], []
        for source, capture in enumerate(self.captures):
            mine = [i for i, (_, of, _) in enumerate(self.keys) if of == source]
            if mine:
                rows = pa.array([self.keys[i][2] for i in mine], pa.int64())
                parts.append(capture.select(list(_CARRIED)).take(rows).unify_dictionaries())
                order.extend(mine)
        table = pa.concat_tables([part.cast(parts[0].schema) for part in parts]).unify_dictionaries()
        back = pc.sort_indices(pa.array(order, pa.int64()))  # position in ``table`` of each copy, in copy order
        return table.take(back)

    def events(self, trace: Trace) -> pa.Table:
        """The copies as rows of the events table (:data:`opscope.model.schema.EVENTS`)."""
        n = len(self.keys)
        carried = self._carried()
        replays = pa.array([replay for replay, _, _ in self.keys], pa.int64())
        at = trace.select(["ts_ns", "pid", "tid", "step"]).take(replays)

        def text(values: list) -> pa.Array:
            return pa.array(values, pa.string()).dictionary_encode()

        columns: dict[str, Any] = {
            "kind": text(self._kinds), "name": carried["name"], "cat": carried["cat"],
            "ts_ns": at["ts_ns"], "dur_ns": pa.array([0] * n, pa.int64()),
            "pid": at["pid"], "tid": at["tid"],
            **{name: pa.nulls(n, pa.int64()) for name in ("device", "stream", "correlation", "external_id")},
            **{name: carried[name] for name in _CARRIED[2:]},
            "event_id": ranges.arange(self.first, self.first + n),
            "parent": pa.array(self.parents, pa.int64()),
            "depth": pa.array(self.depths, pa.int32()),
            "self_ns": pa.array([0] * n, pa.int64()),
            "step": at["step"],
            "merged": pa.array([False] * n, pa.bool_()),
            "op_self_ns": pa.array([0] * n, pa.int64()),
        }
        return pa.table({f.name: pc.cast(combined(columns[f.name]), f.type) for f in EVENTS}, schema=EVENTS)


def _appended(base: pa.Table, extra: pa.Table) -> pa.Table:
    """``base``'s columns with ``extra``'s rows after them, each column one chunk with one dictionary."""
    extra = extra.select(base.column_names).cast(base.schema)
    return pa.concat_tables([base, extra]).unify_dictionaries().combine_chunks()


def _appended_events(trace: Trace, extra: pa.Table) -> pa.Table | ColumnLoader:
    held = trace.held_tables()["events"]
    if isinstance(held, ColumnLoader):  # read from the cache: still only the columns asked for
        loader = held
        return ColumnLoader(loader.names, lambda names: _appended(loader.load(names), extra.select(names)),
                            num_rows=None if loader.num_rows is None else loader.num_rows + extra.num_rows,
                            verify=loader.verify)
    assert isinstance(held, pa.Table)
    return _appended(held, extra)


def _appended_args(trace: Trace, captures: Sequence[Trace], copies: _Copies):
    """The ``args`` table (read when first asked) with the copies' arguments from their capture trace after it."""
    def load() -> pa.Table:
        base = trace.args
        parts = [base]
        for source, capture in enumerate(captures):
            new_rows: dict[int, list[int]] = {}
            for i, (_, of, row) in enumerate(copies.keys):
                if of == source:
                    new_rows.setdefault(row, []).append(copies.first + i)
            if not new_rows:
                continue
            theirs = capture.args.filter(pc.is_in(capture.args["event_id"],
                                                  value_set=pa.array(list(new_rows), pa.int64())))
            ids, texts = [], []
            for row, text in zip(theirs["event_id"].to_pylist(), theirs["args"].to_pylist()):
                for new in new_rows[row]:
                    ids.append(new)
                    texts.append(text)
            parts.append(pa.table({"event_id": pa.array(ids, pa.int64()),
                                   "args": pa.array(texts, pa.string())}).cast(base.schema))
        return pa.concat_tables(parts).combine_chunks()

    return load
