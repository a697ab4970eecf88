"""`opscope repro`: the hot ops of a trace as standalone benchmarks with their exact inputs, run and checked."""

from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.app import app
from opscope.cli.common import load, say, show
from opscope.cli.options import CaptureOpt, FormatOpt, LimitOpt, NoCacheOpt, StepsOpt
from opscope.errors import TraceError, UsageError

ReproTraceArg = Annotated[Path | None, typer.Argument(
    help="Trace file, or a recording directory from `opscope record` (its first trace).", show_default=False)]
RunDirOpt = Annotated[Path | None, typer.Option(
    "--run", help="Run the reproducers of this directory (written earlier by opscope repro) and show the "
                  "table; no trace needed.", metavar="DIR")]
TopOpt = Annotated[int, typer.Option("--top", help="Cases to reproduce, biggest first (0 = all).", min=0)]
OpOpt = Annotated[str | None, typer.Option("--op", help="Only ops whose name matches this regex.", metavar="REGEX")]
KernelOpt = Annotated[str | None, typer.Option("--kernel", help="Only the ops that launched a kernel matching this "
                                                                "regex (GPU traces).", metavar="REGEX")]
ReproOutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Directory for the scripts and cases.json; a "
                                              "new one (DIR-1, DIR-2... when it exists).")]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", help="Run on this device instead of the trace's (cpu, cuda); the output says so.")]
VariantsOpt = Annotated[str, typer.Option(
    "--variants", help="Alternatives to measure beside each case: auto (all that apply but torch.compile), all, "
                       "none, or names (channels_last, contiguous, tf32, fp32_precision_high, autocast_bf16, "
                       "autocast_fp16, cudnn_benchmark, no_cudnn, no_mkldnn, deterministic, compile, "
                       "threads=N).")]
BudgetOpt = Annotated[float, typer.Option("--budget", help="Seconds of timed runs for each case and for each of "
                                                           "its variants.", min=0.01)]
TimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", help="Seconds before a case counts as hung and is stopped (default: from --budget).", min=1.0)]
NoRunOpt = Annotated[bool, typer.Option("--no-run", help="Write the scripts and cases.json only.")]
AsFrameworkOpt = Annotated[str | None, typer.Option(
    "--as", help="torch: reproduce a TensorFlow trace's ops as their PyTorch equivalents.", metavar="torch")]
MaxMemoryOpt = Annotated[float, typer.Option("--max-memory", help="GiB of inputs a case may need; bigger ones "
                                                                  "are not rebuilt.", min=0.001)]


