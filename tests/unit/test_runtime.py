"""Process tuning (``opscope.runtime``): nothing on import; one call tunes the process (the command at its entry, a
library user by choice); the heap is trimmed only in a tuned process and only while opscope works, so a process that
holds a loaded trace and does nothing uses no CPU; programs opscope starts do not inherit the choices."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

from opscope import runtime

SRC = Path(__file__).resolve().parents[2] / "src"


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (tuning is for a process's life) and return the JSON it prints last."""
    base = {k: v for k, v in os.environ.items() if k not in (runtime.ARROW_POOL_ENV, "OPSCOPE_TUNING_OFF")}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(SRC), **(env or {})}, timeout=limit(120))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


REPORT = """
def report(**extra):
    import json, os, sys, typer.core
    import pyarrow as pa
    print(json.dumps({"env": os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), "pool": pa.default_memory_pool().backend_name,
                      "mimalloc": pa.mimalloc_memory_pool().max_memory(), "numpy": sys.modules.get("numpy", 0) is None,
                      "typer": getattr(typer.core._TyperParameter.get_runtime_param, "_opscope_fast", False), **extra}))
"""


def test_importing_opscope_tunes_nothing():
    got = _python(REPORT + """
import opscope, opscope.api, opscope.cli, opscope.runtime
from opscope.ingest import open_trace
report(tuned=opscope.runtime.tuned())
""")
    assert got["env"] is None and got["pool"] != "system"  # Arrow's own default
    assert got["typer"] is False and got["numpy"] is False and got["tuned"] is False


def test_tune_before_pyarrow_puts_all_of_arrow_on_the_c_library_allocator():
    got = _python(REPORT + """
import opscope.runtime
opscope.runtime.tune()
import pyarrow as pa
pa.table({"k": [1, 2, 1] * 1000, "v": list(range(3000))}).group_by("k").aggregate([("v", "sum")])  # Acero
report(child=opscope.runtime.ARROW_POOL_ENV in opscope.runtime.child_environment())
""")
    assert (got["env"], got["pool"], got["mimalloc"]) == ("system", "system", 0)
    assert got["child"] is False  # a program opscope starts gets the environment without the choice
    assert got["typer"] is False  # the library call leaves typer alone


def test_tune_after_pyarrow_sets_pyarrows_pool():
    got = _python(REPORT + """
import pyarrow
import opscope.runtime
opscope.runtime.tune()
report()
""")
    assert got["env"] is None and got["pool"] == "system"


THP = """
import subprocess, sys
def said(text):  # /proc/PID/status says THP_enabled (Linux 5.0 on)
    found = [line.split()[1] for line in text.splitlines() if line.startswith("THP_enabled:")]
    return int(found[0]) if found else None
initial = said(open("/proc/self/status").read())
import ctypes
asked = ctypes.CDLL(None).prctl(42, 0, 0, 0, 0)  # PR_GET_THP_DISABLE: -1 where the kernel does not answer it
def huge_pages():  # this process's and a child's
    own = said(open("/proc/self/status").read())
    import opscope.runtime
    with opscope.runtime.starting_programs():
        child = subprocess.run([sys.executable, "-c", "print(open('/proc/self/status').read())"],
                               capture_output=True, text=True).stdout
    return {"initial": initial, "own": own, "child": said(child), "after": said(open("/proc/self/status").read()),
            "asked": asked}
"""


def _says_huge_pages() -> bool:
    return sys.platform == "linux" and "THP_enabled:" in Path("/proc/self/status").read_text()


@pytest.mark.skipif(not _says_huge_pages(), reason="the kernel does not say a process's huge-page setting")
@pytest.mark.parametrize("when", ["after", "before", "off"])
def test_huge_pages_are_turned_off_only_when_tuned_after_pyarrow_and_come_back_for_programs_started(when):
    # Arrow's own pool (mimalloc, chosen as pyarrow loaded) asks for huge pages: only a process tuned after pyarrow
    # loaded uses that pool, and there tune() turns them off; a program opscope starts gets the setting as it was
    got = _python(REPORT + THP + f"""
when = {when!r}
if when == "before":
    import opscope.runtime
    opscope.runtime.tune()
import pyarrow
if when != "before":
    import opscope.runtime
    opscope.runtime.tune()
report(**huge_pages())
""", env={"OPSCOPE_TUNING_OFF": "hugepages"} if when == "off" else None)
    if got["asked"] < 0:
        pytest.skip("this kernel does not answer prctl(PR_GET_THP_DISABLE): opscope leaves the setting alone")
    assert got["child"] == got["initial"]  # a program opscope starts: as this process was before tune()
    assert got["own"] == got["after"] == (0 if when == "after" else got["initial"])


