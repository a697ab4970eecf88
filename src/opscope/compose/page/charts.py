"""Chart specifications for the HTML report, built with altair (Vega-Lite) from the analyses' tables.

Each function takes rows the analyses computed and returns a JSON-ready spec with its data inline; the page
draws it with the Vega bundle it carries. Times are plotted in milliseconds; every mark's tooltip shows the
value as the tables print it, so a chart and its table never disagree. The icicle is a Vega spec (Vega-Lite
has no hierarchy layout; Vega's ``stratify`` + ``partition`` transforms do it).

Every chart takes its card's width (``width: "container"``). Where a chart has categories, clicking a legend entry
picks them out (a point selection bound to the legend: the others fade; shift-click adds, double-click clears);
where an axis is time, size or a rate on a continuous scale, the wheel zooms it and a drag pans it (an interval
selection bound to the scales; double-click resets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opscope.units import format_bytes, format_ns, format_pct

#: The report's palette: work kinds keep one colour across charts.
PART_COLOURS = {"compute": "#4c78a8", "memcpy": "#f58518", "memset": "#e45756", "comm": "#72b7b2",
                "idle": "#d0d0d0", "unseen busy": "#9d755d", "busy": "#4c78a8"}
#: The icicle's width before the page sizes it to its card (the Vega-Lite charts take the card's width)
WIDTH = 900
#: what a faded (not picked) category keeps of its opacity
FADED = 0.15


def _alt():
    try:
        import altair as alt
    except ImportError:  # pragma: no cover - the view extra brings it
        from opscope.errors import UsageError

        raise UsageError("the HTML report needs the view extra: pip install 'opscope[view]'") from None
    return alt


def _spec(chart) -> dict[str, Any]:
    # not validated against the Vega-Lite schema here (a second per chart on big data); tests validate every chart
    spec = chart.properties(width="container").to_dict(validate=False)
    spec.pop("$schema", None)  # a URL: the page never fetches it, but nothing in it should point outside
    spec["autosize"] = {"type": "fit-x", "contains": "padding"}
    return spec


def _bar_size(bars: int) -> dict[str, int]:
    """A few steps' bars keep a bar's width (one step is not a bar across the card); more share the width."""
    return {"size": 48} if bars < 12 else {}


def _legend_pick(field: str, name: str = "pick"):
    """A click on a legend entry picks out that category of ``field`` (shift-click adds one, double-click clears);
    the opacity encoding that goes with it fades the rest."""
    alt = _alt()
    pick = alt.selection_point(name=name, fields=[field], bind="legend")
    return pick, alt.condition(pick, alt.value(1), alt.value(FADED))


def _zoom(encodings: Sequence[str], name: str = "zoom"):
    """Wheel to zoom, drag to pan the continuous axes ``encodings`` (double-click resets)."""
    return _alt().selection_interval(name=name, bind="scales", encodings=list(encodings))


def ms(ns: int | float | None) -> float:
    return round((ns or 0) / 1e6, 6)


def step_times(steps: Sequence[dict], median_ns: int | None) -> dict[str, Any]:
    """One bar per step (its duration), outliers in another colour, the median of the steps used as a rule."""
    alt = _alt()
    rows = [{"step": f"#{s['step']}", "order": i, "ms": ms(s["dur_ns"]), "duration": format_ns(s["dur_ns"]),
             "kind": "outlier (left out of the statistics)" if s.get("outlier") else "step"}
            for i, s in enumerate(steps)]
    pick, opacity = _legend_pick("kind")
    bars = alt.Chart(alt.Data(values=rows)).mark_bar(**_bar_size(len(rows))).encode(
        opacity=opacity,
        x=alt.X("step:N", sort=alt.EncodingSortField("order"), title="step (ProfilerStep#N)"),
        y=alt.Y("ms:Q", title="step time (ms)"),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=["step", "outlier (left out of the statistics)"],
                                                             range=["#4c78a8", "#e45756"])),
        tooltip=[alt.Tooltip("step:N"), alt.Tooltip("duration:N"), alt.Tooltip("kind:N")]).add_params(pick)
    layers = [bars]
    if median_ns is not None:
        rule = alt.Chart(alt.Data(values=[{"ms": ms(median_ns), "median": format_ns(median_ns)}])).mark_rule(
            strokeDash=[4, 3], color="#333").encode(y="ms:Q", tooltip=[alt.Tooltip("median:N")])
        layers.append(rule)
    return _spec(alt.layer(*layers).properties(height=220))


def step_busy(steps: Sequence[dict]) -> dict[str, Any]:
    """Per step, the device's busy, unseen-busy and idle time stacked to the step's duration."""
    rows = []
    for i, s in enumerate(steps):
        dur, busy, unseen = s["dur_ns"] or 0, s.get("gpu_busy_ns") or 0, s.get("unseen_busy_ns") or 0
        parts = {"busy": busy, "unseen busy": unseen, "idle": max(dur - busy - unseen, 0)}
        for part, ns in parts.items():
            if part == "unseen busy" and not unseen:
                continue
            rows.append({"step": f"#{s['step']}", "order": i, "part": part, "ms": ms(ns), "time": format_ns(ns),
                         "share": format_pct(100 * ns / dur if dur else None)})
    return _stacked_per_step(rows, "part", {p: PART_COLOURS[p] for p in ("busy", "unseen busy", "idle")},
                             "step (ProfilerStep#N)", "time in the step (ms)", len(steps))


def _stacked_per_step(rows: list[dict], part: str, colours: dict[str, str], x_title: str, y_title: str,
                      bars: int, horizontal: bool = False) -> dict[str, Any]:
    """Bars per step (``step``, ``order``, ``ms``, ``time``, ``share`` and the ``part`` field of each row), stacked by
    that field in the order of ``colours``, each part its colour; ``horizontal``: one bar across per step, the
    steps down the chart (the time axis then zooms and pans)."""
    alt = _alt()
    domain = [p for p in colours if any(r[part] == p for r in rows)]
    pick, opacity = _legend_pick(part)
    step = alt.Y if horizontal else alt.X
    value = alt.X if horizontal else alt.Y
    chart = alt.Chart(alt.Data(values=rows)).mark_bar(**({} if horizontal else _bar_size(bars))).encode(
        step("step:N", sort=alt.EncodingSortField("order"), title=x_title),
        value("ms:Q", stack="zero", title=y_title),
        opacity=opacity,
        color=alt.Color(f"{part}:N", title=None, scale=alt.Scale(domain=domain,
                                                                range=[colours[p] for p in domain])),
        order=alt.Order(f"{part}_order:Q"),
        tooltip=[alt.Tooltip("step:N"), alt.Tooltip(f"{part}:N"), alt.Tooltip("time:N"), alt.Tooltip("share:N")],
    ).transform_calculate(**{f"{part}_order": f"indexof({domain!r}, datum.{part})"})
    if horizontal:
        return _spec(chart.add_params(pick, _zoom(["x"])).properties(height=min(640, max(60, 20 * bars))))
    return _spec(chart.add_params(pick).properties(height=220))


#: the critical path's categories (opscope.analyses.depgraph.CATEGORIES), each its colour
PATH_COLOURS = {"host compute": "#4c78a8", "python": "#9ecae9", "host untraced": "#bab0ac",
                "launch/runtime": "#f58518", "device compute": "#54a24b", "copies": "#e45756",
                "communication": "#72b7b2", "sync waits": "#b279a2", "input pipeline": "#eeca3b",
                "unexplained": "#2b2b2b"}


def critical_path(rows: Sequence[dict]) -> dict[str, Any]:
    """Per step, its critical path's time by category (``step``, ``category``, ``ns``, ``share`` rows), stacked to
    the step's length."""
    steps = list(dict.fromkeys(r["step"] for r in rows))
    values = [{"step": "whole trace" if r["step"] is None else f"#{r['step']}", "order": steps.index(r["step"]),
               "category": r["category"], "ms": ms(r["ns"]), "time": format_ns(r["ns"]),
               "share": format_pct(100 * r["share"])} for r in rows]
    return _stacked_per_step(values, "category", PATH_COLOURS, "step", "time on the critical path (ms)", len(steps),
                             horizontal=True)


