"""Real traces from ../shared/traces: kernel totals against sums computed straight from the raw JSON."""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal

import pytest
from support.shared import DEVICE_CATEGORIES, raw_events, shared_trace

from opscope.analyses.gpu import step_device_table
from opscope.analyses.kernels import kernel_table
from opscope.analyses.steps import step_table
from opscope.ingest import open_trace

GPU_TRACES = [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz",
    "kineto/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto/traces/before_fix_trace.json",
]

def expected_device_totals(path):
    """(name, family) -> [calls, total ns], computed with exact decimals from the raw events."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in raw_events(path):
        family = DEVICE_CATEGORIES.get(str(e.get("cat", "")).lower())
        if e.get("ph") != "X" or family is None:
            continue
        row = totals[(e["name"], family)]
        row[0] += 1
        row[1] += int((Decimal(e["dur"]) * 1000).to_integral_value())
    return totals


@pytest.mark.parametrize("relative", GPU_TRACES)
def test_kernel_totals_equal_raw_json(relative):
    path = shared_trace(relative)
    expected = expected_device_totals(path)
    table = kernel_table(open_trace(path, use_cache=False))
    ours: dict[tuple[str, str], list[int]] = {}
    for r in table.to_pylist():
        family = "kernel" if r["kind"] in ("kernel", "comm") else r["kind"]
        ours[(r["name"], family)] = [r["calls"], r["total_ns"]]
    assert ours == dict(expected.items())
    assert expected, "these traces all hold device work"


def test_comm_kernels_are_kind_comm():
    path = shared_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    table = kernel_table(open_trace(path, use_cache=False))
    kinds = {r["name"]: r["kind"] for r in table.to_pylist()}
    nccl = [n for n in kinds if "nccl" in n.lower()]
    assert nccl and all(kinds[n] == "comm" for n in nccl)
    assert all(k == "kernel" for n, k in kinds.items() if "nccl" not in n.lower() and "memcpy" not in n.lower()
               and "memset" not in n.lower())


def test_steps_equal_profiler_step_annotations():
    path = shared_trace("hta/df_index_resolver/df_index_resolver.json.gz")
    expected = {}
    for e in raw_events(path):
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"):
            expected[int(e["name"].split("#")[1])] = int(Decimal(e["dur"]) * 1000)
    table = step_table(open_trace(path, use_cache=False))
    assert dict(zip(table["step"].to_pylist(), table["dur_ns"].to_pylist())) == expected
    busy = table["launched_gpu_ns"].to_pylist()
    assert all(b is not None and b > 0 for b in busy)


def test_ns_resolution_timestamps_are_exact():
    path = shared_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    raw = [e for e in raw_events(path) if e.get("ph") == "X"]
    first = min(raw, key=lambda e: e["ts"])
    trace = open_trace(path, use_cache=False)
    import pyarrow.compute as pc

    assert pc.min(trace.events["ts_ns"]).as_py() == int(first["ts"] * 1000)


def test_legacy_schema_kinds_and_streams():
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    trace = open_trace(path, use_cache=False)
    kinds = set(trace.events["kind"].cast("string").to_pylist())
    assert {"cpu_op", "runtime", "kernel", "memcpy", "memset"} <= kinds
    streams = set(kernel_table(trace)["streams"].to_pylist())
    assert streams == {"7"}
    # Legacy "[memory]" instant events without a category land in the memory table.
    assert trace.memory.num_rows == sum(1 for e in raw_events(path) if e.get("name") == "[memory]")


@pytest.mark.parametrize("relative", [
    "tf-timeline/roastduck-pendulum/timeline.ctf.json",
    "generated/tf_keras_cpu_trace_viewer.json",
    "generated/torch_cpu_mobilenetv2_train.json",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "tracelens/traces/b200/eager_trace.json.gz",
])
def test_other_chrome_traces_read(relative):
    path = shared_trace(relative)
    trace = open_trace(path, use_cache=False)
    raw = raw_events(path)
    # TF timelines file each device record twice, on its stream and under stream:all/memcpy: the copy counts once
    aggregates = {e["pid"] for e in raw if e.get("ph") == "M" and re.search(r"/(stream:all|memcpy) Compute$",
                                                                            str(e.get("args", {}).get("name")))}
    n_slices = sum(1 for e in raw if e.get("ph") == "X" and e.get("pid") not in aggregates)
    assert trace.events.num_rows >= n_slices


@pytest.mark.parametrize("relative", [
    "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # 1 step: launched 68%, inside 92%
    "hta/trace_diff/test/test.json.gz",  # launched work reached 144% of a step
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # and 269%
])
def test_step_busy_is_the_device_timeline_inside_each_step(relative):
    """gpu_busy_ns equals the union of the raw device intervals clipped to each step, from the raw JSON with exact
    decimals; so it never exceeds the step."""
    path = shared_trace(relative)
    raw = raw_events(path)
    steps = {int(e["name"].split("#")[1]): (int(Decimal(e["ts"]) * 1000), int((Decimal(e["ts"]) + Decimal(e["dur"]))
                                                                           * 1000))
             for e in raw if e.get("ph") == "X" and e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")}  # the host's step, not its GPU-side copy
    device = sorted((int(Decimal(e["ts"]) * 1000), int((Decimal(e["ts"]) + Decimal(e["dur"])) * 1000))
                    for e in raw if e.get("ph") == "X" and str(e.get("cat", "")).lower() in DEVICE_CATEGORIES)
    table = step_device_table(open_trace(path, use_cache=False)).to_pylist()
    for row in table:
        lo, hi = steps[row["step"]]
        covered, reach = 0, lo
        for s, e in device:  # sorted by start: a running union clipped to [lo, hi)
            s, e = max(s, reach), min(e, hi)
            if e > s:
                covered += e - s
                reach = e
        assert row["gpu_busy_ns"] == covered, row
        assert 0 <= row["gpu_busy_pct"] <= 100
