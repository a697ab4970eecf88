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
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import like
from opscope.analyses.collectives import NON_BLOCKING, collective_calls_and_rows
from opscope.analyses.depgraph import (
    CATEGORIES,
    COMMUNICATION,
    DEVICE,
    LINKED,
    NONE,
    ON_CHAIN,
    DepGraph,
    Ends,
    Labels,
    dependency_graph,
    frozen_view,
    linked_columns,
    node_column,
)
from opscope.analyses.job.clocks import clock_offsets
from opscope.analyses.job.match import match_instances
from opscope.analyses.replay import Replay, replay, step_nodes
from opscope.analyses.whatif import Change, changed_graph, factors, with_change_pct
from opscope.model.buffers import true_positions
from opscope.model.trace import Trace

#: the lane of the join nodes
JOIN_LANE = "job: collectives"
_COMM_CODE = CATEGORIES.index(COMMUNICATION)
_FIELDS = ("kind", "category", "row", "lane", "dur", "chain", "chain_lag", "extra", "extra_lag", "after",
           "after_lag", "unexplained", "unexplained_on", "start", "end")
_REFERENCES = ("chain", "extra", "after")
#: the formats of the columns kept per node (the link columns': :data:`LINKED`)
_FORMATS = {"kind": "b", "category": "b", "row": "i", "lane": "i", "chain": "i"}


@dataclass
class _Join:
    """One collective instance joined across its members: per member rank, its collective node and the transfer's
    duration and lag after the join."""

    instance: int
    members: dict[int, int]
    transfer: dict[int, tuple[int, int]] = field(default_factory=dict)
    arrival: int = 0  #: the last member's arrival, on the job's clock
    dropped: bool = False  #: left unjoined (the ranks' orders of collectives contradict each other here)

    def nodes(self) -> int:
        """Its join nodes: each depends on up to three (the first on three arrivals, each next one on the one
        before and two more arrivals)."""
        m = len(self.members)
        return 0 if self.dropped else 1 if m <= 3 else 1 + (m - 2) // 2


#: the job's node order, entry by entry: ("rank", rank, first, stop), a run of a rank's nodes; ("join", instance, 0,
#: 0), a join's nodes and its members' transfers; ("transfer", instance, rank, 0), a dropped join's member's transfer
_Run = tuple[str, int, int, int]


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
    plan: list[_Run]
    joins_by_instance: dict[int, _Join]
    joins: int
    contradicted: int
    unjoined: int
    notes: list[str]


def job_graph(traces: Mapping[int, Trace], graphs: Mapping[int, DepGraph] | None = None) -> JobGraph:
    """The job's dependency graph from each rank's trace (rank -> trace; see the module). ``graphs``: per rank, a
    graph to use instead of its trace's (the same nodes, other lags: :func:`opscope.analyses.whatif.changed_graph`);
    the collectives are matched and the clocks aligned on the traces, so the nodes come in the same order."""
    ranks = sorted(traces)
    graphs = {rank: (graphs or {}).get(rank) or dependency_graph(traces[rank]) for rank in ranks}
    joins, notes, offsets = _joins(traces, graphs)
    by_instance = {j.instance: j for j in joins}
    plan = _plan(ranks, graphs, joins)
    arrival_at, transfer_at, join_at = _positions(plan, by_instance)
    node_of = {rank: _node_map(len(graphs[rank]), arrival_at[rank], transfer_at.get(rank, {})) for rank in ranks}
    lanes: list[str] = []
    lane_base: dict[int, int] = {}
    for rank in ranks:
        lane_base[rank] = len(lanes)
        lanes += [f"rank {rank} {name}" for name in graphs[rank].lane.names]
    lanes.append(JOIN_LANE)
    origin = min((graphs[r].origin - offsets[r] for r in ranks if len(graphs[r])), default=0)
    columns = {rank: _rank_columns(graphs[rank], joins, rank, node_of[rank], offsets[rank],
                                   graphs[rank].origin - offsets[rank] - origin, lane_base[rank]) for rank in ranks}
    fields: dict[str, list[int]] = {name: [] for name in _FIELDS}
    for what, key, first, stop in plan:
        if what == "rank":
            for name in _FIELDS:
                fields[name] += columns[key][name][first:stop]
            continue
        join = by_instance[key]
        nodes = _join_nodes(join, arrival_at, join_at.get(key, []), len(lanes) - 1) if what == "join" else []
        members = sorted(join.members) if what == "join" else [first]
        nodes += [_transfer(join, rank, graphs[rank], offsets[rank], lane_base[rank], arrival_at[rank],
                            join_at.get(key, [])) for rank in members]
        for name in _FIELDS:
            fields[name] += [node[name] for node in nodes]
    threads: dict[str, Sequence[int]] = {
        f"rank {rank} {name}": frozen_view(array("i", [node_of[rank][n] for n in nodes]), "i")
        for rank in ranks for name, nodes in graphs[rank].threads.items()}
    view = {name: frozen_view(array(_FORMATS.get(name, "q"), fields[name]), _FORMATS.get(name, "q"))
            for name in _FIELDS if name not in LINKED}
    link, linked = linked_columns({name: fields[name] for name in LINKED})
    graph = DepGraph(kind=view["kind"], category=Labels(CATEGORIES, view["category"]), row=view["row"],
                     lane=Labels(lanes, view["lane"]), dur=view["dur"], chain=view["chain"], link=link, **linked,
                     start=view["start"], end=Ends.of(view["start"], view["dur"], view["end"]), origin=origin,
                     threads=threads)
    contradicted = sum(1 for j in joins if not j.dropped for _, lag in j.transfer.values() if lag < 0)
    unjoined = sum(1 for j in joins if j.dropped)
    if contradicted:
        notes.append(f"{contradicted} member(s) of joined collectives end before the last member arrives on the "
                     "aligned clocks (the clocks disagree by more than the transfer): those keep their measured span")
    if unjoined:
        notes.append(f"{unjoined} collective instance(s) left unjoined: the ranks' orders of collectives contradict "
                     "each other there")
    return JobGraph(graph, ranks, dict(traces), graphs, node_of, plan, by_instance, len(joins) - unjoined,
                    contradicted, unjoined, notes)


