"""Perfetto's native protobuf trace, built with the ``perfetto`` package's own TraceProtoBuilder (the ``view``
extra): a track per process, thread and device stream (TrackDescriptors), slices as TrackEvent BEGIN/END pairs,
launch -> device work arrows as flow ids, counter tracks for counters and memory, instants for markers, and the
opscope tracks (steps, findings).

A track holds properly nested slices only: an event that overlaps the one it starts in without ending inside it
goes to an overflow track beside its own ("stream 7 (overlap 1)"), so every slice keeps its full duration.
Packets are written in batches (one builder per batch), so memory stays near one batch.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

from opscope.errors import UsageError

if TYPE_CHECKING:
    from opscope.render.export.plan import Plan

SEQUENCE_ID = 0x0F5C
BATCH_PACKETS = 20_000
_INT32 = (1 << 31) - 1
_COLUMNS = ["kind", "name", "cat", "ts_ns", "dur_ns", "pid", "tid", "correlation", "stream", "shapes"]
INSTALL = "pip install 'opscope[view]'"


def require() -> None:
    """A one-line UsageError when the ``perfetto`` package is not installed."""
    try:
        import perfetto.protos.perfetto.trace.perfetto_trace_pb2  # noqa: F401
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder  # noqa: F401
    except ImportError:
        raise UsageError(f"--to perfetto needs the perfetto package: {INSTALL}") from None


class _Out:
    """Packets in batches: each batch one TraceProtoBuilder, serialized and appended (a trace is a sequence of
    packets, so concatenated Trace messages are one Trace)."""

    def __init__(self, stream: IO[bytes], shift: int = 0) -> None:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        self.shift = shift  # Perfetto's timestamps are unsigned: a trace with times before 0 is moved up

        self._new = TraceProtoBuilder
        self.stream = stream
        self.builder = TraceProtoBuilder()
        self.count = 0

    def packet(self, ts: int | None = None) -> Any:
        if self.count >= BATCH_PACKETS:
            self.flush()
        self.count += 1
        p = self.builder.add_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if ts is not None:
            p.timestamp = ts + self.shift
        return p

    def flush(self) -> None:
        if self.count:
            self.stream.write(self.builder.serialize())
        self.builder = self._new()
        self.count = 0


class _Lanes:
    """The nesting stacks of one track and its overflow tracks; ``place`` returns the lane uuid for a slice and
    emits the ENDs of the slices that finished before it."""

    def __init__(self, writer: _Writer, uuid: int, name: str, parent: int | None) -> None:
        self.w, self.name, self.parent = writer, name, parent
        self.uuids = [uuid]
        self.stacks: list[list[int]] = [[]]

    def place(self, ts: int, end: int) -> int:
        for lane, stack in enumerate(self.stacks):
            self._pop(lane, ts)
            if not stack or end <= stack[-1]:
                stack.append(end)
                return self.uuids[lane]
        uuid = self.w.track(f"{self.name} (overlap {len(self.stacks)})", parent=self.parent,
                            rank=len(self.stacks))
        self.uuids.append(uuid)
        self.stacks.append([end])
        return uuid

    def _pop(self, lane: int, ts: int) -> None:
        stack = self.stacks[lane]
        while stack and stack[-1] <= ts:
            self.w.end(stack.pop(), self.uuids[lane])

    def close(self) -> None:
        for lane in range(len(self.stacks)):
            self._pop(lane, 1 << 62)


class _Writer:
    def __init__(self, out: _Out) -> None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        self.pb = pb
        self.out = out
        self.next_uuid = 1
        self.opscope = self.steps = self.findings = 0
        self.process_uuid: dict[str, int] = {}

    def track(self, name: str, *, parent: int | None = None, rank: int | None = None, pid: int | None = None,
              tid: int | None = None, counter: bool = False) -> int:
        uuid = self.next_uuid
        self.next_uuid += 1
        d = self.out.packet().track_descriptor
        d.uuid = uuid
        if parent is not None:
            d.parent_uuid = parent
        if tid is not None and pid is not None:
            d.thread.pid, d.thread.tid, d.thread.thread_name = pid, tid, name
        elif pid is not None:
            d.process.pid, d.process.process_name = pid, name
        else:
            d.name = name
        if rank is not None:
            d.sibling_order_rank = rank
        if counter:
            d.counter.SetInParent()
        d.child_ordering = self.pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
        return uuid

    def begin(self, ts: int, uuid: int, name: str, cat: str | None, annotations: dict[str, Any] | None = None,
              flows: list[int] | None = None, ends: list[int] | None = None, instant: bool = False) -> None:
        p = self.out.packet(ts)
        e = p.track_event
        e.type = e.TYPE_INSTANT if instant else e.TYPE_SLICE_BEGIN
        e.track_uuid = uuid
        e.name = name
        if cat:
            e.categories.append(cat)
        if flows:
            e.flow_ids.extend(flows)
        if ends:
            e.terminating_flow_ids.extend(ends)
        if annotations:
            for k, v in annotations.items():
                a = e.debug_annotations.add()
                a.name = k
                if isinstance(v, int):
                    a.int_value = v
                else:
                    a.string_value = str(v)

    def end(self, ts: int, uuid: int) -> None:
        e = self.out.packet(ts).track_event
        e.type = e.TYPE_SLICE_END
        e.track_uuid = uuid

    def counter(self, ts: int, uuid: int, value: float) -> None:
        e = self.out.packet(ts).track_event
        e.type = e.TYPE_COUNTER
        e.track_uuid = uuid
        e.double_counter_value = value


def write(plan: Plan, stream: IO[bytes]) -> None:
    out = _Out(stream, _shift(plan))
    w = _Writer(out)
    lanes = _tracks(plan, w)
    _events(plan, w, lanes)
    _counters(plan, w)
    _marks(plan, w)
    for lane in lanes.values():
        lane.close()
    out.flush()


def _shift(plan) -> int:
    """How far to move every time so that none is negative (0 for any real trace)."""
    import pyarrow.compute as pc

    lows = [pc.min(plan.trace.select(["ts_ns"])["ts_ns"].take(plan.rows)).as_py()]
    lows += [pc.min(t["ts_ns"]).as_py() for t in (plan.counters, plan.memory) if t.num_rows]
    lows += [m.ts_ns for m in plan.marks]
    low = min(v for v in lows if v is not None)
    return -low if low < 0 else 0


def _tracks(plan, w: _Writer) -> dict[tuple[str, str], _Lanes]:
    """A TrackDescriptor per process (host processes first, then devices), thread and stream; the opscope tracks."""
    lay = plan.layout
    lanes: dict[tuple[str, str], _Lanes] = {}
    w.opscope = w.track("opscope", rank=-1)
    w.steps = w.track("steps", parent=w.opscope, rank=0)
    w.findings = w.track("opscope findings", parent=w.opscope, rank=1)
    process_uuid: dict[str, int] = {}
    for p in sorted(lay.pid, key=lambda p: lay.process_sort[p]):
        name = lay.process_name[p]
        if p in lay.process_label and lay.process_label[p] not in name:
            name = f"{name} ({lay.process_label[p]})"
        n = lay.pid[p]
        host_pid = n if not lay.is_device(p) and 0 < n <= _INT32 else None
        process_uuid[p] = w.track(name, pid=host_pid, rank=lay.process_sort[p])
    for (p, t), n in sorted(lay.tid.items(), key=lambda kv: (lay.process_sort[kv[0][0]], lay.thread_sort[kv[0]])):
        pid = lay.pid[p]
        name = lay.thread_name[(p, t)]
        real = not lay.is_device(p) and 0 < pid <= _INT32 and 0 < n <= _INT32
        uuid = w.track(name, parent=process_uuid[p], rank=lay.thread_sort[(p, t)],
                       pid=pid if real else None, tid=n if real else None)
        lanes[(p, t)] = _Lanes(w, uuid, name, process_uuid[p])
    w.process_uuid = process_uuid
    return lanes


def _events(plan, w: _Writer, lanes: dict[tuple[str, str], _Lanes]) -> None:
    from opscope.render.export.chrome import category

    events = plan.trace.select(_COLUMNS)
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for k, (launch, device) in enumerate(zip(plan.links["launch_row"].to_pylist(),
                                             plan.links["device_row"].to_pylist())):
        starts.setdefault(launch, []).append(k + 1)
        ends.setdefault(device, []).append(k + 1)
    rows = plan.rows
    for start in range(0, len(rows), BATCH_PACKETS):
        chunk = rows.slice(start, BATCH_PACKETS)
        part = events.take(chunk)
        cols = {c: part[c].to_pylist() for c in _COLUMNS}
        ids = chunk.to_pylist()
        for i, row in enumerate(ids):
            kind = cols["kind"][i]
            key = (cols["pid"][i] or "", cols["tid"][i] or "")
            ts, dur = cols["ts_ns"][i], cols["dur_ns"][i]
            ann: dict[str, Any] = {"kind": kind}
            for c in ("correlation", "stream", "shapes"):
                if cols[c][i] is not None:
                    ann[c] = cols[c][i]
            lane = lanes[key]
            if kind == "marker":
                lane._pop(0, ts)
                w.begin(ts, lane.uuids[0], cols["name"][i] or "", category(kind, cols["cat"][i]), ann, instant=True)
                continue
            uuid = lane.place(ts, ts + dur)
            w.begin(ts, uuid, cols["name"][i] or "", category(kind, cols["cat"][i]), ann,
                    flows=starts.get(row), ends=ends.get(row))


def _counters(plan, w: _Writer) -> None:
    c = plan.counters
    tracks: dict[tuple, int] = {}
    if c.num_rows:
        for name, series, ts, pid, value in zip(*(c[k].to_pylist() for k in ("name", "series", "ts_ns", "pid",
                                                                              "value"))):
            key = (pid or "", name, series)
            if key not in tracks:
                tracks[key] = w.track(f"{name} {series}", parent=w.process_uuid[pid or ""],
                                      counter=True)
            w.counter(ts, tracks[key], value)
    m = plan.memory
    if m.num_rows:
        cols = {k: m[k].to_pylist() for k in ("ts_ns", "device_type", "device_id", "total_allocated",
                                                "total_reserved")}
        for i in range(m.num_rows):
            label = plan.device_names[(cols["device_type"][i], cols["device_id"][i])]
            for column, series in (("total_allocated", "allocated"), ("total_reserved", "reserved")):
                value = cols[column][i]
                if value is None:
                    continue
                key = ("opscope", label, series)
                if key not in tracks:
                    tracks[key] = w.track(f"memory {label} {series} (bytes)", parent=w.opscope,
                                          counter=True, rank=2 + len(tracks))
                w.counter(cols["ts_ns"][i], tracks[key], float(value))


def _marks(plan, w: _Writer) -> None:
    by_track = {"steps": _Lanes(w, w.steps, "steps", w.opscope),
                "findings": _Lanes(w, w.findings, "opscope findings", w.opscope)}
    for m in sorted(plan.marks, key=lambda m: (m.ts_ns, -m.dur_ns)):
        lane = by_track[m.track]
        uuid = lane.place(m.ts_ns, m.ts_ns + m.dur_ns)
        w.begin(m.ts_ns, uuid, m.name, "opscope", {k: v for k, v in m.args.items() if v is not None})
    for lane in by_track.values():
        lane.close()


__all__ = ["require", "write"]
