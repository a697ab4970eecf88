"""Where the difference comes from: the step time and its parts (device compute, copies, communication, idle;
on CPU-only traces the host's time in the DataLoader, in ops and in neither), per step, in both traces."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, name_match
from opscope.analyses.gpu import gpu_analysis
from opscope.analyses.idle import INPUT_KINDS, INPUT_PIPELINE
from opscope.analyses.intervals import union_by_group, union_ns
from opscope.analyses.noise import Shift, shift
from opscope.analyses.steps import step_window
from opscope.diff.normalize import Span
from opscope.diff.samples import StepSample, recorded_step_times
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace
from opscope.units import format_ns

#: The device parts of a step, in the order the headline lists them.
DEVICE_PARTS = ("compute", "memcpy", "memset", "comm")
#: What each part of the headline is, for the notes and the CI gate's message.
PART_MEANING = {
    "step": "the step time",
    "compute": "device time in compute kernels",
    "memcpy": "device time in copies",
    "memset": "device time in memsets",
    "comm": "device time in collectives",
    "idle": "device time with no work (waiting for the host, for input, for synchronisation)",
    "unseen_busy": "device time on work the trace does not show",
    "dataloader": "host time in the DataLoader, fetching the next batch: __next__, the dataset's __getitem__, "
                  "collate, ops inside included",
    "host_ops": "host time in ops (cpu_op spans), outside the DataLoader",
    "outside_ops": "host time outside ops and the DataLoader: Python code, waiting, framework overhead",
}


@memoized(keep=True)
def parts(trace: Trace, span: Span, device_work: bool, host_work: bool = False) -> dict[str, int]:
    """``{part: ns per step}``: with ``device_work``, compute/memcpy/memset/comm (each that kind's device time
    inside the compared steps, summed over devices) and idle (device time in them not covered by any work),
    from the device timeline as ``opscope gpu`` counts it, so work that crosses a step boundary counts where it
    ran; with ``host_work`` (or without device work), the host's time: ``dataloader`` (union of the DataLoader's
    spans in the compared steps, ops inside included; only when a trace has them), ``host_ops`` (union of the
    cpu_op spans outside it) and ``outside_ops`` (the rest of the step). ``unseen_busy`` (only when a trace has
    it): device time spent on work the trace does not show (:class:`opscope.analyses.gpu.UnseenBusy`), left out
    of idle. Kept in the cache entry of a cached trace for the next diff."""
    return _parts(trace, span, device_work, host_work)


def _parts(trace: Trace, span: Span, device_work: bool, host_work: bool) -> dict[str, int]:
    total = span.step_ns * span.divisor  # the compared time, all used steps together
    out: dict[str, int] = {}
    if device_work:
        within = gpu_analysis(trace).parts_within(_intervals(trace, span))
        for part in DEVICE_PARTS:
            out[part] = sum(within[part].values())
        unseen = within["unseen_busy"]
        out["idle"] = sum(max(0, total - b - unseen.get(dev, 0)) for dev, b in within["busy"].items())
        if unseen:  # time a device spent on work the trace does not show: neither busy nor idle
            out["unseen_busy"] = sum(unseen.values())
    if host_work or not device_work:
        ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "step"])
        if span.steps is not None:
            ev = ev.filter(pc.fill_null(pc.is_in(ev["step"], pa.array(span.steps, pa.int64())), False))
        ops = ev.filter(kind_mask(ev, ("cpu_op",)))
        # DataLoader spans (the input-pipeline rule's: its annotation, and torch's dataloader.py frames)
        loader = ev.filter(pc.and_(kind_mask(ev, INPUT_KINDS), name_match(ev["name"], INPUT_PIPELINE)))
        in_loader = union_ns(loader["ts_ns"], loader["dur_ns"])
        either = union_ns(pa.concat_arrays([_plain(ops["ts_ns"]), _plain(loader["ts_ns"])]),
                          pa.concat_arrays([_plain(ops["dur_ns"]), _plain(loader["dur_ns"])]))
        if loader.num_rows:  # a part of its own, so that a slower loader is named as such
            out["dataloader"] = in_loader
        out["host_ops"] = either - in_loader
        out["outside_ops"] = max(0, total - either)
    return {k: round(v / span.divisor) for k, v in out.items()}


@memoized(keep=True)
def parts_by_step(trace: Trace, span: Span, device_work: bool, host_work: bool = False) -> dict[str, list[int]]:
    """:func:`parts` step by step: per part, its time in each of the span's steps, in the span's order (no parts for
    a whole-trace span), counted as :func:`parts` counts them over all the steps together: the samples of each
    part's interval. Kept in the cache entry of a cached trace for the next diff."""
    if span.steps is None:
        return {}
    return _parts_by_step(trace, span, device_work, host_work)


