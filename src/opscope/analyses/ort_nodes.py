"""Time per graph node in an ONNX Runtime profile (for ``opscope graph MODEL.onnx --profile``).

The ONNX Runtime reader (:mod:`opscope.ingest.onnxruntime`) makes each node run (``<node>_kernel_time``) a
``cpu_op`` named by its op type, and puts the node's graph name in the event's args as ``"node"``; fences are
``overhead``, not ops. This only groups those ops by node.
"""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: ORT's category of node events (kept by its reader); a trace exported by opscope and read back has Kineto's.
NODE_CATEGORY = "Node"
_TOOL = "onnxruntime"


class _NodeArg(msgspec.Struct, gc=False):
    node: object = None


_decode_batch = msgspec.json.Decoder(list[_NodeArg | None]).decode
_decode_one = msgspec.json.Decoder(_NodeArg | None).decode


def _empty() -> pa.Table:
    return pa.table({"node": pa.array([], pa.string()), "runs": pa.array([], pa.int64()),
                     "time_ns": pa.array([], pa.int64())})


def node_times(trace: Trace) -> pa.Table:
    """One row per profiled node: ``node`` (its graph name), ``runs``, ``time_ns`` (sum of its runs' durations),
    in first-run order. Empty when the trace holds no ONNX Runtime node ops."""
    events = trace.select(["kind", "cat", "ts_ns", "dur_ns", "event_id"])
    ops = kind_mask(events, ("cpu_op",))
    if trace.metadata.get("tool") != _TOOL:  # other traces: only ORT's own category (a merged file, say)
        ops = pc.and_(ops, pc.fill_null(pc.equal(pc.cast(events["cat"], pa.string()), NODE_CATEGORY), False))
    rows = events.filter(ops)
    if rows.num_rows == 0:
        return _empty()
    args = trace.args
    where = pc.index_in(rows["event_id"], value_set=args["event_id"])
    texts = pc.take(args["args"], pc.fill_null(where, 0)).to_pylist() if args.num_rows else []
    nodes = _nodes([t if w is not None else None for t, w in zip(texts, where.to_pylist())]
                   if texts else [None] * rows.num_rows)
    table = pa.table({"node": pa.array(nodes, pa.string()), "ts": rows["ts_ns"], "dur": rows["dur_ns"]})
    table = table.filter(pc.is_valid(table["node"]))
    if table.num_rows == 0:
        return _empty()
    grouped = table.group_by("node", use_threads=False).aggregate([("dur", "count"), ("dur", "sum"), ("ts", "min")])
    grouped = grouped.sort_by([("ts_min", "ascending"), ("node", "ascending")])
    return pa.table({"node": grouped["node"], "runs": pc.cast(grouped["dur_count"], pa.int64()),
                     "time_ns": pc.cast(grouped["dur_sum"], pa.int64())})


def _nodes(texts: list[str | None]) -> list[str | None]:
    """``args.node`` of each args text (None where absent or not text)."""
    try:
        values = _decode_batch("[" + ",".join(t or "null" for t in texts) + "]")
    except (msgspec.DecodeError, ValueError, RecursionError):
        values = []
        for t in texts:
            try:
                values.append(_decode_one(t) if t else None)
            except (msgspec.DecodeError, ValueError, RecursionError):
                values.append(None)
    return [v.node if v is not None and isinstance(v.node, str) else None for v in values]
