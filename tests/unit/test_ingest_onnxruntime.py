"""The ONNX Runtime profile reader on profiles built here (ORT's own spacing) and one recorded here with onnxruntime."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc
import pytest

from opscope.analyses.links import link_table
from opscope.analyses.ops import op_table
from opscope.analyses.ort_nodes import node_times
from opscope.analyses.summary import summarize
from opscope.ingest import open_trace
from opscope.ingest.onnxruntime import READER
from opscope.ingest.registry import pick_reader


def ort_event(cat: str, name: str, ts: int, dur: int, args: dict | None = None, pid: int = 7, tid: int = 7) -> str:
    """One event as ORT's profiler writes it (``"cat" : "Node"``, ``"pid" :7``: its spacing, args values as text)."""
    body = ",".join(f'"{k}" : {v if isinstance(v, str) and v[:1] in "[{" else json.dumps(v)}'
                    for k, v in (args or {}).items())
    return (f'{{"cat" : "{cat}","pid" :{pid},"tid" :{tid},"dur" :{dur},"ts" :{ts},"ph" : "X",'
            f'"name" :"{name}","args" : {{{body}}}}}')


def _type_shapes(shapes: list, dtype: str) -> str:
    return "[" + ",".join(f'{{"{dtype}":{json.dumps(s, separators=(",", ":"))}}}' for s in shapes) + "]"


def node_args(op: str, shapes: list, dtype: str = "float", index: int = 0, outputs: list | None = None) -> dict:
    return {"op_name": op, "provider": "CPUExecutionProvider", "node_index": str(index),
            "input_type_shape": _type_shapes(shapes, dtype), "output_type_shape": _type_shapes(outputs or [[1]], dtype),
            "output_size": "4"}


def write_profile(path: Path, events: list[str]) -> Path:
    path.write_text("[\n" + ",\n".join(events) + "\n]\n")
    return path


def two_runs() -> list[str]:
    """Load, init, then two runs of conv (Conv) -> fc (Gemm); times in us, by hand."""
    ev = [ort_event("Session", "model_loading_uri", 1, 50), ort_event("Session", "session_initialization", 60, 40)]
    for run, start in enumerate((200, 400)):
        ev += [ort_event("Session", "model_run", start, 100), ort_event("Session", "SequentialExecutor::Execute",
                                                                         start + 2, 95)]
        ev.append(ort_event("Node", "conv_kernel_time", start + 10, 30 + run,
                            node_args("Conv", [[8, 3, 4, 4], [2, 3, 3, 3]], index=0, outputs=[[8, 2, 2, 2]])))
        ev.append(ort_event("Node", "fc_kernel_time", start + 50, 20 + run, node_args("Gemm", [[8, 2]], index=1)))
    return ev


def test_sniff_takes_ort_and_leaves_kineto_and_tf(tmp_path):
    ort = write_profile(tmp_path / "p.json", two_runs())
    assert READER.sniff(ort, ort.read_bytes()) and pick_reader(ort).name == "onnxruntime_json"
    # ORT's events re-written by json.dump (other spacing) are still ORT's
    redone = tmp_path / "redone.json"
    redone.write_text(json.dumps(json.loads(ort.read_text())))
    assert pick_reader(redone).name == "onnxruntime_json"
    kineto = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1}]}'
    tf = (b'{"traceEvents": [{"ph": "X", "cat": "Op", "name": "MatMul", "pid": 1, "tid": 0, "ts": 1, "dur": 2, '
          b'"args": {"name": "dense/MatMul", "op": "MatMul"}}]}')
    bare_chrome = b'[{"ph": "X", "cat": "Node", "name": "layout", "ts": 1, "dur": 2}]'  # a browser's "Node"
    for i, head in enumerate((kineto, tf, bare_chrome)):
        other = tmp_path / f"o{i}.json"
        other.write_bytes(head)
        assert not READER.sniff(other, head)
        assert pick_reader(other).name == "chrome_json"