def _parts_by_step(trace: Trace, span: Span, device_work: bool, host_work: bool) -> dict[str, list[int]]:
    steps = trace.steps
    where = {n: (s, s + d) for n, s, d in zip(steps["step"].to_pylist(), steps["ts_ns"].to_pylist(),
                                               steps["dur_ns"].to_pylist())}
    numbers = [n for n in span.steps or () if n in where]
    windows = [where[n] for n in numbers]
    length = [end - start for start, end in windows]
    count = range(len(windows))
    out: dict[str, list[int]] = {}
    if device_work:
        within = gpu_analysis(trace).parts_per_span(windows)
        for part in DEVICE_PARTS:
            out[part] = [sum(covered[i] for covered in within[part].values()) for i in count]
        unseen = within["unseen_busy"]
        out["idle"] = [sum(max(0, length[i] - busy[i] - (unseen[dev][i] if dev in unseen else 0))
                           for dev, busy in within["busy"].items()) for i in count]
        if unseen:
            out["unseen_busy"] = [sum(covered[i] for covered in unseen.values()) for i in count]
    if host_work or not device_work:
        ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "step"])
        ev = ev.filter(pc.fill_null(pc.is_in(ev["step"], pa.array(numbers, pa.int64())), False))
        ops = ev.filter(kind_mask(ev, ("cpu_op",)))
        loader = ev.filter(pc.and_(kind_mask(ev, INPUT_KINDS), name_match(ev["name"], INPUT_PIPELINE)))
        in_loader = union_by_group(loader["ts_ns"], loader["dur_ns"], loader["step"])
        either = union_by_group(pa.chunked_array([_plain(ops["ts_ns"]), _plain(loader["ts_ns"])]),
                                pa.chunked_array([_plain(ops["dur_ns"]), _plain(loader["dur_ns"])]),
                                pa.chunked_array([_plain(ops["step"]), _plain(loader["step"])]))
        if loader.num_rows:
            out["dataloader"] = [in_loader.get(n, 0) for n in numbers]
        out["host_ops"] = [either.get(n, 0) - in_loader.get(n, 0) for n in numbers]
        out["outside_ops"] = [max(0, length[i] - either.get(n, 0)) for i, n in enumerate(numbers)]
    return out


def _plain(values: pa.ChunkedArray) -> pa.Array:
    return combined(values).cast(pa.int64())


def _intervals(trace: Trace, span: Span) -> list[tuple[int, int]]:
    """The compared time as (start, end) spans: the chosen steps, or the whole trace."""
    if span.steps is None:
        return [step_window(trace)]
    steps = trace.steps.filter(pc.is_in(trace.steps["step"], pa.array(span.steps, pa.int64())))
    return list(zip(steps["ts_ns"].to_pylist(), pc.add(steps["ts_ns"], steps["dur_ns"]).to_pylist()))


#: The interval columns of a headline row (:func:`interval_columns`).
INTERVAL_FIELDS = ("median_delta_ns", "ci_low", "ci_high", "ci_low_pct", "ci_high_pct")


def headline_rows(base: Trace, new: Trace, span_base: Span, span_new: Span,
                  samples: tuple[StepSample, StepSample] | None = None) -> list[dict]:
    """The step time and its parts as rows ``part, base_ns, new_ns, delta_ns`` (means per step) and the median
    difference per step with its 95% interval (:data:`INTERVAL_FIELDS`, None where there is none): device parts
    when both traces have device work, host parts when neither has, both kinds when only one has (its device parts
    are then compared with nothing, and the host parts are what the two have in common). The step's interval is
    of ``samples`` (:func:`opscope.diff.samples.step_samples`; the recorded steps' durations when None), the parts'
    of their time in each recorded step (:func:`parts_by_step`)."""
    device_base, device_new = any_device(base), any_device(new)
    device, host = device_base or device_new, device_base != device_new
    pb, pn = parts(base, span_base, device, host), parts(new, span_new, device, host)
    sb, sn = parts_by_step(base, span_base, device, host), parts_by_step(new, span_new, device, host)
    if samples is None:
        samples = (StepSample(tuple(recorded_step_times(base, span_base)), "recorded"),
                   StepSample(tuple(recorded_step_times(new, span_new)), "recorded"))
    rows = [{"part": "step", "base_ns": span_base.step_ns, "new_ns": span_new.step_ns,
             "delta_ns": span_new.step_ns - span_base.step_ns,
             **interval_columns(shift(samples[0].values, samples[1].values))}]
    zeros_b, zeros_n = [0] * len(span_base.steps or ()), [0] * len(span_new.steps or ())
    # every part either trace has (unseen_busy may be in one only), in the order they come
    rows += [{"part": k, "base_ns": pb.get(k, 0), "new_ns": pn.get(k, 0), "delta_ns": pn.get(k, 0) - pb.get(k, 0),
              **interval_columns(shift(sb.get(k, zeros_b), sn.get(k, zeros_n)))}
             for k in dict.fromkeys([*pb, *pn])]
    return rows


