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
    from opscope.sysmem import release_free_memory

    _use_system_allocator()
    progress = _progress_for(path)
    if progress is None:
        trace = open_trace(path, use_cache=not no_cache)
    else:
        with progress as bar:
            task = bar.add_task(f"reading {path.name}", total=path.stat().st_size)
            trace = open_trace(path, use_cache=not no_cache,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    release_free_memory()
    return trace


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
    sort: Annotated[str | None, typer.Option(help="Column to sort by (prefix - for ascending); default self_ns, "
                                                  "gpu_ns with --gpu.", show_default=False)] = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="The device work each op launched (itself or through the ops "
                                                    "it called): kernels, GPU time, GPU/CPU ratio, top kernels.")]
    = False,
    full_names: Annotated[bool, typer.Option("--full-names", help="With --gpu: whole demangled kernel names "
                                                                  "instead of short ones.")] = False,
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False,
) -> None:
    """Per operator: calls, total, self, avg/min/max time and share of self time; the Python API that runs it.

    With --gpu: per operator, the device events it launched (directly or through the ops it called),
    their summed GPU time, the op's CPU time (total, inclusive), gpu_cpu_ratio and the top kernels.
    """
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.ops import gpu_op_table, op_table

    t = _load(trace, no_cache)
    _warn_recovered(t)
    filt = EventFilter(kinds=_split(kinds), match=match, exclude=exclude, steps=parse_steps(steps))
    if gpu:
        sort = sort or "gpu_ns"
        table = gpu_op_table(t, by=_split(by), filt=filt, sort=sort, names="full" if full_names else "short")
        note = ("gpu_ns: device time of the kernels/memcpys/memsets launched inside the op (nested ops included); "
                "cpu_ns: the op's total host time; top_kernels: share of the op's gpu_ns")
        if not table.num_rows:
            note = "no device work linked to these ops (a CPU-only profile, or no launch inside an op)"
        _emit(table, format, f"Operators ({kinds}) by device time launched, sorted by {sort}", limit, note)
        return
    sort = sort or "self_ns"
    table = op_table(t, by=_split(by), filt=filt, sort=sort, python_api=True)
    _emit(table, format, f"Operators ({kinds}) by {sort}", limit,
          "self_pct: share of the self time of all rows; total includes nested ops.")


@app.command()
def kernels(
    trace: TraceArg,
    by_op: Annotated[bool, typer.Option("--by-op", help="Split each kernel by the operator that launched it.")]
    = False,
    full_names: Annotated[bool, typer.Option("--full-names", help="One row per whole (demangled) kernel name "
                                                                  "instead of per short name.")] = False,
    sort: Annotated[str, typer.Option(help="Column to sort by (prefix - for ascending).")] = "total_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False,
) -> None:
    """Per device kernel (and memcpy/memset): calls, total/avg/min/max, share of device time, streams.

    Kernels are named short (no return type, template arguments or parameters; C++ names demangled),
    and the template instances of one kernel share a row (variants counts them); --full-names gives
    one row per whole demangled name. --match/--exclude search the names as the trace has them.
    """
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.kernels import kernel_table

    t = _load(trace, no_cache)
    _warn_recovered(t)
    table = kernel_table(t, EventFilter(match=match, exclude=exclude, steps=parse_steps(steps)), by_op=by_op,
                         sort=sort, names="full" if full_names else "short")
    note = None if table.num_rows else "no device kernels in this trace (a CPU-only profile?)"
    _emit(table, format, "Device kernels", limit, note)


@app.command()
def steps(trace: TraceArg, format: FormatOpt = Format.table, limit: LimitOpt = 0,
          no_cache: NoCacheOpt = False) -> None:
    """Per step: duration, GPU busy time, and outliers (slow first step, > 1.5x the median)."""
    from opscope.analyses.steps import step_stats, step_table
    from opscope.units import format_ns

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
    """Profile a small MobileNetV2-style model (depthwise convs) on the CPU; print its summary and the top advice."""
    try:
        from opscope.capture.demo import record_demo
        path, _ = record_demo(output, steps=steps)
    except ImportError as exc:
        raise UsageError(f"opscope demo needs PyTorch ({exc})") from None
    err.print(f"trace saved to {path}", highlight=False)
    summary(path, format=format, no_cache=False)
    if format is Format.table:
        from opscope.advise import advise as run_rules
        from opscope.render.advice import print_advice

        out.print()
        print_advice(out, run_rules(_load(path, False)), f"advice for {path.name}", limit=3, evidence_rows=4)
        out.print(f"[dim]all of it: opscope advise {path}[/dim]", highlight=False)


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
    if info is None or info.get("status") in ("running", "import-error") and "steps" not in info:
        raise typer.Exit(run.exit_code or 2)  # the runner said why (one line) before the program started
    if info.get("status") == "import-error":
        raise typer.Exit(run.exit_code)  # one line already printed by the runner
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
    from opscope.units import format_ns

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


