"""``migraphx-driver perf`` text -> the model: one op per instruction, the report's figures as metadata.

Every version in circulation is read: 2.x (``@4 = op[attrs](args) -> type, {lens}, {strides}: 0.0088ms, 91%``,
a Summary of ``group: total / count = average, share``, ``Batch size``, ``Rate: ... inferences/sec``, ``Total
time`` with Min/Max/Mean/Median, ``Percentiles``), the 1.x/ROCm 4 drivers (Summary ``group: total, share``,
``Rate: .../sec``, no batch, no percentiles) and the DCU/DTK fork (``main:@0 = ...->float_type,{},{}:0.0026ms,
0.0063%``). The instruction times are MIGraphX's averages over the timed runs (the mean of the middle half), so
the file has no timeline: the instructions are laid end to end in program order on a synthetic host thread
(a warning says so); instructions that run device work (``gpu::*``, ``hip::copy*``, ``hip::fill``) also get a
device row at the same span, linked to the op by correlation id, so ``kernels`` and ``gpu`` work. One step
spans the averaged run (``Total time``). Semantics (AMDMIGraphX ``src/program.cpp::perf_report``): percent =
ceil(100 x avg / total instructions time); Rate = 1000 / total ms x batch; overhead 1 = the ``dry_run``
average, overhead 2 = total - sum of instructions.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opscope.errors import TraceError
from opscope.ingest.migraphx import grammar
from opscope.ingest.migraphx.grammar import NUMBER, Instruction, ms_to_ns, parse_instruction
from opscope.ingest.migraphx.operands import Listing
from opscope.ingest.numbers import int64
from opscope.ingest.source import ByteSource, decoded_lines
from opscope.model.builder import TraceBuilder
from opscope.model.trace import Trace

N = NUMBER
TIMED = re.compile(rf"^(?P<ins>\S+ = .*?)\s*:\s*(?P<ms>{N})ms\s*,\s*(?P<pct>{N})%\s*$")
#: an instruction line with a timing suffix whose numbers do not read
_TIMED_LOOSE = re.compile(r"^\S+ = .*:\s*\S*ms\s*,\s*\S*%\s*$")
_RETURN_GLUED = re.compile(r"^(\S+ = @return(?:\([^()]*\))?)(\S+ = .*)$")
_SUMMARY_NEW = re.compile(rf"^(?P<name>.+?):\s*(?P<total>{N})ms\s*/\s*(?P<n>\d+)\s*=\s*(?P<avg>{N})ms\s*,\s*"
                          rf"(?P<pct>{N})%\s*$")
_SUMMARY_OLD = re.compile(rf"^(?P<name>.+?):\s*(?P<total>{N})ms\s*,\s*(?P<pct>{N})%\s*$")
_VERSION = re.compile(r"MIGraphX Version:\s*([^\]\s]+)\s*\]\s*(?::\s*(.*))?$")
_TOTALS: dict[str, re.Pattern] = {
    "batch": re.compile(r"^Batch size:\s*(\d+)\s*$"),
    "rate": re.compile(rf"^Rate:\s*({N})\s*(?:inferences)?\s*/\s*sec\s*$"),
    "total": re.compile(rf"^Total time:\s*({N})ms\s*(?:\(Min:\s*({N})ms,\s*Max:\s*({N})ms,\s*Mean:\s*({N})ms,\s*"
                        rf"Median:\s*({N})ms\)\s*)?$"),
    "percentiles": re.compile(rf"^Percentiles \(90%, 95%, 99%\):\s*\(({N})ms,\s*({N})ms,\s*({N})ms\)\s*$"),
    "instructions": re.compile(rf"^Total instructions time:\s*({N})ms\s*$"),
    "overhead": re.compile(rf"^Overhead time:\s*({N})ms\s*,\s*({N})ms\s*$"),
    "overhead_pct": re.compile(rf"^Overhead:\s*({N})%\s*,\s*({N})%\s*$"),
}
_TOTAL_PREFIX = {"batch": "Batch size:", "rate": "Rate:", "total": "Total time:", "percentiles": "Percentiles",
                 "instructions": "Total instructions time:", "overhead": "Overhead time:", "overhead_pct": "Overhead:"}
#: gpu:: ops that only order streams: no device work of their own
_STREAM_OPS = frozenset({"gpu::record_event", "gpu::set_stream", "gpu::wait_event"})
_MEMCPY_OPS = frozenset({"hip::copy", "hip::copy_to_gpu", "hip::copy_from_gpu"})
_MEMSET_OPS = frozenset({"hip::fill"})
PID, TID = "migraphx", "main"
_SYNTHETIC = ("MIGraphX perf text has no timeline: instructions are laid end to end in program order on a "
              "synthetic host thread, each lasting its average over the timed runs")


@dataclass
class TimedInstruction:
    ins: Instruction
    ms: float
    pct: float
    line: int


@dataclass
class PerfReport:
    """What the text holds but its instructions (handed on one at a time: :func:`parse`), parsed; times in ms as
    printed."""

    count: int = 0  #: the timed instructions
    times_ms: array = field(default_factory=lambda: array("d"))  #: each timed instruction's time, in order
    summary: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, list[float]] = field(default_factory=dict)
    version: str | None = None
    command: str | None = None
    broken: list[int] = field(default_factory=list)  # line numbers of timed lines that do not read
    bad_totals: list[str] = field(default_factory=list)
    untimed: int = 0  # @return lines (perf prints no time for them)


def iter_lines(path: Path, source: ByteSource | None = None) -> Iterator[str]:
    """The file's lines (gzip decompressed; bytes that are not UTF-8 replaced), one at a time; the read stops at a run
    of NUL bytes (``source.corrupt_reason`` says so), and a NUL byte in the first 64 KiB is binary data, not text."""
    source = source or ByteSource(path, text=True)

    def checked() -> Iterator[bytes]:
        given = 0
        for block in source.blocks():
            if given < 65536 and b"\0" in block[:65536 - given]:
                raise TraceError(path, "holds binary data, not MIGraphX text output")
            given += len(block)
            yield block

    yield from decoded_lines(checked())


def parse(text: str | Iterable[str], sink: Callable[[TimedInstruction], None]) -> PerfReport:
    """The perf report in ``text`` or its lines (the lines before it, header and compiled program, are skipped), each
    timed instruction handed to ``sink`` as it is read (a long report is never held whole)."""
    rep = PerfReport()
    in_timed = in_summary = False
    for number, raw in enumerate(text.splitlines() if isinstance(text, str) else text, 1):
        line = raw.strip()
        if not line:
            continue
        if rep.version is None and "MIGraphX Version" in line:
            m = _VERSION.search(line)
            if m:
                rep.version, rep.command = m.group(1), (m.group(2) or None)
            continue
        if line.startswith("Running performance report"):
            in_timed = True
            continue
        if line == "Summary:":
            in_summary, in_timed = True, False
            continue
        total_key = next((k for k, prefix in _TOTAL_PREFIX.items() if line.startswith(prefix)), None)
        if total_key is not None and (in_summary or rep.summary or rep.count):
            in_summary = in_timed = False
            m = _TOTALS[total_key].match(line)
            if m:
                rep.totals[total_key] = [float(g) for g in m.groups() if g is not None]
            else:
                rep.bad_totals.append(line.split(":")[0])
            continue
        if in_summary:
            m = _SUMMARY_NEW.match(line)
            if m:
                total = float(m["total"])
                rep.summary.append({"group": m["name"].strip(), "total_ms": total, "count": int(m["n"]),
                                    "average_ms": float(m["avg"]), "pct": float(m["pct"])})
                continue
            m = _SUMMARY_OLD.match(line)
            if m:
                rep.summary.append({"group": m["name"].strip(), "total_ms": float(m["total"]), "count": None,
                                    "average_ms": None, "pct": float(m["pct"])})
                continue
            rep.bad_totals.append("Summary line")
            continue
        glued = _RETURN_GLUED.match(line)
        if glued:  # perf prints no newline after @return: the next module's first instruction follows it
            rep.untimed += 1
            line = glued.group(2)
        m = TIMED.match(line)
        ins = parse_instruction(m["ins"]) if m else None
        if m and ins is not None:
            in_timed = True
            rep.count += 1
            rep.times_ms.append(float(m["ms"]))
            sink(TimedInstruction(ins, rep.times_ms[-1], float(m["pct"]), number))
        elif _TIMED_LOOSE.match(line) or (in_timed and " = " in line and "@return" not in line):
            rep.broken.append(number)
        elif in_timed and "@return" in line:
            rep.untimed += 1
    return rep


def read(path: Path, *, progress=None, keep_args: bool = True) -> Trace:
    source = ByteSource(path, text=True)
    b = TraceBuilder(str(path), "migraphx_perf")
    timeline = Timeline(b, keep_args)
    groups: Counter[str] = Counter()  # the instructions' own groups (perf --detailed's are named at the end)

    def add(t: TimedInstruction) -> None:
        group = t.ins.group
        groups[group] += 1
        ok = math.isfinite(t.ms) and t.ms >= 0
        timeline.add(t.ins, t.ms, group, {"time_ms": t.ms if ok else None,
                                          "percent": t.pct if math.isfinite(t.pct) else None, "line": t.line})

    rep = parse(iter_lines(path, source), add)
    if not rep.count:
        if rep.broken:
            raise TraceError(path, f"MIGraphX perf text whose instruction timings do not read (line {rep.broken[0]})")
        raise TraceError(path, "MIGraphX output without a performance report (no timed instruction lines)",
                         "give the output of migraphx-driver perf")
    if progress is not None:
        progress(source.size, source.size)
    trace = build(b, rep, timeline.finish(), groups, timeline.submodules)
    if source.truncated:
        trace.warn(f"file is truncated ({source.corrupt_reason or 'compressed stream ends early'}); the complete "
                   "lines were read")
    return trace


def _device_kind(op: str) -> str | None:
    if op.startswith("gpu::") and op not in _STREAM_OPS:
        return "kernel"
    if op in _MEMCPY_OPS:
        return "memcpy"
    if op in _MEMSET_OPS:
        return "memset"
    return None


#: Instructions whose rows are handed to the builder at once (their Python objects are what a batch holds: 5,000
#: cost 10 MiB less at the peak of 400,000 instructions than 20,000).
_BATCH = 5_000


class Timeline:
    """Instructions laid end to end from 0, one after the other as they are read (:meth:`add`), as the builder's
    rows: a host op each, with its operands' and output's shapes, dtypes and strides (:mod:`.operands`), and a
    device row (same span, same correlation id) for those that run device work. Rows are handed to the builder
    :data:`_BATCH` at a time; :meth:`finish` hands the last and names the processes."""

    def __init__(self, b: TraceBuilder, keep_args: bool) -> None:
        self.b, self.keep_args = b, keep_args
        self.end = 0  #: where the next instruction starts (ns)
        self.count = 0
        self.stream = 0
        self.listing = Listing()
        self.devices_seen = False
        self.inputs_cut = 0  # instructions with more operands than the parser keeps
        self.submodules = 0  # instructions of a module other than main (an if's or a loop's)
        self._new_batch()

    def _new_batch(self) -> None:
        self.host: dict[str, list] = {k: [] for k in ("kind", "name", "cat", "ts_ns", "dur_ns", "pid", "tid",
                                                       "correlation", "shapes", "dtypes", "strides",
                                                       "concrete_inputs")}
        self.dev: dict[str, list] = {k: [] for k in ("kind", "name", "cat", "ts_ns", "dur_ns", "pid", "tid", "device",
                                                      "stream", "correlation")}
        self.host_args: list[str] = []
        self.dev_args: list[str] = []

    def _flush(self) -> None:  # the rows so far to the builder: the Python lists of one batch at a time
        if self.host["kind"]:
            self.b.add_events(self.host, self.host_args if self.keep_args else None)
        if self.dev["kind"]:
            self.b.add_events(self.dev, self.dev_args if self.keep_args else None)
            self.devices_seen = True
        self._new_batch()

    def add(self, ins: Instruction, ms: float, name: str, extra: dict) -> int:
        """Add one instruction lasting ``ms`` (a time that is not a number, ``-nan``: never ran, lasts 0 ns) as the op
        ``name`` with ``extra`` args; returns its start (ns)."""
        if self.count and self.count % _BATCH == 0:
            self._flush()
        self.count += 1
        ts = self.end
        dur = (ms_to_ns(ms) or 0) if math.isfinite(ms) and ms >= 0 else 0
        if ins.op == "gpu::set_stream":
            s = ins.attributes().get("stream", "")
            self.stream = int(s) if s.isdigit() else self.stream
        corr = self.count
        self.inputs_cut += bool(ins.inputs_left_out)
        self.submodules += bool(ins.module and ins.module != "main")
        host = self.host
        for column, value in (("kind", "cpu_op"), ("name", name), ("cat", "migraphx"), ("ts_ns", ts),
                              ("dur_ns", dur), ("pid", PID), ("tid", TID), ("correlation", corr)):
            host[column].append(value)
        rec = self.listing.record(ins)
        for column, text in zip(("shapes", "dtypes", "strides", "concrete_inputs"), rec or (None,) * 4):
            host[column].append(text)
        if self.keep_args:
            self.host_args.append(json.dumps({**ins.to_args(), **extra}, separators=(",", ":")))
        kind = _device_kind(ins.op)
        if kind is not None:
            symbol = ins.attributes().get("symbol_name") if ins.op == "gpu::code_object" else None
            for column, value in (("kind", kind), ("name", symbol or ins.op), ("cat", kind), ("ts_ns", ts),
                                  ("dur_ns", dur), ("pid", "gpu0"), ("tid", f"stream {self.stream}"), ("device", 0),
                                  ("stream", self.stream), ("correlation", corr)):
                self.dev[column].append(value)
            if self.keep_args:
                self.dev_args.append(json.dumps({"instruction": ins.name, "op": ins.op, "group": name},
                                                separators=(",", ":")))
        self.end = ts + dur
        return ts

    def finish(self) -> int:
        """Hand the last rows to the builder and name the processes; returns the end (ns)."""
        self._flush()
        b = self.b
        b.metadata["process_names"] = {PID: "MIGraphX (synthetic timeline)"}
        b.metadata["thread_names"] = {f"{PID}/{TID}": "program order"}
        if self.devices_seen:
            b.metadata["process_names"]["gpu0"] = "GPU 0"
            b.metadata["device_properties"] = [{"id": 0, "name": "MIGraphX GPU target (device not named in the file)"}]
        if self.inputs_cut:
            b.warn(f"instructions with more than {grammar.MAX_INPUTS:,} operands: the rest are left out of their "
                   "args, and they have no shapes", self.inputs_cut)
        return self.end


SUBMODULE_WARNING = ("submodule instructions are laid after their parent; their time is also inside their parent's "
                     "(if/loop), as in MIGraphX's own total")


def build(b: TraceBuilder, rep: PerfReport, end: int, groups: Counter[str], submodules: int) -> Trace:
    """The trace of a report whose instructions are in ``b`` (op names their own ``groups``, each with its count),
    laid out up to ``end``: ops named by their Summary group, the step, the report's figures, the warnings."""
    summary = {row["group"] for row in rep.summary}
    renamed: dict[str, str] = {}
    ungrouped = 0
    for group, count in groups.items():
        if summary and group not in summary:
            base = next((g for g in summary if g.startswith(group + "<")), None)  # perf --detailed groups
            if base is None:
                ungrouped += count
            else:
                renamed[group] = base
    b.rename_events(renamed, kind="cpu_op")
    untimed = sum(1 for ms in rep.times_ms if not (math.isfinite(ms) and ms >= 0))
    total_ms = rep.totals.get("total", [None])[0]
    span = max(end, (ms_to_ns(total_ms) or 0) if total_ms is not None and math.isfinite(total_ms) else 0)
    b.add_steps({"step": [0], "name": ["migraphx perf (one averaged run)"], "pid": [PID], "tid": [TID],
                 "ts_ns": [0], "dur_ns": [span]})
    b.metadata["tool"] = "migraphx-driver perf"
    b.metadata["migraphx"] = _figures(rep)
    b.warn(_SYNTHETIC, rep.count)
    if untimed:
        b.warn("instructions without a time (nan: not run during the timed runs), given 0 ns", untimed)
    if rep.broken:
        b.warn("instruction lines whose timing does not read (skipped; the totals no longer add up)", len(rep.broken))
    if rep.bad_totals:
        b.warn(f"report lines that do not read (left out): {', '.join(sorted(set(rep.bad_totals)))}",
               len(rep.bad_totals))
    if ungrouped:
        b.warn("instructions whose Summary group could not be told (named by their op)", ungrouped)
    if submodules:
        b.warn(SUBMODULE_WARNING, submodules)
    for problem in _checks(b.metadata["migraphx"]):
        b.warn(problem)
    return b.finish()


