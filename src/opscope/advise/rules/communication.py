"""Communication: collectives (NCCL/RCCL) that compute does not hide, and straggler ranks that the others wait
for in every collective.

Exposed communication is measured per device from the device work (collectives against compute kernels on any
stream of the same device); stragglers need the other ranks' traces (``opscope advise RANK0 RANK1 ...``).
"""

from __future__ import annotations

import statistics
from typing import Any

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.job.ranks import OUTLIER_SIGMAS as JOB_SIGMAS
from opscope.analyses.job.ranks import STRAGGLER_SHARE as JOB_SHARE
from opscope.units import format_ns

#: Hideable communication worth a finding, as a share of the step.
EXPOSED_SHARE = 0.05
#: A straggler's extra compute (over the median rank) worth a finding, as a share of the step.
STRAGGLER_SHARE = 0.05


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    rows = ctx.gpu.comm_exposure()
    if not rows:
        raise NotApplicable("no collectives (NCCL/RCCL kernels) in this trace")
    findings = []
    # Devices of one trace run side by side: the per-device figures are averaged, not added.
    exposed = ctx.per_step(sum(r["exposed_ns"] for r in rows) / len(rows))
    saving = ctx.per_step(sum(r["hideable_ns"] for r in rows) / len(rows))
    waiting = _job_wait(ctx)
    if waiting is not None:
        # with the job view: the part of a collective spent waiting for late ranks is no transfer that overlapping
        # could hide; only what is left of the hideable time after it counts
        saving = max(0, saving - waiting)
    if saving and saving >= EXPOSED_SHARE * ctx.step_ns:
        evidence = [{"device": r["device"], "comm_ns": ctx.per_step(r["comm_ns"]),
                     "compute_ns": ctx.per_step(r["compute_ns"]), "overlapped_ns": ctx.per_step(r["overlapped_ns"]),
                     "exposed_ns": ctx.per_step(r["exposed_ns"]), "hideable_ns": ctx.per_step(r["hideable_ns"]),
                     "exposed_pct": round(100.0 * r["exposed_ns"] / r["comm_ns"], 2) if r["comm_ns"] else None}
                    for r in rows]
        ranks = (f"the job's {ctx.job.ranks.num_rows} ranks were compared (opscope job), and this rank's "
                 f"{format_ns(waiting or 0)} per step of waiting in collectives for later ranks is taken off the "
                 "saving" if ctx.job is not None else
                 f"the other ranks' traces were compared ({len(ctx.peers)} given)" if ctx.peers else
                 "without the other ranks' traces the straggler check did not run")
        findings.append(Finding(
            rule=RULE.id,
            title=f"Communication not overlapped with compute: {format_ns(exposed)} per {ctx.unit} of collectives "
                  f"run while no kernel computes",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=(f"upper bound: {format_ns(exposed)} of collectives per {ctx.unit} run with no compute kernel "
                      f"on their device; fully overlapped, compute and collectives would take max(compute, comm) "
                      f"instead of their union, which saves min(exposed, compute not yet overlapped) = "
                      f"{format_ns(saving)} (averaged over {len(rows)} device(s)). Time a collective spends waiting "
                      f"for slower ranks is counted too and does not go away by overlapping; {ranks}"),
            remedy=("overlap gradients' all-reduce with the backward pass: DDP(bucket_cap_mb=25..100, "
                    "gradient_as_bucket_view=True) (smaller first buckets start communicating earlier), "
                    "FSDP(forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, "
                    "limit_all_gathers=True); issue collectives with async_op=True on their own stream and "
                    "wait() only where the result is needed; for tensor parallelism, overlap with the next "
                    "layer's compute"),
            evidence=evidence,
            evidence_title="per device, per step (hideable: the most that overlapping can save)",
        ))
    straggler = _straggler(ctx)
    if straggler is not None:
        findings.append(straggler)
    return findings


