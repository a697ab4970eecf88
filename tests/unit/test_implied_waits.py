"""The cross-stream waits that cudaStreamWaitEvent calls imply (stream_waits.implied_waits): by hand, and its C search
(``_loops.implied_waits``) against the Arrow definition on random and real timelines."""

from __future__ import annotations

import random

import pytest
from support import make_trace, row
from support.shared import shared_trace

from opscope.analyses import arrays, stream_waits
from opscope.analyses.stream_waits import implied_waits
from opscope.ingest import open_trace

needs_c = pytest.mark.skipif(arrays.native_loops() is None, reason="opscope's C loops are not built here")


def _both_ways(trace, cap_ns, monkeypatch):
    """implied_waits by the C search (each late work trying each stream; then by the sweep per device) and by the
    definition (each stream tried, in Python; not memoized: each computes); the Python sweep checked against the
    definition on the way."""
    monkeypatch.setenv("OPSCOPE_NATIVE", "1")
    monkeypatch.setattr(stream_waits, "_TRIES_A_ROW", 10 ** 9)
    tried = implied_waits.fn(trace, cap_ns)
    monkeypatch.setattr(stream_waits, "_TRIES_A_ROW", 0)
    swept = implied_waits.fn(trace, cap_ns)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    swept_here = implied_waits.fn(trace, cap_ns)
    monkeypatch.setattr(stream_waits, "_TRIES_A_ROW", 10 ** 9)
    defined = implied_waits.fn(trace, cap_ns)
    assert swept == tried and swept_here == defined
    return tried, defined


def _in_python(trace, cap_ns, monkeypatch):
    """implied_waits without the C search: by the sweep per device, and by trying each stream (the definition)."""
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    monkeypatch.setattr(stream_waits, "_TRIES_A_ROW", 0)
    swept = implied_waits.fn(trace, cap_ns)
    monkeypatch.setattr(stream_waits, "_TRIES_A_ROW", 10 ** 9)
    return swept, implied_waits.fn(trace, cap_ns)


def _names(trace, pairs):
    names = trace.select(["name"])["name"].to_pylist()
    return [(names[a], names[b]) for a, b in pairs]


def _timeline(b_ends_at: float):
    # one thread: launch a on stream 7 (runs 2-12), launch b on stream 8 (runs 5 to b_ends_at), wait on an event at
    # 6, launch c on stream 7 (launch ends at 10); c starts at 41: held by its launch (10) and a (12), so 29 us late
    return make_trace([
        row("runtime", "cudaLaunchKernel", 0, 2, correlation=1, pid=1, tid=1),
        row("runtime", "cudaLaunchKernel", 3, 2, correlation=2, pid=1, tid=1),
        row("runtime", "cudaStreamWaitEvent", 6, 1, correlation=3, pid=1, tid=1),
        row("runtime", "cudaLaunchKernel", 8, 2, correlation=4, pid=1, tid=1),
        row("kernel", "a", 2, 10, correlation=1, device=0, stream=7),
        row("kernel", "b", 5, b_ends_at - 5, correlation=2, device=0, stream=8),
        row("kernel", "c", 41, 5, correlation=4, device=0, stream=7),
    ])


@pytest.mark.parametrize("native", ["1", "0"])
def test_late_work_after_a_wait_call_waited_for_the_other_streams_work_that_ended_just_before(native, monkeypatch):
    monkeypatch.setenv("OPSCOPE_NATIVE", native)
    trace = _timeline(b_ends_at=40)
    # b (stream 8, launched before the call) ended at 40, after what held c (12) and before c started (41)
    assert _names(trace, implied_waits.fn(trace, 10_000)) == [("c", "b")]
    assert implied_waits.fn(trace, 30_000) == []  # 29 us late: within a 30 us cap
    trace = _timeline(b_ends_at=45)  # b ended after c started: not what held it
    assert implied_waits.fn(trace, 10_000) == []


@needs_c
def test_the_c_search_declines_times_beyond_its_range():
    # (the model drops events past 73 years, 2^61 ns: the C search never meets such times through a trace)
    from array import array

    def search(offset: int, budget: int):
        # rows: 0 the wait call, 1 the launch, 2 its work, 3 the other stream's work, 4 its launch
        ts = array("q", [t * 1000 + offset for t in (6, 8, 41, 5, 3)])
        dur = array("q", [1000, 2000, 5000, 35000, 2000])

        def q(*values: int) -> array:
            return array("q", values)

        return arrays.native_loops().implied_waits(q(0), q(0), q(2, 3), q(1, 4), q(0, 0), q(0, 0), q(0, 1), ts, dur,
                                                   1, 2, 10_000, budget)

    for budget in (0, 100):  # the sweep per device, the tries per stream
        assert array("q", search(0, budget)).tolist() == [2, 3]  # 2 started 31 us after its launch ended, 1 after 3
        assert search(2 ** 61, budget) is None


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_the_sweep_per_device_finds_what_trying_each_stream_finds(seed):
    # up to 300 streams over three devices, many late works: the two C searches on the same inputs
    from array import array

    rng = random.Random(seed)
    n, n_streams = rng.randint(50, 2000), rng.randint(1, 300)
    device_of = [rng.randint(0, 2) for _ in range(n_streams)]
    ts, dur, calls, work, launch, device, stream = [], [], [], [], [], [], []
    for j in range(n):
        calls.append(len(ts))
        ts.append(10 * j + rng.randint(0, 3))
        dur.append(1)
        launch.append(len(ts))
        ts.append(10 * j + 2)
        dur.append(rng.randint(0, 2))
        work.append(len(ts))
        ts.append(10 * j + 3 + rng.choice([0, 10, 500, 200_000, 300_000]))
        dur.append(rng.choice([0, 5, 100_000, 250_000]))
        stream.append(rng.randrange(n_streams))
        device.append(device_of[stream[-1]])
    number = {s: k for k, s in enumerate(sorted(set(stream)))}

    def q(values) -> array:
        return array("q", values)

    args = (q(calls), q([0] * n), q(work), q(launch), q([0] * n), q(device), q(number[s] for s in stream), q(ts),
            q(dur), 1, len(number), 50)
    swept, tried = (arrays.native_loops().implied_waits(*args, budget) for budget in (0, 10 ** 15))
    assert swept == tried and len(tried) > 0


