"""Terminal rendering with rich: tables of analysis results and the summary screen."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from opscope.analyses.summary import Summary
from opscope.units import format_cell, format_ns, format_pct

_NUMERIC_SUFFIXES = ("_ns", "pct", "calls", "events")
#: Columns whose text can run to thousands of characters (a fused op's inputs): cut on the terminal only,
#: JSON and CSV keep them whole.
_CUT_COLUMNS = ("shapes", "dtypes", "strides")
CUT_AT = 100


def cut(text: str, at: int = CUT_AT) -> str:
    """``text``, or its first ``at`` characters and how many more there are."""
    return text if len(text) <= at + 20 else f"{text[:at]}... (+{len(text) - at:,} chars)"


def table_view(table: pa.Table, title: str | None = None, limit: int | None = None) -> Table:
    view = Table(title=escape(title) if title else None, title_justify="left", header_style="bold")
    for field in table.schema:
        name = field.name
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type) \
            or pa.types.is_decimal(field.type)
        right = numeric or name.endswith(_NUMERIC_SUFFIXES)
        view.add_column(name, justify="right" if right else "left",
                        overflow="fold", max_width=80 if name in ("name", "op", "shapes") else None)
    shown = table.slice(0, limit) if limit else table
    for row in shown.to_pylist():
        # escape(): trace text must never be read as rich markup.
        view.add_row(*(escape(cut(format_cell(k, v)) if k in _CUT_COLUMNS else format_cell(k, v))
                       for k, v in row.items()))
    return view


def print_table(console: Console, table: pa.Table, title: str | None = None, limit: int | None = None,
                note: str | None = None) -> None:
    console.print(table_view(table, title, limit))
    hidden = table.num_rows - limit if limit and table.num_rows > limit else 0
    if hidden:
        console.print(f"[dim]... {hidden} more rows (use --limit 0 for all)[/dim]")
    if note:
        console.print(f"[dim]{escape(note)}[/dim]")


def print_summary(console: Console, s: Summary) -> None:
    console.print(f"[bold]{escape(s.source)}[/bold]")
    overview = Table.grid(padding=(0, 2))
    overview.add_column(style="bold")
    overview.add_column()
    overview.add_row("events", f"{s.events:,}")
    overview.add_row("wall time", format_ns(s.wall_ns))
    st = s.steps
    if st.count:
        steps = f"{st.count} (mean {format_ns(st.mean_ns)}, median {format_ns(st.median_ns)}, " \
                f"p90 {format_ns(st.p90_ns)})"
        if st.excluded:
            steps += f"; outlier steps {', '.join(map(str, st.excluded))} left out of these figures"
        overview.add_row("steps", steps)
    else:
        overview.add_row("steps", "none found (no ProfilerStep#N annotations)")
    overview.add_row("CPU busy", f"{format_ns(s.cpu_busy_ns)} ({format_pct(_share(s.cpu_busy_ns, s.wall_ns))}"
                                 " of wall; union of ops and runtime calls)")
    if s.gpu_busy_ns is None:
        overview.add_row("GPU busy", "no device activity in this trace")
    else:
        devices = ", ".join(map(str, s.devices)) or "?"
        overview.add_row("GPU busy", f"{format_ns(s.gpu_busy_ns)} ({format_pct(_share(s.gpu_busy_ns, s.wall_ns))}"
                                     f" of wall; device(s) {escape(devices)})")
    console.print(overview)
    console.print()
    if s.top_ops.num_rows:
        print_table(console, s.top_ops.select(["name", "calls", "self_ns", "total_ns", "self_pct"]),
                    "Top operators by self time")
    if s.top_kernels.num_rows:
        print_table(console, s.top_kernels.select(["name", "kind", "calls", "total_ns", "pct"]),
                    "Top device kernels")
    print_table(console, s.by_kind, "Time by event kind (self time)")
    if s.warnings:
        console.print("[bold yellow]Not mapped / recovered[/bold yellow]")
        for w in s.warnings:
            console.print(f"  {w['count']:>8,}  {escape(w['problem'])}")


def _share(part, whole):
    return None if part is None or not whole else 100.0 * part / whole
