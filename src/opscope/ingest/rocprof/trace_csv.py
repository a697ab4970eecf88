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
#: Below this many rows in a block, counters are converted value by value (wide rocprof-compute files).
_FEW = 256
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
        from opscope.model.builder import TraceBuilder, fast_type_inference

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
        with fast_type_inference():  # thousands of small Arrow calls on a wide rocprof-compute file
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
        from opscope.ingest.rocprof.csv_table import ArrowTableStream, key

        if kind == "counter_collection":
            raise TraceError(path, "is a rocprofv3 counter_collection.csv (counters per dispatch, no times): "
                             "not read yet", "open the kernel_trace.csv of the same run for the kernels")
        head = read_head_keys(path)
        name_col = next((i for i, k in enumerate(head) if k in ("kernelname", "function")), None)
        stream = ArrowTableStream(path, name_col)
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
        for columns in stream.batches():
            chunk = _Chunk(path, header, columns, f.rows)
            if kind == "dispatch":
                self._dispatches(chunk, cols)
            elif kind == "api":
                self._api(chunk, cols)
            elif kind == "memcpy":
                self._copies(chunk, cols)
            f.rows += chunk.n
        stream.table.warn_into(lambda problem, count=1: self.builder.warn(where + problem, count))
        if f.untimed:
            self.builder.warn(f"{where}no start/end time columns: dispatches placed in file order, 1 ns apart, "
                              "with duration 0 (times unknown)", f.untimed)
        if f.coarse:
            self.builder.warn(f"{where}start/end times rounded by the writer (to multiples of {f.worst:,} ns, "
                              f"e.g. {f.example!r}): those kernels' durations are unknown (0 here, "
                              "args.duration_unknown) and their starts approximate", f.coarse)

    # -- helpers --------------------------------------------------------------------------------------
    def _column(self, table, cols: dict[str, int], names: tuple[str, ...]):
        """The first of ``names`` that the file has, as a trimmed string array; None if it has none."""
        for n in names:
            if n in cols:
                return _strings(table.columns[cols[n]])
        return None

    def _times(self, table, cols):
        """(ts, dur, unknown) arrays: exact ns; the rounded start, 0 and True where the writer rounded; null where
        a time is no number (the builder drops and counts those rows)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from opscope.ingest.rocprof.csv_table import time_ns
        from opscope.model.ranges import arange

        starts = self._column(table, cols, _START)
        ends = self._column(table, cols, _END)
        n = table.n
        f = self._file
        if starts is None or ends is None:  # a dispatch table without times (checked in read_file)
            f.untimed += n
            return (arange(table.base, table.base + n), pa.array([0] * n, pa.int64()),
                    pa.array([True] * n))
        try:  # the usual case: integer ns
            s, e = pc.cast(starts, pa.int64()), pc.cast(ends, pa.int64())
            return s, pc.subtract(e, s), pa.array([False] * n)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        ts: list[int | None] = []
        dur: list[int | None] = []
        unknown: list[bool] = []
        for s_text, e_text in zip(starts.to_pylist(), ends.to_pylist()):
            s_ns, rs = time_ns(s_text or "")
            e_ns, re_ = time_ns(e_text or "")
            if s_ns is None or e_ns is None:
                ts.append(None)
                dur.append(None)
                unknown.append(False)
            elif rs > 1 or re_ > 1:
                if not f.coarse:
                    f.example = s_text if rs > 1 else e_text
                f.coarse += 1
                f.worst = max(f.worst, rs, re_)
                ts.append(s_ns)
                dur.append(0)
                unknown.append(True)
            else:
                ts.append(s_ns)
                dur.append(e_ns - s_ns)
                unknown.append(False)
        return pa.array(ts, pa.int64()), pa.array(dur, pa.int64()), pa.array(unknown)

    def _args(self, fields: list[tuple[str, object]], extra=None):
        """Each row's args as JSON text, joined column-wise: ``fields`` are (key, JSON-text array)."""
        if not self.keep_args:
            return None
        import msgspec
        import pyarrow as pa
        import pyarrow.compute as pc

        parts: list = []
        for i, (label, values) in enumerate(fields):
            parts.append(pa.scalar(("{" if i == 0 else ",") + msgspec.json.encode(label).decode() + ":"))
            parts.append(pc.fill_null(values, "null"))
        if extra is not None:
            parts.append(extra)
        parts.append(pa.scalar("}"))
        return pc.binary_join_element_wise(*parts, "")

    # -- kinds of file ----------------------------------------------------------------------------------
    def _dispatches(self, table, cols: dict[str, int]) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        from opscope.ingest.rocprof.csv_table import as_float, key

        n = table.n
        ts, dur, unknown = self._times(table, cols)
        name_col = self._column(table, cols, _NAME)
        names = _per_unique(name_col, lambda v: _KD_SUFFIX.sub("", v), pa.string()) if name_col is not None \
            else pa.array([""] * n)
        device_col = self._column(table, cols, _DEVICE)
        device = _per_unique(device_col, _agent, pa.int64()) if device_col is not None else pa.nulls(n, pa.int64())
        queue_col = self._column(table, cols, _QUEUE)
        queue = _ints(queue_col) if queue_col is not None else pa.nulls(n, pa.int64())
        stream_col = self._column(table, cols, _STREAM)
        stream = _ints(stream_col) if stream_col is not None else queue
        dispatch = self._column(table, cols, _DISPATCH)
        if dispatch is None:
            dispatch = pa.array([str(table.base + i) for i in range(n)])
        correlation = _nonzero(self._column(table, cols, _CORRELATION), n)
        pids = self._column(table, cols, _PID)
        header = table.header
        counter_cols = self._file.counter_cols
        if counter_cols is None:  # decided on the first chunk: later non-numbers are skipped one by one
            counter_cols = self._file.counter_cols = []
            for i, h in enumerate(header):
                k = key(h)
                base = key(re.sub(r"_\d+$", "", h))
                if k in _IDENTITY or base in _IDENTITY:
                    continue  # rocprof-compute repeats each pass's identity columns as obj_1, Correlation_ID_3...
                if table.n <= _FEW:
                    texts = [v.strip() for v in table.columns[i].to_pylist()]
                    if any(texts) and all(as_float(v) is not None for v in texts if v):
                        counter_cols.append(i)
                    continue
                text = _strings(table.columns[i])
                filled = pc.sum(pc.cast(pc.not_equal(text, ""), pa.int64())).as_py() or 0
                if filled and _floats(text).null_count == table.n - filled:
                    counter_cols.append(i)
        gpu_pids = pc.if_else(pc.is_null(device), pa.scalar("GPU"),
                              pc.binary_join_element_wise(pa.scalar("GPU "), pc.cast(device, pa.string()), ""))
        for p in pc.unique(gpu_pids).to_pylist():
            self.process_names[p] = p
        args = None
        if self.keep_args:
            fields: list[tuple[str, object]] = [("dispatch_id", _json_values(dispatch)), ("queue", _json(queue))]
            seen = {"dispatch_id", "queue"}
            for i, h in enumerate(header):
                if (key(h) in _DESCRIPTIVE or key(h) in _QUEUE) and h not in seen:
                    seen.add(h)
                    fields.append((h, _json_values(_strings(table.columns[i]))))
            extra = None
            if pc.any(unknown).as_py():
                extra = pc.if_else(unknown, pa.scalar(',"duration_unknown":true'), pa.scalar(""))
            args = self._args(fields, extra)
        self.builder.add_events({
            "kind": pa.array(["kernel"] * n), "name": names, "ts_ns": ts, "dur_ns": dur, "pid": gpu_pids,
            "tid": pc.fill_null(pc.binary_join_element_wise(pa.scalar("stream "), pc.cast(stream, pa.string()), ""),
                                ""),
            "device": device, "stream": stream, "correlation": correlation, "cat": pa.array(["kernel"] * n),
        }, args)
        if counter_cols:
            self._counters(table, counter_cols, dispatch, ts, pids)

    def _counters(self, table, counter_cols: list[int], dispatch, ts, pids) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.n
        series = pc.binary_join_element_wise(pa.scalar("dispatch "), dispatch, "")
        pid = pids if pids is not None else pa.array([""] * n)
        parts: dict[str, list] = {"name": [], "series": [], "ts_ns": [], "pid": [], "value": []}
        size = 0
        if n <= _FEW:  # rocprof-compute: a few dispatches x thousands of counters, cheaper value by value
            self._few_counters(table, counter_cols, series, ts, pid)
            return
        for i in counter_cols:
            values = _floats(_strings(table.columns[i]))
            keep = pc.and_(pc.is_valid(values), pc.is_valid(ts))
            m = pc.sum(pc.cast(keep, pa.int64())).as_py() or 0
            if not m:
                continue
            parts["name"].append(pa.array([table.header[i]] * m))
            for column, arr in (("series", series), ("ts_ns", ts), ("pid", pid), ("value", values)):
                parts[column].append(pc.filter(arr, keep))
            size += m
            if size >= 200_000:
                self._add_counters(parts)
                size = 0
        self._add_counters(parts)

    def _few_counters(self, table, counter_cols: list[int], series, ts, pid) -> None:
        from opscope.ingest.rocprof.csv_table import as_float

        c: dict[str, list] = {"name": [], "series": [], "ts_ns": [], "pid": [], "value": []}
        rows = list(zip(series.to_pylist(), ts.to_pylist(), pid.to_pylist()))
        for i in counter_cols:
            name = table.header[i]
            for (s, t, p), text in zip(rows, table.columns[i].to_pylist()):
                v = as_float(text)
                if v is None or t is None:
                    continue
                c["name"].append(name)
                c["series"].append(s)
                c["ts_ns"].append(t)
                c["pid"].append(p)
                c["value"].append(v)
        if c["name"]:
            self.builder.add_counters(c)

    def _add_counters(self, parts: dict[str, list]) -> None:
        import pyarrow as pa

        if parts["name"]:
            self.builder.add_counters({k: pa.concat_arrays(v) for k, v in parts.items()})
        for v in parts.values():
            v.clear()

    def _api(self, table, cols: dict[str, int]) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.n
        ts, dur, _ = self._times(table, cols)
        domain = self._column(table, cols, ("domain",))
        if domain is None:
            domain = pa.array([""] * n)
        function = self._column(table, cols, ("function",))
        marker = pc.match_substring(pc.utf8_upper(domain), "MARKER")
        kinds = pc.if_else(marker, pc.if_else(pc.fill_null(pc.equal(dur, 0), False), pa.scalar("marker"),
                                              pa.scalar("user_annotation")), pa.scalar("runtime"))
        pids = self._column(table, cols, _PID)
        if pids is None:
            pids = pa.array([""] * n)
        for p in pc.unique(pids).to_pylist():
            self.process_names.setdefault(p, f"process {p}" if p else "host")
        tids = self._column(table, cols, _TID)
        self.builder.add_events({
            "kind": kinds, "name": function if function is not None else pa.array([""] * n), "ts_ns": ts,
            "dur_ns": dur, "pid": pids, "tid": tids if tids is not None else pa.array([""] * n),
            "correlation": _nonzero(self._column(table, cols, _CORRELATION), n), "cat": domain,
        }, self._args([("domain", _json_values(domain, numbers=False))]))

    def _copies(self, table, cols: dict[str, int]) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.n
        ts, dur, _ = self._times(table, cols)
        direction = self._column(table, cols, ("direction",))
        direction = pc.utf8_upper(direction) if direction is not None else pa.array([""] * n)
        src_col = self._column(table, cols, ("sourceagentid",))
        dst_col = self._column(table, cols, ("destinationagentid",))
        src = _per_unique(src_col, _agent, pa.int64()) if src_col is not None else pa.nulls(n, pa.int64())
        dst = _per_unique(dst_col, _agent, pa.int64()) if dst_col is not None else pa.nulls(n, pa.int64())
        device = pc.if_else(pc.starts_with(direction, "HOST_TO"), dst, src)
        stream_col = self._column(table, cols, _STREAM)
        stream = _ints(stream_col) if stream_col is not None else pa.array([-1] * n, pa.int64())
        gpu_pids = pc.if_else(pc.is_null(device), pa.scalar("GPU"),
                              pc.binary_join_element_wise(pa.scalar("GPU "), pc.cast(device, pa.string()), ""))
        for p in pc.unique(gpu_pids).to_pylist():
            self.process_names[p] = p
        fields: list[tuple[str, object]] = [("direction", _json_values(direction, numbers=False)),
                                            ("source_agent", _json(src)), ("destination_agent", _json(dst))]
        size = self._column(table, cols, ("bytes", "size", "copybytes"))
        if size is not None:
            fields.append(("bytes", _json(_ints(size))))
        self.builder.add_events({
            "kind": pa.array(["memcpy"] * n),
            "name": pc.binary_join_element_wise(pa.scalar("MEMORY_COPY_"), direction, ""), "ts_ns": ts,
            "dur_ns": dur, "pid": gpu_pids,
            "tid": pc.fill_null(pc.binary_join_element_wise(pa.scalar("stream "), pc.cast(stream, pa.string()), ""),
                                ""),
            "device": device, "stream": stream, "correlation": _nonzero(self._column(table, cols, _CORRELATION), n),
            "cat": pa.array(["memcpy"] * n),
        }, self._args(fields))


