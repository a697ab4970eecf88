"""What the program-running commands show, as Reports: model statistics, thread settings, and the lines that
tell how a recording went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.analyses.recording import step_inflation
from opscope.report import Column, Report, single
from opscope.units import format_ns


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
    """The thread settings tried, and the best one: named only when its interval says it beats the default."""
    from opscope.capture.threads import best_setting

    best = best_setting(table)
    default = table.slice(0, 1).to_pylist()[0]
    if best is not None:
        note = (f"best: {best['setting']} ({best['intra_op_threads']} intra-op, {best['inter_op_threads']} inter-op "
                f"threads): median step {format_ns(best['median_step_ns'])} against the default's "
                f"{format_ns(default['median_step_ns'])}, {best['speedup']:.2f}x its speed (95% CI "
                f"{_times(best['speedup_low'])}-{_times(best['speedup_high'])}; {cores} usable cores)")
    else:
        too_few = any(r["verdict"] == "too few runs to tell" for r in table.to_pylist()[1:])
        note = (f"best: no difference within the noise: no setting's interval beats the default's (median step "
                f"{format_ns(default['median_step_ns'])}; {cores} usable cores)"
                + ("; some had too few steps for an interval (5 needed): more steps or --repeat" if too_few else ""))
    legend = ("median_step_ns, p10_step_ns, p90_step_ns: of the steps used (each run's warm-up and slow outlier steps "
              "left out; steps_used of steps); speedup: the default's median step over (its median + the "
              "Hodges-Lehmann median difference of this setting's steps from the default's), speedup_low and "
              "speedup_high its 95% interval (Mann-Whitney); verdict: faster or slower when the whole interval is "
              "on one side of no change, no difference when it holds it, too few runs to tell under 5 steps a side")
    return single(table, "Thread settings", notes=[note], legend=legend)


def _times(x: float | None) -> str:
    return "inf" if x is None else f"{x:.2f}x"


def recording_lines(info: dict[str, Any], directory: Path, options: Any, exit_code: int) -> list[str]:
    """What to tell the user about a recording (run.json's ``info``): how it ended, what was recorded."""
    lines = []
    if info.get("finalised_by"):
        return _abrupt_end_lines(info, directory, exit_code)
    steps = info.get("steps", 0)
    if info.get("status") == "crashed":
        lines.append(f"the program crashed ({info.get('crash')}); what was recorded before the crash is saved")
    elif info.get("status") == "interrupted":
        lines.append("the program was interrupted; what was recorded so far is saved")
    elif info.get("status") == "terminated":
        lines.append(f"the program was asked to end ({info.get('crash')}); what was recorded so far is saved, and "
                     "its step times")
    recorded = info.get("recorded_steps") or []
    if steps == 0 and info.get("traces"):
        lines.append("the program never stepped (no optimizer.step() or opscope.step() call): the whole run is "
                     "saved as one window")
    elif steps < options.steps_needed:
        held = f"the trace holds only step(s) {ranges(recorded)}" if recorded else "nothing was recorded"
        lines.append(f"the program made only {steps} steps but the schedule needs {options.steps_needed} (--wait "
                     f"{options.wait} --warmup {options.warmup} --active {options.active}): {held}; lower them or "
                     "run more steps")
    what = f"steps {ranges(recorded)}" if recorded and recorded != [0] else \
        "one window" if info.get("traces") else "nothing"
    lines.append(f"{steps} steps ({info.get('step_source') or 'none'}), exit code {exit_code}; recorded {what} into "
                 f"{directory}: {', '.join(info.get('traces', [])) or 'no trace'} + run.json")
    inflation = step_inflation(info)
    if inflation is not None:
        lines.append(inflation.line())
    elif recorded and recorded != [0]:
        lines.append("no unrecorded step to compare the recorded ones with (run a few steps more than the schedule "
                     "needs to learn the profiler's overhead)")
    if (info.get("profiler_ns") or 0) >= 1_000_000_000:
        lines.append(f"the profiler spent {format_ns(info['profiler_ns'])} between steps (starting, stopping and "
                     "saving windows); left out of the step times")
    if info.get("profiler_failed"):
        lines.append(f"profiling stopped early ({info['profiler_failed']}): only the traces listed above are "
                     "complete")
    return lines


def _abrupt_end_lines(info: dict[str, Any], directory: Path, exit_code: int) -> list[str]:
    """A program that ended without opscope's side saving run.json (segfault, os._exit): what is left."""
    traces = info.get("traces") or []
    how = f"the program ended abruptly ({info.get('crash') or info.get('status')})"
    if traces:
        return [f"{how}; its step times are lost, the windows saved before are complete: {', '.join(traces)} "
                f"in {directory} (exit code {exit_code})"]
    return [f"{how} before the first recorded window was saved: nothing was recorded into {directory} (exit "
            f"code {exit_code}); record fewer steps (--wait, --warmup, --active) to save a window before that point"]


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


def peaks_report(measurement: Any) -> Report:
    """What ``opscope peaks`` measured (a :class:`opscope.capture.device_peaks.Measurement`): one row per rate."""
    def figure(x: float) -> float:
        return float(f"{x:.4g}")

    rows = [{"measure": f"{m.what} matmul" if m.what != "copy" else "copy bandwidth", "median": figure(m.median),
             "unit": "GB/s" if m.what == "copy" else ("TOPS" if m.what == "int8" else "TFLOP/s"),
             "low": figure(m.low), "high": figure(m.high),
             "repetitions": m.repetitions, "operation": m.size} for m in measurement.rates]
    schema = pa.schema([("measure", pa.string()), ("median", pa.float64()), ("unit", pa.string()),
                        ("low", pa.float64()), ("high", pa.float64()), ("repetitions", pa.int64()),
                        ("operation", pa.string())])
    legend = ("median: of the repetitions (low, high: their range); matmul: 2n^3 floating-point operations per n x n "
              "matmul; copy: bytes read + written per second (a copy of B bytes moves 2B). Achievable rates on this "
              "machine, not the datasheet's peaks")
    return single(pa.Table.from_pylist(rows, schema=schema),
                  f"Peaks measured on {measurement.device} ({measurement.backend})", legend=legend,
                  notes=list(measurement.notes), columns={"median": Column(unit="plain"), "low": Column(unit="plain"),
                                                          "high": Column(unit="plain")})
