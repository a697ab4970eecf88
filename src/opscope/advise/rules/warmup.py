"""Warm-up and outlier steps: a first step that compiles, autotunes or allocates, or steps much slower than the
rest. Both distort any average over all steps; only slow steps that recur cost time in a long run.

Each outlier is shown with what it spent its extra time in: the host ops (and annotations, runtime calls, and
time in the step outside any op) whose self time in that step most exceeds their median over the typical steps.
"""

from __future__ import annotations

import re
import statistics

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.advise.remedies import SLOW_STEPS, WARM_UP, remedy
from opscope.analyses.filters import EventFilter
from opscope.analyses.ops import op_table
from opscope.analyses.steps import SLOW_FACTOR, WARMUP_FACTOR
from opscope.model.derive import OP_LAYER
from opscope.units import format_ns

#: Ops with the largest excess over a typical step shown per outlier step.
TOP_OPS = 3
#: Slow steps must occur at least this often in the window to count as recurring (a per-step saving).
RECURRING = 2
#: A cause is named when ops matching it account for at least this share of an outlier's extra time.
CAUSE_SHARE = 0.25
#: What a one-time cost is, by the names of the ops that took the extra time.
CAUSES = (
    # compile phases (dynamo_timed regions), not the compiled code running ("Torch-Compiled Region",
    # "CompiledFunction", "TorchDynamo Cache Lookup" and Triton kernels come back every step)
    ("compilation", re.compile(r"(?i)dynamo_timed|_compile|compile_|inductor|aot_|bytecode_tracing|build_guards")),
    ("autotuning", re.compile(r"(?i)autotun|cudnnFind|FindConvolution|benchmark|miopenFind|GetAlgorithm")),
    ("allocation", re.compile(r"(?i)cudaMalloc|hipMalloc|cudaHostAlloc|hipHostMalloc|empty_cache")),
    ("data loading", re.compile(r"(?i)dataloader")),
    ("lazy initialisation", re.compile(r"(?i)lazy_init|cuInit|cudaGetDeviceCount|cuModuleLoad|cudaFuncGetAttr")),
)
OUTSIDE_OPS = "(in the step, outside any op)"


def check(ctx: AdviceContext) -> list[Finding]:
    table = ctx.step_table
    if table.num_rows < 2:
        raise NotApplicable("needs at least two ProfilerSteps (record a few steps with torch.profiler.schedule)")
    steps, durs, flags = (table[c].to_pylist() for c in ("step", "dur_ns", "outlier"))
    typical = [d for d, f in zip(durs, flags) if not f]
    if len(typical) == len(durs) or not typical:
        return []
    typical_steps = [s for s, f in zip(steps, flags) if not f]
    median, mean_typical, n = statistics.median(typical), statistics.fmean(typical), len(durs)
    inflation = statistics.fmean(durs) - mean_typical  # = sum over outliers of (dur - mean_typical) / n
    evidence = []
    for s, d, f in zip(steps, durs, flags):
        if not f:
            continue
        extra, cause = _extra_ops(ctx, s, typical_steps)
        evidence.append({"step": s, "flag": f, "dur_ns": d, "x_median": round(d / median, 2),
                         "extra_ns": int(d - median), "inflates_mean_ns": round((d - mean_typical) / n),
                         "cause": cause, "extra_in": extra})
    findings = []
    warm = [e for e in evidence if e["flag"] == "warm-up"]
    slow = [e for e in evidence if e["flag"] == "slow"]
    if warm:
        e = warm[0]
        what = f"{e['cause']}, " if e["cause"] else ""
        findings.append(Finding(
            rule=RULE.id,
            title=f"Warm-up: step {e['step']} took {e['x_median']:.1f}x a typical step ({format_ns(e['dur_ns'])} vs "
                  f"{format_ns(int(median))}){' in ' + e['cause'] if e['cause'] else ''}",
            saving_ns=None,
            saving_pct=None,
            estimate=(f"a one-time cost of {format_ns(e['extra_ns'])} ({what}see extra_in), not paid again in a "
                      f"long run, so no per-step saving. It is a measurement distortion: it makes the mean of these "
                      f"{n} steps {format_ns(e['inflates_mean_ns'])} "
                      f"({100.0 * e['inflates_mean_ns'] / mean_typical:.1f}%) higher than the mean of the typical "
                      f"steps ({format_ns(mean_typical)})"),
            remedy=remedy(WARM_UP, ctx.trace),
            evidence=warm,
            evidence_title="the warm-up step and where its extra time went (op: extra self time over a typical step)",
        ))
    if slow:
        excess = sum(e["dur_ns"] - mean_typical for e in slow)
        recurring = len(slow) >= RECURRING
        per_step = ctx.per_step(excess)
        saving = per_step if recurring else None
        if recurring:
            estimate = (f"they recur ({len(slow)} of {n} steps): their time above the mean typical step "
                        f"({format_ns(mean_typical)}), {format_ns(excess)} in all, spread over the {n} "
                        f"steps, i.e. what each step saves on average if they ran like the others")
        else:
            estimate = (f"seen once in {n} steps, so whether it recurs is unknown: if it comes back every {n} steps "
                        f"it costs {format_ns(per_step)} per step; a one-off costs nothing per step but inflates "
                        f"the mean over these steps by as much")
        causes = sorted({e["cause"] for e in slow if e["cause"]})
        findings.append(Finding(
            rule=RULE.id,
            title=f"{len(slow)} of {n} steps are over {SLOW_FACTOR:g}x the median step"
                  + (f" ({', '.join(causes)})" if causes else ""),
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=estimate,
            remedy=remedy(SLOW_STEPS, ctx.trace),
            evidence=slow,
            evidence_title="slow steps and where their extra time went (op: extra self time over a typical step)",
        ))
    # the inflation figure in every estimate is the total over all outliers; say so when there are both kinds
    if warm and slow:
        for f in findings:
            f.estimate += (f". Together the outliers raise the mean step by {format_ns(inflation)} "
                           f"({100.0 * inflation / mean_typical:.1f}%)")
    return findings


