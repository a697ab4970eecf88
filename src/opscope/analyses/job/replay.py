"""A job's dependency graph: every rank's graph (:mod:`opscope.analyses.depgraph`) on one clock, joined at the
collectives, so that a what-if on one rank moves the others.

A blocking collective ends when its last member has arrived, plus its transfer. Each rank's collective node (the
NCCL/RCCL kernel) is split in two: its **arrival** (the node itself, now of no duration, with the edges it had) and
its **transfer** (a new node after it, holding the collective's end: every edge that left the kernel's end leaves the
transfer's). A **join** node per collective instance depends on every member's arrival; each member's transfer starts
at the join (the last arrival) and lasts from there to the member's measured end. So the measured times come back,
and a member that arrives earlier or later moves every member's end.

Times are put on one clock with the offsets :func:`opscope.analyses.job.clocks.clock_offsets` estimates from the
collectives' ends. Where those offsets leave a member's measured end before the last arrival (clocks that disagree
by more than the collective's transfer), that member's transfer keeps its measured span and its start follows its
own arrival; such joins are counted (``contradicted``). Collectives that are not a rendezvous (send, recv) and
instances with one member stay as they are. Should the ranks' orders of collectives contradict each other (a cycle),
the joins that close it are dropped and counted (``unjoined``).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.collectives import NON_BLOCKING, collective_calls_and_rows
from opscope.analyses.depgraph import (
    CATEGORIES,
    COMMUNICATION,
    DEVICE,
    NONE,
    ON_CHAIN,
    DepGraph,
    Labels,
    dependency_graph,
    frozen_view,
)
from opscope.analyses.job.clocks import clock_offsets
from opscope.analyses.job.match import match_instances
from opscope.analyses.replay import Replay, replay, step_nodes
from opscope.analyses.whatif import Change, factors, idle_lags, with_change_pct
from opscope.model.buffers import true_positions
from opscope.model.trace import Trace

#: the lane of the join nodes
JOIN_LANE = "job: collectives"
_COMM_CODE = CATEGORIES.index(COMMUNICATION)
_FIELDS = ("kind", "category", "row", "lane", "dur", "chain", "chain_lag", "extra", "extra_lag", "after",
           "after_lag", "unexplained", "unexplained_on", "start", "end")
_REFERENCES = ("chain", "extra", "after")
_FORMATS = {"kind": "b", "category": "b", "unexplained_on": "b", "row": "i", "lane": "i", "chain": "i",
            "extra": "i", "after": "i"}


@dataclass
class _Join:
    """One collective instance joined across its members: per member rank, its collective node and the transfer's
    duration and lag after the join."""

    instance: int
    members: dict[int, int]
    transfer: dict[int, tuple[int, int]] = field(default_factory=dict)
    arrival: int = 0  #: the last member's arrival, on the job's clock
    dropped: bool = False  #: left unjoined (the ranks' orders of collectives contradict each other here)


@dataclass
class JobGraph:
    """The job's graph (``graph``: a :class:`DepGraph` whose ``start``/``end`` are on the reference rank's clock),
    and per rank the job node of each of its own graph's nodes (``node_of[rank][node]``; a collective's node maps to
    its transfer, which holds its end)."""

    graph: DepGraph
    ranks: list[int]
    traces: dict[int, Trace]
    graphs: dict[int, DepGraph]
    node_of: Mapping[int, Sequence[int]]
    #: the job's node order: runs (rank, first, stop) of a rank's nodes in its order with transfers inserted, and
    #: joins (None, instance, nodes)
    plan: list[tuple[int | None, int, int]]
    #: per rank, its collective nodes that were joined (ascending)
    joined: dict[int, list[int]]
    joins: int
    contradicted: int
    unjoined: int
    notes: list[str]


def job_graph(traces: Mapping[int, Trace],
              lags: Mapping[int, tuple[Sequence[int], Sequence[int]]] | None = None) -> JobGraph:
    """The job's dependency graph from each rank's trace (rank -> trace; see the module). ``lags``: per rank, chain
    and extra lags to use instead of its graph's (:func:`opscope.analyses.whatif.idle_lags`)."""
    ranks = sorted(traces)
    graphs = {rank: dependency_graph(traces[rank]) for rank in ranks}
    if lags:
        graphs = {rank: replace(graph, chain_lag=lags[rank][0], extra_lag=lags[rank][1]) if rank in lags else graph
                  for rank, graph in graphs.items()}
    joins, notes, offsets = _joins(traces, graphs)
    origin = min((graphs[r].origin - offsets[r] for r in ranks if len(graphs[r])), default=0)
    joined = {r: sorted(j.members[r] for j in joins if r in j.members) for r in ranks}
    joins_of = {r: [j for j in sorted(joins, key=lambda j: j.members.get(r, -1)) if r in j.members] for r in ranks}
    plan, unjoined = _plan(ranks, graphs, joined, joins_of)
    positions, join_positions = _positions(ranks, graphs, joined, plan)
    node_of = {rank: _node_map(len(graphs[rank]), joined[rank], positions[rank]) for rank in ranks}
    lanes: list[str] = []
    lane_base: dict[int, int] = {}
    for rank in ranks:
        lane_base[rank] = len(lanes)
        lanes += [f"rank {rank} {name}" for name in graphs[rank].lane.names]
    lanes.append(JOIN_LANE)
    ext = {rank: _extended(rank, graphs[rank], joins_of[rank], node_of[rank], positions[rank], join_positions,
                           offsets[rank], graphs[rank].origin - offsets[rank] - origin, lane_base[rank])
           for rank in ranks}
    join_nodes = {j.instance: _join_nodes(j, positions, joined, join_positions.get(j.instance, []), len(lanes) - 1)
                  for j in joins}
    fields: dict[str, list[int]] = {name: [] for name in _FIELDS}
    for owner, first, stop in plan:
        for name in _FIELDS:
            if owner is None:
                fields[name] += [node[name] for node in join_nodes[first]]
            else:
                fields[name] += ext[owner][name][first:stop]
    threads: dict[str, Sequence[int]] = {
        f"rank {rank} {name}": frozen_view(array("i", [node_of[rank][n] for n in nodes]), "i")
        for rank in ranks for name, nodes in graphs[rank].threads.items()}
    view = {name: frozen_view(array(_FORMATS.get(name, "q"), fields[name]), _FORMATS.get(name, "q"))
            for name in _FIELDS}
    graph = DepGraph(kind=view["kind"], category=Labels(CATEGORIES, view["category"]), row=view["row"],
                     lane=Labels(lanes, view["lane"]), dur=view["dur"], chain=view["chain"],
                     chain_lag=view["chain_lag"], extra=view["extra"], extra_lag=view["extra_lag"],
                     after=view["after"], after_lag=view["after_lag"], unexplained=view["unexplained"],
                     unexplained_on=view["unexplained_on"], start=view["start"], end=view["end"], origin=origin,
                     threads=threads)
    contradicted = sum(1 for j in joins for _, lag in j.transfer.values() if lag < 0)
    if contradicted:
        notes.append(f"{contradicted} member(s) of joined collectives end before the last member arrives on the "
                     "aligned clocks (the clocks disagree by more than the transfer): those keep their measured span")
    if unjoined:
        notes.append(f"{unjoined} collective instance(s) left unjoined: the ranks' orders of collectives contradict "
                     "each other there")
    return JobGraph(graph, ranks, dict(traces), graphs, node_of, plan, joined, len(joins) - unjoined, contradicted,
                    unjoined, notes)


