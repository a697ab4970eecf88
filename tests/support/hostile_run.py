"""Run the table commands on hostile files, one child process per file: each command bounded in CPU seconds
(``command_cpu_s``), each file in wall-clock seconds (``file_timeout``, an idle machine's figure scaled by
:func:`support.timing.limit`).

The child is :mod:`support.hostile_driver`; its verdicts come back through a JSON-lines file, so a child killed
for overrunning its budget still tells which command it was running. The peak is the child's owned memory (its
``RssAnon``, sampled: :class:`support.hostile_driver._OwnedPeak`) up to each run's end; the start-up amount is what
the child owned after its imports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from support.timing import limit

DRIVER = Path(__file__).with_name("hostile_driver.py")


@dataclass
class FileResult:
    file: Path
    runs: list[dict] = field(default_factory=list)
    startup_kb: int = 0
    peak_kb: int = 0
    seconds: float = 0.0
    hung: str = ""  # the command running when the budget ran out
    child_rc: int = 0
    child_stderr: str = ""

    def problems(self) -> list[str]:
        found = [f"{' '.join(r['args'][:1])} [{r['fmt']}]: {p}" for r in self.runs for p in r["problems"]]
        if self.hung:
            found.append(f"killed after {self.seconds:.0f} s while running: {self.hung}")
        elif self.child_rc != 0:
            found.append(f"driver exited {self.child_rc}: {self.child_stderr[-500:]}")
        return found


def run_file(file: Path, good: Path, commands, formats, cache: Path, command_cpu_s: int,
             file_timeout: float) -> FileResult:
    results = file.parent / f".{file.name}.results.jsonl"
    results.unlink(missing_ok=True)
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(cache), "COLUMNS": "200"}
    args = [sys.executable, str(DRIVER), str(file), str(good), json.dumps(commands), ",".join(formats), str(results),
            str(command_cpu_s)]
    start = time.monotonic()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    res = FileResult(file)
    try:
        _, stderr = proc.communicate(timeout=limit(file_timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        res.hung = "?"
    res.seconds = time.monotonic() - start
    res.child_rc = proc.returncode
    res.child_stderr = stderr.decode("utf-8", "replace")
    last_start = None
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        rec = json.loads(line)
        if "startup_kb" in rec:
            res.startup_kb = rec["startup_kb"]
        elif "start" in rec:
            last_start = rec
        else:
            last_start = None
            res.runs.append(rec)
            res.peak_kb = max(res.peak_kb, rec["peak_kb"])
    if res.hung and last_start is not None:
        res.hung = f"{' '.join(last_start['start'])} [{last_start['fmt']}]"
    results.unlink(missing_ok=True)
    return res


def run_corpus(files: list[Path], good: Path, commands, formats, cache_root: Path, command_cpu_s: int = 60,
               file_timeout: float = 300, jobs: int = 2) -> list[FileResult]:
    """Every command x format on every file; a cache of its own per file (the first command fills it)."""
    def one(i_file):
        i, file = i_file
        return run_file(file, good, commands, formats, cache_root / str(i), command_cpu_s, file_timeout)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, enumerate(files)))
