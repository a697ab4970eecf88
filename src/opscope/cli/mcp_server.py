"""The server behind ``opscope mcp``: opscope's analyses as Model Context Protocol tools, over stdin and stdout.

Each tool runs the command of its name in this process (``app.run_here``) with ``--format json`` and the options its
arguments give, and answers with what the command prints: its JSON document, the same text as ``opscope COMMAND ...
--format json`` writes on stdout, and (a second text, when there are any) the lines the command says on stderr, its
notes. A command's error (a missing file, a file that is not a trace, bad SQL, a bad option value) is the tool's
error, holding the command's one line ``opscope: error: ...``. ``query`` always runs sandboxed (``--sandbox``: no file,
network or extension access from the SQL). The commands run one at a time: what a command was given is the process's.

Only ``opscope mcp`` imports this module; it needs the optional ``mcp`` package (``pip install 'opscope[mcp]'``).
"""

import io
import threading
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from opscope.cli.app import run_here
from opscope.cli.common import consoles_on
from opscope.errors import TraceError, UsageError
from opscope.version import __version__

INSTRUCTIONS = (
    "opscope analyzes profiler traces of deep-learning workloads (PyTorch/Kineto and Chrome trace JSON, XProf "
    "xplane.pb, ONNX Runtime profiles, MIGraphX perf output, rocprof files, Nsight Systems SQLite exports; plain or "
    ".gz). Every tool takes trace paths on this machine (absolute, or relative to the server's working directory) "
    "and answers with the JSON document of the opscope command of its name (times are integer nanoseconds in keys "
    "ending _ns), then, as a second text, the command's notes. Start with summary, then advise (findings ranked by "
    "the time they would save per step); ops, kernels, gpu, steps and memory show where the time goes.")

Trace = Annotated[str, Field(description="Path of a trace file (any format opscope reads, plain or .gz), or of a job: "
                                         "a directory or glob of rank traces (every rank, rows with a rank column).")]
OneTrace = Annotated[str, Field(description="Path of a trace file (any format opscope reads, plain or .gz).")]
Limit = Annotated[int | None, Field(ge=0, description="Rows to give (0 = all). Without it, every row.")]
Match = Annotated[str | None, Field(description="Keep only names matching this regular expression.")]
Exclude = Annotated[str | None, Field(description="Drop names matching this regular expression.")]
Steps = Annotated[str | None, Field(description="Only these steps, e.g. '3' or '2-4,7'.")]
FullNames = Annotated[bool, Field(description="Whole demangled kernel names instead of short ones.")]
Sort = Annotated[str | None, Field(description="Column to sort by (prefix - for ascending).")]

#: every tool reads traces and writes nothing but opscope's cache
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)

# One command at a time: a command's options and output consoles are the process's while it runs.
_one_at_a_time = threading.Lock()


def command_line(name: str, positional: list[str], options: dict[str, Any]) -> list[str]:
    """The words after ``opscope`` that run command ``name`` as a tool's arguments ask, with ``--format json``:
    options named as the command's (``by_op``: ``--by-op``), a None or False left out (the command's default), True
    as the bare flag, a list as the option once per item; the positional arguments after ``--``, so that a path or
    SQL starting with ``-`` is never read as an option."""
    argv = [name]
    for option, value in options.items():
        flag = "--" + option.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            argv += [f"{flag}={item}" for item in value]
        else:
            argv.append(f"{flag}={value}")
    return [*argv, "--format=json", "--", *positional]


def _error(line: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)


def run_command(name: str, positional: list[str], **options: Any) -> CallToolResult:
    """Command ``name`` run here (see :func:`command_line`), its output as a tool's result: its JSON document, then
    what it said on stderr, if anything; or its error line as the tool's error."""
    out, err = io.StringIO(), io.StringIO()
    with _one_at_a_time, consoles_on(out, err):
        try:
            code = run_here(command_line(name, positional, options))
        except (TraceError, UsageError) as exc:
            return _error(f"opscope: error: {exc}")
    said = err.getvalue()
    if code != 0:
        return _error(said.strip() or f"opscope: error: {name} ended with exit code {code}")
    texts = [out.getvalue(), *([said] if said else [])]
    return CallToolResult(content=[TextContent(type="text", text=text) for text in texts])


def summary(trace: Trace, limit: Annotated[int | None, Field(
        ge=0, description="Rows in the top-ops and top-kernels lists (0 = all; default 5).")] = None) -> CallToolResult:
    """The trace at a glance (opscope summary): wall time, steps, CPU and GPU busy time, the top ops and kernels,
    time by event kind, and what the reader could not map."""
    return run_command("summary", [trace], limit=limit)