def job_values(job: JobGraph, per_rank: Mapping[int, Sequence[float]], fill: float = 1.0) -> memoryview:
    """A per-node float64 column of the job graph from one per rank's own graph (a transfer takes its collective
    node's value; a join ``fill``)."""
    extended = {}
    for rank in job.ranks:
        values = list(per_rank[rank])
        extended[rank] = _insert(values, job.joined[rank], [values[c] for c in job.joined[rank]])
    out: list[float] = []
    for owner, first, stop in job.plan:
        out += [fill] * stop if owner is None else extended[owner][first:stop]
    return frozen_view(array("d", out), "d")


def rank_steps(job: JobGraph, replayed: Replay, changed: Replay) -> pa.Table:
    """Per rank and step: measured, replayed with no change and predicted with ``changed``."""
    rows: dict[str, list] = {"rank": [], "step": [], "measured_ns": [], "replayed_ns": [], "predicted_ns": []}
    for rank in job.ranks:
        nodes = step_nodes(job.traces[rank], job.graphs[rank])
        where = job.node_of[rank]
        for step, measured, first, last in zip(nodes.steps, nodes.measured, nodes.first, nodes.last):
            a, b = where[first], where[last]
            rows["rank"].append(rank)
            rows["step"].append(step)
            rows["measured_ns"].append(measured)
            rows["replayed_ns"].append(replayed.end[b] - replayed.start[a])
            rows["predicted_ns"].append(changed.end[b] - changed.start[a])
    return pa.table(rows, schema=pa.schema([("rank", pa.int64()), ("step", pa.int64()), ("measured_ns", pa.int64()),
                                            ("replayed_ns", pa.int64()), ("predicted_ns", pa.int64())]))


