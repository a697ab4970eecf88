"""Device event -> launch -> op links, the order-based fallback, and the per-op GPU table, checked by hand."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from support import make_trace, row
from support.links import US, _described
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.links import launch_rows, link_table
from opscope.analyses.ops import gpu_op_table
from opscope.ingest import open_trace


def _without_correlation(events: list[dict]) -> list[dict]:
    out = []
    for e in events:
        e = dict(e)
        if "args" in e:
            e["args"] = {k: v for k, v in e["args"].items() if k != "correlation"}
        out.append(e)
    return out


def test_fixture_links_by_hand(tmp_path):
    events = small_gpu_trace() + [x("## forward ##", 90, 320, cat="user_annotation")]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    links = _described(trace, link_table(trace))
    # conv_kernel corr 1: launched at 120 us inside aten::convolution inside aten::conv2d, inside the
    # "## forward ##" annotation (ProfilerStep#1 is a step, not an annotation).
    assert links[("conv_kernel", 150 * US)] == (("cudaLaunchKernel", 120 * US), "aten::convolution",
                                               "aten::conv2d", "## forward ##", False)
    assert links[("conv_kernel", 1200 * US)] == (("cudaLaunchKernel", 1110 * US), "aten::conv2d", "aten::conv2d",
                                                None, False)
    # relu_kernel's launch (1400 us) is in no op.
    assert links[("relu_kernel", 2950 * US)] == (("cudaLaunchKernel", 1400 * US), None, None, None, False)
    assert link_table(trace).column_names == ["device_row", "launch_row", "op_row", "op_name", "top_op_name",
                                              "annotation", "link_inferred"]


def test_fixture_without_correlation_ids_infers_the_same_links(tmp_path):
    true = open_trace(write_trace(tmp_path / "a.json", small_gpu_trace()), use_cache=False)
    bare = open_trace(write_trace(tmp_path / "b.json", _without_correlation(small_gpu_trace())), use_cache=False)
    expected = {k: v[:4] for k, v in _described(true, link_table(true)).items()}
    inferred = _described(bare, link_table(bare))
    assert {k: v[:4] for k, v in inferred.items()} == expected
    assert all(v[4] for v in inferred.values())


def test_order_fallback_skips_work_launched_before_the_trace(tmp_path):
    events = [
        x("kernel_a", 5, 3, cat="kernel", pid=0, tid=7, device=0, stream=7),  # its launch is not in the trace
        x("cudaLaunchKernel", 10, 2, cat="cuda_runtime"), x("cudaMemcpyAsync", 15, 2, cat="cuda_runtime"),
        x("cudaLaunchKernel", 20, 2, cat="cuda_runtime"),
        x("cudaStreamSynchronize", 22, 30, cat="cuda_runtime"),  # not a launch
        x("kernel_b", 30, 5, cat="kernel", pid=0, tid=7, device=0, stream=7),
        x("Memcpy HtoD (Pageable -> Device)", 33, 4, cat="gpu_memcpy", pid=0, tid=7, device=0, stream=7),
        x("kernel_c", 40, 5, cat="kernel", pid=0, tid=7, device=0, stream=7),
    ]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    links = {k: v[0] for k, v in _described(trace, link_table(trace)).items()}
    assert links == {("kernel_a", 5 * US): None, ("kernel_b", 30 * US): ("cudaLaunchKernel", 10 * US),
                     ("Memcpy HtoD (Pageable -> Device)", 33 * US): ("cudaMemcpyAsync", 15 * US),
                     ("kernel_c", 40 * US): ("cudaLaunchKernel", 20 * US)}


def test_order_fallback_pairs_per_stream_when_launches_name_their_stream():
    # Launch 0 -> stream 1 (busy: its kernel starts late), launch 1 -> stream 2 (starts at once).
    # In time order the stream-2 kernel comes first; per stream, each pairs with its own launch.
    kind = pa.array(["runtime", "runtime", "kernel", "kernel"]).dictionary_encode()
    events = pa.table({
        "kind": kind,
        "name": pa.array(["cudaLaunchKernel", "cudaLaunchKernel", "k2", "k1"]).dictionary_encode(),
        "ts_ns": pa.array([0, 10, 20, 500], pa.int64()),
        "device": pa.array([0, 0, 0, 0], pa.int64()),
        "stream": pa.array([1, 2, 2, 1], pa.int64()),
        "correlation": pa.nulls(4, pa.int64()),
        "parent": pa.nulls(4, pa.int64()),
    })
    launch, inferred = launch_rows(events, pa.array([2, 3], pa.int64()))
    assert launch.to_pylist() == [1, 0] and inferred.to_pylist() == [True, True]


def test_ops_gpu_by_hand(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    rows = {r["name"]: r for r in gpu_op_table(trace).to_pylist()}
    # conv2d: both kernels (200 us through aten::convolution, 60 us directly) over 300 + 200 us of CPU.
    assert rows["aten::conv2d"] == {"name": "aten::conv2d", "python_api": "torch.nn.functional.conv2d", "calls": 2,
                                    "cpu_ns": 500 * US, "kernels": 2, "gpu_ns": 260 * US,
                                    "gpu_cpu_ratio": 0.52, "top_kernels": "conv_kernel (100%)"}
    assert (rows["aten::convolution"]["kernels"], rows["aten::convolution"]["gpu_ns"],
            rows["aten::convolution"]["cpu_ns"]) == (1, 200 * US, 280 * US)
    assert rows["aten::convolution"]["gpu_cpu_ratio"] == round(200 / 280, 3)
    assert "aten::relu" not in rows  # launched nothing
    assert list(rows) == ["aten::conv2d", "aten::convolution"]  # by gpu_ns
    by_shape = {r["shapes"]: r["gpu_ns"] for r in gpu_op_table(trace, by=("name", "shapes")).to_pylist()
                if r["name"] == "aten::conv2d"}
    assert by_shape == {"[[8,3,32,32],[16,3,3,3]]": 200 * US, "[[8,3,64,64],[16,3,3,3]]": 60 * US}


def test_ops_gpu_counts_a_kernel_once_per_op_when_ops_of_a_name_nest():
    events = [
        row("cpu_op", "aten::to", 0, 100), row("cpu_op", "aten::_to_copy", 5, 90), row("cpu_op", "aten::to", 10, 40),
        row("cpu_op", "aten::empty", 60, 5),
        row("runtime", "cudaMemcpyAsync", 20, 5, correlation=9),
        row("runtime", "cudaLaunchKernel", 70, 5, correlation=10),
        row("memcpy", "Memcpy HtoD (Pageable -> Device)", 30, 30, pid=0, tid=7, device=0, stream=7, correlation=9),
        row("kernel", "copy_kernel", 80, 10, pid=0, tid=7, device=0, stream=7, correlation=10),
    ]
    trace = make_trace(events)
    rows = {r["name"]: r for r in gpu_op_table(trace).to_pylist()}
    # Both device events lie under the outer aten::to; the memcpy under the inner one as well: once each.
    assert (rows["aten::to"]["calls"], rows["aten::to"]["cpu_ns"]) == (2, 140 * US)
    assert (rows["aten::to"]["kernels"], rows["aten::to"]["gpu_ns"]) == (2, 40 * US)
    assert rows["aten::to"]["top_kernels"] == "Memcpy HtoD (Pageable -> Device) (75%), copy_kernel (25%)"
    assert (rows["aten::_to_copy"]["kernels"], rows["aten::_to_copy"]["gpu_ns"]) == (2, 40 * US)


@pytest.mark.parametrize("seed", range(6))
def test_the_ops_above_launches_and_the_first_marked_rows(seed, monkeypatch):
    """What the roofline climbs: every op at or above some launch (:func:`links.ops_above`) against each launch's
    own :func:`links.op_ancestors`; and the innermost row of two marks above each launch (``climb_marks``), in C
    (where built) and in Arrow, against the walk by hand."""
    from opscope.analyses import arrays, links

    rng = random.Random(seed)
    n = rng.randint(1, 400)
    parent = [None if i == 0 or rng.random() < 0.2 else rng.randrange(0, i) for i in range(n)]
    kind = [rng.choice(["cpu_op", "user_annotation", "runtime"]) for _ in range(n)]
    events = pa.table({"kind": pa.array(kind).dictionary_encode(), "parent": pa.array(parent, pa.int64())})
    launch = pa.array([rng.choice([None, rng.randrange(0, n)]) for _ in range(150)], pa.int64())
    is_op = pa.array([k == "cpu_op" for k in kind])
    _, pairs = links.op_ancestors(events, launch, ("cpu_op",))
    assert sorted(links.ops_above(events["parent"], is_op, launch).to_pylist()) == sorted(set(pairs.to_pylist()))
    picked = pa.array([rng.random() < 0.3 for _ in range(n)])
    got = [a.to_pylist() for a in links.climb_marks(events["parent"], picked, is_op, launch)]
    if arrays.native_loops() is not None:  # the C walk was taken: the Arrow walk too gives the same
        monkeypatch.setenv("OPSCOPE_NATIVE", "0")
        assert got == [a.to_pylist() for a in links.climb_marks(events["parent"], picked, is_op, launch)]
    for q, start in enumerate(launch.to_pylist()):
        chain, c = [], start
        while c is not None:
            chain.append(c)
            c = parent[c]
        first = [r for r in chain if picked[r].as_py()]
        ops = [r for r in chain if kind[r] == "cpu_op"]
        assert (got[0][q], got[2][q]) == (first[0] if first else None, ops[0] if ops else None)