def test_a_chosen_allocator_is_kept_and_passed_on():
    got = _python(REPORT + """
import opscope.runtime
opscope.runtime.tune()
report(child=opscope.runtime.child_environment()[opscope.runtime.ARROW_POOL_ENV])
""", env={runtime.ARROW_POOL_ENV: "jemalloc"})
    assert (got["env"], got["pool"], got["child"]) == ("jemalloc", "jemalloc", "jemalloc")


def test_the_command_tunes_its_process_at_its_entry(tmp_path):
    # the console script: the command's own process (cli.app.is_command_process); a table command leaves numpy out
    trace = write_trace(tmp_path / "t.json", small_gpu_trace())
    script = tmp_path / "opscope"
    script.write_text(REPORT + "import atexit, sys\natexit.register(report)\n"
                      "sys.argv = ['opscope', 'kernels', sys.argv[1], '-f', 'json']\n"
                      "from opscope.cli.__main__ import main\n")
    base = {k: v for k, v in os.environ.items() if k != runtime.ARROW_POOL_ENV}
    done = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(SRC)}, timeout=limit(120))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert (got["env"], got["pool"], got["mimalloc"]) == ("system", "system", 0)
    assert got["typer"] is True and got["numpy"] is True  # typer's values without pydantic; numpy left out


