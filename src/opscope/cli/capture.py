"""Commands that run a program: demo, record, tune-threads, model, numerics (and numerics-diff of two dumps)."""

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import is_document, load, say, show, stderr, write_document
from opscope.cli.options import FormatOpt, LimitOpt
from opscope.errors import UsageError
from opscope.text import one_line

#: Commands that take a program after `--` and pass its arguments through.
_PROGRAM = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command()
def demo(
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the trace, run.json and report; if it "
                                         "is not empty (or not yours), DIR-1, DIR-2... is used.")]
    = Path("opscope-demo"),
    steps: Annotated[int, typer.Option(help="Active profiled training steps.", min=1, max=100)] = 4,
    format: FormatOpt = "table",
) -> None:
    """Profile a small MobileNetV2-style model (depthwise convs) on the CPU; print its summary and the top advice.

    torch's intra-op threads are sized for this machine (its usable cores less those other processes keep busy) and
    run.json beside the trace says so, as `opscope record` writes it for a program of yours."""
    from opscope.advise import advise as run_rules
    from opscope.advise.report import advice_report
    from opscope.analyses.reports import summary_report

    try:
        from opscope.capture.demo import demo_run
        path, run = demo_run(output, steps)
    except ImportError as exc:
        raise UsageError(f"opscope demo needs PyTorch ({exc})") from None
    say(f"trace saved to {path} (run.json beside it: {_threads_said(run)})")
    trace = load(path)
    advice = advice_report(run_rules(trace, run=run), f"advice for {path.name}", limit=3, evidence_rows=4)
    show(summary_report(trace).then(replace(advice, legend=f"all of it: opscope advise {path}")), format)
    _demo_report(trace, path)
    say("next, your own program: opscope record -o myrun -- python train.py ARGS   (then opscope advise, report or "
        "steps on the trace it names; README.md, \"Capture: record your own program\")")


def _threads_said(run: dict) -> str:
    threads = (run.get("threads") or {}).get("intra_op")
    cpu = run.get("cpu") or {}
    load = cpu.get("load_average")
    busy = f", load average {load[0]:.2f}" if isinstance(load, list) and load else ""
    return f"{threads} intra-op threads for {cpu.get('usable_cores')} usable cores{busy}"


def _demo_report(trace, path: Path) -> None:
    """The demo's HTML report beside its trace, when the view extra is installed (else how to get it)."""
    from opscope.render.html import HtmlRenderer

    renderer = HtmlRenderer()
    try:
        renderer.require()
    except UsageError:  # the view extra is not installed
        stderr().print(one_line("for an HTML report of this trace: pip install 'opscope[view]', then opscope report "
                                f"{path} -o report.html"), highlight=False, markup=False)
        return
    from opscope.analyses.recording import find_run_info
    from opscope.compose.page import trace_page

    page = trace_page(trace, str(path), find_run_info(path))
    stem = path.name.removesuffix(".json").removesuffix(".pt.trace")
    target = path.parent / f"{stem}.report.html"  # beside its trace, numbered as the trace is (demo-1...)
    try:
        write_document(renderer, page, target, force=False)
    except UsageError as exc:
        say(f"no HTML report: {exc}")
        return
    stderr().print(one_line(f"report: {target} (open it in a browser; it works offline)"), highlight=False,
                   markup=False)


RecordOutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Directory for the traces and run.json; "
                                               "if it is not empty (or not yours), DIR-1, DIR-2... is used.")]
WaitOpt = Annotated[int, typer.Option(help="Steps to skip before warming up.")]
WarmupOpt = Annotated[int, typer.Option(help="Steps profiled but discarded (profiler warm-up).")]
ActiveOpt = Annotated[int, typer.Option(help="Steps recorded per window.")]
WindowsOpt = Annotated[int, typer.Option(help="Windows to record (0 = until the program ends).")]
ShapesOpt = Annotated[bool, typer.Option("--shapes/--no-shapes", help="Record input shapes.")]
MemoryOpt = Annotated[bool, typer.Option("--memory/--no-memory", help="Record allocations.")]
StackOpt = Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks and nn.Module scopes "
                                        "(for opscope code, scope and the Python frames in advise). Off by default: "
                                        "torch traces every Python call for them, which can make Python-heavy "
                                        "steps several times slower.")]
ModulesOpt = Annotated[bool, typer.Option("--modules/--no-modules", help="With --stack: record nn.Module scopes.")]
FlopsOpt = Annotated[bool, typer.Option("--flops/--no-flops", help="Estimate FLOPs of matmul/conv.")]
CpuOpt = Annotated[bool, typer.Option("--cpu", help="CPU activity only.")]
CudaOpt = Annotated[bool, typer.Option("--cuda", help="CPU and CUDA activity (default: CUDA when available).")]
IntraOpThreadsOpt = Annotated[int | None, typer.Option(help="torch.set_num_threads before the program starts.")]
InterOpThreadsOpt = Annotated[int | None, typer.Option(help="torch.set_num_interop_threads before the program "
                                                            "starts.")]


