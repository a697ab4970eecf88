"""Device memory close to capacity (an allocation spike away from out-of-memory, and the caching allocator
retrying cudaMalloc) or reserved far above what is allocated (fragmentation: memory held by the allocator's
cache that tensors cannot use)."""

from __future__ import annotations

import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.memory import _first_max, memory_records, peak_table

#: Peak memory at or above this share of the device's capacity is "close to capacity".
CAPACITY_SHARE = 0.90
#: Reserved-but-unallocated memory at the reserved peak at or above this share of reserved is fragmentation...
FRAGMENTED_SHARE = 0.30
#: ...when it is at least this share of the device's capacity (this many bytes when the capacity is unknown).
FRAGMENTED_CAPACITY_SHARE = 0.10
FRAGMENTED_BYTES = 256 << 20


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB"


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.trace.memory.num_rows == 0:
        raise NotApplicable("no memory records (record with profile_memory=True; opscope record does)")
    rec = memory_records(ctx.trace)
    peaks = {r["device"]: r for r in peak_table(rec, ctx.trace.steps).to_pylist()}
    capacity = {p.get("id"): p.get("total_memory") for p in ctx.device_properties}
    findings = []
    for label, p in peaks.items():
        if ":" not in label:  # host memory: its capacity is not in the trace
            continue
        try:
            index = int(label.split(":", 1)[1])
        except ValueError:
            continue
        total = capacity.get(index)
        held = max(p["peak_allocated_bytes"] or 0, p["peak_reserved_bytes"] or 0)
        if total and held >= CAPACITY_SHARE * total:
            findings.append(Finding(
                rule=RULE.id,
                title=f"{label} peaks at {100.0 * held / total:.1f}% of its {_gib(total)}",
                saving_ns=None,
                saving_pct=None,
                estimate=(f"no time saving is estimated: {_gib(total - held)} are left at the peak, so a larger "
                          f"batch or input, or fragmentation, ends in out-of-memory, and the caching allocator "
                          f"frees its cache and retries cudaMalloc (slow) before that"),
                change=("if the framework reserves memory on purpose (vLLM's gpu_memory_utilization, a KV cache), "
                        "check that its share is what you chose; otherwise lower the batch size, use activation "
                        "checkpointing (torch.utils.checkpoint), bf16/fp16 activations, or free references to "
                        "tensors held across steps"),
                evidence=[_row(label, p, total)],
                evidence_title="memory peaks",
            ))
        t = rec.table.filter(pc.equal(rec.table["device"], label))
        at = _first_max(t["reserved"])
        if at is None:
            continue
        reserved, allocated = t["reserved"][at].as_py(), t["allocated"][at].as_py()
        if reserved is None or allocated is None:
            continue
        unused = reserved - allocated
        floor = FRAGMENTED_CAPACITY_SHARE * total if total else FRAGMENTED_BYTES
        if unused >= floor and unused >= FRAGMENTED_SHARE * reserved:
            findings.append(Finding(
                rule=RULE.id,
                title=f"{label}: {_gib(unused)} reserved but not allocated at the reserved peak "
                      f"({100.0 * unused / reserved:.0f}% of {_gib(reserved)})",
                saving_ns=None,
                saving_pct=None,
                estimate=(f"no time saving is estimated: the allocator's cache holds {_gib(unused)} that tensors of "
                          f"the sizes asked for could not use (fragmentation), which is memory lost to the batch "
                          f"size and a path to out-of-memory"),
                change=("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow instead of splitting); "
                        "allocate the large, long-lived buffers first; avoid torch.cuda.empty_cache() inside the "
                        "loop; keep tensor sizes steady across steps (pad variable lengths to a few buckets)"),
                evidence=[_row(label, p, total) | {"allocated_at_reserved_peak_bytes": allocated}],
                evidence_title="memory at the reserved peak",
            ))
    return findings


def _row(label: str, p: dict, total: int | None) -> dict:
    return {"device": label, "capacity_bytes": total, "peak_allocated_bytes": p["peak_allocated_bytes"],
            "peak_reserved_bytes": p["peak_reserved_bytes"], "peak_step": p["peak_step"],
            "peak_at_ns": p["peak_at_ns"]}


RULE = Rule(
    id="memory",
    title="Memory close to capacity, or reserved far above allocated",
    explain=f"""\
Reads the memory records of the trace (torch.profiler(profile_memory=True)): the total allocated and reserved
after each record, per device, and each GPU's capacity from the device properties (Kineto's
deviceProperties, or run.json).

Close to capacity: the peak of allocated or reserved memory is at least {CAPACITY_SHARE:.0%} of the device's memory.
Fragmentation: at the reserved peak, reserved minus allocated is at least {FRAGMENTED_SHARE:.0%} of reserved and at
least {FRAGMENTED_CAPACITY_SHARE:.0%} of the device's capacity ({FRAGMENTED_BYTES >> 20} MiB when the capacity is
unknown): the caching allocator holds blocks that the requested sizes cannot reuse, in an amount that matters.

No time saving is estimated for either: the cost is risk (out-of-memory, allocator retries that free the
cache and call cudaMalloc again) and memory that a larger batch could have used; the findings give the
bytes at stake instead. Host memory is not checked (its capacity is not in the trace).""",
    check=check,
)
