"""Memory over time per device, from the ``[memory]`` records of torch.profiler(profile_memory=True).

Each record is one allocation (+bytes) or free (-bytes) with the allocator's totals after it. The peak
of a device is its largest ``total_allocated``; what holds memory at that moment is every allocation
made before it and not yet freed (a free is matched to the allocation at the same address), charged to
the op that made it: the innermost ``cpu_op`` on the same thread running at the allocation's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import (
    arange,
    combined,
    native_loops,
    pair_numbers,
    scatter,
    share_pct,
    thread_keys,
    vocabulary,
)
from opscope.analyses.intervals import innermost_enclosing, is_sorted, span_bounds
from opscope.errors import UsageError
from opscope.model.buffers import minus_one_as_null, true_positions, values_view
from opscope.model.derive import OP_LAYER
from opscope.model.memo import memoized
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: c10::DeviceType numbers as torch writes them in ``Device Type`` (ROCm builds report HIP memory as cuda).
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga",
                8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu",
                16: "ve", 17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuseone"}
NO_OP = "(no op)"
BEFORE_TRACE = "(allocated before the trace)"
BEFORE_WINDOW = "(allocated before these steps)"
NO_RECORDS = ("no memory records in this trace: record with torch.profiler.profile(profile_memory=True) "
              "(opscope record does by default)")


def device_label(device_type: int | None, device_id: int | None) -> str:
    """``cpu``, ``cuda:0``...: a device as torch names it."""
    name = DEVICE_TYPES.get(device_type, f"device{device_type}") if device_type is not None else "?"
    return name if device_id is None or device_id < 0 else f"{name}:{device_id}"


@dataclass
class MemoryRecords:
    """The memory records in time order, each with its device, op, step and (allocations) when it ended.

    ``table`` columns: ``pos`` (time order), ``ts_ns``, ``device``, ``bytes``, ``allocated`` (total allocated
    after the record; rebuilt from the bytes when the trace has no totals), ``reserved``, ``op``, ``step``,
    ``end_pos`` (the ``pos`` of the free, or of the next allocation at the same address, that ended an
    allocation; null while alive). ``start_ns`` is the trace's first timestamp; ``problems`` counts what
    did not add up.
    """

    table: pa.Table
    start_ns: int = 0
    end_ns: int = 0
    devices: list[str] = field(default_factory=list)
    problems: dict[str, int] = field(default_factory=dict)
    windowed: bool = False  # only some steps: allocations made before them show as held "before the window"

    def notes(self) -> list[str]:
        return [f"{count:,} {problem}" for problem, count in self.problems.items() if count]


_EMPTY = pa.schema([("pos", pa.int64()), ("ts_ns", pa.int64()), ("device", pa.string()), ("bytes", pa.int64()),
                    ("allocated", pa.int64()), ("reserved", pa.int64()), ("op", pa.string()), ("step", pa.int64()),
                    ("end_pos", pa.int64())])


def memory_records(trace: Trace, steps: list[int] | None = None, devices: list[str] | None = None,
                   with_ops: bool = True) -> MemoryRecords:
    """The records with ops and lifetimes; ``steps``/``devices`` keep only the records of those (the
    allocations made before the window that are still alive then show as held 'before the window').
    ``with_ops=False`` leaves the ``op`` column empty (finding each record's op is most of the work).

    Kept in the cache entry of a cached trace: the next command with the same options reads them."""
    about = _records_facts(trace, steps, devices, with_ops)
    table = _records_table(trace, steps, devices, with_ops)
    return MemoryRecords(table, about["start_ns"], about["end_ns"], list(about["devices"]), dict(about["problems"]),
                         about["windowed"])


@memoized()  # not kept: its table and its facts are (each read back without the other being computed)
def _records(trace: Trace, steps: list[int] | None, devices: list[str] | None, with_ops: bool) -> MemoryRecords:
    return _memory_records(trace, steps, devices, with_ops)


@memoized(keep=True)
def _records_facts(trace: Trace, steps: list[int] | None, devices: list[str] | None, with_ops: bool) -> dict:
    rec = _records(trace, steps, devices, with_ops)
    return {"start_ns": rec.start_ns, "end_ns": rec.end_ns, "devices": rec.devices, "problems": rec.problems,
            "windowed": rec.windowed}


@memoized(keep=True)
def _records_table(trace: Trace, steps: list[int] | None, devices: list[str] | None, with_ops: bool) -> pa.Table:
    return _records(trace, steps, devices, with_ops).table


def _memory_records(trace: Trace, steps: list[int] | None, devices: list[str] | None,
                    with_ops: bool) -> MemoryRecords:
    mem = trace.memory
    first = trace.select(["ts_ns"])["ts_ns"]
    start = first[0].as_py() if len(first) else None
    if mem.num_rows == 0:
        return MemoryRecords(_EMPTY.empty_table(), start or 0, start or 0)
    if mem["ts_ns"].null_count or not is_sorted(combined(mem["ts_ns"])):  # (in time order already: no copy)
        mem = mem.take(pc.sort_indices(mem["ts_ns"]))  # stable: records at one time keep the file's order
    n = mem.num_rows
    mem_start = pc.min(mem["ts_ns"]).as_py()
    start = mem_start if start is None else min(start, mem_start)
    events_end = _events_end(trace)
    end = max(pc.max(mem["ts_ns"]).as_py(), events_end if events_end is not None else start)
    problems: dict[str, int] = {}
    device = _device_labels(mem["device_type"], mem["device_id"])
    nbytes = pc.fill_null(combined(mem["bytes"]), 0)
    allocated = combined(mem["total_allocated"])
    negative = pc.fill_null(pc.less(allocated, 0), False)
    problems["records with a negative total allocated (ignored for peaks)"] = _count(negative)
    allocated = pc.if_else(negative, pa.scalar(None, pa.int64()), allocated)
    allocated = _rebuild_missing_totals(device, nbytes, allocated, problems)
    reserved = combined(mem["total_reserved"])
    table = pa.table({
        "pos": arange(n), "ts_ns": combined(mem["ts_ns"]), "device": device, "bytes": nbytes,
        "allocated": allocated, "reserved": reserved,
        "op": _ops_of(trace, mem) if with_ops else pa.nulls(n, pa.string()), "step": _steps_of(trace, mem["ts_ns"]),
        "end_pos": _lifetimes(device, combined(mem["addr"]), nbytes, problems),
    })
    all_devices = sorted(set(pc.unique(device).to_pylist()))
    if devices:
        unknown = [d for d in devices if d not in all_devices]
        if unknown:
            raise UsageError(f"no memory records for device {', '.join(unknown)}; the trace has "
                             f"{', '.join(all_devices) or 'none'}")
        table = table.filter(pc.is_in(table["device"], pa.array(devices, pa.string())))
    if steps:
        table = table.filter(pc.fill_null(pc.is_in(table["step"], pa.array(steps, pa.int64())), False))
    kept = sorted(set(pc.unique(table["device"]).to_pylist()))
    return MemoryRecords(table, start, end, kept, problems, windowed=bool(steps))


def _events_end(trace: Trace) -> int | None:
    spans = trace.select(["ts_ns", "dur_ns"])
    bounds = span_bounds(spans["ts_ns"], spans["dur_ns"])  # in one pass, no column of ends
    return bounds[1] if bounds else None


def _count(mask) -> int:
    return pc.sum(pc.cast(mask, pa.int64())).as_py() or 0


def _device_labels(device_type, device_id) -> pa.Array:
    """Per record, its device's label: made once per distinct (type, id) pair, the pairs numbered in one pass."""
    numbers, pairs = pair_numbers(device_type, device_id)
    return combined(pc.take(pa.array([device_label(t, i) for t, i in pairs], pa.string()), numbers))


def _rebuild_missing_totals(device: pa.Array, nbytes: pa.Array, allocated: pa.Array,
                            problems: dict[str, int]) -> pa.Array:
    """A device whose records carry no totals gets the running sum of its bytes (relative to the start)."""
    missing = pc.is_null(allocated)
    if not pc.any(missing).as_py():
        return allocated
    for label in pc.unique(pc.filter(device, missing)).to_pylist():
        mine = pc.equal(device, label)
        if pc.any(pc.and_(mine, pc.is_valid(allocated))).as_py():
            continue  # some totals are there: the missing ones stay missing
        rows = true_positions(mine)
        running = pc.cumulative_sum(pc.take(nbytes, rows))
        allocated = pc.if_else(mine, scatter(len(allocated), rows, running), allocated)
        problems[f"records of {label} without totals (levels rebuilt from the bytes, relative to the first "
                 "record)"] = len(rows)
    return allocated


_REALLOCATED = "allocations whose address was allocated again without a free (ended there)"
_ORPHAN_FREES = "frees without an allocation in the trace (made before it started)"


def _lifetimes(device: pa.Array, addr: pa.Array, nbytes: pa.Array, problems: dict[str, int]) -> pa.Array:
    """``pos`` of the record that ends each allocation: the next record at the same device and address (that is
    not an empty one). The definition sorts the records by device and address; ``_loops.lifetimes`` gives the same
    in one pass in time order where built and no device or address is missing."""
    n = len(device)
    loops = native_loops()
    if loops is not None and n and not device.null_count and not addr.null_count:
        end = bytearray(8 * n)
        codes = pc.cast(combined(pc.dictionary_encode(device)).indices, pa.int64())
        reallocated, orphans = loops.lifetimes(*(values_view(combined(a), "q") for a in
                                                 (codes, pc.cast(addr, pa.int64()), pc.cast(nbytes, pa.int64()))),
                                               end)
        problems[_REALLOCATED], problems[_ORPHAN_FREES] = reallocated, orphans
        return minus_one_as_null(end, n)
    t = pa.table({"device": device, "addr": addr, "pos": arange(n), "bytes": nbytes})
    t = t.take(pc.sort_indices(t, [("device", "ascending"), ("addr", "ascending"), ("pos", "ascending")]))
    same = pc.and_(pc.equal(t["device"].slice(1), t["device"].slice(0, n - 1)),
                   pc.equal(t["addr"].slice(1), t["addr"].slice(0, n - 1)))
    same = pc.fill_null(pa.concat_arrays([combined(same), pa.array([False])]), False)  # row i and row i + 1
    is_alloc = pc.greater(t["bytes"], 0)
    is_free = pc.less(t["bytes"], 0)
    next_pos = pa.concat_arrays([combined(t["pos"]).slice(1), pa.array([None], pa.int64())])
    next_bytes = pa.concat_arrays([combined(t["bytes"]).slice(1), pa.array([0], pa.int64())])
    ends = pc.and_(pc.and_(is_alloc, same), pc.not_equal(next_bytes, 0))
    problems[_REALLOCATED] = _count(
        pc.and_(ends, pc.greater(next_bytes, 0)))
    prev_alloc = pc.and_(pa.concat_arrays([pa.array([False]), combined(same).slice(0, n - 1)]),
                         pa.concat_arrays([pa.array([False]), combined(is_alloc).slice(0, n - 1)]))
    problems[_ORPHAN_FREES] = _count(
        pc.and_(is_free, pc.invert(prev_alloc)))
    end = pc.if_else(ends, next_pos, pa.scalar(None, pa.int64()))
    return pc.take(end, pc.sort_indices(t["pos"]))


def _ops_of(trace: Trace, mem: pa.Table) -> pa.Array:
    """Name of the innermost cpu_op running on the record's thread at its time (null when none)."""
    n = mem.num_rows
    events = trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid", "stream", "parent", "name"])
    layer = pc.and_(kind_mask(events, OP_LAYER), pc.is_null(events["stream"]))
    if not pc.any(layer).as_py():
        return pa.nulls(n, pa.string())
    pid_vocab = vocabulary(events["pid"], mem["pid"])
    tid_vocab = vocabulary(events["tid"], mem["tid"])
    # every event a row of the spans, the layer's rows its members: no copy of the layer's columns
    spans = pa.table({
        "thread": thread_keys(events["pid"], events["tid"], pid_vocab, tid_vocab),
        "ts": events["ts_ns"], "dur": events["dur_ns"], "parent": events["parent"],
        "accept": kind_mask(events, ("cpu_op",)), "member": layer,
    })
    queries = pa.table({"thread": thread_keys(mem["pid"], mem["tid"], pid_vocab, tid_vocab), "ts": mem["ts_ns"]})
    where = innermost_enclosing(spans, queries)
    return combined(pc.take(events["name"], where).cast(pa.string()))


def _steps_of(trace: Trace, ts) -> pa.Array:
    """Step whose ProfilerStep span holds each time (null outside steps)."""
    steps = trace.steps
    n = len(ts)
    if steps.num_rows == 0 or n == 0:
        return pa.nulls(n, pa.int64())
    steps = steps.take(pc.sort_indices(steps, [("ts_ns", "ascending"), ("dur_ns", "descending")]))
    zero = pa.nulls(steps.num_rows, pa.int64()).fill_null(0)
    spans = pa.table({"thread": zero, "ts": steps["ts_ns"], "end": pc.add(steps["ts_ns"], steps["dur_ns"]),
                      "parent": pa.nulls(steps.num_rows, pa.int64())})
    where = innermost_enclosing(spans, pa.table({"thread": pa.nulls(n, pa.int64()).fill_null(0), "ts": ts}))
    return combined(pc.take(steps["step"], where))


# --- tables --------------------------------------------------------------------------------------------

def peak_table(rec: MemoryRecords, trace_steps: pa.Table | None = None) -> pa.Table:
    """Per device: peak allocated and reserved, when (ns after the trace start) and in which step, the level
    at the end, allocation and free counts."""
    rows = []
    needed = rec.table.select(["ts_ns", "bytes", "allocated", "reserved", "step"])  # not the ops' names
    for label in rec.devices:
        t = needed.filter(pc.equal(rec.table["device"], label))
        at = first_max(t["allocated"])
        rat = first_max(t["reserved"])
        last = t["allocated"].drop_null()
        rows.append({
            "device": label,
            "peak_allocated_bytes": None if at is None else t["allocated"][at].as_py(),
            "peak_at_ns": None if at is None else t["ts_ns"][at].as_py() - rec.start_ns,
            "peak_step": None if at is None else t["step"][at].as_py(),
            "peak_reserved_bytes": None if rat is None else t["reserved"][rat].as_py(),
            "reserved_at_ns": None if rat is None else t["ts_ns"][rat].as_py() - rec.start_ns,
            "reserved_step": None if rat is None else t["step"][rat].as_py(),
            "end_allocated_bytes": last[len(last) - 1].as_py() if len(last) else None,
            "allocs": _count(pc.greater(t["bytes"], 0)),
            "frees": _count(pc.less(t["bytes"], 0)),
            "alloc_bytes": pc.sum(pc.filter(t["bytes"], pc.greater(t["bytes"], 0))).as_py() or 0,
        })
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("device", pa.string()), ("peak_allocated_bytes", pa.int64()), ("peak_at_ns", pa.int64()),
        ("peak_step", pa.int64()), ("peak_reserved_bytes", pa.int64()), ("reserved_at_ns", pa.int64()),
        ("reserved_step", pa.int64()), ("end_allocated_bytes", pa.int64()), ("allocs", pa.int64()),
        ("frees", pa.int64()), ("alloc_bytes", pa.int64())]))