def test_nodes_are_ops_by_type_with_node_shapes_and_steps(tmp_path):
    trace = open_trace(write_profile(tmp_path / "p.json", two_runs()), use_cache=True)
    assert trace.metadata["tool"] == "onnxruntime" and trace.metadata["format"] == "onnxruntime_json"
    assert trace.metadata["execution_providers"] == ["CPUExecutionProvider"]
    assert trace.warnings == []
    ev = trace.events
    ops = ev.filter(pc.equal(ev["kind"].cast("string"), "cpu_op")).sort_by("ts_ns")
    assert ops["name"].cast("string").to_pylist() == ["Conv", "Gemm", "Conv", "Gemm"]
    assert ops["cat"].cast("string").to_pylist() == ["Node"] * 4
    assert ops["dur_ns"].to_pylist() == [30_000, 20_000, 31_000, 21_000]
    assert ops["shapes"].to_pylist()[:2] == ["[[8,3,4,4],[2,3,3,3]]", "[[8,2]]"]
    assert ops["dtypes"].to_pylist()[:2] == ['["float","float"]', '["float"]']
    assert ops["output_shapes"].to_pylist()[:2] == ["[[8,2,2,2]]", "[[1]]"]  # output_type_shape's shapes
    args = dict(zip(trace.args["event_id"].to_pylist(), trace.args["args"].to_pylist()))
    first = json.loads(args[ops["event_id"][0].as_py()])
    assert first["node"] == "conv" and first["op_name"] == "Conv" and first["node_index"] == "0"
    assert first["provider"] == "CPUExecutionProvider"
    # every Session event is a range; model_run gives the steps, in time order
    kinds = dict(zip(ev["name"].cast("string").to_pylist(), ev["kind"].cast("string").to_pylist()))
    for name in ("model_loading_uri", "session_initialization", "model_run", "SequentialExecutor::Execute"):
        assert kinds[name] == "user_annotation"
    assert trace.steps.select(["step", "ts_ns", "dur_ns"]).to_pylist() == [
        {"step": 0, "ts_ns": 200_000, "dur_ns": 100_000}, {"step": 1, "ts_ns": 400_000, "dur_ns": 100_000}]
    assert ops["step"].to_pylist() == [0, 0, 1, 1]
    s = summarize(trace)
    assert s.cpu_busy_ns == (30 + 20 + 31 + 21) * 1000 and s.steps.count == 2
    table = op_table(trace).to_pylist()
    assert {r["name"]: (r["calls"], r["self_ns"]) for r in table} == {"Conv": (2, 61_000), "Gemm": (2, 41_000)}
    assert node_times(trace).to_pylist() == [{"node": "conv", "runs": 2, "time_ns": 61_000},
                                             {"node": "fc", "runs": 2, "time_ns": 41_000}]


def test_without_cache_node_names_come_from_a_second_read(tmp_path):
    trace = open_trace(write_profile(tmp_path / "p.json", two_runs()), use_cache=False)
    assert node_times(trace)["time_ns"].to_pylist() == [61_000, 41_000]


def test_old_profile_fences_are_overhead_not_ops(tmp_path):
    ev = [ort_event("Session", "model_run", 100, 200)]
    t = 110
    for node, op, dur in (("a", "Relu", 12), ("b", "Add", 8)):
        ev.append(ort_event("Node", f"{node}_fence_before", t, 2, {"op_name": op}))
        ev.append(ort_event("Node", f"{node}_kernel_time", t + 3, dur, node_args(op, [[4]])))
        ev.append(ort_event("Node", f"{node}_fence_after", t + 4 + dur, 1, {"op_name": op}))
        t += 30
    trace = open_trace(write_profile(tmp_path / "old.json", ev), use_cache=True)
    ev_t = trace.events
    kinds = ev_t["kind"].cast("string").to_pylist()
    assert kinds.count("overhead") == 4 and kinds.count("cpu_op") == 2
    assert {r["name"]: r["self_ns"] for r in op_table(trace).to_pylist()} == {"Relu": 12_000, "Add": 8_000}
    assert summarize(trace).cpu_busy_ns == 20_000
    assert node_times(trace)["node"].to_pylist() == ["a", "b"]
    assert trace.warnings == []


