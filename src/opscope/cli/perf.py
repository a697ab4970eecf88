"""`opscope perf MODEL.onnx`: ``migraphx-driver perf`` on ONNX Runtime (and ``--trace-eval``, like
``MIGRAPHX_TRACE_EVAL=2``)."""

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from opscope.cli.app import app
from opscope.cli.common import say, show
from opscope.cli.options import FormatOpt
from opscope.errors import TraceError, UsageError

_INPUT_DIM = "--input-dim"
PROFILE_SUFFIX = ".ort-profile.json"
DUMP_SUFFIX = ".numerics.parquet"


class _PerfCommand(TyperCommand):
    """Takes MIGraphX's ``--input-dim @x 1 3 224 224`` (a name then any number of dims) by joining the tokens
    after ``--input-dim`` into one value before click parses them: click options take a fixed number of values."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        joined: list[str] = []
        i = 0
        while i < len(args):
            token = args[i]
            if token == _INPUT_DIM and i + 1 < len(args):
                parts = [args[i + 1]]
                i += 2
                while i < len(args) and args[i].isdigit():
                    parts.append(args[i])
                    i += 1
                joined += [token, " ".join(parts)]
                continue
            joined.append(token)
            i += 1
        return super().parse_args(ctx, joined)


ModelArg = Annotated[Path, typer.Argument(help="An ONNX model (.onnx).", show_default=False)]
BatchOpt = Annotated[int, typer.Option("--batch", help="Batch size: the first symbolic or unknown dim of each "
                                                       "input (and the rate's multiplier).", min=1)]
InputDimOpt = Annotated[list[str] | None, typer.Option(
    "--input-dim", metavar="@NAME D0 D1 ...", help="The exact shape of one input, e.g. --input-dim @x 1 3 224 "
                                                   "224 (repeat for each input to set).")]
IterationsOpt = Annotated[int, typer.Option("--iterations", "-n", help="Profiled runs (after one warm-up run).",
                                            min=1)]
Fp16Opt = Annotated[bool, typer.Option("--fp16", help="Convert the model's float tensors to float16 first "
                                                      "(onnxconverter-common; inputs and outputs stay float32).")]
ProviderOpt = Annotated[str | None, typer.Option("--provider", help="ONNX Runtime execution provider (default "
                                                                    "CPUExecutionProvider).")]
TraceEvalOpt = Annotated[bool, typer.Option("--trace-eval", help="Instead of timing: run once and print every "
                                                                  "node's output (like MIGRAPHX_TRACE_EVAL=2); "
                                                                  "write them as a numerics dump (--dump).")]
ProfileOutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Where ONNX Runtime's profile is "
                                                       "written (default: MODEL.ort-profile.json in the current "
                                                       "directory, -1, -2... when taken).", show_default=False)]
DumpOpt = Annotated[Path | None, typer.Option("--dump", help="--trace-eval: the numerics dump (default: "
                                              "MODEL.numerics.parquet in the current directory, -1, -2... when "
                                              "taken); compare two with numerics-diff.", show_default=False)]
PerfForceOpt = Annotated[bool, typer.Option("--force", help="Replace the -o/--dump file if it exists.")]


@app.command(cls=_PerfCommand)
def perf(model: ModelArg, batch: BatchOpt = 1, input_dim: InputDimOpt = None, iterations: IterationsOpt = 100,
         fp16: Fp16Opt = False, provider: ProviderOpt = None, trace_eval: TraceEvalOpt = False,
         output: ProfileOutputOpt = None, dump: DumpOpt = None, force: PerfForceOpt = False,
         format: FormatOpt = "table") -> None:
    """Run an ONNX model on ONNX Runtime and report what `migraphx-driver perf` reports.

    The model runs with random inputs of its declared types (seeded, so two runs see the same data):
    one warm-up run, then -n runs under ONNX Runtime's profiler. Its profile (the warm-up run left out)
    is written with -o; every opscope command reads it (diff two of them: fp32 vs --fp16, one provider
    vs another). The report: every node in execution order with its time per run and share of the
    total node time, a Summary by op type (total / count = average, share), batch size, rate (1000 /
    total ms x batch), total time with min/max/mean/median and percentiles 90/95/99, total node time
    (= the sum of the node times) and the overhead both ways MIGraphX gives it. Times are MIGraphX's
    common average (the mean of the middle half of the sorted per-run times) and include the profiler's
    own cost. --format json/csv: one table with a section column (node, op_type, total).

    --trace-eval: run once with every node's output made a graph output and print, per node in graph
    order, its output's type and shape, which of normal/zero/nan/inf/subnormal values it holds, its
    first and last 5 values, min/max/mean/std (over the finite values) and the first NaN/Inf; the same
    rows are written as a numerics dump (--dump) for `opscope numerics-diff`.
    """
    from opscope.capture import onnxruntime_perf as run

    dims = dict(run.parse_input_dim(spec) for spec in input_dim or [])
    options = run.PerfOptions(batch=batch, input_dims=dims, iterations=iterations, fp16=fp16, provider=provider)
    run.check_provider(provider)
    if not model.is_file():
        raise TraceError(model, "no such file" if not model.exists() else "is not a file")
    stem = model.name.removesuffix(".onnx") + (".fp16" if fp16 else "")
    if trace_eval:
        if output is not None:
            raise UsageError("--trace-eval writes no profile: give its numerics dump with --dump, not -o")
        _trace_eval(model, options, dump, stem, force, format)
        return
    if dump is not None:
        raise UsageError("--dump goes with --trace-eval")
    target = _target(output, stem, PROFILE_SUFFIX, force)
    result = run.run_perf(model, options, target, force)
    _report(model, result, target, batch, fp16, format)


def _target(given: Path | None, stem: str, suffix: str, force: bool) -> Path:
    from opscope.capture.onnxruntime_perf import free_name
    from opscope.outfile import check_target

    target = given if given is not None else free_name(Path(stem + suffix), suffix)
    check_target(target, force)
    return target


def _report(model: Path, result: Any, target: Path, batch: int, fp16: bool, format: str) -> None:
    from opscope.analyses.perf_report import perf_report
    from opscope.cli.common import load

    shapes = ", ".join(f"@{n} {' '.join(map(str, s))} ({t})" for n, (s, t) in result.inputs.items())
    say(f"wrote {target} (ONNX Runtime profile of {result.iterations} runs after {result.warmup} warm-up; "
        f"opscope reads it like any trace)")
    trace = load(target, no_cache=True)
    try:
        report = perf_report(trace, batch, title=f"{model} on {result.provider}{' (fp16)' if fp16 else ''}",
                             extra_notes=[f"inputs: {shapes} (random, seed 0)"])
    except ValueError as exc:
        raise TraceError(target, str(exc)) from None
    show(report, format)


def _trace_eval(model: Path, options: Any, dump: Path | None, stem: str, force: bool, format: str) -> None:
    from opscope.analyses.perf_report import trace_eval_report
    from opscope.capture.onnxruntime_perf import trace_eval, write_dump

    target = _target(dump, stem, DUMP_SUFFIX, force)
    outputs, table = trace_eval(model, options)
    write_dump(table, target, force, {"model": str(model), "fp16": options.fp16})
    say(f"wrote {target} ({table.num_rows} node outputs; compare two with opscope numerics-diff)")
    show(trace_eval_report(outputs, table, title=f"{model}: node outputs"), format)
