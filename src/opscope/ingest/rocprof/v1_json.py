"""rocprof v1's ``results.json`` (``rocprof --hip-trace``/``--sys-trace``): a Chrome trace with rocprof's own rows.

rocprof writes the Chrome trace-event format, but with no categories: what an event is comes from its process,
named by ``M`` events at the top of the file: ``CPU HIP API`` (HIP calls -> ``runtime``), ``CPU HSA API``
(likewise), ``COPY`` (copies -> ``memcpy``; ``FillBuffer`` -> ``memset``), ``GPU<n>`` (kernels on device n) and
``Markers and Ranges`` (roctx -> ``user_annotation``). ``ts``/``dur`` are strings in whole microseconds; the exact
times are the ``args.BeginNs``/``args.EndNs`` strings (ns, boot clock), which we use. Device rows name their queue
(``args.queue-id``, the stream) and device (``args.dev-id``). A launch and its device work are joined by a
``DataFlow`` flow: the ``s`` end lies on the HIP thread, inside the call that issued the work, the ``t`` end at
the start of the device row; both rows get one ``correlation`` id from it. ``otherData`` is rocminfo's output: its
GPU agents become ``device_properties``.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path
from typing import Any

from opscope.model.trace import Trace

FORMAT = "rocprof_json"
#: rocprof's process names (its only way of saying what a row is).
HIP_PROCESS = "CPU HIP API"
HSA_PROCESS = "CPU HSA API"
COPY_PROCESS = "COPY"
MARKER_PROCESS = "Markers and Ranges"
GPU_PROCESS = re.compile(r"^GPU(\d+)$")
_SNIFF = re.compile(rb'"name"\s*:\s*"(?:CPU HIP API|CPU HSA API|Markers and Ranges|COPY|GPU\d+)"')


class RocprofJsonReader:
    """rocprof v1 ``results.json``: sniffed by its process names and the ``BeginNs`` args beside them."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        return (text.startswith(b"{") and b'"traceEvents"' in head and b'"BeginNs"' in head
                and _SNIFF.search(head) is not None)

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.chrome import reader

        trace = reader.read(path, progress=progress, keep_args=True)
        trace = map_trace(trace)
        if not keep_args:
            trace = trace.replace(args=trace.args.slice(0, 0))
        return trace


READER = RocprofJsonReader()


