"""Run the ``opscope`` command in child processes and check its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.timing import limit


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return run_cli_many([args], cache=cache)[0]


def run_cli_many(commands: list[tuple[str, ...]], cache: Path) -> list[subprocess.CompletedProcess]:
    """Run ``opscope`` commands side by side: each start costs ~1 s of imports, mostly waiting."""
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-m", "opscope.cli", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for args in commands]
    results = []
    for args, proc in zip(commands, procs):
        out, err = proc.communicate(timeout=limit(60))
        results.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return results


def assert_one_line_error(res: subprocess.CompletedProcess, path: Path, *words: str) -> str:
    """Exit code 2, nothing on stdout, one stderr line naming the file and holding ``words``."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "RecursionError" not in res.stderr, res.stderr
    lines = res.stderr.strip("\n").splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("opscope: error: "), line
    assert str(path) in line, line
    for word in words:
        assert word.lower() in line.lower(), (word, line)
    assert res.stdout == ""
    return line
