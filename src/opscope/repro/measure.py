"""``opscope advise --measure``: the speed-ups behind the dominant-op rule's alternatives, measured on this
machine with reproducers of the ops they apply to, instead of the factors the rule assumes.

For each alternative that has a variant (channels_last for depthwise backward and NCHW convolutions, TF32 or
autocast for fp32 math), the cases of the trace whose op ran what the alternative matched are reproduced and run
with that variant. The measured factor is the time-weighted speed-up over those cases (total time over the sum of
each case's time divided by its speed-up), from cases whose variant ran and kept the outputs within the dtype's
tolerance.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from opscope.advise.context import AdviceContext, MeasuredFactor
from opscope.advise.rules.dominant import Alternative, Item, matched_items
from opscope.model.trace import Trace
from opscope.repro.cases import Case, Selection, select_cases
from opscope.repro.report import speedup_ci
from opscope.repro.run import run_cases
from opscope.repro.writer import write_cases

#: Cases measured per alternative (the biggest ones its items are in).
CASES_PER_ALTERNATIVE = 3


@dataclass
class Measurement:
    factors: dict[str, MeasuredFactor] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    directory: Path | None = None


def measure(trace: Trace, trace_path: str, out: Path, budget: float = 0.5, device: str | None = None,
            cuda_here: bool = False, progress: Callable[[str], None] | None = None) -> Measurement:
    """Measure the alternatives the dominant-op rule finds in ``trace``; reproducers go to a new directory."""
    result = Measurement()
    scope, claimed = matched_items(AdviceContext(trace))
    if not claimed:
        result.notes.append("--measure: no finding of the dominant-op rule has a variant to measure")
        return result
    trace_device = "cuda" if scope.gpu else "cpu"
    run_on = device or trace_device
    if run_on == "cuda" and not cuda_here:
        result.notes.append("--measure: the trace ran on a GPU and this machine has none (CUDA not available): the "
                            "assumed factors are kept (--device cpu measures on the CPU, which says little about the "
                            "GPU's kernels)")
        return result
    by_alt: dict[str, tuple[Alternative, list[Item]]] = {}
    for alt, item, _match in claimed:
        by_alt.setdefault(alt.id, (alt, []))[1].append(item)
    selection = select_cases(trace, top=0)
    chosen: dict[int, Case] = {}
    plan: dict[str, list[tuple[Case, str]]] = {}
    for alt_id, (alt, items) in by_alt.items():
        assert alt.variant is not None
        variant = alt.variant(scope)
        cases = _cases_for(selection.cases, items)[:CASES_PER_ALTERNATIVE]
        if not cases:
            result.notes.append(f"--measure: no reproducible case holds what {alt_id} matched")
            continue
        plan[alt_id] = [(c, variant) for c in cases]
        for c in cases:
            chosen[id(c)] = c
    if not chosen:
        return result
    subset = Selection(list(chosen.values()), selection.device, selection.framework, selection.time_is,
                       selection.share_of, len(chosen), [])
    directory, document = write_cases(subset, out, trace_path)
    result.directory = directory
    variants = sorted({v for pairs in plan.values() for _, v in pairs})
    run_cases(directory, document, device=device, budget=budget, variants=",".join(variants), progress=progress)
    entries = {id(case): entry for case, entry in zip(subset.cases, document["cases"])}
    for alt_id, pairs in plan.items():
        factor = _factor(alt_id, pairs, entries, directory, trace_path, run_on)
        if isinstance(factor, str):
            result.notes.append(factor)
        else:
            result.factors[alt_id] = factor
    return result


def _cases_for(cases: list[Case], items: list[Item]) -> list[Case]:
    """The cases (biggest first) whose op, or an op under it, ran an item with the same tensor shapes (every
    tensor shape of the item is among the case's: a pointwise convolution on the same input is not a depthwise
    one)."""
    found = []
    for case in sorted(cases, key=lambda c: -c.total_ns):
        shapes = {json.dumps(d) for d in case.input_dims or () if isinstance(d, list) and d}
        names = {case.op, *case.recorded_ops, *case.leaf_ops}
        for item in items:
            op = item.op or item.name
            item_shapes = {json.dumps(d) for d in _dims(item.shapes) if isinstance(d, list) and d}
            if op in names and item_shapes and item_shapes <= shapes:
                found.append(case)
                break
    return found


def _dims(text: str | None) -> list:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _factor(alt_id: str, pairs: list[tuple[Case, str]], entries: dict, directory: Path, trace_path: str,
            device: str) -> MeasuredFactor | str:
    total = weighted = 0.0
    parts = []
    for case, variant in pairs:
        entry = entries.get(id(case))
        if entry is None:
            continue
        result = next((v for v in entry.get("variants", []) if v.get("name") == variant), None)
        if entry.get("status") != "ok" or result is None or result.get("status") != "ok":
            why = (result or {}).get("status") or entry.get("status")
            parts.append(f"{case.op} case {entry['id']}: not measured ({why})")
            continue
        speedup = result.get("speedup")
        if not isinstance(speedup, int | float) or speedup <= 0:
            continue
        if result.get("within_tolerance") is False:
            parts.append(f"{case.op} case {entry['id']}: {variant} changed the outputs beyond the dtype's tolerance "
                         "(not counted)")
            continue
        total += case.total_ns
        weighted += case.total_ns / speedup
        ci = speedup_ci(result.get("speedup_low"), result.get("speedup_high"))
        verdict = result.get("verdict")
        said = ", ".join(str(x) for x in (ci and f"95% CI {ci}", verdict) if x)
        parts.append(f"{case.op} {_short(case)}: {speedup:.2f}x" + (f" ({said})" if said else ""))
    if not weighted:
        return f"--measure: {alt_id} could not be measured: " + "; ".join(parts[:3])
    factor = total / weighted
    variant = pairs[0][1]
    detail = (f"{variant} made the trace's {len(pairs)} biggest such case{'s' if len(pairs) != 1 else ''} "
              f"{factor:.2f}x faster, time-weighted, on {device} ({'; '.join(parts)})")
    ids = ",".join(str(entries[id(c)]["id"]) for c, _ in pairs if id(c) in entries)
    command = f"opscope repro --run {shlex.quote(str(directory))} --variants {variant}  (cases {ids})"
    return MeasuredFactor(factor=round(factor, 3), detail=detail, command=command)


def _short(case: Case) -> str:
    dims = [d for d in case.input_dims or () if isinstance(d, list) and d and all(isinstance(n, int) for n in d)]
    return ", ".join("x".join(str(n) for n in d) for d in dims[:3])