def job_values(job: JobGraph, per_rank: Mapping[int, Sequence[float] | None], fill: float = 1.0,
               ) -> memoryview | None:
    """A per-node float64 column of the job graph from one per rank's own graph (a transfer takes its collective
    node's value; a join node ``fill``); a rank's None is 1 for each of its nodes, None from every rank None."""
    if all(per_rank[rank] is None for rank in job.ranks):
        return None
    values = {rank: list(per_rank[rank] or [1.0] * len(job.graphs[rank])) for rank in job.ranks}
    out: list[float] = []
    for what, key, first, stop in job.plan:
        if what == "rank":
            out += values[key][first:stop]
            continue
        join = job.joins_by_instance[key]
        members = sorted(join.members) if what == "join" else [first]
        out += [fill] * (join.nodes() if what == "join" else 0)
        out += [values[rank][join.members[rank]] for rank in members]
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
    nodes = true_positions(pc.and_(pc.equal(kind, like(DEVICE, kind)),
                                   pc.equal(category, like(_COMM_CODE, category)))).to_pylist()
    return {graph.row[n]: n for n in nodes}


def _plan(ranks: list[int], graphs: Mapping[int, DepGraph], joins: list[_Join]) -> list[_Run]:
    """The job's node order: each rank's nodes in its own order, cut before the first node that needs a transfer
    whose join is not placed yet; a join (its join nodes, then its members' transfers) placed once every member has
    arrived. Where every rank waits on a join another has not reached (their orders of collectives contradict each
    other), the earliest such join is dropped: its transfers follow their own arrival alone."""
    of_node = {rank: {j.members[rank]: j for j in joins if rank in j.members} for rank in ranks}
    joined = {rank: sorted(of_node[rank]) for rank in ranks}
    needs = {rank: _needs(graphs[rank], of_node[rank]) for rank in ranks}
    at = dict.fromkeys(ranks, 0)
    next_need = dict.fromkeys(ranks, 0)
    arrived: dict[int, int] = {}
    placed: set[int] = set()
    plan: list[_Run] = []

    def run(rank: int, stop: int) -> None:
        plan.append(("rank", rank, at[rank], stop))
        ready = []
        for c in joined[rank][bisect.bisect_left(joined[rank], at[rank]):bisect.bisect_left(joined[rank], stop)]:
            join = of_node[rank][c]
            if join.dropped:
                plan.append(("transfer", join.instance, rank, 0))
                continue
            arrived[join.instance] = arrived.get(join.instance, 0) + 1
            if arrived[join.instance] == len(join.members):
                ready.append(join)
        at[rank] = stop
        for join in ready:
            plan.append(("join", join.instance, 0, 0))
            placed.add(join.instance)

    while any(at[r] < len(graphs[r]) for r in ranks):
        moved = False
        for rank in ranks:
            while at[rank] < len(graphs[rank]):
                waits = needs[rank]
                while next_need[rank] < len(waits) and (waits[next_need[rank]][0] < at[rank] or all(
                        _done(j, rank, at[rank], placed) for j in waits[next_need[rank]][1])):
                    next_need[rank] += 1
                stop = waits[next_need[rank]][0] if next_need[rank] < len(waits) else len(graphs[rank])
                if stop == at[rank]:
                    break
                run(rank, stop)
                moved = True
        if not moved:
            blocking = [j for r in ranks if next_need[r] < len(needs[r]) for j in needs[r][next_need[r]][1]
                        if j.instance not in placed and not j.dropped]
            dropped = min(blocking, key=lambda j: j.instance)
            dropped.dropped = True
            for r, node in dropped.members.items():  # its transfers follow their own arrival alone
                dropped.transfer[r] = (graphs[r].end[node] - graphs[r].start[node], 0)
                if node < at[r]:
                    plan.append(("transfer", dropped.instance, r, 0))
    return plan