def _extra_ops(ctx: AdviceContext, step: int, typical: list[int]) -> tuple[str, str | None]:
    """The host events whose self time in ``step`` most exceeds their median over the typical steps, as text,
    and the cause their names point to (None when no cause accounts for enough of the extra time)."""
    ops = op_table(ctx.trace, by=("name", "step"), filt=EventFilter(kinds=OP_LAYER, steps=[step] + typical))
    per: dict[str, dict[int, int]] = {}
    for name, s, ns in zip(ops["name"].to_pylist(), ops["step"].to_pylist(), ops["self_ns"].to_pylist()):
        if name.startswith("ProfilerStep#"):  # the step's own self time: spent outside any op
            name = OUTSIDE_OPS
        by_step = per.setdefault(name, {})
        by_step[s] = by_step.get(s, 0) + ns
    extra = []
    for name, by_step in per.items():
        base = statistics.median([by_step.get(s, 0) for s in typical])
        grew = by_step.get(step, 0) - base
        if grew > 0:
            extra.append((grew, name))
    extra.sort(reverse=True)
    text = ", ".join(f"{name}: +{format_ns(int(ns))}" for ns, name in extra[:TOP_OPS])
    total = sum(ns for ns, _ in extra)
    by_cause = {label: sum(ns for ns, name in extra if pattern.search(name)) for label, pattern in CAUSES}
    cause = max(by_cause, key=lambda k: by_cause[k])
    return text, cause if total and by_cause[cause] >= CAUSE_SHARE * total else None


RULE = Rule(
    id="warm-up",
    title="Warm-up and outlier steps that distort averages",
    explain=f"""\
Uses the step table's flags (opscope steps): the first step is a warm-up outlier when it is slower than
{WARMUP_FACTOR:g}x the median of the others; any step slower than {SLOW_FACTOR:g}x the median of all is slow.
Needs at least two ProfilerSteps.

Each outlier is shown with the host events (ops, annotations, runtime calls, and the step's time outside any
op) whose self time in it exceeds their median over the typical (unflagged) steps the most, and a cause when
events of one kind account for at least {CAUSE_SHARE:.0%} of that excess: compilation (TorchDynamo's
dynamo_timed phases, AOT autograd, Inductor), autotuning (cuDNN find/benchmark, Triton autotune), allocation
(cudaMalloc), data loading (the first batch), lazy initialisation.

A warm-up step is a one-time cost: no per-step saving is estimated. It is a measurement distortion: the
finding says how much it raises the mean over the recorded steps (mean of all steps minus mean of the
typical ones), which misleads any average or comparison that includes it.

Slow steps that recur (at least {RECURRING} in the window) cost real time: estimated saving = their time above
the mean typical step, spread over all steps (the same figure as their share of the mean's inflation). A
single slow step may be a one-off: the finding then gives that figure as a conditional cost, with no
saving.""",
    check=check,
    not_simulated='a one-time cost: no per-step saving to replay',
)
