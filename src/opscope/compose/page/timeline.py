"""The report's Timeline: the host threads and device streams of a few steps (by default the median step and the
slowest one), each step's events as compact arrays the page draws with a zoomable canvas timeline.

Everything the page shows is computed here from the model: which events (the step's events by the model's
``step`` column: host events inside the step's span, device work the step launched), their lanes (one per
process and thread, named and ordered as ``opscope export`` names and orders its tracks), their depth (the
model's nesting; device work at depth 0), the launch -> device work links (the links analysis') and, past a
budget of events per step, which are drawn (the longest) and what is left out per lane. The renderer only turns
the arrays into the library's shapes.

The data, JSON-ready (:func:`timeline_data`)::

    {"strings": [name, ...], "kinds": [kind, ...],
     "steps": [{"step": N, "label": "median step", "start_ns": ..., "dur_ns": ...,
                "lanes": [{"name": ..., "device": bool}, ...],
                "start": [...], "dur": [...], "depth": [...], "name": [...], "lane": [...], "kind": [...],
                "links": [[launch index, device index], ...],
                "events": n, "drawn": n, "shorter_than_ns": ns or null,
                "left_out": [{"lane": i, "events": n, "dur_ns": ns}, ...]}, ...]}

``start`` is ns after the step's start; ``name`` and ``kind`` index ``strings`` and ``kinds``; ``lane`` indexes
the step's ``lanes``; a link's two ends index the step's arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.errors import UsageError
from opscope.render.html.page import Block, PageSection, ProseBlock, TimelineBlock
from opscope.units import format_ns

if TYPE_CHECKING:
    from opscope.advise.context import AdviceContext
    from opscope.model.trace import Trace

#: Events drawn per step at most: past it the longest are drawn and the rest counted per lane, so a 1 GB trace's
#: report stays a few MB (each drawn event costs ~30 bytes of JSON).
STEP_BUDGET = 50_000
#: What the timeline draws: the op layer on host threads (Python frames nest apart and would double the lanes'
#: depth), device work on streams. Markers, profiler bookkeeping and a graph capture's copied ops are left out.
DRAWN_KINDS = ("cpu_op", "user_annotation", "runtime", "overhead", "other", "kernel", "memcpy", "memset", "comm",
               "sync")
DEVICE_KINDS = ("kernel", "memcpy", "memset", "comm")
_COLUMNS = ["kind", "name", "ts_ns", "dur_ns", "depth", "pid", "tid"]


@dataclass(frozen=True)
class Chosen:
    """A step the timeline shows and why."""

    step: int
    label: str


def chosen_steps(trace: Trace, steps: Sequence[int] | None = None) -> list[Chosen]:
    """``steps`` (checked: a UsageError names the trace's steps when one is not there), else the median step (the
    step whose duration is nearest the median, the first of equals) and the slowest one; none without steps."""
    from opscope.analyses.steps import step_stats, step_table

    table = step_table(trace)
    numbers = table["step"].to_pylist()
    if steps is not None:
        missing = [s for s in steps if s not in numbers]
        if missing:
            have = f"its steps are {min(numbers)} to {max(numbers)}" if numbers else "it has no steps"
            raise UsageError(f"--timeline-steps: the trace has no step {missing[0]} ({have})")
        return [Chosen(s, "chosen step") for s in dict.fromkeys(steps)]
    if not numbers:
        return []
    durs = table["dur_ns"].to_pylist()
    median = step_stats(table).median_ns or 0
    mid = min(range(len(durs)), key=lambda i: (abs(durs[i] - median), i))
    slow = max(range(len(durs)), key=lambda i: (durs[i], -i))
    if mid == slow:
        return [Chosen(numbers[mid], "median and slowest step")]
    return [Chosen(numbers[mid], "median step"), Chosen(numbers[slow], "slowest step")]


def timeline_data(trace: Trace, chosen: Sequence[Chosen], budget: int = STEP_BUDGET) -> dict[str, Any]:
    """The chosen steps' events as the page draws them (the module's docstring gives the shape)."""
    strings: dict[str, int] = {}
    kinds: dict[str, int] = {}
    steps = trace.steps
    out = []
    for c in chosen:
        at = pc.index_in(pa.scalar(c.step, pa.int64()), steps["step"]).as_py()
        start, dur = steps["ts_ns"][at].as_py(), steps["dur_ns"][at].as_py()
        out.append(_step(trace, c, start, dur, budget, strings, kinds))
    return {"strings": list(strings), "kinds": list(kinds), "steps": out}


def _step(trace: Trace, chosen: Chosen, start_ns: int, dur_ns: int, budget: int, strings: dict[str, int],
          kinds: dict[str, int]) -> dict[str, Any]:
    from opscope.compose.export.select import Cut, kept_rows
    from opscope.compose.export.tracks import layout

    rows = kept_rows(trace, Cut(steps=[chosen.step], kinds=DRAWN_KINDS))
    total = len(rows)
    events = trace.select(_COLUMNS).take(rows)
    tracks = layout(trace, rows, [])
    pid = pc.cast(events["pid"], pa.string()).to_pylist()
    tid = pc.cast(events["tid"], pa.string()).to_pylist()
    keys = [(p or "", t or "") for p, t in zip(pid, tid)]
    order = sorted(set(keys), key=lambda k: (tracks.process_sort.get(k[0], 0), k[0], tracks.thread_sort.get(k, 0)))
    lane_of = {k: i for i, k in enumerate(order)}
    kind = pc.cast(events["kind"], pa.string()).to_pylist()
    device_lane = [False] * len(order)
    for k, kd in zip(keys, kind):
        if kd in DEVICE_KINDS:
            device_lane[lane_of[k]] = True
    lanes = [{"name": f"{tracks.process_name.get(p, p)} · {tracks.thread_name.get((p, t), t)}",
              "device": device_lane[i]} for i, (p, t) in enumerate(order)]
    lane = [lane_of[k] for k in keys]
    depth = [0 if device_lane[ln] else (d or 0) for ln, d in zip(lane, events["depth"].to_pylist())]
    durs = [d or 0 for d in events["dur_ns"].to_pylist()]
    keep = list(range(total))
    left_out: list[dict[str, int]] = []
    shorter_than = None
    if total > budget:
        ranked = sorted(keep, key=lambda i: (-durs[i], depth[i], i))  # parents before children of the same length
        keep = sorted(ranked[:budget])
        shorter_than = durs[ranked[budget - 1]]
        per_lane: dict[int, list[int]] = {}
        for i in ranked[budget:]:
            entry = per_lane.setdefault(lane[i], [0, 0])
            entry[0] += 1
            entry[1] += durs[i]
        left_out = [{"lane": ln, "events": n, "dur_ns": ns} for ln, (n, ns) in sorted(per_lane.items())]
    names = pc.cast(events["name"], pa.string()).to_pylist()
    ts = events["ts_ns"].to_pylist()
    row_of = rows.to_pylist()
    position = {row_of[i]: p for p, i in enumerate(keep)}
    return {
        "step": chosen.step, "label": chosen.label, "start_ns": start_ns, "dur_ns": dur_ns, "lanes": lanes,
        "start": [ts[i] - start_ns for i in keep],
        "dur": [durs[i] for i in keep],
        "depth": [depth[i] for i in keep],
        "name": [strings.setdefault(names[i] or "", len(strings)) for i in keep],
        "lane": [lane[i] for i in keep],
        "kind": [kinds.setdefault(kind[i], len(kinds)) for i in keep],
        "links": _links(trace, rows, position),
        "events": total, "drawn": len(keep), "shorter_than_ns": shorter_than, "left_out": left_out,
    }


def _links(trace: Trace, rows: pa.Array, position: dict[int, int]) -> list[list[int]]:
    """[launch, device work] pairs (positions in the drawn events) that ``opscope export`` draws as arrows: the links
    analysis' links whose both ends are drawn."""
    from opscope.compose.export.select import kept_links

    if not len(rows):
        return []
    table = kept_links(trace, rows)
    pairs = []
    for lc, dv in zip(table["launch_row"].to_pylist(), table["device_row"].to_pylist()):
        a, b = position.get(lc), position.get(dv)
        if a is not None and b is not None:
            pairs.append([a, b])
    return pairs