def replay_job(job: JobGraph, factor: Sequence[float] | None = None, lag_factor: Sequence[float] | None = None,
               ) -> Replay:
    """:func:`opscope.analyses.replay.replay` of the job's graph."""
    return replay(job.graph, factor, lag_factor)


# --- the joins ---------------------------------------------------------------------------------------------------

def _joins(traces: Mapping[int, Trace], graphs: Mapping[int, DepGraph],
           ) -> tuple[list[_Join], list[str], dict[int, int]]:
    """The collective instances to join (every blocking one with two members or more whose nodes are in the
    graphs), the matching's notes, and each rank's clock offset (its clock minus the reference's)."""
    calls, rows = {}, {}
    for rank, trace in traces.items():
        calls[rank], rows[rank] = collective_calls_and_rows(trace)
    matched = match_instances(calls)
    notes = list(matched.notes)
    long = matched.long
    clocks = clock_offsets(long, ranks=traces)
    notes += clocks.notes
    offsets = dict(zip(clocks.table["rank"].to_pylist(), clocks.table["clock_offset_ns"].to_pylist()))
    offsets = {rank: offsets.get(rank) or 0 for rank in traces}
    # a long row back to its event: each rank's calls by (start, end, device), in order
    row_of: dict[int, dict[tuple, list[int]]] = {}
    for rank, table in calls.items():
        keys = zip(table["start_ns"].to_pylist(), table["end_ns"].to_pylist(), table["device"].to_pylist())
        for key, row in zip(keys, rows[rank]):
            row_of.setdefault(rank, {}).setdefault(key, []).append(row)
    node_of_row = {rank: _comm_nodes(graph) for rank, graph in graphs.items()}
    members: dict[int, dict[int, int]] = {}
    blocking = pc.invert(pc.is_in(long["collective"], value_set=pa.array(NON_BLOCKING, pa.string()))).to_pylist()
    for instance, rank, start, end, device, keep in zip(
            long["instance"].to_pylist(), long["rank"].to_pylist(), long["start_ns"].to_pylist(),
            long["end_ns"].to_pylist(), long["device"].to_pylist(), blocking):
        candidates = row_of.get(rank, {}).get((start, end, device))
        if not keep or not candidates:
            continue
        node = node_of_row[rank].get(candidates.pop(0))
        if node is not None:
            members.setdefault(instance, {})[rank] = node
    joins = []
    for instance in sorted(members):
        nodes = members[instance]
        if len(nodes) < 2:
            continue
        join = _Join(instance, nodes)
        arrivals = {r: graphs[r].start[n] - offsets[r] for r, n in nodes.items()}
        join.arrival = last = max(arrivals.values())
        for r, n in nodes.items():
            end = graphs[r].end[n] - offsets[r]
            join.transfer[r] = (end - last, 0) if end >= last else (end - arrivals[r], arrivals[r] - last)
        joins.append(join)
    return joins, notes, offsets


def _comm_nodes(graph: DepGraph) -> dict[int, int]:
    """Event row -> node of the graph's collective work."""
    kind = pa.Array.from_buffers(pa.int8(), len(graph), [None, pa.py_buffer(graph.kind)])
    category = pa.Array.from_buffers(pa.int8(), len(graph), [None, pa.py_buffer(graph.category.codes)])
    nodes = true_positions(pc.and_(pc.equal(kind, DEVICE), pc.equal(category, _COMM_CODE))).to_pylist()
    return {graph.row[n]: n for n in nodes}


