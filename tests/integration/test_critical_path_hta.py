"""opscope's critical path against HolisticTraceAnalysis (HTA) 0.5.0's, on HTA's own critical-path test traces
(../shared/traces/hta/critical_path), over the window each of HTA's tests analyses (``support.critical_path_hta``).

HTA runs live in its own interpreter (``$OPSCOPE_HTA_PYTHON`` or /tmp/htavenv/bin/python; skipped when absent);
``test_stored_end_to_end_output`` needs only HTA's stored overlaid output. What the two must agree on:

- the window, and that opscope's path covers it (HTA's path is the longest weighted chain inside it);
- device work both put on the path: the same work (correlation), name and time on the path, exactly (both read
  the same integer-us durations); opscope's device work on the path is always a subset of HTA's, and equal on
  alexnet and cuda_event_sync;
- where HTA alone takes device work, the host was not waiting for it: the next blocking sync call began after
  it ended (HTA zero-weights the host's gaps between top-level ops, so a device branch can outweigh the host
  branch that bound the measured end);
- the cross-stream waits on the path (HTA's from Kineto's "Stream Wait Event" records, opscope's inferred);
- the host event with the most time on the path;
- the time HTA leaves off its path (window less its length) is the host gaps and sync waits opscope puts on its
  own, within 2% (the rest is where the paths run through different work).
"""

from __future__ import annotations

import re

import pytest
from support.critical_path_hta import (
    CASES,
    hta_device_on_path,
    hta_host_on_path,
    hta_sync_edges,
    opscope_interval_path,
    overlay_critical,
    run_hta,
)
from support.hta_live import _hta_missing
from support.shared import SHARED_TRACES, raw_events, shared_trace
from support.timing import limit

IDS = [c.key for c in CASES]
BY_KEY = {c.key: c for c in CASES}
#: traces where both put the very same device work on the path
SAME_DEVICE = ("alexnet", "cuda_event_sync")
#: the blocking host calls, as the CUDA runtime documents them (not opscope's own list)
BLOCKING = re.compile(r"^cuda(Device|Stream|Event)Synchronize$|^cudaMemcpy$")

_hta: dict[str, dict] = {}
_ours: dict[str, object] = {}


def hta(key: str) -> dict:
    missing = _hta_missing()
    if missing:
        pytest.skip(missing)
    case = BY_KEY[key]
    shared_trace(case.trace)
    if key not in _hta:
        _hta[key] = run_hta(case, SHARED_TRACES, timeout=limit(120))
        assert _hta[key]["ok"], f"HTA's critical path failed on {key}"
    return _hta[key]


def ours(key: str):
    case = BY_KEY[key]
    if key not in _ours:
        _ours[key] = opscope_interval_path(shared_trace(case.trace), case.annotation, case.instance)
    return _ours[key]


def both(key: str):
    return hta(key), ours(key)


def _blocking_calls(path) -> list[tuple[int, int]]:
    """(start ns, end ns) of the trace's blocking host calls, from the JSON."""
    out = []
    for e in raw_events(path):
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and BLOCKING.match(e.get("name", "")):
            start = int(e["ts"] * 1000)
            out.append((start, start + int(e["dur"] * 1000)))
    return sorted(out)


def _not_waited_for(calls: list[tuple[int, int]], start: int, end: int) -> bool:
    """The first blocking call that began after the work began, began after it ended (or there is none)."""
    later = [c for c in calls if c[0] >= start]
    return not later or later[0][0] >= end


@pytest.mark.parametrize("key", IDS)
def test_same_window(key):
    h, o = both(key)
    lo, hi = h["window"]
    assert o.window == (lo, hi), f"HTA's window {lo}..{hi}, opscope's {o.window}"
    assert o.length == hi - lo and sum(o.parts.values()) == o.length
    assert 0 < h["length"] <= hi - lo
    assert lo <= h["first"]["ts"] <= h["last"]["ts"]


