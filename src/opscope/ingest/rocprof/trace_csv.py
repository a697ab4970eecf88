"""rocprof's per-record CSV files: kernel dispatch tables (every generation) and rocprofv3's trace CSVs.

**Dispatch tables**: one row per kernel dispatch, sniffed by a kernel-name column beside a dispatch-id column.
rocprof v1 ``results.csv`` (``Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,vgpr,sgpr,
fbar,sig,obj,DispatchNs,BeginNs,EndNs,CompleteNs``), rocprofv2 and rocprof-compute (omniperf)'s
``timestamps.csv``, ``pmc_perf.csv``, ``pmc_perf_N.csv``, ``SQ_*.csv`` (``Dispatch_ID,Kernel_Name,GPU_ID,...,
Start_Timestamp,End_Timestamp``), rocprofv3's ``*_kernel_trace.csv`` (``"Kind","Agent_Id","Queue_Id",
"Stream_Id",...,"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp",...``). Columns are matched by
name whatever their spelling (``Kernel_Name``/``KernelName``). Each row is a ``kernel`` on its GPU (``gpu-id``,
``GPU_ID`` or ``Agent_Id``), its stream the HIP stream where the file has one, else the queue; grid, workgroup,
registers, LDS, scratch and the other descriptive columns go to the event's args. Every other numeric column
is a hardware counter (rocprof-compute's 1,000-2,700 of them): a row of the ``counters`` table per dispatch
and counter, ``name`` the counter, ``series`` ``dispatch <id>``, at the dispatch's start. (Not args: a
dispatch's counters would be a 50 KB JSON object per kernel that SQL cannot reach; in ``counters`` they are
``SELECT name, value FROM counters WHERE series = 'dispatch 3'``.)

Times: ns as integers. rocprof-compute on MI300 writes ``1.62068E+14`` (6 significant digits, start == end):
such a time is not a time to the ns, so the kernel keeps the rounded start, a duration of 0 and
``duration_unknown`` in its args, and a warning says so — never a duration computed from rounded ends.

**rocprofv3 trace CSVs** (``*_hip_api_trace.csv``/``*_hsa_api_trace.csv``/``*_marker_api_trace.csv``:
``"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"``;
``*_memory_copy_trace.csv``: ``"Kind","Direction","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",
"Start_Timestamp","End_Timestamp"``): API calls -> ``runtime``, roctx ranges -> ``user_annotation`` (marks,
start == end, -> ``marker``), copies -> ``memcpy`` on the GPU side. One run's files are meant to be read
together (the correlation ids link a kernel to its ``hipLaunchKernel``), so opening one of them reads the
others of the same run too: the files beside it named ``<same prefix><kind>_trace.csv``, each checked by its
header; ``metadata.files`` lists them and a warning says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opscope.model.trace import Trace

FORMAT = "rocprof_csv"

# Column keys (lower case, letters and digits only) by role.
_NAME = ("kernelname",)
_DISPATCH = ("dispatchid", "index")
_DEVICE = ("gpuid", "agentid")
_QUEUE = ("queueid",)
_STREAM = ("streamid",)
_PID = ("pid", "processid")
_TID = ("tid", "threadid")
_CORRELATION = ("correlationid",)
_START = ("beginns", "starttimestamp")
_END = ("endns", "endtimestamp")
#: Descriptive columns of a dispatch (args, never counters).
_DESCRIPTIVE = {
    "kind", "guid", "queueindex", "grd", "wgr", "lds", "scr", "vgpr", "sgpr", "fbar", "archvgpr", "accumvgpr",
    "wavesize", "sig", "obj", "dispatchns", "completens", "durationns", "gridsize", "gridsizex", "gridsizey",
    "gridsizez", "workgroupsize", "workgroupsizex", "workgroupsizey", "workgroupsizez", "ldsperworkgroup",
    "scratchperworkitem", "ldsblocksize", "scratchsize", "vgprcount", "accumvgprcount", "sgprcount", "kernelid",
    "privatesegmentsize", "groupsegmentsize", "node", "nodeid", "correlationid", "xccindex",
}
_ROLES = (*_NAME, *_DISPATCH, *_DEVICE, *_QUEUE, *_STREAM, *_PID, *_TID, *_CORRELATION, *_START, *_END)
_IDENTITY = set(_ROLES) | _DESCRIPTIVE
#: rocprof marks a kernel's descriptor symbol: ``vecCopy(...) [clone .kd]``, ``vecCopy(...) (.kd)``, ``f.kd``.
_KD_SUFFIX = re.compile(r"(?:\s*\[clone \.kd\]|\s*\(\.kd\)|\.kd)$")
_V3_SIBLING = re.compile(r"^(?P<prefix>.*?)(?P<kind>kernel|hip_api|hsa_api|marker_api|memory_copy|rccl_api)"
                         r"_trace\.csv(?P<gz>\.gz)?$")
_SIBLING_KINDS = ("kernel", "hip_api", "hsa_api", "marker_api", "memory_copy", "rccl_api")


def _keys(line: str) -> list[str]:
    return [re.sub(r"[^a-z0-9]", "", c.lower()) for c in line.split(",")]


def classify(head: bytes) -> str | None:
    """What a CSV's header says it is: ``dispatch``, ``counter_collection``, ``api``, ``memcpy`` or None."""
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if "," not in first or len(first) > 100_000:
        return None
    keys = _keys(first)
    have = set(keys)
    if "starttimestamp" in have and keys[:2] == ["domain", "function"]:
        return "api"
    if "starttimestamp" in have and keys[:2] == ["kind", "direction"]:
        return "memcpy"
    if "kernelname" in have and have & {"dispatchid", "index"}:
        return "counter_collection" if {"countername", "countervalue"} <= have else "dispatch"
    if keys[:2] == ["index", "kernelname"] or (keys[:2] == ["guid", "kind"] and "kernelname" in have):
        return "dispatch"
    return None