@app.command(context_settings=_PROGRAM)
def record(ctx: typer.Context, output: RecordOutputOpt = Path("opscope-record"), wait: WaitOpt = 1,
           warmup: WarmupOpt = 1, active: ActiveOpt = 3, repeat: WindowsOpt = 1, shapes: ShapesOpt = True,
           memory: MemoryOpt = True, stack: StackOpt = False, modules: ModulesOpt = True, flops: FlopsOpt = True,
           cpu: CpuOpt = False, cuda: CudaOpt = False, intra_op_threads: IntraOpThreadsOpt = None,
           inter_op_threads: InterOpThreadsOpt = None, format: FormatOpt = "table") -> None:
    """Run a Python program under the profiler without changing it, then print the summary.

    Usage: opscope record [OPTIONS] -- python train.py ARGS   (or -- python -m package.module ARGS, or
    -- python -c "CODE" ARGS)

    A step is one optimizer.step() (or, for programs without an optimizer, one opscope.step() call).
    The output directory gets the trace(s) and run.json (command, versions, devices, threads, the
    performance-relevant environment, git commit). The program's output and exit code are its own; if
    it crashes, the steps recorded so far are kept. Every step is timed, profiled or not (without the
    profiler's own work of saving a window): when the recorded steps ran slower than the unrecorded ones
    beyond the noise, record, summary and advise say so (their times are inflated).
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
        say(f"{output} is not empty (or not yours): writing to {directory}")
    run = run_program(target, directory, options)
    _recorded(run, directory, options, format)
    raise typer.Exit(run.exit_code)


def _recorded(run: Any, directory: Path, options: Any, format: str) -> None:
    """What a finished recording says: how it went (or, when the program never started, only its exit code: the
    runner said why), then the summary of its first trace."""
    from opscope.analyses.reports import summary_report
    from opscope.capture.reports import recording_lines

    info = run.info
    if info is None or info.get("status") == "starting" or (info.get("status") == "import-error"
                                                           and "steps" not in info):
        raise typer.Exit(run.exit_code or 2)  # the runner said why (one line) before the program started
    if info.get("status") == "import-error":
        raise typer.Exit(run.exit_code)  # one line already printed by the runner
    for line in recording_lines(info, directory, options, run.exit_code):
        say(line)
    if run.unsaved and run.rescued:  # the last line: what run.json holds, and why
        say(f"neither the program's side ({run.rescued}) nor opscope record ({run.unsaved}) could write "
            f"{directory / 'run.json'}: it still says the program is running; the lines above say how it ended")
    elif run.unsaved:
        say(f"cannot write {directory / 'run.json'} ({run.unsaved}): it still says the program is running")
    elif run.rescued:
        say(f"the program's side could not write {directory / 'run.json'} ({run.rescued}); opscope record wrote it")
    traces = [directory / name for name in info.get("traces", [])]
    if traces:
        show(summary_report(load(traces[0], inflation_note=False), run=info), format)


@app.command("tune-threads", context_settings=_PROGRAM)
def tune_threads_cmd(
    ctx: typer.Context,
    show_output: Annotated[bool, typer.Option("--show-output", help="Let the program print.")] = False,
    repeat: Annotated[int, typer.Option(help="Runs per setting (round-robin); more runs, less noise.",
                                        min=1, max=20)] = 2,
    format: FormatOpt = "table",
) -> None:
    """Run a program under a grid of intra-/inter-op thread counts and find the fastest.

    Usage: opscope tune-threads -- python train.py ARGS

    The grid is bounded by the usable cores: intra-op 1, 2, 4... up to the core count, each with 1 or 2
    inter-op threads, plus torch's default. Each setting's steps (each run's warm-up and slow outlier
    steps left out) give its median, p10-p90 and steps used, and its speed-up over the default with a
    95% interval (Hodges-Lehmann, Mann-Whitney) and a verdict (faster, slower, no difference, too few
    runs to tell); the best setting is named only when its interval beats the default's. The program
    must step (optimizer.step() or opscope.step()) at least 3 times; 5 steps a side give an interval.
    """
    from opscope.capture.launch import parse_command
    from opscope.capture.reports import tune_threads_report
    from opscope.capture.threads import thread_grid, tune_threads
    from opscope.threads import usable_cores

    target = parse_command(ctx.args)
    cores = usable_cores()
    table = tune_threads(target, thread_grid(cores), repeat=repeat, show_output=show_output,
                         on_run=lambda s, k: say(f"run {k + 1}/{repeat} with {s.label}"))
    show(tune_threads_report(table, cores), format)


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
    format: FormatOpt = "table",
    limit: LimitOpt = 0,
) -> None:
    """Per module: parameters, output shape and FLOPs of one forward pass (like tfprof's model analysis).

    One row per nn.Module in tree order; params and flops are totals of the module and everything
    under it. The forward runs once under torch.no_grad() in eval mode on a float32 randn input.
    FLOPs come from torch.utils.flop_counter: matmul/conv/attention ops only, a multiply-add counts 2,
    bias additions and elementwise ops (norms, activations, pooling) count 0.
    """
    from opscope.capture import modelstats
    from opscope.capture.reports import model_report

    _need_torch("opscope model")
    if sort not in modelstats.SORTS:
        raise UsageError(f"cannot sort by {sort!r}: choose one of {', '.join(modelstats.SORTS)}")
    shape = modelstats.parse_input_shape(input_shape)
    module = modelstats.load_model(target)
    stats = modelstats.model_stats(module, modelstats.example_input(module, shape), max_depth=max_depth)
    show(model_report(stats, target, shape, sort, limit), format)


def _need_torch(command: str) -> None:
    try:
        from opscope.capture import require_torch

        require_torch()
    except ImportError as exc:
        raise UsageError(f"{command} needs PyTorch ({exc})") from None


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
    format: FormatOpt = "table",
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
    from opscope.analyses.numerics import DUMP_NAME, load_dump
    from opscope.analyses.reports import numerics_report
    from opscope.capture.launch import parse_command
    from opscope.capture.numerics import fresh_dump_dir, run_with_numerics

    if not ctx.args:
        raise UsageError("no program given: put it after --, e.g. opscope numerics -- python train.py")
    if sort not in ("order", "size", "name"):
        raise UsageError(f"cannot sort by {sort!r}: choose one of order, size, name")
    target = parse_command(ctx.args)
    directory, renamed = fresh_dump_dir(output)
    if renamed:
        say(f"{output} already holds a dump (or is a file): writing to {directory}")
    code = run_with_numerics(target, directory / DUMP_NAME, max_ops or None, stdout_to_stderr=is_document(format))
    dump = directory / DUMP_NAME
    if not dump.is_file() or dump.stat().st_size == 0:  # still the empty claim fresh_dump_dir made
        dump.unlink(missing_ok=True)
        raise typer.Exit(code or 2)  # the runner said why before the program started
    table = load_dump(dump)
    say(f"{table.num_rows} outputs of {len(set(table['index'].to_pylist()))} ops recorded into {dump} "
        f"(exit code {code})")
    show(numerics_report(table, sort, limit), format)
    raise typer.Exit(code)


@app.command("numerics-diff")
def numerics_diff_cmd(
    a: Annotated[Path, typer.Argument(help="Reference dump: numerics.parquet or its directory, or a "
                                      "MIGRAPHX_TRACE_EVAL=2/3 text dump.", show_default=False)],
    b: Annotated[Path, typer.Argument(help="Dump to compare with A.", show_default=False)],
    rtol: Annotated[float, typer.Option(help="Relative tolerance (to A's values).")] = 1e-3,
    atol: Annotated[float, typer.Option(help="Absolute tolerance.")] = 1e-5,
    all_rows: Annotated[bool, typer.Option("--all", help="Show every matched op output, not only diverged ones.")]
    = False,
    format: FormatOpt = "table",
    limit: LimitOpt = 20,
) -> None:
    """Compare two numerics dumps op by op; show where they first diverge beyond the tolerance.

    The errors are computed on what a dump stores, not on all elements: per op output a strided
    sample of up to 64 values (max_abs_err, max_rel_err) plus its min/max/mean/std (mean_diff,
    std_diff: B - A) and NaN/Inf counts. A value diverges when |b - a| > atol + rtol * |a|; changed
    NaN/Inf counts or shapes diverge too. Rows are matched by (index, op, output_index) when both dumps
    hold the same ones, else aligned on the sequence of ops; dumps with no op name in common (MIGraphX against
    PyTorch) are aligned on the sequence of output shapes, a run of same-shape outputs standing for its last
    (a fused kernel). A MIGRAPHX_TRACE_EVAL dump (the output of a program run with it set, e.g. migraphx-driver
    run) is read as a dump: level 3 prints every value; level 2 only the first/last 5 values and stats, with
    NaN/Inf counts known only as "some". Exit code 1 when they diverge, 0 when not.
    """
    from opscope.analyses.numerics import load_dump
    from opscope.diff.numerics import diff_dumps
    from opscope.diff.report import numerics_diff_report

    diff = diff_dumps(load_dump(a), load_dump(b), rtol=rtol, atol=atol)
    show(numerics_diff_report(diff, f"Numerics: {b} vs {a} (rtol {rtol:g}, atol {atol:g})", all_rows, limit,
                              rtol, atol), format)
    raise typer.Exit(1 if diff.first_divergence() is not None else 0)