def device_parts(breakdown: Sequence[dict]) -> dict[str, Any]:
    """Per device (all streams) and stream: compute, memcpy, memset, comm and idle as stacked bars."""
    alt = _alt()
    rows = []
    for r in breakdown:
        label = f"device {r['device']} · " + ("all streams" if r["stream"] is None else f"stream {r['stream']}")
        window = r.get("window_ns") or 0
        for part in ("compute", "memcpy", "memset", "comm", "idle"):
            ns = r.get(f"{part}_ns") or 0
            rows.append({"track": label, "part": part, "ms": ms(ns), "time": format_ns(ns),
                         "share": format_pct(100 * ns / window if window else None)})
    order = list(dict.fromkeys(r["track"] for r in rows))
    parts = ["compute", "memcpy", "memset", "comm", "idle"]
    pick, opacity = _legend_pick("part")
    chart = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("track:N", sort=order, title=None),
        x=alt.X("ms:Q", stack="zero", title="time in the window (ms)"),
        opacity=opacity,
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=parts, range=[PART_COLOURS[p] for p in parts])),
        order=alt.Order("part_order:Q"),
        tooltip=[alt.Tooltip("track:N"), alt.Tooltip("part:N"), alt.Tooltip("time:N"),
                 alt.Tooltip("share:N", title="share of the window")],
    ).transform_calculate(part_order=f"indexof({parts!r}, datum.part)").add_params(pick, _zoom(["x"]))
    return _spec(chart.properties(height=max(60, 28 * len(order))))


