"""Reading what ``opscope export`` wrote, independently of the writer: per-name slice totals of a Chrome JSON read
back by opscope and of a Perfetto protobuf parsed with perfetto's own message classes."""

from __future__ import annotations

import subprocess
from collections import Counter, defaultdict
from pathlib import Path

from opscope.model.trace import Trace
from support.timing import limit


def totals(trace: Trace, skip_kinds: tuple[str, ...] = ("profiler",)) -> tuple[Counter, Counter]:
    """Calls and summed duration per (kind, name), leaving out ``skip_kinds`` (opscope's own marks read back as
    the profiler's spans)."""
    e = trace.events
    calls: Counter = Counter()
    dur: Counter = Counter()
    for k, n, d in zip(e["kind"].to_pylist(), e["name"].to_pylist(), e["dur_ns"].to_pylist()):
        if k in skip_kinds:
            continue
        calls[(k, n)] += 1
        dur[(k, n)] += d
    return calls, dur


def perfetto_slices(path: Path) -> dict:
    """Parse a Perfetto trace: slices (name -> [(track name, ts, dur, flows, terminating flows)]), instants by name,
    counter values by track name, track names by uuid."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    names: dict[int, str] = {}
    counters: dict[str, list] = defaultdict(list)
    opened: dict[int, list] = defaultdict(list)
    slices: dict[str, list] = defaultdict(list)
    instants: Counter = Counter()
    order = []
    for i, p in enumerate(trace.packet):
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            names[d.uuid] = d.name or d.thread.thread_name or d.process.process_name
        elif p.HasField("track_event"):
            order.append((p.timestamp, i, p))
    order.sort(key=lambda x: (x[0], x[1]))  # Perfetto sorts by time; ties keep the order written
    for ts, _, p in order:
        e = p.track_event
        if e.type == e.TYPE_SLICE_BEGIN:
            opened[e.track_uuid].append((e.name, ts, list(e.flow_ids), list(e.terminating_flow_ids)))
        elif e.type == e.TYPE_SLICE_END:
            name, start, flows, ends = opened[e.track_uuid].pop()
            slices[name].append((names[e.track_uuid], start, ts - start, flows, ends))
        elif e.type == e.TYPE_INSTANT:
            instants[e.name] += 1
        elif e.type == e.TYPE_COUNTER:
            counters[names[e.track_uuid]].append((ts, e.double_counter_value))
    assert not any(opened.values()), "a slice was begun and never ended"
    return {"slices": slices, "instants": instants, "counters": counters, "names": names}


def export(trace_path: Path, out: Path, *extra: str, fmt: str = "chrome") -> subprocess.CompletedProcess:
    import os
    import sys

    return subprocess.run([sys.executable, "-m", "opscope.cli", "export", str(trace_path), "--to", fmt, "-o", str(out),
                           *extra], capture_output=True, text=True, env={**os.environ}, timeout=limit(300))
