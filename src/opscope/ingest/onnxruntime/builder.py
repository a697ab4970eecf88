"""The ONNX Runtime reader's builder: each batch of ORT's rows mapped to the model as the Chrome parser hands it
over (see :mod:`opscope.ingest.onnxruntime` for the mapping), and ``model_run`` given as the steps."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.ingest.numbers import int64
from opscope.ingest.onnxruntime import FENCE_SUFFIXES, FORMAT, KERNEL_SUFFIX, STEP_EVENT, TOOL
from opscope.model.builder import Batch, TraceBuilder, Values
from opscope.model.ranges import arange
from opscope.model.trace import Trace

#: ORT does not write which device ran a kernel: the one device there is, in the profiles seen.
_DEVICE = 0


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
        texts = _plain(args) if args is not None else None
        shapes: list[str | None] = _strings(cols.get("shapes")) if cols.get("shapes") is not None else [None] * n
        dtypes: list[str | None] = _strings(cols.get("dtypes")) if cols.get("dtypes") is not None else [None] * n
        outputs: list[str | None] = (_strings(cols.get("output_shapes")) if cols.get("output_shapes") is not None
                                     else [None] * n)
        device = _ints(cols.get("device"), n)
        stream = _ints(cols.get("stream"), n)
        which = [i for i, c in enumerate(cats) if c in ("Node", "Kernel")]
        parsed = _decode_args(texts.take(pa.array(which, pa.int64())) if texts is not None else None, len(which))
        ops: list[int] = []
        heads: list[str] = []
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
                if self.keep_args:
                    heads.append(self._node_head(node))
                shapes[i], dtypes[i] = self._shapes(bytes(a.input_type_shape) if a is not None else b"")
                outputs[i] = self._shapes(bytes(a.output_type_shape) if a is not None else b"")[0]
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
        cols["output_shapes"] = pa.array(outputs, pa.string())
        cols["device"] = pa.array(device, pa.int64())
        cols["stream"] = pa.array(stream, pa.int64())
        new_args = None
        if texts is not None and self.keep_args:
            new_args = _with_nodes(texts, ops, heads) if ops else texts
        ids = super().add_events(cols, new_args)
        self._collect_steps(cols, cats, names, ids)
        if kernels or ops:
            self._link(ops, kernels, ids, names, kernel_ops)
        return ids

    def _shapes(self, raw: bytes) -> tuple[str | None, str | None]:
        """ORT's ``[{"float":[8,3,112,112]},{"float":[32,3,3,3]}]`` -> (``[[8,3,112,112],[32,3,3,3]]``,
        ``["float","float"]``): Kineto's ``Input Dims`` and ``Input type`` (for ``input_type_shape``; of
        ``output_type_shape`` the shapes alone are kept, as ``output_shapes``)."""
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

    def _node_head(self, node: str) -> str:
        """``{"node":"<node>"``: the start of the node's args object (see :func:`_with_nodes`)."""
        head = self._node_json.get(node)
        if head is None:
            head = '{"node":' + json.dumps(node, ensure_ascii=False)
            if len(self._node_json) < 100_000:
                self._node_json[node] = head
        return head

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
            op_type = kernel_ops.get(i)
            if self._last_op is not None and (not op_type or op_type == self._last_op[1]):
                self._links.append((row, self._last_op[0]))
            elif op_type:
                self._pending.append((row, op_type))
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
            trace = trace.replace(events=_set_correlations(trace.events, self._links))
        return trace

def _set_correlations(events: pa.Table, links: list[tuple[int, int]]) -> pa.Table:
    """Each linked kernel row and its node's op row get the op row's event id as their correlation id."""
    correlation = events["correlation"].to_pylist()
    for kernel, op in links:
        correlation[kernel] = op
        correlation[op] = op
    i = events.schema.get_field_index("correlation")
    return events.set_column(i, "correlation", pa.array(correlation, pa.int64()))


def _plain(values: Any) -> pa.Array:
    """A column as one plain string array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        return pa.array(list(values), pa.string())
    return values.cast(pa.string()) if values.type != pa.string() else values


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


def _decode_args(texts: pa.Array | None, n: int) -> list[Any]:
    """The keys of each args text this reader uses (an ``OrtArgs`` struct; None where absent or not an object)."""
    if texts is None or n == 0:
        return [None] * n
    decode_all, decode_one, error = _decoders()
    filled = pc.fill_null(texts, "null")
    filled = pc.if_else(pc.equal(pc.binary_length(filled), 0), pa.scalar("null"), filled)
    # one JSON array of all the texts, made in Arrow (no Python string per row): "a," "b," ... -> [a,b]
    joined = pc.binary_join_element_wise(filled, pa.scalar(""), ",")
    offsets = joined.buffers()[1]
    start, end = (int.from_bytes(offsets[k * 4:k * 4 + 4], "little", signed=True)
                  for k in (joined.offset, joined.offset + len(joined)))
    body = joined.buffers()[2].to_pybytes()[start:end - 1]
    try:
        return decode_all(b"[" + body + b"]")
    except (error, ValueError, RecursionError):  # one bad args text: decode each alone
        out = []
        for t in texts.to_pylist():
            try:
                out.append(decode_one(t) if t else None)
            except (error, ValueError, RecursionError):
                out.append(None)
        return out


def _with_nodes(texts: pa.Array, ops: list[int], heads: list[str]) -> pa.Array:
    """The args texts with ``"node": <node>`` first in each op row's object (ORT's own keys after it, as written);
    a text that is not an object (hostile) is left as it is. Done in Arrow: the texts are most of the file."""
    rows = pa.array(ops, pa.int64())
    old = pc.utf8_ltrim_whitespace(pc.fill_null(texts.take(rows), ""))
    head = pa.array(heads, pa.string())
    rest = pc.utf8_ltrim_whitespace(pc.utf8_slice_codeunits(old, 1))
    empty = pc.or_(pc.equal(pc.binary_length(old), 0), pc.starts_with(rest, "}"))
    joined = pc.if_else(empty, pc.binary_join_element_wise(head, pa.scalar("}"), ""),
                        pc.binary_join_element_wise(head, rest, ","))
    new = pc.if_else(pc.or_(pc.starts_with(old, "{"), pc.equal(pc.binary_length(old), 0)), joined, texts.take(rows))
    mask = pc.is_in(arange(0, len(texts)), value_set=rows)
    return pc.replace_with_mask(texts, mask, new)


_DECODERS: tuple | None = None


def _decoders() -> tuple:
    """msgspec decoders of ORT's args (made on first use: msgspec is the Chrome parser's, loaded by ``read``)."""
    global _DECODERS
    if _DECODERS is None:
        import msgspec

        ort_args = msgspec.defstruct("OrtArgs", [("op_name", Any, None), ("provider", Any, None),
                                                 ("input_type_shape", msgspec.Raw, msgspec.Raw(b"")),
                                                 ("output_type_shape", msgspec.Raw, msgspec.Raw(b"")),
                                                 ("stream", Any, None)], gc=False)
        _DECODERS = (msgspec.json.Decoder(list[ort_args | None]).decode,  # type: ignore[valid-type]
                     msgspec.json.Decoder(ort_args | None).decode,
                     msgspec.DecodeError)
    return _DECODERS


def _stream(v: Any) -> int | None:
    """ORT's stream: CUPTI's stream id as decimal text, roctracer's stream as a hex pointer."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, str)):
        return int64(v, whole=True)
    return None
