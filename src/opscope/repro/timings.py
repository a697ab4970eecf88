"""What a reproducer's timed runs say, from every run's time its script reports: the baseline's and each variant's
median, p10-p90 and runs, and each variant's speed-up over the baseline timed beside it with its 95% interval and
verdict (:mod:`opscope.analyses.noise`: faster, slower, no difference, or too few runs to tell)."""

from __future__ import annotations

from typing import Any

from opscope.analyses import noise

#: The verdict of a variant whose script reported no runs (a result of an older opscope: one median each side).
NO_RUNS = "no runs reported"


def times_of(value: Any) -> list[int]:
    """A reported list of run times (ns): the positive integers in it; empty for anything else."""
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def case_fields(result: dict[str, Any]) -> dict[str, Any]:
    """The baseline's ``replay_ns`` (median), ``replay_p10_ns``, ``replay_p90_ns`` and ``runs`` from its runs'
    times; the script's own figures where it reported no times."""
    s = noise.spread(times_of(result.get("times_ns")))
    if s is None:
        return {"replay_p10_ns": None, "replay_p90_ns": None}
    return {"replay_ns": round(s.median), "replay_p10_ns": round(s.p10), "replay_p90_ns": round(s.p90), "runs": s.n}


def variant_fields(result: dict[str, Any]) -> dict[str, Any]:
    """A variant's median, ``p10_ns``, ``p90_ns`` and ``runs``; the baseline's median beside it; the median
    difference variant - baseline with its interval (``delta_ns``, ``delta_low_ns``, ``delta_high_ns``); the
    speed-up (baseline over variant) with its interval (``speedup``, ``speedup_low``, ``speedup_high``); and the
    ``verdict``."""
    mine, base = times_of(result.get("times_ns")), times_of(result.get("baseline_times_ns"))
    out: dict[str, Any] = {"p10_ns": None, "p90_ns": None, "speedup_low": None, "speedup_high": None,
                           "delta_ns": None, "delta_low_ns": None, "delta_high_ns": None,
                           "verdict": NO_RUNS if not mine or not base else None}
    s = noise.spread(mine)
    if s is not None:
        out.update(replay_ns=round(s.median), p10_ns=round(s.p10), p90_ns=round(s.p90), runs=s.n)
    b = noise.spread(base)
    if b is not None:
        out["baseline_ns"] = round(b.median)
    if not mine or not base:
        return out
    shift = noise.shift(base, mine)
    out["verdict"] = noise.verdict(shift)
    if shift is not None:
        out.update(delta_ns=shift.delta, delta_low_ns=shift.low, delta_high_ns=shift.high,
                   speedup=_figure(shift.speedup), speedup_low=_figure(shift.speedup_low),
                   speedup_high=_figure(shift.speedup_high))
    elif s is not None and b is not None and s.median > 0:
        out["speedup"] = _figure(b.median / s.median)
    return out


def best_variant(variants: Any) -> dict[str, Any] | None:
    """The variant with the largest speed-up among those the interval calls faster and whose outputs stayed within
    the dtype's tolerance; None when none is."""
    best = None
    for v in variants or ():
        if not isinstance(v, dict) or v.get("status") != "ok" or v.get("within_tolerance") is not True:
            continue
        speedup = v.get("speedup")
        if v.get("verdict") != noise.FASTER or not isinstance(speedup, int | float):
            continue
        if best is None or speedup > best["speedup"]:
            best = v
    return best


def _figure(x: float | None) -> float | None:
    """4 significant digits (a speed-up of 1e-5 keeps its digits)."""
    return None if x is None else float(f"{x:.4g}")