def _plan(ranks: list[int], graphs: Mapping[int, DepGraph], joined: Mapping[int, list[int]],
          joins_of: Mapping[int, list[_Join]]) -> tuple[list[tuple[int | None, int, int]], int]:
    """The job's node order: runs ``(rank, first, stop)`` of each rank's nodes (in its order with transfers
    inserted) and joins ``(None, instance, nodes)``, each join after every member's arrival and before any member's
    transfer. Returns it and how many joins were dropped to break a cycle."""
    sizes = {rank: len(graphs[rank]) + len(joined[rank]) for rank in ranks}
    # per rank, the position of each transfer (in its order with transfers inserted) and its join
    stops = {rank: [(c + k + 1, join) for k, (c, join) in enumerate(zip(joined[rank], joins_of[rank]))]
             for rank in ranks}
    at = dict.fromkeys(ranks, 0)
    next_stop = dict.fromkeys(ranks, 0)
    arrived: dict[int, int] = {}
    placed: set[int] = set()
    plan: list[tuple[int | None, int, int]] = []
    dropped = 0
    while any(at[r] < sizes[r] for r in ranks):
        moved = False
        for rank in ranks:
            while at[rank] < sizes[rank]:
                if next_stop[rank] == len(stops[rank]):
                    plan.append((rank, at[rank], sizes[rank]))
                    at[rank], moved = sizes[rank], True
                    break
                position, join = stops[rank][next_stop[rank]]
                if at[rank] < position:  # up to and with the arrival
                    plan.append((rank, at[rank], position))
                    at[rank], moved = position, True
                    arrived[join.instance] = arrived.get(join.instance, 0) + 1
                if join.instance not in placed:
                    if arrived.get(join.instance, 0) < len(join.members):
                        break
                    plan.append((None, join.instance, _join_count(len(join.members))))
                    placed.add(join.instance)
                next_stop[rank] += 1
        if not moved:  # every rank waits on a join another has not reached: drop the earliest such join
            waiting = min((stops[r][next_stop[r]][1] for r in ranks if next_stop[r] < len(stops[r])),
                          key=lambda j: j.instance)
            placed.add(waiting.instance)
            for r, node in waiting.members.items():  # its transfers follow their own arrival alone
                waiting.transfer[r] = (graphs[r].end[node] - graphs[r].start[node], 0)
            waiting.dropped = True
            dropped += 1
    return plan, dropped


def _join_count(members: int) -> int:
    """Join nodes for a collective of ``members``: each depends on up to three nodes (the first on three arrivals,
    each next one on the one before and two more)."""
    return 1 if members <= 3 else 1 + (members - 2) // 2


def _positions(ranks: list[int], graphs: Mapping[int, DepGraph], joined: Mapping[int, list[int]],
               plan: list[tuple[int | None, int, int]]) -> tuple[dict[int, array], dict[int, list[int]]]:
    """Per rank, the job position of each of its nodes in its order with transfers inserted; per joined instance,
    its join nodes' positions."""
    positions = {rank: array("i", bytes(4 * (len(graphs[rank]) + len(joined[rank])))) for rank in ranks}
    joins: dict[int, list[int]] = {}
    position = 0
    for owner, first, stop in plan:
        if owner is None:
            joins[first] = list(range(position, position + stop))
            position += stop
            continue
        positions[owner][first:stop] = array("i", range(position, position + stop - first))
        position += stop - first
    return positions, joins


def _node_map(n: int, joined: list[int], positions: array) -> array:
    """Per node of a rank's graph, its job node (a collective's: its transfer, which holds its end)."""
    out = array("i")
    start = 0
    for k, c in enumerate(joined):
        out.extend(positions[start + k:c + 1 + k])
        out[c] = positions[c + k + 1]
        start = c + 1
    out.extend(positions[start + len(joined):n + len(joined)])
    return out


def _insert(values: list, joined: list[int], inserted: list) -> list:
    """``values`` with ``inserted[k]`` put right after index ``joined[k]``."""
    out: list = []
    previous = 0
    for c, value in zip(joined, inserted):
        out += values[previous:c + 1]
        out.append(value)
        previous = c + 1
    out += values[previous:]
    return out


