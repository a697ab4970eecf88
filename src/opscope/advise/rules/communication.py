"""Communication: collectives (NCCL/RCCL) that compute does not hide, and straggler ranks that the others wait
for in every collective."""

from __future__ import annotations

import statistics

import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.gpu import COMM, COMPUTE
from opscope.analyses.intervals import union_by_group
from opscope.render.units import format_ns

#: Exposed communication worth a finding, as a share of the step.
EXPOSED_SHARE = 0.05
#: A straggler's extra compute worth a finding, as a share of the step.
STRAGGLER_SHARE = 0.05


def exposure(ctx: AdviceContext) -> list[dict]:
    """Per device: comm time (union), the part of it overlapped by compute kernels, and the exposed rest."""
    t = ctx.gpu.work.table
    t = t.filter(pc.greater(t["end"], t["start"]))
    rows = []
    cat = t["cat"]
    comm = t.filter(pc.equal(cat, COMM))
    compute = t.filter(pc.equal(cat, COMPUTE))
    both = t.filter(pc.or_(pc.equal(cat, COMM), pc.equal(cat, COMPUTE)))

    def union(table):
        return union_by_group(table["start"], pc.subtract(table["end"], table["start"]), table["device"])

    u_comm, u_compute, u_both = union(comm), union(compute), union(both)
    for device in sorted(u_comm):
        c = u_comm[device]
        overlapped = c + u_compute.get(device, 0) - u_both.get(device, 0)
        rows.append({"device": device, "comm_ns": c, "overlapped_ns": overlapped, "exposed_ns": c - overlapped})
    return rows


def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is None:
        raise NotApplicable("no GPU activity in this trace")
    rows = exposure(ctx)
    if not rows:
        raise NotApplicable("no collectives (NCCL/RCCL kernels) in this trace")
    findings = []
    exposed = sum(r["exposed_ns"] for r in rows) / len(rows)  # per device, averaged: devices run side by side
    saving = ctx.per_step(exposed)
    if saving >= EXPOSED_SHARE * ctx.step_ns:
        evidence = [{"device": r["device"], "comm_ns": ctx.per_step(r["comm_ns"]),
                     "overlapped_ns": ctx.per_step(r["overlapped_ns"]), "exposed_ns": ctx.per_step(r["exposed_ns"]),
                     "exposed_pct": round(100.0 * r["exposed_ns"] / r["comm_ns"], 2) if r["comm_ns"] else None}
                    for r in rows]
        findings.append(Finding(
            rule=RULE.id,
            title=f"Communication not overlapped with compute: {format_ns(saving)} per {ctx.unit} of collectives "
                  f"run while no kernel computes",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=("upper bound: the collectives' time not covered by compute kernels on the same device (per "
                      "device, averaged over the devices of the trace); if all of it overlapped compute, the step "
                      "would shrink by that much, provided there is independent compute to overlap it with"),
            change=("overlap gradients' all-reduce with the backward pass: DDP(bucket_cap_mb=25..100, "
                    "gradient_as_bucket_view=True), FSDP(forward_prefetch=True, backward_prefetch=BACKWARD_PRE); "
                    "issue collectives async (async_op=True) and wait late; for tensor parallelism, overlap with "
                    "the next layer's compute"),
            evidence=evidence,
            evidence_title="per device, per step",
        ))
    straggler = _straggler(ctx)
    if straggler is not None:
        findings.append(straggler)
    return findings


def _rank_row(ctx: AdviceContext, label) -> dict | None:
    if ctx.gpu is None:
        return None
    b = ctx.breakdown.to_pylist()
    compute = sum(r["compute_ns"] for r in b) / max(1, len(b))
    comm = sum(r["comm_ns"] for r in b) / max(1, len(b))
    return {"rank": label, "compute_ns": ctx.per_step(compute), "comm_ns": ctx.per_step(comm),
            "step_ns": ctx.step_ns}


def _straggler(ctx: AdviceContext) -> Finding | None:
    """With the other ranks' traces: the rank with the most compute per step holds the others up in every
    collective."""
    if not ctx.peers:
        return None
    ranks = [_rank_row(ctx, ctx.trace.metadata.get("rank", 0))]
    for i, peer in enumerate(ctx.peers, start=1):
        ranks.append(_rank_row(AdviceContext(peer), peer.metadata.get("rank", f"#{i}")))
    ranks = [r for r in ranks if r is not None]
    if len(ranks) < 2:
        return None
    median = statistics.median(r["compute_ns"] for r in ranks)
    slowest = max(ranks, key=lambda r: r["compute_ns"])
    saving = int(slowest["compute_ns"] - median)
    if saving < STRAGGLER_SHARE * ctx.step_ns:
        return None
    return Finding(
        rule=RULE.id,
        title=f"Straggler: rank {slowest['rank']} computes {format_ns(saving)} per step more than the median rank",
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=(f"every collective waits for the slowest rank, so the others idle in it for the difference; "
                  f"balanced, each rank would compute the median ({format_ns(int(median))} per step): saving = "
                  f"slowest - median compute per step, over {len(ranks)} ranks"),
        change=("balance the work across ranks (uneven data shards, variable sequence lengths: bucket or pack "
                "them; uneven pipeline stages), and check the slow rank's host: thermal throttling, a noisy "
                "neighbour, a slower link; compare it with opscope diff RANK0 RANK_SLOW"),
        evidence=sorted(ranks, key=lambda r: -r["compute_ns"]),
        evidence_title="per rank, per step (compute and comm averaged over the rank's devices)",
    )


RULE = Rule(
    id="communication",
    title="Communication not overlapped with compute, and straggler ranks",
    explain=f"""\
Collectives are the NCCL/RCCL kernels of the trace (kind comm).

Exposed communication: per device, the union of the collectives' intervals minus the part covered by compute
kernels on the same device (any stream). Fires when it is at least {EXPOSED_SHARE:.0%} of the step. Estimated
saving = the exposed time per step (averaged over the trace's devices): an upper bound, reached only if there
is independent compute to overlap every collective with (DDP's bucketed all-reduce during backward, FSDP
prefetching).

Stragglers (needs the other ranks' traces: opscope advise RANK0 RANK1 ...): per rank, compute time per step
(kernels, union over streams, averaged over its devices). In every collective the other ranks wait for the
slowest, so balancing saves the slowest rank's compute minus the median rank's, per step. Fires when that is
at least {STRAGGLER_SHARE:.0%} of the step. Without other ranks' traces this part stays silent.""",
    check=check,
)