def _random_trace(seed: int):
    """Threads that launch work on a few streams of two devices and call cudaStreamWaitEvent between launches, with
    ties (equal starts, equal ends), work that starts long after its launch, and work that starts at once; every
    third timeline spreads its work over 40 streams."""
    rng = random.Random(seed)
    streams = [7, 8, 9, 9] if seed % 3 else list(range(40))
    rows, correlation, launched = [], 0, []
    for thread in range(rng.randint(1, 3)):
        pid, tid = rng.choice([(1, thread), (2, thread), ("p", f"t{thread}")])
        t = rng.randint(0, 5)
        for _ in range(rng.randint(2, 25)):
            correlation += 1
            call = rng.choice(["cudaLaunchKernel", "cudaLaunchKernel", "cudaStreamWaitEvent", "hipStreamWaitEvent",
                               "cudaMemcpyAsync"])
            length = rng.choice([0, 1, 2, 3])
            rows.append(row("runtime", call, t, length, pid=pid, tid=tid, correlation=correlation))
            if "Wait" not in call:
                launched.append((correlation, t + length, call))
            t += length + rng.choice([0, 0, 1, 4])
    for correlation, ready, call in launched:
        if rng.random() < 0.1:
            continue  # a launch whose work the trace lost
        kind = "memcpy" if call == "cudaMemcpyAsync" else rng.choice(["kernel", "kernel", "memset"])
        start = ready + rng.choice([0, 0, 1, 3, 30, 60, 120])
        rows.append(row(kind, rng.choice(["k", "gemm"]), start, rng.choice([0, 1, 5, 20, 40]),
                        correlation=correlation, device=rng.choice([0, 0, 1]), stream=rng.choice(streams)))
    return make_trace(rows)


@needs_c
@pytest.mark.parametrize("seed", range(60))
def test_random_timelines_give_the_same_waits_in_c(seed, monkeypatch):
    trace = _random_trace(seed)
    for cap_ns in (0, 2_000, 50_000):
        in_c, defined = _both_ways(trace, cap_ns, monkeypatch)
        assert in_c == defined


@pytest.mark.parametrize("seed", range(60))
def test_the_python_sweep_finds_what_trying_each_stream_finds(seed, monkeypatch):
    # without the C search (no compiler, OPSCOPE_NATIVE=0) thousands of streams and of wait calls would cost their
    # product: past the budget a sweep per device answers, the same pairs as the definition
    trace = _random_trace(seed)
    for cap_ns in (0, 2_000, 50_000):
        swept, defined = _in_python(trace, cap_ns, monkeypatch)
        assert swept == defined


def test_the_python_sweep_on_many_streams_finds_what_trying_each_stream_finds(monkeypatch):
    # 600 launches on up to 250 streams of two devices, a wait call before each: ties in ends and starts, work held
    # long after its launch; the sweep's tree is many levels deep
    rng = random.Random(7)
    rows, t = [], 0
    for k in range(600):
        rows.append(row("runtime", "cudaStreamWaitEvent", t, 1, correlation=10_000 + k, pid=1, tid=1))
        rows.append(row("runtime", "cudaLaunchKernel", t + 1, 1, correlation=k, pid=1, tid=1))
        start = t + 2 + rng.choice([0, 0, 5, 60, 400])
        rows.append(row("kernel", "k", start, rng.choice([1, 5, 50, 300]), correlation=k,
                        device=rng.choice([0, 1]), stream=rng.randrange(250)))
        t += rng.choice([1, 2, 3])
    trace = make_trace(rows)
    for cap_ns in (0, 20_000):
        swept, defined = _in_python(trace, cap_ns, monkeypatch)
        assert swept == defined
    assert defined  # the case finds waits


def test_random_timelines_find_waits():
    # the random timelines above are not vacuous: over the seeds, the definition finds waits, at every cap
    found = [len(implied_waits.fn(_random_trace(seed), cap)) for seed in range(60) for cap in (0, 50_000)]
    assert sum(found) > 20 and sum(1 for n in found if n) > 10


@needs_c
@pytest.mark.parametrize("relative", [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "kineto/samples/resnet50_autograd_api_num_workers_4/worker0.pt.trace.json.gz",
])
def test_real_traces_give_the_same_waits_in_c(relative, monkeypatch):
    trace = open_trace(shared_trace(relative), use_cache=False)
    in_c, defined = _both_ways(trace, 50_000, monkeypatch)
    assert in_c == defined and in_c  # each of these traces implies some
