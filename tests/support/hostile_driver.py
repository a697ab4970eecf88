"""Run every table command on one file in this process, as ``opscope`` would run it, and report each run.

``python hostile_driver.py FILE GOOD COMMANDS_JSON FORMATS RESULTS`` (started by :func:`support.hostile_run.run_file`):
one process per file pays the imports once; each command runs through ``opscope.cli.main`` with its own argv and
captured stdout/stderr, so an exception escaping ``main`` is exactly a traceback the user would see. A line
``{"start": ...}`` goes to RESULTS before each run and the run's verdict after it, so the parent that kills a hung
child knows which command hung. The process's peak owned memory so far is in each verdict (``peak_kb``): its
anonymous memory (``RssAnon``), sampled every 2 ms by a thread (the pages of a mapped cache file are the kernel's
page cache, not the command's: RSS would count them).

Each command's work is bounded in CPU seconds (``ITIMER_PROF``: every thread's CPU time, not the wall clock, so a
busy machine does not trip it); a command that waits without working is caught by the parent's wall-clock limit.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `import support`

from opscope.runtime import tune_command

tune_command()  # as the command's entry does, before anything imports pyarrow (support.hostile_corpus does)

from opscope.cli import main  # noqa: E402
from support.hostile_corpus import Run, problems  # noqa: E402


class _CommandTimeoutError(Exception):
    pass


def _alarm(signum, frame):
    raise _CommandTimeoutError


class _OwnedPeak:
    """The largest ``RssAnon`` seen (kB), sampled every 2 ms on a daemon thread (a spike shorter than that can be
    missed)."""

    def __init__(self) -> None:
        self.peak = self.now()
        threading.Thread(target=self._sample, name="owned-peak", daemon=True).start()

    @staticmethod
    def now() -> int:
        with open("/proc/self/status") as fh:
            return int(re.search(r"RssAnon:\s*(\d+)", fh.read()).group(1))  # type: ignore[union-attr]

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.now())
            time.sleep(0.002)

    def kb(self) -> int:
        self.peak = max(self.peak, self.now())
        return self.peak


def run_one(args: list[str], fmt: str, file: str, cpu_seconds: int) -> Run:
    argv = [*args] if fmt == "table" else [*args, "--format", fmt]
    out, err = io.StringIO(), io.StringIO()
    rc, tb = 0, ""
    sys.argv = ["opscope", *argv]
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _CommandTimeoutError:
        rc, tb = -1, f"timeout: still running after {cpu_seconds} s of CPU time"
    except BaseException:
        rc, tb = 1, traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    run = Run(file=file, args=argv, fmt=fmt, rc=rc, seconds=time.perf_counter() - start, stdout=out.getvalue(),
              stderr=err.getvalue(), traceback=tb)
    run.problems = problems(run)
    return run


def main_driver() -> None:
    file, good, commands_json, formats, results, cpu_seconds = sys.argv[1:7]
    commands = json.loads(commands_json)
    signal.signal(signal.SIGPROF, _alarm)
    owned = _OwnedPeak()
    with open(results, "a", encoding="utf-8") as log:
        log.write(json.dumps({"startup_kb": owned.kb()}) + "\n")
        log.flush()
        for command in commands:
            args = [a.replace("{file}", file).replace("{good}", good) for a in command]
            for fmt in formats.split(","):
                log.write(json.dumps({"start": args, "fmt": fmt}) + "\n")
                log.flush()
                run = run_one(args, fmt, file, int(cpu_seconds))
                log.write(json.dumps({"args": run.args, "fmt": fmt, "rc": run.rc, "seconds": round(run.seconds, 3),
                                      "peak_kb": owned.kb(), "problems": run.problems,
                                      "stderr": run.stderr[-500:]}) + "\n")
                log.flush()


if __name__ == "__main__":
    main_driver()
