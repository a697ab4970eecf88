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
    """Parse a Perfetto trace: slices (name -> [(track name, ts, dur, flows, terminating flows, track uuid)]),
    instants by name,
    counter values by track name, track names by uuid, each track's parent uuid, the categories and annotations of
    the slices by name (``cats``, ``annotations``), and ``interned``: how many strings each interned table defined.

    Interned strings are resolved as Perfetto does, per sequence: a packet flagged SEQ_INCREMENTAL_STATE_CLEARED
    starts the sequence's tables afresh, ``interned_data`` adds to them, and a packet that refers to them must come
    after a clear and say it needs the state (SEQ_NEEDS_INCREMENTAL_STATE)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    names: dict[int, str] = {}
    parents: dict[int, int] = {}
    counters: dict[str, list] = defaultdict(list)
    opened: dict[int, list] = defaultdict(list)
    slices: dict[str, list] = defaultdict(list)
    cats: dict[str, set] = defaultdict(set)
    annotations: dict[str, list] = defaultdict(list)
    instants: Counter = Counter()
    tables: dict[int, dict[str, dict[int, str]]] = {}
    defined: Counter = Counter()
    order = []
    for i, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            tables[seq] = defaultdict(dict)
        if p.HasField("interned_data"):
            assert seq in tables, "interned data before the sequence's state was cleared"
            for field, entries in p.interned_data.ListFields():
                for entry in entries:
                    text = entry.str.decode() if field.name == "debug_annotation_string_values" else entry.name
                    assert entry.iid not in tables[seq][field.name], f"{field.name} iid {entry.iid} defined twice"
                    tables[seq][field.name][entry.iid] = text
                    defined[field.name] += 1
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            names[d.uuid] = d.name or d.thread.thread_name or d.process.process_name
            if d.HasField("parent_uuid"):
                parents[d.uuid] = d.parent_uuid
        elif p.HasField("track_event"):
            e = p.track_event
            interned = e.HasField("name_iid") or len(e.category_iids) or any(a.HasField("name_iid")
                                                                              for a in e.debug_annotations)
            if interned:
                assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, "interned ids without the flag"
            t = tables.get(seq, {})
            name = t["event_names"][e.name_iid] if e.HasField("name_iid") else e.name
            cat = [t["event_categories"][c] for c in e.category_iids] + list(e.categories)
            ann = {}
            for a in e.debug_annotations:
                key = t["debug_annotation_names"][a.name_iid] if a.HasField("name_iid") else a.name
                value = (t["debug_annotation_string_values"][a.string_value_iid] if a.HasField("string_value_iid")
                         else getattr(a, a.WhichOneof("value")) if a.WhichOneof("value") else None)
                ann[key] = value
            order.append((p.timestamp, i, e, name, cat, ann))
    order.sort(key=lambda x: (x[0], x[1]))  # Perfetto sorts by time; ties keep the order written
    for ts, _, e, name, cat, ann in order:
        if e.type == e.TYPE_SLICE_BEGIN:
            opened[e.track_uuid].append((name, ts, list(e.flow_ids), list(e.terminating_flow_ids)))
            cats[name].update(cat)
            annotations[name].append(ann)
        elif e.type == e.TYPE_SLICE_END:
            name, start, flows, ends = opened[e.track_uuid].pop()
            slices[name].append((names[e.track_uuid], start, ts - start, flows, ends, e.track_uuid))
        elif e.type == e.TYPE_INSTANT:
            instants[name] += 1
        elif e.type == e.TYPE_COUNTER:
            counters[names[e.track_uuid]].append((ts, e.double_counter_value))
    assert not any(opened.values()), "a slice was begun and never ended"
    return {"slices": slices, "instants": instants, "counters": counters, "names": names, "parents": parents,
            "cats": cats, "annotations": annotations, "interned": defined}


def root_name(parsed: dict, uuid: int) -> str:
    """The name of the top track above ``uuid`` (its process, for a thread's track)."""
    parents = parsed["parents"]
    while uuid in parents:
        uuid = parents[uuid]
    return parsed["names"][uuid]


def export(trace_path: Path, out: Path, *extra: str, fmt: str = "chrome") -> subprocess.CompletedProcess:
    import os
    import sys

    return subprocess.run([sys.executable, "-m", "opscope.cli", "export", str(trace_path), "--to", fmt, "-o", str(out),
                           *extra], capture_output=True, text=True, env={**os.environ}, timeout=limit(300))
