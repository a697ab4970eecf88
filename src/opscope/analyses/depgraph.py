"""The dependency graph of a trace: what had to finish before each piece of work could start.

Nodes are the pieces of work, each with its measured duration:

- **host slices**: each host thread's time cut where an op, annotation or runtime call starts or ends, each slice
  charged to the innermost event over it (or to no event: a gap, time the trace does not break down); one after the
  other in program order;
- **device work** (kernels, copies, fills, collectives): one after the other on each stream, first in first out;
- **waits**: a host slice of a synchronising call (stream/device/event synchronize, a blocking copy, an async copy to
  pageable memory: :mod:`opscope.analyses.sync`) ends when the device work it waits for has ended.

Other edges: device work after another stream's work it waited for (a recorded Stream Wait Event, one a wait call
implies, or one inferred from the times: :mod:`opscope.analyses.stream_waits`); a host thread's first work after the
event on another thread of its process that handed it over (:func:`_handoffs`).

Edges carry lags measured from the trace: a kernel starts ``lag`` after its launch call ended (negative when it
started while the call was still returning) or after the previous work on its stream ended; a waiting call returns
``lag`` after the work it waited for ended. A lag beyond what launching and queueing explain
(:data:`LATENCY_CAP_NS`) is **unexplained**: its excess is counted apart (the work waited on something the trace does
not show). :mod:`opscope.analyses.replay` derives every start from these edges and the durations, never from the
recorded timestamps.

The build runs in C (``_graph.c``) where it is built and not turned off (``OPSCOPE_NATIVE=0``); the Python below is
its definition, and the two give the same graph (tests compare them).
"""

from __future__ import annotations

import bisect
from array import array
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import arange, combined, name_match, pair_numbers, rows_where, value_codes
from opscope.analyses.idle import INPUT_PIPELINE
from opscope.analyses.intervals import is_sorted
from opscope.analyses.links import LINKED_KINDS, device_links
from opscope.analyses.stream_waits import WAIT_RECORD, implied_waits, stream_waits
from opscope.analyses.sync import blocking_calls
from opscope.model.buffers import c_enabled, true_positions, values_view
from opscope.model.lookup import index_in
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace
from opscope.runtime import stage_done
from opscope.threads import side_by_side, usable_cores

try:
    from opscope.analyses import _graph  # type: ignore[attr-defined]
except ImportError:  # not built here: the Python definitions run
    _graph = None

#: Host kinds whose nesting cuts a thread into slices (Python frames are a layer of their own, read for gaps only).
SLICE_KINDS = ("cpu_op", "user_annotation", "runtime", "overhead", "other")
#: A launch-to-start or queue lag up to this is launching and queueing; beyond it the excess is unexplained.
LATENCY_CAP_NS = 50_000

# what each node's time is, as the critical path counts it
HOST_COMPUTE = "host compute"
PYTHON = "python"
UNTRACED = "host untraced"
LAUNCH = "launch/runtime"
DEVICE_COMPUTE = "device compute"
COPIES = "copies"
COMMUNICATION = "communication"
SYNC_WAIT = "sync waits"
INPUT = "input pipeline"
UNEXPLAINED = "unexplained"
CATEGORIES = (HOST_COMPUTE, PYTHON, UNTRACED, LAUNCH, DEVICE_COMPUTE, COPIES, COMMUNICATION, SYNC_WAIT, INPUT,
              UNEXPLAINED)

#: A step's mark: its own time is the program between the step's ops, whatever kind the tracer gave it.
STEP_MARK = r"^ProfilerStep#"
_GAP = ""  # a slice of the thread's gap category (python where the thread has Python events, else untraced)
HOST, WAIT, DEVICE = 0, 1, 2
NONE = -1
T = TypeVar("T")
#: The modules of the causal model whose values (the graph, its replays, the idle parts) a caller may let go of
#: once done with them (``model.memo.forget_values``).
CAUSAL_MODULES = ("opscope.analyses.depgraph", "opscope.analyses.replay", "opscope.analyses.whatif",
                  "opscope.analyses.critical_path", "opscope.analyses.gap_causes")
#: the edge that carries a node's unexplained lag
ON_CHAIN, ON_EXTRA, ON_AFTER = 0, 1, 2
_DEVICE_CATEGORY = {"kernel": DEVICE_COMPUTE, "memcpy": COPIES, "memset": COPIES, "comm": COMMUNICATION}


class _PerNode(Sequence[T]):
    """A per-node column kept compactly (``_at`` reads one node): indexed and sliced as a list is, equal to any
    sequence of the same values, shown as its values."""

    __slots__ = ()

    def _at(self, node: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        return self._at(index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class Labels(_PerNode[str]):
    """Per node, one of a few names (a node's category, its lane): ``labels[node]`` is the name, kept as the names
    once and each node's code (int8 or int32) among them."""

    __slots__ = ("codes", "names")

    def __init__(self, names: Sequence[str], codes: memoryview) -> None:
        self.names = tuple(names)
        self.codes = codes

    def __len__(self) -> int:
        return len(self.codes)

    def _at(self, node: int) -> str:
        return self.names[self.codes[node]]

    def __iter__(self) -> Iterator[str]:
        names = self.names
        return (names[code] for code in self.codes)

    @classmethod
    def compact(cls, names: Sequence[str], codes: memoryview) -> Labels:
        """Labels with int32 ``codes`` kept as int8 where the names are few enough (a 1 GB trace's lanes: 4 MiB
        instead of 16, held as long as its graph)."""
        if codes.format == "i" and len(names) <= 127:
            as_int32 = pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes)])
            codes = frozen_view(pc.cast(as_int32, pa.int8()).buffers()[1], "b")
        return cls(names, codes)

    def arrow(self) -> pa.Array:
        """The codes as an Arrow array of their width (int8 or int32)."""
        type_ = pa.int8() if self.codes.format == "b" else pa.int32()
        return pa.Array.from_buffers(type_, len(self.codes), [None, pa.py_buffer(self.codes)])


#: The link columns: per node its default (a node without a link has it) and its values' format.
LINKED = {"extra": (NONE, "i"), "extra_lag": (0, "q"), "after": (NONE, "i"), "after_lag": (0, "q"),
          "unexplained": (0, "q"), "unexplained_on": (ON_CHAIN, "b"), "chain_lag": (0, "q")}


