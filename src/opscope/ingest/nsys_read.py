"""Reading an Nsight Systems SQLite export into the model; the mapping is described in :mod:`opscope.ingest.nsys`.

Each table is read with one SQL query, ``fetchmany`` batches of :data:`BATCH` rows turned into Arrow columns
(no per-row dicts); names are looked up in ``StringIds`` with Arrow (``index_in`` + ``take``), kernel args are
built as JSON by SQLite itself (``json_object``).
"""

# S608: the SQL is composed of this module's constants and of column names that PRAGMA table_info listed; the one
# name from the file itself (a table name from sqlite_master) goes through _quote.
# ruff: noqa: S608

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.errors import TraceError
from opscope.ingest.nsys import STEP_PATTERNS
from opscope.model.builder import TraceBuilder
from opscope.model.trace import Trace

BATCH = 100_000
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
MAPPED = (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, NVTX)
#: Tables that describe (names, enums, targets, export facts) rather than hold events: never warned about.
_LOOKUP_PREFIXES = ("ENUM_", "TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "StringIds", "ThreadNames",
                    "PROCESSES", "ProcessStreams", "ANALYSIS_", "UnwindMethodType", "sqlite_")
#: RUNTIME eventClass of CUDA backtrace rows: copies of real calls (nested around them), skipped.
BACKTRACE_CLASS = 67
_EVENT_CLASS = {0: "cuda runtime", 1: "cuda driver"}
#: CUPTI's memcpy kinds, in Kineto's spelling (``Memcpy HtoD (Pageable -> Device)``).
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD"}
#: nsys's ENUM_CUDA_MEM_KIND (used when the export has no such table, as 2.x exports do not).
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static", 7: "Unknown"}
#: CUPTI synchronization types, in Kineto's names for cuda_sync events.
SYNC_TYPES = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
NVTX_MARK, NVTX_THREAD_NAME, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN = 34, 39, 59, 60, 75
#: SQL for a globalTid/globalPid's process and thread ids.
_PID = "(({0} >> 24) & 16777215)"
_TID = "({0} & 16777215)"
#: TARGET_INFO_GPU column -> Kineto deviceProperties key.
_GPU_KEYS = {"id": "id", "name": "name", "totalMemory": "totalGlobalMem", "computeMajor": "computeMajor",
             "computeMinor": "computeMinor", "maxThreadsPerBlock": "maxThreadsPerBlock",
             "maxRegistersPerBlock": "regsPerBlock", "maxRegistersPerSm": "regsPerMultiprocessor",
             "threadsPerWarp": "warpSize", "maxShmemPerBlock": "sharedMemPerBlock",
             "maxShmemPerSm": "sharedMemPerMultiprocessor", "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
             "smCount": "numSms", "clockRate": "clockRate", "memoryBandwidth": "memoryBandwidth",
             "l2CacheSize": "l2CacheSize", "busLocation": "busLocation", "uuid": "uuid", "chipName": "chipName"}


def read(path: Path, *, progress: Callable[[int, int], None] | None = None, keep_args: bool = True) -> Trace:
    con = _connect(path)
    try:
        return _Reader(path, con, progress, keep_args).read()
    except sqlite3.Error as exc:
        raise TraceError(path, f"is a damaged SQLite database ({_short(exc)})", "export it again with nsys export") \
            from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        # SQLite columns take any type: text or a fraction where nsys writes integers is not an nsys export
        raise TraceError(path, f"holds a value of the wrong type in a table nsys writes integers to ({_short(exc)})",
                         "export it again with nsys export") from None
    finally:
        con.close()


def _connect(path: Path) -> sqlite3.Connection:
    """The database, read-only; a TraceError for gzip, truncation or anything SQLite cannot open."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc.strerror or exc})") from None
    if header[:2] == b"\x1f\x8b":
        raise TraceError(path, "is a gzip-compressed SQLite database", "gunzip it first: SQLite reads it uncompressed")
    if len(header) < 100:
        raise TraceError(path, "is truncated: shorter than an SQLite header (100 bytes)")
    page_size, = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    counter, pages, valid_for = struct.unpack(">I", header[24:28])[0], *struct.unpack(">I", header[28:32]), \
        struct.unpack(">I", header[92:96])[0]
    if counter == valid_for and pages and size < pages * page_size:
        # pages beyond the end would fail (or vanish) in the middle of a table: refuse the whole file
        raise TraceError(path, f"is truncated: its header says {pages * page_size:,} bytes, the file has {size:,}",
                         "copy or export it again")
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        con.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.Error as exc:
        raise TraceError(path, f"is not a readable SQLite database ({_short(exc)})") from None
    return con


def _short(exc: BaseException) -> str:
    """An exception's text on one line, cut (it may quote the file's own values)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def _repeat(value: str, n: int) -> pa.DictionaryArray:
    """``value`` n times, as a dictionary array (one string, n zero indices)."""
    return pa.DictionaryArray.from_arrays(pc.fill_null(pa.nulls(n, pa.int32()), 0), pa.array([value]))