def idle_causes(idle: Sequence[dict]) -> dict[str, Any]:
    """Each device's idle time split by cause."""
    alt = _alt()
    rows = [{"device": f"device {r['device']}", "cause": r["cause"], "ms": ms(r["idle_ns"]),
             "time": format_ns(r["idle_ns"]), "share": format_pct(r.get("idle_pct"))}
            for r in idle if r.get("idle_ns")]
    pick, opacity = _legend_pick("cause")
    chart = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("device:N", title=None),
        x=alt.X("ms:Q", stack="zero", title="idle time in the window (ms)"),
        color=alt.Color("cause:N", title="cause", scale=alt.Scale(scheme="tableau10")),
        opacity=opacity,
        tooltip=[alt.Tooltip("device:N"), alt.Tooltip("cause:N"), alt.Tooltip("time:N"),
                 alt.Tooltip("share:N", title="share of the idle time")]).add_params(pick, _zoom(["x"]))
    devices = len({r["device"] for r in rows})
    return _spec(chart.properties(height=max(60, 32 * devices)))


def memory_over_time(points: Sequence[dict], peaks: Sequence[dict]) -> dict[str, Any]:
    """Allocated and reserved bytes per device over time (each bucket's maximum), the peak marked."""
    alt = _alt()
    rows = []
    for p in points:
        at = ms(p["end_ns"])
        for what in ("allocated", "reserved"):
            value = p.get(f"{what}_bytes")
            if value is None:
                continue
            rows.append({"device": p["device"], "series": f"{p['device']} {what}", "what": what, "t_ms": at,
                         "mib": round(value / 2**20, 3), "bytes": format_bytes(value),
                         "until": format_ns(p["end_ns"])})
    pick, opacity = _legend_pick("series")
    line = alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step-before").encode(
        x=alt.X("t_ms:Q", title="time after the trace start (ms)"),
        y=alt.Y("mib:Q", title="MiB"),
        color=alt.Color("series:N", title=None),
        strokeDash=alt.StrokeDash("what:N", title=None),
        opacity=opacity,
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("until:N", title="bucket ends at"), alt.Tooltip("bytes:N")]
    ).add_params(pick, _zoom(["x"]))
    marks = [{"device": p["device"], "t_ms": ms(p["peak_at_ns"]), "mib": round(p["peak_allocated_bytes"] / 2**20, 3),
              "peak": format_bytes(p["peak_allocated_bytes"]), "at": format_ns(p["peak_at_ns"])}
             for p in peaks if p.get("peak_at_ns") is not None and p.get("peak_allocated_bytes")]
    peak = alt.Chart(alt.Data(values=marks)).mark_point(shape="triangle-down", size=120, filled=True,
                                                        color="#e45756").encode(
        x="t_ms:Q", y="mib:Q", tooltip=[alt.Tooltip("device:N"), alt.Tooltip("peak:N"), alt.Tooltip("at:N")])
    return _spec(alt.layer(line, peak).properties(height=240))


