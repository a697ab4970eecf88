"""TensorFlow's Chrome traces mapped to the model: TF1 timelines' device rows, XProf's host runtime events.

**TF timelines** (``tf.python.client.timeline``, TF 1.x/2.x ``RunMetadata``) put every device record in a process
named for its place: ``/device:GPU:0/stream:14 Compute`` (one CUDA stream), ``/device:GPU:0/stream:all Compute``
and ``/device:GPU:0/memcpy Compute`` (older releases: ``/gpu:0/...``); host work is under
``/job:localhost/replica:0/task:0/device:GPU:0 Compute`` (the GPU ops' host side, which launches their kernels)
and ``.../device:CPU:0 Compute``. Every event has category ``Op``, its name is the op type and ``args.name`` the
graph node. TF's device tracer saves each kernel twice, under ``stream:all`` and under its own stream, and each
copy twice, under ``memcpy`` and under its stream. We keep the per-stream row (it says which stream ran it) and
drop the ``stream:all``/``memcpy`` copy of it, so each record counts once; a per-stream row whose twin is in
``memcpy`` is a copy (kind ``memcpy``; ``MEMCPYHtoD`` names tell the direction), the others are kernels. An
aggregate row with no per-stream twin is kept, on stream -1. A device row is linked to its host op — the last
execution of the same node on the same device that started before it — by giving both one ``correlation`` id.

**XProf's trace viewer JSON** of a TF run writes framework ops without a category, beside TF's runtime internals
(``ThreadpoolListener::Region``, ``ExecutorState::Process``, ``EagerExecute``, ``convert_to_tensor``...) and the
user's ``tf.profiler.experimental.Trace`` regions. XProf's framework op stats count TF ops only: the op types,
which TF names as CamelCase identifiers (``Conv2DBackpropFilter``, internal ``_FusedConv2D``). So an uncategorized
host event is a ``cpu_op`` when its name is such an identifier and not one of TF's runtime regions, ``runtime`` when
it is a runtime region, and a ``user_annotation`` otherwise (``train 0``, a tf.function's name).
:func:`opscope.model.derive.complete` then computes self time as XProf does (runtime events inside an op are
the op's own work: its thread-pool regions).
"""

from __future__ import annotations

import bisect
import re

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model import Trace

#: The value :func:`is_tensorflow` traces get in ``metadata["tool"]``; ``model.derive`` reads it for self time.
TOOL = "tensorflow"
_JOB = r"(?:/job:[^/\s]+/replica:\d+/task:\d+)?"
_GPU = r"/(?:device:)?(?:[A-Z_]*GPU|gpu):(?P<device>\d+)"
#: ``/device:GPU:0/stream:14 Compute``, ``/gpu:0/stream:all Compute``, ``/device:GPU:0/memcpy Compute``.
DEVICE_PROCESS = re.compile(rf"^{_JOB}{_GPU}/(?:stream:(?P<stream>\d+|all)|(?P<memcpy>memcpy))(?:\s+Compute)?$")
#: ``/job:localhost/replica:0/task:0/device:GPU:0 Compute``: the host side of the ops placed on that GPU.
HOST_PROCESS = re.compile(rf"^{_JOB}{_GPU}\s+Compute$")
#: Processes only TF timelines have. (XProf's "/host:CPU" is no sign: JAX runs have it too.)
_TF_PROCESS = re.compile(r"^/job:[^/\s]+/replica:\d+/task:\d+/|^/(?:device:)?(?:[A-Z_]*GPU|gpu|cpu|CPU):\d+/")
#: TensorFlow's thread pools name their threads tf_Compute/..., tf_numa_-1_Eigen/..., tf_data_...
_TF_THREAD = re.compile(r"^tf_")
_TF_CATEGORIES = ("tf_exec", "threadpool_event")
#: A TF op type: a CamelCase identifier, internal ones with a leading underscore (``_FusedConv2D``).
OP_TYPE = r"^_?[A-Z][A-Za-z0-9]*$"
#: TF's own instrumentation (eager runtime, executor, thread pools, Python API regions, function tracing),
#: including the CamelCase ones that an op-type pattern would take for ops.
RUNTIME = (r"::|^(?:Eager|TFE_|Executor|ParallelFor$|FunctionRun$|ValidateInputTypeAndPlacement$"
           r"|convert_to_tensor$|tf\.|__inference_|__forward_|__backward_)|^\S+:_[A-Z]\w*$")