def first_max(values) -> int | None:
    """Row of the first largest non-null value (records are in time order)."""
    values = combined(values)
    top = pc.max(values).as_py()
    if top is None:
        return None
    return pc.index(values, top).as_py()


def holders_table(rec: MemoryRecords, sort: str = "bytes") -> pa.Table:
    """Per device, at its peak: the ops whose allocations were alive then (bytes, allocations, share of the
    peak). What the records cannot explain (allocated before the trace or the step window) is one more row."""
    parts = []
    table = rec.table
    needed = table.select(["allocated", "pos", "bytes", "end_pos"])  # the ops' names of the live rows alone
    for label in rec.devices:
        mine = pc.equal(table["device"], label)
        t = needed.filter(mine)
        at = first_max(t["allocated"])
        if at is None:
            continue
        peak = t["allocated"][at].as_py()
        peak_pos = t["pos"][at].as_py()
        alive = pc.and_(pc.and_(pc.greater(t["bytes"], 0), pc.less_equal(t["pos"], peak_pos)),
                        pc.fill_null(pc.greater(t["end_pos"], peak_pos), True))
        live_rows = pc.filter(true_positions(mine), alive)
        live = pa.table({"op": pc.fill_null(pc.take(table["op"], live_rows), NO_OP),
                         "bytes": pc.filter(t["bytes"], alive)})
        by_op = live.group_by("op", use_threads=False).aggregate([("bytes", "sum"), ("bytes", "count")])
        ops, held, counts = (by_op[c].to_pylist() for c in ("op", "bytes_sum", "bytes_count"))
        rest = peak - sum(held)
        if rest:
            before = BEFORE_WINDOW if rec.windowed else BEFORE_TRACE
            ops, held, counts = ops + [before], held + [rest], counts + [None]
        parts.append(pa.table({
            "device": pa.repeat(pa.scalar(label, pa.string()), len(ops)),
            "op": pa.array(ops, pa.string()),
            "bytes": pa.array(held, pa.int64()),
            "allocations": pa.array(counts, pa.int64()),
            "peak_pct": pa.array([share_pct(h, peak) for h in held], pa.float64()),
        }))
    if not parts:
        return pa.table({"device": pa.array([], pa.string()), "op": pa.array([], pa.string()),
                         "bytes": pa.array([], pa.int64()), "allocations": pa.array([], pa.int64()),
                         "peak_pct": pa.array([], pa.float64())})
    return _sorted(pa.concat_tables(parts), sort, "bytes")


