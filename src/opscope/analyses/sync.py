"""Host-device synchronisations: the blocking calls inside the steps, with the ops and the Python frame that made
them.

A synchronisation is a blocking runtime call (cudaStreamSynchronize, cudaDeviceSynchronize,
cudaEventSynchronize, cudaMemcpy without Async, their hip/cu forms; see :data:`opscope.analyses.idle.SYNC_CALLS`),
a cudaMemcpyAsync/hipMemcpyAsync into pageable host memory (it returns only when the copy is done), or a
blocking sync record of the device timeline (Kineto's cuda_sync "Stream/Event/Context Sync") whose runtime call
the trace lacks. What each one costs is the ``host-sync`` rule's business (advise/rules/sync.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, local_index, name_flags, name_match, rows_where, thread_keys, vocabulary
from opscope.analyses.idle import SYNC_CALLS
from opscope.analyses.intervals import innermost_enclosing
from opscope.analyses.links import op_ancestors
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

#: Asynchronous copies that block the host all the same: device to pageable host memory.
ASYNC_COPY = r"^(cuda|hip)Memcpy\w*Async"
PAGEABLE_DTOH = r"(?i)DtoH.*Pageable|Device -> Pageable"
#: Device-timeline sync records that stand for a blocking host call (not "Stream Wait Event": device-side).
BLOCKING_RECORD = r"^(Stream|Event|Context|Device) Sync"
#: Python frames that say where in the user's code the sync was made: not built-ins, not torch's own files.
_INTERNAL_FRAME = re.compile(r"^<built-in|^nn\.Module:|(^|/)torch/|^<frozen ")


@dataclass
class Sync:
    """One blocking call: what it was, when, in which step, the device it waited for, the ops around it
    ("outer > ... > inner") and the innermost Python frame of the user's code."""

    call: str
    ts: int
    dur: int
    step: int | None
    device: int | None  # the device it waited for, when the trace says
    op: str | None = None
    python: str | None = None


def blocking_calls(ev: pa.Table) -> pa.Array:
    """The rows of the runtime calls that block the host until device work is done (see the module): ``ev`` needs
    ``kind``, ``name`` and ``correlation``."""
    runtime = kind_mask(ev, ("runtime",))
    copies = ev.filter(pc.and_(kind_mask(ev, ("memcpy",)), name_match(ev["name"], PAGEABLE_DTOH)))
    pageable = combined(pc.drop_null(copies["correlation"])) if copies.num_rows else pa.array([], pa.int64())
    blocking = pc.or_(name_match(ev["name"], SYNC_CALLS),
                      pc.and_(name_match(ev["name"], ASYNC_COPY),
                              pc.fill_null(pc.is_in(ev["correlation"], value_set=pageable), False)))
    return rows_where(pc.and_(runtime, blocking))


def sync_calls(trace: Trace) -> list[Sync]:
    """The synchronisations inside the steps (the whole trace without steps), in time order, each with the ops
    around it and the Python frame that made it."""
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "step", "pid", "tid", "correlation", "external_id",
                           "device", "parent"])
    call_rows = blocking_calls(ev)
    records = rows_where(kind_mask(ev, ("sync",)))
    rec = ev.take(records)
    # the device each runtime call waited for, from its sync record (same correlation id)
    rec_device = {c: d for c, d in zip(rec["correlation"].to_pylist(), rec["device"].to_pylist())
                  if c is not None and d is not None and d >= 0}
    # records without a runtime call in the trace stand for the call when they are blocking kinds
    orphans = records
    if len(records):  # (the runtime calls' ids only where there are records to match)
        runtime_corr = combined(pc.drop_null(pc.filter(ev["correlation"], kind_mask(ev, ("runtime",)))))
        orphan = pc.and_(name_match(rec["name"], BLOCKING_RECORD),
                         pc.invert(pc.fill_null(pc.is_in(rec["correlation"], value_set=runtime_corr), False)))
        orphans = pc.filter(records, orphan)
    # an orphan's host side: the cpu_op with its external id (how Kineto links them)
    host_of: dict = {}
    if len(orphans):  # a dict of every op is a Python object per op: only when some record needs it
        ops = ev.filter(kind_mask(ev, ("cpu_op",)))
        op_rows = rows_where(kind_mask(ev, ("cpu_op",)))
        host_of = dict(zip(ops["external_id"].to_pylist(), op_rows.to_pylist()))
    step_spans = list(zip(trace.steps["step"].to_pylist(), trace.steps["ts_ns"].to_pylist(),
                          trace.steps["dur_ns"].to_pylist()))

    calls: list[Sync] = []
    starts: list[int | None] = call_rows.to_pylist()  # the host row each one's ops are found from
    where: list[tuple[int | None, str | None, str | None]] = []  # (ts, pid, tid) for the Python frame
    for r in ev.take(call_rows).to_pylist():
        calls.append(Sync(r["name"], r["ts_ns"], r["dur_ns"], r["step"], rec_device.get(r["correlation"])))
        where.append((r["ts_ns"], r["pid"], r["tid"]))
    for r in ev.take(orphans).to_pylist():
        host = host_of.get(r["external_id"]) if r["external_id"] is not None else None
        step = next((n for n, s, d in step_spans if s <= r["ts_ns"] < s + d), None)
        device = r["device"] if r["device"] is not None and r["device"] >= 0 else None
        calls.append(Sync(f"{r['name']} (record; no runtime call in the trace)", r["ts_ns"], r["dur_ns"], step,
                          device))
        starts.append(host)
        if host is None:
            where.append((None, None, None))
        else:
            h = ev.slice(host, 1).to_pylist()[0]
            where.append((r["ts_ns"], h["pid"], h["tid"]))
    chains = _op_chains(trace, starts)
    frames = _python_frames(trace, where)
    for c, chain, frame in zip(calls, chains, frames):
        c.op, c.python = chain, frame
    keep = [c for c in calls if c.step is not None or trace.steps.num_rows == 0]
    return sorted(keep, key=lambda c: c.ts)