def _job_wait(ctx: AdviceContext) -> int | None:
    """This trace's rank's time per step waiting in collectives for the last rank, from the job view."""
    if ctx.job is None or ctx.job.ranks.num_rows == 0 or "wait_ns" not in ctx.job.ranks.column_names:
        return None
    rank = ctx.trace.metadata.get("rank")
    for row in ctx.job.ranks.to_pylist():
        if row["rank"] == rank:
            return row["wait_ns"]
    return None


def _rank_row(ctx: AdviceContext, label) -> dict[str, Any] | None:
    """Compute and collective time per step of one rank (union over streams, averaged over its devices)."""
    if ctx.gpu is None:
        return None
    b = ctx.breakdown.to_pylist()
    compute = sum(r["compute_ns"] for r in b) / max(1, len(b))
    comm = sum(r["comm_ns"] for r in b) / max(1, len(b))
    return {"rank": label, "compute_ns": ctx.per_step(compute), "comm_ns": ctx.per_step(comm),
            "step_ns": ctx.step_ns}


def _label(trace, i: int):
    rank = trace.metadata.get("rank")
    return rank if isinstance(rank, int) else f"trace {i}"


def _job_straggler(ctx: AdviceContext) -> Finding | None:
    """With the job view: the ranks that reach the collectives later than the others by at least
    STRAGGLER_SHARE of the step (their delay, measured on aligned clocks), and where their extra time goes."""
    job = ctx.job
    assert job is not None
    if not job.stragglers:
        return None
    rows = job.ranks.to_pylist()
    by_rank = {r["rank"]: r for r in rows}
    worst = max(job.stragglers, key=lambda r: by_rank[r]["delay_ns"] or 0)
    delay = int(by_rank[worst]["delay_ns"])
    steps = [r["step_ns"] for r in rows if r.get("step_ns") is not None]
    step_ns = int(statistics.fmean(steps)) if steps else ctx.step_ns
    why = [w for w in job.why.to_pylist() if w["rank"] == worst][:3]
    because = ("; its extra time per step goes to " + ", ".join(
        f"{w['category']} {w['name']} (+{format_ns(w['extra_ns'])})" for w in why)) if why else ""
    others = f" and rank(s) {', '.join(str(r) for r in job.stragglers if r != worst)}" \
        if len(job.stragglers) > 1 else ""
    return Finding(
        rule=RULE.id,
        title=f"Straggler: rank {worst}{others} reaches the collectives {format_ns(delay)} per step after the "
              f"other ranks, who wait for it",
        saving_ns=delay,
        saving_pct=round(100.0 * delay / step_ns, 2) if step_ns else None,
        estimate=(f"in every blocking collective the other ranks wait for the last to arrive; rank {worst} arrives "
                  f"{format_ns(delay)} per step later than the median of the others (measured from {job.delay_from}"
                  f" over {len(job.compared)} compared step(s), clocks "
                  f"{'aligned on collective ends' if job.aligned else 'not aligned'}); balanced, the job would save "
                  f"that per step{because}"),
        remedy=("balance the work across ranks (uneven data shards, variable sequence lengths: bucket or pack "
                "them; uneven pipeline stages), and check the slow rank's host: thermal throttling, a noisy "
                "neighbour, a slower link; compare it with opscope diff RANK_FAST RANK_SLOW"),
        evidence=sorted(({k: r.get(k) for k in ("rank", "step_ns", "compute_ns", "comm_ns", "wait_ns", "delay_ns",
                                                  "straggler")} for r in rows), key=lambda r: -(r["delay_ns"] or 0)),
        evidence_title="per rank, per step (opscope job: delay = how much later than the others it reaches the "
                       "collectives)",
    )


