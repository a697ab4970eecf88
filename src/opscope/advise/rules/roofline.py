"""Ops far below their roof that hold real time: the rows of the roofline (:mod:`opscope.analyses.roofline`, per op,
input shapes and dtype, under the published peaks of the device the trace names) that take a share of the device time
and reach a small part of what the device can do at their arithmetic intensity. The remedy is to measure, not to
guess: ``opscope repro`` of the op with the variants that fit it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.advise.remedies import ROOFLINE, framework
from opscope.analyses.arrays import combined
from opscope.analyses.op_cases import case_rows_of, chain_mask
from opscope.analyses.roofline import DEVICE_KINDS, attribution, in_steps_mask, roofline_table
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: A row holding at least this share of the device time (kernels, copies and fills in the steps)...
SHARE = 0.05
#: ...that runs below this share of its roof (percent) fires.
BELOW_PCT = 30.0
#: The saving assumes the row reaches this share of its roof (percent): what tuned library kernels commonly reach on
#: real shapes; the roof itself is a bound no kernel reaches.
TARGET_PCT = 50.0
#: Evidence rows per finding.
TOP = 8
#: Families of the work model whose math has faster forms on tensor/matrix cores.
_MATH = ("matmul", "conv", "attention")


def check(ctx: AdviceContext) -> list[Finding]:
    if not pc.any(kind_mask(ctx.trace.select(["kind"]), DEVICE_KINDS)).as_py():
        raise NotApplicable("no device work (kernels, copies, fills): the roofline rule compares device work with the "
                            "device's roofs")
    peaks, how = ctx.peaks
    if peaks is None:
        raise NotApplicable(f"{how.split('; give --peaks')[0]}: advise reads the published peaks of the device the "
                            "trace names (opscope roofline --peaks FILE takes a measured device's)")
    att = attribution(ctx.trace)
    in_steps = in_steps_mask(ctx.trace, att) if ctx.has_steps else None
    total = pc.sum(pc.filter(att.dur, in_steps) if in_steps is not None else att.dur).as_py() or 0
    if not total:
        return []
    table, _ = roofline_table(ctx.trace, peaks, by="op", in_steps=ctx.has_steps)
    flagged = [r for r in table.to_pylist() if r["pct_of_roof"] is not None and r["pct_of_roof"] < BELOW_PCT
               and r["device_ns"] >= SHARE * total]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in flagged:
        by_name.setdefault(r["name"], []).append(r)
    cases = _case_ops(ctx, att, flagged)
    return [_finding(ctx, name, rows, total, peaks, how, cases.get(name, [name])) for name, rows in by_name.items()]


def _finding(ctx: AdviceContext, name: str, rows: list[dict[str, Any]], total: int, peaks: Any, how: str,
             case_ops: list[str]) -> Finding:
    ns = sum(r["device_ns"] for r in rows)
    saving = sum(r["device_ns"] * (1 - r["pct_of_roof"] / TARGET_PCT) for r in rows)
    at_roof = sum(r["device_ns"] * (1 - r["pct_of_roof"] / 100) for r in rows)
    pct = sum(r["pct_of_roof"] * r["device_ns"] for r in rows) / ns if ns else 0.0
    share = 100.0 * ns / total
    shapes = f" (time-weighted over {len(rows)} input shapes)" if len(rows) > 1 else ""
    per_step = ctx.per_step(saving)
    source = shlex.quote(str(ctx.trace.metadata.get("source") or "TRACE"))
    pattern = "^(" + "|".join(re.escape(n) for n in case_ops) + ")$" if len(case_ops) > 1 else \
        "^" + re.escape(case_ops[0]) + "$"
    command = f"opscope repro {source} --op {shlex.quote(pattern)}"
    inside = [n for n in case_ops if n != name]
    where = (f" ({name} runs inside {', '.join(inside)}: the op the model calls, which repro reproduces)"
             if inside else "")
    roofs = ", ".join(sorted({_roof_words(r, peaks) for r in rows}))
    estimate = (f"{name} holds {format_ns(ctx.per_step(ns))} of device time per {ctx.unit} ({share:.1f}% of the "
                f"device's kernels, copies and fills{' in the steps' if ctx.has_steps else ''}) at {_pct(pct)}% of its "
                f"roof{shapes}. At {TARGET_PCT:g}% of its roof it would take pct_of_roof/{TARGET_PCT:g} of that time: "
                f"saving = device time x (1 - pct_of_roof/{TARGET_PCT:g}) per row = {format_ns(per_step)} per "
                f"{ctx.unit}; at the roof itself (a bound no kernel reaches) {format_ns(ctx.per_step(at_roof))}. "
                f"Roofs: {roofs} ({how.split('; published peaks')[0]}). The {ctx.unit} shortens by this much only "
                "while the device is the bottleneck")
    return Finding(
        rule=RULE.id,
        title=(f"{name} runs at {_pct(pct)}% of its roof on the {peaks.device} and holds {share:.1f}% of the device "
               "time"),
        saving_ns=per_step,
        saving_pct=ctx.pct(per_step),
        estimate=estimate,
        remedy=ROOFLINE[framework(ctx.trace)].format(command=command, variants=_variants(rows, peaks)) + where,
        evidence=_evidence(ctx, rows, total),
        evidence_title=(f"{name} by input shapes and dtype: device time per {ctx.unit}, its share of the device time, "
                        "achieved against the roof at its intensity (TFLOP/s; GB/s for copies and fills)"),
    )


def _pct(value: float) -> str:
    """A share of the roof in a few digits, never a misleading 0.0 (a row far below its roof is small, never 0)."""
    return f"{value:.1f}" if value >= 0.1 else f"{value:.2g}"


def _roof_words(row: dict[str, Any], peaks: Any) -> str:
    if row["bound"] == "compute":
        return f"{row['dtype']} compute {peaks.tflops.get(row['dtype'], 0):g} TFLOP/s"
    return f"memory {peaks.gbps:g} GB/s"


def _evidence(ctx: AdviceContext, rows: list[dict[str, Any]], total: int) -> list[dict[str, Any]]:
    out = []
    for r in sorted(rows, key=lambda r: -r["device_ns"])[:TOP]:
        flops = bool(r["flops"])
        achieved = r["achieved_tflops"] if flops else r["achieved_gbps"]
        out.append({"name": r["name"], "shapes": r["shapes"], "dtype": r["dtype"], "bound": r["bound"],
                    "calls_per_step": round(r["calls"] / ctx.steps, 2), "time_ns": ctx.per_step(r["device_ns"]),
                    "share_pct": round(100.0 * r["device_ns"] / total, 2),
                    "pct_of_roof": _round(r["pct_of_roof"]), "unit": "TFLOP/s" if flops else "GB/s",
                    "achieved": _round(achieved), "roof": _round(100.0 * achieved / r["pct_of_roof"]),
                    "saving_ns": ctx.per_step(r["device_ns"] * (1 - r["pct_of_roof"] / TARGET_PCT))})
    return out


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _variants(rows: Sequence[dict[str, Any]], peaks: Any) -> str:
    """opscope repro variants that fit the rows: channels_last and cuDNN's autotuner for convolutions; TF32 and
    autocast to a half type the device has for fp32 math; torch.compile (fusion: fewer bytes moved) for memory-bound
    elementwise, normalisation and reduction ops; auto (every variant that applies) when none of these fits."""
    out: list[str] = []
    families = {r["family"] for r in rows}
    if "conv" in families:
        out += ["channels_last", "cudnn_benchmark"]
    if any(r["dtype"] == "fp32" and r["family"] in _MATH for r in rows):
        if "tf32" in peaks.tflops:
            out.append("tf32")
        half = "bf16" if "bf16" in peaks.tflops else "fp16" if "fp16" in peaks.tflops else None
        if half:
            out.append(f"autocast_{half}")
    if any(r["bound"] == "memory" and r["family"] in ("elementwise", "norm", "reduction") for r in rows):
        out.append("compile")
    return ",".join(out) or "auto"


def _case_ops(ctx: AdviceContext, att: Any, flagged: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per flagged op name, the ops opscope repro makes cases of for its instances (the outermost op of the chain of
    framework ops above each), most device time first: what ``--op`` must match."""
    if not flagged:
        return {}
    events = ctx.trace.select(["kind", "name", "shapes", "parent"])
    has = pc.is_valid(att.op_row)
    rows = pa.table({"op": pc.filter(att.op_row, has), "dur": pc.filter(att.dur, has)})
    per = rows.group_by(["op"], use_threads=False).aggregate([("dur", "sum")])
    per = per.join(att.work.select(["row", "dtype"]), keys="op", right_keys="row", join_type="inner")
    names = pc.take(events["name"], per["op"]).cast(pa.string())
    shapes = pc.fill_null(pc.take(events["shapes"], per["op"]).cast(pa.string()), "")
    wanted = {(r["name"], r["shapes"] or "", r["dtype"]) for r in flagged}
    keep = pa.array([(n, s, d) in wanted for n, s, d in zip(names.to_pylist(), shapes.to_pylist(),
                                                             per["dtype"].to_pylist())], pa.bool_())
    ops = combined(pc.filter(per["op"], keep))
    tops = case_rows_of(events, chain_mask(events), ops)  # the op opscope repro makes a case of
    out: dict[str, dict[str, int]] = {}
    for name, top, ns in zip(pc.filter(names, keep).to_pylist(),
                             pc.take(events["name"], tops).cast(pa.string()).to_pylist(),
                             pc.filter(per["dur_sum"], keep).to_pylist()):
        mine = out.setdefault(name, {})
        mine[top] = mine.get(top, 0) + ns
    return {name: [op for op, _ in sorted(tops_ns.items(), key=lambda kv: -kv[1])][:3]
            for name, tops_ns in out.items()}


