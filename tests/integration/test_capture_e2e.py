"""opscope record / opscope.profile / tune-threads, run on small real training scripts with torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.timing import limit

torch = pytest.importorskip("torch", reason="capture needs the torch extra")


from opscope.capture.threads import thread_grid  # noqa: E402
from opscope.ingest import open_trace  # noqa: E402

TRAIN = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    crash_at = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    for i in range(steps):
        if i == crash_at:
            raise ValueError("boom at step %d" % i)
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("threads", torch.get_num_threads(), torch.get_num_interop_threads())
    print("done")
    sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
""")

NO_OPTIMIZER = textwrap.dedent("""
    import sys, torch
    import opscope
    explicit = sys.argv[1] == "step"
    x = torch.randn(16, 16)
    for i in range(6):
        x = torch.tanh(x @ x)
        if explicit:
            opscope.step()
    print("finished")
""")


def opscope_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=limit(300))


@pytest.fixture
def train(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return script


def run_json(directory: Path) -> dict:
    return json.loads((directory / "run.json").read_text())


def step_numbers(trace_file: Path) -> list[int]:
    return open_trace(trace_file, use_cache=False).steps["step"].to_pylist()


def test_record_a_training_script(tmp_path, train, monkeypatch):
    out = tmp_path / "rec"
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "-o", str(out), "--", "python", str(train),
                        "6"], cwd=tmp_path, capture_output=True, text=True, timeout=limit(300),
                       env={**__import__("os").environ, "OMP_NUM_THREADS": "2", "NCCL_SECRET_TOKEN": "x"})
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout  # the program's own output passes through
    assert "Time by event kind" in r.stdout  # then the summary
    # steps 2-4 recorded, step 5 unrecorded (step 1 warmed up): record compares them, whatever the ratio; 3 steps
    # against 1 are too few for an interval, so no judgement either way
    assert "recorded steps ran" in r.stderr and "over 3 recorded steps vs" in r.stderr
    assert "too few steps to tell" in r.stderr
    info = run_json(out)
    assert info["status"] == "ok" and info["exit_code"] == 0
    assert info["steps"] == 6 and info["step_source"] == "optimizer.step()"
    assert info["recorded_steps"] == [2, 3, 4]  # step 0 waited, step 1 warmed up, then 3 active
    assert len(info["step_times_ns"]) == 5 and all(t > 0 for t in info["step_times_ns"])
    assert info["versions"]["torch"] == torch.__version__
    assert info["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["threads"]["intra_op"] >= 1
    assert info["environment"]["OMP_NUM_THREADS"] == "2"
    assert "NCCL_SECRET_TOKEN" not in info["environment"]
    assert info["command"] == ["python", str(train), "6"]
    assert info["traces"] == ["trace-1.pt.trace.json.gz"]
    trace = open_trace(out / "trace-1.pt.trace.json.gz", use_cache=False)
    assert trace.steps["step"].to_pylist() == [2, 3, 4]
    names = set(trace.events["name"].to_pylist())
    assert "aten::addmm" in names or "aten::linear" in names
    assert trace.events.filter(__import__("pyarrow.compute").compute.is_valid(trace.events["shapes"])).num_rows


def test_exit_code_and_crash_are_passed_on(tmp_path, train):
    r = opscope_cli("record", "-o", "a", "--", "python", str(train), "6", "-1", "3", cwd=tmp_path)
    assert r.returncode == 3
    assert run_json(tmp_path / "a")["exit_code"] == 3

    r = opscope_cli("record", "-o", "b", "--", "python", str(train), "8", "4", cwd=tmp_path)
    assert r.returncode == 1
    assert "ValueError: boom at step 4" in r.stderr  # the program's traceback
    assert "crashed" in r.stderr
    info = run_json(tmp_path / "b")
    assert info["status"] == "crashed" and info["crash"] == "ValueError: boom at step 4"
    # Steps 2 and 3 completed; step 4 was in progress when the program raised: all are kept.
    assert info["recorded_steps"] == [2, 3, 4]
    assert step_numbers(tmp_path / "b" / info["traces"][0]) == [2, 3, 4]


def test_program_that_never_steps_is_saved_as_one_window(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(NO_OPTIMIZER)
    r = opscope_cli("record", "-o", "r", "--", "python", str(script), "none", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "finished" in r.stdout
    assert "never stepped" in r.stderr
    info = run_json(tmp_path / "r")
    assert info["steps"] == 0 and info["recorded_steps"] == [0]
    trace = open_trace(tmp_path / "r" / info["traces"][0], use_cache=False)
    assert trace.events["name"].to_pylist().count("aten::tanh") == 6  # the whole run is there


def test_opscope_step_without_optimizer_and_module_target(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "infer.py").write_text(NO_OPTIMIZER)
    r = opscope_cli("record", "-o", "r", "--wait", "0", "--", "python", "-m", "mypkg.infer", "step", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = run_json(tmp_path / "r")
    assert info["step_source"] == "opscope.step()" and info["steps"] == 6
    assert info["recorded_steps"] == [1, 2, 3]  # wait 0, warmup 1 (step 0), active 3
    assert step_numbers(tmp_path / "r" / info["traces"][0]) == [1, 2, 3]


def test_thread_settings_are_applied_before_the_program(tmp_path, train):
    r = opscope_cli("record", "-o", "r", "--intra-op-threads", "1", "--inter-op-threads", "1", "--", "python",
                    str(train), "6", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "threads 1 1" in r.stdout
    assert run_json(tmp_path / "r")["threads"] == {"intra_op": 1, "inter_op": 1}


def test_too_few_steps_says_what_to_change(tmp_path, train):
    r = opscope_cli("record", "-o", "r", "--", "python", str(train), "2", cwd=tmp_path)
    assert r.returncode == 0
    assert "made only 2 steps" in r.stderr and "needs 5" in r.stderr


@pytest.mark.parametrize("args, problem", [
    (["--", "python", "missing.py"], "missing.py: no such script"),
    (["--", "python", "-m", "no_such_module_xyz"], "no_such_module_xyz"),
    (["--active", "0", "--", "python", "train.py"], "invalid schedule"),
    (["--wait", "-1", "--", "python", "train.py"], "invalid schedule"),
    (["--intra-op-threads", "0", "--", "python", "train.py"], "--intra-op-threads must be between"),
    (["--inter-op-threads", "5000", "--", "python", "train.py"], "--inter-op-threads must be between"),
    (["--", "ls", "-l"], "is not a Python program"),
    ([], "no program given"),
])
def test_bad_record_input_is_one_line_exit_2(tmp_path, train, args, problem):
    r = opscope_cli("record", "-o", "r", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and problem in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_module_that_fails_to_import_is_one_line_exit_2(tmp_path):
    (tmp_path / "needs_missing.py").write_text("import torch\nimport no_such_dependency_xyz\n")
    r = opscope_cli("record", "-o", "r", "--", "python", "-m", "needs_missing", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("opscope")]
    assert lines == [lines[0]] and "failed to import a module" in lines[0] and "no_such_dependency_xyz" in lines[0]
    assert "Traceback" not in r.stderr
    assert run_json(tmp_path / "r")["status"] == "import-error"


def test_profile_works_as_a_decorator(tmp_path):
    import opscope

    @opscope.profile(tmp_path / "d", wait=0, warmup=0, active=1, stack=False)
    def work():
        x = torch.ones(8, 8)
        for _ in range(2):
            x = x @ x
            opscope.step()

    work()
    info = run_json(tmp_path / "d")
    assert info["steps"] == 2 and info["step_source"] == "opscope.step()" and info["traces"]


def test_existing_recording_is_never_overwritten(tmp_path, train):
    first = tmp_path / "r"
    first.mkdir()
    (first / "run.json").write_text('{"mine": true}')
    r = opscope_cli("record", "-o", "r", "--", "python", str(train), "6", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((first / "run.json").read_text()) == {"mine": True}
    assert run_json(tmp_path / "r-1")["steps"] == 6
    assert "writing to" in r.stderr and "r-1" in r.stderr


def test_profile_api_and_load_as_polars(tmp_path):
    pl = pytest.importorskip("polars")
    import opscope

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with opscope.profile(tmp_path / "p", wait=0, warmup=0, active=2, stack=False) as p:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert [t.name for t in p.traces] == ["trace-1.pt.trace.json.gz"]
    loaded = opscope.load(tmp_path / "p")
    assert isinstance(loaded.events, pl.DataFrame)
    assert loaded.steps["step"].to_list() == [0, 1]
    assert loaded.run["recorded_steps"] == [0, 1] and loaded.run["status"] == "ok"
    ops = loaded.ops()
    assert "aten::addmm" in ops["name"].to_list()
    assert opscope.load(p.traces[0], frames="arrow").events.num_rows == loaded.events.height


def test_tune_threads_runs_the_grid(tmp_path, train):
    from opscope.threads import usable_cores

    r = opscope_cli("tune-threads", "--format", "json", "--repeat", "1", "--", "python", str(train), "6",
                    cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    grid = thread_grid(usable_cores())
    assert [row["setting"] for row in rows] == [s.label for s in grid]
    for row, setting in zip(rows[1:], grid[1:]):
        assert (row["intra_op_threads"], row["inter_op_threads"]) == (setting.intra, setting.inter)
    assert rows[0]["speedup"] == 1.0
    assert all(row["mean_step_ns"] > 0 and row["steps"] == 5 for row in rows)
    for row in rows:
        assert row["p10_step_ns"] <= row["median_step_ns"] <= row["p90_step_ns"] and 1 <= row["steps_used"] <= 5
    assert {row["verdict"] for row in rows[1:]} <= {"faster", "slower", "no difference", "too few runs to tell"}
    # a setting is named only when its interval says it beats the default
    faster = [row for row in rows if row["verdict"] == "faster"]
    if faster:
        assert f"best: {min(faster, key=lambda row: row['median_step_ns'])['setting']}" in r.stderr
    else:
        assert "best: no difference within the noise" in r.stderr


def test_default_options_trace_no_python_calls(monkeypatch, tmp_path):
    """What the runner passes to torch.profiler by default: no Python stacks (torch traces every Python call
    for them); --stack turns them on."""
    import torch.profiler

    from opscope.capture.session import Recording, RecordOptions

    seen: list[dict] = []
    real = torch.profiler.profile

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.profiler, "profile", spy)
    for options, stack in ((RecordOptions(), False), (RecordOptions(stack=True), True)):
        seen.clear()
        with Recording(tmp_path / f"stack-{stack}", options):
            torch.randn(4, 4).sum()
        assert seen and all(k["with_stack"] is stack for k in seen)
        assert all(k["record_shapes"] and k["profile_memory"] and k["with_flops"] for k in seen)


def test_profiler_stop_stays_out_of_the_last_optimizer_step(tmp_path, train):
    """The window is stopped and saved after optimizer.step() returns: the last Optimizer.step span ends before
    its ProfilerStep does (torch ends the step annotation, then stops), and no event but the profiler's own
    marker lies after the last step, so wall time ends there. (With --stack, the Python frames still open when
    the profiler stops end there, a few µs after the step.)"""
    import pyarrow.compute as pc

    from opscope.analyses.summary import summarize

    out = tmp_path / "rec"
    r = opscope_cli("record", "-o", str(out), "--", "python", str(train), "7", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = run_json(out)
    assert info["profiled_steps"] == [0, 1, 2, 3, 4] and info["profiler_ns"] > 0
    trace = open_trace(out / info["traces"][0], use_cache=False)
    last = trace.steps.to_pylist()[-1]
    step_end = last["ts_ns"] + last["dur_ns"]
    ev = trace.select(["kind", "name", "ts_ns", "dur_ns"])
    ends = pc.add(ev["ts_ns"], ev["dur_ns"])
    opt = [r for r in ev.append_column("end", ends).to_pylist() if r["name"].startswith("Optimizer.step#")]
    assert opt and opt[-1]["ts_ns"] >= last["ts_ns"] and opt[-1]["end"] <= step_end
    work = ev.append_column("end", ends).filter(pc.invert(pc.is_in(pc.cast(ev["kind"], "string"),
                                                                      value_set=__import__("pyarrow").array(
                                                                          ["profiler", "marker"]))))
    start = pc.min(work["ts_ns"]).as_py()
    assert pc.max(work["end"]).as_py() <= step_end
    assert summarize(trace).wall_ns == step_end - start
