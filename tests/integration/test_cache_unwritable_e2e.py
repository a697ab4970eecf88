"""Through the command line: a cache directory that cannot take an entry (a file in its place, a path under
/dev/null, a read-only directory, a disk that fills while the entry is written) gives the command's output all the
same, exit 0, and one warning line naming the directory and why nothing was cached; never a traceback, and nothing
half written is published."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache import padded_events
from support.cli import run_cli
from support.timing import limit
from support.tracefiles import write_trace

#: what the disk holds in the "full" case: the small tables fit, the events (4 MB) do not
FULL_AT = 256 << 10


def _limited(cache: Path, *args: str) -> subprocess.CompletedProcess:
    """``opscope ARGS`` in a process that may write no file past FULL_AT bytes (as a disk that fills: the write fails
    with EFBIG, which Python takes as an error, not the signal)."""
    import resource

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_AT, FULL_AT))

    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "OPSCOPE_CACHE_DIR": str(cache)}, preexec_fn=limit_files,
                          timeout=limit(60))


@pytest.fixture(scope="module")
def padded(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("padded")
    trace = write_trace(root / "t.json", padded_events())
    uncached = run_cli("kernels", str(trace), "-f", "json", "--no-cache", cache=root / "unused")
    assert uncached.returncode == 0, uncached.stderr
    return trace, uncached.stdout


@pytest.mark.parametrize("where", ["a file", "under /dev/null", "read-only", "full"])
def test_an_unwritable_cache_is_one_warning_and_the_same_output(tmp_path, padded, where):
    trace, uncached = padded
    cache = tmp_path / "cache"
    why = {"a file": "not a directory", "under /dev/null": "Not a directory", "read-only": "Permission denied",
           "full": "File too large"}[where]
    if where == "a file":
        cache.write_text("not a directory")
    elif where == "under /dev/null":
        cache = Path("/dev/null/opscope-cache")
    elif where == "read-only":
        cache.mkdir()
        cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
        if os.access(cache, os.W_OK):  # root writes anyway (test_cache_unwritable: a read-only mount's answer)
            pytest.skip("this user writes into a read-only directory")
    else:
        cache.mkdir()
    args = ("kernels", str(trace), "-f", "json")
    done = _limited(cache, *args) if where == "full" else run_cli(*args, cache=cache)
    assert (done.returncode, done.stdout) == (0, uncached), done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip("\n").splitlines()
    assert lines == [f"opscope: warning: nothing was cached in {cache} ({why}); the next command reads the trace "
                     "again (set OPSCOPE_CACHE_DIR to a writable directory, or pass --no-cache)"], done.stderr
    if cache.is_dir():
        assert list(cache.iterdir()) == []  # nothing published, no draft left
    again = run_cli(*args, "--no-cache", cache=cache)  # --no-cache: nothing to say
    assert (again.returncode, again.stdout, again.stderr) == (0, uncached, "")
