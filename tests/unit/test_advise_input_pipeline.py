"""input-pipeline rule on hand-built traces: DataLoader waits, the worker count from the run's cores."""

from __future__ import annotations

from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace


def test_worker_count_comes_from_the_run_cores(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 400, cat="user_annotation"),
              x("aten::mm", 420, 500)]
    trace = open_trace(write_trace(tmp_path / "t.json", events))
    for cores, workers in ((6, 5), (32, 8), (1, 1)):
        f = advise(trace, run={"cpu": {"usable_cores": cores}}, only=["input-pipeline"]).findings
        assert f"num_workers={workers}," in f[0].change
    f = advise(trace, only=["input-pipeline"]).findings  # CPU trace, no run.json
    assert f[0].saving_ns == 400_000 and f[0].saving_pct == 40.0
    assert f[0].evidence == [{"step": 1, "dataloader_ns": 400_000, "device_idle_ns": None, "step_ns": 1_000_000,
                              "step_pct": 40.0}]
    assert "num_workers=4," in f[0].change and "unknown" in f[0].change


def test_hand_built_gpu_step_counts_only_the_idle_part_of_the_load(tmp_path):
    # step [0, 1000) us; loader [0, 300); the previous kernel runs [0, 100), the next one [350, 900):
    # the device idles 200 us of the 300 us load (and 50 us after it, which is not the loader's)
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300, cat="user_annotation"),
              x("cudaLaunchKernel", 310, 10, cat="cuda_runtime", correlation=2),
              x("k0", 0, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("k1", 350, 550, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2)]
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["input-pipeline"]).findings
    assert len(f) == 1 and f[0].saving_ns == 200_000 and f[0].saving_pct == 20.0
    assert (f[0].evidence[0]["dataloader_ns"], f[0].evidence[0]["device_idle_ns"]) == (300_000, 200_000)


def test_cpu_trace_with_a_small_loader_share_stays_silent(tmp_path):
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10, cat="user_annotation"),
              x("aten::mm", 20, 900)]
    assert advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["input-pipeline"]).findings == []


def test_not_applicable_without_a_dataloader(tmp_path):
    t = open_trace(write_trace(tmp_path / "t.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                     x("aten::mm", 10, 50)]))
    assert "DataLoader" in advise(t, only=["input-pipeline"]).not_applicable["input-pipeline"]
