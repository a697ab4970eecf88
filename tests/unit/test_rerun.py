"""advise --measure's re-runs, their pure parts: the changes the runner applies (on stand-ins for torch's classes, no
torch), the steady-state step time, the program a run.json names, and which findings get re-run; the loop on a
recorded program is in tests/integration/test_rerun_e2e.py."""

from __future__ import annotations

import sys
import types

import pytest

from opscope.advise.finding import Finding
from opscope.analyses.whatif import Change, parse_change
from opscope.capture.changes import ProgramChanges, apply
from opscope.capture.rerun import (
    MIN_STEPS,
    baseline,
    finding_changes,
    recorded_program,
    steady_state,
    warmup_steps,
    window_steps,
)
from opscope.errors import UsageError


class FakeLoader:
    """DataLoader's signature, as far as the patch reads it."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False):
        self.seen = {"dataset": dataset, "batch_size": batch_size, "num_workers": num_workers,
                     "pin_memory": pin_memory, "persistent_workers": persistent_workers,
                     "prefetch_factor": prefetch_factor}


class FakeRecordFunction:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fake_torch():
    """A module shaped like torch where the changes touch it; it counts what reaches the real calls."""
    calls = {"threads": [], "syncs": 0, "stream_syncs": 0}

    class Stream:
        def synchronize(self):
            calls["stream_syncs"] += 1

    def synchronize():
        calls["syncs"] += 1

    torch = types.SimpleNamespace(
        utils=types.SimpleNamespace(data=types.SimpleNamespace(DataLoader=type("DataLoader", (FakeLoader,), {}))),
        set_num_threads=lambda n: calls["threads"].append(n),
        autograd=types.SimpleNamespace(profiler=types.SimpleNamespace(
            record_function=type("record_function", (FakeRecordFunction,), {}))),
        cuda=types.SimpleNamespace(synchronize=synchronize, Stream=Stream, Event=None),
    )
    return torch, calls


def test_workers_and_pinning_replace_the_programs_own_arguments():
    torch, _ = fake_torch()
    done = apply(ProgramChanges(num_workers=3, persistent_workers=True, pin_memory=True), torch)
    assert done == ["DataLoader arguments {'num_workers': 3, 'persistent_workers': True, 'pin_memory': True}"]
    loader_cls = torch.utils.data.DataLoader
    # positional num_workers, keyword pin_memory, and the defaults: all replaced; the rest kept
    positional = loader_cls("data", 4, None, None, None, 0, None, False)
    assert positional.seen == {"dataset": "data", "batch_size": 4, "num_workers": 3, "pin_memory": True,
                               "persistent_workers": True, "prefetch_factor": None}
    assert loader_cls("d", batch_size=2, pin_memory=False).seen["pin_memory"] is True

    class Subclass(loader_cls):  # a loader of the program's own that calls DataLoader.__init__
        def __init__(self, dataset):
            super().__init__(dataset, batch_size=8)

    assert Subclass("d").seen["num_workers"] == 3


def test_no_workers_drops_the_arguments_torch_refuses_without_them():
    torch, _ = fake_torch()
    apply(ProgramChanges(num_workers=0, persistent_workers=True), torch)
    seen = torch.utils.data.DataLoader("d", num_workers=4, prefetch_factor=4).seen
    assert (seen["num_workers"], seen["persistent_workers"], seen["prefetch_factor"]) == (0, False, None)


def test_thread_count_is_set_and_held(capsys):
    torch, calls = fake_torch()
    apply(ProgramChanges(intra_op_threads=2), torch)
    torch.set_num_threads(8)  # the program's own call
    torch.set_num_threads(4)
    assert calls["threads"] == [2]
    assert capsys.readouterr().err.count("torch.set_num_threads(8) is ignored") == 1


def test_syncs_are_skipped_inside_the_named_region_only():
    torch, calls = fake_torch()
    apply(ProgramChanges(skip_sync_in="fetch"), torch)
    rf = torch.autograd.profiler.record_function
    with rf("fetch"), rf("inner"):
        torch.cuda.synchronize()
        torch.cuda.Stream().synchronize()
    assert calls == {"threads": [], "syncs": 0, "stream_syncs": 0}
    with rf("other"):
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    torch.cuda.Stream().synchronize()
    assert (calls["syncs"], calls["stream_syncs"]) == (2, 1)


def test_changes_are_checked_when_read():
    assert ProgramChanges.from_dict({"num_workers": 2, "pin_memory": None}) == ProgramChanges(num_workers=2)
    assert not ProgramChanges()
    assert ProgramChanges(num_workers=2, persistent_workers=True).describe() == \
        "DataLoader(num_workers=2, persistent_workers=True)"
    for bad in ({"num_workers": True}, {"num_workers": "2"}, {"num_workers": 5000}, {"rm": "-rf"}):
        with pytest.raises(UsageError):
            ProgramChanges.from_dict(bad)


def test_steady_state_means_windows_of_the_workers_batches():
    # two workers in step: a long wait, then a batch that is ready (the median of single steps would say 2 or 18)
    run = [50, 1, 1, 1, 1] + [18, 2] * 10
    changes = ProgramChanges(num_workers=2)
    assert (warmup_steps(changes), window_steps(changes)) == (12, 2)
    steady = steady_state([run], 5, window_steps(changes))
    assert (steady.step_ns, steady.p10_ns, steady.p90_ns, steady.steps) == (10, 10, 10, 20)
    assert steady_state([[10] * (MIN_STEPS - 1)], 0, 1) is None
    pooled = steady_state([[10] * 6, [20] * 6], 2, 1)  # 4 steps of each run
    assert (pooled.steps, pooled.step_ns, pooled.p10_ns, pooled.p90_ns) == (8, 15, 10, 20)


def test_baseline_is_the_recordings_unrecorded_steps():
    run = {"step_times_ns": [99, 30, 40, 40, 40, 10, 10, 12, 10, 11, 10, 10, 10],
           "profiled_steps": [0, 1, 2, 3, 4], "recorded_steps": [2, 3, 4]}
    steady = baseline(run)  # steps 5-13 (step n at index n - 1)
    assert (steady.steps, steady.step_ns) == (9, 10)


def test_recorded_program_reads_run_json(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("pass\n")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("SOME_SETTING", "kept")
    run = {"command": ["python", "train.py", "--lr", "1"], "cwd": str(tmp_path),
           "versions": {"executable": sys.executable}, "environment": {"MKL_NUM_THREADS": "1"},
           "options": {"wait": 2, "active": 4, "unknown": 1}}
    program = recorded_program(run)
    assert program.target.kind == "script" and program.target.value == "train.py"
    assert program.target.args == ["--lr", "1"] and program.target.interpreter == sys.executable
    assert program.cwd == tmp_path and program.command == "python train.py --lr 1"
    # the recorded performance variables replace this process's; the others are this process's
    assert program.env["MKL_NUM_THREADS"] == "1" and "OMP_NUM_THREADS" not in program.env
    assert program.env["SOME_SETTING"] == "kept"
    assert (program.options.wait, program.options.active) == (2, 4)
    for bad in (None, {"command": []}, {"command": ["python", "train.py"], "cwd": str(tmp_path / "gone")}):
        with pytest.raises(UsageError):
            recorded_program(bad)


def finding(rule, change=None, program_change=None):
    return Finding(rule=rule, title="t", saving_ns=1, saving_pct=1.0, estimate="e", remedy="r", change=change,
                   program_change=program_change, saving_method="simulated" if change else "estimated")


def test_a_program_that_cannot_be_re_run_leaves_the_findings_as_they_are(tmp_path):
    from opscope.capture.rerun import measure_findings

    found = [finding("input-pipeline", "loader=0.25", {"num_workers": 2})]
    run = {"command": ["python", "train.py"], "cwd": str(tmp_path / "gone")}
    out, notes = measure_findings(found, None, run)  # type: ignore[arg-type] (no trace is read)
    assert out == found and len(notes) == 1 and "is gone" in notes[0]
    out, notes = measure_findings([finding("dominant-op", "kernel:gemm=0.5")], None, run)  # type: ignore[arg-type]
    assert out[0].measured is None and "no finding has a change opscope can apply" in notes[0]


def test_which_findings_are_re_run():
    loader = finding("input-pipeline", "loader=0.25", {"num_workers": 2, "persistent_workers": True})
    assert finding_changes(loader, None) == (ProgramChanges(num_workers=2, persistent_workers=True), "loader=0.25")
    threads = finding("threads", None, {"intra_op_threads": 4})
    assert finding_changes(threads, None) == (ProgramChanges(intra_op_threads=4), None)
    sync = finding("host-sync", "sync=0")
    assert finding_changes(sync, None) is None  # the user names the region
    changes, change = finding_changes(sync, "fetch.batch")
    assert changes == ProgramChanges(skip_sync_in="fetch.batch") and change == r"sync:^fetch\.batch$=0"
    assert finding_changes(finding("dominant-op", "kernel:gemm=0.5"), None) is None


def test_whatif_sync_takes_a_region():
    assert parse_change("sync=0") == Change("sync", None, 0.0)
    assert parse_change("sync:^fetch$=0") == Change("sync", "^fetch$", 0.0)
    with pytest.raises(UsageError):
        parse_change("sync:(=0")
    with pytest.raises(UsageError):
        parse_change("loader:x=0")
