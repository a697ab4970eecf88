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

import re
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import shares_pct
from opscope.analyses.filters import EventFilter
from opscope.analyses.kernels import DEVICE_WORK, NAME_FORMS, names_shown
from opscope.analyses.ops import sort_table
from opscope.errors import UsageError
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


class _Launch(msgspec.Struct, gc=False):
    """The keys read from a kernel's args; the others are passed over, not built."""

    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared: Any = msgspec.field(default=None, name="shared memory")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    theoretical: Any = msgspec.field(default=None, name="theoretical occupancy %")
    blocks: Any = msgspec.field(default=None, name="blocks per SM")
    warps: Any = msgspec.field(default=None, name="warps per SM")


_decode_batch = msgspec.json.Decoder(list[_Launch | None]).decode
_decode_one = msgspec.json.Decoder(_Launch | None).decode
_BATCH = 50_000


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
        "occupancy_pct": _rounded(grouped["occupancy_mean"]),
        "theoretical_occupancy_pct": _rounded(grouped["theoretical_mean"]),
        "blocks_per_sm": _rounded(grouped["blocks_mean"], 3),
        "warps_per_sm": _rounded(grouped["warps_mean"], 3),
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
    """The launch fields of these events, one value per event (null where absent or not of the field's type)."""
    n = len(event_ids)
    args = trace.args
    texts: list[str | None] = [None] * n
    if n and args.num_rows:
        where = pc.index_in(event_ids, value_set=args["event_id"])
        found = pc.take(args["args"], pc.fill_null(where, 0))
        found = pc.if_else(pc.is_valid(where), found, pa.scalar(None, found.type))
        texts = found.to_pylist()
    values: list[_Launch | None] = []
    for start in range(0, n, _BATCH):
        values.extend(_decoded(texts[start:start + _BATCH]))
    columns: dict[str, list] = {k: [] for k in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                                                "registers", "shared", "occupancy", "theoretical", "blocks",
                                                "warps")}
    for v in values:
        grid = _three(v.grid) if v is not None else None
        block = _three(v.block) if v is not None else None
        for axis, i in (("x", 0), ("y", 1), ("z", 2)):
            columns[f"grid_{axis}"].append(grid[i] if grid else None)
            columns[f"block_{axis}"].append(block[i] if block else None)
        columns["registers"].append(_int(v.registers) if v is not None else None)
        columns["shared"].append(_int(v.shared) if v is not None else None)
        for key, attr in (("occupancy", "occupancy"), ("theoretical", "theoretical"), ("blocks", "blocks"),
                          ("warps", "warps")):
            columns[key].append(_float(getattr(v, attr)) if v is not None else None)
    out: dict[str, pa.Array] = {k: pa.array(v, pa.int64()) for k, v in columns.items()
                                if k not in ("occupancy", "theoretical", "blocks", "warps")}
    out.update({k: pa.array(columns[k], pa.float64()) for k in ("occupancy", "theoretical", "blocks", "warps")})
    out["tensor_cores"] = pa.array(_tensor_cores(texts), pa.string())
    return out


def _decoded(texts: list[str | None]) -> list[_Launch | None]:
    try:
        return _decode_batch("[" + ",".join(t or "null" for t in texts) + "]")
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        out: list[_Launch | None] = []
        for t in texts:
            try:
                out.append(_decode_one(t) if t else None)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
                out.append(None)
        return out


def _tensor_cores(texts: list[str | None]) -> list[str | None]:
    """The value of an args key naming Tensor Cores, as text; only the texts that mention them are parsed."""
    out: list[str | None] = [None] * len(texts)
    for i, t in enumerate(texts):
        if not t or not TENSOR_CORE_KEY.search(t):
            continue
        try:
            value = msgspec.json.decode(t)
        except (msgspec.DecodeError, ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and TENSOR_CORE_KEY.search(k) and v is not None:
                    out[i] = str(v).lower() if isinstance(v, bool) else str(v)
                    break
    return out


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
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _dims(grouped: pa.Table, prefix: str) -> pa.Array:
    """The three dimensions of each row as a list (null where the trace has none)."""
    xs, ys, zs = (grouped[f"{prefix}_{a}"].to_pylist() for a in "xyz")
    return pa.array([[x, y, z] if x is not None else None for x, y, z in zip(xs, ys, zs)], pa.list_(pa.int64()))


def _rounded(values: pa.ChunkedArray | pa.Array, digits: int = 2) -> pa.Array:
    return pc.round(values, digits)


def _text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column
