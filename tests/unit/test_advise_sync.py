"""host-sync rule on hand-built traces with exact numbers: blocking calls inside steps, what they cost, and the op
and Python frame that made them."""

from __future__ import annotations

import re

from support.advise_sync import findings
from support.tracefiles import write_trace, x

from opscope.advise import advise
from opscope.ingest import open_trace

# --- hand-built, exact ------------------------------------------------------------------------------------------

def item_step() -> list[dict]:
    """Step [0, 1000) µs. Kernel A [20, 300) (launched at 10), kernel B [510, 600) (launched at 500).
    `if t:` at train.py(12) -> aten::is_nonzero > aten::item > aten::_local_scalar_dense > cudaStreamSynchronize
    [60, 340) (its Stream Sync record names device 0); torch.cuda.synchronize() at train.py(20) ->
    cudaDeviceSynchronize [450, 460). Not counted: a cudaEventQuery with its Event Sync record (a query does not
    block), a Stream Wait Event record (the device waits, not the host), a sync after the step."""
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("train.py(12): step", 0, 900, cat="python_function"),
        x("torch/_tensor.py(1087): __bool__", 50, 300, cat="python_function"),
        x("<built-in method item of Tensor object at 0x7f>", 53, 295, cat="python_function"),
        x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
        x("aten::is_nonzero", 54, 292),
        x("aten::item", 55, 290),
        x("aten::_local_scalar_dense", 56, 288),
        x("cudaStreamSynchronize", 60, 280, cat="cuda_runtime", correlation=10),
        x("Stream Sync", 61, 278, cat="cuda_sync", pid=0, tid=7, device=0, stream=7, correlation=10),
        x("train.py(20): log", 440, 40, cat="python_function"),
        x("cudaDeviceSynchronize", 450, 10, cat="cuda_runtime", correlation=11),
        x("cudaEventQuery", 470, 2, cat="cuda_runtime", correlation=12),
        x("Event Sync", 470, 2, cat="cuda_sync", pid=0, tid=7, device=0, stream=-1, correlation=12),
        x("Stream Wait Event", 480, 1, cat="cuda_sync", pid=0, tid=7, device=0, stream=7, correlation=13),
        x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", correlation=2),
        x("A", 20, 280, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("B", 510, 90, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
        x("cudaDeviceSynchronize", 1100, 10, cat="cuda_runtime", correlation=14),
    ]


def test_hand_built_syncs_exact(tmp_path):
    f = findings(write_trace(tmp_path / "t.json", item_step()))
    assert len(f) == 1
    first, second = f[0].evidence
    # cudaStreamSynchronize [60, 340): the device ran A until 300 (drained 240), then idled to 340 with nothing
    # queued (40); idle after it from 340 until B at 510, cut at the next sync (450): 110, at most 240 -> 150
    assert first == {"step": 1, "at_ns": 60_000, "device": 0, "call": "cudaStreamSynchronize",
                     "op": "aten::is_nonzero > aten::item > aten::_local_scalar_dense",
                     "python": "train.py(12): step",  # not the built-in method nor torch/_tensor.py
                     "wait_ns": 280_000, "drained_ns": 240_000, "idle_during_ns": 40_000, "idle_after_ns": 110_000,
                     "cost_ns": 150_000}
    # cudaDeviceSynchronize [450, 460): nothing running or queued (B is launched at 500): 10 idle; it drained
    # nothing, so none of the 50 idle after it counts
    assert (second["call"], second["op"], second["python"]) == ("cudaDeviceSynchronize", None, "train.py(20): log")
    assert (second["drained_ns"], second["idle_during_ns"], second["idle_after_ns"], second["cost_ns"]) == \
        (0, 10_000, 50_000, 10_000)
    # [300, 340) + [340, 450) + [450, 460): 160 µs of the 1000 µs step
    assert f[0].estimated_ns == 160_000
    assert "1 blocking call" not in f[0].title and "2 blocking call(s) per step" in f[0].title
    assert f[0].remedy.index(".item()") < f[0].remedy.index("torch.cuda.synchronize()")


def test_queued_work_waiting_on_something_else_is_not_blamed_on_the_sync(tmp_path):
    # kernel A is launched at 10 but starts only at 400 (waiting on another stream, say): the host's
    # cudaStreamSynchronize [60, 500) waits for it, yet a sync-free host could not have fed the device sooner.
    # C runs first and starts right after its launch, so the device's state at the window's start is known
    # (without it, A's wait would make [0, 400) unseen busy: see test_gpu_unseen)
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=3),
              x("C", 5, 3, cat="kernel", pid=0, tid=8, device=0, stream=8, correlation=3),
              x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
              x("cudaStreamSynchronize", 60, 440, cat="cuda_runtime", correlation=10),
              x("cudaLaunchKernel", 600, 5, cat="cuda_runtime", correlation=2),
              x("A", 400, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("B", 620, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2)]
    f = findings(write_trace(tmp_path / "t.json", events))
    row = f[0].evidence[0]
    assert (row["drained_ns"], row["idle_during_ns"], row["idle_after_ns"]) == (100_000, 0, 120_000)
    assert row["cost_ns"] == f[0].estimated_ns == 100_000  # min(120, 100): the drained queue only


def test_the_record_names_the_device_waited_for(tmp_path):
    # device 0 idles through the sync, device 1 is busy; the Stream Sync record says the host waited for device 1
    events = [x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
              x("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
              x("cudaLaunchKernel", 15, 2, cat="cuda_runtime", correlation=2),
              x("cudaStreamSynchronize", 100, 300, cat="cuda_runtime", correlation=10),
              x("Stream Sync", 101, 298, cat="cuda_sync", pid=1, tid=9, device=1, stream=9, correlation=10),
              x("a0", 20, 30, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
              x("a1", 20, 350, cat="kernel", pid=1, tid=9, device=1, stream=9, correlation=2),
              x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", correlation=3),
              x("b1", 520, 100, cat="kernel", pid=1, tid=9, device=1, stream=9, correlation=3)]
    f = findings(write_trace(tmp_path / "t.json", events))
    row = f[0].evidence[0]
    # device 1: busy [100, 370) of the wait, idle [370, 400); idle after until b1 at 520: 120, at most 270
    assert (row["device"], row["drained_ns"], row["idle_during_ns"], row["idle_after_ns"], row["cost_ns"]) == \
        (1, 270_000, 30_000, 120_000, 150_000)
    assert f[0].estimated_ns == 150_000 and "on GPU 1" in f[0].title


def test_no_sync_inside_the_steps_no_finding_and_cpu_traces_not_applicable(tmp_path):
    events = [e for e in item_step() if not re.search(r"Synchronize|Sync$", e["name"])]
    events.append(x("cudaDeviceSynchronize", 1100, 10, cat="cuda_runtime", correlation=14))  # after the step
    assert findings(write_trace(tmp_path / "t.json", events)) == []
    t = open_trace(write_trace(tmp_path / "c.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                                                     x("aten::item", 10, 5)]))
    assert "no GPU" in advise(t, only=["host-sync"]).not_applicable["host-sync"]
