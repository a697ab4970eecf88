"""ONNX Runtime's profile (``SessionOptions.enable_profiling``): a bare JSON array of Chrome ``"X"`` events.

ORT writes one event per graph node run in category ``Node``, named ``<node>_kernel_time`` (older builds add
``<node>_fence_before``/``_fence_after``), with the op type, execution provider and input/output types and shapes
in ``args``; one ``model_run`` per ``InferenceSession.run`` and its executor span (``SequentialExecutor::Execute``),
plus ``model_loading_uri``/``session_initialization`` in category ``Session``; and, with a GPU provider built with
profiling, its CUPTI/roctracer records in category ``Kernel`` (``stream``, ``grid_*``, ``block_*``).

The model, event by event:

- ``<node>_kernel_time`` -> ``cpu_op`` named by ``args.op_name`` (the op TYPE: ``Conv``, like ``aten::conv2d``, so
  ``ops`` and ``diff`` group by type); its args JSON keeps ORT's keys and gains ``"node": "<node name>"``;
  ``shapes``/``dtypes`` come from ``input_type_shape`` (``[[8,3,112,112],[32,3,3,3]]``, ``["float","float"]``).
- ``_fence_before``/``_fence_after`` -> ``overhead`` (the wait for the node's inputs, not its work).
- ``model_run`` -> the trace's steps 0..n-1 in time order (and a ``user_annotation``). Every ``Session`` event is a
  ``user_annotation``: they are ranges around the nodes, not calls that do work of their own. (As ``runtime``, the
  executor span would count as CPU busy and swallow the nodes' self time.)
- ``Kernel`` -> ``kernel`` (``memcpy`` for ORT's ``Memcpy*`` names) on device 0 (ORT does not record the device
  ordinal), on the stream ORT gives.
- anything else is kept as the Chrome reader reads it, and said in the warnings.

The Chrome JSON parser (:mod:`opscope.ingest.chrome`) does the reading; this module is its builder: it sees each
batch of rows and maps it before the rows are stored, so nothing is held twice. It lives beside ``chrome/``, not
inside it, because it is a format of its own (its own name in the registry and in ``metadata.format``), unlike the
TF timelines that the Chrome reader recognises among Chrome traces.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.model.builder import Batch, TraceBuilder, Values
from opscope.model.trace import Trace

FORMAT = "onnxruntime_json"
TOOL = "onnxruntime"
KERNEL_SUFFIX = "_kernel_time"
FENCE_SUFFIXES = ("_fence_before", "_fence_after")
STEP_EVENT = "model_run"
#: ORT's categories -> kinds (``Node`` rows are then re-kinded by their name suffix).
CATEGORIES = {"Session": "user_annotation", "Node": "cpu_op", "Kernel": "kernel"}
#: ORT writes ``{"cat" : "Session",`` with a space before the colon; other writers of the same events may not.
_ORT_CATEGORY = re.compile(rb'"cat"\s*:\s*"(?:Session|Node)"')
_ORT_MARK = re.compile(rb'"name"\s*:\s*"(?:model_run|model_loading_uri|model_loading_array|session_initialization'
                       rb'|SequentialExecutor::Execute|[^"]{0,4096}?(?:_kernel_time|_fence_before|_fence_after))"'
                       rb'|"provider"\s*:\s*"\w*ExecutionProvider"')
_DEVICE = 0


class OnnxRuntimeJsonReader:
    """ONNX Runtime profile JSON (a bare array of Chrome events in ORT's categories), plain or gzip."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        """A JSON array whose events are in ORT's categories (``Session``/``Node``) with ORT's event names."""
        text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        return text.startswith(b"[") and bool(_ORT_CATEGORY.search(head)) and bool(_ORT_MARK.search(head))

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.chrome import reader  # the parser: only when a file is parsed

        builder = OrtBuilder(str(path), keep_args=keep_args)
        return reader.read(path, progress=progress, keep_args=True, builder=builder, categories=CATEGORIES)


READER = OnnxRuntimeJsonReader()


class OrtBuilder(TraceBuilder):
    """A TraceBuilder that maps each batch of ORT's rows to the model before storing it, and gives the steps."""

    def __init__(self, source: str, keep_args: bool = True) -> None:
        super().__init__(source, FORMAT)
        self.keep_args = keep_args
        self._steps_seen: list[tuple[int, int, str, str]] = []
        self._providers: set[str] = set()
        self._shape_cache: dict[bytes, tuple[str | None, str | None]] = {}
        self._node_json: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        # GPU kernel rows -> the node op that launched them (see _link)
        self._last_op: tuple[int, str] | None = None
        self._pending: list[tuple[int, str]] = []
        self._links: list[tuple[int, int]] = []

    def _count(self, what: str, n: int = 1) -> None:
        self._counts[what] = self._counts.get(what, 0) + n

    def add_events(self, columns: Batch, args: Values | None = None) -> pa.Array:
        cols = dict(columns)
        cats = _strings(cols.get("cat"))
        if not any(c in ("Node", "Session", "Kernel") for c in set(cats)):
            return super().add_events(cols, args if self.keep_args else None)
        n = len(cats)
        names = _strings(cols["name"])
        kinds = _strings(cols["kind"])
        texts: list[str | None] = _strings(args) if args is not None else [None] * n
        shapes: list[str | None] = _strings(cols.get("shapes")) if cols.get("shapes") is not None else [None] * n
        dtypes: list[str | None] = _strings(cols.get("dtypes")) if cols.get("dtypes") is not None else [None] * n
        device = _ints(cols.get("device"), n)
        stream = _ints(cols.get("stream"), n)
        which = [i for i, c in enumerate(cats) if c in ("Node", "Kernel")]
        parsed = _decode_args([texts[i] for i in which])
        ops: list[int] = []
        kernels: list[int] = []
        kernel_ops: dict[int, str] = {}
        for i, a in zip(which, parsed):
            name = names[i] or ""
            if cats[i] == "Kernel":
                kinds[i] = "memcpy" if name.startswith("Memcpy") else "kernel"
                device[i] = _DEVICE
                stream[i] = _stream(a.stream if a is not None else None)
                kernels.append(i)
                self._count("kernels")
                if a is not None and isinstance(a.op_name, str) and a.op_name:
                    kernel_ops[i] = a.op_name
                continue
            if name.endswith(KERNEL_SUFFIX):
                node = name[: -len(KERNEL_SUFFIX)]
                op = a.op_name if a is not None else None
                if isinstance(op, str) and op:
                    names[i] = op
                else:
                    names[i] = node  # the op type is unknown: the node's name is the best there is
                    self._count("args")
                provider = a.provider if a is not None else None
                if isinstance(provider, str):
                    self._providers.add(provider)
                texts[i] = self._with_node(texts[i], node)
                shapes[i], dtypes[i] = self._shapes(bytes(a.input_type_shape) if a is not None else b"")
                ops.append(i)
            elif name.endswith(FENCE_SUFFIXES):
                kinds[i] = "overhead"
            else:
                kinds[i] = "other"
                self._count("node_other")
        cols["kind"] = pa.array(kinds, pa.string()).dictionary_encode()
        cols["name"] = pa.array(names, pa.string()).dictionary_encode()
        cols["shapes"] = pa.array(shapes, pa.string())
        cols["dtypes"] = pa.array(dtypes, pa.string())
        cols["device"] = pa.array(device, pa.int64())
        cols["stream"] = pa.array(stream, pa.int64())
        new_args = pa.array(texts, pa.string()) if args is not None else None
        ids = super().add_events(cols, new_args if self.keep_args else None)
        self._collect_steps(cols, cats, names, ids)
        if kernels or ops:
            self._link(ops, kernels, ids, names, kernel_ops)
        return ids

    def _shapes(self, raw: bytes) -> tuple[str | None, str | None]:
        """ORT's ``[{"float":[8,3,112,112]},{"float":[32,3,3,3]}]`` -> (``[[8,3,112,112],[32,3,3,3]]``,
        ``["float","float"]``): Kineto's ``Input Dims`` and ``Input type``."""
        if not raw:
            return None, None
        hit = self._shape_cache.get(raw)
        if hit is not None:
            return hit
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = None
        out: tuple[str | None, str | None] = (None, None)
        if isinstance(value, list):
            dims: list[Any] = []
            types: list[Any] = []
            for item in value:
                if isinstance(item, dict) and len(item) == 1:
                    [(dtype, shape)] = item.items()
                    types.append(dtype)
                    dims.append(shape if isinstance(shape, list) else [])
                else:  # not a tensor (ORT writes none of these today): keep the place, unknown
                    types.append(None)
                    dims.append([])
            out = (json.dumps(dims, separators=(",", ":")), json.dumps(types, separators=(",", ":")))
        if len(self._shape_cache) < 100_000:
            self._shape_cache[raw] = out
        return out

    def _with_node(self, text: str | None, node: str) -> str:
        """The args object with ``"node": <node>`` first; ORT's own keys after it, as written."""
        head = self._node_json.get(node)
        if head is None:
            head = '{"node":' + json.dumps(node, ensure_ascii=False)
            if len(self._node_json) < 100_000:
                self._node_json[node] = head
        if not text:
            return head + "}"
        body = text.lstrip()
        if not body.startswith("{"):
            return text  # not an object (hostile): left as it is
        rest = body[1:].lstrip()
        return head + ("}" if rest.startswith("}") else "," + rest)

    def _collect_steps(self, cols: dict, cats: list, names: list, ids: pa.Array) -> None:
        valid = ids.to_pylist()
        idx = [i for i, (c, nm) in enumerate(zip(cats, names)) if c == "Session" and nm == STEP_EVENT
               and valid[i] is not None]
        if not idx:
            return
        ts = cols["ts_ns"].to_pylist() if isinstance(cols["ts_ns"], pa.Array) else list(cols["ts_ns"])
        dur = cols["dur_ns"].to_pylist() if isinstance(cols["dur_ns"], pa.Array) else list(cols["dur_ns"])
        pid = _strings(cols.get("pid")) if cols.get("pid") is not None else [""] * len(cats)
        tid = _strings(cols.get("tid")) if cols.get("tid") is not None else [""] * len(cats)
        for i in idx:
            self._steps_seen.append((ts[i], dur[i], pid[i] or "", tid[i] or ""))

    def _link(self, ops: list[int], kernels: list[int], ids: pa.Array, op_types: list, kernel_ops: dict) -> None:
        """Each GPU kernel to the node op that launched it (the pair get one correlation id in :meth:`finish`).

        ORT gives each kernel its node's op type (``args.op_name``) and writes it beside that node's event: after it
        (1.14+, ``GPUProfilerBase::MergeEvents``) or, in older builds, before it (``CudaProfiler::EndProfiling``).
        So a kernel goes to the op written last before it when their op types agree, else to the next op written
        when those agree; otherwise it stays unlinked (counted)."""
        id_list = ids.to_pylist()
        is_op = set(ops)
        for i in sorted(ops + kernels):
            row = id_list[i]
            if row is None:
                continue
            if i in is_op:
                self._last_op = (row, op_types[i])
                for kernel, wanted in self._pending:
                    if wanted == op_types[i]:
                        self._links.append((kernel, row))
                    else:
                        self._count("kernel_unlinked")
                self._pending = []
                continue
            wanted = kernel_ops.get(i)
            if self._last_op is not None and (not wanted or wanted == self._last_op[1]):
                self._links.append((row, self._last_op[0]))
            elif wanted:
                self._pending.append((row, wanted))
            else:
                self._count("kernel_unlinked")

    def finish(self) -> Trace:
        if self._steps_seen:
            runs = sorted(self._steps_seen)
            self.add_steps({"step": list(range(len(runs))), "name": [STEP_EVENT] * len(runs),
                            "pid": [r[2] for r in runs], "tid": [r[3] for r in runs],
                            "ts_ns": [r[0] for r in runs], "dur_ns": [r[1] for r in runs]})
        self._counts["kernel_unlinked"] = self._counts.get("kernel_unlinked", 0) + len(self._pending)
        self._pending = []
        self.metadata["tool"] = TOOL
        if self._providers:
            self.metadata["execution_providers"] = sorted(self._providers)
        for what, problem in (
            ("args", "Node events without args.op_name (named by their node, not their op type)"),
            ("node_other", f"Node events named neither <node>{KERNEL_SUFFIX} nor <node>_fence_before/_after "
                           "(kept as kind 'other')"),
            ("kernel_unlinked", "GPU Kernel events not beside a node event of their op type (not linked to a node)"),
        ):
            if self._counts.get(what):
                self.warn(problem, self._counts[what])
        if self._counts.get("kernels"):
            self.warn("GPU Kernel events: ORT does not record the device ordinal (put on device 0)",
                      self._counts["kernels"])
        trace = super().finish()
        if self._links:
            trace.events = _set_correlations(trace.events, self._links)
        return trace

def _set_correlations(events: pa.Table, links: list[tuple[int, int]]) -> pa.Table:
    """Each linked kernel row and its node's op row get the op row's event id as their correlation id."""
    correlation = events["correlation"].to_pylist()
    for kernel, op in links:
        correlation[kernel] = op
        correlation[op] = op
    i = events.schema.get_field_index("correlation")
    return events.set_column(i, "correlation", pa.array(correlation, pa.int64()))


def _strings(values: Any) -> list:
    if values is None:
        return []
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            values = values.cast(pa.string())
        return values.to_pylist()
    return list(values)


def _ints(values: Any, n: int) -> list:
    if values is None:
        return [None] * n
    if isinstance(values, pa.Array):
        return values.to_pylist()
    return list(values)


def _decode_args(texts: list[str | None]) -> list[Any]:
    """The keys of each args text this reader uses (an ``OrtArgs`` struct; None where absent or not an object)."""
    decode_all, decode_one, error = _decoders()
    if not texts:
        return []
    try:
        return decode_all("[" + ",".join(t or "null" for t in texts) + "]")
    except (error, ValueError, RecursionError):  # one bad args text: decode each alone
        out = []
        for t in texts:
            try:
                out.append(decode_one(t) if t else None)
            except (error, ValueError, RecursionError):
                out.append(None)
        return out


_DECODERS: tuple | None = None


def _decoders() -> tuple:
    """msgspec decoders of ORT's args (made on first use: msgspec is the Chrome parser's, loaded by ``read``)."""
    global _DECODERS
    if _DECODERS is None:
        import msgspec

        ort_args = msgspec.defstruct("OrtArgs", [("op_name", Any, None), ("provider", Any, None),
                                                 ("input_type_shape", msgspec.Raw, msgspec.Raw(b"")),
                                                 ("stream", Any, None)], gc=False)
        _DECODERS = (msgspec.json.Decoder(list[ort_args | None]).decode,  # type: ignore[valid-type]
                     msgspec.json.Decoder(ort_args | None).decode,
                     msgspec.DecodeError)
    return _DECODERS


def _stream(v: Any) -> int | None:
    """ORT's stream: CUPTI's stream id as decimal text, roctracer's stream as a hex pointer."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(1 << 63) < v < (1 << 63) else None
    if isinstance(v, str):
        s = v.strip()
        try:
            n = int(s, 16) if s.lower().startswith("0x") else int(s)
        except ValueError:
            return None
        return n if -(1 << 63) < n < (1 << 63) else None
    return None