def icicle(nodes: Sequence[dict], measure: str) -> dict[str, Any]:
    """A Vega icicle of the module → op → kernel tree (``nodes``: id, parent, name, level, value_ns)."""
    subtree = _subtree_totals(nodes)
    total = max(subtree.get(n["id"], 0) for n in nodes) if nodes else 0
    values = [{"id": n["id"], "parent": n["parent"], "name": n["name"], "level": n["level"],
               "size": n["value_ns"] or 0, "time": format_ns(subtree[n["id"]]),
               "share": format_pct(100 * subtree[n["id"]] / total if total else None)} for n in nodes]
    height = 30 * (1 + _depth(nodes)) + 50
    return {
        "description": f"icicle: {measure}",
        "height": height, "padding": 4, "autosize": "none",
        # the card's width, followed when the window resizes
        "signals": [{"name": "width", "init": f"max(containerSize()[0] - 8, 200) || {WIDTH}",
                     "on": [{"events": "window:resize", "update": f"max(containerSize()[0] - 8, 200) || {WIDTH}"}]}],
        "data": [{
            "name": "tree", "values": values,
            "transform": [
                {"type": "stratify", "key": "id", "parentKey": "parent"},
                {"type": "partition", "field": "size", "sort": {"field": "value", "order": "descending"},
                 "size": [{"signal": "width"}, {"signal": "height"}], "as": ["x0", "y0", "x1", "y1", "depth",
                                                                             "children"]},
            ],
        }],
        "scales": [{"name": "colour", "type": "ordinal", "domain": ["root", "module", "op", "kernel", "other"],
                    "range": ["#bab0ac", "#9ecae9", "#4c78a8", "#f58518", "#d0d0d0"]}],
        "marks": [
            {"type": "rect", "from": {"data": "tree"}, "encode": {
                "enter": {"fill": {"scale": "colour", "field": "level"}, "stroke": {"value": "white"},
                          "tooltip": {"signal": "{'name': datum.name, 'level': datum.level, 'time': datum.time, "
                                                "'share of all': datum.share}"}},
                "update": {"x": {"field": "x0"}, "y": {"field": "y0"}, "x2": {"field": "x1"}, "y2": {"field": "y1"},
                           "fillOpacity": {"value": 1}},
                "hover": {"fillOpacity": {"value": 0.7}}}},
            # a label that fits its box is whole; a longer one is cut with an ellipsis (the box's tooltip has it
            # all); none in a box under 24 px
            {"type": "text", "from": {"data": "tree"}, "interactive": False, "encode": {
                "enter": {"baseline": {"value": "middle"}, "fontSize": {"value": 10}, "fill": {"value": "#111"},
                          "text": {"field": "name"}, "ellipsis": {"value": "…"}},
                "update": {"x": {"signal": "datum.x0 + 3"}, "y": {"signal": "(datum.y0 + datum.y1) / 2"},
                           "limit": {"signal": "max(datum.x1 - datum.x0 - 6, 0)"},
                           "opacity": {"signal": "datum.x1 - datum.x0 > 24 ? 1 : 0"}}}},
        ],
        "legends": [{"fill": "colour", "title": "level", "orient": "bottom", "direction": "horizontal"}],
    }


def _subtree_totals(nodes: Sequence[dict]) -> dict[int, int]:
    """Each node's own value plus its descendants' (a parent is listed before its children)."""
    totals = {n["id"]: n["value_ns"] or 0 for n in nodes}
    for n in reversed(nodes):
        if n["parent"] is not None:
            totals[n["parent"]] += totals[n["id"]]
    return totals


def _depth(nodes: Sequence[dict]) -> int:
    parent = {n["id"]: n["parent"] for n in nodes}
    deepest = 0
    for n in nodes:
        d, p = 0, n["parent"]
        while p is not None:
            d, p = d + 1, parent.get(p)
        deepest = max(deepest, d)
    return deepest


def grouped_bars(rows: Sequence[dict], category: str, series: str, value_ns: str, title: str) -> dict[str, Any]:
    """Bars of ``value_ns`` per ``category``, one bar per ``series`` side by side (a diff's base and new)."""
    alt = _alt()
    data = [{"category": r[category], "series": r[series], "ms": ms(r[value_ns]), "time": format_ns(r[value_ns])}
            for r in rows]
    pick, opacity = _legend_pick("series")
    chart = alt.Chart(alt.Data(values=data)).mark_bar().encode(
        y=alt.Y("category:N", sort=None, title=None),
        yOffset=alt.YOffset("series:N"),
        x=alt.X("ms:Q", title=title),
        color=alt.Color("series:N", title=None, scale=alt.Scale(range=["#9ecae9", "#4c78a8"])),
        opacity=opacity,
        tooltip=[alt.Tooltip("category:N"), alt.Tooltip("series:N"), alt.Tooltip("time:N")]).add_params(pick)
    categories = len({r["category"] for r in data})
    return _spec(chart.properties(height=max(80, 36 * categories)))


