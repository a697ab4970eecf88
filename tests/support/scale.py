"""Tiny module-level task functions for the executor tests (a worker imports them by name)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from opscope.errors import TraceError
from support.timing import limit


def square(x: int) -> int:
    return x * x


def raise_on_3(x: int) -> int:
    """``x * x``, but item 3 raises the way a bad rank file does."""
    if x == 3:
        raise TraceError(f"rank-{x}.json", "truncated JSON at byte 120", "the file was cut short")
    if x == 4:
        raise ValueError("four is not allowed\nsecond line is not shown")
    return x * x


def die_on_2(x: int) -> int:
    """``x * x``, but the worker running item 2 dies every time (exit code 9)."""
    if x == 2:
        os._exit(9)
    return x * x


def die_once(item: tuple[int, str]) -> int:
    """``x * x``; the first run of an item whose marker path is given kills its worker and leaves the marker,
    so the retry succeeds."""
    x, marker = item
    if marker and not Path(marker).exists():
        Path(marker).write_text("died once")
        os._exit(9)
    return x * x


def sigkill_on_1(x: int) -> int:
    """``x * x``, but the worker running item 1 is killed by SIGKILL (as the OOM killer does)."""
    if x == 1:
        os.kill(os.getpid(), 9)
        time.sleep(10)
    return x * x


def pid_and_cache(x: int) -> tuple[int, int, str | None]:
    """The worker's process id and the cache directory it was given."""
    return x, os.getpid(), os.environ.get("OPSCOPE_CACHE_DIR")


def sleep_then_square(x: int) -> int:
    time.sleep(0.2)
    return x * x


def bounded(call, seconds: float = 60.0):
    """``call()``, failing the test instead of hanging it when it takes longer than ``seconds`` on an idle machine
    (scaled: support.timing) (the executor must never hang: a daemon thread runs it, so a stuck one does not keep
    pytest from exiting either)."""
    import threading

    seconds = limit(seconds)
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"still running after {seconds:.0f} s: the executor hung")
    if "error" in box:
        raise box["error"]
    return box["value"]


def summarize_unless_rank_2(task):
    """The job's per-rank task, but the worker reading a file named rank-2* dies (as an out-of-memory kill would)."""
    from opscope.scale.rank_task import summarize_rank

    if Path(task.path).name.startswith("rank-2"):
        os._exit(9)
    return summarize_rank(task)
