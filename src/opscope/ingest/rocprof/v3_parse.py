"""Read rocprofv3 JSON (rocprofiler-sdk's ``rocprofiler-sdk-tool`` document) into the model, streaming.

The file is one JSON object, GBs for a long run: ``{"rocprofiler-sdk-tool": [{"metadata", "agents", "strings",
"kernel_symbols", ..., "buffer_records": {"kernel_dispatch": [...], "hip_api": [...], ...}}]}``. It is never decoded
whole: :class:`_Doc` walks the keys over a byte buffer, decodes the small values (metadata, agents, the name tables,
the kernel symbols) with msgspec, and hands each record array to the chunked array stream of the Chrome reader
(:class:`~opscope.ingest.chrome.json_stream.EventArrayStream`, which also recovers the complete records of a damaged
or truncated array), whose batches become Arrow columns at once. Names, devices and kinds are mapped on the arrays:
a kernel's name is ``kernel_symbols[kernel_id].formatted_kernel_name`` (demangled), an API call's name
``strings.buffer_records[kind].operations[operation]``, a device ``agents[].gpu_index`` of the record's agent.

Mapping: ``kernel_dispatch`` -> ``kernel`` (``comm`` for RCCL/NCCL/MSCCL kernels), ``memory_copy`` -> ``memcpy``,
``hip_api``/``hsa_api``/``rccl_api`` -> ``runtime``, ``marker_api`` -> ``user_annotation`` (named by the roctx
message where the file has it), ``memory_allocation`` -> memory records. A launch and its device work share
``correlation_id.internal``, the model's ``correlation``. Times are the file's integer nanoseconds. Every other
record kind is counted in the warnings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from opscope.errors import TraceError
from opscope.ingest.chrome import json_scan
from opscope.ingest.chrome.json_stream import EventArrayStream
from opscope.ingest.chrome.salvage import MAX_DEPTH, SalvageStats
from opscope.ingest.numbers import int64
from opscope.ingest.source import ByteSource
from opscope.model import Trace
from opscope.model.builder import TraceBuilder, fast_type_inference, int_array, safe_str

FORMAT = "rocprofv3_json"
TOOL = "rocprofv3"
_ROOT_KEY = "rocprofiler-sdk-tool"
_WS = b" \t\r\n"
_CHUNK = 4 << 20
#: Collective-communication kernels (RCCL, NCCL names in RCCL, MSCCL++) are the model's ``comm``.
_COMM = r"(?i)nccl|rccl|msccl"
#: Small values read whole (the rest of a process's keys are skipped: code objects, host functions, counters...).
_TABLES = ("metadata", "agents", "strings")
#: buffer_records arrays mapped to events, and the model kind of each.
_API_KINDS = {"hip_api": "runtime", "hsa_api": "runtime", "rccl_api": "runtime", "marker_api": "user_annotation"}
#: memory_copy operation names -> (Kineto-style direction, words): "Memcpy HtoD (Host -> Device)".
_COPY_NAMES = {
    "MEMORY_COPY_HOST_TO_HOST": "Memcpy HtoH (Host -> Host)",
    "MEMORY_COPY_HOST_TO_DEVICE": "Memcpy HtoD (Host -> Device)",
    "MEMORY_COPY_DEVICE_TO_HOST": "Memcpy DtoH (Device -> Host)",
    "MEMORY_COPY_DEVICE_TO_DEVICE": "Memcpy DtoD (Device -> Device)",
}
_PEER_COPY = "Memcpy PtoP (Device -> Peer)"
_GPU_AGENT = 2


# -- the records as msgspec decodes them (typed: a record of the wrong shape fails and is counted) --------------

class _Handle(msgspec.Struct, gc=False, frozen=True):
    handle: int = 0


class _Correlation(msgspec.Struct, gc=False, frozen=True):
    internal: int = 0
    external: int = 0


class _Dim3(msgspec.Struct, gc=False, frozen=True):
    x: int = 0
    y: int = 0
    z: int = 0


class _DispatchInfo(msgspec.Struct, gc=False):
    agent_id: _Handle
    kernel_id: int
    queue_id: _Handle = _Handle()
    dispatch_id: int = 0
    private_segment_size: int = 0
    group_segment_size: int = 0
    workgroup_size: _Dim3 = _Dim3()
    grid_size: _Dim3 = _Dim3()


class _Dispatch(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    dispatch_info: _DispatchInfo
    thread_id: int = 0
    correlation_id: _Correlation = _Correlation()
    stream_id: _Handle | None = None


class _Api(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    kind: int = 0
    operation: int = 0
    thread_id: int = 0
    correlation_id: _Correlation = _Correlation()


class _Copy(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int
    operation: int = 0
    kind: int = 0
    thread_id: int = 0
    correlation_id: _Correlation = _Correlation()
    src_agent_id: _Handle = _Handle()
    dst_agent_id: _Handle = _Handle()
    bytes: int = 0
    stream_id: _Handle | None = None


class _Alloc(msgspec.Struct, gc=False):
    start_timestamp: int
    end_timestamp: int = 0
    operation: int = 0
    kind: int = 0
    thread_id: int = 0
    agent_id: _Handle = _Handle()
    address: Any = None  # "0x00007f..." text in the SDK's writer; a number is read too
    allocation_size: int = 0


class _Symbol(msgspec.Struct, gc=False):
    """One entry of ``kernel_symbols``: only what the reader uses is decoded."""

    kernel_id: int
    formatted_kernel_name: str = ""
    demangled_kernel_name: str = ""
    kernel_name: str = ""
    arch_vgpr_count: int | None = None
    sgpr_count: int | None = None


def _decoders(t: Any) -> tuple[Any, Any]:
    return msgspec.json.Decoder(list[t]).decode, msgspec.json.Decoder(t).decode


_DECODERS: dict[str, tuple[Any, Any]] = {
    "kernel_dispatch": _decoders(_Dispatch), "api": _decoders(_Api), "memory_copy": _decoders(_Copy),
    "memory_allocation": _decoders(_Alloc), "raw": _decoders(msgspec.Raw), "symbols": _decoders(_Symbol),
}
_decode_any = msgspec.json.Decoder().decode


# -- walking the document ----------------------------------------------------------------------------------------

class _Truncated(Exception):  # noqa: N818 - control flow: the file ends inside the document
    pass


class _Shape(Exception):  # noqa: N818 - the document is not shaped like rocprofv3 JSON; the message says where
    pass


class _Doc:
    """The document as a byte buffer over the file's blocks: keys and small values one at a time, record arrays as
    batches through :class:`EventArrayStream` (which reads on from the same blocks)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._buf = b""
        self._pos = 0
        self.salvage = SalvageStats()

    def _read(self, want: int = 1) -> bool:
        """Append blocks until ``want`` unread bytes are buffered; False when the file ended first."""
        parts = [self._buf[self._pos:]]
        have = len(parts[0])
        while have < want:
            try:
                block = next(self._blocks)
            except StopIteration:
                self._buf, self._pos = b"".join(parts), 0
                return False
            parts.append(block)
            have += len(block)
        self._buf, self._pos = b"".join(parts), 0
        return True

    def peek(self) -> bytes:
        """The next non-blank byte (not consumed); _Truncated at the end of the file."""
        while True:
            n = len(self._buf)
            pos = self._pos
            while pos < n and self._buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < n:
                return self._buf[pos:pos + 1]
            if not self._read():
                raise _Truncated

    def take(self, char: bytes, where: str) -> None:
        if self.peek() != char:
            raise _Shape(f"expected '{char.decode()}' {where}, found {self._around()}")
        self._pos += 1

    def start(self) -> None:
        """Past a byte-order mark, at the document's first byte."""
        self.peek()
        if self._buf.startswith(b"\xef\xbb\xbf", self._pos):
            self._pos += 3

    def key(self, first: bool, where: str) -> str | None:
        """The next key of the object being read (None at its end), with its ':' consumed."""
        c = self.peek()
        if c == b"}":
            self._pos += 1
            return None
        if not first:
            if c != b",":
                raise _Shape(f"expected ',' or '}}' between the keys of {where}, found {self._around()}")
            self._pos += 1
            c = self.peek()
        if c != b'"':
            raise _Shape(f"expected a key in {where}, found {self._around()}")
        end = self._value_end()
        key = _decode_any(self._buf[self._pos:end])
        self._pos = end
        self.take(b":", f"after the key {key!r}")
        return key

    def next_item(self, first: bool, where: str) -> bool:
        """True when the array being read has another item (the separator consumed), False at its end."""
        c = self.peek()
        if c == b"]":
            self._pos += 1
            return False
        if not first:
            if c != b",":
                raise _Shape(f"expected ',' or ']' between the items of {where}, found {self._around()}")
            self._pos += 1
        return True

    def value(self) -> bytes:
        """The next value's text (small values: a kernel-symbol table is MBs, never GBs)."""
        self.peek()
        end = self._value_end()
        text = self._buf[self._pos:end]
        self._pos = end
        return text

    def _value_end(self) -> int:
        want = 1 << 16
        while True:
            end = json_scan.value_end(self._buf, self._pos)
            if end is not None:
                return end
            want = max(want, 2 * (len(self._buf) - self._pos))  # doubling: the rescans add up to a linear cost
            if not self._read(want) and json_scan.value_end(self._buf, self._pos) is None:
                raise _Truncated

    def records(self, decoder: str) -> Iterator[list]:
        """The array at the cursor, decoded in batches; complete records are recovered from a damaged array."""
        if self.peek() != b"[":
            raise _Shape(f"a record list is not an array (found {self._around()})")
        blocks = itertools.chain([self._buf[self._pos:]], self._blocks)
        self._buf, self._pos = b"", 0
        decode_batch, decode_one = _DECODERS[decoder]
        stream = EventArrayStream(blocks, decode_batch, decode_one, chunk_size=_CHUNK, stop_at_end=True)
        stream.report.salvage = self.salvage
        for batch, _chunk in stream.batches():
            yield batch
        if stream.report.truncated:
            raise _Truncated
        self._buf = stream.rest

    def _around(self) -> str:
        text = self._buf[self._pos:self._pos + 24].decode("utf-8", "replace")
        return repr(text) if text else "the end of the file"


