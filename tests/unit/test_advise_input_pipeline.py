"""input-pipeline rule on hand-built traces: DataLoader waits, the user's frames inside the loader, and workers
suggested only when run.json shows free cores."""

from __future__ import annotations

import pytest
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.advise.context import host_cores
from opscope.advise.rules.input_pipeline import is_user_frame
from opscope.ingest import open_trace

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def loader_trace(tmp_path, frames: bool = False):
    """One step [0, 1000) us: the DataLoader [0, 400) on thread 1, aten::mm [420, 920). With ``frames``, Python
    frames as torch records them with stacks: the training loop around everything, torch's __next__ around the
    loader, the user's __getitem__ twice inside it ([50, 150) and [200, 350): 250 us) with augment [60, 100)
    inside the first, a stdlib frame, a user frame outside the loader and one on another thread."""
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"), x(LOADER, 0, 400, cat="user_annotation"),
              x("aten::mm", 420, 500)]
    if frames:
        py = "python_function"
        events += [x("train_slow.py(60): main", 0, 1000, cat=py),
                   x("torch/utils/data/dataloader.py(631): __next__", 0, 405, cat=py),
                   x("typing.py(2268): cast", 10, 20, cat=py),
                   x("train_slow.py(23): __getitem__", 50, 100, cat=py),
                   x("train_slow.py(30): augment", 60, 40, cat=py),
                   x("train_slow.py(23): __getitem__", 200, 150, cat=py),
                   x("train_slow.py(40): forward", 420, 500, cat=py),
                   x("train_slow.py(80): log_worker", 100, 200, cat=py, tid=2)]
    return open_trace(write_trace(tmp_path / "t.json", events))


def test_workers_only_when_run_json_shows_free_cores(tmp_path):
    trace = loader_trace(tmp_path)
    # free = usable cores - intra-op threads (1 when unknown) - round(1-minute load), at most 8 workers
    for cpu, threads, workers in (({"usable_cores": 6}, None, 5), ({"usable_cores": 32}, {"intra_op": 4}, 8),
                                  ({"usable_cores": 8, "load_average": [2.4, 1.0, 1.0]}, {"intra_op": 3}, 3)):
        run = {"cpu": cpu, **({"threads": threads} if threads else {})}
        f = advise(trace, run=run, only=["input-pipeline"]).findings
        assert f"num_workers={workers}," in f[0].remedy and f"{workers} core(s) free" in f[0].remedy
    # a 2-core host whose 2 intra-op threads take both cores, or whose other processes do: no workers
    for run in ({"cpu": {"usable_cores": 2}, "threads": {"intra_op": 2}},
                {"cpu": {"usable_cores": 2, "load_average": [1.2, 1.0, 1.0]}, "threads": {"intra_op": 1}},
                {"cpu": {"usable_cores": 1}}):
        f = advise(trace, run=run, only=["input-pipeline"]).findings
        assert "num_workers=" not in f[0].remedy and "no core is free" in f[0].remedy
        assert "make __getitem__ cheaper" in f[0].remedy
    f = advise(trace, only=["input-pipeline"]).findings  # CPU trace, no run.json
    assert f[0].estimated_ns == 400_000
    assert f[0].evidence == [{"step": 1, "dataloader_ns": 400_000, "in_step_ns": 400_000, "device_idle_ns": None,
                              "step_ns": 1_000_000, "step_pct": 40.0}]
    assert "num_workers=N" in f[0].remedy and "unknown" in f[0].remedy


def test_names_the_users_frames_inside_the_loader(tmp_path):
    f = advise(loader_trace(tmp_path, frames=True), run={"cpu": {"usable_cores": 2}, "threads": {"intra_op": 2}},
               only=["input-pipeline"]).findings[0]
    # the loader: the annotation [0, 400) and torch's dataloader.py __next__ frame [0, 405): 405 us.
    # __getitem__: 100 + 150 us = 250 us of it (61.7%); augment 40 us (9.9%); main, forward (not inside the
    # loader), the thread-2 frame, torch's and typing's frames are not named
    assert f.estimated_ns == 405_000
    assert f.title.endswith("mostly in train_slow.py(23): __getitem__ (250.000 us)")
    assert ("train_slow.py(23): __getitem__ 250.000 us per step (61.7% of the DataLoader time), "
            "train_slow.py(30): augment 40.000 us per step (9.9% of the DataLoader time).") in f.estimate
    for absent in ("): main", "forward", "log_worker", "typing", "dataloader.py"):
        assert absent not in f.estimate
    assert "no core is free" in f.remedy and "make __getitem__ cheaper" in f.remedy