@pytest.mark.parametrize(("code", "status", "said"), [(None, 0, ""), (3, 3, ""), ("no trace", 1, "no trace")])
def test_the_command_exits_with_its_code_its_exit_functions_run_and_its_output_flushed(tmp_path, code, status, said):
    # exit_command skips the interpreter's teardown, not what the command wrote or registered
    mark = tmp_path / "atexit-ran"
    script = (f"import atexit, pathlib, sys\nfrom opscope import runtime\n"
              f"atexit.register(lambda: pathlib.Path({str(mark)!r}).write_text('yes'))\n"
              f"sys.stdout.write('partial line, not flushed')\nruntime.exit_command({code!r})\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=limit(60))
    assert (done.returncode, done.stdout, done.stderr.strip()) == (status, "partial line, not flushed", said)
    assert mark.read_text() == "yes"


def test_the_command_waits_for_a_thread_still_running_as_the_interpreter_does(tmp_path):
    script = ("import sys, threading, time\nfrom opscope import runtime\n"
              "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', flush=True))).start()\n"
              "runtime.exit_command(4)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=limit(60))
    assert (done.returncode, done.stdout) == (4, "thread done\n")


def test_a_program_that_calls_main_is_not_tuned(tmp_path):
    trace = write_trace(tmp_path / "t.json", small_gpu_trace())
    got = _python(REPORT + """
import sys
from opscope.cli import main
sys.argv = ["opscope", "kernels", sys.argv[1], "-f", "json"]
try:
    main()
except SystemExit:
    pass
report()
""", str(trace))
    assert got["env"] is None and got["pool"] != "system" and got["typer"] is False and got["numpy"] is False


def test_stage_done_trims_a_tuned_process_only(monkeypatch):
    trims: list[int] = []
    monkeypatch.setattr(runtime, "_trim_heaps", lambda: trims.append(1))
    monkeypatch.setattr(runtime, "_tuned", False)
    runtime.stage_done()
    assert trims == []
    monkeypatch.setattr(runtime, "_tuned", True)
    runtime.stage_done()
    assert trims == [1]


def test_the_heap_is_trimmed_when_anonymous_memory_grew_by_the_threshold(monkeypatch):
    g = runtime.TRIM_GROWTH_BYTES >> 20
    # MiB, one per look
    sizes = iter([100, 100 + g - 1, 100 + g // 2, 100 + g, 100 + g // 4, 60, 60 + g - 1, 60 + g, 70])
    trims = []
    monkeypatch.setattr(runtime, "anonymous_bytes", lambda: next(sizes) << 20)
    monkeypatch.setattr(runtime, "_trim_heaps", lambda: trims.append(1))
    trimmer = runtime.HeapTrimmer()  # floor 100
    trimmer()  # grew g - 1
    trimmer()  # g / 2 over
    assert trims == []
    trimmer()  # grew g -> trim, the floor is what is left (g / 4 over)
    assert trims == [1]
    trimmer()  # 60: the floor follows memory down
    trimmer()  # g - 1 over the floor
    assert trims == [1]
    trimmer()  # g over -> trim (70 left)
    assert trims == [1, 1]


TRIMMER = """
import ctypes, json
from opscope import runtime

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
trimmer = runtime.HeapTrimmer()
blocks = [libc.malloc(64 << 10) for _ in range(2048)]  # 128 MiB in the heap (under the mmap threshold)
for block in blocks:
    ctypes.memset(block, 1, 64 << 10)
pinned = libc.malloc(64 << 10)  # above them: the heap's top cannot shrink past it
held = runtime.anonymous_bytes()
for block in blocks:
    libc.free(block)  # free, but resident: glibc keeps them below the pinned block
trimmer()  # grew by more than TRIM_GROWTH_BYTES: trims
after = runtime.anonymous_bytes()
libc.free(pinned)
print(json.dumps({"held": held, "after": after}))
"""


@pytest.mark.skipif(runtime.anonymous_bytes() is None or not sys.platform.startswith("linux"),
                    reason="glibc's heap and /proc/self/statm")
def test_the_trimmer_hands_back_freed_heap_pages_under_a_live_block():
    # in a fresh process: one that ran other tests holds freed heap the blocks would reuse without growing
    got = _python(TRIMMER)
    assert got["held"] is not None and got["after"] is not None and got["held"] - got["after"] >= 100 << 20


def test_the_heap_is_watched_only_while_an_analysis_runs_in_a_tuned_process(monkeypatch):
    monkeypatch.setattr(runtime, "_watch", None)
    monkeypatch.setattr(runtime, "_tuned", False)
    with runtime.working():
        assert runtime._watch is None  # not tuned: no thread
    monkeypatch.setattr(runtime, "_tuned", True)
    looks = []
    monkeypatch.setattr(runtime.HeapTrimmer, "__call__", lambda self: looks.append(1))
    with runtime.working(), runtime.working():  # nested and on several threads: counted
        watch = runtime._watch
        assert watch is not None and watch._running == 2
        deadline = limit(10)
        start = time.monotonic()
        while not looks:
            assert time.monotonic() - start < deadline, "the heap was never looked at"
            time.sleep(0.01)
    assert watch._running == 0


IDLE = """
import json, sys, time
import pyarrow  # first, as a notebook that used Arrow before opscope
import opscope
if sys.argv[2] == "tuned":
    import opscope.runtime
    opscope.runtime.tune()
opscope.load(sys.argv[1], frames="arrow")  # parses and writes the cache entry
loaded = opscope.load(sys.argv[1], frames="arrow")  # from the cache: its tables read in place
loaded.kernels()
loaded.gpu_breakdown()

def cpu_ticks():
    with open("/proc/self/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime of every thread, in clock ticks

time.sleep(0.2)  # (a watch that saw the analysis end looks once more within 10 ms, then waits)
before = cpu_ticks()
time.sleep(2)
print(json.dumps({"before": before, "after": cpu_ticks()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/stat")
@pytest.mark.parametrize("how", ["plain", "tuned"])
def test_a_process_holding_a_loaded_trace_uses_no_cpu_while_idle(tmp_path, how):
    # a work bound, not a timing: while the process sleeps, no thread of it runs (ticks of 10 ms; the threads that
    # released mapped pages every 2 ms and looked at the heap every 10 ms used 0.20-0.27 s per 5 s)
    trace = write_trace(tmp_path / "t.json", small_gpu_trace())
    got = _python(IDLE, str(trace), how, env={"OPSCOPE_CACHE_DIR": str(tmp_path / "cache")})
    # at most the one tick its own wake-up may be charged on a busy machine (the threads it had used 20-27 a second)
    assert got["after"] - got["before"] <= 1


def test_library_code_never_calls_the_c_library_allocator():
    # malloc_trim and mallopt belong to the runtime's tuning, which a process asks for; the library only marks its
    # stages (runtime.stage_done, runtime.working)
    package = SRC / "opscope"
    calls = [str(p.relative_to(package)) for p in package.rglob("*.py")
             if p != package / "runtime" / "__init__.py" and re.search(r"(malloc_trim|mallopt)\s*\(", p.read_text())]
    assert calls == []