class Linked(_PerNode[int]):
    """A node column that few nodes set (an extra or after edge and its lag, an unexplained lag, a lag after the node
    before: device work and waits, rarely a host slice), kept for the linked nodes only: ``column[node]`` is
    ``values[link[node]]``, ``default`` where ``link[node]`` is ``NONE``. The graph's link columns share one
    ``link``."""

    __slots__ = ("default", "link", "values")

    def __init__(self, link: Sequence[int], values: Sequence[int], default: int) -> None:
        self.link = link
        self.values = values
        self.default = default

    def __len__(self) -> int:
        return len(self.link)

    def _at(self, node: int) -> int:
        k = self.link[node]
        return self.default if k == NONE else self.values[k]

    def __iter__(self) -> Iterator[int]:
        values, default = self.values, self.default
        return (default if k == NONE else values[k] for k in self.link)

    def arrow(self, type_: pa.DataType, nodes: pa.Array | None = None) -> pa.Array:
        """The column per node (of ``nodes`` only where given) as an Arrow array of ``type_`` (the values' width)."""
        m = len(self.values)
        # NONE read as uint32 is the largest value: the smaller of it and m picks the default, put after the values
        link = pa.Array.from_buffers(pa.uint32(), len(self.link), [None, pa.py_buffer(self.link)])
        rows = pc.min_element_wise(link if nodes is None else pc.take(link, nodes), pa.scalar(m, pa.uint32()))
        values = pa.concat_arrays([pa.Array.from_buffers(type_, m, [None, pa.py_buffer(self.values)]),
                                   pa.array([self.default], type_)])
        return pc.take(values, rows)

    def with_values(self, values: Sequence[int]) -> Linked:
        """The same linked nodes with other values."""
        return Linked(self.link, values, self.default)


class ThreadNodes(Mapping[str, Sequence[int]]):
    """Per host thread ("pid/tid"), its slices' nodes in order, found from the lanes' codes when a thread is first
    asked for and kept: a thread's nodes are its lane's in node order (Kahn's order keeps each thread's chain), so
    the graph holds no lists of them that most commands never read (15 MiB on a 1 GB trace's 3.8 M host slices)."""

    __slots__ = ("_code", "_found", "_lane")

    def __init__(self, lane: Labels, threads: Sequence[str]) -> None:
        first = {name: code for code, name in reversed(list(enumerate(lane.names)))}
        self._lane = lane
        self._code = {thread: first.get(thread) for thread in threads}  # None: a thread without a slice
        self._found: dict[str, Sequence[int]] = {}

    def __getitem__(self, thread: str) -> Sequence[int]:
        found = self._found.get(thread)
        if found is None:
            code = self._code[thread]
            if code is None:
                found = frozen_view(array("i"), "i")
            else:
                codes = self._lane.arrow()
                found = values_view(pc.cast(true_positions(pc.equal(codes, pa.scalar(code, codes.type))),
                                            pa.int32()), "i").toreadonly()
            self._found[thread] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._code)

    def __len__(self) -> int:
        return len(self._code)


class Ends(_PerNode[int]):
    """Each node's end as measured, kept as what it differs by: ``start + dur`` for nearly every node, and apart, in
    node order, the few nodes whose end is another (a wait whose own part is less than its call; in a job's graph,
    its joins and transfers). The graph then holds no column of ends (34 MB on 4.26 M nodes)."""

    __slots__ = ("dur", "nodes", "start", "values")

    def __init__(self, start: Sequence[int], dur: Sequence[int], nodes: Sequence[int], values: Sequence[int]) -> None:
        self.start = start
        self.dur = dur
        self.nodes = nodes  #: int32, ascending: the nodes whose end is not start + dur
        self.values = values  #: int64: their ends

    @classmethod
    def of(cls, start: Sequence[int], dur: Sequence[int], end: Sequence[int]) -> Ends:
        """The ends ``end`` (one per node) over ``start`` and ``dur``."""
        n = len(start)
        if n and isinstance(end, memoryview) and isinstance(start, memoryview) and isinstance(dur, memoryview):
            s, d, e = (pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(v)]) for v in (start, dur, end))
            other = true_positions(pc.not_equal(e, pc.add(s, d)))  # (wrapping sums: as int64 does in C)
            nodes = array("i", pc.cast(other, pa.int32()).to_pylist())
            values = array("q", pc.take(e, other).to_pylist())
        else:
            nodes = array("i", [i for i in range(n) if end[i] != start[i] + dur[i]])
            values = array("q", [end[i] for i in nodes])
        return cls(start, dur, frozen_view(nodes, "i"), frozen_view(values, "q"))

    def __len__(self) -> int:
        return len(self.start)

    def _at(self, node: int) -> int:
        if node < 0:
            node += len(self)
        if self.nodes:
            k = bisect.bisect_left(self.nodes, node)
            if k < len(self.nodes) and self.nodes[k] == node:
                return self.values[k]
        return self.start[node] + self.dur[node]

    def __iter__(self) -> Iterator[int]:
        apart = dict(zip(self.nodes, self.values))
        return (apart.get(node, s + d) for node, (s, d) in enumerate(zip(self.start, self.dur)))

    def arrow(self, nodes: pa.Array | None = None) -> pa.Array:
        """The ends (of ``nodes`` only where given) as an int64 Arrow array."""
        n = len(self.start)
        start, dur = (pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(v)])
                      if isinstance(v, memoryview | array) else pa.array(v, pa.int64()) for v in (self.start, self.dur))
        if nodes is not None:
            start, dur = pc.take(start, nodes), pc.take(dur, nodes)
        ends = pc.add(start, dur)
        if not len(self.nodes):
            return ends
        if nodes is None:  # every node: the few ends apart written over a copy of the sums
            out = bytearray(memoryview(ends.buffers()[1])[8 * ends.offset:8 * (ends.offset + n)])
            view = memoryview(out).cast("q")
            for node, end in zip(self.nodes, self.values):
                view[node] = end
            return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(out)])
        apart = pa.Array.from_buffers(pa.int32(), len(self.nodes), [None, pa.py_buffer(self.nodes)])
        where = pc.index_in(pc.cast(nodes, pa.int32()), value_set=apart)
        found = pc.take(pa.Array.from_buffers(pa.int64(), len(self.values), [None, pa.py_buffer(self.values)]),
                        where)
        return pc.if_else(pc.is_valid(where), found, ends)