def _checks(fig: dict[str, Any]) -> list[str]:
    """The report's own arithmetic (6 significant digits printed: 0.1% slack); a file edited or cut short fails it."""
    out = []
    total = fig.get("total_instructions_time_ms")
    summed = fig["sum_instructions_ms"]
    if total is not None and summed is not None and not math.isclose(summed, total, rel_tol=1e-3, abs_tol=1e-9):
        out.append(f"the instruction lines add up to {fig['sum_instructions_ms']:g} ms, not the Total instructions "
                   f"time of {total:g} ms")
    rate, computed = fig.get("rate_per_s"), fig.get("rate_computed_per_s")
    if rate is not None and computed is not None and not math.isclose(rate, computed, rel_tol=1e-3):
        out.append(f"Rate {rate:g}/s is not 1000 / Total time x batch ({computed:.6g}/s)")
    return out


def _figures(rep: PerfReport) -> dict[str, Any]:
    """The report's own figures (ms as printed), plus the sums opscope checks them against."""
    out: dict[str, Any] = {"version": rep.version, "command": rep.command, "instructions": rep.count}
    tot = rep.totals
    if "batch" in tot:
        out["batch_size"] = int64(tot["batch"][0])
    if "rate" in tot:
        out["rate_per_s"] = tot["rate"][0]
    if "total" in tot:
        out["total_time_ms"] = tot["total"][0]
        if len(tot["total"]) == 5:
            out.update(zip(("min_ms", "max_ms", "mean_ms", "median_ms"), tot["total"][1:]))
    if "percentiles" in tot:
        out.update(zip(("p90_ms", "p95_ms", "p99_ms"), tot["percentiles"]))
    if "instructions" in tot:
        out["total_instructions_time_ms"] = tot["instructions"][0]
    if "overhead" in tot:
        out["overhead_time_ms"], out["overhead_calculated_ms"] = tot["overhead"]
    if "overhead_pct" in tot:
        out["overhead_pct"], out["overhead_calculated_pct"] = tot["overhead_pct"]
    try:
        out["sum_instructions_ms"] = float(f"{math.fsum(ms for ms in rep.times_ms if math.isfinite(ms)):.12g}")
    except OverflowError:  # finite times whose sum is not (1e308ms twice)
        out["sum_instructions_ms"] = None
    if "total" in tot and tot["total"][0] > 0:
        out["rate_computed_per_s"] = 1000.0 / tot["total"][0] * (out.get("batch_size") or 1)
    out["summary"] = rep.summary
    return out