# -- what one process of the document holds ------------------------------------------------------------------------

@dataclass
class _Process:
    index: int = 0  # its place in the document's list of processes
    tables: dict[str, Any] = field(default_factory=dict)
    pending: list[tuple[str, dict[str, pa.Array]]] = field(default_factory=list)
    resolved: _Names | None = None


class _Names:
    """A process's lookup tables as arrays: kernel names, agents -> GPU index, (kind, operation) -> API name."""

    def __init__(self, tables: dict[str, Any], warn, position: int = 0) -> None:
        # Each process numbers its correlation ids from 1: the second process's are moved out of the first's way
        self.correlation_offset = position << 48
        symbols = tables.get("kernel_symbols") or []
        ids, names, vgpr, sgpr = [], [], [], []
        for s in symbols if isinstance(symbols, list) else []:
            name = s.formatted_kernel_name or s.demangled_kernel_name or s.kernel_name
            ids.append(s.kernel_id)
            names.append(safe_str(name))
            vgpr.append(_int_or_none(s.arch_vgpr_count))
            sgpr.append(_int_or_none(s.sgpr_count))
        self.kernel_ids = pa.array(ids, pa.int64())
        self.kernel_names = pa.array(names, pa.string())
        self.vgpr = pa.array(vgpr, pa.int64())
        self.sgpr = pa.array(sgpr, pa.int64())
        agents = [a for a in tables.get("agents") or [] if isinstance(a, dict) and isinstance(a.get("id"), dict)]
        gpus = [a for a in agents if a.get("type") == _GPU_AGENT]
        order = {id(a): i for i, a in enumerate(sorted(gpus, key=lambda a: _int_or_none(a.get("node_id")) or 0))}
        self.agent_handles = pa.array([_int_or_none(a["id"].get("handle")) for a in agents], pa.int64())
        index = []
        for a in agents:
            given = _int_or_none(a.get("gpu_index"))
            index.append(given if given is not None and given >= 0 else order.get(id(a)))
        self.agent_gpu = pa.array(index, pa.int64())
        #: (GPU index, agent) of each GPU agent
        self.gpus = [(i, a) for i, a in zip(index, agents, strict=True)
                     if a.get("type") == _GPU_AGENT and i is not None]
        strings = _dict(tables.get("strings"))
        kinds = strings.get("buffer_records") or []
        self.operations: list[list[str]] = []
        for k in kinds if isinstance(kinds, list) else []:
            ops = k.get("operations") if isinstance(k, dict) else None
            self.operations.append([safe_str(o) for o in ops] if isinstance(ops, list) else [])
        self.kind_names = [safe_str(k.get("kind")) if isinstance(k, dict) else "" for k in
                           (kinds if isinstance(kinds, list) else [])]
        self.markers = _marker_messages(strings.get("marker_api"))
        metadata = _dict(tables.get("metadata"))
        self.pid = safe_str(metadata.get("pid", ""))
        if not ids and tables:
            warn("the file has no kernel_symbols table: kernels are named by their kernel_id")

    def operation(self, kind: int | None, op: int | None) -> str:
        if kind is not None and op is not None and 0 <= kind < len(self.operations) and 0 <= op < len(
                self.operations[kind]):
            return self.operations[kind][op]
        kind_name = self.kind_names[kind] if kind is not None and 0 <= kind < len(self.kind_names) else f"kind {kind}"
        return f"{kind_name or f'kind {kind}'} operation {op}"

    def gpu_of(self, handles: pa.Array) -> pa.Array:
        """The GPU index of each agent handle (null for a CPU agent or an unknown handle)."""
        return pc.take(self.agent_gpu, pc.index_in(handles, value_set=self.agent_handles))


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _int_or_none(v: Any) -> int | None:
    return v if v.__class__ is int else None