def _extended(rank: int, graph: DepGraph, joins: list[_Join], node_of: array, positions: array,
              join_positions: Mapping[int, list[int]], offset: int, root_shift: int, lane_base: int,
              ) -> dict[str, list[int]]:
    """A rank's node columns in its order with transfers inserted: references as job nodes, times on the job's
    clock, root lags from the job's origin, lanes among the job's."""
    joined = [join.members[rank] for join in joins]
    chain = graph.chain
    out: dict[str, list[int]] = {}
    for name in _FIELDS:
        if name == "category":
            values = list(graph.category.codes)
        elif name == "lane":
            values = [lane_base + code for code in graph.lane.codes]
        else:
            values = list(getattr(graph, name))
        if name in _REFERENCES:
            values = [node_of[v] if v != NONE else NONE for v in values]
        elif name == "chain_lag":
            values = [lag + root_shift if prev == NONE else lag for lag, prev in zip(values, chain)]
        elif name in ("start", "end"):
            values = [v - offset for v in values]
        if name == "dur":
            for c in joined:
                values[c] = 0  # the arrival: the collective's time is its transfer's
        elif name == "end":
            for c in joined:
                values[c] = graph.start[c] - offset
        inserted = []
        for k, (c, join) in enumerate(zip(joined, joins)):
            duration, lag = join.transfer[rank]
            end = graph.end[c] - offset
            last_join = join_positions.get(join.instance)
            transfer = {"kind": DEVICE, "category": _COMM_CODE, "row": graph.row[c],
                        "lane": lane_base + graph.lane.codes[c], "dur": duration,
                        "chain": positions[c + k],  # its arrival
                        "chain_lag": 0, "extra": last_join[-1] if last_join else NONE, "extra_lag": lag,
                        "after": NONE, "after_lag": 0, "unexplained": 0, "unexplained_on": ON_CHAIN,
                        "start": end - duration, "end": end}
            inserted.append(transfer[name])
        out[name] = _insert(values, joined, inserted)
    return out


def _join_nodes(join: _Join, positions: Mapping[int, array], joined: Mapping[int, list[int]], own: list[int],
                lane: int) -> list[dict[str, int]]:
    """The join nodes of one instance: the first after up to three arrivals, each next after the one before and
    two more arrivals."""
    if join.dropped:
        return []
    # an arrival is the collective's node itself (its transfer comes right after it in its rank's order)
    pending = [positions[r][node + bisect.bisect_left(joined[r], node)] for r, node in sorted(join.members.items())]
    nodes: list[dict[str, int]] = []
    while pending:
        deps = ([own[len(nodes) - 1]] if nodes else []) + pending[:3 if not nodes else 2]
        pending = pending[3 if not nodes else 2:]
        deps += [NONE] * (3 - len(deps))
        nodes.append({"kind": DEVICE, "category": _COMM_CODE, "row": NONE, "lane": lane, "dur": 0,
                      "chain": deps[0], "chain_lag": 0, "extra": deps[1], "extra_lag": 0, "after": deps[2],
                      "after_lag": 0, "unexplained": 0, "unexplained_on": ON_CHAIN, "start": join.arrival,
                      "end": join.arrival})
    return nodes


def job_whatif_table(traces: Mapping[int, Trace], changes: Sequence[Change]) -> tuple[pa.Table, list[int], JobGraph]:
    """Per rank and step of a job: measured, replayed with no change and predicted with ``changes`` (each applied to
    the ranks it names), and the change against the replay (%); how many nodes each change picked; the graph."""
    job = job_graph(traces)
    duration, lag, lags, picked = {}, {}, {}, [0] * len(changes)
    for rank in job.ranks:
        duration[rank], lag[rank], counts = factors(job.traces[rank], job.graphs[rank], changes, rank)
        picked = [a + b for a, b in zip(picked, counts)]
        lags[rank] = idle_lags(job.graphs[rank], changes, rank)
    moved = any(lags[r][0] is not job.graphs[r].chain_lag for r in job.ranks)
    with_lags = job_graph(traces, lags) if moved else job  # the same nodes in the same order, other lags
    base = replay_job(job)
    changed = replay_job(with_lags, job_values(job, duration), job_values(job, lag))
    return with_change_pct(rank_steps(job, base, changed)), picked, job
