"""Timing and bandwidth of each collective instance across its ranks (times on one clock: ``apply_offsets``).

Per (instance, rank): ``arrival_ns`` is the rank's kernel start; a kernel that starts before the last member has
arrived spins until then, so ``wait_ns`` = last arrival - arrival (clamped to [0, dur]) and ``transfer_ns`` =
end - last arrival (clamped >= 0). ``late_ns`` = arrival - the median arrival of the *other* members (leave one
out: with two ranks the late one gets +d and the early one -d).

Per instance: ``skew_ns`` = last - first arrival; ``transfer_ns`` the median over ranks, ``wait_ns`` the mean;
``algbw_gbps`` = bytes / transfer time (GB/s = 1e9 B/s) and ``busbw_gbps`` = algbw x the nccl-tests factor for n
ranks (allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce, send, recv 1), with n
the group size (bus bandwidth is left null where n is unknown and the factor needs it). ``pct_of_peak`` compares
bus bandwidth with the slowest member's link peak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import mean, median

import pyarrow as pa

from opscope.analyses.collectives import MATCHED_BY_ORDER

PER_RANK = pa.schema([
    ("instance", pa.int64()),
    ("rank", pa.int64()),
    ("arrival_ns", pa.int64()),
    ("wait_ns", pa.int64()),
    ("transfer_ns", pa.int64()),
    ("late_ns", pa.int64()),
    ("step", pa.int64()),
    ("dur_ns", pa.int64()),
])

INSTANCES = pa.schema([
    ("instance", pa.int64()),
    ("pg", pa.string()),
    ("collective", pa.string()),
    ("algorithm", pa.string()),
    ("protocol", pa.string()),
    ("dtype", pa.string()),
    ("bytes", pa.int64()),
    ("group_size", pa.int64()),
    ("ranks", pa.int64()),
    ("step", pa.int64()),
    ("seq", pa.int64()),
    ("first_arrival_ns", pa.int64()),
    ("skew_ns", pa.int64()),
    ("last_rank", pa.int64()),
    ("transfer_ns", pa.int64()),
    ("wait_ns", pa.int64()),
    ("algbw_gbps", pa.float64()),
    ("busbw_gbps", pa.float64()),
    ("peak_gbps", pa.float64()),
    ("pct_of_peak", pa.float64()),
])

SUMMARY = pa.schema([
    ("collective", pa.string()),
    ("size_bucket", pa.string()),
    ("calls", pa.int64()),
    ("total_bytes", pa.int64()),
    ("median_skew_ns", pa.int64()),
    ("mean_wait_ns", pa.int64()),
    ("mean_transfer_ns", pa.int64()),
    ("median_busbw_gbps", pa.float64()),
    ("median_pct_of_peak", pa.float64()),
])

_KIB, _MIB = 1 << 10, 1 << 20
#: (label, upper bound in bytes, exclusive), in order; then ">=256 MiB" and "unknown".
SIZE_BUCKETS = (("<64 KiB", 64 * _KIB), ("64 KiB-1 MiB", _MIB), ("1-16 MiB", 16 * _MIB), ("16-256 MiB", 256 * _MIB))
_BUCKET_ORDER = [label for label, _ in SIZE_BUCKETS] + [">=256 MiB", "unknown"]

NOTES = (
    "bandwidth is bytes over the transfer time (the kernel's time after the last rank arrived), not the whole "
    "kernel: the wait for late ranks is left out, unlike nccl-tests, which times from a synchronised start",
    "bus bandwidth uses the nccl-tests factors; the link peak is the intra-node link (NVLink, xGMI): a group that "
    "spans nodes is limited by the network instead, so its percentage of that peak reads low",
)


_USED = ("instance", "rank", "pg", "collective", "algorithm", "protocol", "dtype", "bytes", "group_size", "step",
         "seq", "start_ns", "end_ns", "dur_ns", "matched_by")


@dataclass
class Timing:
    per_rank: pa.Table
    instances: pa.Table
    summary: pa.Table
    notes: list[str] = field(default_factory=list)


def bus_factor(collective: str, n: int | None) -> float | None:
    """nccl-tests' bus bandwidth factor for ``n`` ranks (None where it needs ``n`` and ``n`` is unknown)."""
    if collective in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        return 1.0
    if n is None or n < 1:
        return None
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return None


def size_bucket(size: int | None) -> str:
    if size is None:
        return "unknown"
    for label, bound in SIZE_BUCKETS:
        if size < bound:
            return label
    return ">=256 MiB"


