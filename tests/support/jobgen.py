"""Synthetic multi-rank jobs made from ONE real Kineto rank trace, with their ground truth.

``make_job`` copies the base trace once per rank and edits time only by inserting it: ``insert_time(events, t, d)``
shifts every event that starts at or after ``t`` by ``d`` and stretches every event that spans ``t``. Per step the
straggler gets ``delay_ns`` at the end of one compute kernel, every rank gets seeded jitter at random kernel ends;
then each collective instance (the i-th NCCL kernel, the same on every rank) is made to end at the same time on all
ranks the way NCCL does: the ranks that arrive early wait inside the kernel. Last, each rank's clock gets its offset.

All inserted times are non-negative, so the composed edit is a strictly increasing warp of the base's time axis:
an insertion made at the current end of a kernel equals one made at that kernel's *base* end, applied to base
times. The generator keeps insertions as (base point, delta) and applies them all at once per rank (a bisect per
event) instead of rewriting 40k events per insertion; ``insert_time`` is the same edit on Chrome events, one at a
time (the unit tests check that both agree).

Used by the tests (``from support.jobgen import make_job``) and by bench/ scripts (``sys.path.insert(0, "tests")``):
pure stdlib + orjson.
"""

from __future__ import annotations

import bisect
import gzip
import random
import re
import statistics
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson

STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")


@dataclass
class JobTruth:
    ranks: int
    straggler: int | None
    delay_per_step_ns: dict[int, int]   # per step id: the straggler's extra time in that step vs the median rank
    offsets_ns: list[int]               # clock offset added to every timestamp of rank r (rank 0: 0)
    files: list[Path]                   # rank r's file at index r
    steps: list[int]                    # step ids present on every rank
    collectives_per_rank: int           # matched instances per rank
    # Each rank's own inserted compute time per step (straggler delay + jitter; collective waits not included).
    extra_ns: list[dict[int, int]] = field(default_factory=list)


# --- time in Kineto's units: µs floats with 3 decimals; integer ns here ------------------------------------------

def us_to_ns(value: float | int) -> int:
    """A Kineto µs value as integer ns, exactly: at ~4e12 µs a double has ~1 ns of resolution, so ``round(v * 1000)``
    can be off by one; the 3-decimal text of the double is the decimal Kineto wrote."""
    if isinstance(value, int):
        return value * 1000
    text = f"{value:.3f}"
    return int(text.replace(".", ""))


def ns_to_us(ns: int) -> float:
    """Integer ns as the µs float Kineto would write (int / int is correctly rounded, so it prints with 3 decimals)."""
    return ns / 1000


def insert_time(events: list[dict[str, Any]], t_ns: int, delta_ns: int) -> None:
    """Insert ``delta_ns`` of time at ``t_ns`` (both ns) into Chrome events in place: an event with ts >= t shifts,
    one with ts < t <= ts + dur grows (the enclosing step, annotation or kernel stretches). Flow and instant events
    shift like any ts; metadata events (ph "M") stay."""
    if delta_ns < 0:
        raise ValueError(f"insert_time: delta_ns must be >= 0, got {delta_ns}")
    if delta_ns == 0:
        return
    for ev in events:
        if ev.get("ph") == "M" or not isinstance(ev.get("ts"), (int, float)):
            continue
        ts = us_to_ns(ev["ts"])
        if ts >= t_ns:
            ev["ts"] = ns_to_us(ts + delta_ns)
        elif isinstance(ev.get("dur"), (int, float)) and ts + us_to_ns(ev["dur"]) >= t_ns:
            ev["dur"] = ns_to_us(us_to_ns(ev["dur"]) + delta_ns)


# --- the base, parsed once ---------------------------------------------------------------------------------------

def is_nccl(ev: dict[str, Any]) -> bool:
    return ev.get("cat") == "kernel" and "nccl" in str(ev.get("name", "")).lower()


@dataclass
class _Step:
    step: int
    start: int
    end: int
    compute: list[int]      # event indices: non-NCCL kernels launched in the step and ending inside it
    first_comm: int | None  # start of the step's first collective (launched in the step)


