"""The repro result as a Report: the cases (one table), the variants measured beside them, and cases.json's
entries as the data document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.report import Column, Report, Section
from opscope.units import format_ns

_CASES = pa.schema([("id", pa.int64()), ("op", pa.string()), ("inputs", pa.string()), ("calls", pa.int64()),
                    ("share_pct", pa.float64()), ("trace_ns", pa.int64()), ("replay_ns", pa.int64()),
                    ("replay_p10_p90", pa.string()), ("runs", pa.int64()),
                    ("ratio", pa.float64()), ("profiled_ratio", pa.float64()), ("check", pa.string()),
                    ("best_variant", pa.string()), ("status", pa.string())])
_VARIANTS = pa.schema([("id", pa.int64()), ("variant", pa.string()), ("replay_ns", pa.int64()),
                       ("p10_ns", pa.int64()), ("p90_ns", pa.int64()), ("runs", pa.int64()),
                       ("baseline_ns", pa.int64()), ("speedup", pa.float64()), ("speedup_ci", pa.string()),
                       ("verdict", pa.string()), ("max_abs_err", pa.float64()), ("max_rel_err", pa.float64()),
                       ("equal", pa.string()), ("status", pa.string()), ("change", pa.string())])
#: cases.json fields that hold lists or objects: JSON only (a CSV cell cannot hold them).
_NESTED = ("leaf_ops", "input_dims", "input_strides", "input_types", "concrete_inputs", "steps", "recorded_ops",
           "recorded_kernels", "replayed", "missing", "extra", "variants", "notes", "args", "times_ns")

LEGEND = ("trace_ns: the trace's time per call, the median over the case's calls (device time of what the op "
          "launched on a GPU trace, the op's duration on a CPU trace: profiler overhead included); replay_ns: "
          "median per call here over the timed runs (warm-up first; a run is a block of calls with the device "
          "synchronised, torch.utils.benchmark; the baseline's runs alone and beside each variant), "
          "replay_p10_p90 their 10th and 90th percentiles (replay_p10_ns and replay_p90_ns in cases.json), runs "
          "how many; ratio = replay_ns / trace_ns (another machine, or another device with --device, gives "
          "another ratio); profiled_ratio: the same with the replay timed under torch.profiler recording "
          "shapes, memory and FLOPs, as opscope record does (median of 5 calls): like for like when the "
          "profiler's own cost is a large part of small ops. check: same when the replay ran the ops (CPU) or "
          "kernels (GPU) the trace recorded under the op, differs when not (cases.json lists both). Variants: "
          "each timed in 3 rounds alternating with the baseline (at least 5 runs a side); speedup = the "
          "baseline's median over (the baseline's median + the Hodges-Lehmann median difference variant - "
          "baseline), speedup_ci its 95% interval (Mann-Whitney), verdict faster or slower when the whole "
          "interval is on one side of no change, no difference when it holds it, too few runs to tell under 5 "
          "runs a side. best_variant: the variant with the largest speed-up among those found faster whose "
          "outputs stayed within the dtype's tolerance (relative to the output's magnitude), with its speed-up "
          "and interval.")


def repro_report(directory: Path, document: dict[str, Any], ran: bool, limit: int = 0) -> Report:
    entries = [e for e in document.get("cases", []) if isinstance(e, dict)]
    rebuilt = sum(1 for e in entries if e.get("script"))
    ok = sum(1 for e in entries if e.get("status") == "ok")
    trace = str(document.get("trace", ""))
    headline = (f"{len(entries)} case{'s' if len(entries) != 1 else ''} by {document.get('time_is')} from {trace}: "
                f"{rebuilt} rebuilt as scripts in {directory}" + (f", {ok} ran" if ran else " (not run)"))
    notes = [f"share: of the {document.get('share_of')}"]
    notes += [str(n) for n in document.get("notes", []) if isinstance(n, str)]
    devices = {str(e["device"]) for e in entries if e.get("device")}
    recorded_on = document.get("trace_device")
    for used in sorted(d for d in devices if d != recorded_on):
        notes.append(f"replayed on {used}, recorded on {recorded_on} (--device): times and launched ops are not "
                     "the trace's device's")
    if isinstance(document.get("threads"), int):
        notes.append(f"CPU threads: {document['threads']}, as the recording ran (its run.json)")
    if not ran and rebuilt:
        notes.append(f"run them: opscope repro --run {directory}")
    legend = LEGEND + f"\nEach case: python {directory}/<script> --help; all of them: opscope repro --run {directory}"
    variant_rows = _variant_rows(entries)
    sections = [
        Section("entries", "cases.json", None, records=[dict(e) for e in entries], terminal=False,
                columns={k: Column(show="json") for k in _NESTED}),
        Section("cases", "Cases (one per distinct op and inputs)", pa.Table.from_pylist(
            [_case_row(e) for e in entries], schema=_CASES), data=False, limit=limit or None,
                columns={"inputs": Column(show="terminal")}),
    ]
    if variant_rows:
        sections.append(Section("variants", "Variants (each against its case's baseline, on the replay device)",
                                pa.Table.from_pylist(variant_rows, schema=_VARIANTS), data=False))
    return Report(sections=sections, title=f"opscope repro: {trace}", headline=headline, notes=notes,
                  legend=legend, empty=None if entries else "no op calls to reproduce in this trace")


def _case_row(e: dict[str, Any]) -> dict[str, Any]:
    share = e.get("share")
    return {
        "id": _int(e.get("id")),
        "op": str(e.get("op", "")),
        "inputs": _inputs(e),
        "calls": _int(e.get("calls")),
        "share_pct": round(100 * share, 2) if isinstance(share, int | float) else None,
        "trace_ns": _int(e.get("trace_ns")),
        "replay_ns": _int(e.get("replay_ns")),
        "replay_p10_p90": _spread(e.get("replay_p10_ns"), e.get("replay_p90_ns")),
        "runs": _int(e.get("runs")),
        "ratio": round(e["ratio"], 3) if isinstance(e.get("ratio"), int | float) else None,
        "profiled_ratio": round(e["profiled_ratio"], 3) if isinstance(e.get("profiled_ratio"), int | float) else None,
        "check": e.get("check") if isinstance(e.get("check"), str) else None,
        "best_variant": _best(e),
        "status": str(e.get("status", "")),
    }


def _spread(p10: Any, p90: Any) -> str | None:
    """The runs' 10th to 90th percentile as one cell (one column, so that the table fits a terminal)."""
    low, high = _int(p10), _int(p90)
    return f"{format_ns(low)}-{format_ns(high)}" if low is not None and high is not None else None


