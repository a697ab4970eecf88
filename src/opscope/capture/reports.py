"""What the program-running commands show, as Reports: model statistics, thread settings, numerics, and the
lines that tell how a recording went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.report import Column, Report, Section, single
from opscope.units import format_ns

_NUMERICS_VIEW = ("index", "op", "module", "backward", "output_index", "shape", "dtype", "min", "max", "mean", "std",
                  "nan_count", "inf_count")


def model_report(stats: pa.Table, target: str, shape: tuple[int, ...], sort: str, limit: int | None) -> Report:
    """Per module: parameters, output shape and FLOPs (``stats`` from modelstats.model_stats)."""
    from opscope.capture.modelstats import sort_stats

    total = stats.slice(0, 1).to_pylist()[0]  # the root row comes first in tree order
    legend = (f"model total: {total['params']:,} params ({total['param_bytes']:,} bytes), {total['flops']:,} FLOPs. "
              "params and flops include everything under a module; FLOPs of matmul/conv/attention ops only "
              "(a multiply-add is 2, bias adds not counted)")
    return single(sort_stats(stats, sort), f"Model {target}, input {'x'.join(map(str, shape))}", limit, legend=legend,
                  columns={"module": Column(indent_by="depth")})


def tune_threads_report(table: pa.Table, cores: int) -> Report:
    """The thread settings tried, and the best one."""
    from opscope.capture.threads import best_setting, within_noise

    best = best_setting(table)
    note = (f"best: {best['setting']} ({best['intra_op_threads']} intra-op, {best['inter_op_threads']} inter-op "
            f"threads): mean step {format_ns(best['mean_step_ns'])}, {best['speedup']:.2f}x the default's speed "
            f"({cores} usable cores)")
    if within_noise(best, table.to_pylist()[0]):
        note += "; the gain is within the step-to-step noise (spread_pct): try --repeat 5 or more steps"
    return single(table, "Thread settings", notes=[note])


def numerics_report(table: pa.Table, sort: str, limit: int | None) -> Report:
    """Every recorded op output with its statistics; the first NaN/Inf output and its op's inputs."""
    from opscope.capture.numerics import first_nonfinite, sort_rows

    columns = {name: Column(show="data") for name in table.column_names if name not in _NUMERICS_VIEW}
    columns["inputs"] = Column(show="json")  # nested: in the JSON output and the dump
    row = first_nonfinite(table)
    if row is None:
        line = "no NaN or Inf in any recorded output"
    else:
        line = (f"first non-finite output: op {row['op']} in module {row['module'] or '(none)'} (index "
                f"{row['index']}, output {row['output_index']}: {row['nan_count']} NaN, {row['inf_count']} Inf, "
                f"shape {row['shape']})")
    sections = [Section("outputs", f"Op outputs by {sort}", sort_rows(table, sort), notes=[line], limit=limit or None,
                        legend="min/max/mean/std over the finite values (std: population)", columns=columns)]
    if row is not None and row["inputs"]:
        sections.append(Section("inputs", f"Inputs of {row['op']} (before it ran)",
                                pa.Table.from_pylist(row["inputs"]), data=False))
    return Report(sections)


def numerics_diff_report(diff: Any, title: str, all_rows: bool, limit: int | None, rtol: float,
                         atol: float) -> Report:
    """Where two numerics dumps diverge (``diff``: capture.numerics.NumericsDiff)."""
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


def recording_lines(info: dict[str, Any], directory: Path, options: Any, exit_code: int) -> list[str]:
    """What to tell the user about a recording (run.json's ``info``): how it ended, what was recorded."""
    lines = []
    steps = info.get("steps", 0)
    if info.get("status") == "crashed":
        lines.append(f"the program crashed ({info.get('crash')}); what was recorded before the crash is saved")
    elif info.get("status") == "interrupted":
        lines.append("the program was interrupted; what was recorded so far is saved")
    recorded = info.get("recorded_steps") or []
    if steps == 0 and info.get("traces"):
        lines.append("the program never stepped (no optimizer.step() or opscope.step() call): the whole run is "
                     "saved as one window")
    elif steps < options.steps_needed:
        held = f"the trace holds only step(s) {ranges(recorded)}" if recorded else "nothing was recorded"
        lines.append(f"the program made only {steps} steps but the schedule needs {options.steps_needed} (--wait "
                     f"{options.wait} --warmup {options.warmup} --active {options.active}): {held}; lower them or "
                     "run more steps")
    what = f"steps {ranges(recorded)}" if recorded and recorded != [0] else "one window"
    lines.append(f"{steps} steps ({info.get('step_source') or 'none'}), exit code {exit_code}; recorded {what} into "
                 f"{directory}: {', '.join(info.get('traces', [])) or 'no trace'} + run.json")
    return lines


def ranges(numbers: list[int]) -> str:
    """Step numbers as ranges: [1, 2, 3, 5] -> '1-3,5'."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)