# --- who made the call -------------------------------------------------------------------------------------

def _op_chains(trace: Trace, starts: list[int | None]) -> list[str | None]:
    """For each start row (a runtime call, or an op), the cpu_ops around it from the outermost to the innermost,
    as "outer > ... > inner" (at most the outermost two and the innermost two); None without ops."""
    events = trace.select(["kind", "parent", "name"])
    known = [i for i, s in enumerate(starts) if s is not None]
    chains: list[list[str]] = [[] for _ in starts]
    if known:
        index, found = op_ancestors(events, pa.array([starts[i] for i in known], pa.int64()), ("cpu_op",))
        names = pc.take(events["name"], found).cast(pa.string()).to_pylist() if len(found) else []
        for i, name in zip(index.to_pylist(), names):  # innermost first
            chains[known[i]].append(name)
    out = []
    for chain in chains:
        chain = chain[::-1]
        if len(chain) > 4:
            chain = chain[:2] + ["..."] + chain[-2:]
        out.append(" > ".join(chain) if chain else None)
    return out


def _python_frames(trace: Trace, where: list[tuple[int | None, str | None, str | None]]) -> list[str | None]:
    """The innermost Python frame of the user's code (not a built-in, not torch's own files) running on each
    call's thread when it began; the innermost frame of any kind when there is none; None without stacks."""
    events = trace.select(["kind", "ts_ns", "dur_ns", "pid", "tid", "parent", "name"])
    layer = kind_mask(events, ("python",))
    py = events.filter(layer)
    known = [i for i, w in enumerate(where) if w[0] is not None]
    out: list[str | None] = [None] * len(where)
    if py.num_rows == 0 or not known:
        return out
    pid = pa.array([where[i][1] for i in known], pa.string())
    tid = pa.array([where[i][2] for i in known], pa.string())
    pid_vocab, tid_vocab = vocabulary(py["pid"], pid), vocabulary(py["tid"], tid)
    # asked once per distinct frame name (a trace recorded with stacks holds millions of frames, a few thousand names)
    user = combined(name_flags(py["name"], lambda name: not _INTERNAL_FRAME.search(name), nulls=True))
    spans = pa.table({"thread": thread_keys(py["pid"], py["tid"], pid_vocab, tid_vocab), "ts": py["ts_ns"],
                      "end": pc.add(py["ts_ns"], py["dur_ns"]),
                      "parent": pc.take(local_index(layer), pc.cast(combined(py["parent"]), pa.int64()))})
    queries = pa.table({"thread": thread_keys(pid, tid, pid_vocab, tid_vocab),
                        "ts": pa.array([where[i][0] for i in known], pa.int64())})
    mine = innermost_enclosing(spans.append_column("accept", user), queries)
    any_frame = innermost_enclosing(spans, queries)
    chosen = pc.coalesce(mine, any_frame)
    for i, name in zip(known, pc.take(combined(py["name"]), chosen).cast(pa.string()).to_pylist()):
        out[i] = name
    return out


SYNC_SCHEMA = pa.schema([("call", pa.string()), ("ts", pa.int64()), ("dur", pa.int64()), ("step", pa.int64()),
                         ("device", pa.int64()), ("op", pa.string()), ("python", pa.string())])


def sync_table(trace: Trace) -> pa.Table:
    """:func:`sync_calls` as a table, one row per call in time order."""
    return pa.Table.from_pylist([asdict(c) for c in sync_calls(trace)], schema=SYNC_SCHEMA)
