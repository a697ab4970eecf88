"""Ranks against each other: which steps they share, each rank's step times and how late it reaches the
collectives, the stragglers the others wait for, and where a straggler's extra time goes.

A rank's *delay* is how much later than the other ranks it arrives at the job's collectives, summed over a step:
``late_ns`` of each collective is its (clock-aligned) start minus the median start of the other ranks of the
instance (leave-one-out, so with two ranks the late one gets +d and the early one -d). After a blocking collective
the ranks leave together, so each collective's lateness is the extra time the rank spent since the previous one,
and the sum over a step is that rank's extra time in the step: what every other rank waits for. Without matched
collectives the delay falls back to the rank's step time minus the other ranks' median step time (said so).

A straggler's delay is at least STRAGGLER_SHARE of the median step and stands apart from the other ranks' delays
(OUTLIER_SIGMAS robust standard deviations above their median): every rank jitters a little, a straggler is apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.job.rank import RankSummary

#: A rank is a straggler when its delay per step is at least this share of the median step...
STRAGGLER_SHARE = 0.01
#: ...and stands out from the other ranks' delays: above their median by this many robust standard deviations
#: (1.4826 x MAD), when there are three or more others. Jitter moves every rank a little; a straggler is apart.
OUTLIER_SIGMAS = 5.0
#: Rows of the "why" table per straggler.
WHY_ROWS = 10

RANK_STEPS_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("step", pa.int64()), ("step_ns", pa.int64()), ("compute_ns", pa.int64()),
    ("comm_ns", pa.int64()), ("wait_ns", pa.int64()), ("late_ns", pa.int64()), ("collectives", pa.int64())])
WHY_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("category", pa.string()), ("name", pa.string()), ("rank_ns", pa.int64()),
    ("median_ns", pa.int64()), ("extra_ns", pa.int64())])
SLOWEST_SCHEMA = pa.schema([
    ("step", pa.int64()), ("slowest_rank", pa.int64()), ("by_ns", pa.int64()), ("median_step_ns", pa.int64()),
    ("max_step_ns", pa.int64())])


def span_text(numbers: Sequence[int]) -> str:
    """``4-6, 9`` for [4, 5, 6, 9]."""
    parts: list[str] = []
    values = sorted(set(numbers))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(parts)


def compared_steps(summaries: Mapping[int, RankSummary]) -> tuple[list[int], list[str]]:
    """The steps compared across ranks, and one line per rank whose steps differ. The compared steps are those of
    the step range most ranks have (a rank that profiled other steps, or was cut short, must not empty the
    comparison for all): a rank compares on those of them it has, and a rank with none of them is named and left
    out of the step figures."""
    sets = {r: set(s.steps["step"].to_pylist()) for r, s in summaries.items() if s.steps.num_rows}
    notes = []
    without = sorted(r for r in summaries if r not in sets)
    if without:
        notes.append(f"rank(s) {span_text(without)} have no steps: their step figures are left out")
    if not sets:
        return [], notes
    counts: dict[frozenset, int] = {}
    for v in sets.values():
        counts[frozenset(v)] = counts.get(frozenset(v), 0) + 1
    usual = max(counts, key=lambda v: (counts[v], len(v), sorted(v)))
    compared = sorted(usual)
    for r, numbers in sorted(sets.items()):
        if numbers == usual:
            continue
        shared = sorted(numbers & usual)
        notes.append(f"rank {r} has steps {span_text(sorted(numbers))}, most ranks {span_text(compared)}: "
                     + (f"it is compared on steps {span_text(shared)}" if shared else
                        "it shares none of them and is left out of the step figures"))
    return compared, notes


def rank_steps(summaries: Mapping[int, RankSummary], per_rank: pa.Table, steps: Sequence[int]) -> pa.Table:
    """One row per rank and compared step: step time, compute and collective time inside the step, the time the
    rank waited in collectives and its delay (``late_ns``) summed over the step's collectives."""
    wanted = set(steps)
    late: dict[tuple[int, int], list[int]] = {}
    if per_rank.num_rows:
        for r, s, w, d in zip(per_rank["rank"].to_pylist(), per_rank["step"].to_pylist(),
                              per_rank["wait_ns"].to_pylist(), per_rank["late_ns"].to_pylist()):
            if s in wanted:
                acc = late.setdefault((r, s), [0, 0, 0])
                acc[0] += w or 0
                acc[1] += d or 0
                acc[2] += 1
    rows = []
    for r, summary in sorted(summaries.items()):
        for row in summary.steps.to_pylist():
            if row["step"] not in wanted:
                continue
            w, d, n = late.get((r, row["step"]), (None, None, 0))
            rows.append({"rank": r, "step": row["step"], "step_ns": row["dur_ns"], "compute_ns": row["compute_ns"],
                         "comm_ns": row["comm_ns"], "wait_ns": w, "late_ns": d, "collectives": n})
    return pa.Table.from_pylist(rows, schema=RANK_STEPS_SCHEMA)


def _mean(values: list) -> int | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values)) if values else None