@pytest.mark.parametrize("key", IDS)
def test_device_work_on_both_paths_agrees(key):
    h, o = both(key)
    theirs = {d[4]: d for d in hta_device_on_path(h)}
    mine = {d[4]: d for d in o.device}
    assert set(mine) <= set(theirs), f"device work on opscope's path only: {sorted(set(mine) - set(theirs))}"
    for corr in mine:
        name, _, ts, dur, _, own = mine[corr]
        assert (name, ts, dur, own) == (theirs[corr][0], theirs[corr][2], theirs[corr][3], theirs[corr][5])
    if key in SAME_DEVICE:
        assert set(mine) == set(theirs) and mine
        assert sum(d[5] for d in mine.values()) == sum(d[5] for d in theirs.values())


@pytest.mark.parametrize("key", IDS)
def test_device_work_hta_alone_takes_was_not_waited_for(key):
    h, o = both(key)
    mine = {d[4] for d in o.device}
    alone = [d for d in hta_device_on_path(h) if d[4] not in mine]
    calls = _blocking_calls(shared_trace(BY_KEY[key].trace))
    waited = [d[0] for d in alone if not _not_waited_for(calls, d[2], d[2] + d[3])]
    assert not waited, f"HTA alone puts device work the host waited for on its path: {waited}"
    if key in ("simple_add", "end_to_end/simple_add"):  # the last forward's kernels: ended before the host synced
        assert alone


@pytest.mark.parametrize("key", IDS)
def test_cross_stream_waits_agree(key):
    h, o = both(key)
    theirs = {e for e in hta_sync_edges(h) if e[2] == "gpu"}
    mine = {e for e in o.sync_edges if e[2] == "gpu"}
    assert mine == theirs
    if key == "alexnet":  # HTA's own test checks this edge: fft2d_c2r (stream 20) -> elementwise (stream 7)
        assert (5606, 5629, "gpu") in mine


@pytest.mark.parametrize("key", IDS)
def test_top_host_event_agrees(key):
    h, o = both(key)
    theirs = max(hta_host_on_path(h).items(), key=lambda i: i[1])
    named = {n: v for n, v in o.host.items() if not n.startswith("(") and not n.startswith(("[param", "Profiler"))}
    mine = max(named.items(), key=lambda i: i[1])
    assert mine == theirs  # a runtime call or an op without children: its whole duration, on both paths


@pytest.mark.parametrize("key", IDS)
def test_time_hta_leaves_off_is_gaps_and_waits(key):
    h, o = both(key)
    lo, hi = h["window"]
    left_off = hi - lo - h["length"]
    gaps = o.parts["host gap"] + o.parts["sync wait"]
    assert abs(left_off - gaps) <= 0.02 * left_off, f"HTA leaves {left_off} ns off its path; opscope's gaps and " \
                                                    f"waits: {gaps} ns"


def test_stored_end_to_end_output():
    """HTA's stored end-to-end output (the whole simple_add trace; written by a later HTA than 0.5.0): every host
    event it marks critical is on opscope's path; opscope's device work on the path is all marked critical; the
    device work it marks that opscope leaves off was not waited for."""
    case = BY_KEY["end_to_end/simple_add"]
    stored = {tuple(x) for x in overlay_critical(shared_trace(case.overlay))}
    o = ours(case.key)
    events = {(name, ts): kind for kind, name, ts in o.events}
    device = {(d[0], d[2]): d for d in o.device}
    cats = {}
    for e in raw_events(shared_trace(case.overlay)):
        if e.get("ph") == "X" and (e.get("args") or {}).get("critical"):
            cats[(e["name"], int(e["ts"] * 1000))] = (e.get("cat"), int(e["dur"] * 1000))
    assert set(cats) == stored
    host = {x for x in stored if cats[x][0] in ("cpu_op", "cuda_runtime")}
    assert host and host <= set(events), f"HTA's critical host events off opscope's path: {sorted(host - set(events))}"
    assert device and set(device) <= stored
    calls = _blocking_calls(shared_trace(case.trace))
    alone = stored - set(events)
    assert alone  # the last forward's 6 device items (see the docs)
    assert all(cats[x][0] in ("kernel", "gpu_memcpy", "gpu_memset") for x in alone)
    assert all(_not_waited_for(calls, x[1], x[1] + cats[x][1]) for x in alone)
