"""Launch-bound steps: most kernels run for less time than the host takes to launch them, so the device waits
on the launches (a gap after nearly every kernel). CUDA graphs (or torch.compile's "reduce-overhead" mode,
which uses them) launch a whole step's kernels at once; fusion (torch.compile) launches fewer kernels."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.advise.remedies import LAUNCH_BOUND, remedy
from opscope.analyses.arrays import combined, median, name_match
from opscope.analyses.kernels import shown_names
from opscope.model.lookup import index_in, repeated_ids
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: The rule fires when at least this share of the singly launched kernels is shorter than its launch call...
SHORT_SHARE = 0.5
#: ...and the estimated saving is at least this share of the step.
SAVING_SHARE = 0.02
TOP = 8
#: Runtime calls that launch a whole CUDA/HIP graph.
GRAPH_LAUNCH = r"(?i)graph\w*launch"


def launched_kernels(ctx: AdviceContext) -> pa.Table:
    """Kernels launched one per runtime call inside the steps (the whole trace without steps): ``name``,
    ``dur_ns`` and ``launch_ns`` (that call's duration). Kernels of a graph launch (one call, many kernels, or a
    call named like cudaGraphLaunch) are left out: they are not launched one by one."""
    ev = ctx.trace.select(["kind", "name", "dur_ns", "correlation", "step"])
    has_corr = pc.is_valid(ev["correlation"])
    is_kernel = pc.and_(kind_mask(ev, ("kernel", "comm")), has_corr)
    if ctx.has_steps:  # the steps' kernels only: the saving is per step
        is_kernel = pc.and_(is_kernel, pc.is_valid(ev["step"]))
    kernels = ev.select(["name", "dur_ns", "correlation"]).filter(is_kernel)
    # a graph launch is one call for the whole graph even when the trace shows one kernel of it (told apart in the
    # mask: the calls' names are not copied out with them)
    is_call = pc.and_(pc.and_(kind_mask(ev, ("runtime",)), has_corr), pc.invert(name_match(ev["name"], GRAPH_LAUNCH)))
    calls = ev.select(["dur_ns", "correlation"]).filter(is_call)
    if kernels.num_rows == 0 or calls.num_rows == 0:
        return pa.table({"name": pa.array([], pa.string()), "dur_ns": pa.array([], pa.int64()),
                         "launch_ns": pa.array([], pa.int64())})
    # kernels alone on their correlation id (a call that launched several is a graph's or a library's)
    kernel_corr = combined(kernels["correlation"])
    repeated = _repeated(kernel_corr)
    if len(repeated):
        kernels = kernels.filter(pc.invert(pc.is_in(kernel_corr, value_set=repeated)))
    # each correlation's longest call (ids are unique per call but in broken traces)
    call_corr = combined(calls["correlation"])
    if len(_repeated(call_corr)):
        calls = calls.group_by("correlation", use_threads=False).aggregate([("dur_ns", "max")]) \
            .rename_columns(["correlation", "dur_ns"])
    launch = pc.take(combined(calls["dur_ns"]), index_in(kernels["correlation"], calls["correlation"]))
    del calls, call_corr  # (0.8 M calls on a 1 GB trace: not held while the kernels are filtered)
    t = pa.table({"name": kernels["name"], "dur_ns": kernels["dur_ns"], "launch_ns": launch})
    return t.filter(pc.is_valid(t["launch_ns"]))


def _repeated(ids: pa.Array) -> pa.Array:
    """The ids (not null) that occur more than once, each once: marked in two bitmaps over the ids' range where they
    are numbered densely (:func:`opscope.model.lookup.repeated_ids`), else found by sorting, not hashing: a hash of a
    million ids holds several times their size (the 0.8 M launch calls of a 1 GB trace: 34 MiB over them, sorted 9,
    marked 0.2)."""
    if len(ids) < 2:
        return ids.slice(0, 0)
    found = repeated_ids(ids)
    if found is not None:
        return found
    in_order = pc.take(ids, pc.sort_indices(ids))
    again = pc.equal(in_order.slice(1), in_order.slice(0, len(in_order) - 1))
    return pc.unique(pc.filter(in_order.slice(1), again))


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    k = launched_kernels(ctx)
    if k.num_rows == 0:
        raise NotApplicable("no kernel has a runtime launch call with its correlation id (or all are graph "
                            "launches)")
    short = pc.less(k["dur_ns"], k["launch_ns"])
    n_short = pc.sum(pc.cast(short, pa.int64())).as_py() or 0
    share = n_short / k.num_rows
    idle = ctx.idle
    waiting = pc.sum(idle.filter(pc.is_in(idle["cause"], pa.array(["launch_overhead", "host_wait"])))["idle_ns"]) \
        .as_py() or 0
    median_kernel = int(median(k["dur_ns"]))
    median_launch = int(median(k["launch_ns"]))
    # kernels x median call: a few slow first launches (module loading, lazy init) are not a per-step cost
    launching = k.num_rows * median_launch
    saving = ctx.per_step(min(waiting, launching))
    if share < SHORT_SHARE or saving < SAVING_SHARE * ctx.step_ns:
        return []
    by_name = pa.table({"name": shown_names(ctx.trace, k["name"]), "dur_ns": k["dur_ns"], "launch_ns": k["launch_ns"],
                        "short": pc.cast(short, pa.int64())}) \
        .group_by("name", use_threads=False) \
        .aggregate([("dur_ns", "count"), ("dur_ns", "approximate_median"), ("launch_ns", "approximate_median"),
                    ("short", "sum")])
    by_name = by_name.sort_by([("short_sum", "descending"), ("name", "ascending")]).slice(0, TOP)
    per_step = k.num_rows / ctx.steps
    evidence = [{"kernel": "(all launched one by one)", "calls_per_step": round(per_step, 2),
                 "median_kernel_ns": median_kernel, "median_launch_ns": median_launch,
                 "shorter_than_launch": n_short, "short_pct": round(100.0 * share, 2)}]
    evidence += [{"kernel": r["name"], "calls_per_step": round(r["dur_ns_count"] / ctx.steps, 2),
                  "median_kernel_ns": int(r["dur_ns_approximate_median"]),
                  "median_launch_ns": int(r["launch_ns_approximate_median"]),
                  "shorter_than_launch": r["short_sum"],
                  "short_pct": round(100.0 * r["short_sum"] / r["dur_ns_count"], 2)} for r in by_name.to_pylist()]
    return [Finding(
        rule=RULE.id,
        title=f"Launch-bound: {share:.0%} of {per_step:,.0f} kernels per {ctx.unit} run shorter than their launch "
              f"(median kernel {format_ns(median_kernel)}, launch call {format_ns(median_launch)})",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"{per_step:,.0f} kernels per {ctx.unit} x the median launch call ({format_ns(median_launch)}) = "
                  f"{format_ns(ctx.per_step(launching))} of launching per {ctx.unit}, and the device waits "
                  f"{format_ns(ctx.per_step(waiting))} per {ctx.unit} for the host (launch_overhead + host_wait "
                  f"idle); a CUDA graph replaces the launches with one call, so the step can shrink by the smaller "
                  f"of the two: {format_ns(saving)}. Python and framework time between ops, which graphs also "
                  f"remove, is not counted."),
        remedy=remedy(LAUNCH_BOUND, ctx.trace),
        change="launch=0",  # a graph replaces the launch calls with one
        evidence=evidence,
        evidence_title="all kernels launched one by one, then by name, most often shorter than their launch first",
    )]


RULE = Rule(
    id="launch-bound",
    title="Launch-bound steps (kernels shorter than their launch cost)",
    explain=f"""\
Looks at kernels launched one per runtime call (cudaLaunchKernel, hipLaunchKernel... matched by correlation
id; kernels of a CUDA/HIP graph launch are left out). Fires when at least {SHORT_SHARE:.0%} of them run for
less time than the host call that launched them and the estimated saving is at least {SAVING_SHARE:.0%} of the
step.

Estimated saving per step = min(L, W). L is the launching time: the number of those kernels x the median
duration of their launch calls (the median, so that a few slow first launches, module loading or lazy
initialisation that graphs do not remove, do not count). W is the device's idle time waiting for the host
(the launch_overhead and host_wait causes of the idle breakdown; not kernel_gap, the device's own turnaround
between queued kernels, which graphs have too). A CUDA graph replays the step's launches with one call, so it
saves at most the launch time, and the step gets shorter only by time the device was waiting. Left out: the
Python and framework time between ops, which graphs (and torch.compile's fusion) also remove, so the real
gain can be larger; graphs need static shapes.

Evidence: all kernels launched one by one (per step, median duration, median launch call, how many and
what share ran shorter than their launch), then the {TOP} kernel names most often shorter than their launch.""",
    check=check,
)
