"""Compare two numerics dumps (``opscope numerics-diff``) op by op: where do two runs first diverge?

The errors are those of the stored values (a strided sample of up to 64 per output, min/max/mean/std,
NaN/Inf counts), not of every element. Needs no torch.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from opscope.analyses.numerics import STATS, sort_rows
from opscope.errors import UsageError

DIFF_SCHEMA = pa.schema([
    ("index", pa.int64()), ("index_b", pa.int64()), ("op", pa.string()), ("module", pa.string()),
    ("output_index", pa.int32()), ("shape", pa.string()), ("dtype", pa.string()),
    ("max_abs_err", pa.float64()), ("max_rel_err", pa.float64()), ("mean_diff", pa.float64()),
    ("std_diff", pa.float64()), ("nan_diff", pa.int64()), ("inf_diff", pa.int64()), ("diverged", pa.bool_()),
])
_DIFF_COLUMNS = ["index", "op", "module", "output_index", "shape", "dtype", *STATS, "nan_count", "inf_count",
                 "sample", "first5", "last5"]


@dataclass
class NumericsDiff:
    """Per matched op output: errors of B against A. ``matched_by``: ``index`` or ``sequence``."""

    table: pa.Table
    matched_by: str
    unmatched_a: int
    unmatched_b: int

    def first_divergence(self) -> dict[str, Any] | None:
        hits = self.table.filter(self.table["diverged"])
        return hits.slice(0, 1).to_pylist()[0] if hits.num_rows else None


def diff_dumps(a: pa.Table, b: pa.Table, rtol: float = 1e-3, atol: float = 1e-5) -> NumericsDiff:
    """Compare two dumps op by op on their stored sample (<= 64 values) and min/max/mean/std.

    Rows are matched by (index, op, output_index) when both dumps have the same ones, else aligned on
    the sequence of (op, output_index) (difflib), which survives ops added or missing in one run. Dumps
    that share no op name (a MIGraphX ``MIGRAPHX_TRACE_EVAL`` dump against a PyTorch one) are aligned on
    the sequence of output (shape, dtype), each run of consecutive outputs of one shape represented by its
    last (a fused kernel's output is that of its chain's last op): ``matched_by`` ``shape``. A
    value diverges when |b - a| > atol + rtol * |a| (A is the reference); NaN/Inf count changes and
    shape changes diverge too.
    """
    if rtol < 0 or atol < 0:
        raise UsageError("--rtol and --atol must be 0 or more")
    ra = sort_rows(a, "order").select(_DIFF_COLUMNS).to_pylist()
    rb = sort_rows(b, "order").select(_DIFF_COLUMNS).to_pylist()
    pairs, how = _align(ra, rb)
    rows = [_compare(x, y, rtol, atol) for x, y in pairs]
    return NumericsDiff(pa.Table.from_pylist(rows, schema=DIFF_SCHEMA), how, len(ra) - len(pairs),
                        len(rb) - len(pairs))


def _align(ra: list[dict], rb: list[dict]) -> tuple[list[tuple[dict, dict]], str]:
    def key(r: dict) -> tuple:
        return r["index"], r["op"], r["output_index"]

    if [key(r) for r in ra] == [key(r) for r in rb]:
        return list(zip(ra, rb)), "index"
    ka = [(r["op"], r["output_index"]) for r in ra]
    kb = [(r["op"], r["output_index"]) for r in rb]
    if ka and kb and not {op for op, _ in ka} & {op for op, _ in kb}:
        return _align_shapes(ra, rb), "shape"
    return _match(ra, rb, ka, kb), "sequence"


def _match(ra: list[dict], rb: list[dict], ka: list, kb: list) -> list[tuple[dict, dict]]:
    matcher = difflib.SequenceMatcher(None, ka, kb, autojunk=False)
    return [(ra[block.a + k], rb[block.b + k]) for block in matcher.get_matching_blocks() for k in range(block.size)]


def _align_shapes(ra: list[dict], rb: list[dict]) -> list[tuple[dict, dict]]:
    """Two frameworks' dumps: the last output of each run of one (shape, dtype), aligned on that sequence."""
    def runs(rows: list[dict]) -> list[dict]:
        out: list[dict] = []
        for r in rows:
            if out and (out[-1]["shape"], out[-1]["dtype"]) == (r["shape"], r["dtype"]):
                out[-1] = r
            else:
                out.append(r)
        return out

    ca, cb = runs(ra), runs(rb)
    return _match(ca, cb, [(r["shape"], r["dtype"]) for r in ca], [(r["shape"], r["dtype"]) for r in cb])


def _compare(a: dict, b: dict, rtol: float, atol: float) -> dict[str, Any]:
    same_shape = a["shape"] == b["shape"]
    abs_err = rel_err = None
    samples_close = True
    if same_shape and a["sample"] is not None and b["sample"] is not None:
        abs_err, rel_err, samples_close = _sample_errors(a["sample"], b["sample"], rtol, atol)
    elif same_shape and a["first5"] is not None and b["first5"] is not None and a["last5"] is not None \
            and b["last5"] is not None:  # a dump without a sample (MIGraphX level 2): the first and last values
        abs_err, rel_err, samples_close = _sample_errors(a["first5"] + a["last5"], b["first5"] + b["last5"], rtol,
                                                         atol)
    stats_close = all(_close(a[k], b[k], rtol, atol) for k in STATS)
    nan_diff = _sub(b["nan_count"], a["nan_count"])
    inf_diff = _sub(b["inf_count"], a["inf_count"])
    diverged = not (same_shape and samples_close and stats_close and not nan_diff and not inf_diff)
    return {"index": a["index"], "index_b": b["index"], "op": a["op"], "module": a["module"],
            "output_index": a["output_index"],
            "shape": a["shape"] if same_shape else f"{a['shape']} vs {b['shape']}",
            "dtype": a["dtype"] if a["dtype"] == b["dtype"] else f"{a['dtype']} vs {b['dtype']}",
            "max_abs_err": abs_err, "max_rel_err": rel_err, "mean_diff": _sub(b["mean"], a["mean"]),
            "std_diff": _sub(b["std"], a["std"]), "nan_diff": nan_diff, "inf_diff": inf_diff, "diverged": diverged}


def _sample_errors(sa: list[float], sb: list[float], rtol: float, atol: float) -> tuple[float | None, float | None,
                                                                                          bool]:
    """Max |b-a|, max |b-a|/|a| (where a != 0) over finite pairs; and whether all values are close.

    The same non-finite value on both sides is equal; a non-finite value on one side only is not close.
    """
    abs_err = rel_err = None
    close = len(sa) == len(sb)
    for x, y in zip(sa, sb):
        if not (math.isfinite(x) and math.isfinite(y)):
            close = close and (x == y or (math.isnan(x) and math.isnan(y)))
            continue
        d = abs(y - x)
        abs_err = d if abs_err is None else max(abs_err, d)
        if x != 0:
            r = d / abs(x)
            rel_err = r if rel_err is None else max(rel_err, r)
        close = close and d <= atol + rtol * abs(x)
    return abs_err, rel_err, close


def _close(x: float | None, y: float | None, rtol: float, atol: float) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if not (math.isfinite(x) and math.isfinite(y)):
        return x == y or (math.isnan(x) and math.isnan(y))
    return abs(y - x) <= atol + rtol * abs(x)


def _sub(y: float | None, x: float | None) -> Any:
    return None if x is None or y is None else y - x
