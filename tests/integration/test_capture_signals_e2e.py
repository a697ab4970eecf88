"""opscope record never hijacks the program's signals or exit code, and keeps what it measured whichever signal
ends the program."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.timing import limit

pytest.importorskip("torch", reason="capture needs the torch extra")

# Writes its pid to ready.txt, then waits; a KeyboardInterrupt is noted in caught.txt and re-raised.
# argv[1] "kill": the program kills itself with SIGKILL instead of waiting.
PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    here = Path(__file__).parent
    if sys.argv[1:] == ["kill"]:
        os.kill(os.getpid(), signal.SIGKILL)
    (here / "ready.txt").write_text(str(os.getpid()))
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        (here / "caught.txt").write_text("yes")
        raise
""")


# Trains 6 optimizer steps (the default schedule saves its window at the 5th), writes its pid to ready.txt, then
# waits; whatever ends it is noted in ended.txt (the `finally` runs).
STEPPING = textwrap.dedent("""
    import os, time
    from pathlib import Path
    import torch
    here = Path(__file__).parent
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(6):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    (here / "ready.txt").write_text(str(os.getpid()))
    try:
        time.sleep(120)
    finally:
        (here / "ended.txt").write_text("yes")
""")


def _start(tmp_path: Path, *args: str, program: str = PROGRAM) -> subprocess.Popen:
    script = tmp_path / "prog.py"
    script.write_text(program)
    return subprocess.Popen([sys.executable, "-m", "opscope.cli", "record", "-o", str(tmp_path / "rec"),
                             str(script), *args], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_ready(tmp_path: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + limit(120)
    while not (tmp_path / "ready.txt").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.1)
    time.sleep(0.3)  # past the write, into the sleep
    return int((tmp_path / "ready.txt").read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigint_to_opscope_reaches_the_program(tmp_path):
    proc = _start(tmp_path)
    _wait_ready(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=limit(120))
    assert (tmp_path / "caught.txt").read_text() == "yes"  # the program's own handler ran
    assert proc.returncode == 130  # what a shell gives for an interrupted program


def test_sigterm_to_opscope_is_forwarded_and_gives_128_plus_15(tmp_path):
    proc = _start(tmp_path)
    pid = _wait_ready(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=limit(120))
    assert proc.returncode == 128 + signal.SIGTERM
    deadline = time.monotonic() + limit(10)
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)  # not orphaned


def test_a_program_killed_by_a_signal_gives_128_plus_n(tmp_path):
    proc = _start(tmp_path, "kill")
    proc.communicate(timeout=limit(120))
    assert proc.returncode == 128 + signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_that_ends_the_program_keeps_its_step_times_and_trace(tmp_path, sig):
    # before: SIGTERM (and SIGHUP) killed the runner at once: run.json said "killed by signal 15", with no step times
    proc = _start(tmp_path, program=STEPPING)
    _wait_ready(tmp_path, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=limit(120))
    assert proc.returncode == 128 + sig, err
    assert (tmp_path / "ended.txt").read_text() == "yes"  # the program's `finally` ran
    info = json.loads((tmp_path / "rec" / "run.json").read_text())
    assert info["steps"] == 6 and len(info["step_times_ns"]) == 5  # steps 1-5 ended (step 0 is start-up)
    assert info["traces"] == ["trace-1.pt.trace.json.gz"] and info["recorded_steps"] == [2, 3, 4]
    assert (tmp_path / "rec" / "trace-1.pt.trace.json.gz").is_file()
    assert info["exit_code"] == 128 + sig and "finalised_by" not in info
    if sig == signal.SIGINT:
        assert (info["status"], info["crash"]) == ("interrupted", "KeyboardInterrupt")
    else:
        assert (info["status"], info["crash"]) == ("terminated", signal.Signals(sig).name)
        lines = [line for line in err.decode().splitlines() if line.startswith("opscope:")]
        assert f"opscope: the program was asked to end ({signal.Signals(sig).name}); what was recorded so far is " \
               "saved, and its step times" in lines, err
