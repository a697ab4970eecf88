"""Input pipeline bottleneck: the step waits for the DataLoader while the device (or the CPU's compute) idles.

PyTorch's DataLoader records each ``__next__`` as ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
(``_MultiProcessingDataLoaderIter`` with workers). On a GPU trace the cost is the device's idle time while the
host is in such a span (the ``input_pipeline`` idle cause); on a CPU-only trace it is the time the main
thread spends in them inside the steps.
"""

from __future__ import annotations

import bisect

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import name_match
from opscope.analyses.idle import INPUT_KINDS, INPUT_PIPELINE
from opscope.analyses.intervals import merged_intervals, union_by_group
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: The rule fires when the input pipeline costs at least this share of the step.
INPUT_SHARE = 0.05
#: Data-loader workers suggested when the core count is unknown.
DEFAULT_WORKERS = 4


def loader_spans(ctx: AdviceContext) -> pa.Table:
    """DataLoader spans (``ts_ns``, ``dur_ns``, ``step``, ``name``) inside the steps (the window without steps)."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns", "step"])
    mask = pc.and_(kind_mask(ev, INPUT_KINDS), name_match(ev["name"], INPUT_PIPELINE))
    spans = ev.filter(mask)
    if ctx.has_steps:
        spans = spans.filter(pc.is_valid(spans["step"]))
    else:
        spans = spans.set_column(spans.schema.get_field_index("step"), "step",
                                 pa.array([0] * spans.num_rows, pa.int64()))
    return spans


def idle_while_loading(ctx: AdviceContext, spans: pa.Table) -> dict[int, int]:
    """Per step: how long a device was idle while the host was in a DataLoader span, summed over devices (the
    window-clipped spans minus their overlap with each device's busy time)."""
    w0, w1 = ctx.window
    starts = pc.max_element_wise(spans["ts_ns"], w0)
    ends = pc.max_element_wise(pc.min_element_wise(pc.add(spans["ts_ns"], spans["dur_ns"]), w1), starts)
    loading = merged_intervals(spans["step"].combine_chunks(), starts.combine_chunks(), ends.combine_chunks())
    busy = ctx.gpu.device_not_idle  # unseen busy time is not idle
    groups, lo, hi = loading["group"].to_pylist(), loading["start"].to_pylist(), loading["end"].to_pylist()
    out: dict[int, int] = {}
    for device in ctx.gpu.devices:
        mine = busy.filter(pc.equal(busy["group"], device)).sort_by("start")
        covered = _busy_until(mine["start"].to_pylist(), mine["end"].to_pylist())
        for step, s, e in zip(groups, lo, hi):
            out[step] = out.get(step, 0) + (e - s) - (covered(e) - covered(s))
    return out


def _busy_until(starts: list[int], ends: list[int]):
    """For disjoint sorted intervals: t -> their total length before t."""
    before = [0]
    for s, e in zip(starts, ends):
        before.append(before[-1] + e - s)

    def covered(t: int) -> int:
        i = bisect.bisect_right(starts, t) - 1
        return before[i] + min(t, ends[i]) - starts[i] if i >= 0 else 0

    return covered


def check(ctx: AdviceContext) -> list[Finding]:
    spans = loader_spans(ctx)
    if spans.num_rows == 0:
        raise NotApplicable("no DataLoader spans in this trace (torch records enumerate(DataLoader)#... when a "
                            "DataLoader is iterated inside the profiled steps)")
    per_step = union_by_group(spans["ts_ns"], spans["dur_ns"], spans["step"])  # nested spans count once
    loader_total = sum(per_step.values())
    names = set(spans["name"].cast(pa.string()).to_pylist())
    workers = any("MultiProcessing" in n for n in names)
    if ctx.gpu is not None:
        idle = ctx.idle.filter(pc.equal(ctx.idle["cause"], "input_pipeline"))
        cost_total = pc.sum(idle["idle_ns"]).as_py() or 0
        basis = (f"the device idled {format_ns(cost_total)} over {ctx.steps} {ctx.unit}(s) while the host was in "
                 f"the DataLoader (idle time attributed to input_pipeline, summed over devices); that wait goes "
                 f"away when the next batch is ready before the step asks for it")
    else:
        cost_total = loader_total
        basis = (f"the steps spent {format_ns(cost_total)} over {ctx.steps} {ctx.unit}(s) in the DataLoader on "
                 f"the main thread; with loading in worker processes it overlaps compute, assuming spare cores "
                 f"for the workers")
    saving = ctx.per_step(cost_total)
    if saving < INPUT_SHARE * ctx.step_ns:
        return []
    steps = ctx.trace.steps
    durations = dict(zip(steps["step"].to_pylist(), steps["dur_ns"].to_pylist())) if ctx.has_steps else \
        {0: ctx.window_ns}
    idle = idle_while_loading(ctx, spans) if ctx.gpu is not None else {}
    evidence = [{"step": s if ctx.has_steps else None, "dataloader_ns": ns,
                 "device_idle_ns": idle.get(s, 0) if ctx.gpu is not None else None, "step_ns": durations.get(s),
                 "step_pct": round(100.0 * ns / durations[s], 2) if durations.get(s) else None}
                for s, ns in sorted(per_step.items())][:10]
    cores = ((ctx.run or {}).get("cpu") or {}).get("usable_cores")
    n = max(1, min(8, cores - 1)) if cores else DEFAULT_WORKERS
    if workers:
        change = (f"the DataLoader already has workers but they fall behind: raise num_workers (this machine has "
                  f"{cores or '?'} usable cores), prefetch_factor=4, persistent_workers=True, pin_memory=True; or "
                  f"make __getitem__ cheaper (decode/augment on the GPU)")
    else:
        change = (f"load in worker processes: DataLoader(..., num_workers={n}, pin_memory=True, "
                  f"persistent_workers=True, prefetch_factor=2)"
                  + ("" if cores else f" ({DEFAULT_WORKERS} workers: the core count is unknown without run.json)"))
    return [Finding(
        rule=RULE.id,
        title=f"Input pipeline: {format_ns(saving)} per {ctx.unit} waiting for the DataLoader"
              + (" (single process)" if not workers else ""),
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=basis + ".",
        change=change,
        evidence=evidence,
        evidence_title="per step: DataLoader time (union of its spans on the host), device idle time meanwhile "
                       "(summed over devices; none on a CPU trace), the step's time and the loader's share of it",
    )]


RULE = Rule(
    id="input-pipeline",
    title="Input pipeline bottleneck",
    explain=f"""\
Fires when waiting for input costs at least {INPUT_SHARE:.0%} of the step. The DataLoader's spans are the host
events PyTorch records around each batch (enumerate(DataLoader)#...__next__); their union per step is shown.

Estimated saving, GPU traces: the device's idle time while the host is inside a DataLoader span (the
input_pipeline cause of the idle breakdown), per step. Loading in background workers, with a batch prefetched,
removes that wait; the device time itself does not change. CPU-only traces: the DataLoader time inside the
steps on the main thread, assuming the machine has spare cores for worker processes (on a machine whose cores
are all busy computing, workers compete with the compute threads and the saving is smaller).

Change: num_workers > 0 (we suggest usable cores - 1, at most 8, from run.json; 4 when unknown),
pin_memory=True, persistent_workers=True and prefetch_factor for single-process loaders; more workers or a
cheaper __getitem__ when workers already exist but fall behind.

Evidence, per step (the first 10): the DataLoader time, the device idle time meanwhile (summed over devices:
the time the saving counts, step by step, except where a synchronising call inside the loader claims it), the
step's time and the loader's share of it.""",
    check=check,
)
