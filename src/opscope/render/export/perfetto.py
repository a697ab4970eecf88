"""Perfetto's native protobuf trace, built with the ``perfetto`` package's own TraceProtoBuilder (the ``view``
extra): a track per process, thread and device stream (TrackDescriptors, each named after its process, thread or
"GPU 0 stream 7"), slices as TrackEvent BEGIN/END pairs, launch -> device work arrows as flow ids, counter tracks
for counters and for each device's memory (under the device's process), instants for markers, and the opscope
tracks (steps, findings).

Strings that repeat are interned: event names, categories, annotation names and the text values of annotations are
written once each, in the ``interned_data`` of the packet that first uses them, and events refer to them by id.
All packets are one sequence: its first packet says the incremental state is cleared, every packet that refers to
an interned string says it needs that state (Perfetto's ``sequence_flags``).

A job (:class:`~opscope.render.export.plan.JobPlan`) is written rank by rank into the same sequence, each rank's
times moved onto the reference rank's clock by its offset, its tracks named "rank N ...".

A track holds properly nested slices only: an event that overlaps the one it starts in without ending inside it
goes to an overflow track beside its own ("GPU 0 stream 7 (overlap 1)"), so every slice keeps its full duration.
Packets are written in batches (one builder per batch), so memory stays near one batch.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

from opscope.errors import UsageError

if TYPE_CHECKING:
    from opscope.render.export.plan import JobPlan, Plan

SEQUENCE_ID = 0x0F5C
BATCH_PACKETS = 20_000
_INT32 = (1 << 31) - 1
_COLUMNS = ["kind", "name", "cat", "ts_ns", "dur_ns", "pid", "tid", "correlation", "stream", "shapes"]
INSTALL = "pip install 'opscope[view]'"
#: Annotations whose text values repeat from event to event: interned like the names.
_INTERNED_VALUES = ("kind", "shapes")


def _enums() -> tuple[int, int, int]:
    """The protobuf enum values the hot path sets, read once from the package's classes."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    return (pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT)


def require() -> None:
    """A one-line UsageError when the ``perfetto`` package is not installed."""
    try:
        import perfetto.protos.perfetto.trace.perfetto_trace_pb2  # noqa: F401
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder  # noqa: F401
    except ImportError:
        raise UsageError(f"--to perfetto needs the perfetto package: {INSTALL}") from None


class _Out:
    """Packets in batches: each batch one TraceProtoBuilder, serialized and appended (a trace is a sequence of
    packets, so concatenated Trace messages are one Trace). Every time is moved by ``shift``: the rank's clock
    offset taken off (a job), and up so that none is negative (Perfetto's timestamps are unsigned)."""

    def __init__(self, stream: IO[bytes], shift: int = 0) -> None:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        self.shift = shift
        self._new = TraceProtoBuilder
        self.stream = stream
        self.builder = TraceProtoBuilder()
        self.count = 0
        self.first = True

    def packet(self, ts: int | None = None) -> Any:
        if self.count >= BATCH_PACKETS:
            self.flush()
        self.count += 1
        p = self.builder.add_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:
            p.sequence_flags = p.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
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

        self.needs_state, self.slice_begin, self.instant = _enums()

        self.pb = pb
        self.out = out
        self.next_uuid = 1
        self.next_flow = 1
        self.top_tracks = 0
        self.opscope = self.steps = self.findings = 0
        self.process_uuid: dict[str, int] = {}
        # the interned strings of the sequence, by the InternedData field that defines them
        self.iids: dict[str, dict[str, int]] = {"event_names": {}, "event_categories": {},
                                                "debug_annotation_names": {}, "debug_annotation_string_values": {}}

    def order(self) -> int:
        """The next place among the top tracks of a job (its ranks one after the other)."""
        self.top_tracks += 1
        return self.top_tracks

    def iid(self, packet: Any, table: str, text: str) -> int:
        """The id of ``text`` in the sequence's ``table``, defined in ``packet`` when it is new."""
        known = self.iids[table]
        iid = known.get(text)
        if iid is None:
            iid = known[text] = len(known) + 1
            entry = getattr(packet.interned_data, table).add()
            entry.iid = iid
            if table == "debug_annotation_string_values":
                entry.str = text.encode("utf-8", "surrogateescape")
            else:
                entry.name = text
        return iid

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
        p.sequence_flags |= self.needs_state
        e = p.track_event
        e.type = self.instant if instant else self.slice_begin
        e.track_uuid = uuid
        iids = self.iids
        e.name_iid = iids["event_names"].get(name) or self.iid(p, "event_names", name)
        if cat:
            e.category_iids.append(iids["event_categories"].get(cat) or self.iid(p, "event_categories", cat))
        if flows:
            e.flow_ids.extend(flows)
        if ends:
            e.terminating_flow_ids.extend(ends)
        if annotations:
            keys, values = iids["debug_annotation_names"], iids["debug_annotation_string_values"]
            add = e.debug_annotations.add
            for k, v in annotations.items():
                a = add()
                a.name_iid = keys.get(k) or self.iid(p, "debug_annotation_names", k)
                if isinstance(v, bool):
                    a.bool_value = v
                elif isinstance(v, int):
                    a.int_value = v
                elif k in _INTERNED_VALUES:
                    text = str(v)
                    a.string_value_iid = values.get(text) or self.iid(p, "debug_annotation_string_values", text)
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