def test_node_events_without_args_are_read_and_said(tmp_path):
    ev = [ort_event("Session", "model_run", 0, 100), ort_event("Node", "n1_kernel_time", 5, 10),
          ort_event("Node", "n2_kernel_time", 20, 7, node_args("Mul", [[2]])),
          '{"cat" : "Node","pid" :7,"tid" :7,"dur" :3,"ts" :30,"ph" : "X","name" :"n3_kernel_time"}',
          ort_event("Node", "weird_thing", 40, 1),
          '{"cat" : "Node","pid" :7,"tid" :7,"dur" :2,"ts" :50,"ph" : "X","name" :"n4_kernel_time","args" : [1, 2]}']
    trace = open_trace(write_profile(tmp_path / "noargs.json", ev), use_cache=True)
    ops = trace.events.filter(pc.equal(trace.events["kind"].cast("string"), "cpu_op")).sort_by("ts_ns")
    assert ops["name"].cast("string").to_pylist() == ["n1", "Mul", "n3", "n4"]
    args = dict(zip(trace.args["event_id"].to_pylist(), trace.args["args"].to_pylist()))
    assert [args[i] for i in ops["event_id"].to_pylist()[:1] + ops["event_id"].to_pylist()[2:]] == [
        '{"node":"n1"}', '{"node":"n3"}', "[1, 2]"]  # an args that is no object is left as written
    problems = {w["problem"]: w["count"] for w in trace.warnings}
    assert problems["Node events without args.op_name (named by their node, not their op type)"] == 3
    assert any("kept as kind 'other'" in p and c == 1 for p, c in problems.items())
    assert node_times(trace)["node"].to_pylist() == ["n1", "n2", "n3"]


def test_truncated_profile_keeps_the_complete_events_and_says_so(tmp_path):
    whole = write_profile(tmp_path / "whole.json", two_runs()).read_text()
    cut = whole.index('"fc_kernel_time"', whole.index("model_run", whole.index("model_run") + 1))
    path = tmp_path / "cut.json"
    path.write_text(whole[: cut + 30])  # inside the second run's fc event
    trace = open_trace(path, use_cache=False)
    assert pick_reader(path).name == "onnxruntime_json"
    assert trace.metadata.get("truncated") is True
    assert any(w["problem"].startswith("file is truncated") for w in trace.warnings)
    names = trace.events["name"].cast("string").to_pylist()
    assert names.count("Conv") == 2 and names.count("Gemm") == 1 and trace.steps.num_rows == 2


def test_gpu_kernel_events_are_device_work_linked_to_their_node(tmp_path):
    ev = [ort_event("Session", "model_run", 0, 500),
          ort_event("Node", "mm_kernel_time", 10, 50, {**node_args("MatMul", [[4, 4], [4, 4]]),
                                                       "provider": "CUDAExecutionProvider"}),
          ort_event("Kernel", "gemm_kernel", 11, 7, {"op_name": "MatMul", "stream": "13", "grid_x": "2",
                                                     "grid_y": "1", "grid_z": "1", "block_x": "128", "block_y": "1",
                                                     "block_z": "1"}, pid=-1, tid=-1),
          ort_event("Kernel", "MemcpyDeviceToHost", 20, 3, {"op_name": "MatMul", "stream": "14"}, pid=-1, tid=-1),
          ort_event("Node", "relu_kernel_time", 70, 20, node_args("Relu", [[4, 4]]))]
    trace = open_trace(write_profile(tmp_path / "gpu.json", ev), use_cache=True)
    e = trace.events
    dev = e.filter(pc.is_valid(e["device"])).sort_by("ts_ns")
    assert dev.select(["kind", "name", "device", "stream"]).to_pylist() == [
        {"kind": "kernel", "name": "gemm_kernel", "device": 0, "stream": 13},
        {"kind": "memcpy", "name": "MemcpyDeviceToHost", "device": 0, "stream": 14}]
    [mm] = e.filter(pc.equal(e["name"].cast("string"), "MatMul")).to_pylist()
    assert dev["correlation"].to_pylist() == [mm["correlation"]] * 2 and mm["correlation"] is not None
    [relu] = e.filter(pc.equal(e["name"].cast("string"), "Relu")).to_pylist()
    assert relu["correlation"] is None
    assert trace.metadata["execution_providers"] == ["CPUExecutionProvider", "CUDAExecutionProvider"]
    assert any("device ordinal" in w["problem"] and w["count"] == 2 for w in trace.warnings)
    assert summarize(trace).gpu_busy_ns == 7_000 + 3_000
    assert link_table(trace)["op_name"].to_pylist() == ["MatMul", "MatMul"]


