"""Per-rank collective-call tables built by hand (the ``COLLECTIVE_CALLS`` schema), for the matching, clock and
timing tests (tests/unit/test_collectives.py and tests/integration/test_collectives_e2e.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from opscope.analyses.collectives import COLLECTIVE_CALLS

DEFAULTS: dict[str, Any] = {
    "pg": "0", "pg_desc": "default_pg", "pg_ranks": "0,1", "group_size": 2, "collective": "allreduce",
    "in_nelems": 256, "out_nelems": 256, "dtype": "Float", "bytes": 1024, "algorithm": "RING", "protocol": "LL",
    "kernel": "ncclKernel_AllReduce_RING_LL_Sum_float", "device": 0, "stream": 7, "step": 1,
    "matched_by": "process group",
}


def call(start_ns: int, end_ns: int, seq: int, **fields: Any) -> dict[str, Any]:
    """One call: the defaults above, these times and position, and any field overridden."""
    row = {**DEFAULTS, "start_ns": start_ns, "end_ns": end_ns, "dur_ns": end_ns - start_ns, "seq": seq, **fields}
    if not row["pg"]:  # no process group recorded: no group ranks either, matched by order
        row["matched_by"] = "order"
        row["pg_ranks"] = fields.get("pg_ranks", "")
    return row


def calls_table(rows: list[dict[str, Any]]) -> pa.Table:
    """A rank's COLLECTIVE_CALLS table of these rows."""
    return pa.table({f.name: [r[f.name] for r in rows] for f in COLLECTIVE_CALLS}, schema=COLLECTIVE_CALLS)


def job(ends: dict[int, list[int]], offsets: dict[int, int], dur: int = 1000, **fields: Any) -> dict[int, pa.Table]:
    """Ranks whose i-th allreduce ends at ``ends[rank][i]`` on a common clock, each rank's clock reading
    ``offsets[rank]`` more (``ends`` per rank allows noise); every kernel lasts ``dur``."""
    out = {}
    for rank, rank_ends in ends.items():
        rows = [call(e + offsets[rank] - dur, e + offsets[rank], i, **fields) for i, e in enumerate(rank_ends)]
        out[rank] = calls_table(rows)
    return out
