"""The ``opscope`` command: thin commands that wire ingest -> analyses -> render.

Every table command takes ``--format table|json|csv`` and ``--limit``. Errors about inputs are one
line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from opscope.errors import TraceError, UsageError

app = typer.Typer(
    name="opscope",
    help="Profile and analyze deep-learning workloads: where does the time go?\n\n"
         "TRACE is a PyTorch profiler / Kineto trace or any Chrome trace-event JSON (.json or .json.gz). "
         "The first open of a trace caches it as Parquet (in ~/.cache/opscope or $OPSCOPE_CACHE_DIR) so "
         "later commands on the same file start instantly.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Piped output is not cut to 80 columns: names are what people grep for.
out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)  # one-line errors stay one line


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


TraceArg = Annotated[Path, typer.Argument(help="Trace file (.json or .json.gz).", show_default=False)]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="Rows to show (0 = all).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Read the file itself; neither use nor write "
                                                             "the Parquet cache.")]
MatchOpt = Annotated[str | None, typer.Option("--match", help="Keep only names matching this regex.")]
ExcludeOpt = Annotated[str | None, typer.Option("--exclude", help="Drop names matching this regex.")]
StepsOpt = Annotated[str | None, typer.Option("--steps", help="Only these steps, e.g. 3 or 2-4,7.")]


def _load(path: Path, no_cache: bool):
    from opscope.ingest import open_trace

    _use_system_allocator()
    progress = _progress_for(path)
    if progress is None:
        return open_trace(path, use_cache=not no_cache)
    with progress as bar:
        task = bar.add_task(f"reading {path.name}", total=path.stat().st_size)
        return open_trace(path, use_cache=not no_cache,
                          progress=lambda done, total: bar.update(task, completed=done, total=total))


def _use_system_allocator() -> None:
    # Arrow's default allocator keeps freed chunks; the system one returns them, which keeps the
    # peak memory of a one-shot command near the size of the columns.
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def _progress_for(path: Path):
    try:
        big = path.stat().st_size >= 16 << 20
    except OSError:
        return None
    if not big or not err.is_terminal:
        return None
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    return Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TimeRemainingColumn(), console=err, transient=True)


def _emit(table, fmt: Format, title: str, limit: int, note: str | None = None) -> None:
    from opscope.render import formats

    shown = table.slice(0, limit) if limit and limit > 0 else table
    if fmt is Format.json:
        sys.stdout.write(formats.to_json(shown) + "\n")
    elif fmt is Format.csv:
        sys.stdout.write(formats.to_csv(shown))
    else:
        from opscope.render.terminal import print_table

        print_table(out, table, title, limit if limit and limit > 0 else None, note)


def _warn_recovered(trace) -> None:
    if trace.metadata.get("truncated"):
        for w in trace.warnings:
            if w["problem"].startswith("file is truncated"):
                err.print(f"[yellow]warning:[/yellow] {trace.metadata.get('source')}: {w['problem']}",
                          markup=True, highlight=False)


@app.command()
def summary(trace: TraceArg, format: FormatOpt = Format.table, no_cache: NoCacheOpt = False,
            top: Annotated[int, typer.Option(help="Rows in the top-ops and top-kernels lists.")] = 5) -> None:
    """Wall time, steps, CPU/GPU busy time, top ops and kernels, time by kind, what was not mapped."""
    from opscope.analyses.summary import summarize

    t = _load(trace, no_cache)
    _warn_recovered(t)
    s = summarize(t, top=top)
    if format is Format.table:
        from opscope.render.terminal import print_summary

        print_summary(out, s)
    else:
        _emit(s.rows(), format, "summary", 0)


@app.command()
def ops(
    trace: TraceArg,
    by: Annotated[str, typer.Option(help="Group by these columns: name, shapes, dtypes, kind, pid, tid, step.")]
    = "name",
    kinds: Annotated[str, typer.Option(help="Event kinds to count, comma-separated (e.g. "
                                            "cpu_op,user_annotation,runtime,python).")] = "cpu_op",
    sort: Annotated[str, typer.Option(help="Column to sort by (prefix - for ascending).")] = "self_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False,
) -> None:
    """Per operator: calls, total, self, avg/min/max time and share of self time."""
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.ops import op_table

    t = _load(trace, no_cache)
    _warn_recovered(t)
    filt = EventFilter(kinds=_split(kinds), match=match, exclude=exclude, steps=parse_steps(steps))
    table = op_table(t, by=_split(by), filt=filt, sort=sort)
    _emit(table, format, f"Operators ({kinds}) by {sort}", limit,
          "self_pct: share of the self time of all rows; total includes nested ops.")


@app.command()
def kernels(
    trace: TraceArg,
    by_op: Annotated[bool, typer.Option("--by-op", help="Split each kernel by the operator that launched it.")]
    = False,
    sort: Annotated[str, typer.Option(help="Column to sort by (prefix - for ascending).")] = "total_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False,
) -> None:
    """Per device kernel (and memcpy/memset): calls, total/avg/min/max, share of device time, streams."""
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.kernels import kernel_table

    t = _load(trace, no_cache)
    _warn_recovered(t)
    table = kernel_table(t, EventFilter(match=match, exclude=exclude, steps=parse_steps(steps)), by_op=by_op,
                         sort=sort)
    note = None if table.num_rows else "no device kernels in this trace (a CPU-only profile?)"
    _emit(table, format, "Device kernels", limit, note)


@app.command()
def steps(trace: TraceArg, format: FormatOpt = Format.table, limit: LimitOpt = 0,
          no_cache: NoCacheOpt = False) -> None:
    """Per step: duration, GPU busy time, and outliers (slow first step, > 1.5x the median)."""
    from opscope.analyses.steps import step_stats, step_table
    from opscope.render.units import format_ns

    t = _load(trace, no_cache)
    _warn_recovered(t)
    table = step_table(t)
    if table.num_rows == 0:
        note = "no steps: the trace has no ProfilerStep#N annotations (use torch.profiler's schedule/step())"
    else:
        st = step_stats(table)
        note = (f"mean {format_ns(st.mean_ns)}, median {format_ns(st.median_ns)}, p90 {format_ns(st.p90_ns)} "
                f"over {st.used} of {st.count} steps")
        if st.excluded:
            note += f" (outliers {', '.join(map(str, st.excluded))} left out)"
    _emit(table, format, "Steps", limit, note)


@app.command()
def query(
    trace: TraceArg,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the tables events, steps, flows, counters, "
                                            "memory, args.", show_default=False)],
    format: FormatOpt = Format.table,
    limit: LimitOpt = 50,
    no_cache: NoCacheOpt = False,
) -> None:
    """Run SQL over the trace's tables (DuckDB dialect).

    Tables: events (kind, name, cat, ts_ns, dur_ns, pid, tid, device, stream, correlation, external_id,
    shapes, dtypes, strides, concrete_inputs, event_id, parent, depth, self_ns, step, merged, op_self_ns),
    steps (step, name, pid, tid, ts_ns, dur_ns), flows (id, cat, phase, ts_ns, pid, tid), counters (name, series, ts_ns,
    pid, value), memory (ts_ns, pid, tid, device_type, device_id, addr, bytes, total_allocated,
    total_reserved), args (event_id, args as JSON text).

    Example: opscope query t.json "select name, sum(dur_ns) from events where kind='kernel' group by 1"
    """
    from opscope.query import run_sql

    t = _load(trace, no_cache)
    _warn_recovered(t)
    _emit(run_sql(t, sql), format, "query", limit)


@app.command()
def demo(
    output: Annotated[Path, typer.Option(help="Directory for the recorded trace.")] = Path("opscope-demo"),
    steps: Annotated[int, typer.Option(help="Active profiled training steps.", min=1, max=100)] = 4,
    format: FormatOpt = Format.table,
) -> None:
    """Profile a small MobileNetV2-style model (depthwise convs) on the CPU and print its summary."""
    try:
        from opscope.capture.demo import record_demo
        path, _ = record_demo(output, steps=steps)
    except ImportError as exc:
        raise UsageError(f"opscope demo needs PyTorch ({exc})") from None
    err.print(f"trace saved to {path}", highlight=False)
    summary(path, format=format, no_cache=False)


_PROGRAM = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings=_PROGRAM)
def record(
    ctx: typer.Context,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the traces and run.json; "
                                         "if it holds a recording, DIR-1, DIR-2... is used.")]
    = Path("opscope-record"),
    wait: Annotated[int, typer.Option(help="Steps to skip before warming up.")] = 1,
    warmup: Annotated[int, typer.Option(help="Steps profiled but discarded (profiler warm-up).")] = 1,
    active: Annotated[int, typer.Option(help="Steps recorded per window.")] = 3,
    repeat: Annotated[int, typer.Option(help="Windows to record (0 = until the program ends).")] = 1,
    shapes: Annotated[bool, typer.Option("--shapes/--no-shapes", help="Record input shapes.")] = True,
    memory: Annotated[bool, typer.Option("--memory/--no-memory", help="Record allocations.")] = True,
    stack: Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks.")] = True,
    modules: Annotated[bool, typer.Option("--modules/--no-modules", help="Record nn.Module scopes.")] = True,
    flops: Annotated[bool, typer.Option("--flops/--no-flops", help="Estimate FLOPs of matmul/conv.")] = True,
    cpu: Annotated[bool, typer.Option("--cpu", help="CPU activity only.")] = False,
    cuda: Annotated[bool, typer.Option("--cuda", help="CPU and CUDA activity (default: CUDA when "
                                                      "available).")] = False,
    intra_op_threads: Annotated[int | None, typer.Option(help="torch.set_num_threads before the program "
                                                              "starts.")] = None,
    inter_op_threads: Annotated[int | None, typer.Option(help="torch.set_num_interop_threads before the "
                                                              "program starts.")] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Run a Python program under the profiler without changing it, then print the summary.

    Usage: opscope record [OPTIONS] -- python train.py ARGS   (or -- python -m package.module ARGS)

    A step is one optimizer.step() (or, for programs without an optimizer, one opscope.step() call).
    The output directory gets the trace(s) and run.json (command, versions, devices, threads, the
    performance-relevant environment, git commit). The program's output and exit code are its own; if
    it crashes, the steps recorded so far are kept.
    """
    from opscope.capture.launch import fresh_output_dir, parse_command, run_program
    from opscope.capture.session import RecordOptions

    if cpu and cuda:
        raise UsageError("choose one of --cpu and --cuda")
    options = RecordOptions(wait=wait, warmup=warmup, active=active, repeat=repeat, shapes=shapes, memory=memory,
                            stack=stack, modules=modules, flops=flops,
                            activities="cpu" if cpu else "cuda" if cuda else "auto",
                            intra_op_threads=intra_op_threads, inter_op_threads=inter_op_threads).validate()
    target = parse_command(ctx.args)
    directory, renamed = fresh_output_dir(output)
    if renamed:
        err.print(f"opscope: {output} already holds a recording; writing to {directory}", highlight=False)
    run = run_program(target, directory, options)
    info = run.info
    if info is None or info.get("status") == "running" and "steps" not in info:
        raise typer.Exit(run.exit_code or 2)  # the runner said why (one line) before the program started
    _report_recording(info, directory, options, run.exit_code)
    traces = [directory / name for name in info.get("traces", [])]
    if traces:
        summary(traces[0], format=format, no_cache=False)
    raise typer.Exit(run.exit_code)