def ops(trace: Trace,
        by: Annotated[str | None, Field(description="Group by these columns, comma-separated: name, shapes, dtypes, "
                                                    "kind, pid, tid, step (default name).")] = None,
        kinds: Annotated[str | None, Field(description="Event kinds to count, comma-separated (default cpu_op; e.g. "
                                                       "cpu_op,user_annotation,runtime,python).")] = None,
        sort: Sort = None,
        gpu: Annotated[bool, Field(description="Per op, the device work it launched (itself or through the ops it "
                                               "called): kernels, GPU time, GPU/CPU ratio, top kernels.")] = False,
        full_names: FullNames = False, match: Match = None, exclude: Exclude = None, steps: Steps = None,
        limit: Limit = None) -> CallToolResult:
    """Host operators (opscope ops): calls, total, self, avg/min/max time and share of self time per op, with the
    Python API that runs it; with gpu, the device time each op launched."""
    return run_command("ops", [trace], by=by, kinds=kinds, sort=sort, gpu=gpu, full_names=full_names, match=match,
                       exclude=exclude, steps=steps, limit=limit)


def kernels(trace: Trace,
            by_op: Annotated[bool, Field(description="Split each kernel by the operator that launched it.")] = False,
            full_names: FullNames = False,
            details: Annotated[bool, Field(description="Per kernel and launch configuration (grid, block): "
                                                       "registers, shared memory, the profiler's estimated "
                                                       "occupancy, blocks and warps per SM, as the trace records "
                                                       "them.")] = False,
            sort: Sort = None, match: Match = None, exclude: Exclude = None,
            steps: Steps = None, limit: Limit = None) -> CallToolResult:
    """Device kernels, copies and fills (opscope kernels): calls, total/avg/min/max time, share of device time and
    streams per kernel; with details, per launch configuration with its recorded resources."""
    return run_command("kernels", [trace], by_op=by_op, full_names=full_names, details=details, sort=sort,
                       match=match, exclude=exclude, steps=steps, limit=limit)


def gpu(trace: Trace,
        view: Annotated[Literal["breakdown", "idle", "launches"], Field(
            description="breakdown: device time per device and stream (compute, copies by direction, fills, "
                        "communication, idle); idle: the device's idle time by cause; launches: launches and "
                        "concurrency.")] = "breakdown",
        short_gap_us: Annotated[float | None, Field(
            ge=0, description="Idle gaps shorter than this (microseconds; default 10) are launch overhead or kernel "
                              "gaps.")] = None,
        limit: Limit = None) -> CallToolResult:
    """Where device time goes (opscope gpu): per device and stream, compute, copies, fills, communication and idle
    time; or why the device idles, or its launches."""
    return run_command("gpu", [trace], idle=view == "idle", launches=view == "launches", short_gap_us=short_gap_us,
                       limit=limit)


def steps(trace: Trace, limit: Limit = None) -> CallToolResult:
    """Per step (opscope steps): duration, device busy time, the device time launched in it, and outliers (a slow
    first step, steps over 1.5x the median)."""
    return run_command("steps", [trace], limit=limit)


def memory(trace: Trace,
           view: Annotated[Literal["peak", "holders", "allocations", "timeline", "counters"] | None, Field(
               description="peak: per device; holders: the ops holding memory at each peak; allocations: by op; "
                           "timeline; counters (default peak, or timeline when timeline is given).")] = None,
           timeline: Annotated[int | None, Field(ge=0, description="A timeline of this many equal time buckets per "
                                                                   "device.")] = None,
           device: Annotated[str | None, Field(description="Only these devices, e.g. cuda:0 or cpu,cuda:1.")] = None,
           sort: Annotated[str | None, Field(description="holders and allocations: column to sort by (prefix - for "
                                                         "ascending; default bytes).")] = None,
           steps: Steps = None, limit: Limit = None) -> CallToolResult:
    """Memory from the profiler's allocation records (opscope memory): peaks per device, the ops holding memory at
    the peak, allocations by op, a timeline."""
    return run_command("memory", [trace], view=view, timeline=timeline, device=device, sort=sort, steps=steps,
                       limit=limit)


def advise(trace: Annotated[str, Field(description="Path of a trace file, a recording directory of opscope record, "
                                                   "or a job: a directory or glob of rank traces.")],
           rules: Annotated[list[str] | None, Field(description="Run only these rules (ids as the findings give "
                                                                "them, e.g. gpu-idle).")] = None,
           run: Annotated[str | None, Field(description="The recording's run.json (found beside the trace when not "
                                                        "given).")] = None,
           limit: Limit = None) -> CallToolResult:
    """Findings ranked by the time they would save per step (opscope advise): what slows each step, the evidence,
    the saving and how it was obtained (simulated on the trace's dependency graph where it can be), and a change to
    try. Savings of different findings overlap: do not add them."""
    return run_command("advise", [trace], rules=",".join(rules) if rules else None, run=run, limit=limit)