def test_a_profile_recorded_here_sums_like_the_file(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    np = pytest.importorskip("numpy")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "ort")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep the 4 nodes as built
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((32, 64)).astype(np.float32)
    for _ in range(5):
        session.run(None, {"x": x})
    path = Path(session.end_profiling())
    raw = json.loads(path.read_text())
    per_node: dict[str, int] = defaultdict(int)
    per_op: dict[str, int] = defaultdict(int)
    mm_shapes = set()
    for e in raw:
        if e["cat"] == "Node" and e["name"].endswith("_kernel_time"):
            per_node[e["name"][: -len("_kernel_time")]] += e["dur"] * 1000
            per_op[e["args"]["op_name"]] += e["dur"] * 1000
            if e["args"]["op_name"] == "MatMul":
                mm_shapes.add(json.dumps([next(iter(t.values())) for t in e["args"]["input_type_shape"]],
                                         separators=(",", ":")))
    runs = sorted((e["ts"], e["dur"]) for e in raw if e["name"] == "model_run")
    assert len(runs) == 5 and set(per_node) == {"mm", "add", "tanh", "mm2"}

    trace = open_trace(path, use_cache=True)
    assert trace.metadata["format"] == "onnxruntime_json" and trace.warnings == []
    assert {r["node"]: r["time_ns"] for r in node_times(trace).to_pylist()} == per_node
    assert {r["name"]: r["total_ns"] for r in op_table(trace).to_pylist()} == per_op
    assert trace.steps["dur_ns"].to_pylist() == [d * 1000 for _, d in runs]
    mm = trace.events.filter(pc.equal(trace.events["name"].cast("string"), "MatMul"))
    assert set(mm["shapes"].to_pylist()) == mm_shapes and mm.num_rows == 10
    assert "[32,64]" in next(iter(mm_shapes))


def test_older_gpu_profiles_write_kernels_before_their_node(tmp_path):
    """ORT before 1.14 inserted a node's kernels before the node's event; the op types say which node it was."""
    kernel = {"op_name": "Conv", "stream": "7", "grid_x": "1", "grid_y": "1", "grid_z": "1", "block_x": "64",
              "block_y": "1", "block_z": "1"}
    ev = [ort_event("Session", "model_run", 0, 500),
          ort_event("Node", "relu_kernel_time", 5, 10, node_args("Relu", [[4]])),
          ort_event("Kernel", "implicit_gemm", 30, 9, kernel, pid=-1, tid=-1),
          ort_event("Node", "conv_kernel_time", 20, 40, node_args("Conv", [[4], [4]])),
          ort_event("Kernel", "stray", 90, 1, {**kernel, "op_name": "Softmax"}, pid=-1, tid=-1)]
    trace = open_trace(write_profile(tmp_path / "old_gpu.json", ev), use_cache=True)
    rows = {r["name"]: r for r in trace.events.to_pylist()}
    assert rows["implicit_gemm"]["correlation"] == rows["Conv"]["correlation"] is not None
    assert rows["Relu"]["correlation"] is None and rows["stray"]["correlation"] is None
    problems = {w["problem"]: w["count"] for w in trace.warnings}
    assert problems["GPU Kernel events not beside a node event of their op type (not linked to a node)"] == 1
    assert problems["GPU Kernel events: ORT does not record the device ordinal (put on device 0)"] == 2


def test_hostile_shape_records_are_read_and_give_no_work(tmp_path):
    """Output (and input) type-shape records that are not ORT's form are kept as text or left out; the roofline has
    no model for them, and no exception anywhere."""
    from opscope.analyses.roofline import roofline_table

    good = node_args("Conv", [[1, 4, 6, 6], [4, 4, 3, 3]], outputs=[[1, 4, 4, 4]])
    bad_outputs = ["text", '{"float":[1,4,4,4]}', '[{"float":"x"}]', '[{"float":[-1,4,4,4]}]', "[" * 50 + "]" * 50,
                   '[{"float":[1,4,4,4],"int64":[1]}]', '[{"float":[1,4,4,' + "9" * 400 + "]}]", "[]", "null"]
    events = [ort_event("Session", "model_run", 0, 1000),
              ort_event("Node", "good_kernel_time", 1, 10, good)]
    for i, out in enumerate(bad_outputs):
        events.append(ort_event("Node", f"n{i}_kernel_time", 20 + 20 * i, 10, {**good, "output_type_shape": out}))
    events.append(ort_event("Node", "in_kernel_time", 900, 10, {**good, "input_type_shape": '[{"float":[1,4]},7]'}))
    trace = open_trace(write_profile(tmp_path / "p.json", events), use_cache=False)
    ops = trace.events.filter(pc.equal(trace.events["kind"].cast("string"), "cpu_op"))
    assert ops.num_rows == len(bad_outputs) + 2
    table, _ = roofline_table(trace, None)
    # only the good node's record resolves: 2*1*4*4*3*3*4*4 per call (the valid records with its shapes join it)
    assert table["flops"].to_pylist() == [2 * 4 * 4 * 9 * 16] and table["calls"].to_pylist() == [1]
