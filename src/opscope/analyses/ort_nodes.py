"""Time per graph node in an ONNX Runtime profile (for ``opscope graph MODEL.onnx --profile``).

ONNX Runtime writes one Chrome-trace slice per node run, in category ``Node`` and named
``<node name>_kernel_time`` (``_fence_before``/``_fence_after`` slices are not the node's work and are left out).
The profile is read by opscope's readers like any trace; this only groups those slices by node.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.trace import Trace

KERNEL_SUFFIX = "_kernel_time"


def node_times(trace: Trace) -> pa.Table:
    """One row per profiled node: ``node`` (its graph name), ``runs``, ``time_ns`` (sum of its kernel slices),
    in first-run order. Empty when the trace holds no ONNX Runtime node slices."""
    events = trace.select(["name", "ts_ns", "dur_ns"])
    names = pc.cast(events["name"], pa.string())
    kernel = pc.fill_null(pc.ends_with(names, KERNEL_SUFFIX), False)
    rows = pa.table({"name": pc.filter(names, kernel), "ts": pc.filter(events["ts_ns"], kernel),
                     "dur": pc.filter(events["dur_ns"], kernel)})
    if rows.num_rows == 0:
        return pa.table({"node": pa.array([], pa.string()), "runs": pa.array([], pa.int64()),
                         "time_ns": pa.array([], pa.int64())})
    grouped = rows.group_by("name", use_threads=False).aggregate([("dur", "count"), ("dur", "sum"), ("ts", "min")])
    grouped = grouped.sort_by([("ts_min", "ascending"), ("name", "ascending")])
    nodes = [n[: -len(KERNEL_SUFFIX)] for n in grouped["name"].to_pylist()]
    return pa.table({"node": pa.array(nodes, pa.string()), "runs": pc.cast(grouped["dur_count"], pa.int64()),
                     "time_ns": pc.cast(grouped["dur_sum"], pa.int64())})