RULE = Rule(
    id="roofline",
    title="Ops far below their roof that hold real time",
    explain=f"""\
Places each op on the device's roofline (opscope roofline): per op, input shapes and dtype, the work from its
shapes (FLOPs and bytes) over the device time of the kernels, copies and fills it launched (each charged to the
innermost op around its launch that has a work model; inside the steps, the whole trace without steps), against the
roof at its arithmetic intensity (the lower of the dtype's dense peak and memory bandwidth x intensity), from the
published peaks of the device the trace names. Not applicable without device work, or when the device is not
recognised (advise has no --peaks; opscope roofline --peaks FILE takes a measured device's).

Fires for a row that holds at least {SHARE:.0%} of the device time (kernels, copies and fills; collectives are the
network's) and runs below {BELOW_PCT:g}% of its roof; one finding per op name, its rows (input shapes and dtypes)
as evidence: device time and share, pct_of_roof, bound, achieved against the roof (TFLOP/s; GB/s for copies and
fills).

Estimated saving = per row, device time x (1 - pct_of_roof / {TARGET_PCT:g}): the time saved if the op reached
{TARGET_PCT:g}% of its roof, what tuned library kernels commonly reach on real shapes (the estimate also gives the
saving at the roof itself, an upper bound no kernel reaches). The remedy measures instead of guessing: opscope
repro TRACE --op OP writes the op as a standalone benchmark with its exact inputs (OP: the op the model calls, which
repro reproduces, e.g. aten::linear around an aten::addmm row) and times the variants that fit it: channels_last and
cudnn_benchmark for convolutions, tf32 and autocast to bf16/fp16 for fp32 matmuls, convolutions and attention (where
the device has them), compile for memory-bound elementwise, normalisation and reduction ops; auto otherwise. Other
frameworks get their own way to time the op alone.

Left out: whether the device is the bottleneck (device time saved shortens the step only while it is); traffic
the work model does not count (it reads each input once: a kernel that must read them again is nearer its real
limit than shown); and whether any kernel reaches {TARGET_PCT:g}% on these shapes (small or odd shapes may not:
what opscope repro measures).""",
    check=check,
    not_simulated=("the roof is a bound, not a speed the op will reach: how fast it can run here is what opscope "
                   "repro measures"),
    releases=("opscope.analyses.links", "opscope.analyses.roofline"),
)
