"""Links against the correlation ids of real traces read straight from their raw JSON, cached traces, and
`ops --gpu` / `kernels` through the CLI."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal

import pytest
from support.links import US, _described
from support.shared import shared_trace
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

from opscope.analyses.links import link_table
from opscope.analyses.ops import gpu_op_table
from opscope.ingest import open_trace

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"}


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


def test_cli_ops_gpu_and_kernels_full_names(tmp_path):
    import os
    import subprocess
    import sys

    path = write_trace(tmp_path / "t.json", small_gpu_trace())

    def run(*args):
        return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                              env=dict(os.environ), timeout=limit(120))

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