class RocprofCsvReader:
    """rocprof's per-record CSVs (dispatch tables, rocprofv3 traces), sniffed by their header."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        return classify(head) is not None

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.registry import read_head
        from opscope.model.builder import TraceBuilder

        builder = TraceBuilder(str(path), FORMAT)
        kind = classify(read_head(path))
        files = [(path, kind)]
        m = _V3_SIBLING.match(path.name)
        if m and kind in ("dispatch", "api", "memcpy"):
            for other in _SIBLING_KINDS:
                if other == m.group("kind"):
                    continue
                sibling = path.with_name(f"{m.group('prefix')}{other}_trace.csv{m.group('gz') or ''}")
                if sibling.is_file():
                    try:
                        sibling_kind = classify(read_head(sibling))
                    except OSError:
                        sibling_kind = None
                    if sibling_kind in ("dispatch", "api", "memcpy"):
                        files.append((sibling, sibling_kind))
        reader = _Reader(builder, keep_args)
        for i, (file, file_kind) in enumerate(files):
            reader.read_file(file, file_kind or "", main=i == 0)
        builder.metadata["tool"] = reader.tool
        builder.metadata["process_names"] = reader.process_names
        builder.metadata["thread_names"] = {}
        builder.metadata["device_properties"] = []
        if len(files) > 1:
            builder.metadata["files"] = [str(f) for f, _ in files]
            builder.warn("read together with the other rocprofv3 files of the same run beside it: "
                         + ", ".join(f.name for f, _ in files[1:]))
        trace = builder.finish()
        if trace.events.num_rows == 0:
            from opscope.errors import TraceError

            raise TraceError(path, "holds no records with usable times", "the CSV has a header and no data rows")
        return trace


READER = RocprofCsvReader()


class _Reader:
    def __init__(self, builder, keep_args: bool) -> None:
        self.builder = builder
        self.keep_args = keep_args
        self.tool = "rocprof"
        self.process_names: dict[str, str] = {}

    def read_file(self, path: Path, kind: str, main: bool) -> None:
        from opscope.errors import TraceError
        from opscope.ingest.rocprof.csv_table import key, open_table

        if kind == "counter_collection":
            raise TraceError(path, "is a rocprofv3 counter_collection.csv (counters per dispatch, no times): "
                             "not read yet", "open the kernel_trace.csv of the same run for the kernels")
        head = read_head_keys(path)
        name_col = next((i for i, k in enumerate(head) if k in ("kernelname", "function")), None)
        stream = open_table(path, name_col)
        header = stream.table.header
        cols: dict[str, int] = {}
        for i, h in enumerate(header):
            cols.setdefault(key(h), i)
        has_start, has_end = any(k in cols for k in _START), any(k in cols for k in _END)
        if (has_start != has_end) or (kind != "dispatch" and not has_start):
            missing = "end" if has_start else "start"
            raise TraceError(path, f"has no {missing} time column (Start_Timestamp/BeginNs, End_Timestamp/EndNs)",
                             "is it cut or from another tool?")
        if "agentid" in cols or "kind" in cols or kind in ("api", "memcpy"):
            self.tool = "rocprofv3"
        where = "" if main else f"{path.name}: "
        self._file = f = _FileState()
        for rows in stream.chunks():
            chunk = _Chunk(path, header, rows, f.rows)
            if kind == "dispatch":
                self._dispatches(chunk, cols)
            elif kind == "api":
                self._api(chunk, cols)
            elif kind == "memcpy":
                self._copies(chunk, cols)
            f.rows += len(rows)
        stream.table.warn_into(lambda problem, count=1: self.builder.warn(where + problem, count))
        if f.untimed:
            self.builder.warn(f"{where}no start/end time columns: dispatches placed in file order, 1 ns apart, "
                              "with duration 0 (times unknown)", f.untimed)
        if f.coarse:
            self.builder.warn(f"{where}start/end times rounded by the writer (to multiples of {f.worst:,} ns, "
                              f"e.g. {f.example!r}): those kernels' durations are unknown (0 here, "
                              "args.duration_unknown) and their starts approximate", f.coarse)

    # -- helpers --------------------------------------------------------------------------------------
    def _column(self, table, cols: dict[str, int], names: tuple[str, ...]) -> list[str] | None:
        for n in names:
            if n in cols:
                i = cols[n]
                return [r[i] for r in table.rows]
        return None

    def _times(self, table, cols):
        """(ts, dur, unknown) per row: exact ns, or the rounded start, 0 and True where the file rounded."""
        from opscope.ingest.rocprof.csv_table import time_ns

        starts = self._column(table, cols, _START)
        ends = self._column(table, cols, _END)
        n = len(table.rows)
        f = self._file
        if starts is None or ends is None:  # a dispatch table without times (checked in read_file)
            f.untimed += n
            return list(range(table.base, table.base + n)), [0] * n, [True] * n
        ts: list[int | None] = []
        dur: list[int | None] = []
        unknown: list[bool] = []
        for s_text, e_text in zip(starts, ends):
            s, rs = time_ns(s_text)
            e, re_ = time_ns(e_text)
            if s is None or e is None:
                ts.append(None)
                dur.append(None)  # dropped by the builder, counted under its bad-time warning
                unknown.append(False)
            elif rs > 1 or re_ > 1:
                if not f.coarse:
                    f.example = s_text.strip() if rs > 1 else e_text.strip()
                f.coarse += 1
                f.worst = max(f.worst, rs, re_)
                ts.append(s)
                dur.append(0)
                unknown.append(True)
            else:
                ts.append(s)
                dur.append(e - s)
                unknown.append(False)
        return ts, dur, unknown

    def _ids(self, values: list[str] | None, n: int, prefix: str = "") -> list[str]:
        if values is None:
            return [prefix] * n if prefix else [""] * n
        return [f"{prefix}{v.strip()}" if prefix else v.strip() for v in values]

    def _args(self, rows: list[dict[str, Any]]) -> list[str] | None:
        if not self.keep_args:
            return None
        import msgspec

        return [msgspec.json.encode(r).decode() for r in rows]

    # -- kinds of file ----------------------------------------------------------------------------------
    def _dispatches(self, table, cols: dict[str, int]) -> None:
        from opscope.ingest.rocprof.csv_table import as_float, as_int, key

        n = len(table.rows)
        ts, dur, unknown = self._times(table, cols)
        names = [_KD_SUFFIX.sub("", v.strip()) for v in self._column(table, cols, _NAME) or [""] * n]
        device = [_agent(v) for v in self._column(table, cols, _DEVICE) or [""] * n]
        queue = [as_int(v) for v in self._column(table, cols, _QUEUE) or [""] * n]
        stream_col = self._column(table, cols, _STREAM)
        stream = [as_int(v) for v in stream_col] if stream_col is not None else queue
        dispatch = self._column(table, cols, _DISPATCH) or [str(table.base + i) for i in range(n)]
        correlation = [as_int(v) or None for v in self._column(table, cols, _CORRELATION) or [""] * n]
        pids = self._ids(self._column(table, cols, _PID), n)
        header = table.header
        descriptive = [i for i, h in enumerate(header) if key(h) in _DESCRIPTIVE or key(h) in _QUEUE]
        counter_cols = self._file.counter_cols
        if counter_cols is None:  # decided on the first chunk: later non-numbers are skipped one by one
            counter_cols = self._file.counter_cols = []
            for i, h in enumerate(header):
                k = key(h)
                base = key(re.sub(r"_\d+$", "", h))
                if k in _IDENTITY or base in _IDENTITY:
                    continue  # rocprof-compute repeats each pass's identity columns as obj_1, Correlation_ID_3...
                values = [r[i] for r in table.rows]
                if all(as_float(v) is not None for v in values if v.strip()) and any(v.strip() for v in values):
                    counter_cols.append(i)
        args = []
        for r, row in enumerate(table.rows):
            a: dict[str, Any] = {"dispatch_id": as_int(dispatch[r]) if as_int(dispatch[r]) is not None
                                 else dispatch[r]}
            if queue[r] is not None:
                a["queue"] = queue[r]
            for i in descriptive:
                v = row[i].strip()
                iv = as_int(v)
                a[header[i]] = iv if iv is not None and not v.lower().startswith("0x") else v
            if unknown[r]:
                a["duration_unknown"] = True
            args.append(a)
        gpu_pids = [f"GPU {d}" if d is not None else "GPU" for d in device]
        for p in set(gpu_pids):
            self.process_names[p] = p
        self.builder.add_events({
            "kind": ["kernel"] * n, "name": names, "ts_ns": ts, "dur_ns": dur, "pid": gpu_pids,
            "tid": [f"stream {s}" if s is not None else "" for s in stream], "device": device, "stream": stream,
            "correlation": correlation, "cat": ["kernel"] * n,
        }, self._args(args))
        if counter_cols:
            self._counters(table, counter_cols, dispatch, ts, pids)

    def _counters(self, table, counter_cols: list[int], dispatch: list[str], ts: list, pids: list[str]) -> None:
        from opscope.ingest.rocprof.csv_table import as_float

        header = table.header
        c: dict[str, list] = {"name": [], "series": [], "ts_ns": [], "pid": [], "value": []}
        kept = 0
        for r, row in enumerate(table.rows):
            if ts[r] is None:
                continue
            series = f"dispatch {dispatch[r].strip()}"
            for i in counter_cols:
                v = as_float(row[i])
                if v is None:
                    continue
                c["name"].append(header[i])
                c["series"].append(series)
                c["ts_ns"].append(ts[r])
                c["pid"].append(pids[r])
                c["value"].append(v)
                kept += 1
            if len(c["name"]) >= 200_000:
                self.builder.add_counters(c)
                c = {k: [] for k in c}
        if c["name"]:
            self.builder.add_counters(c)
        self.counters = kept

    def _api(self, table, cols: dict[str, int]) -> None:
        n = len(table.rows)
        ts, dur, _ = self._times(table, cols)
        domain = self._column(table, cols, ("domain",)) or [""] * n
        function = self._column(table, cols, ("function",)) or [""] * n
        from opscope.ingest.rocprof.csv_table import as_int

        kinds = []
        for d, t, du in zip(domain, ts, dur):
            if "MARKER" in d.upper():
                kinds.append("marker" if du == 0 and t is not None else "user_annotation")
            else:
                kinds.append("runtime")
        pids = self._ids(self._column(table, cols, _PID), n)
        for p in set(pids):
            self.process_names.setdefault(p, f"process {p}" if p else "host")
        correlation = [as_int(v) or None for v in self._column(table, cols, _CORRELATION) or [""] * n]
        args = [{"domain": d.strip()} for d in domain]
        self.builder.add_events({
            "kind": kinds, "name": [f.strip() for f in function], "ts_ns": ts, "dur_ns": dur, "pid": pids,
            "tid": self._ids(self._column(table, cols, _TID), n), "correlation": correlation,
            "cat": [d.strip() for d in domain],
        }, self._args(args))

    def _copies(self, table, cols: dict[str, int]) -> None:
        from opscope.ingest.rocprof.csv_table import as_int

        n = len(table.rows)
        ts, dur, _ = self._times(table, cols)
        direction = [v.strip().upper() for v in self._column(table, cols, ("direction",)) or [""] * n]
        src = [_agent(v) for v in self._column(table, cols, ("sourceagentid",)) or [""] * n]
        dst = [_agent(v) for v in self._column(table, cols, ("destinationagentid",)) or [""] * n]
        device = [d if dr.startswith("HOST_TO") else s for dr, s, d in zip(direction, src, dst)]
        stream_col = self._column(table, cols, _STREAM)
        stream = [as_int(v) for v in stream_col] if stream_col is not None else [-1] * n
        correlation = [as_int(v) or None for v in self._column(table, cols, _CORRELATION) or [""] * n]
        size = self._column(table, cols, ("bytes", "size", "copybytes"))
        args = []
        for r in range(n):
            a: dict[str, Any] = {"direction": direction[r], "source_agent": src[r], "destination_agent": dst[r]}
            if size is not None and as_int(size[r]) is not None:
                a["bytes"] = as_int(size[r])
            args.append(a)
        gpu_pids = [f"GPU {d}" if d is not None else "GPU" for d in device]
        for p in set(gpu_pids):
            self.process_names[p] = p
        self.builder.add_events({
            "kind": ["memcpy"] * n, "name": [f"MEMORY_COPY_{d}" for d in direction], "ts_ns": ts, "dur_ns": dur,
            "pid": gpu_pids, "tid": [f"stream {s}" for s in stream], "device": device, "stream": stream,
            "correlation": correlation, "cat": ["memcpy"] * n,
        }, self._args(args))


@dataclass
class _FileState:
    """What one file's chunks add up to, said once the file is read."""

    rows: int = 0
    coarse: int = 0
    worst: int = 1
    example: str = ""
    untimed: int = 0
    counter_cols: list[int] | None = None


class _Chunk:
    """Rows of one file, ``base`` the index of the first in the file."""

    def __init__(self, path: Path, header: list[str], rows: list[list[str]], base: int) -> None:
        self.path, self.header, self.rows, self.base = path, header, rows, base


def _agent(text: str) -> int | None:
    """``Agent 7`` (rocprofv3 with --agent-index) or a bare number -> 7."""
    m = re.search(r"-?\d+", text or "")
    return int(m.group()) if m else None


def read_head_keys(path: Path) -> list[str]:
    from opscope.ingest.registry import read_head

    first = read_head(path).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
    return _keys(first.strip())
