"""Device event -> launch -> op links, the order-based fallback, and `ops --gpu`, checked by hand and
against the correlation ids of real traces read straight from their raw JSON."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal

import pyarrow as pa
import pytest
from support import make_trace, row
from support.shared import shared_trace
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.links import launch_rows, link_table
from opscope.analyses.ops import gpu_op_table
from opscope.ingest import open_trace

US = 1000
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"}


def _described(trace, table):
    """Link rows as (device name, device ts) -> (launch name/ts, op, top op, annotation, inferred)."""
    events = trace.events.select(["name", "ts_ns"]).to_pylist()

    def at(row):
        return None if row is None else (events[row]["name"], events[row]["ts_ns"])

    return {at(r["device_row"]): (at(r["launch_row"]), r["op_name"], r["top_op_name"], r["annotation"],
                                  r["link_inferred"]) for r in table.to_pylist()}


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


def _raw_events(path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        doc = json.loads(fh.read(), parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _ns(value) -> int:
    return int((Decimal(value) * 1000).to_integral_value())


def _expected_from_raw(path, correlation_key="correlation"):
    """(device name, ts) -> (launch name, ts, innermost cpu_op, outermost cpu_op) from the raw JSON alone."""
    raw = [e for e in _raw_events(path) if e.get("ph") == "X"]
    runtime = {e["args"][correlation_key]: e for e in raw if str(e.get("cat", "")).lower() in RUNTIME_CATS
               and correlation_key in e.get("args", {})}
    ops_by_thread: dict = {}
    for e in raw:
        if e.get("cat") == "cpu_op":
            ops_by_thread.setdefault((e["pid"], e["tid"]), []).append((_ns(e["ts"]), _ns(e["dur"]), e["name"]))
    expected = {}
    for e in raw:
        if str(e.get("cat", "")).lower() not in DEVICE_CATS:
            continue
        launch = runtime.get(e.get("args", {}).get(correlation_key))
        if launch is None:
            continue
        ts = _ns(launch["ts"])
        around = sorted(((s, -d, n) for s, d, n in ops_by_thread.get((launch["pid"], launch["tid"]), [])
                         if s <= ts < s + d))
        key = (e["name"], _ns(e["ts"]))
        assert key not in expected, "device events are told apart by name and start"
        expected[key] = ((launch["name"], ts), around[-1][2] if around else None, around[0][2] if around else None)
    return expected


REAL_LINKED = [
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz",  # one hipGraphLaunch, 421 kernels
]


@pytest.mark.parametrize("relative", REAL_LINKED)
def test_links_equal_correlation_pairs_of_the_raw_json(relative):
    path = shared_trace(relative)
    expected = _expected_from_raw(path)
    trace = open_trace(path, use_cache=False)
    ours = {k: v[:3] for k, v in _described(trace, link_table(trace)).items() if v[0] is not None}
    assert ours == expected
    assert not any(v[4] for v in _described(trace, link_table(trace)).values())
    if "graph" in relative:
        launches = [v[0][0] for v in ours.values()]
        assert launches.count("hipGraphLaunch") > 400, "every kernel of the graph links to its one launch"


def test_order_fallback_on_a_real_trace_without_correlation_ids(tmp_path):
    # A real single-stream trace with its correlation ids renamed: pairing by order must find them again.
    path = shared_trace("tracelens/traces/b200/eager_trace.json.gz")
    text = gzip.decompress(path.read_bytes()).decode()
    bare = tmp_path / "bare.json"
    bare.write_text(re.sub(r'"correlation"(\s*):', r'"true_correlation"\1:', text))
    expected = _expected_from_raw(path)
    assert len(expected) > 900
    trace = open_trace(bare, use_cache=False)
    ours = _described(trace, link_table(trace))
    assert {k: v[:3] for k, v in ours.items()} == expected
    assert all(v[4] for v in ours.values())


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


def test_cli_ops_gpu_and_kernels_full_names(tmp_path):
    import os
    import subprocess
    import sys

    path = write_trace(tmp_path / "t.json", small_gpu_trace())

    def run(*args):
        return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                              env=dict(os.environ), timeout=120)

    res = run("ops", str(path), "--gpu", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["name"], r["kernels"], r["gpu_ns"], r["cpu_ns"]) for r in rows] == [
        ("aten::conv2d", 2, 260 * US, 500 * US), ("aten::convolution", 1, 200 * US, 280 * US)]
    res = run("ops", str(path), "--gpu", "--by", "name,shapes", "--sort", "-gpu_ns", "--format", "csv")
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("name,shapes,python_api,calls,cpu_ns")
    res = run("ops", str(path), "--gpu", "--sort", "nope")
    assert res.returncode == 2 and "cannot sort by" in res.stderr and "Traceback" not in res.stderr
    res = run("kernels", str(path), "--full-names", "--by-op", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert {(r["op"], r["name"]) for r in json.loads(res.stdout)} == {
        ("aten::convolution", "conv_kernel"), ("aten::conv2d", "conv_kernel"), ("(no launching op)", "relu_kernel")}


def test_cached_trace_gives_the_same_links_and_tables():
    from opscope.analyses.kernels import kernel_table

    path = shared_trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    fresh = open_trace(path, use_cache=False)
    open_trace(path)  # writes the cache
    cached = open_trace(path)
    assert cached.metadata.get("from_cache")
    assert link_table(cached).equals(link_table(fresh))
    assert gpu_op_table(cached).equals(gpu_op_table(fresh))
    assert kernel_table(cached, names="short", by_op=True).equals(kernel_table(fresh, names="short", by_op=True))