def rank_rows(summaries: Mapping[int, RankSummary], per_step: pa.Table, per_rank: pa.Table,
              clocks: pa.Table | None) -> tuple[list[dict], str]:
    """Per rank: means per compared step, its delay and the straggler flag; and how the delay was measured."""
    by_rank: dict[int, list[dict]] = {}
    for row in per_step.to_pylist():
        by_rank.setdefault(row["rank"], []).append(row)
    offsets = {row["rank"]: row for row in clocks.to_pylist()} if clocks is not None else {}
    rows = []
    for r, summary in sorted(summaries.items()):
        steps = by_rank.get(r, [])
        clock = offsets.get(r, {})
        rows.append({
            "rank": r, "file": summary.path, "rank_from": summary.rank_source,
            "clock_offset_ns": clock.get("clock_offset_ns"),
            "offset_uncertainty_ns": clock.get("offset_uncertainty_ns"),
            "steps": len(steps), "step_ns": _mean([s["step_ns"] for s in steps]),
            "compute_ns": _mean([s["compute_ns"] for s in steps]), "comm_ns": _mean([s["comm_ns"] for s in steps]),
            "wait_ns": _mean([s["wait_ns"] for s in steps]), "delay_ns": _mean([s["late_ns"] for s in steps]),
        })
    measured = "collectives"
    if all(row["delay_ns"] is None for row in rows):
        # no collective matched inside the compared steps: fall back to step times (leave-one-out median)
        measured = "step time"
        for row in rows:
            others = [o["step_ns"] for o in rows if o is not row and o["step_ns"] is not None]
            row["delay_ns"] = (row["step_ns"] - statistics.median(others)) if others and row["step_ns"] is not None \
                else None
        if all(row["delay_ns"] is None for row in rows) and per_rank.num_rows:
            # no steps at all: the collectives' lateness over the whole trace
            measured = "collectives (whole trace: no steps)"
            totals: dict[int, int] = {}
            for rank, d in zip(per_rank["rank"].to_pylist(), per_rank["late_ns"].to_pylist()):
                totals[rank] = totals.get(rank, 0) + (d or 0)
            for row in rows:
                row["delay_ns"] = totals.get(row["rank"])
    steps_known = [row["step_ns"] for row in rows if row["step_ns"] is not None]
    reference = statistics.median(steps_known) if steps_known else None
    for row in rows:
        others = [o["delay_ns"] for o in rows if o is not row and o["delay_ns"] is not None]
        row["straggler"] = bool(row["delay_ns"] is not None and reference and row["delay_ns"] > 0
                                and row["delay_ns"] >= STRAGGLER_SHARE * reference
                                and row["delay_ns"] > _outlier_bound(others))
    return rows, measured


def _outlier_bound(others: list[int]) -> float:
    """The delay above which a rank stands apart from ``others``: their median plus OUTLIER_SIGMAS robust standard
    deviations (no bound with fewer than three others: two ranks' delays say nothing about spread)."""
    if len(others) < 3:
        return float("-inf")
    centre = statistics.median(others)
    mad = statistics.median(abs(o - centre) for o in others)
    return centre + OUTLIER_SIGMAS * 1.4826 * mad


def slowest_per_step(per_step: pa.Table) -> pa.Table:
    """Per compared step: the rank that arrived latest overall (largest delay; largest step time without
    collectives) and by how much."""
    by_step: dict[int, list[dict]] = {}
    for row in per_step.to_pylist():
        by_step.setdefault(row["step"], []).append(row)
    rows = []
    for step, rows_of in sorted(by_step.items()):
        durs = [r["step_ns"] for r in rows_of]
        if any(r["late_ns"] is not None for r in rows_of):
            worst = max(rows_of, key=lambda r: r["late_ns"] if r["late_ns"] is not None else -(1 << 62))
            by = worst["late_ns"]
        else:
            worst = max(rows_of, key=lambda r: r["step_ns"])
            others = [r["step_ns"] for r in rows_of if r is not worst]
            by = worst["step_ns"] - statistics.median(others) if others else 0
        rows.append({"step": step, "slowest_rank": worst["rank"], "by_ns": by,
                     "median_step_ns": round(statistics.median(durs)), "max_step_ns": max(durs)})
    return pa.Table.from_pylist(rows, schema=SLOWEST_SCHEMA)


def why(summaries: Mapping[int, RankSummary], stragglers: Sequence[int], steps: Sequence[int]) -> pa.Table:
    """For each straggler: the kernels, ops and idle causes on which it spends more time per step than the median
    of the other ranks (top :data:`WHY_ROWS` by the difference). Kernel and op times are over the compared steps;
    idle causes over each rank's whole window divided by its number of steps."""
    wanted = set(steps)
    per_rank = {r: _per_step_means(s, wanted) for r, s in summaries.items()}
    rows = []
    for s in stragglers:
        mine = per_rank.get(s, {})
        others = [v for r, v in per_rank.items() if r != s]
        extra: list[dict] = []
        for key, value in mine.items():
            median = statistics.median([o.get(key, 0) for o in others]) if others else 0
            if value - median > 0:
                extra.append({"rank": s, "category": key[0], "name": key[1], "rank_ns": round(value),
                              "median_ns": round(median), "extra_ns": round(value - median)})
        extra.sort(key=lambda e: -e["extra_ns"])
        rows.extend(extra[:WHY_ROWS])
    return pa.Table.from_pylist(rows, schema=WHY_SCHEMA)


def _per_step_means(summary: RankSummary, steps: set[int]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    n = max(1, len(steps))
    work = summary.work
    if work.num_rows and steps:
        t = work.filter(pc.is_in(work["step"], value_set=pa.array(sorted(steps), pa.int64())))
        for c, name, ns in zip(t["category"].to_pylist(), t["name"].to_pylist(), t["ns"].to_pylist()):
            out[(c, name)] = out.get((c, name), 0) + ns / n
    count = max(1, summary.steps.num_rows)
    for cause, ns in zip(summary.idle["cause"].to_pylist(), summary.idle["idle_ns"].to_pylist()):
        out[("device idle", cause)] = ns / count
    return out