# --- model statistics and numerics ----------------------------------------------------------------

@app.command("model")
def model_cmd(
    target: Annotated[str, typer.Argument(help="path/to/file.py:factory or package.module:factory (a function "
                                               "called with no arguments that returns an nn.Module), or demo.",
                                          show_default=False)],
    input_shape: Annotated[str, typer.Option("--input-shape", help="Shape of the example input (float32 randn), "
                                                                   "e.g. 8,3,224,224.", show_default=False)],
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Only modules at most this deep (0 = the "
                                                                      "model alone); figures stay subtree totals.")]
    = None,
    sort: Annotated[str, typer.Option(help="order (tree order), params, flops (largest first) or name.")] = "order",
    format: FormatOpt = Format.table,
    limit: LimitOpt = 0,
) -> None:
    """Per module: parameters, output shape and FLOPs of one forward pass (like tfprof's model analysis).

    One row per nn.Module in tree order; params and flops are totals of the module and everything
    under it. The forward runs once under torch.no_grad() in eval mode on a float32 randn input.
    FLOPs come from torch.utils.flop_counter: matmul/conv/attention ops only, a multiply-add counts 2,
    bias additions and elementwise ops (norms, activations, pooling) count 0.
    """
    from opscope.capture import modelstats

    _need_torch("opscope model")
    if sort not in modelstats.SORTS:
        raise UsageError(f"cannot sort by {sort!r}: choose one of {', '.join(modelstats.SORTS)}")
    shape = modelstats.parse_input_shape(input_shape)
    module = modelstats.load_model(target)
    stats = modelstats.model_stats(module, modelstats.example_input(module, shape), max_depth=max_depth)
    total = stats.slice(0, 1).to_pylist()[0]  # the root row comes first in tree order
    note = (f"model total: {total['params']:,} params ({total['param_bytes']:,} bytes), {total['flops']:,} FLOPs. "
            "params and flops include everything under a module; FLOPs of matmul/conv/attention ops only "
            "(a multiply-add is 2, bias adds not counted)")
    table = modelstats.sort_stats(stats, sort)
    if format is Format.table:
        table = modelstats.indented(table)
    _emit(table, format, f"Model {target}, input {'x'.join(map(str, shape))}", limit, note)


def _need_torch(command: str) -> None:
    try:
        from opscope.capture import require_torch

        require_torch()
    except ImportError as exc:
        raise UsageError(f"{command} needs PyTorch ({exc})") from None


_NUMERICS_VIEW = ["index", "op", "module", "backward", "output_index", "shape", "dtype", "min", "max", "mean", "std",
                  "nan_count", "inf_count"]


@app.command("numerics", context_settings=_PROGRAM)
def numerics_cmd(
    ctx: typer.Context,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for numerics.parquet; if it holds a "
                                         "dump, DIR-1, DIR-2... is used.")] = Path("opscope-numerics"),
    sort: Annotated[str, typer.Option(help="order (execution order), size (elements, largest first) or name "
                                           "(op name).")] = "order",
    max_ops: Annotated[int, typer.Option("--max-ops", help="Keep at most this many rows; after that only outputs "
                                                           "with NaN/Inf are kept (0 = no limit).", min=0)]
    = 200_000,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 30,
) -> None:
    """Run a Python program recording every op's outputs: min/max/mean/std, NaN/Inf counts, first NaN/Inf.

    Usage: opscope numerics [OPTIONS] -- python script.py ARGS   (or -- python -m package.module ARGS)

    The program runs in a child process with opscope's Python under a TorchDispatchMode: each aten op
    (forward, backward and optimizer) is recorded with the nn.Module it ran in, and per tensor output
    its shape, dtype, min/max/mean/std (over the finite values; population std), NaN and Inf counts,
    first/last 5 values and a strided sample of up to 64 values. The stats of each op's inputs are
    kept too and shown for the first op whose output holds a NaN or Inf. The dump is
    DIR/numerics.parquet (compare two with numerics-diff). The program's output and exit code are its
    own; with --format json/csv its stdout goes to stderr so that stdout holds only the data. Every
    op is read in full: expect the program to run several times slower.
    """
    from opscope.analyses.numerics import DUMP_NAME, first_nonfinite, load_dump, sort_rows
    from opscope.capture.launch import parse_command
    from opscope.capture.numerics import fresh_dump_dir, run_with_numerics

    if not ctx.args:
        raise UsageError("no program given: put it after --, e.g. opscope numerics -- python train.py")
    if sort not in ("order", "size", "name"):
        raise UsageError(f"cannot sort by {sort!r}: choose one of order, size, name")
    target = parse_command(ctx.args)
    directory, renamed = fresh_dump_dir(output)
    if renamed:
        err.print(f"opscope: {output} already holds a dump; writing to {directory}", highlight=False, markup=False)
    code = run_with_numerics(target, directory / DUMP_NAME, max_ops or None,
                             stdout_to_stderr=format is not Format.table)
    dump = directory / DUMP_NAME
    if not dump.is_file():
        raise typer.Exit(code or 2)  # the runner said why before the program started
    table = load_dump(dump)
    ops = len(set(table["index"].to_pylist()))
    err.print(f"opscope: {table.num_rows} outputs of {ops} ops recorded into {dump} (exit code {code})",
              highlight=False, markup=False)
    shown = sort_rows(table, sort)
    if format is Format.table:
        shown = shown.select(_NUMERICS_VIEW)
    elif format is Format.csv:
        shown = shown.drop_columns(["inputs"])  # nested: in the JSON output and the dump
    _emit(shown, format, f"Op outputs by {sort}", limit, "min/max/mean/std over the finite values (std: population)")
    _report_nonfinite(first_nonfinite(table), format)
    raise typer.Exit(code)