def _done(join: _Join, rank: int, at: int, placed: set[int]) -> bool:
    """Whether a join's transfer on ``rank`` is in the plan: the join is placed, or it was dropped and the rank's
    arrival (then its transfer) is already in."""
    return join.instance in placed or (join.dropped and join.members[rank] < at)


def _needs(graph: DepGraph, joined: Mapping[int, _Join]) -> list[tuple[int, list[_Join]]]:
    """The nodes that depend on a joined collective's end (now its transfer's), in order, with those joins."""
    if not joined:
        return []
    nodes = pa.array(sorted(joined), pa.int32())
    out: dict[int, list[_Join]] = {}
    for name in _REFERENCES:
        column = node_column(getattr(graph, name), pa.int32())
        for node in true_positions(pc.is_in(column, value_set=nodes)).to_pylist():
            out.setdefault(node, []).append(joined[getattr(graph, name)[node]])
    return sorted(out.items())


def _positions(plan: list[_Run], joins: Mapping[int, _Join],
               ) -> tuple[dict[int, array], dict[int, dict[int, int]], dict[int, list[int]]]:
    """Per rank, the job position of each of its nodes (a joined collective's node: its arrival); per rank, its
    transfers' positions (collective node -> position); per join instance, its join nodes' positions."""
    arrival_at: dict[int, array] = {}
    transfer_at: dict[int, dict[int, int]] = {}
    join_at: dict[int, list[int]] = {}
    position = 0
    for what, key, first, stop in plan:
        if what == "rank":
            positions = arrival_at.setdefault(key, array("i"))
            positions.extend(range(position, position + stop - first))
            position += stop - first
            continue
        join = joins[key]
        if what == "join":
            join_at[key] = list(range(position, position + join.nodes()))
            position += join.nodes()
        for rank in (sorted(join.members) if what == "join" else [first]):
            transfer_at.setdefault(rank, {})[join.members[rank]] = position
            position += 1
    return arrival_at, transfer_at, join_at


def _node_map(n: int, arrival_at: array, transfer_at: Mapping[int, int]) -> array:
    """Per node of a rank's graph, its job node (a joined collective's: its transfer, which holds its end)."""
    out = array("i", arrival_at[:n])
    for node, position in transfer_at.items():
        out[node] = position
    return out


def _rank_columns(graph: DepGraph, joins: list[_Join], rank: int, node_of: array, offset: int, root_shift: int,
                  lane_base: int) -> dict[str, list[int]]:
    """A rank's node columns for the job: references as job nodes, times on the job's clock, root lags from the
    job's origin, lanes among the job's; a joined collective's node is its arrival (no duration)."""
    joined = [join.members[rank] for join in joins if rank in join.members]
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
        out[name] = values
    return out


def _transfer(join: _Join, rank: int, graph: DepGraph, offset: int, lane_base: int, arrival_at: array,
              join_at: list[int]) -> dict[str, int]:
    """A member's transfer node: after its arrival and (unless dropped) the instance's last join node."""
    c = join.members[rank]
    duration, lag = join.transfer[rank]
    end = graph.end[c] - offset
    return {"kind": DEVICE, "category": _COMM_CODE, "row": graph.row[c], "lane": lane_base + graph.lane.codes[c],
            "dur": duration, "chain": arrival_at[c], "chain_lag": 0,
            "extra": join_at[-1] if join_at and not join.dropped else NONE, "extra_lag": 0 if join.dropped else lag,
            "after": NONE, "after_lag": 0, "unexplained": 0, "unexplained_on": ON_CHAIN, "start": end - duration,
            "end": end}


def _join_nodes(join: _Join, arrival_at: Mapping[int, array], positions: list[int], lane: int,
                ) -> list[dict[str, int]]:
    """The join nodes of one instance: the first after up to three arrivals, each next after the one before and
    two more arrivals."""
    pending = [arrival_at[r][node] for r, node in sorted(join.members.items())]
    nodes: list[dict[str, int]] = []
    while pending:
        take = 3 if not nodes else 2
        deps = ([positions[len(nodes) - 1]] if nodes else []) + pending[:take]
        pending = pending[take:]
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
    duration, lag, graphs, picked = {}, {}, {}, [0] * len(changes)
    for rank in job.ranks:
        duration[rank], lag[rank], counts = factors(job.traces[rank], job.graphs[rank], changes, rank)
        picked = [a + b for a, b in zip(picked, counts)]
        graphs[rank] = changed_graph(job.traces[rank], job.graphs[rank], changes, rank)
    moved = any(graphs[r] is not job.graphs[r] for r in job.ranks)
    with_lags = job_graph(traces, graphs) if moved else job  # the same nodes in the same order, other lags
    base = replay_job(job)
    changed = replay_job(with_lags, job_values(job, duration), job_values(job, lag))
    return with_change_pct(rank_steps(job, base, changed)), picked, job