def map_trace(trace: Trace) -> Trace:
    """The Chrome reader's trace of a rocprof file, with rocprof's rows as the model's kinds at exact times."""
    import pyarrow as pa
    import pyarrow.compute as pc

    meta = trace.metadata
    meta["format"] = FORMAT
    meta["tool"] = "rocprof"
    process_names: dict[str, str] = meta.get("process_names") or {}
    roles: dict[str, tuple[str, int | None]] = {}
    unmapped: dict[str, int] = {}
    for process, label in process_names.items():
        m = GPU_PROCESS.match(label.strip())
        if m:
            roles[process] = ("kernel", int(m.group(1)))
        elif label == COPY_PROCESS:
            roles[process] = ("memcpy", None)
        elif label in (HIP_PROCESS, HSA_PROCESS):
            roles[process] = ("runtime", None)
        elif label == MARKER_PROCESS:
            roles[process] = ("user_annotation", None)

    events = trace.events
    n = events.num_rows
    pid = events["pid"].cast(pa.string()).to_pylist()
    kind = events["kind"].cast(pa.string()).to_pylist()
    name = events["name"].cast(pa.string()).to_pylist()
    ts = events["ts_ns"].to_pylist()
    dur = events["dur_ns"].to_pylist()
    tid = events["tid"].cast(pa.string()).to_pylist()
    device = events["device"].to_pylist()
    stream = events["stream"].to_pylist()
    correlation = events["correlation"].to_pylist()
    fields = _arg_fields(trace, events, ("BeginNs", "EndNs", "dev-id", "queue-id", "stream-id"))
    begin, end, dev_id, queue_id, stream_id = (fields[k] for k in ("BeginNs", "EndNs", "dev-id", "queue-id",
                                                                  "stream-id"))
    for i in range(n):
        role = roles.get(pid[i])
        if role is None:
            unmapped[process_names.get(pid[i], pid[i])] = unmapped.get(process_names.get(pid[i], pid[i]), 0) + 1
            continue
        k, dev = role
        if k == "memcpy" and "fill" in (name[i] or "").lower():
            k = "memset"
        kind[i] = k
        if k in ("kernel", "memcpy", "memset"):
            device[i] = dev if dev is not None else _int(dev_id[i])
            s = _int(stream_id[i])
            stream[i] = s if s is not None else _int(queue_id[i])
        else:
            device[i] = stream[i] = None

    linked = _link_flows(trace, roles, pid, tid, kind, ts, dur, correlation)
    # roctx ranges and HIP calls are one process's threads, which rocprof files under two made-up pids: one pid
    # lets a range hold the calls made inside it (kernel -> launch -> annotation links)
    api_pids = [p for p, r in roles.items() if r[0] == "runtime" and process_names.get(p) == HIP_PROCESS]
    marker_pids = {p for p, r in roles.items() if r[0] == "user_annotation"}
    pid_column = None
    if api_pids and marker_pids:
        host = api_pids[0]
        pid = [host if p in marker_pids else p for p in pid]
        pid_column = pa.array(pid, pa.string()).dictionary_encode()
        process_names = dict(process_names)
        process_names[host] = f"{HIP_PROCESS} + {MARKER_PROCESS}"
        meta["process_names"] = process_names

    # Exact times from args (ns); the us strings are the fallback, moved onto the same clock by the file's offset.
    offsets = sorted(b - t for b, t in zip(begin, ts) if b is not None and t is not None)
    offset = offsets[len(offsets) // 2] if offsets else 0
    no_exact = 0
    for i in range(n):
        b, e = begin[i], end[i]
        if b is not None and e is not None and e >= b:
            ts[i], dur[i] = b, e - b
        else:
            no_exact += 1
            if ts[i] is not None:
                ts[i] += offset

    columns = {"kind": pa.array(kind, pa.string()).dictionary_encode(), "ts_ns": pa.array(ts, pa.int64()),
               "dur_ns": pa.array(dur, pa.int64()), "device": pa.array(device, pa.int64()),
               "stream": pa.array(stream, pa.int64()), "correlation": pa.array(correlation, pa.int64())}
    if pid_column is not None:
        columns["pid"] = pid_column
    for column, values in columns.items():
        events = events.set_column(events.schema.get_field_index(column), column, values)
    flows = trace.flows
    if flows.num_rows and offset:
        flows = flows.set_column(flows.schema.get_field_index("ts_ns"), "ts_ns", pc.add(flows["ts_ns"], offset))
    trace = trace.replace(events=events, flows=flows)

    meta["device_properties"] = device_properties(meta.get("header") or {})
    # rocprof opens its event array with an empty object ``{}``: not a loss worth a warning
    meta["warnings"] = [w for w in meta.get("warnings", [])
                        if not (w.get("problem") == "events of phase 'None' not modelled (skipped)"
                                and w.get("count") == 1)]
    if no_exact:
        trace.warn("rocprof events without args.BeginNs/EndNs (times from the microsecond ts/dur)", no_exact)
    for process, count in sorted(unmapped.items()):
        trace.warn(f"rocprof process {process!r} not known (kept as kind 'cpu_op')", count)
    meta["rocprof_links"] = linked
    return trace


def _int(v: Any) -> int | None:
    from opscope.ingest.numbers import int64

    return int64(v, whole=True)


def _arg_fields(trace: Trace, events, keys: tuple[str, ...]) -> dict[str, list]:
    """Each event's string-valued args ``keys`` (rocprof writes every arg as a string), aligned with the rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    args = trace.args
    n = events.num_rows
    if args.num_rows == 0:
        return {k: [None] * n for k in keys}
    where = pc.index_in(events["event_id"], value_set=args["event_id"].combine_chunks())
    text = pc.take(args["args"].combine_chunks(), where)
    out = {}
    for key in keys:
        pattern = r'"' + re.escape(key) + r'"\s*:\s*"?(?P<v>-?\d+)"?'
        found = pc.extract_regex(text, pattern)
        values = pc.struct_field(found, "v")
        values = pc.if_else(pc.is_valid(found), values, pa.scalar(None, pa.string()))
        # 18 digits at most: beyond int64 (hostile) is no value, not an overflow
        out[key] = [None if v is None or len(v) > 18 else int(v) for v in values.to_pylist()]
    return out


def _link_flows(trace: Trace, roles: dict, pid: list, tid: list, kind: list, ts: list, dur: list,
                correlation: list) -> int:
    """Give a HIP call and the device rows its ``DataFlow`` flows point to one correlation id; the count linked.

    Times here are still rocprof's whole microseconds (the flows' clock): the ``s`` end is inside the call
    (inclusive: a kernel's flow starts where hipLaunchKernel ends), the ``t`` end is the device row's start.
    """
    flows = trace.flows
    if flows.num_rows == 0:
        return 0
    calls: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    starts: dict[tuple[str, str, int], int] = {}
    for i, p in enumerate(pid):
        if ts[i] is None or dur[i] is None:
            continue
        if kind[i] == "runtime":
            calls.setdefault((p, tid[i]), []).append((ts[i], -dur[i], i))
        elif kind[i] in ("kernel", "memcpy", "memset"):
            starts.setdefault((p, tid[i], ts[i]), i)
    for thread_calls in calls.values():
        thread_calls.sort()
    keys = {k: [r[0] for r in rows] for k, rows in calls.items()}
    ends: dict[str, dict[str, Any]] = {}
    for fid, phase, t, p, th in zip(*(flows[c].cast("string").to_pylist() if c != "ts_ns" else flows[c].to_pylist()
                                      for c in ("id", "phase", "ts_ns", "pid", "tid"))):
        if fid is None or t is None:
            continue
        ends.setdefault(fid, {})[phase] = (t, p or "", th or "")
    linked = 0
    for fid, pair in ends.items():
        if "s" not in pair or "t" not in pair:
            continue
        (st, sp, sth), (tt, tp, tth) = pair["s"], pair["t"]
        target = starts.get((tp, tth, tt))
        rows = calls.get((sp, sth))
        if target is None or not rows:
            continue
        at = bisect.bisect_right(keys[(sp, sth)], st) - 1
        call = None
        for j in range(at, max(at - 64, -1), -1):  # the latest-starting call that still contains st: the innermost
            start, neg_dur, row = rows[j]
            if start - neg_dur >= st:
                call = row
                break
        if call is None:
            continue
        if correlation[call] is None:
            correlation[call] = _flow_number(fid, call)
        correlation[target] = correlation[call]
        linked += 1
    return linked


def _flow_number(fid: str, row: int) -> int:
    """The flow id as the correlation id (rocprof's ids are integers); the launch row's number otherwise."""
    v = _int(fid)
    return v if v is not None and 0 <= v < 1 << 62 else (1 << 62) + row


_AGENT_KEY = re.compile(r"^Agent(\d+)\.(Name|MarketingName|DeviceType|ComputeUnit|PoolInfo\.Pool1\.Size"
                        r"|PoolInfo\.Pool1\.Segment|Uuid)$")


def device_properties(header: dict) -> list[dict[str, Any]]:
    """The GPU agents of rocminfo's output (``otherData``), numbered 0.. as rocprof numbers its GPUs."""
    other = header.get("otherData")
    if not isinstance(other, dict):
        return []
    agents: dict[int, dict[str, str]] = {}
    for key, value in other.items():
        m = _AGENT_KEY.match(str(key))
        if m and isinstance(value, str):
            agents.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out: list[dict[str, Any]] = []
    for _, a in sorted(agents.items()):
        if a.get("DeviceType") != "GPU":
            continue
        p: dict[str, Any] = {"id": len(out), "name": a.get("MarketingName") or a.get("Name"), "gfx": a.get("Name")}
        cu = re.match(r"\d+", a.get("ComputeUnit", ""))
        if cu:
            p["numSms"] = int(cu.group())
        size = re.match(r"(\d+)(?:\([^)]*\))?KB$", a.get("PoolInfo.Pool1.Size", ""))
        if size and a.get("PoolInfo.Pool1.Segment") == "GLOBAL":
            p["totalGlobalMem"] = int(size.group(1)) * 1024
        out.append(p)
    return out
