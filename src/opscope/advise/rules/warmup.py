"""Warm-up and outlier steps: a first step that compiles, autotunes or allocates, or steps that are much slower
than the rest, distort any average over all steps and, when they recur, cost real time."""

from __future__ import annotations

import statistics

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.filters import EventFilter
from opscope.analyses.ops import op_table
from opscope.analyses.steps import SLOW_FACTOR, WARMUP_FACTOR
from opscope.render.units import format_ns

#: Ops with the largest excess over a typical step shown per outlier step.
TOP_OPS = 3


def check(ctx: AdviceContext) -> list[Finding]:
    table = ctx.step_table
    if table.num_rows < 2:
        raise NotApplicable("needs at least two ProfilerSteps")
    steps, durs, flags = (table[c].to_pylist() for c in ("step", "dur_ns", "outlier"))
    outliers = [(s, d, f) for s, d, f in zip(steps, durs, flags) if f]
    if not outliers:
        return []
    typical = [d for d, f in zip(durs, flags) if not f]
    median = statistics.median(typical)
    mean_all, mean_typical = statistics.mean(durs), statistics.mean(typical)
    inflation = mean_all - mean_typical
    typical_steps = [s for s, f in zip(steps, flags) if not f]
    evidence = [{"step": s, "flag": f, "dur_ns": d, "x_median": round(d / median, 2),
                 "extra_ns": int(d - median), "extra_in": _extra_ops(ctx, s, typical_steps)} for s, d, f in outliers]
    findings = []
    warmups = [o for o in outliers if o[2] == "warm-up"]
    slow = [o for o in outliers if o[2] == "slow"]
    if warmups:
        s, d, _ = warmups[0]
        findings.append(Finding(
            rule=RULE.id,
            title=f"Warm-up: step {s} took {d / median:.1f}x a typical step ({format_ns(d)} vs {format_ns(median)})",
            saving_ns=None,
            saving_pct=None,
            estimate=(f"a one-time cost of {format_ns(int(d - median))}, not paid again in a long run, so no per-step "
                      f"saving; but it makes the mean of these {len(durs)} steps {format_ns(int(inflation))} "
                      f"({100.0 * inflation / mean_typical:.1f}%) higher than the steady state"),
            change=("measure steady state only: torch.profiler.schedule(wait=1, warmup=1, active=N) (opscope record "
                    "does this), or leave the first step out of averages (opscope steps flags it); for compile or "
                    "autotuning cost (torch.compile, cudnn.benchmark) warm up before timing"),
            evidence=[e for e in evidence if e["flag"] == "warm-up"],
            evidence_title="the warm-up step, and where its extra time went (op: extra self time)",
        ))
    if slow:
        excess = sum(d - median for _, d, _ in slow)
        saving = ctx.per_step(excess)
        findings.append(Finding(
            rule=RULE.id,
            title=f"{len(slow)} of {len(durs)} steps are over {SLOW_FACTOR:g}x the median step",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=(f"their time above the median step ({format_ns(int(excess))} in all) spread over the "
                      f"{ctx.steps} steps, i.e. what the run saves if they ran like the others"),
            change=("look at what the slow steps do differently (the ops listed; opscope diff with --steps on the "
                    "same trace, or opscope ops --steps N): periodic checkpointing, logging or evaluation, "
                    "garbage collection, recompiles on new shapes (torch._dynamo explain), memory allocator "
                    "retries"),
            evidence=[e for e in evidence if e["flag"] == "slow"],
            evidence_title="slow steps, and where their extra time went (op: extra self time)",
        ))
    return findings


def _extra_ops(ctx: AdviceContext, step: int, typical: list[int]) -> str:
    """The ops whose self time in ``step`` most exceeds their median over the typical steps."""
    if not typical:
        return ""
    ops = op_table(ctx.trace, by=("name", "step"), filt=EventFilter(kinds=("cpu_op",), steps=[step] + typical))
    per: dict[str, dict[int, int]] = {}
    for name, s, ns in zip(ops["name"].to_pylist(), ops["step"].to_pylist(), ops["self_ns"].to_pylist()):
        per.setdefault(name, {})[s] = ns
    extra = []
    for name, by_step in per.items():
        if name.startswith("ProfilerStep#"):  # the step itself (an op in 2021 Kineto traces)
            continue
        base = statistics.median([by_step.get(s, 0) for s in typical])
        extra.append((by_step.get(step, 0) - base, name))
    extra.sort(reverse=True)
    return ", ".join(f"{name}: +{format_ns(int(ns))}" for ns, name in extra[:TOP_OPS] if ns > 0)


RULE = Rule(
    id="warm-up",
    title="Warm-up and outlier steps that distort averages",
    explain=f"""\
Uses the step table's flags (opscope steps): the first step is a warm-up outlier when it is slower than
{WARMUP_FACTOR:g}x the median of the others; any step slower than {SLOW_FACTOR:g}x the median of all is slow.

A warm-up step (compilation, cuDNN autotuning, allocator growth, lazy initialisation) is a one-time cost: no
per-step saving is estimated. The finding says how much it inflates the mean step over the trace, which
misleads any comparison that averages all steps (opscope diff leaves such a first step out).

Recurring slow steps cost real time: estimated saving = their time above the median step, spread over all
steps. Each outlier is shown with the host ops whose self time exceeds their median over the typical steps
the most.""",
    check=check,
)