def _marker_messages(value: Any) -> dict[int, str]:
    """roctx messages by correlation id: the SDK writes a map as ``[{"key": id, "value": text}]``; a plain object is
    read too."""
    out: dict[int, str] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).isdigit() and isinstance(v, str):
                out[int(k)] = safe_str(v)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("key"), int) and isinstance(item.get("value"), str):
                out[item["key"]] = safe_str(item["value"])
    return out


# -- records -> columns ------------------------------------------------------------------------------------------

def _dispatch_columns(recs: list, keep_args: bool) -> dict[str, pa.Array]:
    info = [r.dispatch_info for r in recs]
    corr = [r.correlation_id for r in recs]
    cols = {
        "start": int_array([r.start_timestamp for r in recs]),
        "end": int_array([r.end_timestamp for r in recs]),
        "tid": int_array([r.thread_id for r in recs]),
        "corr": int_array([c.internal for c in corr]),
        "ext": int_array([c.external for c in corr]),
        "agent": int_array([i.agent_id.handle for i in info]),
        "queue": int_array([i.queue_id.handle for i in info]),
        "stream": int_array([None if r.stream_id is None else r.stream_id.handle for r in recs]),
        "kernel_id": int_array([i.kernel_id for i in info]),
    }
    if keep_args:
        for name, get in (("dispatch_id", lambda i: i.dispatch_id), ("lds", lambda i: i.group_segment_size),
                          ("scratch", lambda i: i.private_segment_size),
                          ("gx", lambda i: i.grid_size.x), ("gy", lambda i: i.grid_size.y),
                          ("gz", lambda i: i.grid_size.z), ("wx", lambda i: i.workgroup_size.x),
                          ("wy", lambda i: i.workgroup_size.y), ("wz", lambda i: i.workgroup_size.z)):
            cols[name] = int_array([get(i) for i in info])
    return cols


