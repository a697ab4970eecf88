"""XProf XSpace files (``*.xplane.pb``) under ../shared/traces, through the CLI.

Expected values come from elsewhere than the reader: XProf's own framework op stats of the Keras run (a JSON file
XProf wrote from the same xplane), and the raw XSpace decoded here with the bare message class (summed per device
stream without opscope's mapping), checked against the survey's figures (docs/surveys/formats.md §1).
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal

from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.shared import shared_trace

from opscope.analyses.links import link_table
from opscope.ingest import open_trace
from opscope.ingest.xplane.schema import classes

KERAS = "generated/tf_keras_cpu.xplane.pb"
KERAS_STATS = "generated/tf_keras_cpu_framework_op_stats.json"
JAX = "tracelens/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb"
TF_GPU = "tf-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


def _xprof_op_stats() -> dict[str, list]:
    """Per op type: [occurrences, total self time in ns] from XProf's framework_op_stats (the table without IDLE)."""
    doc = json.loads(shared_trace(KERAS_STATS).read_text(), parse_float=Decimal)
    table = next(t for t in doc if not any(r["c"][2]["v"] == "IDLE" for r in t["rows"]))
    ids = [c["id"] for c in table["cols"]]
    out: dict[str, list] = defaultdict(lambda: [0, Decimal(0)])
    for r in table["rows"]:
        v = dict(zip(ids, (c.get("v") for c in r["c"])))
        out[v["type"]][0] += int(v["occurrences"])
        out[v["type"]][1] += v["total_self_time"] * 1000
    return dict(out)


