"""Kernel launch details (``opscope kernels --details``): each kernel's launch configuration and the resources it
used, as the profiler recorded them in the kernel event's args.

Kineto (CUPTI) writes, per kernel: ``grid`` and ``block`` (three dimensions each), ``registers per thread``,
``shared memory`` (bytes per block: the static and dynamic shared memory together), ``blocks per SM`` and ``warps
per SM`` (the grid over the device's SMs) and ``est. achieved occupancy %`` (Kineto's estimate from the launch and
the device's limits, not a measurement); older Kineto writes ``theoretical occupancy %`` instead of the estimate.
ROCm's traces write ``grid`` and ``block`` only. An arg whose key names Tensor Cores is shown as it is written
(none of the traces opscope is tested on has one). Only the args of the kernels asked about are read.

A row is one (kernel name, grid, block): one name can launch with several configurations, and each has its own
resources and occupancy.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import shares_pct
from opscope.analyses.filters import EventFilter
from opscope.analyses.kernels import DEVICE_WORK, NAME_FORMS, names_shown
from opscope.analyses.ops import sort_table
from opscope.errors import UsageError
from opscope.model.buffers import true_positions
from opscope.model.memo import memoized
from opscope.model.trace import Trace

#: The args read, by the name of the column that shows them (in the table's order).
FIELDS = {
    "grid": "grid",
    "block": "block",
    "registers_per_thread": "registers per thread",
    "shared_memory_bytes": "shared memory",
    "occupancy_pct": "est. achieved occupancy %",
    "theoretical_occupancy_pct": "theoretical occupancy %",
    "blocks_per_sm": "blocks per SM",
    "warps_per_sm": "warps per SM",
    "tensor_cores": "(a key naming Tensor Cores)",
}
#: An args key that says whether a kernel used Tensor Cores ("tensor core", "Tensor Cores used", ...).
TENSOR_CORE_KEY = re.compile(r"tensor[ _-]?cores?", re.IGNORECASE)


#: The values a column holds: integers that fit (with room) in int64, finite floats.
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 62), le=1 << 62)]
_Float = Annotated[float, msgspec.Meta(ge=-1e300, le=1e300)]


class _Launch(msgspec.Struct, gc=False):
    """The keys read from a kernel's args, typed: a batch is decoded and checked in one call (the other keys are
    passed over, not built); args with a value out of type or range are read one by one (:func:`_one`)."""

    grid: tuple[_Int, _Int, _Int] | None = None
    block: tuple[_Int, _Int, _Int] | None = None
    registers: _Int | None = msgspec.field(default=None, name="registers per thread")
    shared: _Int | None = msgspec.field(default=None, name="shared memory")
    occupancy: _Float | None = msgspec.field(default=None, name="est. achieved occupancy %")
    theoretical: _Float | None = msgspec.field(default=None, name="theoretical occupancy %")
    blocks: _Float | None = msgspec.field(default=None, name="blocks per SM")
    warps: _Float | None = msgspec.field(default=None, name="warps per SM")


_decode_batch = msgspec.json.Decoder(list[_Launch | None]).decode
_decode_one = msgspec.json.Decoder(_Launch | None).decode
_BATCH = 50_000
_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError)
_INTS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared")
_FLOATS = ("occupancy", "theoretical", "blocks", "warps")


@memoized(keep=True)
def kernel_launch_table(trace: Trace, filt: EventFilter | None = None, sort: str = "total_ns",
                        names: str = "short") -> pa.Table:
    """One row per (kernel name, grid, block): calls, total/avg time, share of device time, and the launch's
    registers per thread, shared memory per block, the profiler's estimated occupancy, blocks and warps per SM,
    Tensor Core use: each null where the trace does not record it.

    Within a row the launches share their grid and block; the largest registers and shared memory of its launches
    are shown (``*_varies`` says when they differ: dynamic shared memory, template instances that share a short
    name), and the mean of their occupancy, blocks and warps per SM."""
    if names not in NAME_FORMS:
        raise UsageError(f"names must be one of {', '.join(NAME_FORMS)}, not {names!r}")
    filt = filt or EventFilter()
    filt = EventFilter(kinds=filt.kinds or DEVICE_WORK, match=filt.match, exclude=filt.exclude, steps=filt.steps)
    rows = filt.apply(trace.select(["kind", "name", "dur_ns", "step", "event_id"]))
    launches = _launches(trace, rows["event_id"])
    table = pa.table({"name": names_shown(trace, rows["name"], names), "kind": rows["kind"],
                      "dur_ns": rows["dur_ns"], **launches}).unify_dictionaries()
    keys = ["name", "kind", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    grouped = table.group_by(keys, use_threads=False).aggregate([
        ("dur_ns", "count"), ("dur_ns", "sum"),
        ("registers", "min"), ("registers", "max"), ("shared", "min"), ("shared", "max"),
        ("occupancy", "mean"), ("theoretical", "mean"), ("blocks", "mean"), ("warps", "mean"),
        ("tensor_cores", "max")])
    total, calls = grouped["dur_ns_sum"], grouped["dur_ns_count"]
    out = {
        "name": _text(grouped["name"]),
        "kind": _text(grouped["kind"]),
        "grid": _dims(grouped, "grid"),
        "block": _dims(grouped, "block"),
        "calls": calls,
        "total_ns": total,
        "avg_ns": pc.cast(pc.round(pc.divide(pc.cast(total, pa.float64(), safe=False), calls)), pa.int64()),
        "pct": shares_pct(total, pc.sum(total).as_py() or 0),
        "registers_per_thread": grouped["registers_max"],
        "shared_memory_bytes": grouped["shared_max"],
        "occupancy_pct": pc.round(grouped["occupancy_mean"], 2),
        "theoretical_occupancy_pct": pc.round(grouped["theoretical_mean"], 2),
        "blocks_per_sm": pc.round(grouped["blocks_mean"], 3),
        "warps_per_sm": pc.round(grouped["warps_mean"], 3),
        "tensor_cores": grouped["tensor_cores_max"],
        "registers_varies": pc.not_equal(grouped["registers_min"], grouped["registers_max"]),
        "shared_memory_varies": pc.not_equal(grouped["shared_min"], grouped["shared_max"]),
    }
    return sort_table(pa.table(out), sort)


def recorded(table: pa.Table) -> tuple[list[str], list[str]]:
    """Which launch fields the rows of a :func:`kernel_launch_table` hold (some row has a value), and which
    none does, by column name."""
    have = [c for c in FIELDS if table.num_rows and table[c].null_count < table.num_rows]
    return have, [c for c in FIELDS if c not in have]


def _launches(trace: Trace, event_ids: pa.ChunkedArray) -> dict[str, pa.Array]:
    """The launch fields of these events, one value per event (null where absent or not of the field's type): only
    these events' args are read (:meth:`Trace.args_batches_of`), decoded a batch at a time as they are read, so that
    only the fields are kept, never the texts."""
    ids: list[pa.Array] = []
    parts: list[dict[str, pa.Array]] = []
    for batch in trace.args_batches_of(event_ids):
        for start in range(0, batch.num_rows, _BATCH):
            piece = batch.slice(start, _BATCH)
            texts = piece.column("args")
            parts.append({**_columns(_decoded(texts)), "tensor_cores": _tensor_cores(texts)})
            ids.append(piece.column("event_id"))
    types = {**dict.fromkeys(_INTS, pa.int64()), **dict.fromkeys(_FLOATS, pa.float64()), "tensor_cores": pa.string()}
    fields = {k: pa.concat_arrays([p[k] for p in parts]) if parts else pa.array([], t) for k, t in types.items()}
    # each event's first args row (as pc.index_in finds it), null where it has none
    where = pc.index_in(event_ids, value_set=pa.concat_arrays(ids) if ids else pa.array([], pa.int64()))
    return {k: pc.take(v, where) for k, v in fields.items()}


def _columns(values: list[_Launch | None]) -> dict[str, pa.Array]:
    """The launch fields of a batch of decoded args, one array per field."""
    grids = [v.grid if v is not None else None for v in values]
    blocks = [v.block if v is not None else None for v in values]
    columns: dict[str, list] = {}
    for axis, i in (("x", 0), ("y", 1), ("z", 2)):
        columns[f"grid_{axis}"] = [g[i] if g is not None else None for g in grids]
        columns[f"block_{axis}"] = [b[i] if b is not None else None for b in blocks]
    for key in ("registers", "shared") + _FLOATS:
        columns[key] = [getattr(v, key) if v is not None else None for v in values]
    out: dict[str, pa.Array] = {k: pa.array(columns[k], pa.int64()) for k in _INTS}
    out.update({k: pa.array(columns[k], pa.float64()) for k in _FLOATS})
    return out


def _decoded(texts: pa.Array) -> list[_Launch | None]:
    """Each text's launch fields: the batch in one call, from one JSON array that Arrow joins (no Python string per
    text: their objects, freed between results, would keep their heap pages); where some value is not of its
    field's type, text by text, keeping the fields that are."""
    if not len(texts):
        return []
    texts = texts.cast(pa.large_string())
    items = pc.if_else(pc.fill_null(pc.greater(pc.binary_length(texts), 0), False), texts, "null")
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(items)], pa.int64()), items),
                            pa.scalar(",", pa.large_string()))[0]
    try:
        decoded = _decode_batch(b"".join((b"[", joined.as_buffer(), b"]")))
        if len(decoded) == len(texts):  # a text holding "},{" would be two: each is then read on its own
            return decoded
    except _ERRORS:
        pass
    return [_one(t) for t in texts.to_pylist()]