def timeline(ctx: AdviceContext, steps: Sequence[int] | None = None, budget: int = STEP_BUDGET) -> PageSection:
    """The Timeline section: the chosen steps' threads and streams (``steps``: ``--timeline-steps``)."""
    trace = ctx.trace
    chosen = chosen_steps(trace, steps)
    if not chosen:
        from opscope.analyses.steps import NO_STEPS

        return PageSection("timeline", "Timeline", [ProseBlock("no_timeline", f"No timeline: the trace has "
                                                               f"{NO_STEPS}, so there is no step to draw.",
                                                               tone="empty")], intro="opscope export --steps N")
    data = timeline_data(trace, chosen, budget)
    notes = []
    for s in data["steps"]:
        if s["left_out"]:
            left = sum(x["events"] for x in s["left_out"])
            notes.append(f"step #{s['step']}: {s['events']:,} events; the {s['drawn']:,} longest are drawn, the "
                         f"other {left:,} (each at most {format_ns(s['shorter_than_ns'])}) are counted per lane in "
                         "its title")
    said = ", ".join(f"#{c.step} ({c.label}, {format_ns(s['dur_ns'])})" for c, s in zip(chosen, data["steps"]))
    blocks: list[Block] = [TimelineBlock(
        "timeline", "Threads and streams", data,
        caption=f"steps {said}: host ops nested by depth on their thread, kernels, copies and collectives on their "
                f"stream (the work each step launched, wherever it ran); wheel or pinch to zoom, drag to pan, "
                f"hover for times, click an event to see its launch or the work it launched (outlined in green); "
                f"at most {STEP_BUDGET:,} events are drawn per step (--timeline-steps N,M picks the steps)",
        notes=notes)]
    return PageSection("timeline", "Timeline", blocks, intro="opscope export --steps N")