def write(doc: Plan | JobPlan, stream: IO[bytes]) -> None:
    """One trace's plan, or a job's (its ranks one after the other, on the reference clock)."""
    from opscope.render.export.plan import JobPlan

    if isinstance(doc, JobPlan):
        _write_job(doc, stream)
        return
    out = _Out(stream, _shift([_low(doc)]))
    _write_plan(doc, _Writer(out), None)
    out.flush()


def _write_job(job: JobPlan, stream: IO[bytes]) -> None:
    out = _Out(stream, _shift([low - r.offset_ns for r in job.ranks if (low := r.low_ns) is not None]))
    w = _Writer(out)
    base = out.shift
    for r in job.ranks:
        plan = r.build()
        out.shift = base - r.offset_ns
        _write_plan(plan, w, r.rank)
        del plan  # one rank held at a time
    out.flush()


def _write_plan(plan: Plan, w: _Writer, rank: int | None) -> None:
    lanes = _tracks(plan, w, rank)
    _events(plan, w, lanes)
    _counters(plan, w)
    _marks(plan, w)
    for lane in lanes.values():
        lane.close()


def _low(plan: Plan) -> int | None:
    """The plan's earliest time."""
    import pyarrow.compute as pc

    lows = [pc.min(plan.trace.select(["ts_ns"])["ts_ns"].take(plan.rows)).as_py()]
    lows += [pc.min(t["ts_ns"]).as_py() for t in (plan.counters, plan.memory) if t.num_rows]
    lows += [m.ts_ns for m in plan.marks]
    known = [v for v in lows if v is not None]
    return min(known) if known else None


def _shift(lows: list[int | None]) -> int:
    """How far to move every time so that none is negative (0 for any real trace)."""
    known = [v for v in lows if v is not None]
    low = min(known) if known else 0
    return -low if low < 0 else 0


