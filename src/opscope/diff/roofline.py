"""Two traces' rooflines side by side (``opscope diff --table roofline``): per op, shapes and dtype, each side's device
time, achieved rate and share of its own device's roof (two different GPUs is the point: the same op at 30% of an
H100's roof and 12% of an MI300X's says which side has the room), how the time per call moved and how the share of
the roof changed.

Each side is :func:`opscope.analyses.roofline.roofline_table` of its trace (by op), under the peaks of its own device
(:func:`opscope.analyses.peaks.trace_peaks`, or a peaks file per side); the values are that table's, over each
trace's whole window (not per step)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.analyses.peaks import Peaks, trace_peaks
from opscope.analyses.roofline import roofline_table
from opscope.model.trace import Trace

#: what the rows are matched by (the work model's family with them: the same op and shapes have one)
KEYS = ("name", "shapes", "dtype", "family")

SCHEMA = pa.schema([
    ("name", pa.string()), ("shapes", pa.string()), ("dtype", pa.string()), ("family", pa.string()),
    ("calls_base", pa.int64()), ("calls_new", pa.int64()), ("base_ns", pa.int64()), ("new_ns", pa.int64()),
    ("time_ratio", pa.float64()), ("achieved_unit", pa.string()), ("achieved_base", pa.float64()),
    ("achieved_new", pa.float64()), ("base_roof_pct", pa.float64()), ("new_roof_pct", pa.float64()),
    ("delta_roof_pct", pa.float64()), ("bound_base", pa.string()), ("bound_new", pa.string()),
    ("peak_tflops_base", pa.float64()), ("peak_tflops_new", pa.float64()), ("peak_gbps_base", pa.float64()),
    ("peak_gbps_new", pa.float64()),
])


@dataclass(frozen=True)
class Side:
    """One trace's roofline: its rows, the peaks used and where they come from, and its coverage notes."""

    table: pa.Table
    peaks: Peaks | None
    how: str
    notes: list[str]


def roofline_side(trace: Trace, peaks_file: Path | None = None) -> Side:
    """The trace's roofline by op under its own device's peaks (or those of ``peaks_file``)."""
    peaks, how = trace_peaks(trace, peaks_file)
    table, notes = roofline_table(trace, peaks, by="op")
    return Side(table, peaks, how, notes)


def roofline_delta(base: Trace, new: Trace, base_peaks: Path | None = None, new_peaks: Path | None = None,
                   labels: tuple[str, str] = ("base", "new")) -> tuple[pa.Table, list[str]]:
    """Per (op, shapes, dtype) in either trace: each side's roofline row side by side (nulls on the side without
    it), sorted by the larger side's device time; and the notes: each side's device, peaks and coverage."""
    sides = (roofline_side(base, base_peaks), roofline_side(new, new_peaks))
    return combine(*sides), side_notes(sides, labels)


def combine(base: Side, new: Side) -> pa.Table:
    """The two sides' rows matched by name, shapes, dtype and family (see :data:`SCHEMA`)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for suffix, side in (("base", base), ("new", new)):
        for r in side.table.to_pylist():
            key = tuple(r[k] for k in KEYS)
            out = rows.setdefault(key, {k: r[k] for k in KEYS})
            out[suffix] = r
    table = [_row(r, r.get("base"), r.get("new")) for r in rows.values()]
    table.sort(key=lambda r: (-max(r["base_ns"] or 0, r["new_ns"] or 0), r["name"] or "", r["shapes"] or "",
                              r["dtype"] or ""))
    return pa.Table.from_pylist(table, schema=SCHEMA)


def _row(keys: dict[str, Any], b: dict[str, Any] | None, n: dict[str, Any] | None) -> dict[str, Any]:
    # a copy or fill has no FLOPs: its rate is in bytes (the two sides have the same work per call: the same op,
    # shapes and dtype)
    flops = next((r["flops"] for r in (b, n) if r is not None), 0.0)
    unit, rate = ("TFLOP/s", "achieved_tflops") if flops else ("GB/s", "achieved_gbps")

    def get(r: dict[str, Any] | None, column: str) -> Any:
        return None if r is None else r[column]

    per_call = [r["device_ns"] / r["calls"] if r is not None and r["calls"] else None for r in (b, n)]
    ratio = per_call[1] / per_call[0] if per_call[0] and per_call[1] is not None else None
    pct = [get(r, "pct_of_roof") for r in (b, n)]
    return {**{k: keys[k] for k in KEYS},
            "calls_base": get(b, "calls"), "calls_new": get(n, "calls"),
            "base_ns": get(b, "device_ns"), "new_ns": get(n, "device_ns"), "time_ratio": ratio,
            "achieved_unit": unit, "achieved_base": get(b, rate), "achieved_new": get(n, rate),
            "base_roof_pct": pct[0], "new_roof_pct": pct[1],
            "delta_roof_pct": pct[1] - pct[0] if pct[0] is not None and pct[1] is not None else None,
            "bound_base": get(b, "bound"), "bound_new": get(n, "bound"),
            "peak_tflops_base": get(b, "peak_tflops"), "peak_tflops_new": get(n, "peak_tflops"),
            "peak_gbps_base": get(b, "peak_gbps"), "peak_gbps_new": get(n, "peak_gbps")}


def roofs_text(peaks: Peaks | None) -> str:
    """The device and its roofs in a few words ("H100 SXM: bf16 989.4 TFLOP/s, ..., memory 3350 GB/s")."""
    if peaks is None:
        return "no peaks (pct_of_roof is null)"
    return (f"{peaks.device}: " + ", ".join(f"{dtype} {tflops:g} TFLOP/s" for dtype, tflops in peaks.tflops.items())
            + f", memory {peaks.gbps:g} GB/s")


def side_notes(sides: tuple[Side, Side], labels: tuple[str, str] = ("base", "new")) -> list[str]:
    """Per side: its device and roofs, where the peaks come from, and the roofline's coverage of its device time;
    then how many rows each side has alone."""
    notes = []
    for label, side in zip(labels, sides):
        notes.append(f"{label}: {roofs_text(side.peaks)}; {side.how}")
        notes += [f"{label}: {n}" for n in side.notes]
    keys = [{tuple(r[k] for k in KEYS) for r in side.table.to_pylist()} for side in sides]
    only = [len(keys[0] - keys[1]), len(keys[1] - keys[0])]
    if only[0] or only[1]:
        notes.append(f"rows on one side only (the other side's columns null): {only[0]} in {labels[0]}, {only[1]} in "
                     f"{labels[1]} (another op, shapes or dtype ran there: a vendor's own convolution or attention op, "
                     "a cast)")
    return notes
