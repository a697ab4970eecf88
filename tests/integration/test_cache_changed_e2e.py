"""Through the command line: a cache entry truncated or written in place from outside while a command reads it is
one error line naming the file, exit code 2, and the next run rebuilds the entry and prints what the trace says;
never SIGBUS (exit 135, no word) nor a traceback. Without the C guard (OPSCOPE_NATIVE=0) the command reads its
own copy of the tables, which the change does not reach: it prints what the trace says. Changed before the command
starts, the entry is rebuilt with one warning line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache import change_in_place, entry_of, padded_events
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


#: ``opscope ARGS`` with the events file of the cache entry changed (HOW) at POINT: ``opened`` (the entry opened and
#: its events file mapped and checked, no column read yet) or ``read`` (right after the command's first read of columns)
CHANGED_AT = """
import sys
from pathlib import Path
from support.cache import change_in_place
from opscope.model import trace as model
from opscope.store import entry as store

point, how = sys.argv.pop(1), sys.argv.pop(1)

def change(entry):
    if entry and not getattr(model, "_changed", False):
        model._changed = True
        change_in_place(Path(entry) / "events.arrow", how)

if point == "opened":
    load = store.load

    def opened(*args, **kwargs):
        trace = load(*args, **kwargs)
        change(trace and trace.metadata.get("from_cache"))
        return trace

    store.load = opened
else:
    read = model.Trace.select

    def select(self, names):
        columns = read(self, names)
        change(self.metadata.get("from_cache"))
        return columns

    model.Trace.select = select
from opscope.cli import main
sys.argv = ["opscope", *sys.argv[1:]]
main()
"""

#: commands that read the events in place, each to its end: the findings, the idle causes, SQL run by DuckDB
READERS = {"advise": ("advise", "T"), "gpu --idle": ("gpu", "T", "--idle"),
           "query": ("query", "T", "select count(*), sum(dur_ns), sum(ts_ns), max(parent) from events", "-f", "csv")}


@pytest.fixture(scope="module")
def padded_trace(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The padded trace (its events mapped, not read into memory) and each READERS command's output without the
    cache."""
    root = tmp_path_factory.mktemp("padded")
    trace = write_trace(root / "t.json", padded_events())
    runs = run_cli_many([_argv(name, trace) + ("--no-cache",) for name in READERS], cache=root / "unused")
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    return trace, {name: run.stdout for name, run in zip(READERS, runs)}


def _argv(name: str, trace: Path) -> tuple[str, ...]:
    return tuple(str(trace) if arg == "T" else arg for arg in READERS[name])


@pytest.mark.parametrize("point,how", [("before", "truncate"), ("opened", "truncate"), ("opened", "overwrite"),
                                       ("read", "truncate"), ("read", "overwrite")])
@pytest.mark.parametrize("name", list(READERS))
def test_an_entry_changed_before_or_while_a_command_reads_it_is_never_a_signal(tmp_path, padded_trace, name, point,
                                                                                how):
    trace, uncached = padded_trace
    cache = tmp_path / "cache"
    argv = _argv(name, trace)
    (first,) = run_cli_many([argv], cache=cache)  # parses the trace and writes the entry
    assert (first.returncode, first.stdout) == (0, uncached[name]), first.stderr
    events = entry_of(trace, cache) / "events.arrow"
    assert events.stat().st_size > mapped.MAP_FROM_BYTES  # mapped, not read into memory
    if point == "before":
        change_in_place(events, how)
        (changed,) = run_cli_many([argv], cache=cache)
        assert changed.returncode == 0 and changed.stdout == uncached[name], changed.stderr
        lines = changed.stderr.strip("\n").splitlines()
        assert len(lines) == 1 and "cache entry was corrupt (events.arrow" in lines[0], changed.stderr
        assert lines[0].endswith("rebuilt from the trace"), lines[0]
    else:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
               "OPSCOPE_CACHE_DIR": str(cache)}
        changed = subprocess.run([sys.executable, "-c", CHANGED_AT, point, how, *argv], capture_output=True, text=True,
                                 env=env, timeout=limit(120))
        assert changed.returncode >= 0, (changed.returncode, changed.stderr)  # -7: SIGBUS
        if mapped._guard is not None:
            assert_one_line_error(changed, events, "events.arrow", "while it was read", "run the command again")
            assert not events.parent.exists()  # removed: the next run parses the trace again
        else:  # read into memory when opened: the change does not reach the command's own copy
            assert (changed.returncode, changed.stdout, changed.stderr) == (0, uncached[name], "")
    (again,) = run_cli_many([argv], cache=cache)
    assert (again.returncode, again.stdout, again.stderr) == (0, uncached[name], "")