def linked_columns(columns: dict[str, Sequence[int]]) -> tuple[memoryview, dict[str, Linked]]:
    """The link columns (:data:`LINKED`) from their values per node: the shared ``link`` (a node is linked where any of
    them is not its default) and each column over it."""
    plain = [(columns[name], default) for name, (default, _) in LINKED.items()]
    rows = [node for node in range(len(columns["extra"])) if any(values[node] != default for values, default in plain)]
    link = array("i", [NONE]) * len(columns["extra"])
    for k, node in enumerate(rows):
        link[node] = k
    view = frozen_view(link, "i")
    return view, {name: Linked(view, frozen_view(array(fmt, [columns[name][node] for node in rows]), fmt), default)
                  for name, (default, fmt) in LINKED.items()}


def node_column(values: Sequence[int] | Sequence[float], type_: pa.DataType) -> pa.Array:
    """A graph's column per node as an Arrow array of ``type_``: a memoryview or an array in place, a link column
    expanded."""
    if isinstance(values, Linked):
        return values.arrow(type_)
    if isinstance(values, Ends):
        return pc.cast(values.arrow(), type_)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def frozen_view(values: bytes | bytearray | array | pa.Buffer, fmt: str) -> memoryview:
    """A read-only memoryview of ``fmt`` items over a buffer (a graph and its replays are not changed once made)."""
    return memoryview(values).toreadonly().cast("B").cast(fmt)  # type: ignore[call-overload]


@dataclass
class DepGraph:
    """Nodes in an order where every node comes after the nodes it depends on (sequences indexed by node: read-only
    memoryviews of int8 ``kind``; int32 ``row``, ``chain``, ``link``; int64 the rest; :class:`Labels` ``category``
    and ``lane``; :class:`Linked` ``chain_lag``, ``extra``, ``extra_lag``, ``after``, ``after_lag``, ``unexplained``
    and ``unexplained_on``, kept only for the nodes ``link`` names: most nodes are host slices with none of them, each
    right after the one before it).

    ``chain``: the node before on the same thread or stream (``NONE``: the first; it starts ``chain_lag`` after the
    trace's start). ``extra``: a device node's launch call, a wait's device node (``NONE``: none), ``extra_lag`` the
    lag after that node's end. ``dur``: host slice and device durations; a wait's own part (the whole call when it
    did not wait). ``unexplained``: the part of the binding lag before the node beyond :data:`LATENCY_CAP_NS`.
    ``row``: the event (``NONE`` for a gap); ``start``/``end``: as measured (:class:`Ends`: start + dur but for the
    few nodes whose end is another); ``lane``: thread or stream key."""

    kind: Sequence[int]
    category: Labels
    row: Sequence[int]
    lane: Labels
    dur: Sequence[int]
    chain: Sequence[int]
    chain_lag: Linked
    #: per node, its row in the link columns (``NONE``: no extra or after edge, no lag on any edge, nothing unexplained)
    link: Sequence[int]
    extra: Linked
    extra_lag: Linked
    #: device work on another stream this work waited for (an event wait the trace implies; ``NONE``: none)
    after: Linked
    after_lag: Linked
    unexplained: Linked
    unexplained_on: Linked  #: ON_CHAIN, ON_EXTRA or ON_AFTER
    start: Sequence[int]
    end: Ends
    origin: int  #: the trace's first instant (time 0 of the replay)
    #: per host thread ("pid/tid"), its slices' node ids in order (:class:`ThreadNodes` in a graph built here)
    threads: Mapping[str, Sequence[int]]

    def __len__(self) -> int:
        return len(self.kind)

    def links(self) -> tuple[Sequence[int], ...]:
        """The link columns as the C parts take them: ``link``, then the values of extra, extra_lag, after,
        after_lag, unexplained, unexplained_on and chain_lag. A TypeError where a column is not a :class:`Linked`
        over this graph's ``link`` (a graph made by hand: the callers' Python definitions read it per node)."""
        columns = [getattr(self, name) for name in LINKED]
        if not all(isinstance(column, Linked) and column.link is self.link for column in columns):
            raise TypeError("the graph's link columns are not over its link rows")
        return (self.link, *(column.values for column in columns))


@memoized()
def dependency_graph(trace: Trace) -> DepGraph:
    """The trace's dependency graph (see the module)."""
    return _build(trace)


def native_graph():
    """The C build and replay (``_graph.c``) where built and not turned off (``OPSCOPE_NATIVE=0``), else None."""
    if _graph is None or not c_enabled():
        return None
    return _graph


def _build(trace: Trace) -> DepGraph:
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation"])
    origin = pc.min(ev["ts_ns"]).as_py() if ev.num_rows else 0

    def the_rest() -> tuple[list[list[int]], _InputsForC | None]:
        return thread_handoffs(trace), _inputs_for_c(trace, ev)

    if native_graph() is not None and usable_cores() > 1:  # the search for waits (the longest part) beside the rest
        waits_found, (handoffs, inputs) = side_by_side(lambda: _recorded_waits(trace, ev), the_rest, "opscope-graph")
    else:
        waits_found, (handoffs, inputs) = _recorded_waits(trace, ev), the_rest()
    graph = _build_in_c(inputs, waits_found, handoffs, ev.num_rows, origin) if inputs is not None else None
    if graph is not None:
        del inputs
        stage_done()  # the build's scratch and inputs (a third of the graph's size again) back to the system (tuned)
        return graph
    builder = _Builder(origin)
    slices_of, waits = _host_slices(trace, ev, builder)
    by_device = _device_nodes(trace, ev, builder, slices_of)
    _tie_handoffs(builder, slices_of, handoffs)
    _tie_recorded_waits(builder, waits_found)
    _tie_across_streams(builder, by_device)
    _tie_waits(builder, {slices_of[row][1]: device for row, device in waits.items() if row in slices_of}, by_device)
    return builder.ordered()


