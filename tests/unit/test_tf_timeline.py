"""TensorFlow's Chrome traces: TF timelines' device rows become device work (each record once, linked to its host
op), and XProf's runtime events are not framework ops and take nothing from an op's self time (XProf's rule).

The files are written here, in the shapes TF writes them; every expected value is worked out by hand from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from opscope.analyses.kernels import kernel_table
from opscope.analyses.links import link_table
from opscope.analyses.ops import op_table
from opscope.ingest import open_trace
from opscope.model.builder import TraceBuilder

HOST_GPU, STREAM_ALL, STREAM_7, MEMCPY, STREAM_8, CPU = 1, 2, 3, 4, 5, 6


def _meta(pid: int, name: str) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}


def _op(pid: int, op: str, node: str, ts: int, dur: int, tid: int = 0) -> dict:
    return {"ph": "X", "cat": "Op", "name": op, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"name": node, "op": op}}


def _tf_timeline(tmp_path: Path, *, metadata_last: bool = False) -> Path:
    """One step of a TF1 timeline on GPU 0, as TF's device tracer files it.

    host (GPU:0 Compute): MatMul node "dense/MatMul" [100, 130), Assign node "w/Assign" [200, 240),
                          MatMul node "dense/MatMul" again [400, 420) (the node's second run)
    stream:7:  MatMul kernel [140, 190) and [430, 450); stream:all: the same two kernels again
    stream:8:  MEMCPYHtoD [50, 60) (node "edge_1_x"), Assign's copy [210, 215); memcpy: the same two copies again
    CPU:0:     NoOp [10, 20)
    """
    meta = [_meta(0, "Allocators"), _meta(HOST_GPU, "/job:localhost/replica:0/task:0/device:GPU:0 Compute"),
            _meta(STREAM_ALL, "/device:GPU:0/stream:all Compute"), _meta(STREAM_7, "/device:GPU:0/stream:7 Compute"),
            _meta(MEMCPY, "/device:GPU:0/memcpy Compute"), _meta(STREAM_8, "/device:GPU:0/stream:8 Compute"),
            _meta(CPU, "/job:localhost/replica:0/task:0/device:CPU:0 Compute")]
    events = [
        _op(CPU, "NoOp", "_SOURCE", 10, 10),
        _op(HOST_GPU, "MatMul", "dense/MatMul", 100, 30),
        _op(HOST_GPU, "Assign", "w/Assign", 200, 40),
        _op(HOST_GPU, "MatMul", "dense/MatMul", 400, 20),
        _op(STREAM_7, "MatMul", "dense/MatMul", 140, 50), _op(STREAM_ALL, "MatMul", "dense/MatMul", 140, 50),
        _op(STREAM_7, "MatMul", "dense/MatMul", 430, 20), _op(STREAM_ALL, "MatMul", "dense/MatMul", 430, 20),
        _op(STREAM_8, "MEMCPYHtoD", "edge_1_x", 50, 10), _op(MEMCPY, "MEMCPYHtoD", "edge_1_x", 50, 10),
        _op(STREAM_8, "Assign", "w/Assign", 210, 5), _op(MEMCPY, "Assign", "w/Assign", 210, 5),
    ]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps({"traceEvents": events + meta if metadata_last else meta + events}))
    return path


def _rows(trace) -> list[dict]:
    return trace.select(["kind", "name", "ts_ns", "dur_ns", "device", "stream", "correlation"]).to_pylist()


@pytest.mark.parametrize("metadata_last", [False, True])
def test_tf_timeline_device_rows_are_device_work_once(tmp_path, metadata_last):
    trace = open_trace(_tf_timeline(tmp_path, metadata_last=metadata_last), use_cache=False)
    device = [(r["kind"], r["name"], r["ts_ns"] // 1000, r["stream"], r["device"]) for r in _rows(trace)
              if r["stream"] is not None]
    # each record once, on its own stream; the Assign record TF filed under memcpy is a copy
    assert device == [("memcpy", "MEMCPYHtoD", 50, 8, 0), ("kernel", "MatMul", 140, 7, 0),
                      ("memcpy", "Assign", 210, 8, 0), ("kernel", "MatMul", 430, 7, 0)]
    host = sorted((r["kind"], r["name"]) for r in _rows(trace) if r["stream"] is None)
    assert host == [("cpu_op", "Assign"), ("cpu_op", "MatMul"), ("cpu_op", "MatMul"), ("cpu_op", "NoOp")]
    assert trace.metadata["tool"] == "tensorflow"
    assert {"problem": "TF timeline device records repeated under stream:all or memcpy (counted once, on their own "
                       "stream)", "count": 4} in trace.warnings
    kernels = {r["name"]: r for r in kernel_table(trace).to_pylist()}
    assert kernels["MatMul"]["calls"] == 2 and kernels["MatMul"]["total_ns"] == 70_000
    assert kernels["MEMCPYHtoD"]["kind"] == "memcpy"
    # op table: host ops only, the device rows are not counted as ops
    ops = {r["name"]: r["calls"] for r in op_table(trace).to_pylist()}
    assert ops == {"MatMul": 2, "Assign": 1, "NoOp": 1}


def test_tf_timeline_device_rows_link_to_the_last_run_of_their_node(tmp_path):
    trace = open_trace(_tf_timeline(tmp_path), use_cache=False)
    rows = trace.select(["name", "ts_ns"]).to_pylist()
    links = link_table(trace).to_pylist()
    got = {(rows[r["device_row"]]["name"], rows[r["device_row"]]["ts_ns"] // 1000):
           None if r["op_row"] is None else (r["op_name"], rows[r["op_row"]]["ts_ns"] // 1000) for r in links}
    assert got == {
        ("MEMCPYHtoD", 50): None,  # no host op of node edge_1_x
        ("MatMul", 140): ("MatMul", 100),  # the run of dense/MatMul that started before it
        ("Assign", 210): ("Assign", 200),
        ("MatMul", 430): ("MatMul", 400),  # the second run, not the first
    }
    assert not any(r["link_inferred"] for r in links)


def _xprof(tmp_path: Path, *, tf: bool) -> Path:
    """XProf-style host events on one thread (no categories), in us:

    train 0 [0, 1000) > Conv2DBackpropFilter [100, 600) > ThreadpoolListener::Region [150, 450)
                                                         > Mul [460, 500) (an op nested in an op)
                      > convert_to_tensor [700, 800)
                      > ExecutorState::Process [820, 900, tf_exec) > AddV2 [830, 850)
    With ``tf`` the thread is TF's (tf_Compute on /host:CPU); without, the same names on a thread TF did not name.
    """
    def ev(name, ts, dur, cat=None):
        e = {"ph": "X", "name": name, "pid": 1, "tid": 7, "ts": ts, "dur": dur, "args": {}}
        if cat:
            e["cat"] = cat
        return e
    events = [ev("train 0", 0, 1000), ev("Conv2DBackpropFilter", 100, 500), ev("ThreadpoolListener::Region", 150, 300),
              ev("Mul", 460, 40), ev("convert_to_tensor", 700, 100),
              ev("ExecutorState::Process", 820, 80, "tf_exec" if tf else None), ev("AddV2", 830, 20)]
    # XProf names the host "/host:CPU" for any framework (JAX too); TF's thread pools name their threads tf_*
    events += [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "vm /host:CPU"}},
               {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "tf_Compute/1" if tf
                                                                                 else "python"}}]
    path = tmp_path / ("xprof.json" if tf else "plain.json")
    path.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    return path


def test_xprof_runtime_events_are_not_ops_and_do_not_take_op_self_time(tmp_path):
    trace = open_trace(_xprof(tmp_path, tf=True), use_cache=False)
    kinds = {r["name"]: r["kind"] for r in trace.select(["name", "kind"]).to_pylist()}
    assert kinds == {"train 0": "user_annotation", "Conv2DBackpropFilter": "cpu_op", "Mul": "cpu_op",
                     "AddV2": "cpu_op", "ThreadpoolListener::Region": "runtime", "convert_to_tensor": "runtime",
                     "ExecutorState::Process": "runtime"}
    ops = {r["name"]: r["self_ns"] for r in op_table(trace).to_pylist()}
    # XProf: self = duration - nested framework ops (500 - 40 us); the thread-pool region is the op's own work
    assert ops == {"Conv2DBackpropFilter": 460_000, "Mul": 40_000, "AddV2": 20_000}
    runtime = {r["name"]: r["self_ns"] for r in op_table(trace, filt=_kinds("runtime")).to_pylist()}
    assert runtime == {"ThreadpoolListener::Region": 300_000, "convert_to_tensor": 100_000,
                       "ExecutorState::Process": 60_000}  # an op inside a runtime event still takes its time
    parents = {r["name"]: r["parent"] for r in trace.select(["name", "parent"]).to_pylist()}
    names = trace.select(["name"])["name"].to_pylist()
    assert names[parents["ThreadpoolListener::Region"]] == "Conv2DBackpropFilter"  # nesting itself unchanged


def test_plain_chrome_traces_keep_their_kinds_and_self_times(tmp_path):
    """The same names in a trace TF did not write (an XProf host plane, as JAX runs have): uncategorized slices stay
    ops and children take self time."""
    trace = open_trace(_xprof(tmp_path, tf=False), use_cache=False)
    assert set(trace.select(["kind"])["kind"].to_pylist()) == {"cpu_op"}
    ops = {r["name"]: r["self_ns"] for r in op_table(trace).to_pylist()}
    assert ops["Conv2DBackpropFilter"] == 500_000 - 300_000 - 40_000
    assert trace.metadata["tool"] == "chrome"


def _kinds(*kinds):
    from opscope.analyses.filters import EventFilter

    return EventFilter(kinds=kinds)


def test_builder_returns_the_event_id_of_each_row():
    b = TraceBuilder("t", "test")
    first = b.add_events({"kind": ["cpu_op"] * 2, "name": ["a", "b"], "ts_ns": [0, 1], "dur_ns": [5, 5]})
    second = b.add_events({"kind": ["cpu_op"] * 3, "name": ["c", "d", "e"], "ts_ns": [2, None, 4],
                           "dur_ns": [5, 5, -1]})
    assert first.to_pylist() == [0, 1]
    assert second.to_pylist() == [2, None, None]  # dropped rows (no ts, negative duration) get no id
    assert b.finish().events["name"].to_pylist() == ["a", "b", "c"]
    assert isinstance(second, pa.Array)