def _report_nonfinite(row: dict | None, fmt: Format) -> None:
    """The first NaN/Inf output and the stats of its op's inputs: stdout for tables, else stderr."""
    import pyarrow as pa

    if row is None:
        line = "no NaN or Inf in any recorded output"
    else:
        line = (f"first non-finite output: op {row['op']} in module {row['module'] or '(none)'} (index "
                f"{row['index']}, output {row['output_index']}: {row['nan_count']} NaN, {row['inf_count']} Inf, "
                f"shape {row['shape']})")
    if fmt is Format.table:
        out.print(line, highlight=False, markup=False)
        if row is not None and row["inputs"]:
            _emit(pa.Table.from_pylist(row["inputs"]), Format.table, f"Inputs of {row['op']} (before it ran)", 0)
        return
    err.print(f"opscope: {line}", highlight=False, markup=False)
    for i in row["inputs"] if row else []:
        err.print(f"opscope:   input {i['arg']}: {i['shape']} {i['dtype']} min {i['min']} max {i['max']} mean "
                  f"{i['mean']} std {i['std']} nan {i['nan_count']} inf {i['inf_count']}", highlight=False,
                  markup=False)


@app.command("numerics-diff")
def numerics_diff_cmd(
    a: Annotated[Path, typer.Argument(help="Reference dump: numerics.parquet or its directory.", show_default=False)],
    b: Annotated[Path, typer.Argument(help="Dump to compare with A.", show_default=False)],
    rtol: Annotated[float, typer.Option(help="Relative tolerance (to A's values).")] = 1e-3,
    atol: Annotated[float, typer.Option(help="Absolute tolerance.")] = 1e-5,
    all_rows: Annotated[bool, typer.Option("--all", help="Show every matched op output, not only diverged ones.")]
    = False,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 20,
) -> None:
    """Compare two numerics dumps op by op; show where they first diverge beyond the tolerance.

    The errors are computed on what a dump stores, not on all elements: per op output a strided
    sample of up to 64 values (max_abs_err, max_rel_err) plus its min/max/mean/std (mean_diff,
    std_diff: B - A) and NaN/Inf counts. A value diverges when |b - a| > atol + rtol * |a|; changed
    NaN/Inf counts or shapes diverge too. Rows are matched by (index, op, output_index) when both dumps
    hold the same ones, else aligned on the sequence of ops. Exit code 1 when they diverge, 0 when not.
    """
    from opscope.analyses.numerics import load_dump
    from opscope.diff.numerics import diff_dumps

    table_a, table_b = load_dump(a), load_dump(b)
    diff = diff_dumps(table_a, table_b, rtol=rtol, atol=atol)
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
    if format is not Format.table:
        _emit(shown, format, "", limit)
        err.print(f"opscope: {line}", highlight=False, markup=False)
    elif shown.num_rows:
        _emit(shown, format, f"Numerics: {b} vs {a} (rtol {rtol:g}, atol {atol:g})", limit, line)
    else:
        out.print(line, highlight=False, markup=False)
    raise typer.Exit(1 if first is not None else 0)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


# --- scope and code views (op time by nn.Module and by Python frame) ------------------------------------

_VIEW_SORT_HELP = ("Order of siblings in the tree (flat: of rows): total_ns, self_ns, wall_ns, calls, ops, order "
                   "(first call), name; prefix - to reverse.")


