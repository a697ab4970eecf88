"""The parent's last word on a recording: when the program ended without the runner writing its final
``run.json`` (a segfault, ``os._exit``, SIGKILL, a full disk), ``opscope record`` writes it, so that what
was saved stays findable: every complete trace file in the directory and how the program ended.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from opscope.analyses.recording import saved_traces


def how_it_ended(exit_code: int) -> tuple[str, str]:
    """(status, crash) for a program whose runner did not finish: killed by signal n (exit code 128+n, as
    :func:`opscope.capture.launch.run_child` returns it) or exited at once (``os._exit``)."""
    if exit_code > 128:
        number = exit_code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return "crashed", f"killed by signal {number}, {name}"
    return "exited", f"exit code {exit_code} without Python's shutdown, e.g. os._exit"


def finalised(info: dict[str, Any] | None, directory: Path, exit_code: int) -> dict[str, Any] | None:
    """``info`` (the run.json the program's side left) completed after the program ended, or None when it
    needs nothing: the runner finished it, or the program never started (no ``started``)."""
    if not info or info.get("status") != "running" or "started" not in info:
        return None
    status, crash = how_it_ended(exit_code)
    recorded = info.get("traces")
    listed: list[str] = [n for n in recorded if isinstance(n, str)] if isinstance(recorded, list) else []
    traces = list(dict.fromkeys([*listed, *saved_traces(directory)]))
    return {**info, "status": status, "exit_code": exit_code, "crash": crash, "traces": traces,
            "finalised_by": "opscope record: the program ended before opscope could save run.json",
            "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
