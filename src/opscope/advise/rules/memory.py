"""Device memory close to capacity (an allocation spike away from out-of-memory, and the caching allocator
freeing its cache and retrying cudaMalloc before that) or reserved far above what is allocated (fragmentation:
memory the allocator's cache holds that the requested sizes cannot use).

Reads the ``[memory]`` records of torch.profiler(profile_memory=True) through :mod:`opscope.analyses.memory`;
no time saving is claimed, the findings give the bytes at stake.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import combined
from opscope.analyses.memory import memory_records, peak_table
from opscope.model.buffers import true_positions

#: Peak memory (allocated or reserved) at or above this share of the device's capacity is "close to capacity".
CAPACITY_SHARE = 0.90
#: Reserved-but-unallocated memory at the reserved peak at or above this share of reserved is fragmentation...
FRAGMENTED_SHARE = 0.30
#: ...when it is at least this share of the device's capacity (this many bytes when the capacity is unknown).
FRAGMENTED_CAPACITY_SHARE = 0.10
FRAGMENTED_BYTES = 256 << 20


def _gib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB"


def _pct(part: int | None, whole: int | None) -> float | None:
    return round(100.0 * part / whole, 2) if part is not None and whole else None


def _device_index(label: str) -> int | None:
    """``cuda:1`` -> 1; host memory (``cpu``) and labels without an index -> None."""
    kind, _, index = label.partition(":")
    return int(index) if kind != "cpu" and index.isdigit() else None


def _fragmented_growth(reserved: pa.Array, allocated: pa.Array) -> tuple[int, int, int] | None:
    """The last record at which reserved memory grew although the allocator's cache held at least as many free bytes
    as were requested (reserved minus allocated before it >= the allocation's size): the evidence fragmentation needs.
    ``(row, free bytes before, bytes requested)``; None when reserved never grew so (a reservation made before the
    trace, constant throughout, shows nothing about fragmentation). Records with a null on either side are passed
    over."""
    n = len(reserved)
    if n < 2:
        return None
    before_r, after_r = reserved.slice(0, n - 1), reserved.slice(1)
    before_a, after_a = allocated.slice(0, n - 1), allocated.slice(1)
    free_before, request = pc.subtract(before_r, before_a), pc.subtract(after_a, before_a)
    grew = pc.and_(pc.greater(after_r, before_r),
                   pc.and_(pc.greater(request, 0), pc.less_equal(request, free_before)))
    hits = true_positions(pc.fill_null(grew, False))
    if not len(hits):
        return None
    last = hits[-1].as_py()
    return last + 1, free_before[last].as_py(), request[last].as_py()


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.trace.memory.num_rows == 0:
        raise NotApplicable("no memory records (record with torch.profiler.profile(profile_memory=True); "
                            "opscope record does)")
    rec = memory_records(ctx.trace, with_ops=False)  # peaks and totals only
    devices = [d for d in rec.devices if _device_index(d) is not None]
    if not devices:
        raise NotApplicable("only host memory records: the host's capacity is not in the trace")
    peaks = {r["device"]: r for r in peak_table(rec, ctx.trace.steps).to_pylist()}
    capacity = {p.get("id"): p.get("total_memory") for p in ctx.device_properties}
    findings = []
    for label in devices:
        p, total = peaks[label], capacity.get(_device_index(label))
        allocated, reserved = p["peak_allocated_bytes"] or 0, p["peak_reserved_bytes"] or 0
        held = max(allocated, reserved)
        if total and held >= CAPACITY_SHARE * total:
            which = "reserved" if reserved > allocated else "allocated"
            at, step = ((p["reserved_at_ns"], p["reserved_step"]) if which == "reserved" else
                        (p["peak_at_ns"], p["peak_step"]))
            findings.append(Finding(
                rule=RULE.id,
                title=f"{label}: {which} memory peaks at {100.0 * held / total:.1f}% of its {_gib(total)}",
                saving_ns=None,
                saving_pct=None,
                estimate=(f"no time saving is estimated: {_gib(total - held)} are left at the peak "
                          f"({_gib(allocated)} allocated, {_gib(reserved)} reserved), so a larger batch or input, "
                          f"or fragmentation, ends in out-of-memory, and before that the caching allocator frees "
                          f"its cache and retries cudaMalloc (hipMalloc on ROCm; a device sync each time)"),
                remedy=("if the framework reserves memory on purpose (vLLM's gpu_memory_utilization, a KV cache), "
                        "check that its share is what you chose; otherwise: a smaller batch (with gradient "
                        "accumulation to keep the effective batch), activation checkpointing "
                        "(torch.utils.checkpoint), bf16/fp16 activations (torch.autocast), "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and no references to tensors kept "
                        "across steps (losses appended without .item())"),
                evidence=[{"device": label, "capacity_bytes": total, "peak_allocated_bytes": allocated,
                           "peak_reserved_bytes": reserved, "allocated_pct": _pct(allocated, total),
                           "reserved_pct": _pct(reserved, total), "step": step, "at_ns": at}],
                evidence_title="memory peaks (at_ns: after the trace start)",
            ))
        # only the columns read here: a copy of every column of a device's records is tens of MiB on a long trace
        t = rec.table.select(["reserved", "allocated", "step", "ts_ns"]).filter(pc.equal(rec.table["device"], label))
        growth = _fragmented_growth(combined(t["reserved"]), combined(t["allocated"]))
        if growth is None:
            continue
        row, free_before, request = growth
        top, allocated_then = t["reserved"][row].as_py(), t["allocated"][row].as_py()
        unused = top - allocated_then
        floor = FRAGMENTED_CAPACITY_SHARE * total if total else FRAGMENTED_BYTES
        if unused >= floor and unused >= FRAGMENTED_SHARE * top:
            findings.append(Finding(
                rule=RULE.id,
                title=f"{label}: {_gib(unused)} reserved but not allocated at the reserved peak "
                      f"({100.0 * unused / top:.0f}% of {_gib(top)})",
                saving_ns=None,
                saving_pct=None,
                estimate=(f"no time saving is estimated: reserved memory grew to {_gib(top)} for a request of "
                          f"{_gib(request)} while the allocator's cache held {_gib(free_before)} free: the free "
                          f"blocks did not fit the requested size (fragmentation), and {_gib(unused)} stayed "
                          f"unused; even at the allocated peak ({_gib(allocated)}) {_gib(top - allocated)} stay "
                          f"unused. That memory is lost to the batch size and a path to out-of-memory"),
                remedy=("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow instead of new ones "
                        "being carved up); allocate the large, long-lived buffers first; no "
                        "torch.cuda.empty_cache() inside the training loop; keep tensor sizes steady across steps "
                        "(pad variable lengths to a few buckets)"),
                evidence=[{"device": label, "capacity_bytes": total, "reserved_bytes": top,
                           "allocated_bytes": allocated_then, "unused_bytes": unused,
                           "unused_pct": _pct(unused, top), "cache_free_before_bytes": free_before,
                           "request_bytes": request, "peak_allocated_bytes": allocated,
                           "step": t["step"][row].as_py(), "at_ns": t["ts_ns"][row].as_py() - rec.start_ns}],
                evidence_title="the record where reserved memory last grew although the cache had room "
                               "(at_ns: after the trace start)",
            ))
    return findings


RULE = Rule(
    id="memory",
    title="Memory close to capacity, or reserved far above allocated",
    explain=f"""\
Reads the memory records of the trace (torch.profiler(profile_memory=True)): the total allocated and reserved
after each record, per device, and each GPU's capacity from the device properties (Kineto's
deviceProperties, or run.json's GPUs).

Close to capacity: the peak of allocated or reserved memory is at least {CAPACITY_SHARE:.0%} of the device's memory
(reserved counts: it is what the driver has handed out, and what the allocator must free and re-request when
a new block does not fit).
Fragmentation needs the allocator to grow while its cache had room: a record at which reserved memory grew
although reserved minus allocated before it was at least the size requested (the free blocks did not fit). At the
last such growth, reserved minus allocated must be at least {FRAGMENTED_SHARE:.0%} of reserved and at least
{FRAGMENTED_CAPACITY_SHARE:.0%} of the device's capacity ({FRAGMENTED_BYTES >> 20} MiB when the capacity is
unknown). A reservation that never grows during the trace (made before it, e.g. a KV cache) shows nothing about
fragmentation and gives no finding.

No time saving is estimated for either: the cost is risk (out-of-memory; allocator retries that free the
cache, synchronise and call cudaMalloc again) and memory a larger batch could have used; the findings give
the bytes at stake instead. Host memory is not checked (its capacity is not in the trace): a trace with only
host records is not applicable.""",
    check=check,
    not_simulated='memory holds no time to replay',
    releases=("opscope.analyses.memory",),  # the records: tens of MiB on a long trace, read by no other rule
)