def _frame_view(tree, fmt: Format, limit: int, title: str, column: str, sort: str, max_depth: int | None,
                flat: bool, note: str) -> None:
    from opscope.analyses.views import flat_table, tree_table

    if tree.note:  # nothing to show: say why in one line, exit 0 (a valid trace, just without that data)
        if fmt is Format.table:
            out.print(f"opscope: {tree.note}", highlight=False, markup=False)
        else:
            _emit(flat_table(tree, sort, column) if flat else tree_table(tree, sort, max_depth, column), fmt, "", 0)
            err.print(f"opscope: {tree.note}", highlight=False, markup=False)
        return
    if flat:
        table = flat_table(tree, sort, column)
    else:
        table = tree_table(tree, sort, max_depth, column, indent=fmt is Format.table)
        if fmt is Format.table:
            table = table.drop_columns(["path", "depth"])
    _emit(table, fmt, title, limit, note)


@app.command()
def scope(
    trace: TraceArg,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Only modules at most this deep (0 = the "
                                                                      "top modules); totals still include the "
                                                                      "modules below.", min=0)] = None,
    sort: Annotated[str, typer.Option(help=_VIEW_SORT_HELP)] = "total_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 30,
    no_cache: NoCacheOpt = False,
) -> None:
    """Op time by nn.Module (like tfprof's scope view): a tree of module paths such as Net_0/Sequential_1/Conv2d_5.

    Modules come from the Python events of nn.Module calls (record with with_stack=True, with_modules=True).
    An op belongs to the innermost module call on its thread that is running when it starts. total_ns is
    the op time inside the module and everything under it, self_ns the op time directly in it (an op's
    time excludes the ops nested in it, so nothing counts twice); wall_ns is the duration of the module's
    calls, Python included. Ops outside every module (backward, optimizer) form the '(no module)' row.
    --match/--exclude/--steps choose the ops counted (by op name and step).
    """
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.views import module_tree

    t = _load(trace, no_cache)
    _warn_recovered(t)
    tree = module_tree(t, EventFilter(kinds=("cpu_op",), match=match, exclude=exclude, steps=parse_steps(steps)))
    _frame_view(tree, format, limit, f"Op time by module, siblings by {sort}", "module", sort, max_depth, False,
                "total_ns: op time in the module and below; self_ns: directly in it; wall_ns: its calls' duration; "
                "pct: share of all selected op time")


@app.command()
def code(
    trace: TraceArg,
    flat: Annotated[bool, typer.Option("--flat", help="One row per frame (file:line function) instead of a tree "
                                                      "of call paths.")] = False,
    frames: Annotated[str | None, typer.Option("--frames", help="Keep only frames matching this regex (e.g. "
                                                                "'train.py|model/'); ops count for their nearest "
                                                                "kept frame.")] = None,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Tree: only frames at most this deep "
                                                                      "(0 = outermost).", min=0)] = None,
    sort: Annotated[str | None, typer.Option(help=_VIEW_SORT_HELP + " Default total_ns for the tree, self_ns with "
                                                  "--flat.", show_default=False)] = None,
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 30,
    no_cache: NoCacheOpt = False,
) -> None:
    """Op time by Python stack frame (like tfprof's code view), as a tree of call paths or a flat list.

    Frames come from the python_function events (record with with_stack=True) and read 'file:line
    function'. An op's time counts for every frame on its Python stack (total_ns) and as self_ns for the
    innermost one; a frame that recurses counts once per stack in --flat. Ops with no Python frame around
    them (e.g. backward ops on autograd threads) form the '(no python frame)' row. In JSON/CSV the tree's
    path joins the frames with ';' (the folded-stack format of flame graph tools). --match/--exclude/--steps
    choose the ops counted (by op name and step); --frames chooses the frames shown.
    """
    from opscope.analyses.filters import EventFilter, parse_steps
    from opscope.analyses.views import code_tree

    sort = sort or ("self_ns" if flat else "total_ns")
    t = _load(trace, no_cache)
    _warn_recovered(t)
    tree = code_tree(t, EventFilter(kinds=("cpu_op",), match=match, exclude=exclude, steps=parse_steps(steps)),
                     frames=frames)
    shape = "by frame" if flat else "by call path, siblings"
    _frame_view(tree, format, limit, f"Op time {shape} by {sort}", "frame", sort, max_depth, flat,
                "total_ns: op time under the frame; self_ns: in ops whose innermost frame it is; wall_ns: the "
                "frame's own duration; pct: share of all selected op time")


# --- memory ---------------------------------------------------------------------------------------------

class MemoryView(str, Enum):
    peak = "peak"
    holders = "holders"
    allocations = "allocations"
    timeline = "timeline"
    counters = "counters"