def _report_recording(info: dict, directory: Path, options, exit_code: int) -> None:
    def say(text: str) -> None:
        err.print(f"opscope: {text}", highlight=False, markup=False)

    steps = info.get("steps", 0)
    if info.get("status") == "crashed":
        say(f"the program crashed ({info.get('crash')}); what was recorded before the crash is saved")
    elif info.get("status") == "interrupted":
        say("the program was interrupted; what was recorded so far is saved")
    recorded = info.get("recorded_steps") or []
    if steps == 0 and info.get("traces"):
        say("the program never stepped (no optimizer.step() or opscope.step() call): the whole run is saved "
            "as one window")
    elif steps < options.steps_needed:
        held = f"the trace holds only step(s) {_ranges(recorded)}" if recorded else "nothing was recorded"
        say(f"the program made only {steps} steps but the schedule needs {options.steps_needed} (--wait "
            f"{options.wait} --warmup {options.warmup} --active {options.active}): {held}; lower them or run "
            "more steps")
    what = f"steps {_ranges(recorded)}" if recorded and recorded != [0] else "one window"
    say(f"{steps} steps ({info.get('step_source') or 'none'}), exit code {exit_code}; recorded {what} into "
        f"{directory}: {', '.join(info.get('traces', [])) or 'no trace'} + run.json")