def _strings(values):
    """Text fields -> a trimmed string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(values, pa.Array):
        values = pa.array(values, pa.string())
    return pc.utf8_trim_whitespace(values)


def _per_unique(values, fn, type_):
    """``fn`` applied once per distinct value (kernel names, agent ids repeat: a few hundred distinct in a million)."""
    import pyarrow as pa

    encoded = values.dictionary_encode()
    mapped = pa.array([None if v is None else fn(v) for v in encoded.dictionary.to_pylist()], type_)
    return mapped.take(encoded.indices)


def _ints(values):
    """Integer text -> int64 (null where empty or not an integer), vectorized when the column is clean."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from opscope.ingest.rocprof.csv_table import as_int

    blank = pc.equal(values, "")
    try:
        return pc.cast(pc.if_else(blank, pa.scalar(None, pa.string()), values), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _per_unique(values, as_int, pa.int64())


def _floats(values):
    import pyarrow as pa
    import pyarrow.compute as pc

    from opscope.ingest.rocprof.csv_table import as_float

    blank = pc.equal(values, "")
    try:
        out = pc.cast(pc.if_else(blank, pa.scalar(None, pa.string()), values), pa.float64())
        return pc.if_else(pc.is_finite(out), out, pa.scalar(None, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _per_unique(values, as_float, pa.float64())


def _nonzero(values, n: int):
    """Correlation ids: 0 (rocprof-compute's "none") and non-integers are no id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if values is None:
        return pa.nulls(n, pa.int64())
    ids = _ints(values)
    return pc.if_else(pc.fill_null(pc.equal(ids, 0), True), pa.scalar(None, pa.int64()), ids)


def _json(values):
    """An int64 array as JSON text (null stays null: the args writer puts ``null``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(values, pa.string())


def _json_values(values, numbers: bool = True):
    """Text fields as JSON values: integers as numbers (``0x...`` stays text), everything else as JSON strings."""
    import msgspec
    import pyarrow as pa
    import pyarrow.compute as pc

    if numbers and not pc.any(pc.match_substring(values, "x", ignore_case=True)).as_py():  # Arrow reads 0x7f as hex
        try:
            return pc.cast(pc.cast(values, pa.int64()), pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass

    def one(v: str) -> str:
        if numbers and (v.isdigit() or (v[:1] == "-" and v[1:].isdigit())) and len(v) < 19:
            return str(int(v))
        return msgspec.json.encode(v).decode()

    return _per_unique(values, one, pa.string())


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
    """A block of one file's rows as string columns, ``base`` the index of its first row in the file."""

    def __init__(self, path: Path, header: list[str], columns: list, base: int) -> None:
        self.path, self.header, self.columns, self.base = path, header, columns, base
        self.n = len(columns[0]) if columns else 0


def _agent(text: str) -> int | None:
    """``Agent 7`` (rocprofv3 with --agent-index) or a bare number -> 7."""
    m = re.search(r"-?\d{1,18}(?!\d)", text or "")
    return int(m.group()) if m else None


def read_head_keys(path: Path) -> list[str]:
    from opscope.ingest.registry import read_head

    first = read_head(path).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
    return _keys(first.strip())
