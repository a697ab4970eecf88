"""Arrow schemas of the model's tables. Times are integer nanoseconds everywhere."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute

#: Every value the ``kind`` column can take.
EVENT_KINDS = (
    "cpu_op",          # framework operator (aten::*, TF op on the host)
    "python",          # python_function events (with_stack)
    "user_annotation",  # record_function / ProfilerStep#N on the host
    "gpu_annotation",  # gpu_user_annotation and profiler ranges on a device stream
    "kernel",          # device kernel
    "memcpy",
    "memset",
    "comm",            # collective-communication kernels (NCCL / RCCL)
    "runtime",         # cudaLaunchKernel, hipMemcpyAsync, ... and driver calls
    "sync",            # cuda_sync: stream/event waits shown on the device timeline
    "marker",          # instant events that are not memory records
    "profiler",        # the profiler's own spans (cat "Trace")
    "overhead",        # profiler overhead slices
    "other",           # anything the reader could not map (counted in metadata warnings)
    "captured_op",     # an op recorded when a CUDA/HIP graph was captured, standing for the launch of its replays
    "captured_annotation",  # a user annotation around such an op (opscope.analyses.capture_merge)
)
#: Copies of what a graph capture recorded (:mod:`opscope.analyses.capture_merge`): not events of the trace itself.
CAPTURED_KINDS = ("captured_op", "captured_annotation")
#: Ops that launch device work: the host's, and those a graph capture recorded for the kernels its replays run
#: (no host time of their own in this trace: host-time analyses count ``cpu_op`` alone).
LAUNCHING_OP_KINDS = ("cpu_op", "captured_op")
#: Annotations around launching ops.
ANNOTATION_KINDS = ("user_annotation", "captured_annotation")
#: Kinds that run on a device (their ``stream``/``device`` columns are set).
GPU_KINDS = ("kernel", "memcpy", "memset", "comm", "sync", "gpu_annotation")
#: Kinds that nest on host threads (``parent`` and ``self_ns`` are computed for them).
HOST_KINDS = ("cpu_op", "python", "user_annotation", "runtime", "overhead", "other")

_dict = pa.dictionary(pa.int32(), pa.string())

EVENTS = pa.schema([
    ("kind", _dict),
    ("name", _dict),
    ("cat", _dict),
    ("ts_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("pid", _dict),
    ("tid", _dict),
    ("device", pa.int64()),
    ("stream", pa.int64()),
    ("correlation", pa.int64()),
    ("external_id", pa.int64()),
    ("shapes", pa.string()),
    ("dtypes", pa.string()),
    ("strides", pa.string()),
    ("concrete_inputs", pa.string()),
    # the outputs' shapes where a format records them (ONNX Runtime's output_type_shape), as ``shapes`` writes inputs
    ("output_shapes", pa.string()),
    # computed after reading:
    ("event_id", pa.int64()),
    ("parent", pa.int64()),
    ("depth", pa.int32()),
    ("self_ns", pa.int64()),
    ("step", pa.int64()),
    # an op whose only child is an op of the same name (aten::div -> aten::div): torch's key_averages()
    # counts the pair once; op_self_ns is the self time with such children folded into their parent
    ("merged", pa.bool_()),
    ("op_self_ns", pa.int64()),
])

#: EVENTS columns that :func:`opscope.model.derive.complete` computes; readers leave them out.
DERIVED_COLUMNS = ("parent", "depth", "self_ns", "step", "merged", "op_self_ns")

FLOWS = pa.schema([
    ("id", pa.string()),
    ("cat", _dict),
    ("phase", _dict),
    ("ts_ns", pa.int64()),
    ("pid", _dict),
    ("tid", _dict),
])

COUNTERS = pa.schema([
    ("name", _dict),
    ("series", _dict),
    ("ts_ns", pa.int64()),
    ("pid", _dict),
    ("value", pa.float64()),
])

MEMORY = pa.schema([
    ("ts_ns", pa.int64()),
    ("pid", _dict),
    ("tid", _dict),
    ("device_type", pa.int64()),
    ("device_id", pa.int64()),
    ("addr", pa.int64()),
    ("bytes", pa.int64()),
    ("total_allocated", pa.int64()),
    ("total_reserved", pa.int64()),
])

#: The full ``args`` object of each event as JSON text, apart so that tables stay narrow.
ARGS = pa.schema([
    ("event_id", pa.int64()),
    ("args", pa.string()),
])

STEPS = pa.schema([
    ("step", pa.int64()),
    ("name", pa.string()),
    ("pid", pa.string()),
    ("tid", pa.string()),
    ("ts_ns", pa.int64()),
    ("dur_ns", pa.int64()),
])

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "events": EVENTS,
    "flows": FLOWS,
    "counters": COUNTERS,
    "memory": MEMORY,
    "steps": STEPS,
    "args": ARGS,
}


#: Up to this many matching dictionary codes, a kind mask compares the codes; beyond, it takes per-code booleans.
_COMPARED_CODES = 6


def kind_mask(events: pa.Table, kinds) -> pa.ChunkedArray:
    """Boolean mask of rows whose ``kind`` is in ``kinds``, computed on the dictionary (no string copy).

    Memoized per ``kind`` column: one command asks for the same few masks many times.
    """
    column = events["kind"]
    key = (_identity(column), tuple(kinds))
    hit = _MASKS.get(key)
    if hit is not None:
        return hit[1]
    wanted = pa.array(list(kinds), pa.string())
    chunks = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            hit = pa.compute.is_in(chunk.dictionary, wanted)
            codes = pa.compute.indices_nonzero(hit).to_pylist()  # noqa: TID251  an Array (one chunk's dictionary)
            if 0 < len(codes) <= _COMPARED_CODES:  # a compare per code: 2-4x a take of the dictionary's booleans
                found = None
                for code in codes:
                    equal = pa.compute.equal(chunk.indices, pa.scalar(code, chunk.indices.type))
                    found = equal if found is None else pa.compute.or_(found, equal)
                chunks.append(pa.compute.fill_null(found, False))
            else:
                chunks.append(pa.compute.fill_null(hit.take(chunk.indices), False))
        else:
            chunks.append(pa.compute.fill_null(pa.compute.is_in(chunk, wanted), False))
    mask = pa.chunked_array(chunks, type=pa.bool_())
    if len(_MASKS) >= 32:
        _MASKS.clear()
    _MASKS[key] = (column, mask)  # holding the column keeps its buffers (the key) from being reused
    return mask


def buffers_key(values: pa.Array) -> tuple[int, ...]:
    """Where an array's data lies: equal keys, the same values (a unified dictionary shared by chunks), so work on
    such a dictionary is done once, not once per chunk."""
    return (values.offset, len(values), *(b.address if b is not None else 0 for b in values.buffers()))


def _identity(column: pa.ChunkedArray) -> tuple:
    """Where the column's data lives: the same for every wrapper of the same column."""
    parts: list = [len(column), column.num_chunks]
    for chunk in column.chunks[:1] + column.chunks[-1:]:
        parts.extend((b.address, b.size) if b is not None else (0, 0) for b in chunk.buffers())
        parts.append(chunk.offset)
    return tuple(parts)


_MASKS: dict[tuple, tuple[pa.ChunkedArray, pa.ChunkedArray]] = {}
