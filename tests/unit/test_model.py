"""The model's derived columns and the tables, checked against values worked out by hand."""

from __future__ import annotations

import pytest
from support.tracefiles import small_gpu_trace, write_trace, x

from opscope.analyses.filters import EventFilter
from opscope.analyses.gpu import GpuAnalysis, step_device_table
from opscope.analyses.intervals import union_ns
from opscope.analyses.kernels import kernel_table
from opscope.analyses.ops import op_table
from opscope.analyses.steps import outlier_flags, step_stats, step_table
from opscope.analyses.summary import summarize
from opscope.ingest import open_trace

US = 1000  # ns per microsecond


def test_self_time_and_nesting(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    rows = {r["name"]: r for r in op_table(trace).to_pylist()}
    # conv2d: 300 + 200 us total; self = 300 - 280 (convolution) + 200 - 10 (launch) = 210 us
    assert rows["aten::conv2d"]["calls"] == 2
    assert rows["aten::conv2d"]["total_ns"] == 500 * US
    assert rows["aten::conv2d"]["self_ns"] == 210 * US
    # convolution: 280 - 10 (its launch) = 270 us self
    assert rows["aten::convolution"]["self_ns"] == 270 * US
    assert rows["aten::relu"]["self_ns"] == 100 * US
    total_self = 210 + 270 + 100
    assert rows["aten::conv2d"]["self_pct"] == round(100 * 210 / total_self, 2)
    events = trace.events.to_pylist()
    conv = next(e for e in events if e["name"] == "aten::convolution")
    # ProfilerStep#1 > aten::conv2d > aten::convolution
    assert events[conv["parent"]]["name"] == "aten::conv2d" and conv["depth"] == 2


def test_group_by_shapes_and_filters(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    by_shape = op_table(trace, by=("name", "shapes"), filt=EventFilter(kinds=("cpu_op",), match="conv2d"))
    assert sorted((r["shapes"], r["calls"]) for r in by_shape.to_pylist()) == [
        ("[[8,3,32,32],[16,3,3,3]]", 1), ("[[8,3,64,64],[16,3,3,3]]", 1)]
    only_step2 = op_table(trace, filt=EventFilter(kinds=("cpu_op",), steps=[2]))
    assert only_step2["name"].to_pylist() == ["aten::conv2d"]
    excluded = op_table(trace, filt=EventFilter(kinds=("cpu_op",), exclude="^aten::conv"))
    assert excluded["name"].to_pylist() == ["aten::relu"]
    # without coverage (diff's totals): the same table less the union-based total_pct
    for by, filt in ((("name",), None), (("name", "shapes"), EventFilter(kinds=("cpu_op",), steps=[2]))):
        full = op_table(trace, by=by, filt=filt)
        bare = op_table(trace, by=by, filt=filt, coverage=False)
        assert "total_pct" in full.column_names and bare.equals(full.drop_columns(["total_pct"]))


def test_kernels_by_launching_op_and_step(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    kernels = {r["name"]: r for r in kernel_table(trace).to_pylist()}
    assert kernels["conv_kernel"]["calls"] == 2 and kernels["conv_kernel"]["total_ns"] == 260 * US
    assert kernels["conv_kernel"]["streams"] == "7"
    assert kernels["conv_kernel"]["pct"] == round(100 * 260 / 360, 2)
    by_op = {(r["op"], r["name"]): r["calls"] for r in kernel_table(trace, by_op=True).to_pylist()}
    # corr 1 is launched inside aten::convolution (innermost op), corr 2 inside aten::conv2d.
    assert by_op == {("aten::convolution", "conv_kernel"): 1, ("aten::conv2d", "conv_kernel"): 1,
                     ("(no launching op)", "relu_kernel"): 1}
    # relu_kernel runs past step 2's end but belongs to step 2 through its launch.
    steps = {e["name"]: e["step"] for e in trace.events.to_pylist() if e["kind"] == "kernel"}
    assert steps["relu_kernel"] == 2


def test_steps_gpu_busy_and_outliers(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    table = step_table(trace).to_pylist()
    assert [(r["step"], r["dur_ns"], r["launched_gpu_ns"]) for r in table] == [
        (1, 1000 * US, 200 * US), (2, 2000 * US, 160 * US)]
    # Inside the steps' intervals: step 2 [1000, 3000) holds conv [1200, 1260) and relu [2950, 3050) only up
    # to 3000, so 60 + 50 us; launched in step 2 was 60 + 100 us.
    inside = step_device_table(trace).to_pylist()
    assert [(r["gpu_busy_ns"], r["gpu_busy_pct"], r["launched_gpu_ns"]) for r in inside] == [
        (200 * US, 20.0, 200 * US), (110 * US, 5.5, 160 * US)]
    assert outlier_flags([100, 100, 100, 160]) == [None, None, None, "slow"]
    assert outlier_flags([130, 100, 100, 100]) == ["warm-up", None, None, None]
    stats = step_stats(step_table(trace))
    assert stats.count == 2


def test_union_counts_overlap_once():
    import pyarrow as pa

    starts = pa.array([0, 5, 20, 22], pa.int64())
    durs = pa.array([10, 10, 1, 10], pa.int64())
    assert union_ns(starts, durs) == 15 + 1 + 10  # [0,15), [20,21) and [22,32)


def test_summary_figures(tmp_path):
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    s = summarize(trace)
    assert s.wall_ns == 3050 * US
    assert s.gpu_busy_ns == 360 * US
    # ops and launches: [100,400) [500,600) [1100,1300) [1400,1410)
    assert s.cpu_busy_ns == (300 + 100 + 200 + 10) * US
    assert s.devices == [0]


def test_begin_end_pairs_and_bare_array(tmp_path):
    import json

    path = tmp_path / "chrome.json"
    path.write_text(json.dumps([
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 10},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 30},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 100},
        x("solo", 200, 5, cat=None),
    ]))
    trace = open_trace(path, use_cache=False)
    rows = {r["name"]: r for r in op_table(trace).to_pylist()}
    assert rows["outer"]["total_ns"] == 100 * US and rows["outer"]["self_ns"] == 80 * US
    assert rows["inner"]["total_ns"] == 20 * US
    assert rows["solo"]["calls"] == 1


def test_steps_and_gpu_agree_on_a_single_step(tmp_path):
    """One step [0, 1000) us; device work: [150, 350) launched in it, [900, 1100) launched in it and running past
    its end, [-50, 50) queued before the trace. Busy inside the step: 200 + 100 + 50 = 350 us, whoever launched
    it; launched by the step: 200 + 200 = 400 us, more than the device was busy inside it."""
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("cudaLaunchKernel", 100, 10, cat="cuda_runtime", correlation=1),
        x("cudaLaunchKernel", 800, 10, cat="cuda_runtime", correlation=2),
        x("early", -50, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=9),
        x("k1", 150, 200, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("k2", 900, 200, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
    ]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    step = step_device_table(trace).to_pylist()[0]
    device = next(r for r in GpuAnalysis(trace).breakdown().to_pylist() if r["stream"] is None)
    assert step["gpu_busy_ns"] == device["busy_ns"] == 350 * US
    assert step["gpu_busy_pct"] == device["busy_pct"] == 35.0
    assert step["launched_gpu_ns"] == 400 * US


def test_a_chain_of_same_name_ops_folds_into_its_outermost_op(tmp_path):
    # aten::linear nested four deep [0,100) > [10,90) > [20,80) > [30,70), aten::mm [40,50) inside the innermost;
    # a second chain [200,300) > [210,290). Each inner linear is its parent's only child of the same name, so it
    # is folded (as torch's key_averages() does) and its self time moves to the outermost linear of its chain:
    # chain 1: 20 + 20 + 20 + 30 = 90 us; chain 2: 20 + 80 = 100 us.
    chain = [x("aten::linear", 0, 100), x("aten::linear", 10, 80), x("aten::linear", 20, 60),
             x("aten::linear", 30, 40), x("aten::mm", 40, 10), x("aten::linear", 200, 100),
             x("aten::linear", 210, 80)]
    trace = open_trace(write_trace(tmp_path / "t.json", chain), use_cache=False)
    rows = {r["name"]: r for r in op_table(trace).to_pylist()}
    assert rows["aten::linear"]["calls"] == 2
    assert rows["aten::linear"]["self_ns"] == (90 + 100) * US
    assert rows["aten::mm"]["self_ns"] == 10 * US
    events = trace.events.to_pylist()
    assert sum(e["merged"] for e in events) == 4
    assert [e["op_self_ns"] for e in events if e["depth"] == 0] == [90 * US, 100 * US]


@pytest.mark.parametrize("native", ["1", "0"])
def test_arange_is_the_rows_numbers(native, monkeypatch):
    import pyarrow as pa

    from opscope.model.ranges import arange

    monkeypatch.setenv("OPSCOPE_NATIVE", native)  # written in C, and Arrow's definition
    assert arange(0, 0).to_pylist() == [] and arange(4, 2).to_pylist() == []
    assert arange(5, 9).to_pylist() == [5, 6, 7, 8] and arange(0, 3).type == pa.int64()
    assert arange(-3, 1).to_pylist() == [-3, -2, -1, 0]
    big = arange(2**40, 2**40 + 100_003)
    assert (big[0].as_py(), big[100_002].as_py(), big.null_count) == (2**40, 2**40 + 100_002, 0)


def _random_op_forest(rng, n: int) -> dict:
    """Rows in time order whose parents come first: names from a few (so same-name chains occur), kinds mixed."""
    parent, names, kinds = [], [], []
    for i in range(n):
        parent.append(rng.choice([None, None] + list(range(max(0, i - 6), i))) if i else None)
        names.append(rng.choice(["aten::linear", "aten::linear", "aten::mm", "step", None]))
        kinds.append(rng.choice(["cpu_op", "cpu_op", "cpu_op", "user_annotation", "python_function", "kernel"]))
    return {"parent": parent, "name": names, "kind": kinds, "self_ns": [rng.randrange(0, 50) for _ in range(n)]}


@pytest.mark.parametrize("seed", range(20))
def test_folding_in_c_matches_the_arrow_definition(seed, monkeypatch):
    import random

    import pyarrow as pa

    from opscope.model import derive

    if derive._derive is None:
        pytest.skip("opscope.model._derive is not built here")
    rng = random.Random(seed)
    rows = _random_op_forest(rng, rng.randint(1, 300))
    events = pa.table({"parent": pa.array(rows["parent"], pa.int64()),
                       "name": pa.array(rows["name"]).dictionary_encode(),
                       "kind": pa.array(rows["kind"]).dictionary_encode(),
                       "self_ns": pa.array(rows["self_ns"], pa.int64())})
    in_c = derive.fold_duplicate_ops(events)
    monkeypatch.setenv("OPSCOPE_NATIVE", "0")
    in_arrow = derive.fold_duplicate_ops(events)
    assert in_c[0].to_pylist() == in_arrow[0].to_pylist() and in_c[0].type == in_arrow[0].type
    assert in_c[1].to_pylist() == in_arrow[1].to_pylist() and in_c[1].type == in_arrow[1].type
    # self time moves from the folded rows to the kept ones: none is lost
    assert sum(v for v, folded in zip(in_c[1].to_pylist(), in_c[0].to_pylist()) if not folded) == sum(rows["self_ns"])
    assert any(in_c[0].to_pylist()) or seed % 5  # most seeds fold something


def test_folding_in_c_declines_a_parent_after_its_row():
    import pyarrow as pa

    from opscope.model import derive

    if derive._derive is None:
        pytest.skip("opscope.model._derive is not built here")
    # row 0's parent is row 1: not the model's time order, so the C pass leaves it to the Arrow definition
    events = pa.table({"parent": pa.array([1, None], pa.int64()),
                       "name": pa.array(["aten::mm", "aten::mm"]).dictionary_encode(),
                       "kind": pa.array(["cpu_op", "cpu_op"]).dictionary_encode(),
                       "self_ns": pa.array([5, 7], pa.int64())})
    codes = events["name"].combine_chunks().indices
    assert derive._fold_in_c(events, events["parent"].combine_chunks(), codes,
                             derive.kind_mask(events, ("cpu_op",)).combine_chunks(),
                             events["self_ns"].combine_chunks()) is None
    merged, op_self = derive.fold_duplicate_ops(events)  # the Arrow definition: row 0 folds into row 1
    assert merged.to_pylist() == [True, False] and op_self.to_pylist() == [5, 12]


@pytest.mark.parametrize("native_reader", ["0", "1"])
def test_two_categories_of_one_kind_are_one_kind(tmp_path, monkeypatch, native_reader):
    # cuda_runtime and cuda_driver are both runtime: one row of the summary's time by kind (10 + 5 us), not two
    # (grouping on a kind dictionary that listed "runtime" twice gave two)
    import pyarrow.compute as pc

    monkeypatch.setenv("OPSCOPE_NATIVE", native_reader)
    events = [x("cudaLaunchKernel", 0, 10, cat="cuda_runtime"), x("cuLaunchKernel", 20, 5, cat="cuda_driver"),
              x("aten::mm", 40, 3)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    kinds = trace.events["kind"]
    assert all(pc.count_distinct(c.dictionary).as_py() == len(c.dictionary) for c in kinds.chunks)
    by_kind = summarize(trace).by_kind.to_pylist()
    assert [(r["kind"], r["total_ns"]) for r in by_kind] == [("runtime", 15 * US), ("cpu_op", 3 * US)]


def test_dictionaries_with_a_value_twice_are_made_distinct():
    import pyarrow as pa

    from opscope.model.derive import _distinct_dictionaries

    twice = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None, 2], pa.int32()), pa.array(["a", "b", "a"]))
    table = _distinct_dictionaries(pa.table({"k": twice, "n": [1, 2, 3, 4, 5]}))
    column = table["k"].chunk(0)
    assert column.dictionary.to_pylist() == ["a", "b"] and column.indices.to_pylist() == [0, 1, 0, None, 0]
    assert table.group_by("k").aggregate([("n", "sum")]).to_pylist() == [{"k": "a", "n_sum": 9},
                                                                         {"k": "b", "n_sum": 2},
                                                                         {"k": None, "n_sum": 4}]


