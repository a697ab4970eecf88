"""threads rule by hand: thread settings from run.json against the usable cores."""

from __future__ import annotations

from support.advise_threads import cpu_step, findings, recording, run_json
from support.tracefiles import x

from opscope.advise import advise

LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def settings(f):
    return {(e["setting"], e["value"]) for e in f.evidence}


def test_disagreeing_environment_and_underuse_on_a_cpu_bound_run(tmp_path):
    # ops run 80 of the 100 us: CPU-bound; 2 threads on 16 cores
    trace, run = recording(tmp_path, run_json(2, 16, env={"OMP_NUM_THREADS": "8"}), cpu_step(80))
    (f,) = findings(trace, run)
    assert settings(f) == {("intra_op", 2), ("OMP_NUM_THREADS", 8)}
    assert "run 80% of the time" in next(e["problem"] for e in f.evidence if e["setting"] == "intra_op")


def test_few_threads_on_a_run_that_mostly_waits_is_not_underuse(tmp_path):
    # ops run 30 of the 100 us: more threads would not help much
    trace, run = recording(tmp_path, run_json(2, 16), cpu_step(30))
    assert findings(trace, run) == []


def test_ranks_sharing_the_host(tmp_path):
    # 16 ranks, 8 GPUs on this host, 32 cores: 8 ranks x 32 threads
    header = {"distributedInfo": {"rank": 0, "world_size": 16, "backend": "nccl"}}
    trace, run = recording(tmp_path, run_json(32, 32, gpus=8), header=header)
    (f,) = findings(trace, run)
    assert settings(f) == {("processes", 8)}
    assert "OMP_NUM_THREADS=4" in f.change  # 32 cores / 8 ranks
    # LOCAL_WORLD_SIZE, when the environment has it, says how many share the host
    (tmp_path / "rec").rename(tmp_path / "old")
    trace, run = recording(tmp_path, run_json(8, 8, env={"LOCAL_WORLD_SIZE": "2"}))
    (f,) = findings(trace, run)
    assert settings(f) == {("processes", 2)} and "OMP_NUM_THREADS=4" in f.change
    # 4 threads each fit: 8 x 4 = 32
    (tmp_path / "rec").rename(tmp_path / "old2")
    trace, run = recording(tmp_path, run_json(4, 32, env={"OMP_NUM_THREADS": "4"}, gpus=8), header=header)
    assert findings(trace, run) == []
    # 1 thread each on a CPU-bound run leaves 24 of the 32 cores idle
    (tmp_path / "rec").rename(tmp_path / "old3")
    trace, run = recording(tmp_path, run_json(1, 32, gpus=8), cpu_step(80), header=header)
    (f,) = findings(trace, run)
    assert settings(f) == {("intra_op", 1)} and "torch.set_num_threads(4)" in f.change


def test_dataloader_workers_beside_a_cpu_bound_main_process(tmp_path):
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x(LOADER, 2, 8, cat="user_annotation"),
              x("aten::mm", 10, 85)]
    trace, run = recording(tmp_path, run_json(8, 8), events)
    (f,) = findings(trace, run)
    assert settings(f) == {("dataloader_workers", None)}
    assert "torch.set_num_threads(8 - num_workers)" in f.change
    # on a GPU run the main process's threads mostly wait for the device: not flagged
    (tmp_path / "rec").rename(tmp_path / "old")
    gpu = events + [x("cudaLaunchKernel", 20, 2, cat="cuda_runtime", correlation=1),
                    x("k", 30, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    trace, run = recording(tmp_path, run_json(8, 8), gpu)
    assert findings(trace, run) == []


def test_fitting_settings_and_no_run_info(tmp_path):
    trace, run = recording(tmp_path, run_json(4, 4, inter=4, env={"OMP_NUM_THREADS": "4"}))
    assert findings(trace, run) == []
    assert "no run.json" in advise(trace, only=["threads"]).not_applicable["threads"]
    assert "no run.json" in advise(trace, run={"command": ["x"]}, only=["threads"]).not_applicable["threads"]