def _ranges(numbers: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


@app.command("tune-threads", context_settings=_PROGRAM)
def tune_threads_cmd(
    ctx: typer.Context,
    show_output: Annotated[bool, typer.Option("--show-output", help="Let the program print.")] = False,
    repeat: Annotated[int, typer.Option(help="Runs per setting (round-robin); more runs, less noise.",
                                        min=1, max=20)] = 2,
    format: FormatOpt = Format.table,
) -> None:
    """Run a program under a grid of intra-/inter-op thread counts and find the fastest.

    Usage: opscope tune-threads -- python train.py ARGS

    The grid is bounded by the usable cores: intra-op 1, 2, 4... up to the core count, each with 1 or 2
    inter-op threads, plus torch's default. Each run's mean step time leaves out the warm-up and slow
    outlier steps. The program must step (optimizer.step() or opscope.step()) at least 3 times.
    """
    from opscope.capture.launch import parse_command
    from opscope.capture.threads import best_setting, thread_grid, tune_threads, usable_cores, within_noise
    from opscope.render.units import format_ns

    target = parse_command(ctx.args)
    cores = usable_cores()
    grid = thread_grid(cores)
    table = tune_threads(target, grid, repeat=repeat, show_output=show_output,
                         on_run=lambda s, k: err.print(f"opscope: run {k + 1}/{repeat} with {s.label}",
                                                       highlight=False))
    best = best_setting(table)
    note = (f"best: {best['setting']} ({best['intra_op_threads']} intra-op, {best['inter_op_threads']} inter-op "
            f"threads): mean step {format_ns(best['mean_step_ns'])}, {best['speedup']:.2f}x the default's speed "
            f"({cores} usable cores)")
    if within_noise(best, table.to_pylist()[0]):
        note += "; the gain is within the step-to-step noise (spread_pct): try --repeat 5 or more steps"
    _emit(table, format, "Thread settings", 0, note)
    if format is not Format.table:
        err.print(f"opscope: {note}", highlight=False, markup=False)


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def main() -> None:
    try:
        app()
    except (TraceError, UsageError) as exc:
        err.print(f"opscope: error: {exc}", markup=False, highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("opscope: interrupted", markup=False)
        sys.exit(130)


if __name__ == "__main__":
    main()