def _one(text: str | None) -> _Launch | None:
    if not text:
        return None
    try:
        return _decode_one(text)
    except _ERRORS:
        pass
    try:  # the standard library reads what msgspec refuses (1e400, integers past 64 bits): each value checked
        loose = json.loads(text)
    except _ERRORS:
        return None
    if not isinstance(loose, dict):
        return None
    get = loose.get
    return _Launch(grid=_three(get("grid")), block=_three(get("block")), registers=_int(get("registers per thread")),
                   shared=_int(get("shared memory")), occupancy=_float(get("est. achieved occupancy %")),
                   theoretical=_float(get("theoretical occupancy %")), blocks=_float(get("blocks per SM")),
                   warps=_float(get("warps per SM")))


def _tensor_cores(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The value of an args key naming Tensor Cores, as text; only the texts that mention them are parsed."""
    out: list[str | None] = [None] * len(texts)
    if not len(texts):
        return pa.array(out, pa.string())
    hits = pc.fill_null(pc.match_substring_regex(texts, TENSOR_CORE_KEY.pattern, ignore_case=True), False)
    for i in true_positions(hits).to_pylist():
        try:
            value = msgspec.json.decode(texts[i].as_py())
        except _ERRORS:
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and TENSOR_CORE_KEY.search(k) and v is not None:
                    out[i] = str(v).lower() if isinstance(v, bool) else str(v)
                    break
    return pa.array(out, pa.string())


def _three(value: Any) -> tuple[int, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and all(_int(v) is not None for v in value):
        return (int(value[0]), int(value[1]), int(value[2]))
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if -(1 << 62) < value < (1 << 62) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return value if value == value and abs(value) <= 1e300 else None


def _dims(grouped: pa.Table, prefix: str) -> pa.Array:
    """The three dimensions of each row as a list (null where the trace has none)."""
    xs, ys, zs = (grouped[f"{prefix}_{a}"].to_pylist() for a in "xyz")
    return pa.array([[x, y, z] if x is not None else None for x, y, z in zip(xs, ys, zs)], pa.list_(pa.int64()))


def _text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column
