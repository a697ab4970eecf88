"""The job view as a Report: the overview, the ranks (the data section: JSON gets every table as one document),
the slowest rank per step, why the stragglers are slow, the collectives, and each rank's steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opscope.analyses.job.ranks import OUTLIER_SIGMAS, STRAGGLER_SHARE, span_text
from opscope.analyses.job.view import JobView
from opscope.report import Column, Report, Section
from opscope.units import format_ns

RANKS_LEGEND = (
    "per rank, means over the compared steps (the step range most ranks have): step_ns (step duration), compute_ns "
    "(union of its compute kernels and copies inside the step), comm_ns (union of its collectives), wait_ns (time its "
    "collectives waited for the last rank to arrive), delay_ns (how much later than the other ranks it reached "
    "the collectives, summed over the step: its own extra time, which every other rank waits for); "
    f"straggler: delay at least {STRAGGLER_SHARE:.0%} of the median step and {OUTLIER_SIGMAS:g} robust standard "
    "deviations above the other ranks' (with 3 or more others); clock_offset_ns: its clock minus the "
    "reference rank's, estimated from the ends of blocking collectives (± offset_uncertainty_ns, a robust "
    "standard error), subtracted before any cross-rank figure")
COLLECTIVES_LEGEND = (
    "per collective type and message size (the nccl-tests size: the gathered buffer for all-gather, the input "
    "for the rest): calls, median arrival skew (first to last rank entering), mean wait (of each rank, for the "
    "last one) and transfer (last arrival to end) per call, bus bandwidth on the transfer time (nccl-tests' "
    "busbw factors) and its share of the device link's published peak where known")
SLOWEST_LEGEND = ("per compared step: the rank that reached the step's collectives latest and by how much (its delay "
                  "against the other ranks' median), the median and longest step time over ranks")
WHY_LEGEND = ("where a straggler spends its extra time: per step, its kernel time (short names), op self time and "
              "device idle time by cause, against the median of the other ranks; extra_ns = rank_ns - median_ns. "
              "Kernels and ops over the compared steps; idle causes over each rank's window divided by its steps")

def job_report(view: JobView, *, spec: str, files: int, world_size: int | None, executor: str,
               problems: Sequence[str], limit: int | None = None, table: str = "ranks",
               resources: dict[str, Any] | None = None) -> Report:
    """``table``: the table CSV writes (ranks, steps, rank_steps, why, collectives, instances, clocks);
    ``resources``: what the run cost (peak memory of the combining process and of the workers, task seconds),
    for the JSON document."""
    ranks = view.ranks
    fields = _overview(view, files=files, world_size=world_size, executor=executor)
    tables = {"ranks": ranks, "steps": view.slowest, "rank_steps": view.rank_steps, "why": view.why,
              "collectives": view.collectives, "instances": view.instances, "clocks": view.clocks}
    if table not in tables:
        from opscope.errors import UsageError

        raise UsageError(f"--table must be one of {', '.join(tables)}, not {table!r}")
    doc: dict[str, Any] = {
        "job": {"spec": spec, "files": files, "ranks": ranks.num_rows, "world_size": world_size,
                "executor": executor, "compared_steps": view.compared, "delay_from": view.delay_from,
                "clocks_aligned": view.aligned, "stragglers": view.stragglers},
        **{name: t.to_pylist() for name, t in tables.items()},
        "problems": list(problems), "notes": list(view.notes), "resources": dict(resources or {}),
    }
    hidden = {"file": Column(show="data"), "rank_from": Column(show="data")}
    sections = [
        Section("overview", "Job", fields=fields, data=False),
        Section("ranks", "Ranks", tables[table] if table != "ranks" else ranks, legend=RANKS_LEGEND,
                limit=limit or None, document=doc, columns=hidden if table == "ranks" else {},
                terminal=table == "ranks"),
    ]
    if table != "ranks":
        sections.append(Section("ranks_terminal", "Ranks", ranks, legend=RANKS_LEGEND, limit=limit or None,
                                columns=hidden, data=False))
    sections += [
        Section("slowest", "Slowest rank per step", view.slowest, legend=SLOWEST_LEGEND, data=False,
                limit=limit or None),
        Section("why", "Why the stragglers are slow", view.why, legend=WHY_LEGEND, data=False),
        Section("collectives", "Collectives by type and size", view.collectives, legend=COLLECTIVES_LEGEND,
                data=False),
    ]
    if view.why.num_rows == 0:
        sections = [s for s in sections if s.key != "why"]
    if view.collectives.num_rows == 0:
        sections = [s for s in sections if s.key != "collectives"]
    return Report(sections=sections, title=f"job {spec}", headline=_headline(view),
                  notes=[*problems, *view.notes],
                  legend="opscope job DIR --format json: every table; --table NAME --format csv: one of them; "
                         "opscope query DIR \"SQL\": the ranks' events as one table with a rank column")


def _overview(view: JobView, *, files: int, world_size: int | None, executor: str) -> list[tuple[str, str]]:
    ranks = view.ranks.num_rows
    out = [("ranks", f"{ranks} analysed" + (f" of world size {world_size}" if world_size else "")
            + f" ({files} files)"),
           ("ran on", executor),
           ("steps compared", span_text(view.compared) if view.compared else "none (no rank has steps)"),
           ("clocks", _clock_line(view)),
           ("delay measured from", view.delay_from)]
    instances = view.instances.num_rows
    if instances:
        out.append(("collectives", f"{instances} matched across ranks"))
    return out


def _clock_line(view: JobView) -> str:
    t = view.clocks
    if not view.aligned or t.num_rows == 0:
        return "not aligned: " + next((n for n in view.notes if "align" in n), "no collective ends to align on")
    unc = [u for u in t["offset_uncertainty_ns"].to_pylist() if u is not None]
    offsets = [abs(o) for o in t["clock_offset_ns"].to_pylist() if o is not None]
    return (f"aligned on collective ends: offsets up to {format_ns(max(offsets) if offsets else 0)}, "
            f"uncertainty up to ±{format_ns(max(unc) if unc else 0)}")


def _headline(view: JobView) -> str:
    rows = {r["rank"]: r for r in view.ranks.to_pylist()}
    if not rows:
        return "no rank could be analysed"
    steps = [r["step_ns"] for r in rows.values() if r.get("step_ns") is not None]
    if not view.stragglers:
        worst = max(rows.values(), key=lambda r: r.get("delay_ns") or 0)
        if worst.get("delay_ns") is None:
            return f"{len(rows)} ranks; no straggler could be measured (no matched collectives nor shared steps)"
        return (f"no straggler: the latest rank ({worst['rank']}) is {format_ns(worst['delay_ns'])} per step behind "
                f"the others, under {STRAGGLER_SHARE:.0%} of the step or within the ranks' jitter")
    parts = []
    for r in view.stragglers:
        row = rows[r]
        share = f" ({100 * row['delay_ns'] / (sum(steps) / len(steps)):.1f}% of the mean step)" if steps else ""
        parts.append(f"rank {r} is {format_ns(row['delay_ns'])} per step behind the other ranks{share}")
    return "straggler: " + "; ".join(parts) + f" (from {view.delay_from}; the others wait for it)"
