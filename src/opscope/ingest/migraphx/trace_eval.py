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

import itertools
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opscope.errors import TraceError
from opscope.ingest.migraphx.grammar import NUMBER, Instruction, Shape, parse_instruction
from opscope.ingest.source import ByteSource, decoded_lines

if TYPE_CHECKING:
    from opscope.model.trace import Trace

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


def iter_lines(path: Path, source: ByteSource | None = None) -> Iterator[str]:
    """The file's lines (gzip decompressed), one at a time: a level-3 dump holds every value of every tensor. The read
    stops at a run of NUL bytes (``source.corrupt_reason`` says so)."""
    source = source or ByteSource(path, text=True)

    def checked() -> Iterator[bytes]:
        for block in source.blocks():
            if b"\0" in block:
                raise TraceError(path, "holds binary data, not MIGraphX text output")
            yield block

    yield from decoded_lines(checked())


def parse_records(lines: Iterable[str], keep_values: bool = True) -> Iterator[_Record]:
    """Each instruction's record, yielded once the next one starts (or the file ends)."""
    cur: _Record | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("Run instruction:"):
            if cur is not None:
                yield cur
            body = line[len("Run instruction:"):].strip()
            cur = _Record(parse_instruction(body), body, number)
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
            cur.values = line.split(":", 1)[1].strip() if keep_values else ""
        elif line.startswith("Min value:"):
            m = _STATS.match(line)
            cur.stats.append([_float(g) for g in m.groups()] if m else [None] * 4)
    if cur is not None:
        yield cur


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The dump's numerics rows (dicts with the numerics schema's fields), in execution order."""
    rows: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    n_records = 0
    for index, rec in enumerate(parse_records(iter_lines(path))):
        n_records += 1
        ins = rec.ins
        if ins is None or rec.values is None:
            continue
        shapes = ins.shapes or [Shape("float_type", None, None)]
        parts = _split_tuple(rec.values, len(shapes))
        rec.values = None  # the text of a level-3 line is large: drop it once read
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
    if not n_records:
        raise TraceError(path, "holds no MIGRAPHX_TRACE_EVAL 'Run instruction:' lines")
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
    """Stats over the finite values (as ``opscope numerics``), exact NaN/Inf counts, the same strided sample."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    arr = pa.array(values, pa.float64())
    finite = arr.filter(pc.is_finite(arr))
    row["numel"] = n
    row["nan_count"] = pc.sum(pc.cast(pc.is_nan(arr), pa.int64())).as_py() or 0
    row["inf_count"] = n - len(finite) - row["nan_count"]
    if len(finite):
        mm = pc.min_max(finite).as_py()
        row.update(min=mm["min"], max=mm["max"], mean=pc.mean(finite).as_py(),
                   std=pc.stddev(finite, ddof=0).as_py())
    k = min(SAMPLE_SIZE, n)
    row["sample"] = [values[i * n // k] for i in range(k)]
    row["first5"], row["last5"] = values[:EDGE], (values[-EDGE:] if n else [])


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
    parts = text.split(",")
    if parts and not parts[-1].strip():
        parts.pop()
    try:
        return list(map(float, parts))  # the common case, fast: float() takes the spaces around a number
    except ValueError:
        pass
    out: list[Any] = []
    for part in parts:
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


def read(path: Path, *, progress=None, keep_args: bool = True) -> Trace:
    """The dump's ``Time:`` lines as a trace: each instruction an op lasting its time once the context finished
    (``t2``), laid end to end in execution order (the dump has no timestamps: a warning says so), with a device row
    for GPU work as in the perf reader; a run starts again where the first instruction comes again (a step each).
    """
    from opscope.ingest.migraphx.perf import PID, SUBMODULE_WARNING, TID, Timeline
    from opscope.model.builder import TraceBuilder

    source = ByteSource(path, text=True)
    b = TraceBuilder(str(path), "migraphx_trace_eval")
    timeline = Timeline(b, keep_args)
    first: str | None = None
    runs: list[int] = []  # where each run starts (ns): where the first instruction comes again
    records = 0
    for rec in parse_records(iter_lines(path, source), keep_values=False):
        records += 1
        if rec.ins is None or rec.times is None:
            continue
        ins = rec.ins
        first = ins.name if first is None else first
        start = timeline.add(ins, rec.times[1], ins.group,
                             {"time_ms": rec.times[0], "time_finished_ms": rec.times[1], "line": rec.line})
        if ins.name == first:
            runs.append(start)
    if not timeline.count:
        raise TraceError(path, "MIGRAPHX_TRACE_EVAL dump without timed instructions ('Run instruction:' followed by "
                               "'Time:')")
    if progress is not None:
        size = path.stat().st_size
        progress(size, size)
    bounds = [*runs, timeline.finish()]
    b.add_steps({"step": list(range(len(runs))), "name": [f"run {k}" for k in range(len(runs))],
                 "pid": [PID] * len(runs), "tid": [TID] * len(runs), "ts_ns": runs,
                 "dur_ns": [end - start for start, end in itertools.pairwise(bounds)]})
    b.metadata["tool"] = "MIGRAPHX_TRACE_EVAL"
    if source.truncated:
        b.warn(f"file is truncated ({source.corrupt_reason or 'compressed stream ends early'}); the complete lines "
               "were read")
    b.warn("MIGRAPHX_TRACE_EVAL dumps have no timestamps: instructions are laid end to end in execution order, "
           "each lasting its time once the context finished (the printing between them is left out)", timeline.count)
    if records > timeline.count:
        b.warn("instructions without a readable 'Time:' line (left out)", records - timeline.count)
    if timeline.submodules:
        b.warn(SUBMODULE_WARNING, timeline.submodules)
    return b.finish()
