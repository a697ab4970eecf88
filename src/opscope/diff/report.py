"""Comparisons as Reports: two traces (where the time per step goes, rows by absolute change, kernel-choice
changes) and two numerics dumps (where they first diverge)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.names import distinct_short_names
from opscope.diff.device_ops import matched_text, pct_text
from opscope.diff.headline import part_notes
from opscope.diff.normalize import steps_text
from opscope.diff.numerics import NumericsDiff
from opscope.errors import UsageError
from opscope.report import Column, Report, Section, single
from opscope.units import format_ns

TERMINAL_ROWS = 20


#: The tables of a comparison, as ``opscope diff --table`` names them; ``rows`` is the default data document.
TABLES = ("rows", "headline", "ops", "classes", "kernel-choice", "critical-path", "roofline")
#: The interval columns of the rows and the headline: JSON and CSV have them, the terminal their ``ci_95`` text.
INTERVAL_COLUMNS = {name: Column(show="data") for name in
                    ("median_delta_ns", "ci_low", "ci_high", "ci_low_pct", "ci_high_pct")}
HEADLINE_LEGEND = ("part: the step, then its parts; base_ns/new_ns: means per step; delta_ns: new less base; "
                   "ci_95: the 95% interval of the median difference per step, in % of the base median (times where "
                   "the base median is 0), 'within noise' when it holds 0; JSON/CSV: median_delta_ns, ci_low, "
                   "ci_high (ns), ci_low_pct, ci_high_pct")
CRITICAL_PATH_LEGEND = ("base_ns/new_ns: the category's mean time per step on the step's critical path (the chain of "
                        "work and waits that set the step's length: opscope critical-path); delta_ns: new less base; "
                        "shares: of each side's mean path. A category that grew on the path lengthened the steps; "
                        "one that grew off it did not")
ROOFLINE_LEGEND = ("per op, input shapes and dtype (the innermost op with a work model around each kernel, copy and "
                   "fill, as opscope roofline), each trace whole: calls_base/calls_new: calls; base_ns/new_ns: their "
                   "device time; time_ratio: new's device time per call over base's (above 1: slower in new); "
                   "achieved_base/achieved_new: the work over that time, in achieved_unit (TFLOP/s; GB/s for "
                   "copies and fills); base_roof_pct/new_roof_pct: achieved over the roof at the row's intensity on "
                   "each side's own device (pct_of_roof); delta_roof_pct: new less base, in points; bound: which roof; "
                   "JSON/CSV add each side's peak_tflops (the dtype's dense peak) and peak_gbps. Sorted by the larger "
                   "side's device time; a row on one side only has the other's columns null")

OPS_LEGEND = ("op: the op the device work is charged to; shapes: its input shapes (empty on rows matched by op "
              "alone or without shapes); class: the kernel class holding most of the row's device time; "
              "matched_by: op+shapes, op or unmatched; base_ns/new_ns: device time per step; calls: device events "
              "(kernels, copies, memsets, collectives) per step")
CLASSES_LEGEND = ("class: gemm, conv, attention, elementwise (arithmetic and data movement), reduction_norm "
                  "(reductions, normalisations, pooling), softmax, comm, memcpy, memset, other; base_pct/new_pct: "
                  "share of each trace's device time; calls: device events per step")


def comparison_report(result, full_names: bool, limit: int | None, table: str | None = None) -> Report:
    """``result``: an :class:`opscope.diff.Comparison`. The terminal shortens kernel names unless
    ``full_names``; the data document always has them as the traces wrote them. ``limit`` None: 20 rows on the
    terminal, all in the data document. ``table`` (one of :data:`TABLES`) is the data document (``rows`` when
    None) and, when given, the only table the terminal shows besides the headline."""
    if table is not None and table not in TABLES:
        raise UsageError(f"--table must be one of {', '.join(TABLES)} (got {table!r})")
    data = table or "rows"

    def on_terminal(key: str) -> bool:
        return table is None or key == table

    shown = TERMINAL_ROWS if limit is None else limit
    rows = result.rows
    headline = headline_table(result.headline)
    sections = [
        Section("headline", "Where the time per step goes" if result.per_step else "Where the time goes (whole trace)",
                with_interval_text(headline), notes=part_notes(result.headline), columns=INTERVAL_COLUMNS,
                data=False),
        Section("headline", table=headline, legend=HEADLINE_LEGEND, terminal=False, data=data == "headline"),
        Section("rows", "Ops and kernels by absolute change",
                lambda: with_interval_text(rows if full_names else short_kernel_names(rows)), limit=shown or None,
                notes=result.row_notes, columns=INTERVAL_COLUMNS, data=False, terminal=on_terminal("rows")),
        Section("rows", table=rows, limit=limit or None, notes=result.row_notes, terminal=False, data=data == "rows"),
    ]
    if result.op_rows is not None and result.device_match is not None:
        any_work = result.device_match.any_device_work
        sections.append(Section(
            "ops", "Device time by op: the kernels each op launched, matched by op and input shapes",
            result.op_rows, limit=shown or None, legend=OPS_LEGEND, notes=ops_notes(result),
            terminal=any_work and on_terminal("ops"), data=data == "ops"))
        sections.append(Section(
            "classes", "Device time by kernel class", result.classes, legend=CLASSES_LEGEND,
            notes=class_notes(result), terminal=any_work and on_terminal("classes"), data=data == "classes"))
    choice_shown = result.kernel_choice.num_rows > 0 and on_terminal("kernel-choice")
    if choice_shown or data == "kernel-choice":
        sections.append(Section("kernel_choice", "Kernel choice changes: same op and input shapes, other kernels",
                                result.kernel_choice, limit=(shown if choice_shown else limit) or None,
                                notes=[f"the op that launched the kernels, with the same input shapes in both traces, "
                                       f"ran other kernels (short names); gpu_base_ns/gpu_new_ns: their device time "
                                       f"{_span_words(result)}"],
                                terminal=choice_shown, data=data == "kernel-choice"))
    if result.critical_path is not None and table == "critical-path":  # asked for: it replays both traces
        sections.append(Section("critical_path", "Critical path per step, by category", result.critical_path(),
                                legend=CRITICAL_PATH_LEGEND, data=True))
    if result.roofline is not None and table == "roofline":  # asked for: each side's roofline
        roofline, notes = result.roofline()
        data_only = {name: Column(show="data") for name in
                     ("family", "peak_tflops_base", "peak_tflops_new", "peak_gbps_base", "peak_gbps_new")}
        if pc.all(pc.equal(roofline["achieved_unit"], "TFLOP/s")).as_py() is not False:  # no copy: the legend says
            data_only["achieved_unit"] = Column(show="data")
        sections.append(Section("roofline", "Roofline by op, shapes and dtype, each side under its own device's roofs",
                                roofline, legend=ROOFLINE_LEGEND, notes=notes, limit=shown or None,
                                columns=data_only, data=True))
    return Report(sections, headline=result.summary, notes=result.notes)


def headline_table(headline: list[dict]) -> pa.Table:
    """The headline rows (:func:`opscope.diff.headline.headline_rows`) as a table of fixed column types."""
    schema = pa.schema([("part", pa.string()), ("base_ns", pa.int64()), ("new_ns", pa.int64()),
                        ("delta_ns", pa.int64()), ("median_delta_ns", pa.int64()), ("ci_low", pa.int64()),
                        ("ci_high", pa.int64()), ("ci_low_pct", pa.float64()), ("ci_high_pct", pa.float64())])
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in headline], schema=schema)


def with_interval_text(table: pa.Table) -> pa.Table:
    """``table`` with ``ci_95``: its interval columns in words (:func:`interval_words`), for the terminal."""
    values = zip(*(table[c].to_pylist() for c in ("ci_low", "ci_high", "ci_low_pct", "ci_high_pct")))
    return table.append_column("ci_95", pa.array([interval_words(*v) for v in values], pa.string()))


def interval_words(low: int | None, high: int | None, low_pct: float | None, high_pct: float | None) -> str:
    """``+18.20%..+22.13%``, ``-1.04%..+0.80% within noise``, ``+2.000 us..+3.000 us`` (no base to be a share of);
    ``-`` without an interval. Percentages as the ``ci_*_pct`` columns hold them (2 decimals)."""
    if low is None or high is None:
        return "-"
    if low_pct is not None and high_pct is not None:
        text = f"{low_pct:+.2f}%..{high_pct:+.2f}%"
    else:
        text = f"{_signed(low)}..{_signed(high)}"
    return text + (" within noise" if low <= 0 <= high else "")


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "-") + format_ns(abs(ns))


def ops_notes(result) -> list[str]:
    """What the op rows' numbers mean: the steps, which op work is charged to, how rows were matched, and how
    much of each trace's device time was matched each way."""
    match = result.device_match
    level = ("the outermost op above its launch that has a Python API (aten::linear, aten::conv2d; else the op "
             "that launched it; --op-level launching: always the op that launched it)" if result.op_level == "api"
             else "the op that launched it (--op-level api: the outermost op above it with a Python API)")
    return [
        f"device time of the kernels, copies, memsets and collectives each op launched, {_span_words(result)}; "
        f"each device event is charged to {level}",
        "rows matched first by op and input shapes, then by op alone (a row matched by op adds up the shapes of "
        "that op that found no partner); device work launched outside any op is one unmatched row",
        f"share of device time matched: base {matched_text(match.base)}; new {matched_text(match.new)}",
    ]