def allocation_table(rec: MemoryRecords, sort: str = "bytes") -> pa.Table:
    """Per device and op: allocations made, bytes allocated in all, the largest and the average."""
    t = rec.table.filter(pc.greater(rec.table["bytes"], 0))
    t = pa.table({"device": t["device"], "op": pc.fill_null(t["op"], NO_OP), "b": t["bytes"]})
    g = t.group_by(["device", "op"], use_threads=False).aggregate([("b", "count"), ("b", "sum"), ("b", "max")])
    out = pa.table({
        "device": g["device"], "op": g["op"], "allocations": g["b_count"], "bytes": g["b_sum"],
        "max_bytes": g["b_max"],
        "avg_bytes": pc.cast(pc.round(pc.divide(pc.cast(g["b_sum"], pa.float64(), safe=False), g["b_count"])),
                             pa.int64()),
    })
    return _sorted(out, sort, "bytes")


def _sorted(table: pa.Table, sort: str, default: str) -> pa.Table:
    sort = sort or default
    descending = not sort.startswith("-")
    key = sort.lstrip("-")
    if key not in table.column_names:
        raise UsageError(f"cannot sort by {key!r}; columns are {', '.join(table.column_names)}")
    order = [(key, "descending" if descending else "ascending")]
    order += [(c, "ascending") for c in ("device", "op") if c != key]
    return table.take(pc.sort_indices(table, order))