@app.command()
def memory(
    trace: TraceArg,
    view: Annotated[MemoryView | None, typer.Option(help="One table: peak (per device), holders (ops holding "
                                                         "memory at each peak), allocations (by op), timeline, "
                                                         "counters. Default: all but timeline as sections (JSON/"
                                                         "CSV: peak, or timeline with --timeline).",
                                                    show_default=False)] = None,
    timeline: Annotated[int, typer.Option("--timeline", help="Add a timeline of N equal time buckets per device "
                                                             "(most allocated/reserved in each).", min=0)] = 0,
    device: Annotated[str | None, typer.Option("--device", help="Only these devices, e.g. cuda:0 or cpu,cuda:1.")]
    = None,
    sort: Annotated[str, typer.Option(help="holders/allocations: column to sort by (prefix - for ascending).")]
    = "bytes",
    steps: StepsOpt = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 10,
    no_cache: NoCacheOpt = False,
) -> None:
    """Memory per device from profile_memory records: peaks, the ops holding memory at the peak, allocations by op.

    The peak is the largest 'Total Allocated' of a device (also reserved, for caching allocators), with
    when it happened (time after the trace start) and its step. Holders: the allocations made before the
    peak and not freed by then (a free matches the allocation at the same address), charged to the op
    that made them (the innermost cpu_op running on the allocating thread); memory allocated before the
    trace (or before --steps) is one more row, so the rows add up to the peak. Allocations: per op, how
    many, bytes in all, largest, average. --timeline N: the most allocated in each of N time buckets.
    """
    from rich.markup import escape

    from opscope.analyses import memory as mem
    from opscope.analyses.filters import parse_steps

    t = _load(trace, no_cache)
    _warn_recovered(t)
    rec = mem.memory_records(t, steps=parse_steps(steps), devices=_split(device) if device else None)
    counters = mem.counter_table(t)
    notes = rec.notes()
    if rec.table.num_rows == 0 and counters.num_rows == 0:
        note = mem.NO_RECORDS if not steps else "no memory records in these steps"
        if format is Format.table:
            out.print(f"opscope: {note}", highlight=False, markup=False)
        else:
            _emit(mem.peak_table(rec), format, "", 0)
            err.print(f"opscope: {note}", highlight=False, markup=False)
        return
    buckets = timeline or 20
    if format is not Format.table:
        chosen = view or (MemoryView.timeline if timeline else MemoryView.peak)
        _emit(_memory_view(mem, rec, counters, chosen, buckets, sort), format, "", limit)
        for line in notes:
            err.print(f"opscope: {line}", highlight=False, markup=False)
        return
    shown = [view] if view else [MemoryView.peak, MemoryView.holders, MemoryView.allocations, MemoryView.counters]
    if timeline and not view:
        shown.append(MemoryView.timeline)
    titles = {MemoryView.peak: "Peak memory per device (times after the trace start)",
              MemoryView.holders: "Held at each device's peak, by the op that allocated it",
              MemoryView.allocations: "Allocations by op", MemoryView.timeline: f"Memory over time ({buckets} buckets)",
              MemoryView.counters: "Memory counters"}
    for v in shown:
        table = _memory_view(mem, rec, counters, v, buckets, sort)
        if v is MemoryView.counters and not table.num_rows and not view:
            continue
        if v is MemoryView.peak:
            table = _with_sparklines(mem, rec, table)
        if v is MemoryView.timeline:
            table = _with_bars(table)
        _emit(_human_bytes(table), format, titles[v], 0 if v in (MemoryView.peak, MemoryView.timeline) else limit)
    for line in notes:
        out.print(f"[dim]note: {escape(line)}[/dim]", highlight=False)


def _memory_view(mem, rec, counters, view: MemoryView, buckets: int, sort: str):
    if view is MemoryView.peak:
        return mem.peak_table(rec)
    if view is MemoryView.holders:
        return mem.holders_table(rec, sort)
    if view is MemoryView.allocations:
        return mem.allocation_table(rec, sort)
    if view is MemoryView.timeline:
        return mem.timeline_table(rec, buckets)
    return counters


def _with_sparklines(mem, rec, table):
    """Peak table plus a 24-character sketch of each device's allocated memory over the trace."""
    import pyarrow as pa

    line = mem.timeline_table(rec, 24)
    sketches = []
    for device, peak in zip(table["device"].to_pylist(), table["peak_allocated_bytes"].to_pylist()):
        values = [v for d, v in zip(line["device"].to_pylist(), line["allocated_bytes"].to_pylist()) if d == device]
        sketches.append(mem.sparkline(values, peak))
    return table.append_column("over_time", pa.array(sketches, pa.string()))


