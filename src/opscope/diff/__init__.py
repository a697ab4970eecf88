"""Compare two traces: per-step ops and kernels matched by name (or shapes, or Python API), the device time of
each op matched by op and input shapes and per kernel class (across vendors, whatever the kernels are called),
kernel choice changes, a headline of where the difference comes from, and a CI gate on the step time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.diff.device_ops import DeviceMatch, compare_device, matched_sentence
from opscope.diff.gate import Threshold, Verdict, verdict
from opscope.diff.headline import (
    any_device,
    biggest_part,
    device_mismatch,
    few_steps_note,
    headline_rows,
    part_line,
    parts,
    parts_by_step,
    sentence,
    side_description,
)
from opscope.diff.kernel_choice import kernel_choice_changes, kernels_by_op
from opscope.diff.normalize import Span, spans
from opscope.diff.rows import (
    MAX_ROW_STEPS,
    check_by,
    combine,
    kernel_step_sums,
    kernel_totals,
    op_step_sums,
    op_totals,
    row_schema,
    sort_rows,
)
from opscope.diff.samples import StepSample, samples_text, step_samples
from opscope.errors import TraceError, UsageError
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace
from opscope.threads import side_by_side, usable_cores

__all__ = ["Comparison", "check_inputs", "compare", "framework_guess"]


@dataclass
class Comparison:
    rows: pa.Table
    kernel_choice: pa.Table
    headline: list[dict]
    summary: str
    span_base: Span
    span_new: Span
    notes: list[str] = field(default_factory=list)
    #: what the rows (ops and kernels matched by name) mean
    row_notes: list[str] = field(default_factory=list)
    #: device time per op (matched by op and input shapes, then by op) and per kernel class
    op_rows: pa.Table | None = None
    classes: pa.Table | None = None
    device_match: DeviceMatch | None = None
    #: which op device work is charged to (:data:`opscope.analyses.op_device.OP_LEVELS`)
    op_level: str = "api"
    #: per category, the mean time per step on each side's critical path (:mod:`opscope.diff.critical_path`),
    #: computed when asked for (``--table critical-path``): it replays both traces' dependency graphs
    critical_path: Callable[[], pa.Table] | None = None
    #: per op, shapes and dtype, each side's roofline under its own device's peaks, and the notes
    #: (:mod:`opscope.diff.roofline`), computed when asked for (``--table roofline``)
    roofline: Callable[[], tuple[pa.Table, list[str]]] | None = None
    #: the step durations each side's step time is judged on (:mod:`opscope.diff.samples`): the headline's interval
    #: and the gate's
    samples: tuple[StepSample, StepSample] = (StepSample((), "recorded"), StepSample((), "recorded"))

    @property
    def per_step(self) -> bool:
        return self.span_base.per_step

    def gate(self, threshold: Threshold) -> Verdict:
        """The CI gate's verdict on the step time (:func:`opscope.diff.gate.verdict`); a failing one names the part
        of the step that grew most, then the rows."""
        unit = "per-step" if self.per_step else "whole-trace"
        found = verdict(*self.samples, threshold, unit)
        reason = found.line
        if found.failed:
            # the part of the step that grew most first (a slower DataLoader is not an op's fault), then the rows
            part = biggest_part(self.headline)
            if part is not None:
                reason += "; biggest part: " + part_line(part)
            worst = [r for r in self.rows.slice(0, 3).to_pylist() if r["delta_ns"] > 0]
            if worst:
                from opscope.units import format_ns

                reason += "; biggest rows: " + ", ".join(
                    f"{r['kind']} {_short(r['name'])} {'+' if r['delta_ns'] > 0 else ''}{format_ns(r['delta_ns'])}"
                    for r in worst)
        return Verdict(found.outcome, reason)


def compare(base: Trace, new: Trace, by: str = "name", steps: str | None = None, whole_trace: bool = False,
            labels: tuple[str, str] = ("base", "new"), ops: bool = True, kernels: bool = True,
            op_level: str = "api", roofline_peaks: tuple[Path | None, Path | None] = (None, None),
            runs: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)) -> Comparison:
    """Compare ``new`` against ``base`` (both already checked by :func:`check_inputs` when they come from
    files). Times are per step when both traces have steps, else whole-trace totals. ``op_level`` says which op
    device work is charged to in the op rows (:mod:`opscope.analyses.op_device`). ``roofline_peaks``: a peaks file
    per side for the roofline table (None: the peaks of the device the trace names). ``runs``: each side's
    run.json (:func:`opscope.analyses.recording.clean_run`), whose runner-timed steps, where both have enough, are
    the step time's samples (:mod:`opscope.diff.samples`)."""
    from opscope.analyses.op_device import check_level, device_work

    by = check_by(by)
    check_level(op_level)
    fb, fn = framework_guess(base), framework_guess(new)
    if by != "api" and fb and fn and fb != fn:
        raise UsageError(f"{labels[0]} is a trace of {fb} and {labels[1]} one of {fn}: their ops have different names; "
                         "pass --by api to match ops across frameworks by their Python API or ONNX op type")
    sb, sn = spans(base, new, labels, steps=steps, whole_trace=whole_trace)
    with_shapes = by == "name,shapes"
    device_base, device_new = any_device(base), any_device(new)

    def side(trace: Trace, span: Span, framework: str | None) -> tuple:
        """What the comparison needs from one trace. Each trace's analyses are computed once (Trace.memo: the
        device links serve several), and only where no result is kept in its cache entry."""
        device, host = device_base or device_new, device_base != device_new
        return (op_totals(trace, span, by, framework) if ops else None,
                kernel_totals(trace, span) if kernels else None,
                kernels_by_op(trace, span), device_work(trace, op_level, framework),
                parts(trace, span, device, host), parts_by_step(trace, span, device, host),
                op_step_sums(trace, span, by, framework) if ops else None,
                kernel_step_sums(trace, span) if kernels else None)

    # the two traces at once, the new one on a helper thread (mostly Arrow and C work: it runs without the GIL; an
    # error of the base trace's is raised first, as one after the other would); one trace given twice (or one core), in
    # turn
    if base is new or usable_cores() < 2:
        of_base = side(base, sb, fb)
        of_new = side(new, sn, fn)
    else:
        of_new, of_base = side_by_side(lambda: side(new, sn, fn), lambda: side(base, sb, fb), "opscope-diff")
    ops_b, kernels_b, choice_b, work_b, _, _, op_steps_b, kernel_steps_b = of_base
    ops_n, kernels_n, choice_n, work_n, _, _, op_steps_n, kernel_steps_n = of_new
    rows = [row_schema(with_shapes, sb.per_step).empty_table()]
    if ops:
        rows.append(combine("op", ops_b, ops_n, sb, sn, with_shapes, (op_steps_b, op_steps_n)))
    if kernels:
        rows.append(combine("kernel", kernels_b, kernels_n, sb, sn, with_shapes, (kernel_steps_b, kernel_steps_n)))
    table = sort_rows(pa.concat_tables(rows))
    choice = kernel_choice_changes(choice_b, choice_n, sb, sn)
    device = compare_device(work_b, work_n, sb, sn)
    samples = step_samples(base, new, sb, sn, runs, steps_chosen=steps is not None)
    head = headline_rows(base, new, sb, sn, samples)  # from the parts computed above
    notes, row_notes = _notes(sb, sn, labels), _row_notes(by)
    notes.append(_interval_note(samples, sb.per_step))
    if sb.per_step:
        row_notes.append(_row_interval_note(sb, sn))
    mismatch = device_mismatch(base, new, labels)
    if mismatch:
        notes.insert(0, mismatch)
    summary = sentence(head, sb.per_step)
    if device.match.any_device_work:
        summary += "; " + matched_sentence(device.match)
    counts = (sb.divisor, sn.divisor) if sb.per_step else None
    summary += (f". {labels[0]}: {side_description(base, counts[0] if counts else None)}; "
                f"{labels[1]}: {side_description(new, counts[1] if counts else None)}")
    few = few_steps_note(labels, counts) if counts else None
    if few:
        notes.insert(1 if mismatch else 0, few)
    return Comparison(table, choice, head, summary, sb, sn, notes, row_notes, op_rows=device.ops,
                      classes=device.classes, device_match=device.match, op_level=op_level,
                      critical_path=lambda: _critical_path(base, new),
                      roofline=lambda: _roofline(base, new, roofline_peaks), samples=samples)