def _api_columns(recs: list) -> dict[str, pa.Array]:
    corr = [r.correlation_id for r in recs]
    return {
        "start": int_array([r.start_timestamp for r in recs]),
        "end": int_array([r.end_timestamp for r in recs]),
        "tid": int_array([r.thread_id for r in recs]),
        "corr": int_array([c.internal for c in corr]),
        "ext": int_array([c.external for c in corr]),
        "rkind": int_array([r.kind for r in recs]),
        "op": int_array([r.operation for r in recs]),
    }


def _copy_columns(recs: list) -> dict[str, pa.Array]:
    cols = _api_columns(recs)
    cols["src"] = int_array([r.src_agent_id.handle for r in recs])
    cols["dst"] = int_array([r.dst_agent_id.handle for r in recs])
    cols["bytes"] = int_array([r.bytes for r in recs])
    cols["stream"] = int_array([None if r.stream_id is None else r.stream_id.handle for r in recs])
    return cols


def _alloc_columns(recs: list) -> dict[str, pa.Array]:
    return {
        "start": int_array([r.start_timestamp for r in recs]),
        "tid": int_array([r.thread_id for r in recs]),
        "rkind": int_array([r.kind for r in recs]),
        "op": int_array([r.operation for r in recs]),
        "agent": int_array([r.agent_id.handle for r in recs]),
        "addr": int_array([_address(r.address) for r in recs]),
        "size": int_array([r.allocation_size for r in recs]),
    }


def _address(v: Any) -> int | None:
    if v.__class__ is int:
        return int64(v)
    if isinstance(v, str):
        n = int64(v, whole=True)
        return n if n is None or n >= 0 else None
    return None


# -- columns -> the model ---------------------------------------------------------------------------------------