def collective_timing(long_aligned: pa.Table, peaks_gbps: Mapping[int, float] | None = None) -> Timing:
    """Per (instance, rank), per instance and per (collective, size bucket) timing of matched collectives whose
    times are on one clock (``apply_offsets(match_instances(...).long, clocks)``); ``peaks_gbps``: rank -> its
    link's unidirectional peak (``link_peak_gbps``), where known."""
    columns = {name: long_aligned[name].to_pylist() for name in _USED}
    members: dict[int, list[int]] = {}
    for row, instance in enumerate(columns["instance"]):
        members.setdefault(instance, []).append(row)
    per_rank: dict[str, list] = {f.name: [] for f in PER_RANK}
    instances: dict[str, list] = {f.name: [] for f in INSTANCES}
    no_factor = uneven = 0
    for instance in sorted(members):
        rows = sorted(members[instance], key=lambda r: columns["rank"][r])
        arrivals = [columns["start_ns"][r] for r in rows]
        last = max(arrivals)
        loo = _leave_one_out_medians(arrivals)
        waits, transfers = [], []
        for k, r in enumerate(rows):
            dur = columns["dur_ns"][r]
            waits.append(min(max(last - arrivals[k], 0), dur))
            transfers.append(max(columns["end_ns"][r] - last, 0))
            per_rank["instance"].append(instance)
            per_rank["rank"].append(columns["rank"][r])
            per_rank["arrival_ns"].append(arrivals[k])
            per_rank["wait_ns"].append(waits[-1])
            per_rank["transfer_ns"].append(transfers[-1])
            per_rank["late_ns"].append(round(arrivals[k] - loo[k]) if loo[k] is not None else None)
            per_rank["step"].append(columns["step"][r])
            per_rank["dur_ns"].append(dur)
        first = rows[0]
        collective = columns["collective"][first]
        sizes = [columns["bytes"][r] for r in rows if columns["bytes"][r] is not None]
        size = max(sizes) if sizes else None
        if len(set(sizes)) > 1:
            uneven += 1
        group_size = columns["group_size"][first]
        transfer = round(median(transfers))
        algbw = size / transfer if size is not None and transfer > 0 else None
        factor = bus_factor(collective, group_size)
        if algbw is not None and factor is None:
            no_factor += 1
        busbw = algbw * factor if algbw is not None and factor is not None else None
        peak = _peak(peaks_gbps, [columns["rank"][r] for r in rows])
        instances["instance"].append(instance)
        for name in ("pg", "collective", "algorithm", "protocol", "dtype", "step", "seq"):
            instances[name].append(columns[name][first])
        instances["bytes"].append(size)
        instances["group_size"].append(group_size)
        instances["ranks"].append(len(rows))
        instances["first_arrival_ns"].append(min(arrivals))
        instances["skew_ns"].append(last - min(arrivals))
        instances["last_rank"].append(columns["rank"][rows[arrivals.index(last)]])
        instances["transfer_ns"].append(transfer)
        instances["wait_ns"].append(round(mean(waits)))
        instances["algbw_gbps"].append(algbw)
        instances["busbw_gbps"].append(busbw)
        instances["peak_gbps"].append(peak)
        instances["pct_of_peak"].append(100 * busbw / peak if busbw is not None and peak else None)
    instance_table = pa.table(instances, schema=INSTANCES)
    notes = list(NOTES)
    by_order = len({i for i, m in zip(columns["instance"], columns["matched_by"]) if m == MATCHED_BY_ORDER})
    if by_order:
        notes.append(f"{by_order} collective instance(s) were matched by order, not by process group (their calls "
                     "record none): their skew and bandwidth rest on that inference")
    if no_factor:
        notes.append(f"{no_factor} collective instance(s) without a known group size: no bus bandwidth (its factor "
                     "depends on the number of ranks)")
    if uneven:
        notes.append(f"{uneven} all-to-all instance(s) with different sizes on different ranks (uneven splits): "
                     "their bytes are the largest rank's")
    return Timing(pa.table(per_rank, schema=PER_RANK), instance_table, _summary(instance_table), notes)


def _leave_one_out_medians(values: list[int]) -> list[float | None]:
    """For each value, the median of all the others (None when there are no others), from one sort."""
    n = len(values)
    if n < 2:
        return [None] * n
    order = sorted(range(n), key=values.__getitem__)
    ranked = [values[i] for i in order]
    position = [0] * n
    for p, i in enumerate(order):
        position[i] = p
    m = n - 1

    def remaining(j: int, removed: int) -> int:  # the j-th smallest once the one at ``removed`` is left out
        return ranked[j] if j < removed else ranked[j + 1]

    out: list[float | None] = []
    for k in range(n):
        p = position[k]
        if m % 2:
            out.append(remaining(m // 2, p))
        else:
            out.append((remaining(m // 2 - 1, p) + remaining(m // 2, p)) / 2)
    return out


def _peak(peaks: Mapping[int, float] | None, ranks: list[int]) -> float | None:
    """The slowest known link among the instance's ranks."""
    if not peaks:
        return None
    known = [peaks[r] for r in ranks if peaks.get(r)]
    return min(known) if known else None


def _summary(instances: pa.Table) -> pa.Table:
    columns = {name: instances[name].to_pylist() for name in instances.column_names}
    groups: dict[tuple[str, str], list[int]] = {}
    for row, (collective, size) in enumerate(zip(columns["collective"], columns["bytes"])):
        groups.setdefault((collective, size_bucket(size)), []).append(row)
    out: dict[str, list] = {f.name: [] for f in SUMMARY}
    for collective, bucket in sorted(groups, key=lambda k: (k[0], _BUCKET_ORDER.index(k[1]))):
        rows = groups[(collective, bucket)]
        sizes = [columns["bytes"][r] for r in rows if columns["bytes"][r] is not None]
        busbw = [columns["busbw_gbps"][r] for r in rows if columns["busbw_gbps"][r] is not None]
        pct = [columns["pct_of_peak"][r] for r in rows if columns["pct_of_peak"][r] is not None]
        out["collective"].append(collective)
        out["size_bucket"].append(bucket)
        out["calls"].append(len(rows))
        out["total_bytes"].append(sum(sizes) if sizes else None)
        out["median_skew_ns"].append(round(median(columns["skew_ns"][r] for r in rows)))
        out["mean_wait_ns"].append(round(mean(columns["wait_ns"][r] for r in rows)))
        out["mean_transfer_ns"].append(round(mean(columns["transfer_ns"][r] for r in rows)))
        out["median_busbw_gbps"].append(median(busbw) if busbw else None)
        out["median_pct_of_peak"].append(median(pct) if pct else None)
    return pa.table(out, schema=SUMMARY)