# The critical-path and roofline tables load the graph's and the work models' modules (0.08 s) only when asked for.
def _critical_path(base: Trace, new: Trace) -> pa.Table:
    from opscope.diff.critical_path import critical_path_delta

    return critical_path_delta(base, new)


def _roofline(base: Trace, new: Trace, peaks: tuple[Path | None, Path | None]) -> tuple[pa.Table, list[str]]:
    from opscope.diff.roofline import roofline_delta

    return roofline_delta(base, new, *peaks)


def check_inputs(base_path: Path, new_path: Path, base: Trace, new: Trace) -> None:
    """Refuse what cannot be compared: the same file twice, a trace without events."""
    try:
        same = base_path.samefile(new_path)
    except OSError:
        same = False
    if same:
        raise TraceError(new_path, f"is the same file as {base_path}; nothing to compare",
                         "give two different traces (a baseline and a new run)")
    for path, trace in ((base_path, base), (new_path, new)):
        if trace.num_events == 0:
            raise TraceError(path, "has no events; nothing to compare", "check that the profiler recorded a step")


def framework_guess(trace: Trace) -> str | None:
    """pytorch / tensorflow / onnxruntime from the reader, else from the op names (aten:: is PyTorch; names
    that are TensorFlow ops, e.g. Conv2D, MatMul, make it TensorFlow); None when it cannot tell."""
    from opscope.analyses.names import framework_of, python_api

    known = framework_of(trace.metadata)
    if known:
        return known
    ev = trace.select(["kind", "name"])
    # distinct names first (on the dictionary's codes), text after: not a string per op
    names = pc.unique(pc.filter(ev["name"].unify_dictionaries(), kind_mask(ev, ("cpu_op",)))).cast(pa.string())
    names = pc.filter(names, pc.fill_null(pc.not_equal(names, ""), False))
    if not len(names):
        return None
    aten = pc.sum(pc.cast(pc.starts_with(names, "aten::"), pa.int64())).as_py() or 0
    if aten >= 0.2 * len(names):
        return "pytorch"
    tf = sum(bool(python_api(n, "tensorflow")) for n in names.to_pylist() if "::" not in n)
    return "tensorflow" if tf >= 3 and aten == 0 else None