def _stream_sums(relative: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(plane, line) -> (events, sum of durations in ns) for every device line, straight from the protobuf."""
    space = classes()["XSpace"]()
    space.ParseFromString(shared_trace(relative).read_bytes())
    return {(p.name, ln.name): (len(ln.events), sum(e.duration_ps for e in ln.events) // 1000)
            for p in space.planes if p.name.startswith("/device:") for ln in p.lines}


def test_keras_ops_equal_xprof_framework_op_stats(cache_dir):
    expected = _xprof_op_stats()
    assert sum(c for c, _ in expected.values()) == 372
    assert sum(t for _, t in expected.values()) == Decimal("109688545.000")
    res = run_cli("ops", str(shared_trace(KERAS)), "--format", "json", "--limit", "1000", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert set(rows) == set(expected)  # 34 op types, nothing else (no runtime internals, no annotations)
    for name, (calls, self_ns) in expected.items():
        assert rows[name]["calls"] == calls, name
        assert rows[name]["self_ns"] == self_ns, (name, rows[name]["self_ns"], self_ns)  # to the ns
    assert sum(r["self_ns"] for r in rows.values()) == 109_688_545
    assert rows["_FusedConv2D"]["calls"] == 6 and rows["_FusedConv2D"]["self_ns"] == 22_314_970


def test_keras_summary_and_steps(cache_dir):
    path = str(shared_trace(KERAS))
    summary, steps = run_cli_many([("summary", path, "--format", "json"), ("steps", path, "--format", "json")],
                                  cache=cache_dir)
    assert summary.returncode == 0 and steps.returncode == 0, (summary.stderr, steps.stderr)
    overview = {r["metric"]: r["value"] for r in json.loads(summary.stdout) if r["section"] == "overview"}
    assert overview["events"] == 3603 - 0  # every host event is an event (the file has no memory events)
    assert overview["steps"] == 3
    # XProf's step markers: the "train" events with step_num 0, 1, 2 on the python thread
    assert [(r["step"], r["dur_ns"]) for r in json.loads(steps.stdout)] == [
        (0, 464_180_979), (1, 41_897_697), (2, 34_638_256)]
    trace = open_trace(shared_trace(KERAS), use_cache=False)
    assert trace.metadata["tool"] == "tensorflow"
    assert trace.metadata["profile_start_time_ns"] == 1795372527714120980
    assert trace.events["ts_ns"].to_pylist()[0] > 1795372527714120980  # times count from the profile's start


def test_jax_device_events_and_links(cache_dir):
    raw = _stream_sums(JAX)
    assert sum(n for n, _ in raw.values()) == 235 and sum(t for _, t in raw.values()) == 28_137_077
    res = run_cli("kernels", str(shared_trace(JAX)), "--format", "json", "--limit", "1000", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert sum(r["calls"] for r in rows.values()) == 235
    assert sum(r["total_ns"] for r in rows.values()) == 28_137_077
    assert (rows["input_transpose_fusion.kd"]["calls"], rows["input_transpose_fusion.kd"]["total_ns"]) == \
        (40, 14_344_140)
    trace = open_trace(shared_trace(JAX), use_cache=False)
    links = link_table(trace)
    assert links.num_rows == 235
    assert links["launch_row"].null_count == 0 and not any(links["link_inferred"].to_pylist())
    names = trace.events["name"].to_pylist()
    launches = {names[r] for r in links["launch_row"].to_pylist()}
    assert launches == {"hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyDtoDAsync"} or \
        launches <= {n for n in names if n.startswith("hip")}
    props = {p["id"]: p for p in trace.metadata["device_properties"]}
    assert sorted(props) == list(range(8))
    assert props[0]["totalGlobalMem"] == 206141652992 and (props[0]["computeMajor"], props[0]["computeMinor"]) == (9, 4)
    assert trace.metadata["tool"] == "jax"
    kinds = trace.events["kind"].to_pylist()
    assert kinds.count("python") == 1353  # the "$file.py:N fn" events of JAX's Python tracer


def test_tf_gpu_kernels_are_counted_once(cache_dir):
    raw = _stream_sums(TF_GPU)
    # the derived "TensorFlow Ops" line repeats the compute stream exactly: reading both would double it
    assert raw[("/device:GPU:4", "Stream #134(Compute)")] == (665, 14_825_385)
    assert raw[("/device:GPU:4", "TensorFlow Ops")] == (665, 14_825_385)
    assert raw[("/device:GPU:6", "Stream #142(Compute)")] == (665, 14_865_363)
    path = str(shared_trace(TF_GPU))
    res = run_cli("gpu", path, "--format", "json", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    rows = {(r["device"], r["stream"]): r for r in json.loads(res.stdout)}
    assert rows[(4, 134)]["compute_ns"] == 14_825_385 and rows[(4, 134)]["events"] == 665
    assert rows[(4, None)]["compute_ns"] == 14_825_385
    trace = open_trace(shared_trace(TF_GPU), use_cache=False)
    ev = trace.select(["kind", "device"]).to_pylist()
    assert sum(1 for e in ev if e["kind"] == "kernel" and e["device"] == 4) == 665
    assert sum(1 for e in ev if e["kind"] == "kernel") == 1330
    links = link_table(trace)
    device_events = sum(n for (plane, line), (n, _) in raw.items() if line.startswith("Stream #"))
    assert links.num_rows == device_events == 1556
    assert links["launch_row"].null_count == 0  # every one matched on (correlation_id, context_id)
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    # the derived lines but Steps (read for the steps) are skipped and counted
    derived = sum(n for (plane, line), (n, _) in raw.items() if not line.startswith("Stream #") and line != "Steps")
    assert any("derived" in p and c == derived for p, c in warnings.items()), warnings
    assert trace.memory.num_rows > 0
    steps = run_cli("steps", path, "--format", "json", cache=cache_dir)
    assert steps.returncode == 0 and [r["step"] for r in json.loads(steps.stdout)] == [0]


def _hlo_instruction(relative: str, program: int, name: str):
    """One instruction of a program's HloProto in the file's /host:metadata plane, decoded with the bare message
    classes (no opscope mapping)."""
    from opscope.ingest.xplane.hlo import classes as hlo_classes

    space = classes()["XSpace"]()
    space.ParseFromString(shared_trace(relative).read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:metadata")
    proto = hlo_classes()["HloProto"]()
    proto.ParseFromString(plane.event_metadata[program].stats[0].bytes_value)
    found = {i.name: i for c in proto.hlo_module.computations for i in c.instructions}
    return found[name], found


def test_jax_roofline_models_the_convolution_from_its_hlo_proto(cache_dir):
    """The JAX MI300 run (jax_conv_minimal_08): its convolution is a cuDNN/MIOpen custom-call whose shapes are only
    in the program's HLO proto. Its FLOPs are computed here from the proto: the output size from the input, kernel
    and window by the convolution formula, then 2 x output elements x input features x kernel taps."""
    conv, found = _hlo_instruction(JAX, 15, "cudnn-conv.1")
    assert conv.custom_call_target == "__cudnn$convForward"
    by_id = {i.id: i for i in found.values()}
    lhs, rhs = (list(by_id[i].shape.dimensions) for i in conv.operand_ids)
    assert lhs == [1, 16, 32, 60, 104] and rhs == [5120, 16, 1, 2, 2]  # NC(DHW) input, OI(DHW) kernel
    window = conv.window.dimensions
    out = [(size + w.padding_low + w.padding_high - w.size) // w.stride + 1 for size, w in zip(lhs[2:], window)]
    assert out == [34, 31, 53] and list(conv.shape.tuple_shapes[0].dimensions) == [1, 5120, *out]
    expected = 2 * (lhs[0] * rhs[0] * out[0] * out[1] * out[2]) * rhs[1] * (rhs[2] * rhs[3] * rhs[4])
    assert expected == 36_609_720_320
    # one op per execution: the 40 annotations XLA wrote for the instruction (its 2 kernels per run: 80)
    space = classes()["XSpace"]()
    space.ParseFromString(shared_trace(JAX).read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    annotation = next(k for k, m in host.event_metadata.items() if m.name == "cudnn-conv.1")
    executions = sum(e.metadata_id == annotation for ln in host.lines for e in ln.events)
    assert executions == 40

    by_op, by_kernel = run_cli_many([("roofline", str(shared_trace(JAX)), "-f", "json"),
                                     ("roofline", str(shared_trace(JAX)), "--by", "kernel", "-f", "json")],
                                    cache=cache_dir)
    assert by_op.returncode == 0 and by_kernel.returncode == 0, (by_op.stderr, by_kernel.stderr)
    rows = json.loads(by_op.stdout)
    row = next(r for r in rows if r["name"] == "cudnn-conv")
    assert (row["flops"], row["calls"], row["family"], row["dtype"]) == (expected, executions, "conv", "bf16")
    # bytes: input, kernel and output once each at 2 bytes (the custom-call's u8 scratch buffer left out)
    assert row["bytes"] == 2 * (16 * 32 * 60 * 104 + 5120 * 16 * 4 + 5120 * 34 * 31 * 53)
    # its two kernels (Im3d2Col, then the GEMM) are its device time
    kernels = {r["name"]: r for r in json.loads(by_kernel.stdout)}
    assert row["device_ns"] == sum(r["device_ns"] for name, r in kernels.items() if name.startswith(("Im3d2Col",
                                                                                                   "Cijk_")))
    # the transposes XLA fused around it are memory-bound fusions: bytes read and written, no FLOPs
    transpose = next(r for r in rows if r["name"] == "input_transpose_fusion" and r["calls"] == 40)
    assert (transpose["flops"], transpose["family"]) == (0, "fusion")
    assert transpose["bytes"] == 2 * 2 * 5120 * 34 * 31 * 53
    # the MI300X recognised from the device plane's properties; every row within its roof
    assert "as MI300X by its properties" in by_op.stderr
    assert all(0 < r["pct_of_roof"] <= 100 for r in rows)
    # coverage: 97.9% of the device time; the rest is the copies of device_put, which no XLA op launched
    assert "ops with a work model hold 97.9% of the device time" in by_op.stderr
    assert "no model for: (no launching op) 2.1%" in by_op.stderr


def test_keras_cpu_xplane_records_no_shapes_and_the_roofline_says_so(cache_dir):
    """TF 2.21 at the default host_tracer_level 2 writes no op's input shapes (no ``shape`` stat in the file): the
    roofline covers 0% and says why. XProf's own op stats of the run carry no FLOPs either (every FLOP-rate column
    0), so they are no reference for the work."""
    doc = json.loads(shared_trace(KERAS_STATS).read_text())
    assert all(c.get("v") in (0, 0.0) for t in doc for r in t["rows"] for c in r["c"][13:17])
    space = classes()["XSpace"]()
    space.ParseFromString(shared_trace(KERAS).read_bytes())
    assert not any(m.name == "shape" for p in space.planes for m in p.stat_metadata.values())
    res = run_cli("roofline", str(shared_trace(KERAS)), cache=cache_dir)
    assert res.returncode == 0, res.stderr
    out = " ".join((res.stdout + res.stderr).split())
    assert "they hold 0.0% of the outermost ops' time" in out
    assert "none of the trace's 372 ops records its input shapes" in out
    summary = run_cli("summary", str(shared_trace(KERAS)), "--format", "json", cache=cache_dir)
    problems = {r["metric"]: r["value"] for r in json.loads(summary.stdout) if r["section"] == "not_mapped"}
    assert any(p.startswith("TensorFlow ops, none recorded with its input shapes") and c == 372
               for p, c in problems.items()), problems


def test_tf_gpu_roofline_models_the_ops_whose_shapes_pin_their_work(cache_dir):
    """The TF V100 xplane records its ops' input shapes (host_tracer_level 3): its elementwise ops are modelled from
    them, the work computed here from the recorded shapes (one FLOP per output element)."""
    res = run_cli("roofline", str(shared_trace(TF_GPU)), "-f", "json", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    row = next(r for r in rows if r["name"] == "GreaterEqual" and r["shapes"] == "[[4,16,384,384],[]]")
    n = 4 * 16 * 384 * 384  # x >= a scalar: one compare per element; reads x (2 bytes) and the scalar, writes bools
    assert (row["flops"], row["bytes"], row["dtype"]) == (n, 2 * n + 2 + n, "fp16")
    assert "ops with a work model hold 29.9% of the device time" in res.stderr
    # what is left: Cast (its output type is an attribute TF does not record) and RandomUniform (its shape is a
    # tensor's values)
    assert "no model for: Cast 42.2%, RandomUniform 26.2%" in res.stderr


def test_summary_ops_kernels_steps_open_every_xplane(cache_dir):
    for relative in (KERAS, JAX, TF_GPU):
        path = str(shared_trace(relative))
        results = run_cli_many([(cmd, path) for cmd in ("summary", "ops", "kernels", "steps")], cache=cache_dir)
        for res in results:
            assert res.returncode == 0, (relative, res.args, res.stderr)
            assert res.stdout.strip()


def test_a_truncated_real_xplane_keeps_its_whole_planes(tmp_path, cache_dir):
    data = shared_trace(JAX).read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) - 1000])  # inside the last large plane (/host:CPU or Task Environment)
    res = run_cli("kernels", str(cut), "--format", "json", "--limit", "1000", cache=cache_dir)
    assert res.returncode == 0, res.stderr
    assert sum(r["calls"] for r in json.loads(res.stdout)) == 235  # the device planes come before the damage
    trace = open_trace(cut, use_cache=False)
    assert any("damaged" in w["problem"] for w in trace.metadata["warnings"])


def test_a_cut_single_plane_xplane_is_one_line_error(tmp_path, cache_dir):
    data = shared_trace(KERAS).read_bytes()
    for at in (100, len(data) // 2, len(data) - 300):
        cut = tmp_path / f"cut{at}.xplane.pb"
        cut.write_bytes(data[:at])
        assert_one_line_error(run_cli("summary", str(cut), cache=cache_dir), cut, "damaged")


def test_keras_xplane_and_its_trace_viewer_json_give_the_same_ops_and_steps_span():
    """XProf wrote both files from one run: the xplane read here and the trace viewer JSON read by the Chrome reader
    give the same op table, to the ns, and the same wall time."""
    from opscope.analyses.ops import op_table

    xplane = open_trace(shared_trace(KERAS), use_cache=False)
    viewer = open_trace(shared_trace("generated/tf_keras_cpu_trace_viewer.json"), use_cache=False)
    keys = ("name", "calls", "self_ns", "total_ns")
    assert [{k: r[k] for k in keys} for r in op_table(xplane).to_pylist()] == \
        [{k: r[k] for k in keys} for r in op_table(viewer).to_pylist()]

    def span(trace):
        ends = [t + d for t, d in zip(trace.events["ts_ns"].to_pylist(), trace.events["dur_ns"].to_pylist())]
        return max(ends) - min(trace.events["ts_ns"].to_pylist())

    assert span(xplane) == span(viewer) == 540_754_423


def test_only_the_xplanes_among_the_shared_files_sniff_as_xspace():
    from support.shared import SHARED_TRACES

    from opscope.ingest.registry import read_head
    from opscope.ingest.xplane import READER

    shared_trace(KERAS)
    files = [p for p in SHARED_TRACES.rglob("*") if p.is_file()]
    taken = {str(p.relative_to(SHARED_TRACES)) for p in files if READER.sniff(p, read_head(p))}
    assert taken == {KERAS, JAX, TF_GPU}
    assert len(files) > 20