_MEMCPY_NAME = re.compile(r"(?i)^memcpy")
_MEMSET_NAME = re.compile(r"(?i)^memset")
#: Stream of a kernel or copy that TF recorded only under ``stream:all`` / ``memcpy`` (no per-stream twin).
UNKNOWN_STREAM = -1
DUPLICATES_WARNING = ("TF timeline device records repeated under stream:all or memcpy (counted once, on their own "
                      "stream)")


def is_tensorflow(process_names: dict[str, str], thread_names: dict[str, str], categories: set[str]) -> bool:
    """Whether TensorFlow wrote the trace (a TF timeline or XProf's trace viewer JSON of a TF run)."""
    return (any(c in categories for c in _TF_CATEGORIES) or any(_TF_PROCESS.search(n) for n in process_names.values())
            or any(_TF_THREAD.match(n) for n in thread_names.values()))


def map_trace(trace: Trace, process_names: dict[str, str], nodes: pa.Table) -> Trace:
    """The trace (before ``complete``) with TF's device rows as device work and its runtime events as runtime.

    ``nodes`` has ``event_id`` and ``node`` (a TF timeline event's ``args.name``) for the rows that had one.
    """
    trace.metadata["tool"] = TOOL
    events = trace.events
    events = _classify_host(events)
    roles = _device_roles(process_names)
    if roles:
        events, dropped = _map_devices(events, roles, _node_column(events, nodes))
        if dropped:
            trace.warn(DUPLICATES_WARNING, dropped)
    return trace.replace(events=events)


def _node_column(events: pa.Table, nodes: pa.Table) -> pa.Array:
    ids = events["event_id"].combine_chunks()
    if nodes.num_rows == 0:
        return pa.nulls(len(ids), pa.string())
    where = pc.index_in(ids, value_set=nodes["event_id"].combine_chunks())
    return pc.take(nodes["node"].combine_chunks(), where)


def _classify_host(events: pa.Table) -> pa.Table:
    """Uncategorized host slices (XProf): TF op types stay ``cpu_op``; runtime regions and annotations move."""
    kind = events["kind"].cast(pa.string()).combine_chunks()
    uncategorized = pc.and_(pc.is_null(events["cat"].combine_chunks()), pc.equal(kind, "cpu_op"))
    if not pc.any(uncategorized).as_py():
        return events
    names = events["name"].cast(pa.string()).combine_chunks()
    runtime = pc.fill_null(pc.match_substring_regex(names, RUNTIME), False)
    op = pc.and_(pc.fill_null(pc.match_substring_regex(names, OP_TYPE), False), pc.invert(runtime))
    new = pc.if_else(runtime, pa.scalar("runtime"), pc.if_else(op, pa.scalar("cpu_op"), pa.scalar("user_annotation")))
    kind = pc.if_else(uncategorized, new, kind)
    return events.set_column(events.schema.get_field_index("kind"), "kind", pc.dictionary_encode(kind))


def _device_roles(process_names: dict[str, str]) -> dict[str, tuple[str, int, int | None]]:
    """pid -> (role, device, stream): ``stream`` (one stream), ``all``, ``memcpy`` (the aggregates), ``host``."""
    roles: dict[str, tuple[str, int, int | None]] = {}
    for pid, name in process_names.items():
        name = name.strip()
        m = DEVICE_PROCESS.match(name)
        if m:
            device = int(m.group("device"))
            if m.group("memcpy"):
                roles[pid] = ("memcpy", device, None)
            elif m.group("stream") == "all":
                roles[pid] = ("all", device, None)
            else:
                roles[pid] = ("stream", device, int(m.group("stream")))
            continue
        m = HOST_PROCESS.match(name)
        if m:
            roles[pid] = ("host", int(m.group("device")), None)
    if not any(r[0] in ("stream", "all", "memcpy") for r in roles.values()):
        return {}
    return roles


