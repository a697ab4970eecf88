"""The command process's choice of Arrow's allocator (``sysmem.prefer_system_allocator``): made only before pyarrow
loads and only where the person running opscope did not choose; never passed on to programs opscope starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.timing import limit

from opscope import sysmem


def test_the_choice_is_made_before_pyarrow_and_not_passed_on(monkeypatch):
    monkeypatch.setenv(sysmem.ARROW_POOL_ENV, "any")  # so that the test's own setting is undone after it
    monkeypatch.delenv(sysmem.ARROW_POOL_ENV)
    monkeypatch.setattr(sysmem, "_pool_set_here", False)
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)  # as in a fresh command process
    sysmem.prefer_system_allocator()
    assert os.environ[sysmem.ARROW_POOL_ENV] == "system"
    assert sysmem.ARROW_POOL_ENV not in sysmem.child_environment()
    assert sysmem.child_environment({"A": "1", sysmem.ARROW_POOL_ENV: "system"}) == {"A": "1"}


def test_a_users_choice_is_kept_and_passed_on(monkeypatch):
    monkeypatch.setenv(sysmem.ARROW_POOL_ENV, "jemalloc")
    monkeypatch.setattr(sysmem, "_pool_set_here", False)
    sysmem.prefer_system_allocator()
    assert os.environ[sysmem.ARROW_POOL_ENV] == "jemalloc"
    assert sysmem.child_environment()[sysmem.ARROW_POOL_ENV] == "jemalloc"


def test_the_command_process_allocates_with_the_system_allocator(tmp_path):
    # The whole command: its Arrow work outside pyarrow's pool (Acero's group-by) goes to the C library's allocator
    code = ("import sys, atexit\n"
            "def report():\n"
            "    import pyarrow as pa\n"
            "    print(pa.mimalloc_memory_pool().max_memory(), pa.default_memory_pool().backend_name)\n"
            "atexit.register(report)\n"
            "sys.argv = ['opscope', 'ops', sys.argv[1], '-f', 'json']\n"
            "from opscope.cli.__main__ import main\n")
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, '
                     '"dur": 2}]}')
    script = tmp_path / "opscope"  # run as the console script: the command process
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != sysmem.ARROW_POOL_ENV}
    env["OPSCOPE_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, env=env,
                          timeout=limit(120))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "system"]


def test_the_heap_is_trimmed_when_anonymous_memory_grew_by_the_threshold(monkeypatch):
    g = sysmem.TRIM_GROWTH_BYTES >> 20
    sizes = iter([100, 100 + g - 1, 120, 100 + g, 110, 60, 60 + g - 1, 60 + g, 70])  # MiB, one per look
    trims = []
    monkeypatch.setattr(sysmem, "anonymous_bytes", lambda: next(sizes) << 20)
    monkeypatch.setattr(sysmem, "release_free_memory", lambda: trims.append(1))
    trimmer = sysmem.HeapTrimmer()  # floor 100
    trimmer()  # grew g - 1
    trimmer()  # 120
    assert trims == []
    trimmer()  # grew g -> trim, the floor is what is left (110)
    assert trims == [1]
    trimmer()  # 60: the floor follows memory down
    trimmer()  # g - 1 over the floor
    assert trims == [1]
    trimmer()  # g over -> trim (70 left)
    assert trims == [1, 1]


@pytest.mark.skipif(sysmem.anonymous_bytes() is None or not sys.platform.startswith("linux"),
                    reason="glibc's heap and /proc/self/statm")
def test_the_trimmer_hands_back_freed_heap_pages_under_a_live_block():
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    trimmer = sysmem.HeapTrimmer()
    blocks = [libc.malloc(64 << 10) for _ in range(2048)]  # 128 MiB in the heap (under the mmap threshold)
    for block in blocks:
        ctypes.memset(block, 1, 64 << 10)
    pinned = libc.malloc(64 << 10)  # above them: the heap's top cannot shrink past it
    held = sysmem.anonymous_bytes()
    for block in blocks:
        libc.free(block)  # free, but resident: glibc keeps them below the pinned block
    trimmer()  # grew by more than TRIM_GROWTH_BYTES: trims
    after = sysmem.anonymous_bytes()
    libc.free(pinned)
    assert held is not None and after is not None and held - after >= 100 << 20