class _Sink:
    """Turns each batch of record columns into the model's rows, as soon as the process's tables are known."""

    def __init__(self, builder: TraceBuilder, keep_args: bool) -> None:
        self.builder = builder
        self.keep_args = keep_args
        self.counts: dict[str, int] = {}
        self.unmapped: dict[str, int] = {}
        self.unknown_kernels = 0
        self.device_properties: dict[int, dict[str, Any]] = {}
        self.process_names: dict[str, str] = {}
        self.processes: list[dict[str, Any]] = []
        self.open_processes: list[_Process] = []
        self.processes_seen = 0
        self._alloc_sizes: dict[int, int] = {}

    def add(self, proc: _Process, what: str, cols: dict[str, pa.Array]) -> None:
        self.counts[what] = self.counts.get(what, 0) + len(cols["start"])
        if proc.resolved is None:
            proc.pending.append((what, cols))  # the tables come after the records in this file: map them at its end
        else:
            self._emit(proc.resolved, what, cols)

    def tables_ready(self, proc: _Process) -> None:
        """Called when the process's records begin (its tables are read) or its object ends."""
        if proc.resolved is None:
            proc.resolved = _Names(proc.tables, self.builder.warn, proc.index)
            self._describe(proc)
        for what, cols in proc.pending:
            self._emit(proc.resolved, what, cols)
        proc.pending.clear()

    def _describe(self, proc: _Process) -> None:
        names = proc.resolved
        assert names is not None
        meta = _dict(proc.tables.get("metadata"))
        command = meta.get("command")
        if isinstance(command, list) and command:
            self.process_names[names.pid] = safe_str(" ".join(str(c) for c in command))[:400]
        node = _dict(meta.get("node"))
        self.processes.append({k: v for k, v in (
            ("pid", meta.get("pid")), ("hostname", node.get("hostname")), ("command", command),
            ("init_time_ns", meta.get("init_time")), ("fini_time_ns", meta.get("fini_time"))) if v is not None})
        for index, agent in names.gpus:
            if index not in self.device_properties:
                self.device_properties[index] = _device_properties(index, agent)

    def _emit(self, names: _Names, what: str, cols: dict[str, pa.Array]) -> None:
        if what == "kernel_dispatch":
            self._kernels(names, cols)
        elif what == "memory_copy":
            self._copies(names, cols)
        elif what == "memory_allocation":
            self._allocations(names, cols)
        else:
            self._api(names, what, cols)

    def _kernels(self, names: _Names, c: dict[str, pa.Array]) -> None:
        n = len(c["start"])
        ids = c["kernel_id"]
        where = pc.index_in(ids, value_set=names.kernel_ids)
        dictionary = names.kernel_names
        missing = pc.is_null(where)
        if pc.any(missing).as_py():
            unknown = pc.unique(pc.filter(ids, missing))
            self.unknown_kernels += pc.sum(pc.cast(missing, pa.int64())).as_py() or 0
            extra = pa.array([f"kernel_id {k}" for k in unknown.to_pylist()], pa.string())
            dictionary = pa.concat_arrays([dictionary, extra])
            where = pc.index_in(ids, value_set=pa.concat_arrays([names.kernel_ids, unknown.cast(pa.int64())]))
        where = pc.cast(where, pa.int32())
        name = pa.DictionaryArray.from_arrays(where, dictionary)
        is_comm = pc.take(pc.match_substring_regex(dictionary, _COMM), where)
        kind = pa.DictionaryArray.from_arrays(pc.cast(is_comm, pa.int32()), pa.array(["kernel", "comm"]))
        device = names.gpu_of(c["agent"])
        stream = pc.coalesce(c["stream"], c["queue"])
        args = None
        if self.keep_args:
            vgpr = pc.take(pa.concat_arrays([names.vgpr, pa.nulls(len(dictionary) - len(names.vgpr), pa.int64())]),
                           where)
            sgpr = pc.take(pa.concat_arrays([names.sgpr, pa.nulls(len(dictionary) - len(names.sgpr), pa.int64())]),
                           where)
            args = _json_objects([
                ("kernel_id", ids), ("dispatch_id", c["dispatch_id"]), ("queue", c["queue"]), ("stream", c["stream"]),
                ("grid_size", (c["gx"], c["gy"], c["gz"])), ("workgroup_size", (c["wx"], c["wy"], c["wz"])),
                ("lds_bytes", c["lds"]), ("scratch_bytes", c["scratch"]), ("arch_vgpr_count", vgpr),
                ("sgpr_count", sgpr), ("correlation_external", c["ext"]), ("thread_id", c["tid"])], n)
        self._device_rows(names, kind, name, c, device, stream, args)

    def _device_rows(self, names: _Names, kind, name, c, device, stream, args) -> None:
        self.builder.add_events({
            "kind": kind, "name": name, "cat": _constant(len(c["start"]), kind.dictionary[0].as_py()),
            "ts_ns": c["start"], "dur_ns": pc.subtract(c["end"], c["start"]),
            "pid": _text_ids(device), "tid": _text_ids(stream), "device": device, "stream": stream,
            "correlation": _offset(c["corr"], names.correlation_offset), "external_id": _nonzero(c["ext"]),
        }, args)

    def _copies(self, names: _Names, c: dict[str, pa.Array]) -> None:
        n = len(c["start"])
        src, dst = names.gpu_of(c["src"]), names.gpu_of(c["dst"])
        ops = self._op_names(names, c)
        label = []
        for op, s, d in zip(ops.to_pylist(), src.to_pylist(), dst.to_pylist(), strict=True):
            if s is not None and d is not None and s != d:
                label.append(_PEER_COPY)
            else:
                label.append(_COPY_NAMES.get(op) or op)
        name = pa.array(label, pa.string()).dictionary_encode()
        device = pc.coalesce(dst, src)
        kind = _constant(n, "memcpy")
        args = None
        if self.keep_args:
            args = _json_objects([("bytes", c["bytes"]), ("operation", ops), ("src_device", src), ("dst_device", dst),
                                  ("stream", c["stream"]), ("correlation_external", c["ext"]),
                                  ("thread_id", c["tid"])], n)
        self._device_rows(names, kind, name, c, device, c["stream"], args)

    def _op_names(self, names: _Names, c: dict[str, pa.Array]) -> pa.Array:
        """Each record's operation name, computed once per distinct (kind, operation)."""
        code = pc.add(pc.multiply(pc.fill_null(c["rkind"], -1), 1 << 20), pc.fill_null(c["op"], -1))
        distinct = pc.unique(code)
        text = [names.operation(k // (1 << 20), k % (1 << 20)) if k >= 0 else names.operation(None, None)
                for k in distinct.to_pylist()]
        return pc.take(pa.array(text, pa.string()), pc.index_in(code, value_set=distinct))

    def _api(self, names: _Names, what: str, c: dict[str, pa.Array]) -> None:
        n = len(c["start"])
        ops = self._op_names(names, c)
        if what == "marker_api" and names.markers:
            message = pa.array([names.markers.get(k) for k in c["corr"].to_pylist()], pa.string())
            ops = pc.coalesce(message, ops)
        kind = _API_KINDS[what]
        args = None
        if self.keep_args:
            args = _json_objects([("domain", _constant(n, what)), ("correlation_external", c["ext"])], n)
        pid = _constant(n, names.pid)
        self.builder.add_events({
            "kind": _constant(n, kind), "name": ops.dictionary_encode(), "cat": _constant(n, what),
            "ts_ns": c["start"], "dur_ns": pc.subtract(c["end"], c["start"]), "pid": pid, "tid": _text_ids(c["tid"]),
            "correlation": _offset(c["corr"], names.correlation_offset), "external_id": _nonzero(c["ext"]),
        }, args)

    def _allocations(self, names: _Names, c: dict[str, pa.Array]) -> None:
        ops = self._op_names(names, c).to_pylist()
        sizes = c["size"].to_pylist()
        addrs = c["addr"].to_pylist()
        signed: list[int | None] = []
        for op, size, addr in zip(ops, sizes, addrs, strict=True):
            if op.endswith("_ALLOCATE"):
                if addr is not None and size:
                    self._alloc_sizes[addr] = size
                signed.append(size)
            elif op.endswith("_FREE"):
                size = size or (self._alloc_sizes.pop(addr, None) if addr is not None else None)
                signed.append(int64(-size) if size else None)  # -(-2^63) leaves int64
            else:
                signed.append(None)
        n = len(signed)
        device = names.gpu_of(c["agent"])
        keep = pa.array([s is not None for s in signed])
        skipped = n - (pc.sum(pc.cast(keep, pa.int64())).as_py() or 0)
        if skipped:
            self.unmapped["memory_allocation records that are neither an allocation nor a free of known size"] = (
                self.unmapped.get("memory_allocation records that are neither an allocation nor a free of known "
                                  "size", 0) + skipped)
        self.builder.add_memory({
            "ts_ns": pc.filter(c["start"], keep), "pid": pc.filter(_constant(n, names.pid), keep),
            "tid": pc.filter(_text_ids(c["tid"]), keep),
            "device_type": pc.filter(pc.if_else(pc.is_valid(device), 1, 0), keep),
            "device_id": pc.filter(pc.fill_null(device, -1), keep), "addr": pc.filter(c["addr"], keep),
            "bytes": pc.filter(pa.array(signed, pa.int64()), keep),
        })


def _device_properties(index: int, agent: dict[str, Any]) -> dict[str, Any]:
    """A GPU agent as Kineto-style device properties (what the analyses and ``gpu`` read)."""
    version = _int_or_none(agent.get("gfx_target_version")) or 0
    banks = agent.get("mem_banks")
    memory = sum(_int_or_none(_dict(b).get("size_in_bytes")) or 0 for b in (banks if isinstance(banks, list) else []))
    props = {
        "id": index,
        "name": safe_str(agent.get("product_name") or agent.get("name") or ""),
        "gfx": safe_str(agent.get("name") or ""),
        "totalGlobalMem": memory or None,
        "computeMajor": version // 10000 if version else None,
        "computeMinor": (version // 100) % 100 if version else None,
        "multiProcessorCount": _int_or_none(agent.get("cu_count")),
        "warpSize": _int_or_none(agent.get("wave_front_size")),
        "maxThreadsPerBlock": _int_or_none(agent.get("workgroup_max_size")),
        "sharedMemPerBlock": (agent["lds_size_in_kb"] * 1024 if isinstance(agent.get("lds_size_in_kb"), int)
                              else None),
        "node_id": _int_or_none(agent.get("node_id")),
    }
    return {k: v for k, v in props.items() if v is not None}


def _constant(n: int, text: str) -> pa.DictionaryArray:
    zeros = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])
    return pa.DictionaryArray.from_arrays(zeros, pa.array([text], pa.string()))