def _map_devices(events: pa.Table, roles: dict[str, tuple[str, int, int | None]],
                 node: pa.Array) -> tuple[pa.Table, int]:
    """Device rows re-kinded with their device and stream, aggregate copies dropped, launches linked."""
    pid = events["pid"].cast(pa.string()).to_pylist()
    name = events["name"].cast(pa.string()).to_pylist()
    ts = events["ts_ns"].to_pylist()
    dur = events["dur_ns"].to_pylist()
    kind = events["kind"].cast(pa.string()).to_pylist()
    device = events["device"].to_pylist()
    stream = events["stream"].to_pylist()
    correlation = events["correlation"].to_pylist()
    ids = events["event_id"].to_pylist()
    nodes = node.to_pylist()

    def key(i: int, dev: int) -> tuple:
        return (dev, ts[i], dur[i], name[i], nodes[i])

    # Which records TF filed under each aggregate, by (device, time, op, node): a row of the memcpy aggregate
    # is a copy even when it is named for the op that issued it (Assign, ConcatV2).
    in_memcpy: dict[tuple, int] = {}
    on_streams: set[tuple] = set()
    for i, p in enumerate(pid):
        role = roles.get(p)
        if role is None:
            continue
        if role[0] == "memcpy":
            k = key(i, role[1])
            in_memcpy[k] = in_memcpy.get(k, 0) + 1
        elif role[0] == "stream":
            on_streams.add(key(i, role[1]))
    keep = [True] * len(pid)
    dropped = 0
    device_rows: list[int] = []
    for i, p in enumerate(pid):
        role = roles.get(p)
        if role is None or role[0] == "host" or kind[i] not in ("cpu_op", "other"):
            continue
        r, dev, s = role
        k = key(i, dev)
        if r in ("all", "memcpy"):
            if k in on_streams:  # the same record is on its own stream: count it there
                keep[i] = False
                dropped += 1
                continue
            s = UNKNOWN_STREAM
        if r == "memcpy" or k in in_memcpy or _MEMCPY_NAME.match(name[i] or ""):
            kind[i] = "memcpy"
        elif _MEMSET_NAME.match(name[i] or ""):
            kind[i] = "memset"
        else:
            kind[i] = "kernel"
        device[i], stream[i] = dev, s
        device_rows.append(i)
    _link(device_rows, roles, pid, kind, ts, nodes, ids, correlation, device)
    table = events.set_column(events.schema.get_field_index("kind"), "kind",
                              pa.array(kind, pa.string()).dictionary_encode())
    for column, values in (("device", device), ("stream", stream), ("correlation", correlation)):
        table = table.set_column(table.schema.get_field_index(column), column, pa.array(values, pa.int64()))
    if dropped:
        table = table.filter(pa.array(keep, pa.bool_()))
    return table, dropped


def _link(device_rows: list[int], roles: dict, pid: list, kind: list, ts: list, nodes: list, ids: list,
          correlation: list, device: list) -> None:
    """Give each device row and its host op (same node, same device, the last start at or before the device row's)
    one correlation id: the host row's event id. Rows that already have a correlation id keep it."""
    hosts: dict[tuple, list[tuple[int, int]]] = {}
    for i, p in enumerate(pid):
        role = roles.get(p)
        if role is not None and role[0] == "host" and kind[i] == "cpu_op" and nodes[i]:
            hosts.setdefault((role[1], nodes[i]), []).append((ts[i], i))
    for runs in hosts.values():
        runs.sort()
    for i in device_rows:
        if correlation[i] is not None or not nodes[i]:
            continue
        found = hosts.get((device[i], nodes[i]))
        if not found:
            continue
        at = bisect.bisect_right(found, (ts[i], len(pid))) - 1
        if at < 0:
            continue
        host = found[at][1]
        if correlation[host] is None:
            correlation[host] = ids[host]
        correlation[i] = correlation[host]