def test_without_python_frames_it_says_how_to_get_them(tmp_path):
    # opscope record leaves stacks out by default: the finding says where the names of the hot code would come from
    f = advise(loader_trace(tmp_path), only=["input-pipeline"]).findings[0]
    assert "no Python frames" in f.estimate and "opscope record --stack" in f.estimate
    (tmp_path / "f").mkdir()
    g = advise(loader_trace(tmp_path / "f", frames=True), only=["input-pipeline"]).findings[0]
    assert "no Python frames" not in g.estimate


@pytest.mark.parametrize(("frame", "user"), [
    ("train_slow.py(23): __getitem__", True), ("/home/me/proj/data.py(5): load", True),
    ("torch/utils/data/dataloader.py(631): __next__", False), ("typing.py(2268): cast", False),
    ("json/decoder.py(10): decode", False), ("/usr/lib/python3.11/json/decoder.py(10): decode", False),
    ("/venv/lib/python3.11/site-packages/foo/bar.py(1): f", False), ("numpy/core/x.py(3): g", False),
    ("<built-in method stack of type object>", False), ("nn.Module: Linear_0", False)])
def test_user_frames_are_outside_libraries_and_the_standard_library(frame, user):
    assert is_user_frame(frame) is user


def test_host_cores_from_run_json():
    h = host_cores({"cpu": {"usable_cores": 4, "load_average": [1.6, 1, 1]}, "threads": {"intra_op": 2}})
    assert (h.cores, h.intra_op, h.load, h.others, h.free) == (4, 2, 1.6, 2, 0)
    assert host_cores({"cpu": {}}) is None and host_cores(None) is None


def test_hand_built_gpu_step_counts_only_the_idle_part_of_the_load(tmp_path):
    # step [0, 1000) us; loader [0, 300); the previous kernel runs [0, 100), the next one [350, 900):
    # the device idles 200 us of the 300 us load (and 50 us after it, which is not the loader's)
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300, cat="user_annotation"),
              x("cudaLaunchKernel", 310, 10, cat="cuda_runtime", correlation=2),
              x("k0", 0, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("k1", 350, 550, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2)]
    f = advise(open_trace(write_trace(tmp_path / "t.json", events)), only=["input-pipeline"]).findings
    assert len(f) == 1 and f[0].estimated_ns == 200_000
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


def test_a_loader_that_sleeps_gets_workers_without_a_free_core_and_their_saving_simulated():
    from support import make_trace, row

    # one 100 us step: the DataLoader 0-60 (sleeping 5-55 in a built-in), then 40 of training
    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 60),
        row("python", "<built-in function sleep>", 5, 50),
        row("cpu_op", "aten::mm", 60, 40),
    ])
    run = {"cpu": {"usable_cores": 2}, "threads": {"intra_op": 2}}  # no core free
    (f,) = advise(trace, run=run, only=["input-pipeline"]).findings
    assert "num_workers=2," in f.remedy and "mostly waits" in f.remedy
    # two workers: the main process waits max(0, 60/2 - 40) = 0: loader=0, the step 100 -> 40
    assert (f.change, f.saving_method, f.saving_ns) == ("loader=0", "simulated", 60_000)
    assert "83.3% of the DataLoader time is in built-ins that wait" in f.estimate


def test_a_loader_span_past_its_steps_end_counts_inside_the_step_only():
    from support import make_trace, row

    # steps [0, 100) and [100, 200) us; step 1's DataLoader span [20, 150) runs 50 us into step 2, whose own span
    # is [100, 110). A share of the step counted all 130 us of step 1's (130%); only 80 us lie inside it.
    trace = make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("user_annotation", LOADER, 20, 130),
        row("user_annotation", "ProfilerStep#2", 100, 100),
        row("user_annotation", LOADER, 160, 10),
        row("cpu_op", "aten::mm", 170, 20),
    ])
    (f,) = advise(trace, only=["input-pipeline"]).findings
    assert [(e["step"], e["dataloader_ns"], e["in_step_ns"], e["step_ns"], e["step_pct"]) for e in f.evidence] == \
        [(1, 130_000, 80_000, 100_000, 80.0), (2, 10_000, 10_000, 100_000, 10.0)]