def interval_columns(found: Shift | None) -> dict[str, int | float | None]:
    """:data:`INTERVAL_FIELDS` of a median difference (all None without one)."""
    if found is None:
        return dict.fromkeys(INTERVAL_FIELDS)
    return {"median_delta_ns": found.delta, "ci_low": found.low, "ci_high": found.high,
            "ci_low_pct": _pct(found.low_pct), "ci_high_pct": _pct(found.high_pct)}


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def device_mismatch(base: Trace, new: Trace, labels: tuple[str, str]) -> str | None:
    """A note when only one of the traces has device activity (a GPU run against a CPU run), else None."""
    device_base, device_new = any_device(base), any_device(new)
    if device_base == device_new:
        return None
    with_device, without = labels if device_base else labels[::-1]
    return (f"only {with_device} has device activity: its device parts are compared with nothing in {without}; "
            f"host_ops and outside_ops are the parts the two traces share")


#: Fewer steps than this on a side: one step's noise can be the whole difference (said in a note).
FEW_STEPS = 5


def side_description(trace: Trace, steps: int | None) -> str:
    """What a side ran on, as the trace says it: its devices (by name, counted), its rank and world size, and the
    steps compared (``steps`` None: the whole trace). ``2x NVIDIA A100-SXM4-80GB, rank 0 of 8, 12 steps``."""
    props = [p for p in trace.metadata.get("device_properties") or [] if isinstance(p, dict)]
    by_id = {p["id"]: p.get("name") for p in props if isinstance(p.get("id"), int)}  # a hostile id is not a key
    names: dict[str, int] = {}
    for device in _working_devices(trace):  # the devices the trace's work ran on, not every one it lists
        name = by_id.get(device)
        label = name if isinstance(name, str) and name else f"device {device} (not named in the trace)"
        names[label] = names.get(label, 0) + 1
    devices = ", ".join(f"{n}x {name}" if n > 1 else name for name, n in names.items()) or "no device activity"
    if names and len(props) > sum(names.values()):
        devices += f" (of {len(props)} in the trace's device list)"
    parts = [devices]
    rank, world = trace.metadata.get("rank"), trace.metadata.get("world_size")
    if isinstance(world, int) and world > 0:
        parts.append(f"rank {rank if isinstance(rank, int) else '?'} of {world}")
    parts.append("the whole trace" if steps is None else f"{steps} step{'s' if steps != 1 else ''}")
    return ", ".join(parts)


@memoized(keep=True)
def _working_devices(trace: Trace) -> list[int]:
    """The device ids of the trace's device work (kernels, copies, fills, collectives)."""
    events = trace.select(["kind", "device"])
    work = pc.filter(events["device"], kind_mask(events, ("kernel", "memcpy", "memset", "comm")))
    return sorted(d for d in pc.unique(work).to_pylist() if d is not None)


def few_steps_note(labels: tuple[str, str], counts: tuple[int, int]) -> str | None:
    """A note when a side compares fewer than :data:`FEW_STEPS` steps, else None."""
    few = [f"{label} {n}" for label, n in zip(labels, counts) if n < FEW_STEPS]
    if not few:
        return None
    return (f"few steps compared ({', '.join(few)}): with fewer than {FEW_STEPS} a side's mean is one or two steps, "
            f"whose noise can be the whole difference; record more steps (opscope record --active N)")


@memoized(keep=True)
def any_device(trace: Trace) -> bool:
    """Whether the trace has device work (kernels, copies, fills, collectives)."""
    return bool(pc.any(kind_mask(trace.select(["kind"]), ("kernel", "memcpy", "memset", "comm"))).as_py())


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


def biggest_part(rows: list[dict]) -> dict | None:
    """The headline part (not the step itself) that grew the most, or None when none grew."""
    grown = [r for r in rows if r["part"] != "step" and r["delta_ns"] > 0]
    return max(grown, key=lambda r: r["delta_ns"]) if grown else None


def part_line(row: dict) -> str:
    """``dataloader +1.109 s (host time in the DataLoader: ...)``."""
    sign = "+" if row["delta_ns"] >= 0 else "-"
    meaning = PART_MEANING.get(row["part"])
    return f"{row['part']} {sign}{format_ns(abs(row['delta_ns']))}" + (f" ({meaning})" if meaning else "")


def part_notes(rows: list[dict]) -> list[str]:
    """What each part of the headline is, one line per part present."""
    return [f"{r['part']}: {PART_MEANING[r['part']]}" for r in rows
            if r["part"] in PART_MEANING and r["part"] != "step"]
