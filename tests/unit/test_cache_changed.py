"""A cache entry changed from outside while a process reads it (truncated, or written in place): the analysis that
read it is a one-line error naming the file, and the next open rebuilds the entry; never SIGBUS, never a number
computed from other bytes than those checked. Without the C guard the tables are the process's own copy, so the
change does not reach them at all. Each case runs in a child process: SIGBUS would end it, not the test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache import padded_events
from support.timing import limit
from support.tracefiles import write_trace

from opscope.model import mapped

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from pathlib import Path
import pyarrow.compute as pc
from support.cache import change_in_place
from opscope.errors import TraceError
from opscope.ingest import open_trace
from opscope.model.memo import memoized

path, how = Path(sys.argv[1]), sys.argv[2]
open_trace(path)  # parses and writes the entry
trace = open_trace(path)  # from the entry
events = Path(trace.metadata["from_cache"]) / "events.arrow"
out = {"events": str(events)}

@memoized()
def total(trace):
    durations = trace.select(["dur_ns"])["dur_ns"]  # read (and checked) before the change
    change_in_place(events, how)  # from outside, while the analysis reads the column
    return pc.sum(durations).as_py()

try:
    out["total"] = total(trace)
except TraceError as exc:
    out["error"] = str(exc)
again = open_trace(path)
out["again"] = pc.sum(again.select(["dur_ns"])["dur_ns"]).as_py()
out["again_cached"] = bool(again.metadata.get("from_cache"))
print(json.dumps(out))
"""


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_an_entry_changed_under_a_reading_process_is_an_error_then_a_rebuild(tmp_path, how, native):
    events = padded_events()
    expected = sum(e["dur"] for e in events if e.get("ph") == "X") * 1000  # ns, from the events written
    path = write_trace(tmp_path / "t.json", events)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
           "OPSCOPE_CACHE_DIR": str(tmp_path / "cache"), "OPSCOPE_NATIVE": native}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), how], capture_output=True, text=True, env=env,
                          timeout=limit(120))
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7: killed by SIGBUS
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if native == "1" and mapped._guard is not None:
        error = got.get("error", "")
        assert "\n" not in error and error.startswith(got["events"]), got
        word = "was truncated" if how == "truncate" else "changed"
        assert f"events.arrow {word} while it was read" in error and "run the command again" in error, got
        assert "total" not in got
        assert got["again"] == expected and got["again_cached"] is False  # removed: parsed again, a new entry
    else:  # read into memory: the process's own bytes, checked, which the change does not reach
        assert "error" not in got and got["total"] == expected, got
        assert got["again"] == expected
