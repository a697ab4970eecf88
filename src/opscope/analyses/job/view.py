"""The job view: every rank's summary combined. Collectives matched across ranks, clocks aligned on their ends,
wait and transfer split, then ranks against each other (stragglers and why)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from opscope.analyses.job import ranks as rank_view
from opscope.analyses.job.rank import RankSummary


@dataclass
class JobView:
    """Tables of the job view; each says what it is in :mod:`opscope.analyses.job.report`."""

    ranks: pa.Table
    rank_steps: pa.Table
    slowest: pa.Table
    why: pa.Table
    clocks: pa.Table
    instances: pa.Table
    collectives: pa.Table
    compared: list[int]
    delay_from: str
    aligned: bool
    stragglers: list[int]
    notes: list[str] = field(default_factory=list)
    #: the rank whose clock the others are put on (None: no rank could be aligned)
    clock_reference: int | None = None


def job_view(summaries: Mapping[int, RankSummary], align: bool = True) -> JobView:
    from opscope.analyses.job.clocks import apply_offsets, clock_offsets, no_offsets
    from opscope.analyses.job.links import link_peak_gbps
    from opscope.analyses.job.match import match_instances
    from opscope.analyses.job.timing import collective_timing

    notes: list[str] = []
    compared, step_notes = rank_view.compared_steps(summaries)
    notes += step_notes
    matched = match_instances({r: s.calls for r, s in summaries.items()})
    notes += matched.notes
    clocks = clock_offsets(matched.long) if align else no_offsets(matched.long, list(summaries))
    notes += clocks.notes
    peaks = {r: _peak(s, link_peak_gbps) for r, s in summaries.items()}
    timing = collective_timing(apply_offsets(matched.long, clocks), {r: p for r, p in peaks.items() if p})
    notes += timing.notes
    per_step = rank_view.rank_steps(summaries, timing.per_rank, compared)
    rows, delay_from = rank_view.rank_rows(summaries, per_step, timing.per_rank, clocks.table)
    stragglers = [r["rank"] for r in rows if r["straggler"]]
    aligned = bool(clocks.table.num_rows) and any(v for v in clocks.table["aligned"].to_pylist())
    return JobView(
        ranks=pa.Table.from_pylist(rows) if rows else pa.table({"rank": pa.array([], pa.int64())}),
        rank_steps=per_step, slowest=rank_view.slowest_per_step(per_step),
        why=rank_view.why(summaries, stragglers, compared), clocks=clocks.table, instances=timing.instances,
        collectives=timing.summary, compared=compared, delay_from=delay_from, aligned=aligned,
        stragglers=stragglers, notes=notes, clock_reference=clocks.reference if aligned else None)


def _peak(summary: RankSummary, lookup) -> float | None:
    devices = summary.facts.get("devices") or []
    peaks = {lookup(d) for d in devices}
    return peaks.pop() if len(peaks) == 1 else None
