"""Edit real Kineto traces in known ways (a kernel made slower, an idle gap inserted) for trust tests.

Works on the raw JSON document, independently of opscope's reader, and computes the expected effect from the
raw events (times in microseconds as the file has them) so tests can compare opscope's answers against it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

#: Device work categories as Kineto writes them (its 2021 releases capitalised them).
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}  # early Kineto wrote a bare array


def save(doc: dict, path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path


def device_work(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]


def steps(doc: dict) -> list[tuple[int, float, float]]:
    """(number, start, end) of every ProfilerStep#N, in µs."""
    out = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
           if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return sorted(out, key=lambda s: s[1])


def busy_union(doc: dict, device: int) -> list[tuple[float, float]]:
    """Merged busy intervals (µs) of one device's kernels, copies and memsets over all its streams."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in device_work(doc) if e["args"].get("device") == device)
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def double_kernel(doc: dict, name: str) -> int:
    """Make every kernel called ``name`` twice as long; returns how many were changed."""
    n = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("name") == name:
            e["dur"] = e["dur"] * 2
            n += 1
    return n


def insert_gap(doc: dict, at: float, length: float) -> None:
    """Stretch time at ``at`` (µs) by ``length``: events starting at or after it move later, events running
    across it get longer (their children moved with them), so nothing else changes but an idle stretch."""
    for e in doc["traceEvents"]:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        if ts >= at:
            e["ts"] = ts + length
        elif e.get("ph") == "X" and ts + e.get("dur", 0) > at:
            e["dur"] = e["dur"] + length


def launch_steps(doc: dict) -> dict[int, int]:
    """correlation id -> ProfilerStep number of the runtime call that launched it (how steps own device work)."""
    spans = steps(doc)
    out = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "Runtime") and "correlation" in e.get("args", {}):
            for number, s, end in spans:
                if s <= e["ts"] < end:
                    out[e["args"]["correlation"]] = number
                    break
    return out


def kernels_of_op(doc: dict, op: str) -> dict[str, set[str]]:
    """For every call of ``op``: its input shapes (compact JSON) -> names of the kernels launched inside it,
    through the runtime calls on the same thread within the op's span and their correlation ids."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    kernels: dict[int, list[str]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            kernels.setdefault(e["args"].get("correlation"), []).append(e["name"])
    runtime = [e for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})]
    out: dict[str, set[str]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") == op:
            shapes = json.dumps(e["args"].get("Input Dims"), separators=(",", ":"))
            for r in runtime:
                if r["tid"] == e["tid"] and r["pid"] == e["pid"] and e["ts"] <= r["ts"] <= e["ts"] + e["dur"]:
                    out.setdefault(shapes, set()).update(kernels.get(r["args"]["correlation"], []))
    return out


def device_step(e: dict, owner: dict[int, int], spans: list[tuple[int, float, float]]) -> int | None:
    """The step a device event belongs to: that of its launch. Without a launch in the trace (launched before it
    began) none, unless the event has no correlation id at all: then the step it starts in."""
    corr = e["args"].get("correlation")
    if corr is not None:
        return owner.get(corr)
    return next((n for n, s, end in spans if s <= e["ts"] < end), None)


def host_steps(doc: dict) -> list[tuple[float, float]]:
    """(start, end) in µs of the ProfilerStep#N spans on the host (not their copies on the device timeline)."""
    return [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X"
            and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]


def device_time_by_op(doc: dict, api_ops: frozenset[str] | None = None) -> dict[tuple[str | None, str], float]:
    """(op, input shapes as compact JSON, "" without) -> µs of device work (kernels, copies, memsets) launched inside
    a ProfilerStep, from the raw events alone: each device event -> its correlation id -> the runtime or driver call
    with that id -> the ops on the same thread whose span holds the call's start. The op is the innermost of them,
    or with ``api_ops`` (names of ops that have a Python API) the outermost of them that is in ``api_ops`` (else
    the innermost); None when no op holds the call."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    spans = host_steps(doc)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and "correlation" in e.get("args", {})}
    holding = _ops_holding(events, list(launches.values()))
    out: dict[tuple[str | None, str], float] = {}
    for work in device_work(doc):
        launch = launches.get(work["args"].get("correlation"))
        if launch is None or not any(s <= launch["ts"] < end for s, end in spans):
            continue
        around = holding[id(launch)]  # outermost first
        op = around[-1] if around else None
        if api_ops is not None:
            op = next((o for o in around if o["name"] in api_ops), op)
        key = (None, "") if op is None else (op["name"], json.dumps(op["args"]["Input Dims"], separators=(",", ":"))
                                             if "Input Dims" in op.get("args", {}) else "")
        out[key] = out.get(key, 0.0) + work["dur"]
    return out


def _ops_holding(events: list[dict], launches: list[dict]) -> dict[int, list[dict]]:
    """id(launch) -> the cpu ops on its thread whose span holds its start, outermost first: one sweep per thread
    over op starts and launches in time order (an op starting at the launch's instant holds it), keeping the ops
    still open."""
    items: dict[tuple, list[tuple]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "Operator") and not str(e.get("name", "")).startswith("ProfilerStep#"):
            items.setdefault((e["pid"], e["tid"]), []).append((e["ts"], 0, -e["dur"], id(e), e))
    for e in launches:
        items.setdefault((e["pid"], e["tid"]), []).append((e["ts"], 1, 0, id(e), e))
    out: dict[int, list[dict]] = {}
    for thread in items.values():
        thread.sort(key=lambda t: t[:4])
        open_ops: list[dict] = []
        for ts, is_launch, _, _, e in thread:
            open_ops = [o for o in open_ops if o["ts"] + o["dur"] > ts]
            if is_launch:
                out[id(e)] = list(open_ops)
            else:
                open_ops.append(e)
    return out