class _Base:
    def __init__(self, path: Path) -> None:
        self.doc: dict[str, Any] = _read(path)
        events = self.doc.get("traceEvents")
        if not isinstance(events, list):
            raise ValueError(f"{path}: no traceEvents list")
        self.events: list[dict[str, Any]] = events
        dist = self.doc.get("distributedInfo")
        # The base's world: its distributedInfo, else the group size its collectives record, else 1.
        sizes = [e["args"]["Group size"] for e in events if is_nccl(e) and isinstance(e.get("args"), dict)
                 and isinstance(e["args"].get("Group size"), int)]
        if isinstance(dist, dict) and isinstance(dist.get("world_size"), int):
            self.world = dist["world_size"]
        else:
            self.world = max(set(sizes), key=sizes.count) if sizes else 1
        # Timed events: index, ts and end (None without a duration), in ns.
        self.timed: list[tuple[int, int, int | None]] = []
        for i, ev in enumerate(events):
            if ev.get("ph") == "M" or not isinstance(ev.get("ts"), (int, float)):
                continue
            ts = us_to_ns(ev["ts"])
            dur = ev.get("dur")
            self.timed.append((i, ts, ts + us_to_ns(dur) if isinstance(dur, (int, float)) else None))
        span = {i: (ts, end) for i, ts, end in self.timed}
        launch: dict[Any, int] = {}
        for i, ts, _ in self.timed:
            ev = events[i]
            if ev.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(ev.get("args"), dict):
                corr = ev["args"].get("correlation")
                if corr is not None:
                    launch[corr] = ts
        kernels = [i for i, _, end in self.timed if events[i].get("cat") == "kernel" and end is not None]
        # Collective instances: the NCCL kernels in time order (the i-th is instance i on every rank).
        self.comms = sorted((i for i in kernels if is_nccl(events[i])), key=lambda i: span[i])
        self.steps: list[_Step] = []
        for i, ts, end in self.timed:
            m = STEP_NAME.match(str(events[i].get("name", "")))
            if m and end is not None and events[i].get("cat") in ("user_annotation", "cpu_op"):
                self.steps.append(_Step(int(m.group(1)), ts, end, [], None))
        self.steps.sort(key=lambda s: s.start)
        for k in kernels:
            ts, end = span[k]
            assert end is not None
            corr = (events[k].get("args") or {}).get("correlation")
            at = launch.get(corr, ts)  # device work belongs to the step that launched it
            for s in self.steps:
                if s.start <= at < s.end:
                    if is_nccl(events[k]):
                        s.first_comm = ts if s.first_comm is None else min(s.first_comm, ts)
                    elif s.start < end <= s.end:  # inserting at its end stretches the step
                        s.compute.append(k)
                    break
        self.span = span
        self.comm_ends = [self._end(i) for i in self.comms]

    def delay_kernel(self, s: _Step) -> int | None:
        """The straggler's kernel in step ``s``: the longest compute kernel ending before the step's first
        collective (else the longest ending before any later collective, else the longest of the step)."""
        def longest(cands: list[int]) -> int | None:
            return max(cands, key=lambda k: (self._end(k) - self.span[k][0], -self.span[k][0]), default=None)
        if s.first_comm is not None:
            before = longest([k for k in s.compute if self._end(k) <= s.first_comm])
            if before is not None:
                return before
            last_comm = max((self.span[c][0] for c in self.comms if s.start <= self.span[c][0] < s.end), default=None)
            if last_comm is not None:
                before = longest([k for k in s.compute if self._end(k) <= last_comm])
                if before is not None:
                    return before
        return longest(s.compute)

    def _end(self, k: int) -> int:
        end = self.span[k][1]
        assert end is not None
        return end


# --- the job ------------------------------------------------------------------------------------------------------

