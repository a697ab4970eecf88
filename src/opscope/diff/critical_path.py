"""Two traces' critical paths side by side: what the time per step that sets each step's length is made of, and
how it moved (a slowdown explained by the category that grew on the path, not by a total that may lie off it)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from opscope.analyses.critical_path import step_paths
from opscope.analyses.depgraph import CATEGORIES
from opscope.model.trace import Trace

SCHEMA = pa.schema([("category", pa.string()), ("base_ns", pa.int64()), ("new_ns", pa.int64()),
                    ("delta_ns", pa.int64()), ("base_share", pa.float64()), ("new_share", pa.float64())])


def critical_path_delta(base: Trace, new: Trace) -> pa.Table:
    """Per category, its mean time per step on each trace's critical paths (the whole trace as one interval where a
    trace has no steps), the change and each side's share of its mean path; largest change first."""
    sides = [_mean_by_category(base), _mean_by_category(new)]
    lengths = [sum(side.values()) for side in sides]
    rows: list[dict[str, Any]] = []
    for category in CATEGORIES:
        b, n = sides[0].get(category, 0), sides[1].get(category, 0)
        if b or n:
            rows.append({"category": category, "base_ns": b, "new_ns": n, "delta_ns": n - b,
                         "base_share": round(b / lengths[0], 4) if lengths[0] else 0.0,
                         "new_share": round(n / lengths[1], 4) if lengths[1] else 0.0})
    rows.sort(key=lambda r: -abs(int(r["delta_ns"])))
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _mean_by_category(trace: Trace) -> dict[str, int]:
    paths = step_paths(trace)
    if not paths:
        return {}
    totals: dict[str, int] = {}
    for path in paths:
        for category, ns in path.categories.items():
            totals[category] = totals.get(category, 0) + ns
    return {category: round(ns / len(paths)) for category, ns in totals.items()}