def class_notes(result) -> list[str]:
    """What the class rows' numbers mean: the steps, how a class is decided, the shares in shared classes."""
    match = result.device_match
    return [
        f"device time of the work launched {_span_words(result)}, by kernel class: from the kernel's name (cuBLAS, "
        "CUTLASS, Tensile/hipBLASLt, cuDNN, MIOpen, Triton, flash/fmha...), else from the op that launched it",
        f"share of device time in classes both traces have (other not counted): base {pct_text(match.base['class'])}, "
        f"new {pct_text(match.new['class'])}; in other: base {pct_text(match.base['other'])}, new "
        f"{pct_text(match.new['other'])}",
    ]


def _span_words(result) -> str:
    if not result.per_step:
        return "over the whole trace (totals)"
    sb, sn = result.span_base, result.span_new
    return f"per step, over {steps_text(sb.steps)} (base) and {steps_text(sn.steps)} (new)"


def short_kernel_names(rows: pa.Table) -> pa.Table:
    """Kernel rows with short names (no templates or parameters); names that would read the same keep what
    tells them apart."""
    is_kernel = pc.equal(rows["kind"], "kernel")
    if not pc.any(is_kernel).as_py():  # ops only (a CPU trace): nothing to shorten, no name to read
        return rows
    shown = pc.if_else(is_kernel, distinct_short_names(rows["name"]).cast(pa.string()), rows["name"])
    return rows.set_column(rows.schema.get_field_index("name"), "name", shown)


def numerics_diff_report(diff: NumericsDiff, title: str, all_rows: bool, limit: int | None, rtol: float,
                         atol: float) -> Report:
    """Where two numerics dumps diverge."""
    first = diff.first_divergence()
    shown = diff.table if all_rows else diff.table.filter(diff.table["diverged"])
    matched = f"{diff.table.num_rows} outputs matched by {diff.matched_by}"
    if diff.unmatched_a or diff.unmatched_b:
        matched += f" ({diff.unmatched_a} only in A, {diff.unmatched_b} only in B)"
    if first is None:
        line = f"no divergence beyond rtol {rtol:g}, atol {atol:g}; {matched}"
    else:
        line = (f"first divergence: op {first['op']} in module {first['module'] or '(none)'} (index {first['index']}"
                f", output {first['output_index']}): max abs error {_num(first['max_abs_err'])}, max rel error "
                f"{_num(first['max_rel_err'])}, mean diff {_num(first['mean_diff'])}, NaN diff {first['nan_diff']}, "
                f"Inf diff {first['inf_diff']}; {matched}")
    if not shown.num_rows:
        return Report([Section("rows", table=shown, limit=limit or None)], empty=line)
    return single(shown, title, limit, notes=[line])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
