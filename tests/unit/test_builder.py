"""The model's builder (typed batches -> Trace), the reader registry, and the in-memory traces of tests."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support import make_trace, row
from support.tracefiles import small_gpu_trace, write_trace

from opscope.ingest import READERS, Reader, UnknownReaderError, open_trace, pick_reader, reader_named
from opscope.model.builder import BAD_TIME_WARNING, TraceBuilder
from opscope.model.schema import EVENTS

US = 1000


def test_make_trace_nests_and_splits_steps_by_hand():
    """Step 1 [0, 1000) us > conv2d [100, 400) > convolution [110, 390) > launch [120, 130); relu [500, 600).
    The kernel [150, 350) on stream 7 belongs to step 1 through its launch; step 2 [1000, 2000) is empty."""
    trace = make_trace([
        row("user_annotation", "ProfilerStep#2", 1000, 1000),
        row("user_annotation", "ProfilerStep#1", 0, 1000),
        row("cpu_op", "aten::conv2d", 100, 300),
        row("cpu_op", "aten::convolution", 110, 280),
        row("runtime", "cudaLaunchKernel", 120, 10, correlation=1),
        row("kernel", "conv_kernel", 150, 200, pid=0, tid=7, device=0, stream=7, correlation=1),
        row("cpu_op", "aten::relu", 500, 100),
    ])
    events = {r["name"]: r for r in trace.events.to_pylist()}
    assert trace.events["name"].to_pylist() == [  # time order, event_id the row index
        "ProfilerStep#1", "aten::conv2d", "aten::convolution", "cudaLaunchKernel", "conv_kernel", "aten::relu",
        "ProfilerStep#2"]
    assert trace.events["event_id"].to_pylist() == list(range(7))
    step, conv, convolution = events["ProfilerStep#1"], events["aten::conv2d"], events["aten::convolution"]
    launch, kernel, relu = events["cudaLaunchKernel"], events["conv_kernel"], events["aten::relu"]
    assert (step["parent"], conv["parent"], convolution["parent"], launch["parent"], relu["parent"]) == (
        None, step["event_id"], conv["event_id"], convolution["event_id"], step["event_id"])
    assert (step["depth"], conv["depth"], convolution["depth"], launch["depth"]) == (0, 1, 2, 3)
    assert step["self_ns"] == (1000 - 300 - 100) * US
    assert (conv["self_ns"], convolution["self_ns"], launch["self_ns"]) == (20 * US, 270 * US, 10 * US)
    assert (kernel["parent"], kernel["depth"], kernel["self_ns"], kernel["step"]) == (None, 0, 200 * US, 1)
    assert [e["step"] for e in (step, conv, launch, relu, events["ProfilerStep#2"])] == [1, 1, 1, 1, 2]
    assert trace.steps.select(["step", "ts_ns", "dur_ns"]).to_pylist() == [
        {"step": 1, "ts_ns": 0, "dur_ns": 1000 * US}, {"step": 2, "ts_ns": 1000 * US, "dur_ns": 1000 * US}]
    assert trace.events.schema == EVENTS and trace.events["pid"].to_pylist()[0] == "1"


def test_builder_drops_rows_without_usable_times_and_keeps_args_aligned():
    builder = TraceBuilder("x", "test")
    builder.add_events({"kind": ["cpu_op"] * 4, "name": ["a", "bad", "b", "worse"],
                        "ts_ns": [10, None, 30, 40], "dur_ns": [5, 5, 5, -1]},
                       args=['{"i": 0}', '{"i": 1}', '{"i": 2}', '{"i": 3}'])
    builder.add_flows({"id": ["1", "1"], "phase": ["s", "f"], "ts_ns": [12, None]})
    builder.warn("something the reader could not map", 3)
    trace = builder.finish()
    assert trace.events["name"].to_pylist() == ["a", "b"]
    assert trace.args.to_pylist() == [{"event_id": 0, "args": '{"i": 0}'}, {"event_id": 1, "args": '{"i": 2}'}]
    assert trace.flows.num_rows == 1 and trace.flows["pid"].to_pylist() == [""]
    assert trace.warnings == [{"problem": BAD_TIME_WARNING, "count": 3},
                              {"problem": "something the reader could not map", "count": 3}]
    assert trace.metadata["source"] == "x" and trace.metadata["format"] == "test"


def test_reader_steps_replace_profiler_step_annotations_and_own_their_events():
    """A reader that marks its steps (ONNX Runtime's model_run) gives the steps; events inside [ts, ts+dur) get the
    step number; a ProfilerStep#N annotation in the same trace is then not a step; a step without times is dropped."""
    from opscope.model.derive import complete

    builder = TraceBuilder("x", "test")
    builder.add_events({"kind": ["user_annotation", "cpu_op", "cpu_op", "user_annotation"],
                        "name": ["model_run", "Conv", "Relu", "ProfilerStep#9"],
                        "ts_ns": [100, 110, 250, 0], "dur_ns": [100, 50, 10, 5], "pid": [1] * 4, "tid": [1] * 4})
    builder.add_steps({"step": [1, 0, 2], "name": ["model_run", "model_run", "x"], "pid": ["1", "1", None],
                       "ts_ns": [200, 100, None], "dur_ns": [100, 100, 5]})
    trace = complete(builder.finish())
    assert trace.steps.select(["step", "name", "pid", "tid", "ts_ns", "dur_ns"]).to_pylist() == [
        {"step": 0, "name": "model_run", "pid": "1", "tid": None, "ts_ns": 100, "dur_ns": 100},
        {"step": 1, "name": "model_run", "pid": "1", "tid": None, "ts_ns": 200, "dur_ns": 100}]
    by_name = dict(zip(trace.events["name"].to_pylist(), trace.events["step"].to_pylist()))
    assert by_name == {"ProfilerStep#9": None, "model_run": 0, "Conv": 0, "Relu": 1}
    assert trace.warnings == [{"problem": BAD_TIME_WARNING, "count": 1}]


def test_builder_refuses_unknown_or_missing_columns():
    builder = TraceBuilder("x", "test")
    with pytest.raises(ValueError, match="unknown columns \\['duration'\\]"):
        builder.add_events({"kind": ["cpu_op"], "name": ["a"], "ts_ns": [1], "dur_ns": [1], "duration": [1]})
    with pytest.raises(ValueError, match="missing columns \\['dur_ns'\\]"):
        builder.add_events({"kind": ["cpu_op"], "name": ["a"], "ts_ns": [1]})
    with pytest.raises(ValueError, match="event_id"):
        builder.add_events({"kind": ["cpu_op"], "name": ["a"], "ts_ns": [1], "dur_ns": [1], "event_id": [0]})
    with pytest.raises(ValueError, match="2 args for 1 rows"):
        builder.add_events({"kind": ["cpu_op"], "name": ["a"], "ts_ns": [1], "dur_ns": [1]}, args=["{}", "{}"])
    with pytest.raises(ValueError, match="needs a stream"):
        make_trace([row("kernel", "k", 0, 1)])


def test_builder_takes_arrow_arrays_as_they_are():
    builder = TraceBuilder("x", "test")
    builder.add_events({"kind": pa.array(["kernel"]).dictionary_encode(), "name": pa.array(["k"]),
                        "ts_ns": pa.array([5], pa.int64()), "dur_ns": pa.array([2], pa.int32()),
                        "stream": pa.array([7], pa.int64())})
    events = builder.finish().events
    assert events.to_pylist()[0] == {**dict.fromkeys(events.column_names), "kind": "kernel", "name": "k",
                                         "ts_ns": 5, "dur_ns": 2, "pid": "", "tid": "", "stream": 7, "event_id": 0}


def test_registry_is_explicit_and_fails_loudly(tmp_path):
    assert READERS and all(isinstance(r, Reader) for r in READERS)
    assert len({r.name for r in READERS}) == len(READERS)
    assert reader_named("chrome_json") is READERS[-1]  # other formats are sniffed first, JSON's loose sniff last
    with pytest.raises(UnknownReaderError, match=r"no reader named 'no_such'; the readers are: .*chrome_json"):
        reader_named("no_such")
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    assert pick_reader(path).name == "chrome_json"
    assert open_trace(path, use_cache=False).metadata["format"] == "chrome_json"
