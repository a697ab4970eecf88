"""Clock offsets between ranks, from the ends of blocking collectives.

Model: rank r's clock reads o_r more than the reference rank's (o_ref = 0), and a blocking collective (every one
but send/recv/sendrecv) ends at the same instant c_i on all its ranks, up to noise: end_ri = c_i + o_r + e_ri.
The estimate is robust (medians, never means, so one late kernel end cannot drag the others):

1. a start: walk the graph of ranks linked by shared instances outwards from the reference, each new rank's
   offset being its neighbour's plus the median end difference over the instances they share (exact without
   noise);
2. then alternate c_i = median_r(end_ri - o_r) and o_r = median_i(end_ri - c_i), o_ref = 0, until no offset moves
   by half a nanosecond (at most 100 rounds).

Ranks that share no instance with the reference's connected set get no offset. ``offset_uncertainty_ns`` is the
standard error of a median, sqrt(pi/2) x 1.4826 x MAD(residuals) / sqrt(n) (MAD: median absolute deviation of the
rank's residuals end_ri - c_i - o_r, scaled to a normal sigma; n its instances); 0 for the reference (its offset
is 0 by definition), null with fewer than 2 instances. ``end_spread_ns`` is the 90th percentile of |residual|.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.collectives import NON_BLOCKING

CLOCKS = pa.schema([
    ("rank", pa.int64()),
    ("clock_offset_ns", pa.int64()),
    ("offset_uncertainty_ns", pa.int64()),
    ("instances", pa.int64()),
    ("end_spread_ns", pa.int64()),
    ("aligned", pa.bool_()),
])

NOT_POSSIBLE = "clock alignment was not possible: no collective ends to align on"
NOT_ALIGNED = "not aligned (--no-align)"
_SE_MEDIAN = math.sqrt(math.pi / 2) * 1.4826
_ROUNDS = 100


@dataclass
class Clocks:
    """``table`` in the :data:`CLOCKS` schema, one row per rank; ``notes``."""
    table: pa.Table
    notes: list[str] = field(default_factory=list)
    reference: int | None = None


def clock_offsets(long: pa.Table, reference: int | None = None, *, no_align: bool = False,
                  ranks: Iterable[int] | None = None) -> Clocks:
    """Each rank's clock offset from the matched collectives (``match_instances(...).long``); see the module doc.

    ``ranks``: every rank of the job (default: those in ``long``), so that ranks without collectives get a row.
    ``reference``: the rank whose clock the others are put on (default: the smallest rank with usable ends).
    """
    all_ranks = sorted(set(long["rank"].to_pylist()) | {int(r) for r in (ranks or ())})
    if no_align:
        return unaligned(all_ranks)
    by_instance = _usable_ends(long)
    # each rank's ends relative to its own first one: small numbers, so that floats keep sub-nanosecond precision
    # whatever the clocks' epochs; the bases come back as exact integers at the end
    bases: dict[int, int] = {}
    for ends in by_instance.values():
        for rank, end in ends.items():
            bases[rank] = min(end, bases.get(rank, end))
    by_instance = {i: {r: end - bases[r] for r, end in ends.items()} for i, ends in by_instance.items()}
    by_rank: dict[int, dict[int, int]] = {}
    for instance, ends in by_instance.items():
        for rank, end in ends.items():
            by_rank.setdefault(rank, {})[instance] = end
    notes: list[str] = []
    if not by_rank:
        return Clocks(_table(all_ranks, {}, {}), [NOT_POSSIBLE], None)
    if reference is not None and reference not in by_rank:
        notes.append(f"reference rank {reference} has no collective ends to align on; rank {min(by_rank)} is the "
                     "reference instead")
        reference = None
    ref = min(by_rank) if reference is None else reference
    offsets = _start(ref, by_instance, by_rank)
    offsets, converged = _refine(ref, offsets, by_instance, by_rank)
    if not converged:
        notes.append(f"clock offsets still moved after {_ROUNDS} rounds; the last estimate is used")
    stats = _residual_stats(ref, offsets, by_instance, by_rank)
    lost = [r for r in all_ranks if r not in offsets]
    if lost:
        shown = ", ".join(map(str, lost[:16])) + (" ..." if len(lost) > 16 else "")
        notes.append(f"{len(lost)} rank(s) share no blocking collective with reference rank {ref} (directly or "
                     f"through other ranks), so their clocks are not aligned: {shown}")
    rounded = {r: bases[r] - bases[ref] + round(o) for r, o in offsets.items()}
    return Clocks(_table(all_ranks, rounded, stats), notes, ref)


def unaligned(ranks: Iterable[int]) -> Clocks:
    """Zero offsets, not aligned (``--no-align``)."""
    ranks = sorted({int(r) for r in ranks})
    table = pa.table({"rank": ranks, "clock_offset_ns": [0] * len(ranks),
                      "offset_uncertainty_ns": [None] * len(ranks), "instances": [0] * len(ranks),
                      "end_spread_ns": [None] * len(ranks), "aligned": [False] * len(ranks)}, schema=CLOCKS)
    return Clocks(table, [NOT_ALIGNED], None)


def no_offsets(long: pa.Table, ranks: Iterable[int] = ()) -> Clocks:
    """:func:`unaligned` for the ranks of ``long`` and ``ranks`` (``--no-align``)."""
    return unaligned(set(long["rank"].to_pylist()) | {int(r) for r in ranks})


def apply_offsets(long: pa.Table, clocks: Clocks) -> pa.Table:
    """``long`` with ``start_ns``/``end_ns`` put on the reference rank's clock (minus each rank's offset); a rank
    without an offset keeps its own clock."""
    table = clocks.table
    where = pc.index_in(long["rank"], value_set=table["rank"])
    offset = pc.fill_null(pc.take(table["clock_offset_ns"], where), 0)
    out = long
    for name in ("start_ns", "end_ns"):
        out = out.set_column(out.schema.get_field_index(name), name, pc.subtract(long[name], offset))
    return out


# --- helpers -------------------------------------------------------------------------------------------------

def _usable_ends(long: pa.Table) -> dict[int, dict[int, int]]:
    """instance -> {rank: end_ns} of the blocking collectives that at least two ranks have."""
    out: dict[int, dict[int, int]] = {}
    blocking = pc.invert(pc.is_in(long["collective"], value_set=pa.array(NON_BLOCKING, pa.string())))
    rows = long.filter(pc.and_(pc.fill_null(blocking, False), pc.is_valid(long["end_ns"])))
    for instance, rank, end in zip(rows["instance"].to_pylist(), rows["rank"].to_pylist(),
                                   rows["end_ns"].to_pylist()):
        out.setdefault(instance, {})[rank] = end
    return {i: ends for i, ends in out.items() if len(ends) >= 2}


def _start(ref: int, by_instance: dict[int, dict[int, int]], by_rank: dict[int, dict[int, int]]) -> dict[int, float]:
    """Offsets of the ranks reachable from ``ref``: breadth first, each from a known neighbour by the median end
    difference over their shared instances."""
    offsets: dict[int, float] = {ref: 0.0}
    queue = deque([ref])
    visited: set[int] = set()  # instances whose members were looked at: each once, so the walk is linear
    while queue:
        known = queue.popleft()
        mine = by_rank[known]
        neighbours: set[int] = set()
        for instance in mine:
            if instance not in visited:
                visited.add(instance)
                neighbours.update(r for r in by_instance[instance] if r not in offsets)
        for rank in sorted(neighbours):
            theirs = by_rank[rank]
            shared = [theirs[i] - mine[i] for i in mine if i in theirs]
            offsets[rank] = offsets[known] + median(shared)
            queue.append(rank)
    return offsets


def _refine(ref: int, offsets: dict[int, float], by_instance: dict[int, dict[int, int]],
            by_rank: dict[int, dict[int, int]]) -> tuple[dict[int, float], bool]:
    """Alternating medians from the start (only the ranks reached)."""
    current = dict(offsets)
    for _ in range(_ROUNDS):
        centre = _centres(current, by_instance)
        new = {}
        for rank in current:
            diffs = [end - centre[i] for i, end in by_rank[rank].items() if i in centre]
            new[rank] = median(diffs) if diffs else current[rank]
        shift = new[ref]
        new = {r: o - shift for r, o in new.items()}
        moved = max(abs(new[r] - current[r]) for r in new)
        current = new
        if moved < 0.5:
            return current, True
    return current, False


def _centres(offsets: dict[int, float], by_instance: dict[int, dict[int, int]]) -> dict[int, float]:
    """c_i of the instances with at least one rank whose offset is known."""
    centre = {}
    for instance, ends in by_instance.items():
        values = [end - offsets[r] for r, end in ends.items() if r in offsets]
        if values:
            centre[instance] = median(values)
    return centre


def _residual_stats(ref: int, offsets: dict[int, float], by_instance: dict[int, dict[int, int]],
                    by_rank: dict[int, dict[int, int]]) -> dict[int, tuple[int | None, int, int | None]]:
    """rank -> (uncertainty, instances used, p90 |residual|)."""
    centre = _centres(offsets, by_instance)
    out: dict[int, tuple[int | None, int, int | None]] = {}
    for rank in offsets:
        residuals = [end - centre[i] - offsets[rank] for i, end in by_rank[rank].items() if i in centre]
        n = len(residuals)
        if n == 0:
            out[rank] = (None, 0, None)
            continue
        mid = median(residuals)
        mad = median(abs(x - mid) for x in residuals)
        uncertainty = 0 if rank == ref else (round(_SE_MEDIAN * mad / math.sqrt(n)) if n >= 2 else None)
        spread = sorted(abs(x) for x in residuals)[max(0, math.ceil(0.9 * n) - 1)]
        out[rank] = (uncertainty, n, round(spread))
    return out


def _table(ranks: list[int], offsets: dict[int, int], stats: dict[int, tuple[int | None, int, int | None]]) -> pa.Table:
    rows: dict[str, list] = {f.name: [] for f in CLOCKS}
    for rank in ranks:
        uncertainty, n, spread = stats.get(rank, (None, 0, None))
        rows["rank"].append(rank)
        rows["clock_offset_ns"].append(offsets.get(rank))
        rows["offset_uncertainty_ns"].append(uncertainty)
        rows["instances"].append(n)
        rows["end_spread_ns"].append(spread)
        rows["aligned"].append(rank in offsets)
    return pa.table(rows, schema=CLOCKS)