def _encoded(values: pa.Array) -> pa.Array:
    return values if pa.types.is_dictionary(values.type) else values.dictionary_encode()


def _quote(name: str) -> str:
    """An SQL identifier for any table name (the file's own names are untrusted text)."""
    return '"' + name.replace('"', '""') + '"'


def _replace_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")  # trace text is untrusted: bad UTF-8 is replaced, never an error


class _Reader:
    def __init__(self, path: Path, con: sqlite3.Connection, progress: Callable[[int, int], None] | None,
                 keep_args: bool) -> None:
        self.path, self.con, self.progress, self.keep_args = path, con, progress, keep_args
        self.b = TraceBuilder(str(path), "nsys_sqlite")
        self.size = path.stat().st_size
        self.done = 0
        self.total = 1
        self.host_pids: set[int] = set()
        self.columns: dict[str, list[str]] = {}
        self.missing_names = 0

    # -- plumbing ------------------------------------------------------------------------------------------

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def batches(self, sql: str, text: bool = False) -> Iterator[list[tuple]]:
        self.con.text_factory = _replace_text if text else str
        cur = self.con.execute(sql)
        while rows := cur.fetchmany(BATCH):
            yield rows
            self.done += len(rows)
            if self.progress is not None:
                self.progress(min(self.size, self.size * self.done // self.total), self.size)

    def all(self, sql: str) -> list[tuple]:
        self.con.text_factory = _replace_text
        return self.con.execute(sql).fetchall()

    def count(self, table: str, where: str = "") -> int:
        return int(self.con.execute(f"SELECT COUNT(*) FROM {_quote(table)} {where}").fetchone()[0])

    # -- the read --------------------------------------------------------------------------------------------

    def read(self) -> Trace:
        tables = [r[0] for r in self.all("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            self.columns[t] = [r[1] for r in self.all(f"PRAGMA table_info({_quote(t)})")]
        activity = any(t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_")) for t in tables)
        if not activity:
            raise TraceError(self.path, "is an SQLite database but not an Nsight Systems export "
                             "(no CUPTI_ACTIVITY_KIND_* or TARGET_INFO_* tables)",
                             "opscope reads exports made by nsys export --type sqlite")
        if "StringIds" not in tables:
            raise TraceError(self.path, "is an Nsight Systems export without its StringIds table (names cannot be "
                             "resolved)", "export it again with nsys export --type sqlite")
        self.total = max(1, sum(self._rows_estimate(t) for t in (*MAPPED, "StringIds") if t in tables))
        self._strings()
        self.multi_process = self._multi_process()
        self._metadata()
        self._kernels()
        self._memcpy()
        self._memset()
        self._sync()
        self._runtime()
        self._nvtx()
        self._names()
        self._unmapped(tables)
        return self.b.finish()

    def _rows_estimate(self, table: str) -> int:
        try:
            row = self.con.execute(f"SELECT MAX(rowid) FROM {_quote(table)}").fetchone()  # O(log n), unlike COUNT(*)
        except sqlite3.Error:  # a WITHOUT ROWID table (never nsys's): no estimate, only the progress is cruder
            return 0
        return int(row[0]) if isinstance(row[0], int) else 0

    def _strings(self) -> None:
        ids: list[Any] = []
        values: list[Any] = []
        for rows in self.batches("SELECT id, value FROM StringIds", text=True):
            i, v = zip(*rows)
            ids.extend(i)
            values.extend(v)
        self.string_ids = pa.array(ids, pa.int64())
        self.string_values = pa.array([v if isinstance(v, str) else None for v in values], pa.string())

    def names(self, ids: Any, fallback: str = "") -> pa.Array:
        """StringIds values of ``ids`` as a dictionary array holding only the names used (``fallback`` where an id
        is null or not in the table, counted); no string is copied per row."""
        idx = pc.index_in(pa.array(ids, pa.int64()), value_set=self.string_ids)
        missing = idx.null_count
        if missing:
            self.missing_names += missing
        used = pc.unique(idx)  # a null among them stands for the missing ones
        values = pc.fill_null(self.string_values.take(used), fallback)
        return pa.DictionaryArray.from_arrays(pc.index_in(idx, value_set=used).cast(pa.int32()), values)

    def _multi_process(self) -> bool:
        """More than one process among the correlated rows: their correlation ids then get the pid prefixed."""
        pids: set[int] = set()
        for table, col in ((RUNTIME, "globalTid"), (KERNEL, "globalPid"), (MEMCPY, "globalPid")):
            if self.has(table, col) and self.has(table, "correlationId"):
                pids.update(r[0] for r in self.all(f"SELECT DISTINCT {_PID.format(col)} FROM {table}"))
                if len(pids) > 1:
                    return True
        return False

    def correlation(self, table: str, gcol: str) -> str:
        if not self.has(table, "correlationId"):
            return "NULL"
        if self.multi_process and self.has(table, gcol):
            return f"(({_PID.format(gcol)} << 32) | correlationId)"
        return "correlationId"

    def col(self, table: str, name: str, default: str = "NULL") -> str:
        return name if self.has(table, name) else default

    def device_cols(self, table: str) -> str:
        """SQL for a device row's device, stream and correlation (NULL for a column the table lacks)."""
        return f"{self.col(table, 'deviceId')}, {self.col(table, 'streamId')}, {self.correlation(table, 'globalPid')}"

    def device_args(self, table: str) -> list[tuple[str, str]]:
        return [("device", self.col(table, "deviceId")), ("stream", self.col(table, "streamId")),
                ("correlation", self.col(table, "correlationId"))]

    def _json(self, pairs: list[tuple[str, str]]) -> str:
        """``, json_object(...)`` of the (key, SQL expression) pairs, the last column of a query; nothing at all
        without args (one value less per row to fetch)."""
        if not self.keep_args:
            return ""
        return ", json_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"

    # -- device tables ---------------------------------------------------------------------------------------

    def _device(self, table: str, kind: str, cat: str, rows: list[tuple], names: pa.Array) -> None:
        """Add device rows: (start, end, device, stream, correlation, *_, args) with the names given."""
        cols = list(zip(*rows))
        start = pa.array(cols[0], pa.int64())
        device = pa.array(cols[2], pa.int64())
        stream = pa.array(cols[3], pa.int64())
        n = len(rows)
        self.b.add_events({
            "kind": _repeat(kind, n),
            "name": _encoded(names),
            "cat": _repeat(cat, n),
            "ts_ns": start,
            "dur_ns": pc.subtract(pa.array(cols[1], pa.int64()), start),
            "pid": pc.fill_null(device.cast(pa.string()), "").dictionary_encode(),
            "tid": pc.fill_null(stream.cast(pa.string()), "").dictionary_encode(),
            "device": device,
            "stream": stream,
            "correlation": pa.array(cols[4], pa.int64()),
        }, args=pa.array(cols[-1], pa.string()) if self.keep_args else None)

    def _kernels(self) -> None:
        t = KERNEL
        if not self.has(t):
            return
        name_cols = [c for c in ("demangledName", "shortName", "mangledName") if self.has(t, c)]
        name = (f"COALESCE({', '.join(name_cols)})" if len(name_cols) > 1 else name_cols[0]) if name_cols else "NULL"
        args = self.device_args(t)
        if all(self.has(t, c) for c in ("gridX", "gridY", "gridZ")):
            args.append(("grid", "json_array(gridX, gridY, gridZ)"))
        if all(self.has(t, c) for c in ("blockX", "blockY", "blockZ")):
            args.append(("block", "json_array(blockX, blockY, blockZ)"))
        if self.has(t, "registersPerThread"):
            args.append(("registers per thread", "registersPerThread"))
        shared = [c for c in ("staticSharedMemory", "dynamicSharedMemory") if self.has(t, c)]
        if shared:
            args.append(("shared memory", " + ".join(f"COALESCE({c}, 0)" for c in shared)))
            args += [(c, c) for c in shared]
        if self.has(t, "localMemoryTotal"):
            args.append(("local memory total", "localMemoryTotal"))
        sql = f"SELECT start, end, {self.device_cols(t)}, {name}{self._json(args)} FROM {t}"
        for rows in self.batches(sql):
            self._device(t, "kernel", "kernel", rows, self.names([r[5] for r in rows], "<kernel without a name>"))

    def _mem_kinds(self) -> dict[int, str]:
        if self.has("ENUM_CUDA_MEM_KIND", "label"):
            return {int(i): str(label) for i, label in self.all("SELECT id, label FROM ENUM_CUDA_MEM_KIND")}
        return MEM_KINDS

    def _memcpy(self) -> None:
        t = MEMCPY
        if not self.has(t):
            return
        mem = self._mem_kinds()
        copy_kind, src, dst = self.col(t, "copyKind"), self.col(t, "srcKind"), self.col(t, "dstKind")
        args = [*self.device_args(t), ("bytes", self.col(t, "bytes")),
                ("memory bandwidth (GB/s)", f"CASE WHEN end > start THEN {self.col(t, 'bytes')} * 1.0 / (end - start) "
                                            "END")]
        sql = (f"SELECT start, end, {self.device_cols(t)}, {copy_kind}, {src}, "
               f"{dst}{self._json(args)} FROM {t}")
        cache: dict[tuple, str] = {}
        for rows in self.batches(sql):
            names = []
            for r in rows:
                key = (r[5], r[6], r[7])
                name = cache.get(key)
                if name is None:
                    name = cache[key] = (f"Memcpy {COPY_KINDS.get(r[5], 'Unknown')} "
                                         f"({mem.get(r[6], 'Unknown')} -> {mem.get(r[7], 'Unknown')})")
                names.append(name)
            self._device(t, "memcpy", "gpu_memcpy", rows, pa.array(names, pa.string()))

    def _memset(self) -> None:
        t = MEMSET
        if not self.has(t):
            return
        mem = self._mem_kinds()
        args = [*self.device_args(t), ("bytes", self.col(t, "bytes")), ("value", self.col(t, "value"))]
        sql = f"SELECT start, end, {self.device_cols(t)}, {self.col(t, 'memKind')}{self._json(args)} FROM {t}"
        for rows in self.batches(sql):
            names = pa.array([f"Memset ({mem.get(r[5], 'Unknown')})" for r in rows], pa.string())
            self._device(t, "memset", "gpu_memset", rows, names)

    def _sync(self) -> None:
        t = SYNC
        if not self.has(t):
            return
        args = [*self.device_args(t), ("event", self.col(t, "eventId"))]
        # CUPTI writes 0xFFFFFFFF for "no stream/event" (a context sync): -1, as Kineto shows it
        stream = "CASE WHEN streamId = 4294967295 THEN -1 ELSE streamId END" if self.has(t, "streamId") else "NULL"
        sql = (f"SELECT start, end, {self.col(t, 'deviceId')}, {stream}, {self.correlation(t, 'globalPid')}, "
               f"{self.col(t, 'syncType')}{self._json(args)} FROM {t}")
        for rows in self.batches(sql):
            names = pa.array([SYNC_TYPES.get(r[5], "Unknown Sync") for r in rows], pa.string())
            self._device(t, "sync", "cuda_sync", rows, names)

    # -- host tables ------------------------------------------------------------------------------------------

    def _host(self, kind: str, cat: Any, rows_cols: list, names: pa.Array, correlation: Any, args: Any) -> None:
        start = pa.array(rows_cols[0], pa.int64())
        end = pa.array(rows_cols[1], pa.int64())
        pid = pa.array(rows_cols[2], pa.int64())  # (an Arrow array already: pa.array passes it through)
        self.host_pids.update(pc.unique(pid).drop_null().to_pylist())
        n = len(start)
        self.b.add_events({
            "kind": _repeat(kind, n),
            "name": _encoded(names),
            "cat": cat,
            "ts_ns": start,
            "dur_ns": pc.subtract(end, start),
            "pid": pc.fill_null(pid.cast(pa.string()), "").dictionary_encode(),
            "tid": pc.fill_null(pa.array(rows_cols[3], pa.int64()).cast(pa.string()), "").dictionary_encode(),
            "correlation": correlation,
        }, args=args)

    def _runtime(self) -> None:
        t = RUNTIME
        if not self.has(t):
            return
        where = ""
        if self.has(t, "eventClass"):
            skipped = self.count(t, f"WHERE eventClass = {BACKTRACE_CLASS}")
            if skipped:
                self.b.warn("nsys CUDA backtrace rows (RUNTIME eventClass 67, copies of the calls they surround; "
                            "skipped)", skipped)
            where = f"WHERE eventClass IS NOT {BACKTRACE_CLASS}"
        event_class = self.col(t, "eventClass")
        args = [("correlation", self.col(t, "correlationId")), ("event class", event_class),
                ("return value", self.col(t, "returnValue"))]
        name = self.col(t, "nameId")  # 2.x also has a text column "name", NULL in the files seen
        gtid = self.col(t, "globalTid", "0")
        sql = (f"SELECT start, end, {gtid}, {self.correlation(t, 'globalTid')}, {name}, {event_class}"
               f"{self._json(args)} FROM {t} {where}")
        for rows in self.batches(sql):
            cols = list(zip(*rows))
            g = pa.array(cols[2], pa.int64())
            cols[2:3] = [pc.bit_wise_and(pc.shift_right(g, 24), 0xFFFFFF), pc.bit_wise_and(g, 0xFFFFFF)]
            names = self.names(cols[5], "<runtime call without a name>")
            classes = pa.array(cols[6], pa.int64())
            cat = pa.DictionaryArray.from_arrays(  # driver (1); runtime (0) and any other class
                pc.fill_null(pc.index_in(classes, value_set=pa.array([0, 1])), 0).cast(pa.int32()),
                pa.array([_EVENT_CLASS[0], _EVENT_CLASS[1]]))
            self._host("runtime", cat, cols, names, pa.array(cols[4], pa.int64()),
                       pa.array(cols[7], pa.string()) if self.keep_args else None)

    def _nvtx(self) -> None:
        t = NVTX
        self.nvtx_thread_names: dict[str, str] = {}
        if not self.has(t) or not self.has(t, "eventType"):
            return
        if self.has(t, "text") and self.has(t, "textId"):
            text = "COALESCE(n.text, s.value)"
        elif self.has(t, "textId"):
            text = "s.value"
        else:
            text = self.col(t, "text")
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if self.has(t, "textId") else ""
        gtid = "n.globalTid" if self.has(t, "globalTid") else "0"
        domains = {}
        if self.has(t, "domainId"):
            domains = dict(self.all(f"SELECT n.domainId, {text} FROM {t} n {join} WHERE n.eventType = {NVTX_DOMAIN}"))
        for g, name in self.all(f"SELECT {gtid}, {text} FROM {t} n {join} WHERE n.eventType = {NVTX_THREAD_NAME}"):
            if g is not None and name:
                self.nvtx_thread_names[f"{(g >> 24) & 0xFFFFFF}/{g & 0xFFFFFF}"] = name
        domain = "n.domainId" if self.has(t, "domainId") else "NULL"
        open_ranges = 0
        steps: list[list[dict[str, Any]]] = [[] for _ in STEP_PATTERNS]
        sql = (f"SELECT n.start, COALESCE(n.end, n.start), {_PID.format(gtid)}, {_TID.format(gtid)}, {text}, "
               f"n.eventType, {domain}, n.end IS NULL FROM {t} n {join} "
               f"WHERE n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_MARK})")
        for rows in self.batches(sql, text=True):
            cols = list(zip(*rows))
            is_range = [e != NVTX_MARK for e in cols[5]]
            open_ranges += sum(1 for r, o in zip(is_range, cols[7]) if r and o)
            kinds = pa.array(["user_annotation" if r else "marker" for r in is_range], pa.string())
            names = pc.fill_null(pa.array(cols[4], pa.string()), "<NVTX range without text>")
            cat = pa.array(["nvtx" if d is None else f"nvtx:{domains.get(d, d)}" for d in cols[6]],
                           pa.string()).dictionary_encode()
            args = None
            if self.keep_args:
                args = pa.array([f'{{"nvtx event type": {e}, "domain": {d if d is not None else "null"}}}'
                                 for e, d in zip(cols[5], cols[6])], pa.string())
            start = pa.array(cols[0], pa.int64())
            n = len(rows)
            self.host_pids.update(p for p in set(cols[2]) if p is not None)
            self.b.add_events({
                "kind": kinds.dictionary_encode(), "name": names.dictionary_encode(), "cat": cat,
                "ts_ns": start, "dur_ns": pc.subtract(pa.array(cols[1], pa.int64()), start),
                "pid": pc.fill_null(pa.array(cols[2], pa.int64()).cast(pa.string()), "").dictionary_encode(),
                "tid": pc.fill_null(pa.array(cols[3], pa.int64()).cast(pa.string()), "").dictionary_encode(),
                "correlation": pa.nulls(n, pa.int64()),
            }, args=args)
            # the patterns run once per distinct text, not once per range
            family = {}
            for text in set(cols[4]):
                for i, pattern in enumerate(STEP_PATTERNS):
                    if text and (m := pattern.match(text)):
                        family[text] = (i, int(m.group(1)))
                        break
            if family:
                for j, (text, r, o) in enumerate(zip(cols[4], is_range, cols[7])):
                    if r and not o and text in family:
                        i, number = family[text]
                        steps[i].append({"step": number, "name": text, "pid": str(cols[2][j]), "tid": str(cols[3][j]),
                                         "ts_ns": cols[0][j], "dur_ns": cols[1][j] - cols[0][j]})
        if open_ranges:
            self.b.warn("NVTX ranges never closed (kept with no duration)", open_ranges)
        others = self.all(f"SELECT eventType, COUNT(*) FROM {t} WHERE eventType NOT IN "
                          f"({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_MARK}, {NVTX_THREAD_NAME}, {NVTX_DOMAIN}) "
                          "GROUP BY eventType")
        for event_type, n in others:
            self.b.warn(f"NVTX events of type {event_type} (not read)", int(n))
        for found in steps:
            if found:  # the first family with any range is the trace's steps (others stay annotations)
                self.b.add_steps({k: [s[k] for s in found] for k in ("step", "name", "pid", "tid", "ts_ns", "dur_ns")})
                break

    # -- names, devices, metadata --------------------------------------------------------------------------

    def _names(self) -> None:
        threads: dict[str, str] = {}
        if self.has("ThreadNames", "globalTid") and self.has("ThreadNames", "nameId"):
            prio = "t.priority" if self.has("ThreadNames", "priority") else "0"
            for g, name in self.all(f"SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s "
                                    f"ON s.id = t.nameId ORDER BY {prio}"):  # the highest priority last: it wins
                if g is not None and name:
                    threads[f"{(g >> 24) & 0xFFFFFF}/{g & 0xFFFFFF}"] = name
        threads.update(self.nvtx_thread_names)  # a name the program gave its thread (nvtxNameOsThread) wins
        self.b.metadata["thread_names"] = threads
        processes: dict[str, str] = {}
        if self.has("PROCESSES", "pid") and self.has("PROCESSES", "name") and self.host_pids:
            wanted = ", ".join(str(int(p)) for p in sorted(self.host_pids))
            for pid, name in self.all(f"SELECT pid, name FROM PROCESSES WHERE pid IN ({wanted})"):
                if name:
                    processes[str(pid)] = name
        self.b.metadata["process_names"] = processes
        if self.missing_names:
            self.b.warn("names whose id is not in StringIds (named by their kind)", self.missing_names)

    def _metadata(self) -> None:
        meta = self.b.metadata
        export: dict[str, str] = {}
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table, "name") and self.has(table, "value"):
                export.update({str(k): str(v) for k, v in self.all(f"SELECT name, value FROM {table}")})
        version = export.get("EXPORT_PRODUCT_VERSION")
        meta["tool"] = f"Nsight Systems {version}" if version else "Nsight Systems"
        meta["nsys_export"] = export
        if self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            row = self.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            meta["session_start_utc_ns"] = row[0] if row else None
        gpus = []
        if self.has("TARGET_INFO_GPU"):
            cur = self.con.execute("SELECT * FROM TARGET_INFO_GPU")
            names = [d[0] for d in cur.description]
            for row in cur.fetchall():
                raw = dict(zip(names, row))
                props: dict[str, Any] = {_GPU_KEYS[k]: v for k, v in raw.items() if k in _GPU_KEYS and v is not None}
                if raw.get("maxWarpsPerSm") is not None and raw.get("threadsPerWarp") is not None:
                    props["maxThreadsPerMultiprocessor"] = raw["maxWarpsPerSm"] * raw["threadsPerWarp"]
                gpus.append(props)
        gpus.sort(key=lambda p: (p.get("id") is None, p.get("id") or 0))
        meta["device_properties"] = gpus

    def _unmapped(self, tables: list[str]) -> None:
        """Warn, with row counts, for every table of events that holds rows and is not read."""
        for t in sorted(tables):
            if t in MAPPED or t.startswith(_LOOKUP_PREFIXES):
                continue
            n = self.count(t)
            if n:
                self.b.warn(f"nsys table {t} (not read)", n)