def rank_step_heatmap(rows: Sequence[dict], value_ns: str, title: str) -> dict[str, Any]:
    """A heat map of one per-rank, per-step figure (``opscope job``'s rank_steps): rank down, step across."""
    alt = _alt()
    data = [{"rank": r["rank"], "step": r["step"], "ms": ms(r[value_ns]), "shown": format_ns(r[value_ns])}
            for r in rows if r.get(value_ns) is not None]
    chart = alt.Chart(alt.Data(values=data)).mark_rect().encode(
        x=alt.X("step:O", title="step"), y=alt.Y("rank:O", title="rank"),
        color=alt.Color("ms:Q", title=f"{title} (ms)", scale=alt.Scale(scheme="orangered")),
        tooltip=[alt.Tooltip("rank:O"), alt.Tooltip("step:O"), alt.Tooltip("shown:N", title=title)])
    ranks = len({r["rank"] for r in data})
    return _spec(chart.properties(height=max(80, min(900, 14 * ranks))))


def roofline(rows: Sequence[dict], roofs: dict[str, tuple[float, float]], gbps: float,
             time_title: str = "device time") -> dict[str, Any]:
    """A log-log roofline: each row of ``opscope roofline``'s table (its ``intensity`` > 0 and ``achieved_tflops`` > 0)
    a point at (intensity, achieved TFLOP/s), its area its device time, its colour its op family; and per dtype of
    ``roofs`` (dtype -> (peak TFLOP/s, ridge FLOP/byte), :func:`opscope.analyses.roofline.intensity_roofs`) the roof:
    ``gbps`` x intensity up to the ridge, the peak after it. ``time_title`` names the rows' time (a CPU trace's
    roofline times the ops on the host)."""
    alt = _alt()
    points = [{"name": r["name"], "shapes": r["shapes"] or "-", "dtype": r["dtype"] or "-",
               "family": r["family"] or "-", "calls": r["calls"], "intensity": r["intensity"],
               "tflops": r["achieved_tflops"], "ms": ms(r["device_ns"]), "time": format_ns(r["device_ns"]),
               "pct_of_roof": format_pct(r["pct_of_roof"]), "bound": r["bound"] or "-",
               "achieved": f"{r['achieved_tflops']:.4g} TFLOP/s, {r['achieved_gbps']:.4g} GB/s",
               "flop_per_byte": f"{r['intensity']:.4g}"} for r in rows]
    xs = [p["intensity"] for p in points] + [ridge for _, ridge in roofs.values()]
    lo, hi = min(xs) / 2, max(xs) * 2
    lines = []
    for dtype, (peak, ridge) in roofs.items():
        label = f"{dtype}: {peak:g} TFLOP/s, {gbps:g} GB/s (ridge {ridge:.4g} FLOP/B)"
        start = min(lo, ridge)
        for order, (x, y) in enumerate(((start, gbps * start / 1e3), (ridge, peak), (max(hi, ridge), peak))):
            lines.append({"roof": dtype, "order": order, "intensity": x, "tflops": y, "label": label})
    x_axis = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)")
    y_axis = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s")
    roof = alt.Chart(alt.Data(values=lines)).mark_line(color="#555", strokeWidth=1.5).encode(
        x=x_axis, y=y_axis, detail="roof:N", order="order:Q",
        strokeDash=alt.StrokeDash("roof:N", title="roof (dtype)"),
        tooltip=[alt.Tooltip("label:N", title="roof")])
    pick = alt.selection_point(name="pick", fields=["family"], bind="legend")
    dots = alt.Chart(alt.Data(values=points)).mark_circle(stroke="#333", strokeWidth=0.5).encode(
        x=x_axis, y=y_axis,
        size=alt.Size("ms:Q", title=f"{time_title} (ms)", scale=alt.Scale(range=[20, 900])),
        color=alt.Color("family:N", title="family", scale=alt.Scale(scheme="tableau10")),
        opacity=alt.condition(pick, alt.value(0.75), alt.value(FADED)),
        tooltip=[alt.Tooltip("name:N"), alt.Tooltip("shapes:N"), alt.Tooltip("dtype:N"), alt.Tooltip("calls:Q"),
                 alt.Tooltip("time:N", title=time_title), alt.Tooltip("achieved:N"),
                 alt.Tooltip("flop_per_byte:N", title="FLOP/byte"), alt.Tooltip("pct_of_roof:N"),
                 alt.Tooltip("bound:N")]).add_params(pick, _zoom(["x", "y"]))
    return _spec(alt.layer(roof, dots).resolve_scale(strokeDash="independent").properties(height=420))