def test_collective_kernels_become_comm_on_the_kind_codes():
    import pyarrow as pa

    from opscope.model.derive import kinds_by_name

    # two chunks: one whose dictionary has no "comm" yet, one that lists it already; only kernels named after
    # NCCL/RCCL change, whatever their case
    first = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1], pa.int32()), pa.array(["kernel", "cpu_op"]))
    second = pa.DictionaryArray.from_arrays(pa.array([1, 1, 2], pa.int32()), pa.array(["comm", "kernel", "cpu_op"]))
    events = pa.table({
        "kind": pa.chunked_array([first, second]),
        "name": pa.chunked_array([pa.array(["ncclKernel_AllReduce", "gemm", "ncclX"]).dictionary_encode(),
                                  pa.array(["x", "RCCL_bcast", "nccl_op"]).dictionary_encode()]),
    })
    marked = kinds_by_name(events)["kind"]
    assert marked.cast(pa.string()).to_pylist() == ["comm", "kernel", "cpu_op", "kernel", "comm", "cpu_op"]
    assert all(c.dictionary.to_pylist().count("comm") == 1 for c in marked.chunks)


def test_copies_and_fills_run_as_kernels_are_copies_and_fills():
    import pyarrow as pa

    from opscope.model.derive import kinds_by_name

    names = ["__amd_rocclr_copyBuffer", "__amd_rocclr_copyBuffer.kd", "__amd_rocclr_fillBufferAligned.kd",
             "CopyDeviceToDevice", "CopyHostToDevice", "MemcpyD2H", "vecCopy",
             "at::native::(anonymous namespace)::CatArrayBatchedCopy", "ncclDevKernel_AllGather", "aten::copy_"]
    kinds = ["kernel"] * 9 + ["cpu_op"]  # an op named like a copy is not device work: it stays an op
    events = pa.table({"kind": pa.array(kinds).dictionary_encode(), "name": pa.array(names).dictionary_encode()})
    marked = kinds_by_name(events)["kind"].cast(pa.string()).to_pylist()
    assert marked == ["memcpy", "memcpy", "memset", "memcpy", "memcpy", "memcpy", "kernel", "kernel", "comm",
                      "cpu_op"]


