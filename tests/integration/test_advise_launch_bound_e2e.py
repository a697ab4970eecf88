"""launch-bound rule on a real eager trace and a graph trace, and its --explain."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.advise.context import AdviceContext
from opscope.cli import app
from opscope.ingest import open_trace


def singly_launched(doc: dict, owner: dict[int, int] | None = None) -> list[tuple[float, float]]:
    """(kernel dur, launch-call dur) of kernels that are the only kernel of their correlation id (with ``owner``,
    correlation -> step, only those launched inside a step)."""
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    count = Counter(e["args"].get("correlation") for e in kernels)
    calls: dict[int, float] = {}  # runtime or driver launch call (cudaLaunchKernel, cuLaunchKernelEx...)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") \
                and "correlation" in e["args"]:
            c = e["args"]["correlation"]
            calls[c] = max(calls.get(c, 0), e["dur"])
    return [(e["dur"], calls[c]) for e in kernels if count[(c := e["args"].get("correlation"))] == 1 and c in calls
            and (owner is None or c in owner)]


def test_eager_trace_is_launch_bound_and_the_saving_is_its_launch_time():
    path = shared_trace("tracelens/traces/b200/eager_trace.json.gz")
    pairs = singly_launched(tm.load(path))
    median_launch = statistics.median(launch for _, launch in pairs)
    launch_us = len(pairs) * median_launch  # kernels x the median launch call
    short = sum(k < launch for k, launch in pairs)
    trace = open_trace(path)
    idle = {r["cause"]: r["idle_ns"] for r in AdviceContext(trace).idle.to_pylist()}
    assert idle["host_wait"] + idle["launch_overhead"] > launch_us * 1000  # so the launch time is the bound
    f = advise(trace, only=["launch-bound"]).findings
    assert len(f) == 1
    assert f[0].estimated_ns == pytest.approx(launch_us * 1000, abs=len(pairs))  # no steps: per trace; µs floats
    assert f"{short / len(pairs):.0%} of {len(pairs)} kernels" in f[0].title
    assert "reduce-overhead" in f[0].remedy
    total = f[0].evidence[0]
    assert (total["calls_per_step"], total["shorter_than_launch"]) == (len(pairs), short)
    assert total["median_launch_ns"] == pytest.approx(median_launch * 1000, abs=1)
    assert total["median_kernel_ns"] == pytest.approx(statistics.median(k for k, _ in pairs) * 1000, abs=1)
    assert {tuple(sorted(r)) for r in f[0].evidence} == {tuple(sorted(total))}  # same keys in every row


def test_real_training_steps_per_step_figures():
    # resnet50 on a V100 (2021 Kineto): the optimizer and BN launch thousands of microsecond kernels per step
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    doc = tm.load(path)
    steps = tm.steps(doc)
    pairs = singly_launched(doc, tm.launch_steps(doc))
    launching = len(pairs) * statistics.median(launch for _, launch in pairs) * 1000
    trace = open_trace(path)
    idle = {r["cause"]: r["idle_ns"] for r in AdviceContext(trace).idle.to_pylist()}
    waiting = idle["host_wait"] + idle["launch_overhead"]
    f = advise(trace, only=["launch-bound"]).findings
    assert len(f) == 1
    assert f[0].estimated_ns == pytest.approx(min(launching, waiting) / len(steps), abs=1)
    assert f[0].evidence[0]["calls_per_step"] == pytest.approx(len(pairs) / len(steps), abs=0.01)
    assert f[0].evidence[0]["shorter_than_launch"] == sum(k < launch for k, launch in pairs)


def test_a_cuda_graph_trace_is_not_launch_bound():
    path = shared_trace("tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz")
    assert advise(open_trace(path), only=["launch-bound"]).findings == []


def test_explain():
    r = CliRunner().invoke(app, ["advise", "--explain", "launch-bound"])
    assert r.exit_code == 0 and "min(L, W)" in r.stdout and "graph" in r.stdout