@app.command()
def repro(trace: ReproTraceArg = None, run_dir: RunDirOpt = None, top: TopOpt = 5, op: OpOpt = None,
          kernel: KernelOpt = None, steps: StepsOpt = None, output: ReproOutputOpt = Path("opscope-repro"),
          device: DeviceOpt = None, variants: VariantsOpt = "auto", budget: BudgetOpt = 1.0,
          timeout: TimeoutOpt = None, no_run: NoRunOpt = False, as_framework: AsFrameworkOpt = None,
          max_memory: MaxMemoryOpt = 8.0, format: FormatOpt = "table", limit: LimitOpt = 0,
          no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Turn a trace's hot ops into standalone benchmarks, run them, and measure alternatives.

    Picks the top cases (--top) by device time on a GPU trace and by self time on a CPU trace: one case per
    distinct op and inputs (shapes, strides, dtypes, scalar arguments), at the op the model's code called
    (aten::conv2d, aten::linear; the leaf ops and kernels under it are listed). For each it writes a script
    that needs only PyTorch: the exact inputs as literals (non-contiguous and channels_last tensors rebuilt with
    as_strided), the overload matched against torch's registered schemas, the trace's time per call. Then it
    runs each script in its own process: warm-up, timed runs (median and spread) beside the recorded time, a
    check that the replay ran the ops or kernels the trace recorded under the op (same / differs), and the
    variants that apply (memory format, TF32 and autocast, cuDNN/oneDNN switches, deterministic algorithms,
    thread counts; torch.compile with --variants all), each with its speed-up and how far its outputs moved.

    A case that cannot be rebuilt (op not registered here, recorded without shapes, a collective) says why in
    the table and in cases.json; it never stops the others. Nothing already written is replaced: the
    directory is new, and cases.json is updated atomically after each case. --run DIR runs a directory again
    (on another machine, another device). JSON gives cases.json's entries; CSV their flat fields.
    """
    from opscope.repro.variants import parse_variants

    parse_variants(variants)
    if device is not None and device not in ("cpu", "cuda"):
        raise UsageError(f"--device takes cpu or cuda, not {device!r}")
    if as_framework not in (None, "torch"):
        raise UsageError(f"--as takes torch, not {as_framework!r}")
    if run_dir is not None:
        if trace is not None:
            raise UsageError("give a trace, or --run DIR, not both")
        _run_again(run_dir, device, budget, variants, timeout, format, limit)
        return
    if trace is None:
        raise UsageError("give a trace to reproduce (or --run DIR); see opscope repro --help")
    _write_and_run(trace, top, op, kernel, steps, output, device, variants, budget, timeout, no_run,
                   as_framework, max_memory, format, limit, no_cache)


def _write_and_run(trace_path: Path, top: int, op: str | None, kernel: str | None, steps: str | None,
                   output: Path, device: str | None, variants: str, budget: float, timeout: float | None,
                   no_run: bool, as_framework: str | None, max_memory: float, format: str, limit: int,
                   no_cache: bool) -> None:
    from opscope.analyses.filters import parse_steps
    from opscope.cli.advice import recording_trace
    from opscope.repro import registry
    from opscope.repro.cases import select_cases
    from opscope.repro.report import repro_report
    from opscope.repro.run import run_cases
    from opscope.repro.writer import write_cases

    registry.torch_version()  # without torch: one line saying how to install it, before any work
    if trace_path.is_dir():
        trace_path = recording_trace(trace_path)[0]
    trace = load(trace_path, no_cache)
    selection = select_cases(trace, top=top, op=op, kernel=kernel, steps=parse_steps(steps))
    calls = None
    if as_framework == "torch":
        from opscope.repro.crossframework import calls_for

        calls = calls_for(selection.cases, trace.metadata, int(max_memory * 2**30))
    directory, document = write_cases(selection, output, str(trace_path), max_bytes=int(max_memory * 2**30),
                                      calls=calls, threads=recorded_threads(trace_path))
    say(f"wrote {sum(1 for c in document['cases'] if c['script'])} reproducer(s) and cases.json to {directory}")
    ran = not no_run and any(c["script"] for c in document["cases"])
    if ran:
        run_cases(directory, document, device=device, budget=budget, variants=variants, timeout=timeout,
                  progress=say)
    show(repro_report(directory, document, ran, limit), format)


def recorded_threads(trace_path: Path) -> int | None:
    """The intra-op thread count the recording ran with (its run.json), or None."""
    from opscope.analyses.recording import find_run_info

    run = find_run_info(trace_path)
    threads = (run or {}).get("threads") if isinstance(run, dict) else None
    value = threads.get("intra_op") if isinstance(threads, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096 else None


def _run_again(directory: Path, device: str | None, budget: float, variants: str, timeout: float | None,
               format: str, limit: int) -> None:
    from opscope.repro.report import repro_report
    from opscope.repro.run import run_cases
    from opscope.repro.writer import read_cases

    try:
        document = read_cases(directory)
    except (OSError, ValueError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TraceError(directory / "cases.json", f"cannot read the repro directory ({problem[:200]})",
                         "give a directory written by opscope repro") from None
    run_cases(directory, document, device=device, budget=budget, variants=variants, timeout=timeout, progress=say)
    show(repro_report(directory, document, True, limit), format)