def _text_ids(values: pa.Array) -> pa.Array:
    return pc.fill_null(pc.cast(values, pa.string()), "").dictionary_encode()


def _offset(values: pa.Array, offset: int) -> pa.Array:
    return pc.add(values, offset) if offset else values


def _nonzero(values: pa.Array) -> pa.Array:
    """External correlation ids: 0 is the SDK's "none"."""
    return pc.if_else(pc.equal(values, 0), pa.scalar(None, pa.int64()), values)


def _json_objects(fields: list[tuple[str, Any]], n: int) -> pa.Array:
    """One JSON object per row from Arrow columns (ints, strings, or triples of ints as arrays), built by Arrow
    string joins: no Python string per row."""
    parts: list[Any] = []
    sep = "{"
    for key, values in fields:
        parts.append(f'{sep}"{key}":')
        sep = ","
        if isinstance(values, tuple):
            text = [_json_values(v) for v in values]
            parts.extend(["[", text[0], ",", text[1], ",", text[2], "]"])
        else:
            parts.append(_json_values(values))
    parts.append("}")
    arrays = [p if isinstance(p, pa.Array) else pa.array([p] * n, pa.string()) for p in parts]
    return pc.binary_join_element_wise(*arrays, "")


def _json_values(values: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(values.type):
        values = values.cast(pa.string())
    if pa.types.is_string(values.type):
        quoted = pc.binary_join_element_wise('"', pc.replace_substring_regex(values, r'(["\\])', r"\\\1"), '"', "")
        return pc.fill_null(quoted, "null")
    return pc.fill_null(pc.cast(values, pa.string()), "null")


# -- the read ------------------------------------------------------------------------------------------------------

def read(path: Path, progress=None, keep_args: bool = True) -> Trace:
    """Read ``path`` (rocprofv3 JSON, plain or gzip) into a Trace, not yet completed."""
    source = ByteSource(path, block_size=_CHUNK, text=True)
    blocks: Iterator[bytes] = source.blocks()
    if progress is not None:
        blocks = _reporting(blocks, source, progress)
    builder = TraceBuilder(str(path), FORMAT)
    sink = _Sink(builder, keep_args)
    doc = _Doc(blocks)
    truncated = False
    with fast_type_inference():
        try:
            _document(doc, sink)
        except _Truncated:
            truncated = True
        except _Shape as exc:
            raise TraceError(path, f"is not rocprofv3 JSON as rocprofiler-sdk writes it: {exc}") from None
        except msgspec.DecodeError as exc:
            raise TraceError(path, f"malformed JSON ({exc})") from None
        for proc in sink.open_processes:
            sink.tables_ready(proc)  # what the truncated process read before the end
    builder.metadata.update({
        "tool": TOOL,
        "device_properties": [sink.device_properties[i] for i in sorted(sink.device_properties)],
        "process_names": sink.process_names,
        "rocprofv3": {"processes": sink.processes, "records": sink.counts},
    })
    _warnings(builder, sink, doc.salvage, truncated, source)
    trace = builder.finish()
    if trace.events.num_rows == 0 and trace.memory.num_rows == 0:
        if truncated or source.truncated:
            raise TraceError(path, "is truncated before its first complete record", "nothing could be recovered")
        raise TraceError(path, "holds no kernel dispatches, memory copies or API calls",
                         "was rocprofv3 run with --kernel-trace / --hip-trace / --memory-copy-trace?")
    return trace


def _document(doc: _Doc, sink: _Sink) -> None:
    doc.start()
    doc.take(b"{", "at the start of the document")
    first = True
    while (key := doc.key(first, "the document")) is not None:
        first = False
        if key != _ROOT_KEY:
            doc.value()
            sink.unmapped[f"top-level key {key!r} (not read)"] = 1
            continue
        doc.take(b"[", f"after {_ROOT_KEY!r} (a list of processes)")
        item = True
        while doc.next_item(item, f"the {_ROOT_KEY!r} list"):
            item = False
            _process(doc, sink)


def _process(doc: _Doc, sink: _Sink) -> None:
    proc = _Process(index=sink.processes_seen)
    sink.processes_seen += 1
    sink.open_processes.append(proc)
    doc.take(b"{", "for a process entry")
    first = True
    while (key := doc.key(first, "a process entry")) is not None:
        first = False
        if key == "kernel_symbols":
            # MBs (one entry per kernel of every loaded code object): streamed like the records, into lean structs
            proc.tables[key] = [sym for batch in doc.records("symbols") for sym in batch]
        elif key in _TABLES:
            proc.tables[key] = _decode_any(doc.value())
        elif key == "buffer_records":
            if all(k in proc.tables for k in ("agents", "kernel_symbols", "strings")):
                sink.tables_ready(proc)  # the usual order: map each batch as it comes
            _buffer_records(doc, sink, proc)
        elif key == "callback_records":
            _skip_groups(doc, sink, "callback_records")
        elif doc.peek() == b"[":
            for _ in doc.records("raw"):  # code objects, host functions...: passed over without a token scan
                pass
        else:
            doc.value()
    sink.tables_ready(proc)
    sink.open_processes.remove(proc)


def _buffer_records(doc: _Doc, sink: _Sink, proc: _Process) -> None:
    doc.take(b"{", "for buffer_records (an object of record lists)")
    first = True
    while (key := doc.key(first, "buffer_records")) is not None:
        first = False
        if key == "kernel_dispatch":
            for recs in doc.records("kernel_dispatch"):
                if recs:
                    sink.add(proc, key, _dispatch_columns(recs, sink.keep_args))
        elif key in _API_KINDS:
            for recs in doc.records("api"):
                if recs:
                    sink.add(proc, key, _api_columns(recs))
        elif key == "memory_copy":
            for recs in doc.records("memory_copy"):
                if recs:
                    sink.add(proc, key, _copy_columns(recs))
        elif key == "memory_allocation":
            for recs in doc.records("memory_allocation"):
                if recs:
                    sink.add(proc, key, _alloc_columns(recs))
        elif doc.peek() == b"[":
            count = sum(len(recs) for recs in doc.records("raw"))
            if count:
                sink.unmapped[f"buffer_records.{key} records (not mapped)"] = count
        else:
            doc.value()


def _skip_groups(doc: _Doc, sink: _Sink, group: str) -> None:
    if doc.peek() != b"{":
        doc.value()
        return
    doc.take(b"{", f"for {group}")
    first = True
    while (key := doc.key(first, group)) is not None:
        first = False
        if doc.peek() == b"[":
            count = sum(len(recs) for recs in doc.records("raw"))
            if count:
                sink.unmapped[f"{group}.{key} records (not mapped)"] = count
        else:
            doc.value()


def _warnings(builder: TraceBuilder, sink: _Sink, s: SalvageStats, truncated: bool, source: ByteSource) -> None:
    if truncated or source.truncated:
        reason = source.corrupt_reason or "the file ends before the document does"
        builder.metadata["truncated"] = True
        builder.warn(f"file is truncated ({reason}); recovered {sum(sink.counts.values())} complete records")
    if sink.unknown_kernels:
        builder.warn("kernel dispatches whose kernel_id is not in kernel_symbols (named by the id)",
                     sink.unknown_kernels)
    for problem, count in sink.unmapped.items():
        builder.warn(problem, count)
    if s.incomplete_tail_bytes:
        builder.warn("incomplete last record dropped (truncated file)", 1)
    for count, problem in (
        (s.repaired_utf8, "records with invalid UTF-8 (replaced with U+FFFD)"),
        (s.repaired_control, "records with raw control characters in strings (escaped)"),
        (s.repaired_nonfinite, "records with NaN/Infinity values (read as null)"),
        (s.dropped_malformed, "malformed records or records of the wrong types (dropped)"),
        (s.dropped_too_deep, f"records nested more than {MAX_DEPTH} levels deep (beyond the JSON nesting opscope "
                             "reads: dropped as hostile)"),
        (s.dropped_not_object, "record list items that are not objects (dropped)"),
    ):
        if count:
            builder.warn(problem, count)


def _reporting(blocks: Iterator[bytes], source: ByteSource, progress) -> Iterator[bytes]:
    for block in blocks:
        progress(source.bytes_in, source.size)
        yield block
    progress(source.size, source.size)