def _tracks(plan: Plan, w: _Writer, rank: int | None) -> dict[tuple[str, str], _Lanes]:
    """A TrackDescriptor per process (host processes first, then devices), thread and stream; the opscope tracks.
    A job's tracks carry no process or thread ids (ranks on different hosts share ids; Perfetto would merge
    them): each is named with its rank."""
    lay = plan.layout
    prefix = f"rank {rank} " if rank is not None else ""
    lanes: dict[tuple[str, str], _Lanes] = {}
    w.opscope = w.track(f"{prefix}opscope", rank=-1 if rank is None else w.order())
    w.steps = w.track(f"{prefix}steps", parent=w.opscope, rank=0)
    w.findings = w.track(f"{prefix}opscope findings", parent=w.opscope, rank=1)
    process_uuid: dict[str, int] = {}
    for p in sorted(lay.pid, key=lambda p: lay.process_sort[p]):
        name = lay.process_name[p]
        if p in lay.process_label and lay.process_label[p] not in name:
            name = f"{name} ({lay.process_label[p]})"
        n = lay.pid[p]
        host_pid = n if rank is None and not lay.is_device(p) and 0 < n <= _INT32 else None
        order = lay.process_sort[p] if rank is None else w.order()  # a job: rank by rank, in each the layout's order
        process_uuid[p] = w.track(prefix + name, pid=host_pid, rank=order)
    for (p, t), n in sorted(lay.tid.items(), key=lambda kv: (lay.process_sort[kv[0][0]], lay.thread_sort[kv[0]])):
        pid = lay.pid[p]
        name = lay.track_name.get((p, t)) or lay.thread_name[(p, t)]
        real = rank is None and not lay.is_device(p) and 0 < pid <= _INT32 and 0 < n <= _INT32
        uuid = w.track(name, parent=process_uuid[p], rank=lay.thread_sort[(p, t)],
                       pid=pid if real else None, tid=n if real else None)
        lanes[(p, t)] = _Lanes(w, uuid, name, process_uuid[p])
    w.process_uuid = process_uuid
    return lanes


def _events(plan: Plan, w: _Writer, lanes: dict[tuple[str, str], _Lanes]) -> None:
    from opscope.render.export.chrome import category

    events = plan.trace.select(_COLUMNS)
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    first_flow = w.next_flow  # flow ids unique across a job's ranks
    for k, (launch, device) in enumerate(zip(plan.links["launch_row"].to_pylist(),
                                             plan.links["device_row"].to_pylist())):
        starts.setdefault(launch, []).append(first_flow + k)
        ends.setdefault(device, []).append(first_flow + k)
    w.next_flow += plan.links.num_rows
    rows = plan.rows
    for start in range(0, len(rows), BATCH_PACKETS):
        chunk = rows.slice(start, BATCH_PACKETS)
        part = events.take(chunk)
        cols = {c: _pylist(part[c]) for c in _COLUMNS}
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


def _pylist(column: Any) -> list:
    """A column's values; a dictionary column's texts made once per distinct value, not once per row."""
    import pyarrow as pa

    out: list = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            values = chunk.dictionary.to_pylist()
            out.extend(None if i is None else values[i] for i in chunk.indices.to_pylist())
        else:
            out.extend(chunk.to_pylist())
    return out


def _counters(plan: Plan, w: _Writer) -> None:
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
        cols = {k: m[k].to_pylist() for k in ("ts_ns", "pid", "device_type", "device_id", "total_allocated",
                                                "total_reserved")}
        for i in range(m.num_rows):
            device = (cols["device_type"][i], cols["device_id"][i])
            label = plan.device_names[device]
            # under the device's process; memory of a device without one (the CPU's) under the recording process
            owner = plan.memory_process.get(device) or cols["pid"][i] or ""
            for column, series in (("total_allocated", "allocated"), ("total_reserved", "reserved")):
                value = cols[column][i]
                if value is None:
                    continue
                memory_key = ("memory", owner, label, series)
                if memory_key not in tracks:
                    tracks[memory_key] = w.track(f"memory {label} {series} (bytes)",
                                                 parent=w.process_uuid[owner], counter=True, rank=-2 + len(tracks))
                w.counter(cols["ts_ns"][i], tracks[memory_key], float(value))


def _marks(plan: Plan, w: _Writer) -> None:
    by_track = {"steps": _Lanes(w, w.steps, "steps", w.opscope),
                "findings": _Lanes(w, w.findings, "opscope findings", w.opscope)}
    for m in sorted(plan.marks, key=lambda m: (m.ts_ns, -m.dur_ns)):
        lane = by_track[m.track]
        uuid = lane.place(m.ts_ns, m.ts_ns + m.dur_ns)
        w.begin(m.ts_ns, uuid, m.name, "opscope", {k: v for k, v in m.args.items() if v is not None})
    for lane in by_track.values():
        lane.close()


__all__ = ["require", "write"]