def _notes(sb: Span, sn: Span, labels: tuple[str, str]) -> list[str]:
    from opscope.units import format_ns

    notes = []
    if sb.per_step:
        notes.append("window: in each trace the compared steps, each ProfilerStep#N's start to end; the headline's "
                     "device parts and idle are the device timeline inside them (as opscope gpu counts it), the "
                     "op and kernel rows the work launched in them")
        for label, s in zip(labels, (sb, sn)):
            text = f"{label}: {s.divisor} step(s) compared, mean {format_ns(s.step_ns)}"
            if s.warmup_step is not None:
                text += f" (step {s.warmup_step} is a warm-up outlier, counted: --steps to leave it out)"
            notes.append(text)
        notes.append("times and calls are per step (means over the compared steps: a fraction such as 0.5 calls "
                     "means the op ran in some steps only, or more often in some); device work belongs to the step "
                     "whose host call launched it")
    else:
        notes.append(f"window: each trace whole, first to last event of any kind ({labels[0]} "
                     f"{format_ns(sb.step_ns)}, {labels[1]} {format_ns(sn.step_ns)}); times and calls are totals")
    return notes


def _interval_note(samples: tuple[StepSample, StepSample], per_step: bool) -> str:
    """What the headline's interval is, which samples the step time's is of, and how each side's spread."""
    from opscope.analyses.noise import METHOD, MIN_SAMPLES
    from opscope.units import format_ns

    if not per_step:
        return "ci_95: none for whole-trace totals (an interval needs per-step samples: compare traces with steps)"
    sides = []
    for label, sample in zip(("base", "new"), samples):
        spread = sample.spread
        if spread is not None:
            sides.append(f"{label} median {format_ns(round(spread.median))}, p10-p90 {format_ns(round(spread.p10))}"
                         f"-{format_ns(round(spread.p90))}")
    spreads = f" ({'; '.join(sides)})" if sides else ""
    return (f"ci_95 (JSON/CSV with --table headline: median_delta_ns, ci_low, ci_high, and ci_low_pct, ci_high_pct in "
            f"% of the base median): the {METHOD}; the step time's over {samples_text(*samples)}{spreads}, each "
            f"part's over its time in each compared step; within noise: the interval holds 0; fewer than "
            f"{MIN_SAMPLES} steps a side give none")


def _row_interval_note(sb: Span, sn: Span) -> str:
    from opscope.analyses.noise import MIN_SAMPLES

    counts = (len(sb.steps or ()), len(sn.steps or ()))
    text = ("ci_95 (JSON/CSV: median_delta_ns, ci_low, ci_high, ci_low_pct, ci_high_pct): each row's median "
            "difference per step and its 95% interval, over the row's time in each compared step (0 in a step without "
            f"it): {counts[0]} and {counts[1]} recorded steps; within noise: the interval holds 0")
    if max(counts) > MAX_ROW_STEPS:
        text += f" (at most {MAX_ROW_STEPS} a side, evenly spaced among them)"
    if min(counts) < MIN_SAMPLES:
        text += f"; none with fewer than {MIN_SAMPLES} steps a side"
    return text


def _row_notes(by: str) -> list[str]:
    notes = []
    if by == "api":
        notes.append("op rows: the outermost ops that have a Python API, matched by its last name in lower case "
                     "(aten::conv2d, TF's Conv2D/_FusedConv2D, ONNX's Conv and MIGraphX's convolution are all conv2d; "
                     "linear, addmm, MatMul, Gemm and dot are all matmul), inclusive time; ops without an API or "
                     "ONNX op type are left out")
    else:
        notes.append("op rows: host self time (cpu_op, nested ops not counted twice)"
                     + (", matched by name and input shapes" if by == "name,shapes" else ", matched by name"))
    notes.append("kernel rows: device time of kernels, copies, memsets and collectives, matched by name")
    return notes


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
