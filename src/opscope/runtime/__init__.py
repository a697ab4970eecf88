"""Process tuning: every setting opscope makes to the process it runs in, in one place, applied only when asked.

Nothing here happens on import. The ``opscope`` command applies it at its entry (:func:`tune_command`, from
``cli.app.main``); a program or notebook that uses opscope as a library applies the memory part with one call,
:func:`tune`, before it imports pyarrow::

    import opscope.runtime
    opscope.runtime.tune()
    import pyarrow, polars  # ...
    loaded = opscope.load("trace.json.gz")

Tuned first or after pyarrow is imported, library use costs what the command does within 7% (1 GB trace, peak
anonymous memory: advise 512 / 533 MiB against the command's 504, gpu 202 / 200 against 201, kernels 49 / 49
against 47); not tuned, advise 758 MiB. BENCHMARKS.md, "Owned memory".

What :func:`tune` sets, each for what it measured (BENCHMARKS.md, "Owned memory"; peak anonymous memory of the
first command after the cache write, 1 GB trace):

- Arrow allocates from the C library's allocator (glibc's malloc), not its default (mimalloc, which keeps the pages
  it frees): advise 614 against 798 MiB, diff 406 / 473, gpu 207 / 249 MiB; the same CPU on diff and gpu, on advise
  between the same and 1.4 s more from run to run. Before pyarrow is imported it is the environment
  setting Arrow reads once (``ARROW_DEFAULT_MEMORY_POOL``), which also covers the allocations Arrow makes on its own
  account (Acero's group-by); after, pyarrow's default pool.
- The C library's heap is trimmed (``malloc_trim``) where a stage of opscope's work has freed what it used
  (:func:`stage_done`: a trace read, its events sorted, nested) and, while an analysis runs (:func:`working`), when
  the process's anonymous memory has grown by :data:`TRIM_GROWTH_BYTES` since the last trim: the analyses free
  column-sized buffers between the results they keep, and glibc keeps those pages under the live ones. First open
  860 against 1077 MiB; advise 614 / 823, diff 406 / 459, gpu 207 / 224 MiB; it costs CPU time (advise 5.4 against
  4.1 s: the pages it gives back are faulted in again). A thread watches the heap only while an analysis runs: a
  process that holds a loaded trace and does nothing uses no CPU.
- Tuned after pyarrow is imported (Arrow's own allocator then already chosen for what Arrow allocates on its own
  account: Acero, ``indices_nonzero``), transparent huge pages are turned off for the process (``prctl``), where
  they were on: that allocator's memory comes in huge pages, and the little Acero allocates there holds 2 MiB pages
  (library use of the 1 GB trace: ``kernels`` 49 against 54 MiB, ``gpu`` 206 / 214). A program opscope starts gets
  them back (:func:`starting_programs`).

:func:`tune_command` adds what only the command process may decide for itself: numpy left out when the command
does not need it, and typer's option values converted without pydantic (:mod:`opscope.runtime.typer_values`); and
:func:`exit_command` ends that process without the interpreter's teardown.
:func:`child_environment` gives a program opscope starts the environment without these choices.

Library code never calls the C library's allocator: it marks where its stages end and its analyses run
(:func:`stage_done`, :func:`working`), which does nothing in a process that was not tuned.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import ctypes

#: Arrow's allocator, read by Arrow once, when pyarrow loads.
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
#: A trim while an analysis runs once the process's anonymous memory has grown by this much since the last one:
#: bigger lets more freed memory stay resident, smaller trims (and faults pages back in) more often. 32 MiB: a 1 GB
#: trace's advise peaked at 611 MiB (5 runs) where 64 MiB gave 634 and 128 MiB 666, its CPU within the spread; 16
#: MiB: 18 MiB less for 0.05-0.07 s more (advise's goal is 2 s); BENCHMARKS.md, "Owned memory".
TRIM_GROWTH_BYTES = 32 << 20
#: How often the heap is looked at while an analysis runs.
WATCH_PERIOD_S = 0.01

#: prctl's options that turn a process's transparent huge pages off and read whether they are (Linux): a setting the
#: programs it starts inherit
_PR_SET_THP_DISABLE = 41
_PR_GET_THP_DISABLE = 42

_tuned = False
_pool_set_here = False
_huge_pages_off_here = False
_starting = 0  #: programs being started (:func:`starting_programs`)
_lock = threading.Lock()


def switched_off(name: str) -> bool:
    """Whether ``$OPSCOPE_TUNING_OFF`` (names, comma-separated) turns one of :func:`tune`'s settings off:
    ``sysalloc`` (Arrow on the C library's allocator), ``trims`` (the trims where a stage ends), ``trimmer`` (the
    trims while an analysis runs), ``hugepages`` (transparent huge pages off where tuned after pyarrow loaded). For
    measuring what each is worth (``bench/owned_memory.py --variant``)."""
    return name in os.environ.get("OPSCOPE_TUNING_OFF", "").split(",")


def tuned() -> bool:
    """Whether :func:`tune` ran in this process."""
    return _tuned


def tune() -> None:
    """Tune this process's memory for opscope's work (see the module's text); once, the later calls do nothing.
    Process-wide and for the process's life: for the command, and for a program that asks for it."""
    global _tuned, _pool_set_here
    with _lock:
        if _tuned:
            return
        _tuned = True
    if not switched_off("sysalloc") and ARROW_POOL_ENV not in os.environ:
        if "pyarrow" in sys.modules:
            # too late for Arrow's own choice (it reads the setting once, as pyarrow loads): pyarrow's calls go to the
            # C library's allocator, what Arrow allocates on its own account (Acero's group-by) stays in Arrow's
            # default pool, which keeps what it frees (mimalloc: neither its release_unused nor a trim returns it).
            # Library use of the 1 GB trace: advise 354 MiB tuned after pyarrow, 320 before, the command 316
            import pyarrow as pa

            pa.set_memory_pool(pa.system_memory_pool())
            if not switched_off("hugepages"):
                _huge_pages_off()
        else:
            os.environ[ARROW_POOL_ENV] = "system"
            _pool_set_here = True


def tune_command(*, numpy: bool = True) -> None:
    """:func:`tune` for the ``opscope`` command's own process, at its entry, before anything imports pyarrow; and
    what only the command may decide for its process: numpy left out where the command does not need it
    (``numpy=False``; not where it is loaded already, nor where a Dask client, which may serialize with it, runs the
    job's ranks: ``$OPSCOPE_DASK``), and typer's option values converted without pydantic."""
    if not numpy and "numpy" not in sys.modules and not os.environ.get("OPSCOPE_DASK"):
        # pyarrow imports numpy only because it is installed; opscope's table commands call nothing that needs it:
        # a fifth of a cached command's CPU time and 6 MiB of memory (bench/startup.py --with-numpy)
        sys.modules["numpy"] = None  # type: ignore[assignment]  # import numpy raises ImportError
    tune()
    from opscope.runtime.typer_values import install

    install()


def exit_command(code: object) -> NoReturn:
    """End the command's process with ``code`` (what ``SystemExit(code)`` would give: None 0, an int itself, any
    other value printed to stderr and 1) once its exit functions (``atexit``) have run and its output is flushed,
    without the interpreter's teardown: freeing every object the command still holds gives the system nothing it
    does not take back at exit anyway (advise on the 1 GB trace: 0.08-0.13 s). Where a thread other than daemons
    still runs, the interpreter's own exit, which waits for it."""
    import atexit

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if any(t.is_alive() for t in others):
        raise SystemExit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the reader (a pipe to head): as the interpreter's exit says it
            status = status or 120
    os._exit(status)


def _huge_pages_off() -> None:
    """Transparent huge pages off for this process, where they were on: the memory of Arrow's own pool (mimalloc,
    already chosen when pyarrow loaded first) comes in huge pages, and the few hundred KB that Acero allocates there
    then hold 2 MiB pages each (1 GB trace, library use tuned after pyarrow: ``kernels`` 49 against 54 MiB, ``gpu``
    206 / 214; BENCHMARKS.md, "Owned memory"). The programs opscope starts get them back
    (:func:`starting_programs`)."""
    global _huge_pages_off_here
    prctl = getattr(_libc(), "prctl", None)
    if prctl is None or prctl(_PR_GET_THP_DISABLE, 0, 0, 0, 0) != 0:  # not Linux's, or already off: left as it is
        return
    _huge_pages_off_here = _set_huge_pages_off(True)


def _set_huge_pages_off(off: bool) -> bool:
    libc = _libc()
    return libc is not None and libc.prctl(_PR_SET_THP_DISABLE, int(off), 0, 0, 0) == 0


@contextlib.contextmanager
def starting_programs() -> Iterator[None]:
    """Around starting (or running) a program: this process's huge-page setting as it was before :func:`tune`, so
    that the program inherits that, not opscope's choice (with :func:`child_environment` for its environment)."""
    global _starting
    with _lock:
        _starting += 1
        if _starting == 1 and _huge_pages_off_here:
            _set_huge_pages_off(False)
    try:
        yield
    finally:
        with _lock:
            _starting -= 1
            if _starting == 0 and _huge_pages_off_here:
                _set_huge_pages_off(True)


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (a copy of this process's environment when None) for a program opscope starts: without the allocator
    choice :func:`tune` made for opscope itself."""
    env = dict(os.environ) if env is None else env
    if _pool_set_here:
        env.pop(ARROW_POOL_ENV, None)
    return env


# --- the C library's heap ---------------------------------------------------------------------------------------


@functools.cache
def _libc() -> ctypes.CDLL | None:
    import ctypes  # here: only trimming needs ctypes

    # glibc's soname first: ctypes.util.find_library runs `ldconfig -p` in a child process
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _trim_heaps() -> None:
    """The C library's free heap pages back to the system (``malloc_trim``)."""
    libc = _libc()
    with contextlib.suppress(AttributeError):  # not glibc
        if libc is not None:
            libc.malloc_trim(0)


def anonymous_bytes() -> int | None:
    """The process's resident memory that is not a file's pages (its heaps: Python's, the C library's, Arrow's), or
    None where the system does not say (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            fields = fh.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def stage_done() -> None:
    """Where a stage of opscope's work has freed what it used (a trace read, its events sorted, nested): in a tuned
    process, the C library's free heap pages go back to the system (its next stage would otherwise peak on top of
    them); else nothing."""
    if _tuned and not switched_off("trims"):
        _trim_heaps()


class HeapTrimmer:
    """Trims the C library's heap when called after the process's anonymous memory grew by :data:`TRIM_GROWTH_BYTES`
    since the last trim (the floor follows memory down between trims).

    glibc returns a freed buffer to the system only from the top of its heap or where it was mapped on its own; the
    analyses free column-sized buffers between the results they keep, so without a trim those pages stay resident,
    free, until the command ends (on a 1 GB trace's advise, 90 MiB of them at its peak). Trimming after every
    analysis cost more (the next one faulted the pages in again), trimming only where one ends lowered the peaks by
    half as much (advise 389 MiB against 333, the same CPU time); by growth while it runs, a command trims a few
    times."""

    def __init__(self) -> None:
        self._floor = anonymous_bytes()

    def __call__(self) -> None:
        now = anonymous_bytes()
        if now is None or self._floor is None:
            return
        if now >= self._floor + TRIM_GROWTH_BYTES:
            _trim_heaps()
            now = anonymous_bytes() or now
            self._floor = now
        else:
            self._floor = min(self._floor, now)


class _Watch:
    """The thread that looks at the heap every :data:`WATCH_PERIOD_S` while at least one analysis runs
    (:func:`working`), and waits without a wake-up while none does."""

    def __init__(self) -> None:
        self._running = 0
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._trim = HeapTrimmer()

    def enter(self) -> None:
        with self._changed:
            self._running += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="opscope-heap-watch", daemon=True)
                self._thread.start()
            self._changed.notify()

    def leave(self) -> None:
        with self._changed:
            self._running -= 1

    def _run(self) -> None:
        pause = threading.Event()  # never set: a wait that sleeps without holding the GIL
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._running > 0)
            pause.wait(WATCH_PERIOD_S)
            self._trim()


_watch: _Watch | None = None


@contextlib.contextmanager
def working() -> Iterator[None]:
    """An analysis runs in this block: in a tuned process the heap is watched and trimmed by growth meanwhile
    (:class:`HeapTrimmer`); else nothing."""
    global _watch
    if not _tuned or switched_off("trimmer"):
        yield
        return
    with _lock:
        if _watch is None:
            _watch = _Watch()
        watch = _watch
    watch.enter()
    try:
        yield
    finally:
        watch.leave()