def _inputs(e: dict[str, Any]) -> str:
    dims, types = e.get("input_dims"), e.get("input_types")
    if not isinstance(dims, list) or not isinstance(types, list):
        return "(not recorded)"
    parts = []
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(isinstance(n, int) for n in d):
            parts.append("x".join(str(n) for n in d))
        elif isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            parts.append(f"[{len(d)} tensors]")
        elif t not in ("", None) and isinstance(d, list) and not d and t not in ("Scalar", "ScalarList"):
            parts.append("scalar")
    dtype = next((_DTYPE_SHORT.get(t, "?") for t in types if isinstance(t, str) and t not in _NOT_DTYPES), None)
    text = ", ".join(parts) + (f" ({dtype})" if dtype else "")
    return text if len(text) <= 64 else text[:61] + "..."


#: Kineto's dtype names, short, for the table (cases.json keeps them as recorded).
_DTYPE_SHORT = {"float": "f32", "double": "f64", "c10::Half": "f16", "c10::BFloat16": "bf16", "long int": "i64",
                "long": "i64", "int": "i32", "short int": "i16", "signed char": "i8", "unsigned char": "u8",
                "bool": "bool", "c10::Float8_e4m3fn": "f8e4m3", "c10::Float8_e5m2": "f8e5m2",
                "c10::complex<float>": "c64", "c10::complex<double>": "c128"}
_NOT_DTYPES = ("", "Scalar", "ScalarList", "TensorList", "GenericList", "Int", "Bool", "Double")


def _best(e: dict[str, Any]) -> str | None:
    name, speedup = e.get("best_variant"), e.get("best_speedup")
    if not isinstance(name, str) or not isinstance(speedup, int | float):
        return None
    ci = speedup_ci(e.get("best_speedup_low"), e.get("best_speedup_high"))
    return f"{name} x{speedup:.2f}" + (f" ({ci})" if ci else "")


def speedup_ci(low: Any, high: Any) -> str | None:
    """``1.21x-1.29x``: a speed-up's interval (``inf`` where its upper end is unbounded); None without one."""
    if not isinstance(low, int | float):
        return None
    top = f"{high:.2f}x" if isinstance(high, int | float) else "inf"
    return f"{low:.2f}x-{top}"


def _variant_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for e in entries:
        for v in e.get("variants") or ():
            if not isinstance(v, dict) or "status" not in v or v.get("status") == "not run":
                continue
            equal = v.get("within_tolerance")
            rows.append({
                "id": _int(e.get("id")), "variant": str(v.get("name")), "replay_ns": _int(v.get("replay_ns")),
                "p10_ns": _int(v.get("p10_ns")), "p90_ns": _int(v.get("p90_ns")), "runs": _int(v.get("runs")),
                "baseline_ns": _int(v.get("baseline_ns")),
                "speedup": round(v["speedup"], 3) if isinstance(v.get("speedup"), int | float) else None,
                "speedup_ci": speedup_ci(v.get("speedup_low"), v.get("speedup_high")),
                "verdict": v.get("verdict") if isinstance(v.get("verdict"), str) else None,
                "max_abs_err": _float(v.get("max_abs_err")), "max_rel_err": _float(v.get("max_rel_err")),
                "equal": None if equal is None else ("yes" if equal else "NO (beyond tolerance)"),
                "status": str(v.get("status")), "change": str(v.get("change", "")),
            })
    return rows


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