class _Builder:
    def __init__(self, origin: int) -> None:
        self.origin = origin
        self.kind: list[int] = []
        self.category: list[str] = []
        self.row: list[int] = []
        self.lane: list[str] = []
        self.dur: list[int] = []
        self.chain: list[int] = []
        self.chain_lag: list[int] = []
        self.extra: list[int] = []
        self.extra_lag: list[int] = []
        self.after: list[int] = []
        self.after_lag: list[int] = []
        self.unexplained: list[int] = []
        self.unexplained_on: list[int] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.threads: dict[str, list[int]] = {}
        #: per node given an inferred cross-stream edge, its edges' lags before (to take the edge back)
        self.before_after: dict[int, tuple[int, int, int, int]] = {}

    def add(self, kind: int, category: str, row: int, lane: str, start: int, end: int, chain: int) -> int:
        node = len(self.kind)
        self.kind.append(kind)
        self.category.append(category)
        self.row.append(row)
        self.lane.append(lane)
        self.dur.append(end - start)
        self.chain.append(chain)
        self.chain_lag.append(start - (self.end[chain] if chain != NONE else self.origin))
        self.extra.append(NONE)
        self.extra_lag.append(0)
        self.after.append(NONE)
        self.after_lag.append(0)
        self.unexplained.append(0)
        self.unexplained_on.append(ON_CHAIN)
        self.start.append(start)
        self.end.append(end)
        return node

    def _topological(self, partial: bool = False) -> list[int] | None:
        """Kahn's order of the nodes (ties by start); None when a cycle leaves some out (``partial``: what it
        reached)."""
        n = len(self.kind)
        waiting = [0] * n
        after: list[list[int]] = [[] for _ in range(n)]
        for node in range(n):
            for dep in (self.chain[node], self.extra[node], self.after[node]):
                if dep != NONE:
                    waiting[node] += 1
                    after[dep].append(node)
        ready = deque(sorted((node for node in range(n) if not waiting[node]), key=lambda x: self.start[x]))
        order: list[int] = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for nxt in after[node]:
                waiting[nxt] -= 1
                if not waiting[nxt]:
                    ready.append(nxt)
        return order if len(order) == n or partial else None

    def tie_after(self, node: int, other: int) -> None:
        """An inferred edge after ``other``'s end, the node's other edges' lags kept to take it back
        (:meth:`_drop_after`); the caller sets its lag and the other edges' new lags."""
        self.before_after[node] = (self.chain_lag[node], self.extra_lag[node], self.unexplained[node],
                                   self.unexplained_on[node])
        self.after[node] = other

    def _drop_after(self, node: int) -> None:
        """Forget an inferred cross-stream edge: the node's other edges get back the lags they had."""
        self.after[node], self.after_lag[node] = NONE, 0
        (self.chain_lag[node], self.extra_lag[node], self.unexplained[node],
         self.unexplained_on[node]) = self.before_after.pop(node)

    def ordered(self) -> DepGraph:
        """The nodes renumbered in an order where each comes after its dependencies (Kahn's, ties by start). Should
        the inferred cross-stream edges close a cycle (clocks that disagree), those of the nodes left are dropped."""
        order = self._topological()
        if order is None:
            done = set(self._topological(partial=True) or [])
            for node in range(len(self.kind)):
                if node not in done and self.after[node] != NONE:
                    self._drop_after(node)
            order = self._topological()
            if order is None:
                raise RuntimeError("the dependency graph has a cycle that no inferred edge closes")
        n = len(order)
        new = [0] * n
        for i, node in enumerate(order):
            new[node] = i

        def renumber(values: list[int]) -> memoryview:
            return frozen_view(array("i", [NONE if values[node] == NONE else new[values[node]] for node in order]),
                               "i")

        def pick(values: list, fmt: str) -> memoryview:
            return frozen_view(array(fmt, [values[node] for node in order]), fmt)

        code = {name: i for i, name in enumerate(CATEGORIES)}
        lanes: dict[str, int] = {}
        lane_codes = array("i", [lanes.setdefault(self.lane[node], len(lanes)) for node in order])
        link, linked = linked_columns({
            "extra": renumber(self.extra), "extra_lag": pick(self.extra_lag, "q"), "after": renumber(self.after),
            "after_lag": pick(self.after_lag, "q"), "unexplained": pick(self.unexplained, "q"),
            "unexplained_on": pick(self.unexplained_on, "b"), "chain_lag": pick(self.chain_lag, "q")})
        start, dur = pick(self.start, "q"), pick(self.dur, "q")
        lane = Labels.compact(list(lanes), frozen_view(lane_codes, "i"))
        return DepGraph(kind=pick(self.kind, "b"),
                        category=Labels(CATEGORIES, frozen_view(
                            array("b", [code[self.category[node]] for node in order]), "b")),
                        row=pick(self.row, "i"), lane=lane, dur=dur, chain=renumber(self.chain), link=link,
                        **linked, start=start, end=Ends.of(start, dur, pick(self.end, "q")), origin=self.origin,
                        threads=ThreadNodes(lane, list(self.threads)))


def _host_slices(trace: Trace, ev: pa.Table, builder: _Builder,
                 ) -> tuple[dict[int, tuple[int, int]], dict[int, int | None]]:
    """Cut each host thread into slices (nodes); returns, per event, its (first, last) slice nodes, and the calls
    that wait for device work (:func:`_waiting_calls`)."""
    host = rows_where(kind_mask(ev, SLICE_KINDS))
    if not len(host):
        return {}, {}
    names = ev["name"]
    waits = _waiting_calls(trace, ev)
    input_rows = set(rows_where(pc.and_(kind_mask(ev, SLICE_KINDS),
                                        name_match(names, INPUT_PIPELINE))).to_pylist())
    # a step's mark is an annotation even where a tracer records it as an op (older Kineto: ProfilerStep#N cpu_op)
    step_marks = set(rows_where(name_match(names, STEP_MARK)).to_pylist())
    python_threads = _python_threads(ev)
    cols = {c: pc.take(ev[c], host).to_pylist() for c in ("kind", "ts_ns", "dur_ns", "pid", "tid")}
    rows = host.to_pylist()
    per_thread: dict[str, list[int]] = {}
    for i, (pid, tid) in enumerate(zip(cols["pid"], cols["tid"])):
        per_thread.setdefault(f"{pid}/{tid}", []).append(i)
    slices_of: dict[int, tuple[int, int]] = {}
    for lane, members in per_thread.items():
        sweep = _ThreadSweep(builder, lane, PYTHON if lane in python_threads else UNTRACED, slices_of)
        for i in members:
            row = rows[i]
            sweep.enter(row, cols["ts_ns"][i], cols["ts_ns"][i] + max(cols["dur_ns"][i], 0),
                        lambda stack, kind=cols["kind"][i], row=row: _host_category(
                            kind, row, waits, input_rows, step_marks, stack))
        sweep.close()
    return slices_of, waits


