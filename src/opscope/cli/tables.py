"""Table commands over one trace: summary, ops, kernels, steps, query."""

import sys
from typing import Annotated, Literal

import typer

from opscope.cli.app import app
from opscope.cli.common import event_filter, load, per_rank, show, split
from opscope.cli.options import (
    CaptureOpt,
    ExcludeOpt,
    FormatOpt,
    LimitOpt,
    MatchOpt,
    NoCacheOpt,
    StepsOpt,
    TraceOrJobArg,
)


@app.command()
def summary(trace: TraceOrJobArg, format: FormatOpt = "table", no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
            top: Annotated[int, typer.Option(help="Rows in the top-ops and top-kernels lists.")] = 5,
            limit: Annotated[int | None, typer.Option(
                "--limit", "-n", help="Rows in the top-ops and top-kernels lists (0 = all), as every table "
                                      "command takes it; overrides --top.", show_default=False)] = None) -> None:
    """Wall time, steps, CPU/GPU busy time, top ops and kernels, time by kind, what was not mapped.

    For a trace of `opscope record`, the run.json beside it tells whether the recorded steps ran slower than
    the unrecorded ones (the profiler's overhead); when beyond the noise, the summary says so.
    """
    from opscope.analyses.recording import find_run_info
    from opscope.analyses.reports import summary_report

    if limit is not None:
        if limit < 0:
            raise typer.BadParameter("must be 0 (all rows) or more", param_hint="--limit")
        top = limit or sys.maxsize
    job = per_rank(trace, summary_report, no_cache, top=top)
    if job is not None:
        show(job, format)
        return
    show(summary_report(load(trace, no_cache, inflation_note=False), top=top, run=find_run_info(trace)), format)


