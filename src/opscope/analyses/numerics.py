"""Numerics dumps (``numerics.parquet``, written by :mod:`opscope.capture.numerics`): their format,
reading one, and what ``opscope numerics`` shows of it (rows in an order, the first NaN/Inf).

One row per tensor output of an op: the op and the nn.Module it ran in, shape, dtype, min/max/mean/std
over the finite values, NaN/Inf counts, first/last values and a strided sample; the first output row of
each op also holds its inputs' stats. Reading a dump needs no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.errors import UsageError

DUMP_NAME = "numerics.parquet"
SORTS = ("order", "size", "name")

STATS = ["min", "max", "mean", "std"]
#: The summary of one tensor, for outputs and (per op, on its first output row) inputs.
SUMMARY_FIELDS = [
    ("shape", pa.string()), ("dtype", pa.string()), ("numel", pa.int64()),
    ("min", pa.float64()), ("max", pa.float64()), ("mean", pa.float64()), ("std", pa.float64()),
    ("nan_count", pa.int64()), ("inf_count", pa.int64()),
]
INPUT_TYPE = pa.struct([("arg", pa.int32()), *SUMMARY_FIELDS])
SCHEMA = pa.schema([
    ("index", pa.int64()), ("op", pa.string()), ("module", pa.string()), ("backward", pa.bool_()),
    ("output_index", pa.int32()), *SUMMARY_FIELDS,
    ("first5", pa.list_(pa.float64())), ("last5", pa.list_(pa.float64())), ("sample", pa.list_(pa.float64())),
    ("inputs", pa.list_(INPUT_TYPE)),
])


def dump_path(path: Path) -> Path:
    """A dump file, or the directory holding ``numerics.parquet``."""
    path = Path(path)
    if path.is_dir():
        path = path / DUMP_NAME
        if not path.is_file():
            raise UsageError(f"{path.parent}: holds no {DUMP_NAME} (give a dump written by opscope numerics)")
    elif not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    return path


def load_dump(path: Path) -> pa.Table:
    """Read a dump: ``numerics.parquet``, or a ``MIGRAPHX_TRACE_EVAL`` text dump (told apart by content); a file
    that is neither is a one-line error."""
    path = dump_path(path)
    from opscope.ingest.registry import read_head

    head = read_head(path)  # decompressed: a dump may be gzipped text
    if not head.startswith(b"PAR1"):
        from opscope.ingest.migraphx import trace_eval

        if trace_eval.MARKER in head:
            return pa.Table.from_pylist(trace_eval.read_rows(path), schema=SCHEMA)
    import pyarrow.parquet as pq  # here: diff imports this module for the numerics' columns, and reads no dump

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if missing:
        raise UsageError(f"{path}: not a numerics dump (no column {missing[0]!r})")
    return table.select(SCHEMA.names)


def sort_rows(table: pa.Table, by: str) -> pa.Table:
    """``order`` (execution), ``size`` (numel, largest first) or ``name`` (op name, then order)."""
    if by not in SORTS:
        raise UsageError(f"cannot sort by {by!r}: choose one of {', '.join(SORTS)}")
    keys = {"order": [], "size": [("numel", "descending")], "name": [("op", "ascending")]}[by]
    return table.sort_by([*keys, ("index", "ascending"), ("output_index", "ascending")])


def first_nonfinite(table: pa.Table) -> dict[str, Any] | None:
    """The first row (in execution order) whose output holds a NaN or Inf, with ``inputs`` of its op."""
    bad = pc.or_(pc.greater(pc.fill_null(table["nan_count"], 0), 0), pc.greater(pc.fill_null(table["inf_count"], 0), 0))
    hits = sort_rows(table.filter(bad), "order")
    if hits.num_rows == 0:
        return None
    row = hits.slice(0, 1).to_pylist()[0]
    if not row["inputs"]:  # a later output of a multi-output op: inputs are on output 0
        same = table.filter(pc.and_(pc.equal(table["index"], row["index"]), pc.equal(table["output_index"], 0)))
        row["inputs"] = same["inputs"][0].as_py() if same.num_rows else []
    return row
