"""``MIGRAPHX_TRACE_EVAL`` dumps -> rows of opscope's numerics table (``analyses.numerics.SCHEMA``).

What MIGraphX prints per instruction (AMDMIGraphX ``src/program.cpp``, ``program::eval``): level >= 1
``Run instruction: <instruction>`` and ``Time: <t1>ms, <t2>ms`` (before/after the context finished); level 2 adds,
for instructions with an output (not ``@param``/``@literal``/``load``), ``Output has <the set of fpclassify
results>``, ``Output: a, b, c, d, e, ..., v, w, x, y, z`` (all values when 10 or fewer; ``{...}{...}`` for a
tuple) and ``Min value: .., Max value: .., Mean: .., StdDev: ..`` (one line per tuple element); level >= 3 prints
``Output: <every value>`` instead, as did level 2 of old drivers (some spelled it ``Ouput:``).

What is known, and what is not: with every value (level 3, old drivers) the stats are computed here over the
finite values, as ``opscope numerics`` does, with exact NaN/Inf counts and the same strided 64-value sample.
At level 2 only the first/last 5 values and MIGraphX's stats over all values are printed: where ``Output has``
holds ``nan`` or ``inf`` those stats are not finite-value stats and are left out (null), and the NaN/Inf
counts are lower bounds (at least 1, or the number seen among the printed values); there is no sample. A
level-1 dump holds no values at all.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from opscope.errors import TraceError
from opscope.ingest.migraphx.grammar import NUMBER, Instruction, Shape, parse_instruction

SAMPLE_SIZE = 64  # as opscope.capture.numerics: the diff compares the same positions
EDGE = 5
_N = NUMBER
_TIME = re.compile(rf"^Time:\s*({_N})ms\s*,\s*({_N})ms\s*$")
_STATS = re.compile(r"^Min value:\s*(\S+),\s*Max value:\s*(\S+),\s*Mean:\s*(\S+),\s*StdDev:\s*(\S+)\s*$")
MARKER = b"Run instruction: "


class _Record:
    def __init__(self, ins: Instruction | None, text: str, line: int) -> None:
        self.ins = ins
        self.text = text
        self.line = line
        self.times: tuple[float, float] | None = None
        self.classes: set[str] | None = None
        self.values: str | None = None
        self.stats: list[list[float | None]] = []


def parse_records(text: str) -> list[_Record]:
    records: list[_Record] = []
    cur: _Record | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("Run instruction:"):
            body = line[len("Run instruction:"):].strip()
            cur = _Record(parse_instruction(body), body, number)
            records.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("Time:"):
            m = _TIME.match(line)
            if m:
                cur.times = (float(m.group(1)), float(m.group(2)))
        elif line.startswith("Output has"):
            cur.classes = {c.strip() for c in line[len("Output has"):].split(",") if c.strip()}
        elif line.startswith(("Output:", "Ouput:")):
            cur.values = line.split(":", 1)[1].strip()
        elif line.startswith("Min value:"):
            m = _STATS.match(line)
            cur.stats.append([_float(g) for g in m.groups()] if m else [None] * 4)
    return records


def read_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """The dump's numerics rows (dicts with the numerics schema's fields), in execution order."""
    records = parse_records(text)
    if not records:
        raise TraceError(path, "holds no MIGRAPHX_TRACE_EVAL 'Run instruction:' lines")
    rows: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for index, rec in enumerate(records):
        ins = rec.ins
        if ins is None or rec.values is None:
            continue
        shapes = ins.shapes or [Shape("float_type", None, None)]
        parts = _split_tuple(rec.values, len(shapes))
        for k, shape in enumerate(shapes):
            values_text = parts[k] if k < len(parts) else None
            stats = rec.stats[k] if k < len(rec.stats) else None
            row = _row(index, ins, k, shape, values_text, rec.classes, stats, len(shapes))
            if k == 0:
                row["inputs"] = [{"arg": a, **{f: by_name[name][f] for f in _SUMMARY}}
                                 for a, name in enumerate(ins.inputs) if name in by_name]
                by_name[ins.name] = row
            else:
                row["inputs"] = []
            rows.append(row)
    if not rows:
        raise TraceError(path, "MIGRAPHX_TRACE_EVAL dump without output values (a level-1 dump holds only times)",
                         "run with MIGRAPHX_TRACE_EVAL=2 or 3 to compare values")
    return rows


_SUMMARY = ("shape", "dtype", "numel", "min", "max", "mean", "std", "nan_count", "inf_count")


def _row(index: int, ins: Instruction, k: int, shape: Shape, values_text: str | None, classes: set[str] | None,
         stats: list[float | None] | None, n_outputs: int) -> dict[str, Any]:
    row: dict[str, Any] = {"index": index, "op": ins.group, "module": ins.name, "backward": False, "output_index": k,
                           "shape": shape.text, "dtype": shape.dtype, "numel": shape.numel,
                           "min": None, "max": None, "mean": None, "std": None, "nan_count": None, "inf_count": None,
                           "first5": None, "last5": None, "sample": None}
    values = _floats(values_text) if values_text is not None else None
    if classes is None:  # every value printed (level >= 3, old level 2)
        if values is not None and all(v is not None for v in values) and (shape.numel is None
                                                                          or len(values) == shape.numel):
            _all_values(row, values)
        elif values is not None:  # a count that does not match the shape: still the values shown
            _edges(row, values)
        return row
    if values is not None:
        _edges(row, values)
    shown = [v for v in values or [] if v is not None]
    nan_seen = sum(1 for v in shown if math.isnan(v))
    inf_seen = sum(1 for v in shown if math.isinf(v))
    # the set is the union over a tuple's elements: for one of several it says only what its shown values say
    row["nan_count"] = max(nan_seen, 1) if "nan" in classes and n_outputs == 1 else nan_seen
    row["inf_count"] = max(inf_seen, 1) if "inf" in classes and n_outputs == 1 else inf_seen
    if n_outputs > 1 and ("nan" in classes or "inf" in classes) and not (nan_seen or inf_seen):
        row["nan_count"] = row["inf_count"] = None  # unknown
    finite = not ({"nan", "inf"} & classes)
    if stats is not None and finite:
        row["min"], row["max"], row["mean"], row["std"] = stats
    return row


def _all_values(row: dict[str, Any], values: list[float]) -> None:
    finite = [v for v in values if math.isfinite(v)]
    row["numel"] = len(values)
    row["nan_count"] = sum(1 for v in values if math.isnan(v))
    row["inf_count"] = sum(1 for v in values if math.isinf(v))
    if finite:
        mean = math.fsum(finite) / len(finite)
        row.update(min=min(finite), max=max(finite), mean=mean,
                   std=math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / len(finite)))
    n = len(values)
    k = min(SAMPLE_SIZE, n)
    row["sample"] = [values[i * n // k] for i in range(k)]
    row["first5"], row["last5"] = values[:EDGE], values[-EDGE:] if n else []


def _edges(row: dict[str, Any], values: list[Any]) -> None:
    """First/last 5 of a preview (``a, ..., z``: ``...`` parsed as None splits it) or of all values."""
    if any(v is None for v in values):
        cut = next(i for i, v in enumerate(values) if v is None)
        head, tail = values[:cut], [v for v in values[cut + 1:] if v is not None]
        row["first5"], row["last5"] = head[:EDGE], tail[-EDGE:]
    else:
        row["first5"], row["last5"] = values[:EDGE], values[-EDGE:]


def _split_tuple(text: str, n: int) -> list[str]:
    """A tuple's printed elements: ``{a, b}{c, d}`` (preview) or ``{ a, b }, { c, d }, `` (all values)."""
    if n <= 1 or not text.startswith("{"):
        return [text]
    return [p.strip(" ,") for p in re.findall(r"\{([^{}]*)\}", text)]


def _floats(text: str) -> list[Any] | None:
    """The printed values; ``...`` (the preview's gap) as None; None when a value does not read (int8 printed as
    characters)."""
    out: list[Any] = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            continue
        if p == "...":
            out.append(None)
            continue
        try:
            out.append(float(p))
        except ValueError:
            return None
    return out


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
