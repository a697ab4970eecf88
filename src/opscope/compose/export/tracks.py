"""Where each exported event goes: integer process and thread ids, their names and their order (host processes
first, then devices by number, opscope's own tracks on top): the plan's :class:`Layout`, which the Chrome and
Perfetto writers share."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model.schema import GPU_KINDS, kind_mask
from opscope.model.trace import Trace
from opscope.render.export.plan import Layout

_INT = re.compile(r"-?\d{1,15}")
#: Sort index of device processes: after every host process.
DEVICE_SORT_BASE = 1 << 20
#: The names of a process and a thread the trace gives no id (some formats have none).
NO_PROCESS = "process without an id"
NO_THREAD = "thread without an id"


def layout(trace: Trace, rows: pa.Array, extra_pids: list[str]) -> Layout:
    """The tracks of the kept events (``rows``) and of the processes in ``extra_pids`` (counters, memory)."""
    events = trace.select(["kind", "pid", "tid", "device", "stream"]).take(rows)
    gpu = kind_mask(events, GPU_KINDS) if events.num_rows else pa.chunked_array([], pa.bool_())
    table = pa.table({"pid": events["pid"].cast(pa.string()), "tid": events["tid"].cast(pa.string()),
                      "gpu": pc.cast(gpu, pa.int8()), "device": events["device"], "stream": events["stream"]})
    threads = table.group_by(["pid", "tid"], use_threads=False).aggregate(
        [("gpu", "max"), ("device", "min"), ("stream", "min")]).to_pylist()
    names = trace.metadata.get("process_names") or {}
    labels = trace.metadata.get("process_labels") or {}
    thread_names = trace.metadata.get("thread_names") or {}
    out = Layout()
    pids = sorted({t["pid"] or "" for t in threads} | set(extra_pids), key=_natural)
    # A process with device work is a device's (Kineto puts a stray host thread in GPU 0's pid 0 at times).
    for t in threads:
        if t["gpu_max"] and t["device_min"] is not None:
            dev = out.device_of.get(t["pid"])
            out.device_of[t["pid"]] = t["device_min"] if dev is None else min(dev, t["device_min"])
    out.pid = _numbered(pids)
    for i, p in enumerate(pids):
        name = names.get(p) if isinstance(names, dict) else None
        if p in out.device_of:
            out.process_sort[p] = DEVICE_SORT_BASE + out.device_of[p]
            out.process_name[p] = name or f"GPU {out.device_of[p]}"
        else:
            out.process_sort[p] = i
            out.process_name[p] = name or (f"process {p}" if p else NO_PROCESS)
        if isinstance(labels, dict) and labels.get(p):
            out.process_label[p] = str(labels[p])
    by_pid: dict[str, list[dict]] = {}
    for t in threads:
        by_pid.setdefault(t["pid"] or "", []).append(t)
    for p, ts in by_pid.items():
        ts.sort(key=lambda t: (t["gpu_max"], t["stream_min"] if t["stream_min"] is not None else -1,
                               _natural(t["tid"] or "")))
        numbers = _numbered([t["tid"] or "" for t in ts])
        for i, t in enumerate(ts):
            key = (p, t["tid"] or "")
            out.tid[key] = numbers[key[1]]
            out.thread_sort[key] = i
            given = thread_names.get(f"{p}/{key[1]}") if isinstance(thread_names, dict) else None
            if given and str(given).strip():
                out.thread_name[key] = str(given).strip()
            elif t["gpu_max"] and t["stream_min"] is not None:
                out.thread_name[key] = f"stream {t['stream_min']}"
            else:
                out.thread_name[key] = f"thread {key[1]}" if key[1] else NO_THREAD
            out.track_name[key] = _track_name(out, p, out.thread_name[key])
    out.opscope_pid = max(list(out.pid.values()) + [0]) + 1
    return out


def _track_name(out: Layout, pid: str, thread: str) -> str:
    """A thread's name as a track shows it alone: a device's stream with its device ("GPU 0 stream 7")."""
    if pid in out.device_of and not thread.startswith("GPU "):
        return f"GPU {out.device_of[pid]} {thread}"
    return thread


def _numbered(ids: list[str]) -> dict[str, int]:
    """Each id as an integer: itself when it is one, else a new number above all of them."""
    out: dict[str, int] = {}
    used: set[int] = set()
    for i in ids:
        if _INT.fullmatch(i) and int(i) not in used:  # "07" after "7" gets a number of its own
            out[i] = int(i)
            used.add(out[i])
    next_free = max(list(out.values()) + [0]) + 1
    for i in ids:
        if i not in out:
            out[i], next_free = next_free, next_free + 1
    return out


def _natural(text: str) -> tuple:
    return (0, int(text), "") if _INT.fullmatch(text) else (1, 0, text)