def _with_bars(table, width: int = 30):
    """Timeline plus a bar per bucket, scaled to the device's own peak."""
    import pyarrow as pa

    devices, values = table["device"].to_pylist(), table["allocated_bytes"].to_pylist()
    peaks: dict[str, int] = {}
    for d, v in zip(devices, values):
        peaks[d] = max(peaks.get(d, 0), v or 0)
    bars = ["" if not peaks[d] or v is None else "█" * max(0, round(width * v / peaks[d]))
            for d, v in zip(devices, values)]
    return table.append_column("allocated", pa.array(bars, pa.string()))


def _human_bytes(table):
    """Byte columns as right-aligned KiB/MiB/GiB text, for the terminal only (JSON/CSV keep integers)."""
    import pyarrow as pa

    for i, name in enumerate(table.column_names):
        if name != "bytes" and not name.endswith("_bytes"):
            continue
        text = [_bytes_text(v) for v in table[name].to_pylist()]
        width = max([len(s) for s in text] + [len(name)])  # as wide as the header: reads right-aligned
        table = table.set_column(i, name, pa.array([s.rjust(width) for s in text], pa.string()))
    return table


def _bytes_text(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return str(value)


# --- gpu: where device time goes ------------------------------------------------------------------------

@app.command()
def gpu(
    trace: TraceArg,
    idle: Annotated[bool, typer.Option("--idle", help="Only the idle-causes table (JSON/CSV: its rows).")] = False,
    launches: Annotated[bool, typer.Option("--launches", help="Only the launches-and-concurrency table (JSON/CSV: "
                                                              "its rows).")] = False,
    short_gap_us: Annotated[float, typer.Option("--short-gap-us", help="Idle gaps between busy periods shorter "
                                                                       "than this (µs) are launch_overhead (next "
                                                                       "work launched late) or kernel_gap (next "
                                                                       "work already queued).", min=0)]
    = 10.0,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 0,
    no_cache: NoCacheOpt = False,
) -> None:
    """Where GPU time goes per device and stream: compute, memcpy by direction, memset, communication, idle.

    Window: from the start of the first ProfilerStep#N to the end of the last one; in a trace without
    steps, from its first event (of any kind) to the end of its last. Work outside the window is not
    counted and percentages are of the window. Work = kernels, collectives (comm: NCCL/RCCL), memcpys,
    memsets. Busy = the union of their intervals (overlaps count once); a device's busy time is the
    union over its streams (its row has stream '-'). An event that runs past the start of the next one on
    its stream is cut there (counted in 'clipped'). concurrent_ns: time with two or more streams busy.

    The terminal shows the breakdown, then the idle time of each device by cause (every idle ns has one
    cause, the first that holds: sync = host in a synchronising call, input_pipeline = host in the
    DataLoader, launch_overhead = short gap whose next work was launched after it began, kernel_gap =
    short gap with the next work already queued, host_wait = nothing launched and not started, other),
    then concurrency and launches (kernels per step, median kernel time, launch delay median/p90, graph
    launches, clock skew). --idle or --launches shows one of them; JSON/CSV give the breakdown unless one
    is chosen.
    """
    from opscope.analyses.gpu import GpuAnalysis
    from opscope.analyses.idle import IDLE_NOTE
    from opscope.units import format_ns

    if idle and launches:
        raise UsageError("choose one of --idle and --launches")
    t = _load(trace, no_cache)
    _warn_recovered(t)
    analysis = GpuAnalysis(t, short_gap_ns=int(round(short_gap_us * 1000)))
    breakdown = analysis.breakdown()
    if breakdown.num_rows == 0:
        note = analysis.notes()[0]
        if format is Format.table:
            out.print(f"opscope: {note}", highlight=False, markup=False)
        else:
            _emit(breakdown, format, "", 0)
            err.print(f"opscope: {note}", highlight=False, markup=False)
        return
    idle_note = IDLE_NOTE.format(short=format_ns(analysis.short_gap_ns))
    sections = []
    if not launches:
        sections.append(("idle", analysis.idle(), "Idle time by cause, per device", [idle_note]))
    if not idle:
        sections.append(("launches", analysis.launches(), "Launches and concurrency, per device",
                         analysis.launch_notes()))
    if not idle and not launches:
        sections.insert(0, ("breakdown", breakdown, "GPU time per device and stream", analysis.notes()))
    if format is not Format.table:
        name, table, _, notes = sections[0]
        _emit(table, format, "", limit)
        for line in notes:
            err.print(f"opscope: {line}", highlight=False, markup=False)
        return
    for name, table, title, notes in sections:
        if name == "breakdown":
            table = _gpu_table_view(table)
        if name == "launches":  # two narrower tables for the terminal
            concurrency = ["streams", "launch_threads", "concurrent_ns", "concurrent_pct", "max_concurrent_streams"]
            _emit(table.select(["device", *concurrency]), format, "Concurrency of streams, per device", 0)
            table = table.drop_columns(concurrency)
            title = "Launches, per device"
        _emit(table, format, title, limit if name == "breakdown" else 0, "\n".join(notes))


def _gpu_table_view(table):
    """The breakdown for the terminal: without columns that say nothing here (all-zero memcpy directions,
    no clipping) and without window_ns (the note gives it)."""
    import pyarrow.compute as pc

    drop = ["window_ns"]
    for name in table.column_names:
        if (name.startswith("memcpy_") or name == "clipped") and not (pc.max(table[name]).as_py() or 0):
            drop.append(name)
    return table.drop_columns(drop)

@app.command()
def advise(
    traces: Annotated[list[Path] | None, typer.Argument(
        help="Trace file, or a recording directory from `opscope record`. More traces after the first: the other "
             "ranks of the same job (for straggler and communication findings).", show_default=False)] = None,
    explain: Annotated[str | None, typer.Option("--explain", help="Say how rule RULE decides and estimates its "
                                                                  "saving, then exit ('all' for every rule).",
                                                metavar="RULE")] = None,
    rules: Annotated[str | None, typer.Option("--rules", help="Run only these rules, comma-separated.")] = None,
    run_info: Annotated[Path | None, typer.Option("--run", help="The recording's run.json (thread settings, cores, "
                                                               "GPUs); found beside the trace when not given.")]
    = None,
    format: FormatOpt = Format.table,
    limit: LimitOpt = 0,
    no_cache: NoCacheOpt = False,
) -> None:
    """Findings ranked by estimated saving: what slows each step, the evidence, and a change to try.

    Every rule looks at the analyses of the trace (GPU idle time by cause, ops, kernels, launches, copies,
    synchronisation, communication, steps, memory, thread settings) and reports a finding with its evidence
    rows, the time it would save per step (and as a share of the mean step) with the reasoning behind that
    figure, and a concrete change. Savings of different findings can overlap (the GPU-idle finding is an upper
    bound that the cause-specific ones split), so do not add them up. `--explain RULE` tells how a rule
    decides and estimates. JSON gives the findings with their evidence; CSV one line per finding.
    """
    import json

    from opscope.advise import advise as run_rules
    from opscope.advise import all_rules, rule
    from opscope.advise.context import find_run_info

    if explain is not None:
        chosen = all_rules() if explain == "all" else [rule(explain)]
        for r in chosen:
            out.print(f"[bold]{r.id}[/bold] — {r.title}", highlight=False)
            out.print(r.explain, highlight=False, markup=False)
            out.print()
        return
    if not traces:
        raise UsageError("give a trace to advise on (or --explain RULE); see opscope advise --help")
    first, *others = traces
    run = None
    if first.is_dir():
        first, run = _recording_trace(first)
    elif run_info is None:
        run = find_run_info(first)
    if run_info is not None:
        try:
            run = json.loads(run_info.read_text())
        except (OSError, ValueError) as exc:
            raise TraceError(run_info, f"cannot read run info ({exc.__class__.__name__})",
                             "give the run.json that opscope record wrote") from None
    t = _load(first, no_cache)
    _warn_recovered(t)
    peers = tuple(_load(p, no_cache) for p in others)
    only = _split(rules) if rules else None
    result = run_rules(t, run=run, peers=peers, only=only)
    if format is Format.table:
        from opscope.render.advice import print_advice

        print_advice(out, result, str(first), limit or None)
        return
    rows = result.rows()[: limit or None]
    if format is Format.csv:
        rows = [{k: v for k, v in r.items() if k not in ("evidence", "evidence_title")} for r in rows]
    _emit(rows, format, "", 0)
    for rule_id, reason in result.not_applicable.items():
        err.print(f"opscope: rule {rule_id} did not run: {reason}", highlight=False, markup=False)


def _recording_trace(directory: Path):
    """The first trace of a recording directory, and its run.json."""
    import json

    run_file = directory / "run.json"
    try:
        run = json.loads(run_file.read_text())
    except (OSError, ValueError):
        raise TraceError(directory, "is a directory without a readable run.json",
                         "give a trace file or a directory written by opscope record") from None
    names = run.get("traces") or [] if isinstance(run, dict) else []
    if not names:
        raise TraceError(directory, "the recording holds no trace", "see its run.json for what happened")
    return directory / names[0], run

@app.command()
def diff(
    base: Annotated[Path, typer.Argument(help="The baseline trace.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="The trace to compare with it.", show_default=False)],
    by: Annotated[str, typer.Option(help="Match ops by: name, name,shapes (name and input shapes) or api (the "
                                         "Python API, across frameworks: aten::conv2d and TF's Conv2D meet as "
                                         "conv2d).")] = "name",
    steps: StepsOpt = None,
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Compare whole-trace totals, not per step.")]
    = False,
    fail_if_slower: Annotated[str | None, typer.Option(
        "--fail-if-slower", help="CI gate: exit 1 when the per-step time (whole-trace time without steps) grew by "
                                 "more than this: 5% (of the base) or a time such as 2ms.", metavar="LIMIT")] = None,
    only: Annotated[str | None, typer.Option("--only", help="Only 'ops' or only 'kernels' rows.")] = None,
    full_names: Annotated[bool, typer.Option("--full-names", help="Table: kernel names in full (JSON/CSV always "
                                                                  "have them as the trace writes them).")] = False,
    format: FormatOpt = Format.table,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Rows to show (0 = all); JSON/CSV: all unless given.")]
    = 20,
    no_cache: NoCacheOpt = False,
) -> None:
    """Compare two traces (two devices, versions or frameworks): what got slower, per step.

    Both traces are normalised to one step: when both have ProfilerStep#N annotations, every time is the total
    over the compared steps (all of them, but a first step flagged as a warm-up outlier; or --steps) divided by
    their number, and calls are per step too; when neither has steps, whole-trace totals are compared. Rows:
    host ops (kind op, self time) and device work (kind kernel: kernels, copies, memsets, collectives), matched
    by name (see --by), sorted by absolute change; status is changed, same, added (only in NEW) or removed
    (only in BASE). The table also shows where the difference comes from (step time split into device compute,
    memcpy, memset, comm and idle; host ops on CPU-only traces) and kernel choice changes: the same op with the
    same input shapes running different kernels. --format json gives the rows as an array of objects (kind,
    name, base_ns, new_ns, delta_ns, calls_base, calls_new, status).

    Exit codes: 0 compared (and within --fail-if-slower), 1 slower than --fail-if-slower allows, 2 no
    comparison possible (unreadable or empty trace, the same file twice, traces of different frameworks without
    --by api, steps in one trace only without --whole-trace).
    """
    from opscope.diff import check_inputs, compare
    from opscope.diff.gate import parse_threshold

    threshold = parse_threshold(fail_if_slower) if fail_if_slower is not None else None
    if only not in (None, "ops", "kernels"):
        raise UsageError(f"--only takes ops or kernels, not {only!r}")
    if base.exists() and new.exists() and base.samefile(new):
        raise TraceError(new, f"is the same file as {base}; nothing to compare",
                         "give two different traces (a baseline and a new run)")
    a = _load(base, no_cache)
    b = _load(new, no_cache)
    check_inputs(base, new, a, b)
    for t in (a, b):
        _warn_recovered(t)
    result = compare(a, b, by=by, steps=steps, whole_trace=whole_trace, labels=(str(base), str(new)),
                     ops=only != "kernels", kernels=only != "ops")
    if format is Format.table:
        out.print(f"[bold]{escape_markup(result.summary)}[/bold]", highlight=False)
        import pyarrow as pa

        _emit(pa.Table.from_pylist(result.headline), format, "Where the time per step goes" if result.per_step
              else "Where the time goes (whole trace)", 0)
        rows = result.rows if full_names else _short_kernel_names(result.rows)
        _emit(rows, format, "Ops and kernels by absolute change", limit)
        if result.kernel_choice.num_rows:
            _emit(result.kernel_choice, format, "Kernel choice changes: same op and input shapes, other kernels",
                  limit)
        for line in result.notes:
            out.print(f"[dim]{escape_markup(line)}[/dim]", highlight=False)
    else:
        given = any(a in sys.argv for a in ("--limit", "-n"))
        _emit(result.rows, format, "", limit if given else 0)
        err.print(f"opscope: {result.summary}", highlight=False, markup=False)
    if threshold is not None:
        failed, reason = result.gate(threshold)
        err.print(f"opscope: {reason}", highlight=False, markup=False)
        if failed:
            raise typer.Exit(1)


def _short_kernel_names(rows):
    """Kernel rows with short names (no templates or parameters) for the terminal; names that would read the
    same keep what tells them apart."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from opscope.analyses.names import distinct_short_names

    if rows.num_rows == 0:
        return rows
    is_kernel = pc.equal(rows["kind"], "kernel")
    shown = pc.if_else(is_kernel, distinct_short_names(rows["name"]).cast(pa.string()), rows["name"])
    return rows.set_column(rows.schema.get_field_index("name"), "name", shown)


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)


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