class _ThreadSweep:
    """One host thread's events (in start order, outer before inner) cut into slices: a slice ends wherever an
    event starts or ends, and is charged to the innermost event open over it (none: a gap)."""

    def __init__(self, builder: _Builder, lane: str, gap: str, slices_of: dict[int, tuple[int, int]]) -> None:
        self.builder, self.lane, self.gap, self.slices_of = builder, lane, gap, slices_of
        self.nodes: list[int] = []
        builder.threads[lane] = self.nodes
        self.stack: list[tuple[int, int, str]] = []  # open events: (row, end, category)
        self.now: int | None = None

    def enter(self, row: int, start: int, end: int, category_of) -> None:
        if self.now is None:
            self.now = start
        while self.stack and self.stack[-1][1] <= start:
            self._emit(self.stack[-1][1])
            self.stack.pop()
        self._emit(start)
        if self.stack:
            end = min(end, self.stack[-1][1])  # a child that runs past its parent's end: only its part inside
        self.stack.append((row, end, category_of(self.stack) or self.gap))

    def close(self) -> None:
        while self.stack:
            self._emit(self.stack[-1][1])
            self.stack.pop()

    def _emit(self, upto: int) -> None:
        """The slice from now to ``upto``; an empty one only for a call that has no slice yet (a launch or a wait
        that took no time still gets its node)."""
        assert self.now is not None
        top = self.stack[-1] if self.stack else None
        empty_call = top is not None and top[2] in (LAUNCH, SYNC_WAIT) and top[0] not in self.slices_of
        if upto < self.now or (upto == self.now and not empty_call):
            return
        kind = WAIT if top is not None and top[2] == SYNC_WAIT else HOST
        node = self.builder.add(kind, top[2] if top else self.gap, top[0] if top else NONE, self.lane, self.now,
                                upto, self.nodes[-1] if self.nodes else NONE)
        self.nodes.append(node)
        if top is not None:
            self.slices_of[top[0]] = (self.slices_of.get(top[0], (node, node))[0], node)
        self.now = upto


def _host_category(kind: str, row: int, waits: dict[int, int | None], input_rows: set[int], step_marks: set[int],
                   stack: list[tuple[int, int, str]]) -> str:
    if row in waits:
        return SYNC_WAIT
    if kind == "runtime":
        return LAUNCH
    if row in input_rows or (stack and stack[-1][2] == INPUT):
        return INPUT
    # an annotation's own time (a record_function region, ProfilerStep#N) is the program between its ops: as a gap
    return HOST_COMPUTE if kind == "cpu_op" and row not in step_marks else _GAP


def _python_threads(ev: pa.Table) -> set[str]:
    python = ev.filter(kind_mask(ev, ("python",))).select(["pid", "tid"])
    if not python.num_rows:
        return set()
    pairs = python.group_by(["pid", "tid"], use_threads=False).aggregate([])
    return {f"{p}/{t}" for p, t in zip(pairs["pid"].to_pylist(), pairs["tid"].to_pylist())}


def _waiting_calls(trace: Trace, ev: pa.Table) -> dict[int, int | None]:
    """The host calls that wait for device work (row -> the device id they wait on, None: any)."""
    rows, devices = _waiting_rows(trace, ev)
    return dict(zip(rows.to_pylist(), devices.to_pylist()))