def diff(base: Annotated[str, Field(description="The baseline: a trace file or a recording directory.")],
         new: Annotated[str, Field(description="The trace (or recording directory) to compare with it.")],
         by: Annotated[Literal["name", "name,shapes", "api"] | None, Field(
             description="Match ops by name (default), name and input shapes, or Python API (across "
                         "frameworks).")] = None,
         table: Annotated[Literal["rows", "headline", "ops", "classes", "kernel-choice", "critical-path",
                                  "roofline"] | None, Field(
             description="rows: ops and kernels matched by name (default); headline: the step time and its parts "
                         "with their 95% intervals; ops: device time by op; classes: device "
                         "time by kernel class; kernel-choice: the same op and shapes on other kernels; "
                         "critical-path: each side's mean critical path per step; roofline: each side against its "
                         "device's roof.")] = None,
         only: Annotated[Literal["ops", "kernels"] | None, Field(description="Only op or only kernel rows.")] = None,
         op_level: Annotated[Literal["api", "launching"] | None, Field(
             description="Device time by op: charged to the outermost op with a Python API (default) or to the op "
                         "that launched it.")] = None,
         steps: Steps = None,
         whole_trace: Annotated[bool, Field(description="Compare whole-trace totals, not per step.")] = False,
         limit: Limit = None) -> CallToolResult:
    """Two traces compared per step (opscope diff): what got slower or faster, per op and kernel, where the
    difference comes from, and kernel choices that changed."""
    return run_command("diff", [base, new], by=by, table=table, only=only, op_level=op_level, steps=steps,
                       whole_trace=whole_trace, limit=limit)


def critical_path(trace: OneTrace,
                  top: Annotated[int | None, Field(ge=1, description="Names with the most time on the path, per "
                                                                     "step (default 5).")] = None,
                  region: Annotated[str | None, Field(description="Instead of the steps, each instance of the host "
                                                                  "regions whose name matches this regex.")] = None,
                  limit: Limit = None) -> CallToolResult:
    """Per step, what set its length (opscope critical-path): the critical path through the trace's dependency
    graph, by category (host compute, python, launch/runtime, device compute, copies, communication, sync waits,
    input pipeline, unexplained)."""
    return run_command("critical-path", [trace], top=top, region=region, limit=limit)


def whatif(trace: Trace,
           changes: Annotated[list[str] | None, Field(description=(
               "SELECTOR=FACTOR changes, e.g. 'kernel:gemm=0.5', 'sync=0'. Selectors: op:REGEX, kernel:REGEX, copy, "
               "comm, sync, sync:REGEX, launch, loader, idle, idle:CAUSE; add @rank:N for one rank of a job. FACTOR "
               "multiplies the durations picked: 0 removes, 0.5 halves."))] = None,
           limit: Limit = None) -> CallToolResult:
    """Each step's time predicted with some work made faster, slower or removed (opscope whatif): the trace's
    dependency graph replayed with the changes; per step, the measured, replayed and predicted time."""
    return run_command("whatif", [trace], change=changes, limit=limit)


def roofline(trace: OneTrace,
             by: Annotated[Literal["op", "kernel"] | None, Field(
                 description="op: one row per op, shapes and dtype (default); kernel: one row per kernel.")] = None,
             peaks: Annotated[str | None, Field(description="A peaks file (opscope peaks --output writes one) "
                                                            "instead of the built-in peaks of the trace's "
                                                            "device.")] = None,
             limit: Limit = None) -> CallToolResult:
    """How far each op is from what the device can do (opscope roofline): FLOPs and bytes from its shapes over its
    device time, achieved TFLOP/s and GB/s, pct_of_roof, compute or memory bound."""
    return run_command("roofline", [trace], by=by, peaks=peaks, limit=limit)


def query(trace: Trace,
          sql: Annotated[str, Field(description=(
              "DuckDB SQL over the tables events, steps, flows, counters, memory and args, e.g. \"select name, "
              "sum(dur_ns) as ns from events where kind='kernel' group by 1 order by 2 desc limit 10\"."))],
          limit: Limit = None) -> CallToolResult:
    """SQL over the trace's tables (opscope query --sandbox): read-only, with no file, network or extension access
    from the SQL. Tables: events (kind, name, cat, ts_ns, dur_ns, pid, tid, device, stream, correlation,
    external_id, shapes, dtypes, strides, concrete_inputs, output_shapes, event_id, parent, depth, self_ns, step,
    merged, op_self_ns), steps (step, name, pid, tid, ts_ns, dur_ns), flows (id, cat, phase, ts_ns, pid, tid),
    counters (name, series, ts_ns, pid, value), memory (ts_ns, pid, tid, device_type, device_id, addr, bytes,
    total_allocated, total_reserved), args (event_id, args as JSON text). A job's tables have a rank column."""
    return run_command("query", [trace, sql], sandbox=True, limit=limit)


#: the tools, in the order a client lists them
TOOLS = (summary, ops, kernels, gpu, steps, memory, advise, diff, critical_path, whatif, roofline, query)


def server() -> MCPServer:
    """The server, every tool registered."""
    made: MCPServer = MCPServer("opscope", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    for tool in TOOLS:
        made.add_tool(tool, annotations=READ_ONLY, structured_output=False)
    return made


def serve() -> None:
    """Serve over stdin and stdout until the client closes stdin. While it serves, the process's stdout is the
    protocol's alone: what writes to it goes to stderr instead (the mcp package's stdio transport)."""
    server().run("stdio")
