"""rocprof's summary files: ``*.stats.csv``, ``*.hip_stats.csv``, ``*.copy_stats.csv`` (and rocprofv3's
``*_kernel_stats.csv``, ``*_hip_api_stats.csv``, ``*_memory_copy_stats.csv``).

``"Name","Calls","TotalDurationNs","AverageNs","Percentage"`` (rocprofv3 adds ``MinNs``, ``MaxNs``, ``StdDev``):
totals per name, no timeline. They enter the model so that ``kernels``/``ops`` show exactly the file's calls
and totals: each name becomes ``Calls`` events whose durations sum to ``TotalDurationNs`` to the ns (the first
``Total % Calls`` of them 1 ns longer than ``Total // Calls``), laid end to end from t = 0 in the file's
order, and a warning says the times are synthetic. What a row is comes from its name: HIP/HSA API functions
-> ``runtime`` on one host thread; ``CopyHostToDevice``/``MEMORY_COPY_*`` -> ``memcpy``, ``FillBuffer`` ->
``memset``, every other name -> ``kernel`` (rocprof counts its barrier packets, ``Unknown command type``, as
kernels too), on device 0 (the file does not say which). The file's own rows are kept as
``metadata.rocprof_stats``. kokkos's stats files leave names with commas unquoted: the numbers are taken
from the right (see :mod:`~opscope.ingest.rocprof.csv_table`).
"""

from __future__ import annotations

import re
from pathlib import Path

from opscope.model.trace import Trace

FORMAT = "rocprof_stats"
_HEADER = re.compile(rb'^\s*(?:\xef\xbb\xbf)?"?Name"?\s*,\s*"?Calls"?\s*,\s*"?TotalDurationNs"?\s*,\s*"?AverageNs"?')
_API = re.compile(r"^(?:hip|__hip|hsa_|roctx|rccl|nccl)|^(?:HIP|HSA|MARKER|RCCL)_")
_COPY = re.compile(r"(?i)^(?:Copy|MEMORY_COPY)")
_FILL = re.compile(r"(?i)^(?:FillBuffer|MEMORY_SET|memset)")
#: Beyond this many synthetic events a file is refused: its totals would not fit memory as single calls.
MAX_CALLS = 50_000_000


class RocprofStatsReader:
    """rocprof's per-name summaries, sniffed by their header."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        return _HEADER.match(head) is not None

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.errors import TraceError
        from opscope.ingest.rocprof.csv_table import as_float, as_int, key, read_table
        from opscope.model.builder import TraceBuilder

        table = read_table(path, 0)
        cols = {key(h): i for i, h in enumerate(table.header)}
        for need in ("name", "calls", "totaldurationns"):
            if need not in cols:
                raise TraceError(path, f"rocprof stats file without a {need!r} column")
        builder = TraceBuilder(str(path), FORMAT)
        table.warn_into(builder.warn)
        stats = []
        bad = 0
        names, kinds, ts, dur, devices, streams, pids, tids = [], [], [], [], [], [], [], []
        t = 0
        total_calls = 0
        for row in table.rows:
            name = row[cols["name"]].strip()
            calls = as_int(row[cols["calls"]])
            total = as_int(row[cols["totaldurationns"]])
            if calls is None or total is None or calls < 0 or total < 0 or (calls == 0 and total > 0):
                bad += 1
                continue
            total_calls += calls
            if total_calls > MAX_CALLS:
                raise TraceError(path, f"holds more than {MAX_CALLS:,} calls", "too many to lay out as events")
            entry: dict = {"name": name, "calls": calls, "total_ns": total}
            for column, label in (("averagens", "average_ns"), ("percentage", "percentage"), ("minns", "min_ns"),
                                  ("maxns", "max_ns"), ("stddev", "stddev")):
                if column in cols:
                    entry[label] = as_float(row[cols[column]])
            stats.append(entry)
            kind = _kind(name)
            base, extra = divmod(total, calls) if calls else (0, 0)
            for c in range(calls):
                d = base + (1 if c < extra else 0)
                names.append(name)
                kinds.append(kind)
                ts.append(t)
                dur.append(d)
                t += d
            gpu = kind != "runtime"
            devices.extend([0 if gpu else None] * calls)
            streams.extend([0 if gpu else None] * calls)
            pids.extend(["GPU 0" if gpu else "host"] * calls)
            tids.extend(["stream 0" if gpu else "0"] * calls)
        if bad:
            builder.warn("rows whose Calls/TotalDurationNs are not counts (dropped)", bad)
        if not names:
            if bad or table.dropped_short:
                raise TraceError(path, "has no readable rows", "Calls and TotalDurationNs must be integers")
            raise TraceError(path, "has a header and no rows")
        builder.add_events({"kind": kinds, "name": names, "ts_ns": ts, "dur_ns": dur, "device": devices,
                            "stream": streams, "pid": pids, "tid": tids})
        builder.metadata.update({"tool": "rocprof", "rocprof_stats": stats, "device_properties": [],
                                 "process_names": {"host": "host (rocprof stats)", "GPU 0": "GPU (rocprof stats)"},
                                 "thread_names": {}, "synthetic_times": True})
        builder.warn("rocprof stats file: no timeline; each name's calls are laid end to end from t=0 with "
                     "durations summing to its TotalDurationNs (times synthetic, GPU work put on device 0)",
                     len(names))
        return builder.finish()


READER = RocprofStatsReader()


def _kind(name: str) -> str:
    if _API.search(name):
        return "runtime"
    if _FILL.search(name):
        return "memset"
    if _COPY.search(name):
        return "memcpy"
    return "kernel"