MAX_TIMELINE_BUCKETS = 10_000


def timeline_table(rec: MemoryRecords, buckets: int = 20) -> pa.Table:
    """Per device, the trace cut into ``buckets`` equal spans: the most allocated and reserved in each (the
    level carried over from before the span counts: memory stays allocated between records)."""
    if buckets < 1:
        raise UsageError("--timeline takes a number of buckets >= 1")
    # every bucket is a row per device: millions of buckets would build a table of gigabytes
    if buckets > MAX_TIMELINE_BUCKETS:
        raise UsageError(f"--timeline takes at most {MAX_TIMELINE_BUCKETS} buckets (got {buckets})")
    span = max(rec.end_ns - rec.start_ns, 1)
    rows: dict[str, list] = {k: [] for k in ("device", "bucket", "start_ns", "end_ns", "allocated_bytes",
                                             "reserved_bytes")}
    needed = rec.table.select(["ts_ns", "bytes", "allocated", "reserved"])  # not the ops' names
    for label in rec.devices:
        t = needed.filter(pc.equal(rec.table["device"], label))
        alloc = _bucket_max(t, "allocated", rec.start_ns, span, buckets)
        reserved = _bucket_max(t, "reserved", rec.start_ns, span, buckets)
        for b in range(buckets):
            rows["device"].append(label)
            rows["bucket"].append(b)
            rows["start_ns"].append(span * b // buckets)
            rows["end_ns"].append(span * (b + 1) // buckets)
            rows["allocated_bytes"].append(alloc[b])
            rows["reserved_bytes"].append(reserved[b])
    return pa.table({k: pa.array(v, pa.string() if k == "device" else pa.int64()) for k, v in rows.items()})


def _bucket_max(t: pa.Table, column: str, start: int, span: int, buckets: int) -> list[int | None]:
    t = t.filter(pc.is_valid(t[column]))
    if t.num_rows == 0:
        return [None] * buckets
    ts = pc.subtract(t["ts_ns"], start)
    # (ts * buckets) // span without int64 overflow: floor division in two steps; safe=False because a time
    # past 2^53 ns (a hostile or broken trace) rounds in float64, which a bucket index can afford
    bucket = pc.min_element_wise(pc.cast(pc.floor(pc.divide(pc.multiply(pc.cast(ts, pa.float64(), safe=False),
                                                                         buckets),
                                                             float(span))), pa.int64()), buckets - 1)
    g = pa.table({"b": bucket, "v": t[column]}).group_by("b", use_threads=False).aggregate([("v", "max")])
    top = dict(zip(g["b"].to_pylist(), g["v_max"].to_pylist()))
    # the level when a bucket ends: its last record's value (records are in time order)
    bucket = combined(bucket)
    last_rows = true_positions(pc.not_equal(pa.concat_arrays([bucket.slice(1), pa.array([-1], pa.int64())]),
                                            bucket))
    last = dict(zip(pc.take(bucket, last_rows).to_pylist(), pc.take(t[column], last_rows).to_pylist()))
    first_value = t[column][0].as_py() - (t["bytes"][0].as_py() if column == "allocated" else 0)
    level: int | None = max(first_value, 0) if column == "allocated" else None
    out: list[int | None] = []
    for b in range(buckets):
        candidates = [v for v in (level, top.get(b)) if v is not None]
        out.append(max(candidates) if candidates else None)
        if b in last:
            level = last[b]
    return out


def counter_table(trace: Trace) -> pa.Table:
    """Counter series whose name mentions memory: samples, peak, when (ns after the trace start), last value."""
    counters = trace.counters
    empty = pa.table({"counter": pa.array([], pa.string()), "series": pa.array([], pa.string()),
                      "samples": pa.array([], pa.int64()), "peak": pa.array([], pa.float64()),
                      "peak_at_ns": pa.array([], pa.int64()), "last": pa.array([], pa.float64())})
    if counters.num_rows == 0:
        return empty
    name = counters["name"].cast(pa.string())
    series = counters["series"].cast(pa.string())
    memory = pc.or_(pc.match_substring_regex(pc.fill_null(name, ""), "(?i)mem"),
                    pc.match_substring_regex(pc.fill_null(series, ""), "(?i)mem"))
    if not pc.any(memory).as_py():
        return empty
    c = pa.table({"name": name, "series": series, "ts": counters["ts_ns"], "value": counters["value"]}).filter(memory)
    c = c.take(pc.sort_indices(c["ts"]))
    first = trace.select(["ts_ns"])["ts_ns"]
    start = min(first[0].as_py() if len(first) else c["ts"][0].as_py(), pc.min(c["ts"]).as_py())
    rows = []
    keys = c.group_by(["name", "series"], use_threads=False).aggregate([])
    for n, s in zip(keys["name"].to_pylist(), keys["series"].to_pylist()):
        mine = pc.and_(_eq(c["name"], n), _eq(c["series"], s))
        part = c.filter(mine)
        at = first_max(part["value"])
        rows.append({"counter": n, "series": s, "samples": part.num_rows,
                     "peak": None if at is None else part["value"][at].as_py(),
                     "peak_at_ns": None if at is None else part["ts"][at].as_py() - start,
                     "last": part["value"][part.num_rows - 1].as_py()})
    return pa.Table.from_pylist(rows, schema=empty.schema)


def _eq(column, value):
    return pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)