def _waiting_rows(trace: Trace, ev: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The rows of the host calls that wait for device work, and the device id each waits on (null: any)."""
    rows = blocking_calls(ev)
    return rows, combined(pc.take(ev["device"], rows))


def _device_nodes(trace: Trace, ev: pa.Table, builder: _Builder, slices_of: dict[int, tuple[int, int]],
                  ) -> dict[int | None, list[int]]:
    """Device work per stream in start order, each tied to its launch call; returns the nodes of each device."""
    links = device_links(trace)
    device_rows = links["device_row"].to_pylist()
    launch_rows = links["launch_row"].to_pylist()
    launch_of = dict(zip(device_rows, launch_rows))
    rows = rows_where(kind_mask(ev, LINKED_KINDS))
    cols = {c: pc.take(ev[c], rows).to_pylist() for c in ("kind", "ts_ns", "dur_ns", "device", "stream")}
    order = sorted(range(len(rows)), key=lambda i: (cols["ts_ns"][i], i))
    row_list = rows.to_pylist()
    last_on: dict[str, int] = {}
    by_device: dict[int | None, list[int]] = {}
    for i in order:
        row = row_list[i]
        lane = f"{cols['device'][i]}:{cols['stream'][i]}"
        start = cols["ts_ns"][i]
        end = start + max(cols["dur_ns"][i], 0)
        prev = last_on.get(lane, NONE)
        node = builder.add(DEVICE, _DEVICE_CATEGORY.get(cols["kind"][i], DEVICE_COMPUTE), row, lane, start, end, prev)
        last_on[lane] = node
        by_device.setdefault(cols["device"][i], []).append(node)
        launch = launch_of.get(row)
        slices = slices_of.get(launch) if launch is not None else None
        _tie_to_launch(builder, node, slices, prev)
    return by_device


def _tie_to_launch(builder: _Builder, node: int, slices: tuple[int, int] | None, prev: int) -> None:
    """A device node's two edges: after the previous work on its stream (``chain``) and after its launch call
    (``extra``). The edge that bound its start keeps its measured lag (the replay gives back the measured start); the
    other keeps the smaller of its measured lag and :data:`LATENCY_CAP_NS`, so that a change elsewhere cannot start
    the work earlier than launching or queueing allows. Where the launch is unknown, the stream edge alone."""
    start = builder.start[node]
    anchor = NONE
    if slices is not None:
        first, last = slices
        # a call that waits (a blocking copy) returns after its own copy: the copy starts after the call began
        anchor = builder.chain[first] if builder.kind[last] == WAIT else last
    if anchor == NONE:
        builder.unexplained[node] = max(builder.chain_lag[node] - LATENCY_CAP_NS, 0)
        return
    launch_lag = start - builder.end[anchor]
    builder.extra[node] = anchor
    if prev == NONE or builder.end[anchor] >= builder.end[prev]:  # the launch bound its start
        builder.extra_lag[node] = launch_lag
        # the stream's queue: no more than the trace's gap; the first work on a stream is held by nothing else
        builder.chain_lag[node] = min(builder.chain_lag[node], LATENCY_CAP_NS) if prev != NONE else 0
        builder.unexplained[node] = max(launch_lag - LATENCY_CAP_NS, 0)
        builder.unexplained_on[node] = ON_EXTRA
    else:  # the queue bound it
        builder.extra_lag[node] = min(launch_lag, LATENCY_CAP_NS)
        builder.unexplained[node] = max(builder.chain_lag[node] - LATENCY_CAP_NS, 0)


@memoized(keep=True)  # kept in the cache entry: the next command on the trace does not search again
def thread_handoffs(trace: Trace) -> list[list[int]]:
    """[row of a host thread's first event, row of the event it was handed from] (:func:`_handoffs`)."""
    ev = trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid"])
    origin = pc.min(ev["ts_ns"]).as_py() if ev.num_rows else 0
    return [[row, source] for row, source in _handoffs(ev, origin or 0)]


def _handoffs(ev: pa.Table, origin: int) -> list[tuple[int, int]]:
    """(row of a host thread's first event, row of the event it was handed from): a thread whose first event starts
    after the trace's start was idle until another thread of its process gave it work (an autograd engine thread,
    a TensorFlow executor thread); the trace does not say which, and the event on another thread of the process that
    ended last before it (the one that can have woken it; the later row on a tie) stands for the hand-off. Threads
    in the order their first event comes among the rows."""
    host = rows_where(kind_mask(ev, SLICE_KINDS))
    if not len(host):
        return []
    ts = combined(ev["ts_ns"])
    if not ts.null_count and is_sorted(ts):  # the model's rows: in time order
        return _handoffs_in_time_order(ev, host, ts, origin)
    # threads by the codes of their pid and tid (a null one a value of its own): integers to group and compare
    table = pa.table({"pid": value_codes(pc.take(ev["pid"], host))[0], "tid": value_codes(pc.take(ev["tid"], host))[0],
                      "ts": combined(pc.take(ev["ts_ns"], host)), "position": arange(len(host))})
    threads = table.group_by(["pid", "tid"], use_threads=False).aggregate([("ts", "min"), ("position", "min")])
    late = threads.filter(pc.greater(pc.subtract(threads["ts_min"], origin), LATENCY_CAP_NS))
    if not late.num_rows:
        return []
    pairs = []
    for pid, tid, start, _ in sorted(zip(*(late[c].to_pylist() for c in ("pid", "tid", "ts_min", "position_min"))),
                                     key=lambda thread: thread[3]):
        process = pc.equal(table["pid"], pid)
        own = pc.and_(process, pc.equal(table["tid"], tid))
        first = pc.min(pc.filter(table["position"], pc.and_(own, pc.equal(table["ts"], start)))).as_py()
        # an event that ended by the thread's start began by then: only those rows' ends are computed
        began = table.filter(pc.and_(pc.and_(process, pc.invert(own)), pc.less_equal(table["ts"], start)))
        ends = pc.add(began["ts"], pc.max_element_wise(
            pc.fill_null(combined(pc.take(ev["dur_ns"], pc.take(host, began["position"]))), 0), 0))
        ended = pc.less_equal(ends, start)
        candidates = pa.table({"end": pc.filter(ends, ended), "position": pc.filter(began["position"], ended)})
        if not candidates.num_rows:
            continue
        last = candidates.sort_by([("end", "descending"), ("position", "descending")])["position"][0].as_py()
        pairs.append((host[first].as_py(), host[last].as_py()))
    return pairs


def _handoffs_in_time_order(ev: pa.Table, host: pa.Array, ts: pa.Array, origin: int) -> list[tuple[int, int]]:
    """:func:`_handoffs` where the rows are in time order: a thread's first row is its earliest, and the rows that
    began by a time are the rows before some row, so that no thread's start is grouped and only the rows before a
    late thread's start are looked at (1 GB benchmark trace: 37 against 85-93 ms of CPU)."""
    thread, threads = pair_numbers(pc.take(ev["pid"], host), pc.take(ev["tid"], host))
    first_rows = pc.take(host, index_in(arange(len(threads)), pc.cast(thread, pa.int64())))
    starts = pc.take(ts, first_rows).to_pylist()
    late = [k for k, start in enumerate(starts) if start - origin > LATENCY_CAP_NS]
    if not late:
        return []
    process: dict[object, int] = {}
    thread_process = pa.array([process.setdefault(pid, len(process)) for pid, _ in threads], pa.int32())
    times, host_rows = values_view(ts, "q"), values_view(pc.cast(host, pa.int64()), "q")
    pairs = []
    for k in late:  # threads are numbered in the order their first row comes
        start = starts[k]
        began = bisect.bisect_left(host_rows, bisect.bisect_right(times, start))  # host rows that began by then
        mine = pc.take(thread_process, thread.slice(0, began))
        others = pc.and_(pc.equal(mine, process[threads[k][0]]), pc.not_equal(thread.slice(0, began), k))
        rows = pc.filter(host.slice(0, began), others)
        ends = pc.add(pc.take(ts, rows), pc.max_element_wise(pc.fill_null(combined(pc.take(ev["dur_ns"], rows)), 0), 0))
        ended = pc.less_equal(ends, start)
        candidates = pa.table({"end": pc.filter(ends, ended), "row": pc.filter(rows, ended)})
        if not candidates.num_rows:
            continue
        last = candidates.sort_by([("end", "descending"), ("row", "descending")])["row"][0].as_py()
        pairs.append((first_rows[k].as_py(), last))
    return pairs


def _tie_handoffs(builder: _Builder, slices_of: dict[int, tuple[int, int]], pairs: list[list[int]]) -> None:
    """Each hand-off (:func:`_handoffs`) as the edge that started the thread: its first slice after the event's last
    slice, the lag measured (beyond the latency cap: unexplained), no longer after the trace's start."""
    for row, source in pairs:
        node, other = slices_of.get(row, (NONE, NONE))[0], slices_of.get(source, (NONE, NONE))[1]
        if node == NONE or other == NONE or builder.chain[node] != NONE or builder.after[node] != NONE:
            continue
        builder.tie_after(node, other)
        lag = builder.start[node] - builder.end[other]
        builder.after_lag[node], builder.chain_lag[node] = lag, 0
        builder.unexplained[node], builder.unexplained_on[node] = max(lag - LATENCY_CAP_NS, 0), ON_AFTER


def _recorded_waits(trace: Trace, ev: pa.Table) -> list[tuple[int, int]]:
    """(device row that waited, device row it waited for) of the waits the trace records, in their order (their
    arguments read only where it has Stream Wait Event records), then those its wait calls imply."""
    recorded = (stream_waits(trace) if pc.any(pc.and_(kind_mask(ev, ("sync",)), name_match(ev["name"], WAIT_RECORD)))
                .as_py() else [])
    return recorded + [(waiting, waited) for waiting, waited in implied_waits(trace, LATENCY_CAP_NS)]


def _tie_recorded_waits(builder: _Builder, pairs: list[tuple[int, int]]) -> None:
    """Each wait (:mod:`opscope.analyses.stream_waits`: recorded, then implied by the wait calls) as the edge after
    the work waited for: the binding one where that work ended after what bound the start as measured (the other
    edges then no longer bind; a lag beyond the latency cap is unexplained on it), else a bound with no lag (the
    work may start once that work is done)."""
    node_of = {builder.row[n]: n for n in range(len(builder.kind)) if builder.kind[n] == DEVICE}
    for waiting, waited in pairs:
        node, other = node_of.get(waiting), node_of.get(waited)
        if node is None or other is None or builder.after[node] != NONE or builder.lane[node] == builder.lane[other]:
            continue
        start, end = builder.start[node], builder.end[other]
        bound = start - (builder.extra_lag[node] if builder.unexplained_on[node] == ON_EXTRA
                         else builder.chain_lag[node])
        binding = end >= bound
        if end > start:
            continue
        builder.tie_after(node, other)
        if binding:
            builder.after_lag[node] = start - end
            builder.chain_lag[node] = min(builder.chain_lag[node], LATENCY_CAP_NS)
            builder.extra_lag[node] = min(builder.extra_lag[node], LATENCY_CAP_NS)
            builder.unexplained[node] = max(start - end - LATENCY_CAP_NS, 0)
            builder.unexplained_on[node] = ON_AFTER
        else:  # a bound that did not bind: the work may start once the work waited for is done
            builder.after_lag[node] = 0


def _tie_across_streams(builder: _Builder, by_device: dict[int | None, list[int]]) -> None:
    """Device work that started long after both its launch and the work before it on its stream, just after work on
    another stream of its device ended, waited for that work (a CUDA/HIP event wait, which traces seldom record):
    an edge from that work, with the lag measured, and the node's other edges no longer binding."""
    for nodes in by_device.values():
        ends = sorted((builder.end[n], n) for n in nodes)
        end_values = [end for end, _ in ends]
        for node in nodes:
            if not builder.unexplained[node] or builder.after[node] != NONE:
                continue
            start, lane = builder.start[node], builder.lane[node]
            k = bisect.bisect_right(end_values, start) - 1
            while k >= 0 and end_values[k] >= start - LATENCY_CAP_NS:
                other = ends[k][1]
                if builder.lane[other] != lane and builder.start[other] < start:
                    builder.tie_after(node, other)
                    builder.after_lag[node] = start - builder.end[other]
                    builder.chain_lag[node] = min(builder.chain_lag[node], LATENCY_CAP_NS)
                    builder.extra_lag[node] = min(builder.extra_lag[node], LATENCY_CAP_NS)
                    builder.unexplained[node] = 0
                    break
                k -= 1


def _tie_waits(builder: _Builder, pending: dict[int, int | None], by_device: dict[int | None, list[int]]) -> None:
    """Each waiting call to the device work that ended last before it returned among the work launched before it
    began (on its device when it names one): it returns ``lag`` after that work ends. A call whose work was done
    before it began did not wait: its whole time is its own."""
    if not pending:
        return
    ends = {device: sorted((builder.end[n], n) for n in nodes) for device, nodes in by_device.items()}
    everything = sorted((builder.end[n], n) for nodes in by_device.values() for n in nodes)
    for node, device in pending.items():
        candidates = ends.get(device, everything) if device is not None else everything
        call_start, call_end = builder.start[node], builder.end[node]
        k = bisect.bisect_right(candidates, (call_end, len(builder.kind))) - 1
        waited = NONE
        while k >= 0:
            _, work = candidates[k]
            if _launched_before(builder, work, call_start):
                waited = work
                break
            k -= 1
        if waited == NONE or builder.end[waited] <= call_start:
            continue  # nothing to wait for: the call's time is its own
        builder.extra[node] = waited
        builder.extra_lag[node] = call_end - builder.end[waited]
        builder.dur[node] = 0  # its time is the wait: it ends when the work does (plus the lag)
        builder.unexplained[node] = max(builder.extra_lag[node] - LATENCY_CAP_NS, 0)
        builder.unexplained_on[node] = ON_EXTRA


def _launched_before(builder: _Builder, work: int, instant: int) -> bool:
    launch = builder.extra[work]
    return launch == NONE or builder.start[launch] <= instant or builder.end[launch] <= instant



# --- the build in C ------------------------------------------------------------------------------------------

_CODE = {name: i for i, name in enumerate(CATEGORIES)}
_INHERITS = -1  # an annotation's slice: input pipeline inside input-pipeline work, else the thread's gap category


@dataclass(frozen=True)
class _InputsForC:
    """The event columns ``_graph.build`` takes, as arrays, but for the edges searched for (waits, hand-offs)."""

    host: pa.Array
    host_lane: pa.Array
    host_lanes: list[str]
    host_code: pa.Array
    lane_gap: pa.Array
    device: pa.Array
    device_lane: pa.Array
    device_lanes: list[str]
    device_group: pa.Array
    groups: int
    device_category: pa.Array
    launch: pa.Array
    wait_rows: pa.Array
    wait_group: pa.Array
    ts_ns: pa.ChunkedArray
    dur_ns: pa.ChunkedArray


def _inputs_for_c(trace: Trace, ev: pa.Table) -> _InputsForC | None:
    """The inputs of the C build (the same as :func:`_build`'s definition reads: the host events per thread, the
    device work in start order with its launch, the waiting calls); None where the C part is not built or times are
    missing (the definition then runs)."""
    native = native_graph()
    if native is None or not ev.num_rows or ev["ts_ns"].null_count or ev["dur_ns"].null_count:
        return None
    if ev.num_rows >= 2**31 - 1:  # the C build numbers rows and nodes in int32: the definition runs
        return None
    host = pc.cast(true_positions(combined(kind_mask(ev, SLICE_KINDS))), pa.int32())  # int32: as the C build reads it
    wait_rows, wait_devices = _waiting_rows(trace, ev)
    h_lane, host_lanes = _lane_codes(pc.take(ev["pid"], host), pc.take(ev["tid"], host), "/")
    python_threads = _python_threads(ev)
    lane_gap = pa.array([_CODE[PYTHON if lane in python_threads else UNTRACED] for lane in host_lanes], pa.int8())

    def picked(mask: pa.ChunkedArray, rows: pa.Array) -> pa.Array:
        return pc.fill_null(combined(pc.take(mask, rows)), False)

    code = pa.repeat(pa.scalar(_INHERITS, pa.int8()), len(host))  # (the order of _host_category's tests, last to first)
    # a step's mark recorded as an op (older Kineto) is an annotation: it inherits, as in _host_category
    op_not_mark = pc.and_(picked(kind_mask(ev, ("cpu_op",)), host),
                          pc.invert(picked(name_match(ev["name"], STEP_MARK), host)))
    for mask, category in ((op_not_mark, HOST_COMPUTE),
                           (picked(name_match(ev["name"], INPUT_PIPELINE), host), INPUT),
                           (picked(kind_mask(ev, ("runtime",)), host), LAUNCH),
                           (pc.is_in(host, value_set=wait_rows), SYNC_WAIT)):
        code = pc.if_else(mask, pa.scalar(_CODE[category], pa.int8()), code)

    device = rows_where(kind_mask(ev, LINKED_KINDS))
    device = pc.take(device, pc.sort_indices(pc.take(ev["ts_ns"], device)))  # stable: ties by row
    d_devices = combined(pc.take(ev["device"], device))
    d_lane, device_lanes = _lane_codes(d_devices, pc.take(ev["stream"], device), ":")
    d_group, group_values = value_codes(d_devices)
    kinds = {kind: picked(kind_mask(ev, (kind,)), device) for kind in ("memcpy", "memset", "comm")}
    d_cat = pa.repeat(pa.scalar(_CODE[DEVICE_COMPUTE], pa.int8()), len(device))
    for kind, category in (("comm", COMMUNICATION), ("memset", COPIES), ("memcpy", COPIES)):
        d_cat = pc.if_else(kinds[kind], pa.scalar(_CODE[category], pa.int8()), d_cat)
    links = device_links(trace)
    launch = pc.take(links["launch_row"], index_in(pc.cast(device, pa.int64()),
                                                   pc.cast(links["device_row"], pa.int64())))
    # a waiting call's device: its own stream's device where it names one the work ran on, else any (-1)
    known = pa.array([v for v in group_values if v is not None], pa.int64())
    w_group = pc.take(pa.array([g + 1 for g, v in enumerate(group_values) if v is not None] or [0], pa.int64()),
                      pc.index_in(wait_devices, value_set=known))

    return _InputsForC(host, h_lane, host_lanes, combined(code), lane_gap, device, d_lane, device_lanes, d_group,
                       len(group_values), combined(d_cat), launch, wait_rows, w_group, ev["ts_ns"], ev["dur_ns"])


def _build_in_c(inputs: _InputsForC, waits: list[tuple[int, int]], handoffs: list[list[int]], n_rows: int,
                origin: int) -> DepGraph | None:
    """The graph :func:`_build`'s definition gives, built by ``_graph.build`` from its inputs as arrays and the
    edges searched for; None where the C part declines (the definition then runs)."""
    native = native_graph()
    if native is None:
        return None
    x = inputs
    # both ends of every wait looked up in one pass (one table of the device rows)
    found = index_in(pa.array([pair[k] for k in (0, 1) for pair in waits], pa.int64()), pc.cast(x.device, pa.int64()))
    r_wait, r_waited = found.slice(0, len(waits)), found.slice(len(waits))
    keep = pc.and_(pc.is_valid(r_wait), pc.is_valid(r_waited))
    r_wait, r_waited = pc.filter(r_wait, keep), pc.filter(r_waited, keep)
    x_row, x_src = (pa.array([pair[k] for pair in handoffs], pa.int64()) for k in (0, 1))

    def q(values: pa.Array | pa.ChunkedArray, fill: int | None = None) -> memoryview:
        values = combined(pc.cast(values, pa.int64()))
        return values_view(pc.fill_null(values, fill) if fill is not None else values, "q")

    out = native.build(
        values_view(x.host, "i"), values_view(x.host_lane, "i"), values_view(x.host_code, "b"),
        values_view(x.lane_gap, "b"),
        q(x.device), q(pc.add(x.device_lane, len(x.host_lanes))), q(pc.add(x.device_group, 1)),
        values_view(x.device_category, "b"), q(x.launch, NONE),
        q(x.wait_rows), q(x.wait_group, NONE), q(r_wait), q(r_waited), q(x_row), q(x_src),
        q(x.ts_ns), q(x.dur_ns),  # the columns as they are (mapped from the cache): read at the rows, not gathered
        n_rows, len(x.host_lanes) + len(x.device_lanes), x.groups + 1, origin, LATENCY_CAP_NS)
    if out is None:
        return None
    # in the ends' place, the nodes whose end is not start + duration and their ends (Ends without a column of ends)
    kind, category, row, lane, chain, dur, start, end_nodes, end_values, link, *link_values = out
    view = frozen_view
    link = view(link, "i")
    linked = {name: Linked(link, view(values, fmt), default)
              for (name, (default, fmt)), values in zip(LINKED.items(), link_values, strict=True)}
    start, dur = view(start, "q"), view(dur, "q")
    lanes = Labels.compact(x.host_lanes + x.device_lanes, view(lane, "i"))
    return DepGraph(kind=view(kind, "b"), category=Labels(CATEGORIES, view(category, "b")), row=view(row, "i"),
                    lane=lanes, dur=dur, chain=view(chain, "i"), link=link, **linked,
                    start=start, end=Ends(start, dur, view(end_nodes, "i"), view(end_values, "q")), origin=origin,
                    threads=ThreadNodes(lanes, x.host_lanes))


def _lane_codes(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray, sep: str) -> tuple[pa.Array, list[str]]:
    """Per row, the number (int32) of its lane ``f"{a}{sep}{b}"`` (0, 1, ... in the order the lanes first occur), and
    the lanes: the strings made once per distinct pair of values."""
    if not len(a):
        return pa.array([], pa.int32()), []
    numbers, pairs = pair_numbers(a, b)
    lanes: dict[str, int] = {}
    number = [lanes.setdefault(f"{x}{sep}{y}", len(lanes)) for x, y in pairs]
    if number == list(range(len(number))):  # each pair its own lane (two values that print alike: not)
        return numbers, list(lanes)
    return combined(pc.take(pa.array(number, pa.int32()), numbers)), list(lanes)