class _Warp:
    """Insertions at base times; ``at(x)`` is where base time x lands (strictly increasing: all deltas >= 0)."""

    def __init__(self) -> None:
        self.points: dict[int, int] = {}
        self._sorted: tuple[list[int], list[int]] | None = None

    def insert(self, point: int, delta: int) -> None:
        if delta < 0:
            raise ValueError(f"negative insertion {delta} ns")
        if delta:
            self.points[point] = self.points.get(point, 0) + delta
            self._sorted = None

    def at(self, x: int) -> int:
        return x + sum(d for p, d in self.points.items() if p <= x)

    def table(self) -> tuple[list[int], list[int]]:
        """Sorted points and the cumulative shift after each (``cum[bisect_right(points, x)]`` for base time x)."""
        if self._sorted is None:
            pts = sorted(self.points)
            cum = [0]
            for p in pts:
                cum.append(cum[-1] + self.points[p])
            self._sorted = (pts, cum)
        return self._sorted


def make_job(base: Path, out_dir: Path, ranks: int, *, straggler: int | None = None, delay_ns: int = 0,
             offsets_ns: Sequence[int] | None = None, jitter_ns: int = 0, end_jitter_ns: int = 0,
             seed: int = 0, gzip: bool = True, name: str = "rank-{rank}.json{gz}") -> JobTruth:
    """Write ``ranks`` Kineto files made from ``base`` into ``out_dir`` and return what they hold by construction."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    if straggler is not None and not 0 <= straggler < ranks:
        raise ValueError(f"straggler {straggler} is not a rank of {ranks}")
    if min(delay_ns, jitter_ns, end_jitter_ns) < 0:
        raise ValueError("delay_ns, jitter_ns and end_jitter_ns must be >= 0")
    offsets = [0] * ranks if offsets_ns is None else [int(o) for o in offsets_ns]
    if len(offsets) != ranks:
        raise ValueError(f"{len(offsets)} offsets for {ranks} ranks")
    b = _Base(Path(base))
    warps = [_Warp() for _ in range(ranks)]
    extra: list[dict[int, int]] = [{} for _ in range(ranks)]

    # 2. Extra compute per rank and step: the straggler's delay, everyone's jitter (seeded per rank, so rank r's
    # jitter does not depend on the job's size).
    for r in range(ranks):
        rng = random.Random(f"jobgen:{seed}:{r}:jitter")
        for s in b.steps:
            added = 0
            if r == straggler and delay_ns:
                k = b.delay_kernel(s)
                if k is not None:
                    warps[r].insert(b._end(k), delay_ns)
                    added += delay_ns
            if jitter_ns and s.compute:
                total = rng.randint(0, jitter_ns)
                parts = min(3, len(s.compute))
                cuts = sorted(rng.randint(0, total) for _ in range(parts - 1))
                for k, piece in zip(rng.sample(s.compute, parts), _pieces(total, cuts)):
                    warps[r].insert(b._end(k), piece)
                added += total
            extra[r][s.step] = added

    # 3. Collectives end together: instance by instance, everyone waits for the last rank inside the kernel.
    for i, end in enumerate(b.comm_ends):
        now = [w.at(end) for w in warps]
        target = max(now)
        for r, w in enumerate(warps):
            w.insert(end, target - now[r])
            if end_jitter_ns:
                w.insert(end, random.Random(f"jobgen:{seed}:{r}:{i}:end").randint(0, end_jitter_ns))

    # 5. Ground truth from what was inserted: the straggler's extra against the median rank's.
    delay_per_step: dict[int, int] = {}
    if straggler is not None:
        for s in b.steps:
            median = statistics.median(extra[r][s.step] for r in range(ranks))
            delay_per_step[s.step] = round(extra[straggler][s.step] - median)

    # 4. Rewrite per rank and write.
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _widen_groups(b, ranks)
    files = []
    for r in range(ranks):
        path = out_dir / name.format(rank=r, gz=".gz" if gzip else "")
        _write_rank(b, warps[r], r, ranks, offsets[r], path, gzip)
        files.append(path)
    return JobTruth(ranks=ranks, straggler=straggler, delay_per_step_ns=delay_per_step, offsets_ns=offsets,
                    files=files, steps=[s.step for s in b.steps], collectives_per_rank=len(b.comms), extra_ns=extra)


def _pieces(total: int, cuts: list[int]) -> list[int]:
    edges = [0, *cuts, total]
    return [b - a for a, b in pairwise(edges)]


def _widen_groups(b: _Base, ranks: int) -> None:
    """Process groups spanning the base's whole world span the new one (the same args on every rank)."""
    members = "[" + ", ".join(str(r) for r in range(ranks)) + "]"
    for ev in b.events:
        args = ev.get("args")
        if isinstance(args, dict) and "Group size" in args and args.get("Group size") == b.world:
            args["Group size"] = ranks
            if "Process Group Ranks" in args:
                args["Process Group Ranks"] = members
    dist = b.doc.get("distributedInfo")
    if isinstance(dist, dict):
        for pg in dist.get("pg_config") or []:
            if isinstance(pg, dict) and pg.get("pg_size") == b.world:
                pg["pg_size"] = ranks
                pg["ranks"] = list(range(ranks))


