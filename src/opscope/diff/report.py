"""Comparisons as Reports: two traces (where the time per step goes, rows by absolute change, kernel-choice
changes) and two numerics dumps (where they first diverge)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.names import distinct_short_names
from opscope.diff.numerics import NumericsDiff
from opscope.report import Report, Section, single

TERMINAL_ROWS = 20


def comparison_report(result, full_names: bool, limit: int | None) -> Report:
    """``result``: an :class:`opscope.diff.Comparison`. The terminal shortens kernel names unless
    ``full_names``; the data document always has them as the traces wrote them. ``limit`` None: 20 rows on the
    terminal, all in the data document."""
    shown = TERMINAL_ROWS if limit is None else limit
    rows = result.rows
    sections = [
        Section("headline", "Where the time per step goes" if result.per_step else "Where the time goes (whole trace)",
                pa.Table.from_pylist(result.headline), data=False),
        Section("rows", "Ops and kernels by absolute change", rows if full_names else lambda: short_kernel_names(rows),
                limit=shown or None, data=False),
        Section("rows", table=rows, limit=limit or None, terminal=False),
    ]
    if result.kernel_choice.num_rows:
        sections.append(Section("kernel_choice", "Kernel choice changes: same op and input shapes, other kernels",
                                result.kernel_choice, limit=shown or None, data=False))
    return Report(sections, headline=result.summary, notes=result.notes)


def short_kernel_names(rows: pa.Table) -> pa.Table:
    """Kernel rows with short names (no templates or parameters); names that would read the same keep what
    tells them apart."""
    if rows.num_rows == 0:
        return rows
    is_kernel = pc.equal(rows["kind"], "kernel")
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