@pytest.mark.parametrize("seed", range(4))
def test_kind_mask_is_membership_of_the_kind_text(seed):
    # kind_mask compares dictionary codes (a few) or takes the dictionary's booleans (many): either way, per row,
    # whether its kind is one of those asked for; a null kind is not
    import random

    import pyarrow as pa

    from opscope.model.schema import kind_mask

    rng = random.Random(seed)
    pool = [f"k{i}" for i in range(10)]
    for _ in range(20):
        chunks = [pa.array([rng.choice([None, *pool[:rng.randint(1, 10)]]) for _ in range(rng.randint(0, 40))],
                           pa.string()).dictionary_encode() for _ in range(rng.randint(1, 3))]
        kinds = tuple(rng.sample(pool, rng.randint(0, 10)))
        events = pa.table({"kind": pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))})
        got = kind_mask(events, kinds).to_pylist()
        assert got == [k is not None and k in kinds for c in chunks for k in c.to_pylist()]


def test_python_time_by_kind_leaves_out_the_ops_it_calls():
    from support import make_trace, row

    from opscope.analyses.summary import summarize

    trace = make_trace([
        # thread 1: a frame of 100 us calling two ops (30 us, of which a 5 us runtime call, and 10 us)
        row("python", "train.py(3): step", 0, 100, pid="1", tid="1"),
        row("python", "torch/nn/module.py(9): forward", 5, 60, pid="1", tid="1"),
        row("cpu_op", "aten::mm", 10, 30, pid="1", tid="1"),
        row("runtime", "cudaLaunchKernel", 20, 5, pid="1", tid="1"),
        row("cpu_op", "aten::relu", 80, 10, pid="1", tid="1"),
        # thread 2: a frame of 50 us calling nothing; thread 1's ops at the same time are not its
        row("python", "loader.py(7): __getitem__", 0, 50, pid="1", tid="2"),
    ])
    by_kind = {r["kind"]: r["total_ns"] for r in summarize(trace).by_kind.to_pylist()}
    # Python ran outside any op: thread 1's 100 us less the ops' 40 (the runtime call is inside aten::mm), thread 2's 50
    assert by_kind["python"] == (100 - 30 - 10 + 50) * US
    assert by_kind["cpu_op"] == (25 + 10) * US and by_kind["runtime"] == 5 * US  # the ops' own self times