@app.command()
def ops(
    trace: TraceOrJobArg,
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
    format: FormatOpt = "table",
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Per operator: calls, total, self, avg/min/max time and share of self time; the Python API that runs it.

    With --gpu: per operator, the device events it launched (directly or through the ops it called),
    their summed GPU time, the op's CPU time (total, inclusive), gpu_cpu_ratio and the top kernels.
    """
    from opscope.analyses.reports import gpu_ops_report, ops_report

    filt = event_filter(kinds, match, exclude, steps)
    job = per_rank(trace, gpu_ops_report, no_cache, by=split(by), filt=filt, sort=sort or "gpu_ns", kinds=kinds,
                   names="full" if full_names else "short", limit=limit) if gpu else \
        per_rank(trace, ops_report, no_cache, by=split(by), filt=filt, sort=sort or "self_ns", kinds=kinds, limit=limit)
    if job is not None:
        show(job, format)
        return
    t = load(trace, no_cache)
    if gpu:
        show(gpu_ops_report(t, split(by), filt, sort or "gpu_ns", kinds, "full" if full_names else "short", limit),
             format)
    else:
        show(ops_report(t, split(by), filt, sort or "self_ns", kinds, limit), format)


@app.command()
def kernels(
    trace: TraceOrJobArg,
    by_op: Annotated[bool, typer.Option("--by-op", help="Split each kernel by the operator that launched it.")]
    = False,
    full_names: Annotated[bool, typer.Option("--full-names", help="Name each kernel by its whole demangled "
                                                                  "name instead of its short form.")] = False,
    details: Annotated[bool, typer.Option("--details", help="Per kernel and launch configuration (grid, block): "
                                                            "registers per thread, shared memory, the profiler's "
                                                            "estimated occupancy, blocks and warps per SM, Tensor "
                                                            "Core use, as the trace records them.")] = False,
    sort: Annotated[str, typer.Option(help="Column to sort by (prefix - for ascending).")] = "total_ns",
    match: MatchOpt = None,
    exclude: ExcludeOpt = None,
    steps: StepsOpt = None,
    format: FormatOpt = "table",
    limit: LimitOpt = 20,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
) -> None:
    """Per device kernel (and memcpy/memset): calls, total/avg/min/max, share of device time, streams.

    One row per kernel, named short (no return type, template arguments or parameters; C++ names demangled)
    unless two kernels would then read the same: those keep their template arguments (or their whole name).
    --full-names gives the whole demangled names. --match/--exclude search the names as the trace has them.

    --details: one row per kernel and launch configuration (one name can launch with several grids and blocks)
    with the launch details the profiler wrote in each kernel's args: grid, block, registers per thread, shared
    memory per block (static + dynamic), the profiler's estimate of achieved occupancy (computed by Kineto, not
    measured), blocks and warps per SM, Tensor Core use where the trace has it. A field the trace lacks is empty;
    a note says which fields it records (ROCm traces: grid and block only).
    """
    from opscope.analyses.reports import kernels_report

    filt = event_filter(None, match, exclude, steps)
    names: Literal["short", "full"] = "full" if full_names else "short"
    job = per_rank(trace, kernels_report, no_cache, filt=filt, by_op=by_op, sort=sort, names=names, limit=limit,
                   details=details)
    show(job if job is not None else kernels_report(load(trace, no_cache), filt, by_op, sort, names, limit,
                                                    details), format)


@app.command()
def steps(trace: TraceOrJobArg, format: FormatOpt = "table", limit: LimitOpt = 0,
          no_cache: NoCacheOpt = False, capture: CaptureOpt = None) -> None:
    """Per step: duration, device busy time, and outliers (slow first step, > 1.5x the median).

    gpu_busy_ns/gpu_busy_pct: device busy inside the step's interval (the union over every device and stream,
    counted as opscope gpu counts it; at most 100% of the step). launched_gpu_ns: device time of the work
    launched in the step, wherever it ran; work launched near a step's end runs into the next one, so it can
    exceed the step's duration. For a trace of `opscope record`, a note says when its recorded steps ran
    slower than the unrecorded ones (run.json beside the trace).
    """
    from opscope.analyses.recording import find_run_info
    from opscope.analyses.reports import steps_report

    job = per_rank(trace, steps_report, no_cache, limit=limit)
    if job is not None:
        show(job, format)
        return
    show(steps_report(load(trace, no_cache, inflation_note=False), limit, run=find_run_info(trace)), format)


@app.command()
def query(
    trace: TraceOrJobArg,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the tables events, steps, flows, counters, "
                                            "memory, args.", show_default=False)],
    format: FormatOpt = "table",
    limit: LimitOpt = 50,
    no_cache: NoCacheOpt = False, capture: CaptureOpt = None,
    sandbox: Annotated[bool, typer.Option("--sandbox", help="No file, network or extension access from the SQL "
                                                           "(DuckDB's enable_external_access=false): for SQL "
                                                           "written by someone else.")] = False,
) -> None:
    """Run SQL over the trace's tables (DuckDB dialect).

    The SQL runs as you, like any DuckDB session: it can read and write the files you can (read_csv(...),
    COPY ... TO ...). --sandbox turns that off, for SQL that comes from someone else (a shared service).

    Tables: events (kind, name, cat, ts_ns, dur_ns, pid, tid, device, stream, correlation, external_id,
    shapes, dtypes, strides, concrete_inputs, output_shapes, event_id, parent, depth, self_ns, step, merged,
    op_self_ns), steps (step, name, pid, tid, ts_ns, dur_ns), flows (id, cat, phase, ts_ns, pid, tid), counters
    (name, series, ts_ns, pid, value), memory (ts_ns, pid, tid, device_type, device_id, addr, bytes,
    total_allocated, total_reserved), args (event_id, args as JSON text).

    TRACE may be a job (a directory or glob of rank traces): every rank is read into the cache in parallel and
    the tables hold all ranks, with a `rank` column (an Arrow dataset partitioned by rank; DuckDB reads only
    the columns and ranks the SQL needs).

    Example: opscope query t.json "select name, sum(dur_ns) from events where kind='kernel' group by 1"
    """
    from opscope.query import query_report, run_sql
    from opscope.scale.discover import is_job_spec

    if is_job_spec(trace):
        from opscope.cli.job import job_tables

        show(query_report(run_sql(job_tables(trace), sql, sandbox=sandbox), limit), format)
        return
    show(query_report(run_sql(load(trace, no_cache), sql, sandbox=sandbox), limit), format)