def _write_rank(b: _Base, warp: _Warp, rank: int, ranks: int, offset: int, path: Path, gz: bool) -> None:
    pts, cum = warp.table()
    events = b.events
    for i, ts, end in b.timed:
        ev = events[i]
        new_ts = ts + cum[bisect.bisect_right(pts, ts)]
        ev["ts"] = ns_to_us(new_ts + offset)
        if end is not None:
            ev["dur"] = ns_to_us(end + cum[bisect.bisect_right(pts, end)] - new_ts)
    dist = b.doc.get("distributedInfo")
    if isinstance(dist, dict):
        dist["rank"] = rank
        dist["world_size"] = ranks
    _write(path, b.doc, gz)


# --- files --------------------------------------------------------------------------------------------------------

def _read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a Kineto JSON object")
    return doc


def _write(path: Path, doc: dict[str, Any], gz: bool) -> None:
    # Kineto writes '"rank": 3' (json's default separators); tools that find the rank with a regex on that text
    # (HTA: '"rank":\s+(\d+)') need the space, so the keys are spaced as Kineto spaces them
    data = orjson.dumps(doc).replace(b'"rank":', b'"rank": ').replace(b'"world_size":', b'"world_size": ')
    path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0) if gz else data)


def _is_gz(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


# --- faults -------------------------------------------------------------------------------------------------------

def truncate_rank(job: JobTruth, r: int, keep_fraction: float = 0.6) -> Path:
    """Cut rank r's JSON after ``keep_fraction`` of its bytes, as a writer killed mid-file leaves it; a gzip file
    stays gzip: a stream flushed up to the cut, without its end marker and trailer."""
    if not 0 <= keep_fraction < 1:
        raise ValueError(f"keep_fraction must be in [0, 1), got {keep_fraction}")
    path = job.files[r]
    gz = _is_gz(path)
    data = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    cut = data[: int(len(data) * keep_fraction)]
    if gz:
        comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: gzip header
        path.write_bytes(comp.compress(cut) + comp.flush(zlib.Z_SYNC_FLUSH))
    else:
        path.write_bytes(cut)
    return path


def drop_rank(job: JobTruth, r: int) -> Path:
    """Delete rank r's file."""
    path = job.files[r]
    path.unlink()
    return path


def _rewrite(path: Path, edit: Any) -> Path:
    gz = _is_gz(path)
    doc = _read(path)
    edit(doc)
    _write(path, doc, gz)
    return path


def other_world(job: JobTruth, r: int, world_size: int) -> Path:
    """Rank r's file claims another job: its distributedInfo.world_size becomes ``world_size``."""
    def edit(doc: dict[str, Any]) -> None:
        doc.setdefault("distributedInfo", {})["world_size"] = world_size
    return _rewrite(job.files[r], edit)


def shift_steps(job: JobTruth, r: int, k: int) -> Path:
    """Rank r records a different step range: every ProfilerStep#N event becomes ProfilerStep#N+k."""
    def edit(doc: dict[str, Any]) -> None:
        for ev in doc["traceEvents"]:
            m = STEP_NAME.match(str(ev.get("name", "")))
            if m:
                ev["name"] = f"ProfilerStep#{int(m.group(1)) + k}"
    return _rewrite(job.files[r], edit)
