"""Whatever happens to the program or the disk, ``opscope record`` loses no recording,
overwrites none, never turns a profiler failure into the program's, and leaves what was saved findable."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.capture_faults import (
    API_PROGRAM,
    PROGRAM_EXIT,
    listing,
    opscope_lines,
    record_command,
    run,
    run_json,
    run_many,
    write_program,
)
from support.cli import assert_one_line_error, run_cli_many
from support.timing import limit

pytest.importorskip("torch", reason="capture needs the torch extra")

TRACE = "trace-1.pt.trace.json.gz"


def test_two_records_started_at_once_into_one_directory_never_share_it(tmp_path):
    script = write_program(tmp_path)
    # Each run's program gets its own arguments, so its run.json says which run it was.
    procs = [subprocess.Popen(record_command("rec", "none", str(tag), script=script), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in (100, 200)]
    results = [proc.communicate(timeout=limit(180)) for proc in procs]
    assert [proc.returncode for proc in procs] == [PROGRAM_EXIT, PROGRAM_EXIT], results
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["rec", "rec-1"]
    tags = sorted(run_json(tmp_path / name)["command"][-1] for name in ("rec", "rec-1"))
    assert tags == ["100", "200"]  # one run in each directory: neither overwrote the other's run.json
    for name in ("rec", "rec-1"):
        assert listing(tmp_path / name) == ["run.json", TRACE]
        assert run_json(tmp_path / name)["traces"] == [TRACE]
    # the run that lost the race says where it wrote instead
    assert any("rec is not empty (or not yours): writing to rec-1" in err for _, err in results)


def test_a_trace_the_profiler_cannot_write_stops_profiling_and_the_program_runs_on(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "fsize", "3", script=script), tmp_path)
    assert res.returncode == PROGRAM_EXIT, res.stderr  # the program's own exit code
    assert "program done after 8 steps" in res.stdout
    assert "Traceback" not in res.stderr
    stopped = [line for line in opscope_lines(res.stderr) if "the program runs on" in line]
    assert len(stopped) == 1 and "could not write its trace" in stopped[0], res.stderr
    info = run_json(tmp_path / "rec")
    assert info["status"] == "ok" and info["exit_code"] == PROGRAM_EXIT
    assert info["profiler_failed"].startswith("failed: ") and "could not write its trace" in info["profiler_failed"]
    assert info["traces"] == []
    # before: torch compressed its empty, failed export into a 31-byte trace-1 listed as good
    assert listing(tmp_path / "rec") == ["run.json"]


def test_no_space_while_saving_inside_optimizer_step_does_not_kill_the_program(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "enospc", "3", script=script), tmp_path)
    # before: the OSError came out of the program's optimizer.step() and ended it with a traceback, exit 1
    assert res.returncode == PROGRAM_EXIT, res.stderr
    assert "program done after 8 steps" in res.stdout
    assert "Traceback" not in res.stderr
    stopped = [line for line in opscope_lines(res.stderr) if "the program runs on" in line]
    assert stopped == ["opscope: profiling stopped, the program runs on: No space left on device (in rec); the "
                       "traces saved before are kept"]
    info = run_json(tmp_path / "rec")
    assert (info["status"], info["profiler_failed"], info["traces"]) == ("ok", "failed: No space left on device", [])
    assert info["steps"] == 8  # every step was still counted
    assert listing(tmp_path / "rec") == ["run.json"]  # no half-written trace, no staging directory


def test_os_exit_after_a_saved_window_leaves_the_trace_listed_and_advise_reads_it(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "exit", "7", script=script), tmp_path)
    assert res.returncode == 4, res.stderr
    assert "Traceback" not in res.stderr
    info = run_json(tmp_path / "rec")
    # before: run.json still said "running" and listed no trace, so advise said the recording held none
    assert (info["status"], info["exit_code"], info["traces"]) == ("exited", 4, [TRACE])
    assert any(f"windows saved before are complete: {TRACE} in rec" in line for line in opscope_lines(res.stderr))
    advised = run([sys.executable, "-m", "opscope.cli", "advise", "rec"], tmp_path)
    assert advised.returncode == 0, advised.stderr
    assert "holds no trace" not in advised.stderr


def test_readers_of_a_recording_whose_run_json_lists_no_trace_read_the_trace_files(tmp_path):
    (tmp_path / "api.py").write_text(API_PROGRAM)
    died = run([sys.executable, str(tmp_path / "api.py"), "rec"], tmp_path)
    assert died.returncode == 4, died.stderr
    assert run_json(tmp_path / "rec")["status"] == "running"  # nobody was left to finish it
    assert (tmp_path / "rec" / TRACE).is_file()
    advised = run([sys.executable, "-m", "opscope.cli", "advise", "rec"], tmp_path)
    # before: "rec: the recording holds no trace", exit 2
    assert advised.returncode == 0, advised.stderr
    assert (f"opscope: {Path('rec') / 'run.json'} lists no trace (status 'running': the program may have died "
            f"before it could); reading the trace files in the directory: {TRACE}") in advised.stderr
    assert advised.stdout.startswith(f"{Path('rec') / TRACE}: ")  # the advice of that trace


def test_a_segfault_after_a_saved_window_keeps_it_and_says_how_the_program_died(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "segv", "7", script=script), tmp_path)
    assert res.returncode == 128 + signal.SIGSEGV
    info = run_json(tmp_path / "rec")
    assert (info["status"], info["crash"], info["traces"]) == ("crashed", "killed by signal 11, SIGSEGV", [TRACE])
    assert listing(tmp_path / "rec") == ["run.json", TRACE]


def test_a_segfault_before_any_window_says_nothing_was_recorded(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "segv", "2", script=script), tmp_path)
    assert res.returncode == 128 + signal.SIGSEGV
    assert "Traceback" not in res.stderr
    assert opscope_lines(res.stderr) == [
        "opscope: the program ended abruptly (killed by signal 11, SIGSEGV) before the first recorded window was "
        "saved: nothing was recorded into rec (exit code 139); record fewer steps (--wait, --warmup, --active) to "
        "save a window before that point"]
    info = run_json(tmp_path / "rec")
    assert (info["status"], info["traces"]) == ("crashed", [])
    assert res.stdout == ""  # no summary of a trace that does not exist


def test_output_paths_that_cannot_hold_a_recording_give_one_line(tmp_path):
    script = write_program(tmp_path)
    (tmp_path / "afile").write_text("keep")
    bad = {".": "not empty", "/": "not empty", str(tmp_path / "afile" / "sub"): "afile is not a directory",
           "/sys/opscope-test-output": "cannot create the output directory"}
    # `-o .` is the test's own directory, which holds prog.py
    results = run_many([record_command(out, "none", "0", script=script) for out in bad], tmp_path)
    for (out, words), res in zip(bad.items(), results):
        assert_one_line_error(res, Path(out), words)
    assert (tmp_path / "afile").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "prog.py"]


def test_an_output_path_with_brackets_is_used_as_given(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("a[/]b", "none", "0", script=script), tmp_path)
    assert res.returncode == PROGRAM_EXIT, res.stderr
    assert (tmp_path / "a[" / "]b" / TRACE).is_file()
    assert f"into a[/]b: {TRACE} + run.json" in res.stderr  # printed literally, not read as markup


def test_demo_into_a_place_that_cannot_hold_it_gives_one_line(tmp_path):
    (tmp_path / "afile").write_text("keep")
    results = run_cli_many([("demo", "--steps", "1", "--output", str(tmp_path / "afile" / "sub")),
                            ("demo", "--steps", "1", "--output", "/sys/opscope-test-output")], cache=tmp_path / "c")
    assert_one_line_error(results[0], tmp_path / "afile" / "sub", "afile is not a directory")
    assert_one_line_error(results[1], Path("/sys/opscope-test-output"), "cannot create the output directory")


def test_a_full_disk_for_the_trace_and_run_json_says_how_the_program_ended(tmp_path):
    script = write_program(tmp_path)
    res = run(record_command("rec", "full", "3", script=script), tmp_path)
    assert res.returncode == PROGRAM_EXIT, res.stderr
    assert "program done after 8 steps" in res.stdout and "Traceback" not in res.stderr
    # before: record took the program for one that ended at once (os._exit) and wrote a run.json without the step
    # times or why profiling stopped
    assert "os._exit" not in res.stderr and "abruptly" not in res.stderr
    lines = opscope_lines(res.stderr)
    assert "opscope: cannot update rec/run.json (No space left on device); the traces in that directory are " \
           "complete" in lines
    assert lines[-1] == "opscope: the program's side could not write rec/run.json (No space left on device); " \
                        "opscope record wrote it"
    assert any(line.startswith("opscope: 8 steps (optimizer.step()), exit code 3") for line in lines)
    assert "opscope: profiling stopped early (failed: No space left on device): only the traces listed above are " \
           "complete" in lines
    info = run_json(tmp_path / "rec")
    assert (info["status"], info["exit_code"], info["crash"]) == ("ok", PROGRAM_EXIT, None)
    assert (info["profiler_failed"], info["traces"], info["steps"]) == ("failed: No space left on device", [], 8)
    assert len(info["step_times_ns"]) == 7
    assert info["saved_by"] == "opscope record: the program's side could not write run.json (No space left on device)"
    assert listing(tmp_path / "rec") == ["run.json"]


def test_when_no_side_can_write_run_json_the_last_line_says_so(tmp_path, monkeypatch):
    import errno
    import os

    from typer.testing import CliRunner

    import opscope.capture.launch as launch
    from opscope.cli import app

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    script = write_program(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch, "write_json_atomic", full)  # opscope record's own writer: the disk is still full
    res = CliRunner().invoke(app, ["record", "-o", "rec", "--", sys.executable, str(script), "full", "3"])
    assert res.exit_code == PROGRAM_EXIT, res.output
    lines = opscope_lines(res.stderr)
    assert "os._exit" not in res.stderr and "abruptly" not in res.stderr
    assert lines[-1] == ("opscope: neither the program's side (No space left on device) nor opscope record (No space "
                         "left on device) could write rec/run.json: it still says the program is running; the lines "
                         "above say how it ended")
    assert any(line.startswith("opscope: 8 steps (optimizer.step()), exit code 3") for line in lines)
    assert run_json(tmp_path / "rec")["status"] == "running"


def test_file_names_with_control_characters_are_spelled_out_in_every_line(tmp_path):
    script = write_program(tmp_path)
    name = "rec\x1b[31m\x07red"
    # the child's line (profiling stopped ... in DIR: torch's exporter cannot write under such a name either) and
    # the parent's (recorded ... into DIR); then an error naming a script whose name holds a newline
    res = run(record_command(name, "enospc", "3", script=script), tmp_path)
    bad = run([sys.executable, "-m", "opscope.cli", "record", "-o", "x", "--", sys.executable,
               "no\x1b]0;t\x07\nopscope: forged.py"], tmp_path)
    assert res.returncode == PROGRAM_EXIT, res.stderr
    lines = opscope_lines(res.stderr)  # torch's own lines on the program's stderr are not opscope's
    assert not any("\x1b" in line or "\x07" in line for line in lines), lines
    spelled = r"rec\x1b[31m\x07red"
    assert any(line.startswith("opscope: profiling stopped, the program runs on: ") and f"(in {spelled})" in line
               for line in lines), lines
    assert any(line.startswith("opscope: 8 steps") and line.endswith(f"into {spelled}: no trace + run.json")
               for line in lines), lines
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [r"opscope: error: no\x1b]0;t\x07\x0aopscope: forged.py: no such script"]
    assert run_json(tmp_path / name)["profiler_failed"].startswith("failed: ")
