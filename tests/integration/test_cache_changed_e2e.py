"""Through the command line: a cache entry truncated or written in place from outside while a command reads it is
one error line naming the file, exit code 2, and the next run rebuilds the entry and prints what the trace says;
never SIGBUS (exit 135, no word) nor a traceback. Without the C guard (OPSCOPE_NATIVE=0) the command reads its
own copy of the tables, which the change does not reach: it prints what the trace says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache import entry_of, padded_events
from support.cli import assert_one_line_error, run_cli_many
from support.timing import limit
from support.tracefiles import write_trace

from opscope.model import mapped

ROOT = Path(__file__).resolve().parents[2]

#: ``opscope ARGS`` with the events file of the cache entry changed (HOW) right after the command's first read of
#: its columns, as another process could
CHANGED_UNDER = """
import sys
from pathlib import Path
from support.cache import change_in_place
from opscope.model import trace as model

how = sys.argv.pop(1)
read = model.Trace.select

def select(self, names):
    columns = read(self, names)  # read and checked
    entry = self.metadata.get("from_cache")
    if entry and not getattr(model, "_changed", False):
        model._changed = True
        change_in_place(Path(entry) / "events.arrow", how)
    return columns

model.Trace.select = select
from opscope.cli import main
sys.argv = ["opscope", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_an_entry_changed_under_a_command_is_one_error_then_rebuilt(tmp_path, cache_dir, how, native):
    trace = write_trace(tmp_path / "t.json", padded_events())
    uncached, first = run_cli_many([("ops", str(trace), "-f", "json", "--no-cache"),
                                    ("ops", str(trace), "-f", "json")], cache=cache_dir)
    assert uncached.returncode == 0 and first.returncode == 0, (uncached.stderr, first.stderr)
    assert first.stdout == uncached.stdout and '"aten::pad"' in uncached.stdout
    events = entry_of(trace, cache_dir) / "events.arrow"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
           "OPSCOPE_CACHE_DIR": str(cache_dir), "OPSCOPE_NATIVE": native}
    changed = subprocess.run([sys.executable, "-c", CHANGED_UNDER, how, "ops", str(trace), "-f", "json"],
                             capture_output=True, text=True, env=env, timeout=limit(120))
    if native == "1" and mapped._guard is not None:
        word = "was truncated" if how == "truncate" else "changed"
        assert_one_line_error(changed, events, f"events.arrow {word} while it was read", "run the command again")
        assert not events.parent.exists()  # removed: the next run parses the trace again
    else:
        assert (changed.returncode, changed.stderr) == (0, ""), changed.stderr
        assert changed.stdout == uncached.stdout
    (again,) = run_cli_many([("ops", str(trace), "-f", "json")], cache=cache_dir)
    assert (again.returncode, again.stdout) == (0, uncached.stdout), again.stderr
