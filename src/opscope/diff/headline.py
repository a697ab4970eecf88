"""Where the difference comes from: the step time and its parts (device compute, copies, communication, idle;
host op time on CPU-only traces), per step, in both traces."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.intervals import union_by_group
from opscope.diff.normalize import Span
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace
from opscope.render.units import format_ns

DEVICE_PARTS = {"compute": ("kernel",), "memcpy": ("memcpy",), "memset": ("memset",), "comm": ("comm",)}


def parts(trace: Trace, span: Span, device_work: bool) -> dict[str, int]:
    """``{part: ns per step}``: with device work, compute/memcpy/memset/comm (each the union of that kind's
    intervals per device, summed over devices) and idle (device time not covered by any work); on a CPU-only
    trace, host ops (union of cpu_op spans) and the rest of the step."""
    ev = trace.select(["kind", "ts_ns", "dur_ns", "device", "step"])
    if span.steps is not None:
        ev = ev.filter(pc.fill_null(pc.is_in(ev["step"], pa.array(span.steps, pa.int64())), False))
    total = span.step_ns * span.divisor  # the compared time, all used steps together
    out: dict[str, int] = {}
    if device_work:
        work = ev.filter(kind_mask(ev, ("kernel", "memcpy", "memset", "comm")))
        device = pc.fill_null(work["device"], -1)
        for part, kinds in DEVICE_PARTS.items():
            mine = kind_mask(work, kinds)
            covered = union_by_group(pc.filter(work["ts_ns"], mine), pc.filter(work["dur_ns"], mine),
                                     pc.filter(device, mine))
            out[part] = sum(covered.values())
        busy = union_by_group(work["ts_ns"], work["dur_ns"], device)
        out["idle"] = sum(max(0, total - b) for b in busy.values())
    else:
        ops = ev.filter(kind_mask(ev, ("cpu_op",)))
        covered = union_by_group(ops["ts_ns"], ops["dur_ns"], pa.chunked_array(
            [pa.array([0] * ops.num_rows, pa.int64())]))
        out["host_ops"] = covered.get(0, 0)
        out["outside_ops"] = max(0, total - out["host_ops"])
    return {k: int(round(v / span.divisor)) for k, v in out.items()}


def headline_rows(base: Trace, new: Trace, span_base: Span, span_new: Span) -> list[dict]:
    """The step time and its parts as rows ``part, base_ns, new_ns, delta_ns`` (device parts when either trace
    has device work)."""
    device = _any_device(base) or _any_device(new)
    pb, pn = parts(base, span_base, device), parts(new, span_new, device)
    rows = [{"part": "step", "base_ns": span_base.step_ns, "new_ns": span_new.step_ns,
             "delta_ns": span_new.step_ns - span_base.step_ns}]
    rows += [{"part": k, "base_ns": pb[k], "new_ns": pn[k], "delta_ns": pn[k] - pb[k]} for k in pb]
    return rows


def _any_device(trace: Trace) -> bool:
    mask = kind_mask(trace.select(["kind"]), ("kernel", "memcpy", "memset", "comm"))
    return bool(pc.any(mask).as_py())


def sentence(rows: list[dict], per_step: bool) -> str:
    """"new is 12.3% slower per step (4.100 ms -> 4.600 ms): +350.000 us compute, +150.000 us idle"."""
    step = rows[0]
    base, new = step["base_ns"], step["new_ns"]
    unit = "per step" if per_step else "over the whole trace"
    if not base:
        return f"time {unit}: {format_ns(base)} -> {format_ns(new)}"
    pct = 100.0 * (new - base) / base
    verb = "slower" if pct > 0 else "faster" if pct < 0 else "the same"
    head = f"new is {abs(pct):.1f}% {verb} {unit}" if verb != "the same" else f"new takes the same time {unit}"
    parts = sorted((r for r in rows[1:] if r["delta_ns"]), key=lambda r: -abs(r["delta_ns"]))[:3]
    detail = ", ".join(f"{'+' if r['delta_ns'] > 0 else '-'}{format_ns(abs(r['delta_ns']))} {r['part']}"
                       for r in parts)
    return f"{head} ({format_ns(base)} -> {format_ns(new)})" + (f": {detail}" if detail else "")