def _straggler(ctx: AdviceContext) -> Finding | None:
    """With the other ranks' traces: the rank with the most compute per step holds the others up in every
    collective (they wait inside it, so they show the most collective time)."""
    if ctx.job is not None:
        return _job_straggler(ctx)
    if not ctx.peers:
        return None
    rows = [_rank_row(ctx, _label(ctx.trace, 0))]
    rows += [_rank_row(AdviceContext(peer), _label(peer, i)) for i, peer in enumerate(ctx.peers, start=1)]
    ranks = [r for r in rows if r is not None]  # a rank without GPU work has no row
    if len(ranks) < 2:
        return None
    median = statistics.median(r["compute_ns"] for r in ranks)
    slowest = max(ranks, key=lambda r: r["compute_ns"])
    saving = int(slowest["compute_ns"] - median)
    if saving <= 0 or saving < STRAGGLER_SHARE * ctx.step_ns:
        return None
    least_comm = min(ranks, key=lambda r: r["comm_ns"])
    if least_comm is slowest:
        agrees = (f"it also spends the least time in collectives ({format_ns(slowest['comm_ns'])} per step against "
                  f"up to {format_ns(max(r['comm_ns'] for r in ranks))}): the others wait in them for it")
    else:
        agrees = (f"but rank {least_comm['rank']}, not it, spends the least time in collectives, so the wait may "
                  f"come from elsewhere too (host work, input): compare the ranks with opscope diff")
    for r in ranks:
        r["compute_vs_median_ns"] = int(r["compute_ns"] - median)
    return Finding(
        rule=RULE.id,
        title=f"Straggler: rank {slowest['rank']} computes {format_ns(saving)} per step more than the median rank",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"every collective waits for the slowest rank, so the others idle in it for the difference; "
                  f"balanced, each rank would compute the median ({format_ns(int(median))} per step): saving = "
                  f"slowest - median compute per step, over {len(ranks)} ranks; {agrees}"),
        remedy=("balance the work across ranks (uneven data shards, variable sequence lengths: bucket or pack "
                "them; uneven pipeline stages), and check the slow rank's host: thermal throttling, a noisy "
                "neighbour, a slower link; compare it with opscope diff RANK_FAST RANK_SLOW"),
        evidence=sorted(ranks, key=lambda r: -r["compute_ns"]),
        evidence_title="per rank, per step (compute and collectives averaged over the rank's devices)",
    )


RULE = Rule(
    id="communication",
    title="Communication not overlapped with compute, and straggler ranks",
    explain=f"""\
Collectives are the NCCL/RCCL kernels of the trace (kind comm).

Exposed communication: per device, the union of the collectives' intervals (comm) minus the part covered by
compute kernels on the same device, any stream (exposed). Overlapping perfectly, the device would spend
max(compute, comm) instead of their union on the two, so the saving is at most min(exposed, compute not yet
under a collective) per step ("hideable"), averaged over the trace's devices. Fires when that is at least
{EXPOSED_SHARE:.0%} of the step. It is an upper bound: it needs independent compute to run during each
collective (DDP's bucketed all-reduce during backward, FSDP prefetching), and a collective's time includes
the wait for slower ranks, which overlapping does not remove (see stragglers): given the whole job, the rank's
measured wait per step (opscope job's wait_ns) is taken off the saving.

Stragglers, given the whole job (opscope advise DIR, or several rank traces): the job view (opscope job) reads
every rank in parallel, matches the collectives across ranks and aligns the ranks' clocks on their ends; a rank's
delay is how much later than the other ranks it reaches the collectives, summed over a step. A rank whose delay is
at least {JOB_SHARE:.0%} of the step and stands apart from the other ranks' delays ({JOB_SIGMAS:g} robust standard
deviations above their median) is a straggler; balanced, the job saves its delay per step.
Without matched collectives the job view compares the ranks' step times instead (said in the finding).
Given other ranks' traces opened in one process (the Python API's Loaded.advise(peers=...)): per rank, compute
time per step
(kernels, union over streams, averaged over its devices) and time in collectives. In every collective the
other ranks wait for the slowest, so the straggler is the rank with the most compute, and normally the least
time in collectives (the finding says when the two disagree). Balanced, every rank would compute the median:
saving = the slowest rank's compute minus the median rank's, per step. Fires when that is at least
{STRAGGLER_SHARE:.0%} of the step. Without other ranks' traces this part stays silent.""",
    check=check,
    not_simulated=("advise reads a job's other ranks as summaries, not their graphs; opscope whatif JOB joins the "
                   "ranks at their collectives and replays them (e.g. -c idle@rank:N=0 or kernel:REGEX@rank:N=F for "
                   "a straggler)"),
)
