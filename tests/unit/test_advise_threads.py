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
    assert "OMP_NUM_THREADS=4" in f.remedy  # 32 cores / 8 ranks
    # LOCAL_WORLD_SIZE, when the environment has it, says how many share the host
    (tmp_path / "rec").rename(tmp_path / "old")
    trace, run = recording(tmp_path, run_json(8, 8, env={"LOCAL_WORLD_SIZE": "2"}))
    (f,) = findings(trace, run)
    assert settings(f) == {("processes", 2)} and "OMP_NUM_THREADS=4" in f.remedy
    # 4 threads each fit: 8 x 4 = 32
    (tmp_path / "rec").rename(tmp_path / "old2")
    trace, run = recording(tmp_path, run_json(4, 32, env={"OMP_NUM_THREADS": "4"}, gpus=8), header=header)
    assert findings(trace, run) == []
    # 1 thread each on a CPU-bound run leaves 24 of the 32 cores idle
    (tmp_path / "rec").rename(tmp_path / "old3")
    trace, run = recording(tmp_path, run_json(1, 32, gpus=8), cpu_step(80), header=header)
    (f,) = findings(trace, run)
    assert settings(f) == {("intra_op", 1)} and "torch.set_num_threads(4)" in f.remedy


def test_dataloader_workers_beside_a_cpu_bound_main_process(tmp_path):
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x(LOADER, 2, 8, cat="user_annotation"),
              x("aten::mm", 10, 85)]
    trace, run = recording(tmp_path, run_json(8, 8), events)
    (f,) = findings(trace, run)
    assert settings(f) == {("dataloader_workers", None)}
    assert "torch.set_num_threads(8 - num_workers)" in f.remedy
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


def test_a_loaded_host_leaves_fewer_cores_for_the_intra_op_threads(tmp_path):
    # 2 usable cores, torch's default of 2 intra-op threads, load 3.1 from other processes when the program
    # started: round(3.1) = 3 cores' worth of other threads, 2 + 3 > 2, so the suggestion is max(1, 2 - 3) = 1
    trace, run = recording(tmp_path, run_json(2, 2, load=3.1))
    f = findings(trace, run)[0]
    assert [(e["setting"], e["value"], e["load_average"]) for e in f.evidence] == [("host_load", 3.1, 3.1)]
    assert "load average 3.10" in f.evidence[0]["problem"] and "torch.set_num_threads(1)" in f.remedy
    # 8 cores, 4 threads, load 2.6 -> 3 busy: 4 + 3 <= 8, quiet; load 4.5 -> 4 (round half to even): 4 + 4 = 8,
    # quiet; load 4.6 -> 5: 4 + 5 > 8, suggest 8 - 5 = 3
    for load, expected in ((2.6, None), (4.5, None), (4.6, 3)):
        (tmp_path / "rec").rename(tmp_path / f"old{load}")
        trace, run = recording(tmp_path, run_json(4, 8, inter=4, load=load))
        got = findings(trace, run)
        if expected is None:
            assert got == []
        else:
            assert f"torch.set_num_threads({expected})" in got[0].remedy
    # already at the threads that fit (1, as opscope demo picks on a loaded host): nothing to change, no finding
    (tmp_path / "rec").rename(tmp_path / "fits")
    trace, run = recording(tmp_path, run_json(1, 2, inter=1, load=3.1))
    assert findings(trace, run) == []
    # the same 2-core run on an idle host (load 0.3): settings fit, no finding
    (tmp_path / "rec").rename(tmp_path / "idle")
    trace, run = recording(tmp_path, run_json(2, 2, load=0.3))
    assert findings(trace, run) == []


def test_underuse_does_not_count_the_cores_a_loaded_host_keeps_busy(tmp_path):
    # CPU-bound (ops 80 of 100 us), 2 threads on 16 cores: underuse on an idle host (2 < 50% of 16)...
    trace, run = recording(tmp_path, run_json(2, 16, load=0.0), cpu_step(80))
    assert settings(findings(trace, run)[0]) == {("intra_op", 2)}
    # ...but with load 12 from other processes 16 - 12 = 4 cores are left, and 2 threads are half of them
    (tmp_path / "rec").rename(tmp_path / "old")
    trace, run = recording(tmp_path, run_json(2, 16, load=12.0), cpu_step(80))
    assert findings(trace, run) == []
