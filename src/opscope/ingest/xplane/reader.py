"""XProf's XSpace (``*.xplane.pb``) mapped to the model.

An XSpace holds planes: ``/host:CPU`` (one line per thread), ``/device:GPU:N`` (one line per stream, plus lines
XProf derived from them), ``Task Environment`` (the profile's start time) and others (``/host:metadata``: the
programs' HLO protos, read first: :mod:`opscope.ingest.xplane.hlo`). An event's start is its line's ``timestamp_ns``
plus its ``offset_ps``, its name and the stats common to all its runs are in the plane's event metadata, and a stat
whose value is a ``ref_value`` names a stat metadata entry whose name is the text.

Host events: a TensorFlow op is named ``scope/node:Type`` with display name ``Type`` and becomes a ``cpu_op`` named
by its type (node and scope in its args, its ``shape`` stat in ``shapes``), as XProf's framework op stats group
them; an XLA op run on a host thread (JAX on CPU: an event with an ``hlo_op`` stat) is a ``cpu_op`` named by its HLO
instruction without its ``.N``, its record (operand shapes and dtypes, the instruction's HLO text in
``concrete_inputs``) from its program's HLO proto; ``$file.py:12 fn`` (JAX's Python tracer) is ``python``; driver
calls (``hip*``, ``cu*``) and any event with a ``correlation_id`` are ``runtime``; TensorFlow's own instrumentation
is ``runtime`` in a TF run (the Chrome reader's rule for XProf's trace viewer JSON, so that self time is computed as
XProf does); the rest is ``user_annotation``.
``MemoryAllocation``/``MemoryDeallocation`` go to the memory table. Device events on ``Stream #N(...)`` lines are
kernels, copies and sets on device N, stream N, linked to their launch by the correlation id (TF's older tracer
numbers correlations per CUDA context, so the key is the pair (``correlation_id``, ``context_id``), given one
int64). XProf's derived lines (``TensorFlow Ops``, ``XLA Ops``, ``Steps``...) repeat the streams and are skipped,
except ``Steps`` for the steps when the host has no ``step_num`` markers. Saved files count line times from the
profile's start: Task Environment's ``profile_start_time`` is added, so times are on the epoch where the file says it.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.errors import TraceError
from opscope.ingest.chrome.tensorflow import RUNTIME as TF_RUNTIME
from opscope.ingest.chrome.tensorflow import TOOL as TENSORFLOW
from opscope.ingest.numbers import int64, int64_array
from opscope.ingest.source import ByteSource, check_readable, is_gzip
from opscope.ingest.xplane import varint
from opscope.ingest.xplane.hlo import HLO_PROTO_STAT, HloModules
from opscope.ingest.xplane.schema import protobuf
from opscope.model.builder import TraceBuilder, fast_type_inference
from opscope.model.trace import Trace

FORMAT = "xplane_pb"
BATCH_ROWS = 100_000
_DEVICE_PLANE = re.compile(r"^/device:([A-Za-z_]+):(\d+)")
_STREAM_LINE = re.compile(r"^Stream #(\d+)")
#: Lines XProf adds to a device plane from its streams (by name; by id below): reading them doubles device time.
DERIVED_LINES = frozenset({
    "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Steps", "Source", "Framework Ops",
    "Framework Name Scope", "XLA TraceMe", "Launch Stats", "Async XLA Ops", "XLA SparseCore Ops",
    "XLA SparseCore Modules", "Sparse Core Steps", "SparseCore Steps", "TPU Steps"})
#: XProf numbers derived lines from 0xDEADBEEF (Steps) up; older files wrote the ids as int32 (-559038737...).
_DERIVED_MIN = 0xDEADBEEF
_DERIVED_SPAN = 64
#: Host threads only JAX (PJRT) runs have.
_JAX_THREADS = ("py_xla_execute", "tf_pjrt_thread_pool")
#: ``dot.3``, ``fusion.12``: an HLO instruction's number within its module.
_HLO_SUFFIX = re.compile(r"\.\d+$")
_OP_TYPE = re.compile(r"^_?[A-Z][A-Za-z0-9]*$")
_DRIVER_API = re.compile(r"^(?:hip|cuda|cu|hsa|nccl|rccl)[A-Z_]")
_TF_RUNTIME = re.compile(TF_RUNTIME)
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}
_GPU_ALLOCATOR = re.compile(r"(?i)^gpu_(\d+)_")
_KERNEL_DIM = re.compile(r"(grid|block):(\d+),(\d+),(\d+)")
_TF_SHAPE = re.compile(r"^\s*([A-Za-z0-9_]+)\[([0-9,\s?-]*)\]\s*$")
#: Plane stats -> Kineto's deviceProperties keys.
_DEVICE_PROPS = {"memory_size": "totalGlobalMem", "compute_cap_major": "computeMajor",
                 "compute_cap_minor": "computeMinor", "core_count": "numSms", "clock_rate": "clockRateKHz",
                 "memory_bandwidth": "memoryBandwidthBytesPerSec", "device_vendor": "vendor"}

#: The stats a read without args needs (steps, links, shapes, memory records); with args every stat is decoded.
_HOST_STATS = frozenset({"step_num", "_r", "correlation_id", "context_id", "shape", "hlo_op", "hlo_module",
                         "program_id", "allocator_name", "allocation_bytes", "requested_bytes", "addr",
                         "bytes_allocated", "bytes_reserved"})
_DEVICE_STATS = frozenset({"correlation_id", "context_id"})
_AGGREGATED = "aggregated events (num_occurrences, no start time)"
_HLO_FROM_LAUNCH = ("XLA ops made from their launches' hlo_op stat (an op per execution of the instruction, spanning "
                    "its launches: the file writes the op on the launch, not as a host event)")
_DERIVED = "device events on lines XProf derived from the streams (skipped, not counted twice)"
_CORRUPT = "file is truncated or corrupt: planes or lines whose bytes do not decode (skipped)"
# host event classes (one per event metadata)
_OP, _PYTHON, _RUNTIME, _ANNOTATION, _MEMORY = range(5)
_KIND_NAME = {_OP: "cpu_op", _PYTHON: "python", _RUNTIME: "runtime", _ANNOTATION: "user_annotation"}


def derived_line(line_id: int, name: str) -> bool:
    """Whether a device-plane line is one XProf derived from the streams (by its name or its id)."""
    return (name in DERIVED_LINES or 0 <= line_id - _DERIVED_MIN < _DERIVED_SPAN
            or 0 <= line_id - (_DERIVED_MIN - (1 << 32)) < _DERIVED_SPAN)


def read(path: Path, progress=None, keep_args: bool = True) -> Trace:
    """Read an XSpace file into a Trace (not yet completed)."""
    with fast_type_inference():
        return _Reader(path, keep_args).run(progress)


def _load(path: Path) -> tuple[bytes, bool]:
    """The file's bytes, decompressed if gzip (a protobuf has no streaming parser: the message is parsed whole), and
    whether a gzip stream ended early (what came before it is kept: its whole planes are read)."""
    check_readable(path)
    if not is_gzip(path):
        return path.read_bytes(), False
    source = ByteSource(path)
    data = b"".join(source.blocks())
    return data, source.truncated


class _Rows:
    """Column lists for one batch of events."""

    def __init__(self) -> None:
        self.kind: list = []
        self.name: list = []
        self.ts: list = []
        self.dur: list = []
        self.pid: list = []
        self.tid: list = []
        self.device: list = []
        self.stream: list = []
        self.corr: list = []
        self.shapes: list = []
        self.dtypes: list = []
        self.concrete: list = []
        self.outputs: list = []
        self.args: list = []


class _Reader:
    def __init__(self, path: Path, keep_args: bool) -> None:
        from opscope.ingest.xplane.schema import classes

        self.path = path
        self.keep_args = keep_args
        self.cls = classes()
        self.builder = TraceBuilder(str(path), FORMAT)
        self.rows = _Rows()
        self.correlations: dict[tuple, int] = {}
        self.unmapped: Counter[str] = Counter()
        self.host_steps: list[tuple[int, int, int, str, str, bool]] = []  # (step, ts, dur, pid, tid, root)
        self.device_steps: list[tuple[int, int, int, str, str]] = []
        self.memory: dict[str, list] = {k: [] for k in ("ts_ns", "pid", "tid", "device_type", "device_id", "addr",
                                                          "bytes", "total_allocated", "total_reserved")}
        self.origin = 0
        self.tool: str | None = None
        self.n_events = 0
        self.sub_ns = 0
        self.process_names: dict[str, str] = {}
        self.thread_names: dict[str, str] = {}
        self.devices: list[dict[str, Any]] = []
        self.hlo = HloModules()
        self.metadata_planes: set[int] = set()
        self.thunks: dict[str, tuple[list[int], list[int]]] = {}
        self.tf_ops = self.tf_shaped = 0  # TF ops, and those with a shape stat

    # -- the file -------------------------------------------------------------------------------------

    def run(self, progress) -> Trace:
        planes, note, total = self._planes()
        if note:
            self.builder.warn(note, 1)
            self.builder.metadata["truncated"] = True
        self._environment(planes)
        self._metadata(planes)
        done = 0
        for i in range(len(planes)):
            raw, planes[i] = planes[i], b""  # each plane's bytes freed once decoded
            done += len(raw)
            if i in self.metadata_planes:  # read before the others (the programs the ops' records come from)
                continue
            plane = self._parse("LazyPlane", raw)
            del raw
            if plane is not None:
                self._plane(plane)
            del plane
            if progress is not None:
                progress(done, total)
        self._flush()
        if self.n_events == 0 and not self.memory["ts_ns"] and self.unmapped[_CORRUPT]:
            raise TraceError(self.path, "is a damaged XSpace protobuf (corrupt; no line decodes)",
                             "copy the .xplane.pb again from where the profiler wrote it")
        if self.n_events == 0 and not self.memory["ts_ns"]:
            raise TraceError(self.path, "is an XSpace with no events in any plane",
                             "the profile may have been stopped before anything ran")
        return self._finish()

    def _planes(self) -> tuple[list[bytes], str, int]:
        """Each plane's bytes, what to say about damage, the file's size; a damaged file gives its whole planes up to
        the damage. The file's bytes are dropped as soon as they are parsed (peak: twice the file, not three times)."""
        DecodeError = protobuf("message").DecodeError  # noqa: N806
        data, cut = _load(self.path)
        total = len(data)
        space = self.cls["LazySpace"]()
        try:
            space.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError):
            planes, note = self._salvage(data)
            return planes, note, total
        del data
        planes = list(space.planes)
        if not planes:
            raise TraceError(self.path, "is an XSpace with no planes", "the profiler wrote nothing")
        for error in list(space.errors)[:3]:
            self.builder.warn(f"profiler error recorded in the file: {error[:200]}", 1)
        note = "file is truncated (its gzip stream ends early): the planes before the cut are read" if cut else ""
        return planes, note, total

    def _salvage(self, data: bytes) -> tuple[list[bytes], str]:
        """Frame the top-level records (field 1, a plane; 2-4, strings) by hand and keep the planes that decode."""
        DecodeError = protobuf("message").DecodeError  # noqa: N806
        view = memoryview(data)
        planes: list[bytes] = []
        at = 0
        while at < len(data):
            tag, after = varint(view, at)
            if tag < 0 or tag & 7 != 2 or not 1 <= tag >> 3 <= 4:
                break
            size, start = varint(view, after)
            if size < 0 or start + size > len(data):
                break
            if tag >> 3 == 1:
                raw = bytes(view[start:start + size])
                try:
                    self.cls["LazyPlane"]().ParseFromString(raw)
                except (DecodeError, RuntimeError, ValueError):
                    break
                planes.append(raw)
            at = start + size
        if not planes:
            raise TraceError(self.path, "is a damaged XSpace protobuf (truncated or corrupt; no whole plane decodes)",
                             "copy the .xplane.pb again from where the profiler wrote it")
        return planes, (f"file is truncated or corrupt (the XSpace protobuf is damaged at byte {at:,} of "
                        f"{len(data):,}): read the {len(planes)} whole plane(s) before it, the rest is lost")

    def _environment(self, planes: list[bytes]) -> None:
        """Task Environment's profile start time: the epoch that the lines' (normalised) timestamps count from."""
        for raw in planes:
            head = self._parse("PlaneHead", raw, count=False)  # the name only: the big planes are decoded later
            if head is None or head.name != "Task Environment":
                continue
            plane = self._parse("LazyPlane", raw, count=False)
            if plane is None:
                continue
            stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
            env = {stat_names.get(s.metadata_id, str(s.metadata_id)): _plain(s, stat_names) for s in plane.stats}
            start = env.get("profile_start_time")
            if isinstance(start, int) and 0 < start < 1 << 62:
                self.builder.metadata["profile_start_time_ns"] = start
                self.origin = start
            stop = env.get("profile_stop_time")
            if isinstance(stop, int):
                self.builder.metadata["profile_stop_time_ns"] = stop
            return

    def _metadata(self, planes: list[bytes]) -> None:
        """``/host:metadata`` (a plane without lines): the programs' HLO protos, decoded before the planes whose ops
        they describe (:mod:`opscope.ingest.xplane.hlo`), and JAX's version."""
        for at, raw in enumerate(planes):
            head = self._parse("PlaneHead", raw, count=False)
            if head is None or head.name != "/host:metadata":
                continue
            plane = self._parse("LazyPlane", raw)
            if plane is None or plane.lines:
                continue
            self.metadata_planes.add(at)
            stat_names = self._stat_names(plane)
            other = bad = 0
            for mid, m in plane.event_metadata.items():
                protos = [s.bytes_value for s in m.stats if stat_names.get(s.metadata_id) == HLO_PROTO_STAT]
                if not protos:
                    other += 1
                elif not self.hlo.add(mid, protos[0]):
                    bad += 1
            if other:
                self.unmapped["metadata entries other than HLO protos (/host:metadata)"] += other
            if bad:
                self.unmapped["HLO protos that do not decode or are over 256 MiB (/host:metadata): their ops have "
                              "no shapes"] += bad
            stats = _stats(plane.stats, stat_names)
            if isinstance(stats.get("jax_version"), str):
                self.builder.metadata["jax_version"] = stats["jax_version"]
                self.tool = self.tool or "jax"

    # -- planes -----------------------------------------------------------------------------------------

    def _parse(self, kind: str, raw: bytes, count: bool = True):
        """The message, or None (counted) where its bytes do not decode."""
        DecodeError = protobuf("message").DecodeError  # noqa: N806
        message = self.cls[kind]()
        try:
            message.ParseFromString(raw)
        except (DecodeError, RuntimeError, ValueError):
            self.unmapped[_CORRUPT] += count
            return None
        return message

    def _plane(self, plane) -> None:
        name = plane.name
        if name == "Task Environment":
            return
        device = _DEVICE_PLANE.match(name)
        if device:
            self._device_plane(plane, device.group(1), int(device.group(2)))
        elif name.startswith("/host:CPU"):
            self._host_plane(plane)
        elif plane.lines:
            self.unmapped[f"planes other than /host:CPU and /device:*:N ({name[:60]})"] += 1

    def _stat_names(self, plane) -> dict[int, str]:
        return {k: v.name for k, v in plane.stat_metadata.items()}

    def _host_plane(self, plane) -> None:
        pid = plane.name
        self.process_names[pid] = pid
        stat_names = self._stat_names(plane)
        meta = {mid: (m.name, m.display_name, _stats(m.stats, stat_names) if m.stats else None)
                for mid, m in plane.event_metadata.items()}
        is_tf = any(_is_tf_op(name, display) for name, display, _ in meta.values())
        if is_tf:
            self.tool = TENSORFLOW
        # per event metadata: (class, model name, fixed args, metadata stats)
        classes = {mid: (*_host_class(name, display, is_tf), md_stats)
                   for mid, (name, display, md_stats) in meta.items()}
        unknown = (_ANNOTATION, "(unnamed event)", None, None)
        self.thunks = self._thunk_spans(plane, classes) if not is_tf and len(self.hlo) else {}
        for raw_line in plane.lines:
            line = self._parse("XLine", raw_line)
            if line is None:
                continue
            tid = str(line.id)
            self.thread_names[f"{pid}/{tid}"] = line.display_name or line.name
            if not is_tf and line.name.startswith(_JAX_THREADS):
                self.tool = "jax"
            self._host_line(line, pid, tid, classes, unknown, stat_names, hlo_ops=not is_tf)
            del line
            self._flush_if_big()

    def _thunk_spans(self, plane, classes: dict) -> dict[str, tuple[list[int], list[int]]]:
        """Per HLO instruction name, the host annotations named by it (XLA's thunk annotations: one per execution of
        the instruction, on the executing thread's TraceMe line, which is not the line of its launches): their
        starts, sorted, and the latest end among the spans up to each (an enclosure test in one bisection)."""
        names = self.hlo.instruction_names()
        wanted = {mid: c[1] for mid, c in classes.items() if c[0] == _ANNOTATION and c[1] in names}
        if not wanted:
            return {}
        spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for raw in plane.lines:
            line = self._parse("XLine", raw, count=False)
            if line is None:
                continue
            base = self._base(line)
            for ev in line.events:
                name = wanted.get(ev.metadata_id)
                if name is not None and ev.offset_ps >= 0 and ev.duration_ps >= 0:
                    start = base + ev.offset_ps // 1000
                    spans[name].append((start, start + ev.duration_ps // 1000))
        out: dict[str, tuple[list[int], list[int]]] = {}
        for name, found in spans.items():
            found.sort()
            latest, ends = -1, []
            for _, end in found:
                latest = max(latest, end)
                ends.append(latest)
            out[name] = ([s for s, _ in found], ends)
        return out

    def _one_execution(self, hlo: str, start: int, end: int) -> bool:
        """Whether one annotation named by the instruction spans [start, end]: the launches in it are one
        execution."""
        found = self.thunks.get(hlo)
        if found is None:
            return False
        at = bisect.bisect_right(found[0], start) - 1
        return at >= 0 and found[1][at] >= end

    def _host_line(self, line, pid: str, tid: str, classes: dict, unknown: tuple, stat_names: dict,
                   hlo_ops: bool = False) -> None:
        """The line's events as rows. ``hlo_ops``: a launch that names its HLO op (``hlo_op`` stat: JAX and XLA on a
        GPU, where no host event on its line encloses the launch) gets that op as a ``cpu_op`` around it, so its
        kernels have a launching op as a framework op's do (XProf's own link: a kernel's op is its launch's
        ``hlo_op``). The launches of one execution of the instruction (the next launch names the same instruction
        and one of XLA's annotations named by it spans both) share one op, spanning them: the instruction's work is
        then counted once per execution, not once per kernel."""
        rows = self.rows
        keep_args = self.keep_args
        kind_col, name_col, ts_col, dur_col, corr_col = rows.kind, rows.name, rows.ts, rows.dur, rows.corr
        shapes_col, dtypes_col, concrete_col, args_col = rows.shapes, rows.dtypes, rows.concrete, rows.args
        outputs_col = rows.outputs
        correlations = self.correlations
        keep = None if keep_args else _HOST_STATS
        base = self._base(line)
        n = 0
        last_op: tuple | None = None  # the latest XLA op made from a launch: (its batch, its row, instruction)
        for ev in line.events:
            offset = ev.offset_ps
            if not offset and ev.num_occurrences:
                self.unmapped[_AGGREGATED] += 1
                continue
            dur_ps = ev.duration_ps
            if offset % 1000 or dur_ps % 1000:
                self.sub_ns += 1
            ts = base + offset // 1000
            dur = dur_ps // 1000
            cls, name, fixed, md_stats = classes.get(ev.metadata_id, unknown)
            stats = _stats(ev.stats, stat_names, keep) if ev.stats else None
            if md_stats:
                stats = {**md_stats, **stats} if stats else dict(md_stats)
            corr = shapes = dtypes = concrete = outputs = None
            if stats:
                if cls == _MEMORY:
                    self._memory(stats, ts, pid, tid, _MEMORY_EVENTS[name])
                    continue
                step = stats.get("step_num")
                if step is not None and isinstance(step, int):
                    self.host_steps.append((step, ts, dur, pid, tid, "_r" in stats))
                if "correlation_id" in stats:
                    key = (stats["correlation_id"], stats.get("context_id"))
                    corr = correlations.get(key)
                    if corr is None:
                        corr = correlations[key] = len(correlations) + 1
                    cls = _RUNTIME
                    hlo = stats.get("hlo_op") if hlo_ops else None
                    if isinstance(hlo, str) and hlo:  # the op first: on equal spans it is the parent
                        instruction = (hlo, stats.get("program_id"), stats.get("hlo_module"))
                        if last_op is not None and last_op[0] is rows and last_op[2] == instruction and \
                                self._one_execution(hlo, ts_col[last_op[1]], ts + dur):
                            at = last_op[1]
                            dur_col[at] = max(dur_col[at], ts + dur - ts_col[at])
                        else:
                            last_op = (rows, len(ts_col), instruction)
                            self._hlo_op_row(hlo, stats, ts, dur)
                            n += 1
                elif cls == _ANNOTATION and "hlo_op" in stats:
                    # an XLA op run on the host (JAX/XLA on CPU): the framework op, named as its HLO instruction
                    cls, name = _OP, _HLO_SUFFIX.sub("", name)
                    shapes, dtypes, concrete, outputs = self.hlo.record(stats["hlo_op"], stats.get("hlo_module"),
                                                                        stats.get("program_id"))
                elif cls == _OP:
                    shape = stats.get("shape")
                    if isinstance(shape, str):
                        shapes, dtypes = _tf_shapes(shape)
            elif cls == _MEMORY:
                self._memory({}, ts, pid, tid, _MEMORY_EVENTS[name])
                continue
            if fixed is not None and cls == _OP:
                self.tf_ops += 1
                self.tf_shaped += bool(stats and "shape" in stats)
            kind_col.append(_KIND_NAME[cls])
            name_col.append(name)
            ts_col.append(ts)
            dur_col.append(dur)
            corr_col.append(corr)
            shapes_col.append(shapes)
            dtypes_col.append(dtypes)
            concrete_col.append(concrete)
            outputs_col.append(outputs)
            if keep_args:
                if fixed:
                    args_col.append(json.dumps({**fixed, **stats} if stats else fixed))
                else:
                    args_col.append(json.dumps(stats) if stats else None)
            n += 1
            if len(ts_col) >= BATCH_ROWS:
                self._fill(n, pid, tid, None, None)
                n = 0
                self._flush()
                rows = self.rows
                kind_col, name_col, ts_col, dur_col, corr_col = rows.kind, rows.name, rows.ts, rows.dur, rows.corr
                shapes_col, dtypes_col, concrete_col, args_col = rows.shapes, rows.dtypes, rows.concrete, rows.args
                outputs_col = rows.outputs
        self._fill(n, pid, tid, None, None)

    def _hlo_op_row(self, hlo: str, stats: dict[str, Any], ts: int, dur: int) -> None:
        """A ``cpu_op`` named by the launch's HLO instruction (without its ``.N``), spanning the launch, with the
        instruction's record from its program's HLO proto where the file has it."""
        rows = self.rows
        rows.kind.append(_KIND_NAME[_OP])
        rows.name.append(_HLO_SUFFIX.sub("", hlo))
        rows.ts.append(ts)
        rows.dur.append(dur)
        rows.corr.append(None)
        shapes, dtypes, concrete, outputs = self.hlo.record(hlo, stats.get("hlo_module"), stats.get("program_id"))
        rows.shapes.append(shapes)
        rows.dtypes.append(dtypes)
        rows.concrete.append(concrete)
        rows.outputs.append(outputs)
        if self.keep_args:
            op_args = {"hlo_op": hlo, "hlo_module": stats.get("hlo_module"), "framework_op": stats.get("name")}
            rows.args.append(json.dumps({k: v for k, v in op_args.items() if v is not None}))
        self.unmapped[_HLO_FROM_LAUNCH] += 1

    def _fill(self, n: int, pid: str, tid: str, device: int | None, stream: int | None) -> None:
        """The columns one line gives all its rows alike, for the line's last ``n`` rows."""
        rows = self.rows
        rows.pid.extend([pid] * n)
        rows.tid.extend([tid] * n)
        rows.device.extend([device] * n)
        rows.stream.extend([stream] * n)

    def _device_plane(self, plane, device_type: str, ordinal: int) -> None:
        pid = plane.name
        self.process_names[pid] = pid
        stat_names = self._stat_names(plane)
        props: dict[str, Any] = {"id": ordinal, "name": pid, "type": device_type}
        for s in plane.stats:
            key = stat_names.get(s.metadata_id)
            if key in _DEVICE_PROPS:
                props[_DEVICE_PROPS[key]] = _plain(s, stat_names)
        self.devices.append(props)
        meta = {mid: (m.name or m.display_name or "(unnamed kernel)", _stats(m.stats, stat_names) if m.stats else None,
                      _device_kind(m.name or m.display_name))
                for mid, m in plane.event_metadata.items()}
        streams = 0
        xla_ops: list[bytes] = []
        for raw in plane.lines:  # one line decoded at a time
            line = self._parse("XLine", raw)
            if line is None:
                continue
            if _STREAM_LINE.match(line.name) and not derived_line(line.id, line.name):
                streams += 1
                self._device_line(line, pid, ordinal, meta, stat_names)
            elif line.name == "Steps" or (derived_line(line.id, line.name) and line.name == ""):
                self._device_step_line(line, pid, meta)
            elif line.name == "XLA Ops":
                xla_ops.append(raw)
            elif derived_line(line.id, line.name):
                self.unmapped[_DERIVED] += len(line.events)
            else:
                self.unmapped[f"device events on lines that are not streams ({line.name[:40]!r})"] += len(line.events)
            del line
            self._flush_if_big()
        for raw in xla_ops:
            line = self._parse("XLine", raw)
            if streams:
                self.unmapped[_DERIVED] += len(line.events)
            else:  # a plane with no stream lines (TPU-like): its XLA Ops line is the device's own record
                self.unmapped["device planes without stream lines (their XLA Ops line read as the kernels)"] += 1
                self._device_line(line, pid, ordinal, meta, stat_names)
        self._flush_if_big()

    def _device_line(self, line, pid: str, ordinal: int, meta: dict, stat_names: dict) -> None:
        m = _STREAM_LINE.match(line.name)
        stream = int(m.group(1)) if m else line.id
        tid = str(stream)
        self.thread_names[f"{pid}/{tid}"] = line.name
        base = self._base(line)
        rows = self.rows
        keep_args = self.keep_args
        kind_col, name_col, ts_col, dur_col, corr_col, args_col = (rows.kind, rows.name, rows.ts, rows.dur, rows.corr,
                                                                   rows.args)
        correlations = self.correlations
        missing = ("(unnamed kernel)", None, "kernel")
        keep = None if keep_args else _DEVICE_STATS
        ids = {name: mid for mid, name in stat_names.items()}
        corr_mid, ctx_mid = ids.get("correlation_id", -1), ids.get("context_id", -1)
        n = 0
        for ev in line.events:
            offset = ev.offset_ps
            if not offset and ev.num_occurrences:
                self.unmapped[_AGGREGATED] += 1
                continue
            dur_ps = ev.duration_ps
            if offset % 1000 or dur_ps % 1000:
                self.sub_ns += 1
            name, md_stats, kind = meta.get(ev.metadata_id, missing)
            corr = None
            if keep_args or md_stats:
                stats = _stats(ev.stats, stat_names, keep) if ev.stats else None
                if md_stats:
                    stats = {**md_stats, **stats} if stats else dict(md_stats)
                if stats and "correlation_id" in stats:
                    key = (stats["correlation_id"], stats.get("context_id"))
                    corr = correlations.get(key)
                    if corr is None:
                        corr = correlations[key] = len(correlations) + 1
            else:  # only the link is needed: read its two stats, nothing else
                cid = ctx = None
                for st in ev.stats:
                    mid = st.metadata_id
                    if mid == corr_mid:
                        cid = _plain(st, stat_names)
                    elif mid == ctx_mid:
                        ctx = _plain(st, stat_names)
                if cid is not None:
                    key = (cid, ctx)
                    corr = correlations.get(key)
                    if corr is None:
                        corr = correlations[key] = len(correlations) + 1
            kind_col.append(kind)
            name_col.append(name)
            ts_col.append(base + offset // 1000)
            dur_col.append(dur_ps // 1000)
            corr_col.append(corr)
            if keep_args:
                if stats and "kernel_details" in stats:
                    stats.update(_kernel_details(stats["kernel_details"]))
                args_col.append(json.dumps(stats) if stats else None)
            n += 1
            if len(ts_col) >= BATCH_ROWS:
                self._fill_device(n, pid, tid, ordinal, stream)
                n = 0
                self._flush()
                rows = self.rows
                kind_col, name_col, ts_col, dur_col, corr_col, args_col = (rows.kind, rows.name, rows.ts, rows.dur,
                                                                           rows.corr, rows.args)
        self._fill_device(n, pid, tid, ordinal, stream)

    def _fill_device(self, n: int, pid: str, tid: str, device: int, stream: int) -> None:
        self._fill(n, pid, tid, device, stream)
        self.rows.shapes.extend([None] * n)
        self.rows.dtypes.extend([None] * n)
        self.rows.concrete.extend([None] * n)
        self.rows.outputs.extend([None] * n)

    def _device_step_line(self, line, pid: str, meta: dict) -> None:
        base = self._base(line)
        for i, ev in enumerate(line.events):
            name = meta[ev.metadata_id][0] if ev.metadata_id in meta else ""
            step = int(name) if name.isdigit() and len(name) < 18 else i
            self.device_steps.append((step, base + ev.offset_ps // 1000, ev.duration_ps // 1000, pid, str(line.id)))

    def _base(self, line) -> int:
        """A line's start on the epoch: XProf's saved files count line times from the profile's start (Task
        Environment's ``profile_start_time``); a line already on the epoch (a raw profiler dump) is kept as it is."""
        ts = line.timestamp_ns
        return ts + self.origin if ts < self.origin // 2 else ts

    # -- rows ---------------------------------------------------------------------------------------------

    def _memory(self, stats: dict, ts: int, pid: str, tid: str, sign: int) -> None:
        allocator = str(stats.get("allocator_name") or "")
        gpu = _GPU_ALLOCATOR.match(allocator)
        size = stats.get("allocation_bytes", stats.get("requested_bytes"))
        m = self.memory
        m["ts_ns"].append(ts)
        m["pid"].append(pid)
        m["tid"].append(tid)
        m["device_type"].append(1 if gpu else 0)
        m["device_id"].append(int(gpu.group(1)) if gpu else -1)
        m["addr"].append(_int(stats.get("addr")))
        m["bytes"].append(sign * size if isinstance(size, int) else None)
        m["total_allocated"].append(_int(stats.get("bytes_allocated")))
        m["total_reserved"].append(_int(stats.get("bytes_reserved")))

    def _flush_if_big(self) -> None:
        if len(self.rows.ts) >= BATCH_ROWS // 4:
            self._flush()

    def _flush(self) -> None:
        rows = self.rows
        if not rows.ts:
            return
        text = pa.string()
        # a line's timestamp_ns and an event's offset, each within int64, may sum beyond it: refused, counted
        columns = {"kind": pa.array(rows.kind, text).dictionary_encode(),
                   "name": pa.array(rows.name, text).dictionary_encode(), "ts_ns": int64_array(rows.ts),
                   "dur_ns": int64_array(rows.dur), "pid": pa.array(rows.pid, text).dictionary_encode(),
                   "tid": pa.array(rows.tid, text).dictionary_encode(), "device": int64_array(rows.device),
                   "stream": int64_array(rows.stream), "correlation": int64_array(rows.corr),
                   "shapes": pa.array(rows.shapes, text), "dtypes": pa.array(rows.dtypes, text),
                   "concrete_inputs": pa.array(rows.concrete, text), "output_shapes": pa.array(rows.outputs, text)}
        self.builder.add_events(columns, rows.args if self.keep_args else None)
        self.n_events += len(rows.ts)
        self.rows = _Rows()

    def _finish(self) -> Trace:
        b = self.builder
        if self.memory["ts_ns"]:
            b.add_memory(self.memory)
        steps = self._steps()
        if steps:
            b.add_steps({k: [s[i] for s in steps] for i, k in enumerate(("step", "name", "pid", "tid", "ts_ns",
                                                                          "dur_ns"))})
        b.metadata["tool"] = self.tool or "xplane"
        b.metadata["process_names"] = self.process_names
        b.metadata["thread_names"] = self.thread_names
        if self.devices:
            b.metadata["device_properties"] = self.devices
        if self.sub_ns:
            b.warn("events whose XSpace times have a fraction of a nanosecond (rounded down)", self.sub_ns)
        if self.tf_ops and not self.tf_shaped:
            b.warn("TensorFlow ops, none recorded with its input shapes (TF records them at host_tracer_level=3): no "
                   "work for the roofline", self.tf_ops)
        for problem, count in self.unmapped.items():
            b.warn(problem if problem == _CORRUPT else f"{problem}: not mapped", count)
        if self.unmapped[_CORRUPT]:
            b.metadata["truncated"] = True
        return b.finish()

    def _steps(self) -> list[tuple]:
        """XProf's step markers: the host's ``step_num`` events (the roots, ``_r``, where marked), else the device
        planes' ``Steps`` lines; one step per number spanning all its marks."""
        marks: list[tuple] = []
        if self.host_steps:
            roots = [s for s in self.host_steps if s[5]]
            marks = [s[:5] for s in (roots or self.host_steps)]
        elif self.device_steps:
            marks = self.device_steps
        by_step: dict[int, list] = {}
        for step, ts, dur, pid, tid in marks:
            span = by_step.get(step)
            if span is None:
                by_step[step] = [ts, ts + dur, pid, tid]
            else:
                span[0], span[1] = min(span[0], ts), max(span[1], ts + dur)
        return [(step, f"step {step}", pid, tid, start, end - start)
                for step, (start, end, pid, tid) in sorted(by_step.items(), key=lambda kv: kv[1][0])]


def _device_kind(name: str) -> str:
    lower = name[:6].lower()
    return "memcpy" if lower == "memcpy" else "memset" if lower == "memset" else "kernel"


def _is_tf_op(name: str, display: str) -> bool:
    """``scope/node:Type`` with display name ``Type`` (a CamelCase op type, not ``Class::method``)."""
    return (bool(display) and name.endswith(":" + display) and not name.endswith("::" + display)
            and _OP_TYPE.match(display) is not None)


def _host_class(name: str, display: str, is_tf: bool) -> tuple[int, str, dict | None]:
    """(class, model name, fixed args) of a host event metadata entry."""
    if _is_tf_op(name, display):
        node = name[:-len(display) - 1]
        scope = node.rsplit("/", 1)[0] if "/" in node else ""
        return _OP, display, {"node": node, "scope": scope, "long_name": name}
    if name.startswith("$"):
        return _PYTHON, name[1:] or name, None
    if name in _MEMORY_EVENTS:
        return _MEMORY, name, None
    if _DRIVER_API.match(name):
        return _RUNTIME, name, None
    if is_tf and _TF_RUNTIME.search(name):
        return _RUNTIME, name, None
    return _ANNOTATION, name or display or "(unnamed event)", None


def _plain(stat, stat_names: dict[int, str]) -> Any:
    """One stat's value (``ref_value`` as the text it names)."""
    which = stat.WhichOneof("value")
    if which is None:
        return None
    value = getattr(stat, which)
    if which == "ref_value":
        return stat_names.get(value, value)
    return f"<{len(value)} bytes>" if which == "bytes_value" else value


def _stats(stats, stat_names: dict[int, str], keep: frozenset[str] | None = None) -> dict[str, Any]:
    """Stats by name (``ref_value`` as the text it names); only those in ``keep`` where given."""
    out: dict[str, Any] = {}
    for s in stats:
        mid = s.metadata_id
        name = stat_names.get(mid)
        if name is None:
            name = str(mid)
        if keep is not None and name not in keep:
            continue
        which = s.WhichOneof("value")
        if which is None:
            out[name] = None
            continue
        value = getattr(s, which)
        if which == "ref_value":
            value = stat_names.get(value, value)
        elif which == "bytes_value":
            value = f"<{len(value)} bytes>"
        out[name] = value
    return out


def _int(value: Any) -> int | None:
    return int64(value) if isinstance(value, int) else None


def _kernel_details(text: Any) -> dict[str, Any]:
    """``grid:219,40,1 block:256,1,1 ...`` -> Kineto's ``grid``/``block`` lists."""
    if not isinstance(text, str):
        return {}
    return {m.group(1): [int(m.group(2)), int(m.group(3)), int(m.group(4))] for m in _KERNEL_DIM.finditer(text)}


@functools.lru_cache(maxsize=1 << 14)
def _tf_shapes(text: str) -> tuple[str | None, str | None]:
    """TF's ``(int32[4,384];float[])`` -> ``[[4,384],[]]`` and ``["int32","float"]`` (JSON, like Kineto's). An empty
    entry (TF's placeholder for a resource or absent input: ``(;float[2])``) is a non-tensor argument, ``[]`` of
    type ``""``."""
    inner = text.strip()
    if inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1]
    dims: list[list[int]] = []
    types: list[str] = []
    for part in inner.split(";") if inner else []:
        if not part.strip():
            dims.append([])
            types.append("")
            continue
        m = _TF_SHAPE.match(part)
        if not m:
            return None, None
        types.append(m.group(1))
        body = m.group(2).strip()
        try:
            dims.append([int(d) for d in body.split(",")] if body else [])
        except ValueError:
            return None, None
    return json.dumps(dims, separators=(",", ":")), json.dumps(types)
