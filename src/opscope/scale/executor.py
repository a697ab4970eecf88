"""Run one task per item (a rank's trace) in parallel and bring back small results, never a hang.

Three executors behind one protocol, chosen by :func:`executor_for`:

- the local pool (default): one worker process per core, each with a pipe of its own. A worker serves a few
  tasks (``max_tasks_per_child``) and is then replaced, so its memory does not grow across many ranks. A task
  that raises is reported with its error and the others go on; a worker that dies (``os._exit``, SIGKILL, the
  OOM killer) is known exactly, because each worker runs one task at a time: that item is retried once in a
  fresh worker, then reported as "the worker running it died (...)". concurrent.futures.ProcessPoolExecutor is
  not used: a dead worker breaks the whole pool (every task in flight fails, and which one killed it is not
  said), and with ``max_tasks_per_child`` it hangs on Python 3.11 to 3.13 (cpython gh-115634).
- in-process (``workers=0``): runs the tasks one after the other in the caller, for tests and debugging; a task
  that kills its process kills the caller.
- Dask (``--dask ADDRESS`` or ``--dask local:N``): the same tasks on a distributed cluster. The workers read
  the trace files and write the cache at the paths the client gives them, so with a cluster of several hosts
  the trace files and the cache directory must be on a file system every worker sees at the same paths as
  the client. A task whose worker died is run again by the scheduler (``distributed.scheduler.allowed-failures``,
  3 by default) and then reported with Dask's KilledWorker.

Tasks get everything as arguments (``fn`` must be a module-level function, so it pickles by name). The one
setting they take from the environment, the cache directory (and the inflate cap that is part of a cache
key), is the client's: it is sent with every task and set in the worker before the task runs.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import connection, get_all_start_methods, get_context
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from opscope import runtime
from opscope.errors import TraceError, UsageError
from opscope.threads import usable_cores

#: Tasks a pool worker runs before it is replaced by a fresh process: a worker's heap (Arrow buffers, DuckDB's
#: allocator, the JSON parser's arenas) does not shrink back after a big rank, and a fresh process costs
#: ~0.1-0.5 s against seconds to minutes per rank.
MAX_TASKS_PER_CHILD = 4
#: Times an item whose worker died is run again before it is reported (the local pool).
DEATH_RETRIES = 1
#: Seconds to wait for a Dask scheduler before saying it cannot be reached.
DASK_CONNECT_TIMEOUT_S = 10
#: Environment settings that change what a task reads or writes: sent from the client to every worker.
FORWARDED_ENV = ("OPSCOPE_MAX_INFLATE_RATIO",)
CACHE_ENV = "OPSCOPE_CACHE_DIR"

Env = dict[str, "str | None"]


@dataclass(frozen=True)
class TaskOutcome:
    """What became of one item: its value, or one line saying why there is none."""

    key: str  # the caller's label for the item, e.g. "rank 3 (traces/rank-3.json.gz)"
    value: Any = None  # the task's return value (small: tables of a few thousand rows)
    error: str | None = None  # one line: the task's exception, or that the worker running it died
    attempts: int = 1  # times the task was started (more than 1 when a worker died under it)
    seconds: float | None = None  # wall time of the task's last run, measured inside the worker

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor(Protocol):
    name: str  # "local pool (2 workers)", "Dask cluster tcp://... (4 workers)", "Dask local cluster (2 workers)"
    workers: int

    def run(self, fn: Callable[[Any], Any], items: Sequence[Any], keys: Sequence[str],
            progress: Callable[[int, int], None] | None = None) -> list[TaskOutcome]:
        """Run ``fn(item)`` for every item; outcomes in the order of ``items``. ``progress(done, total)`` is
        called in the caller as tasks finish."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far, in bytes (a task includes it in its result to say what
    its worker needed; with a pool worker that ran several tasks it is the largest of them)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB, macOS bytes


def describe_error(exc: BaseException) -> str:
    """One line for a task's exception: opscope's own errors as they are (they already name the file), any
    other as "ValueError: first line"."""
    if isinstance(exc, (TraceError, UsageError)):
        text = str(exc)
        return text.splitlines()[0] if text.strip() else type(exc).__name__
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def describe_exit(code: int | None) -> str:
    """A dead worker's exit status in words: "exit code 9" or "killed by signal 9, SIGKILL"."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def died_message(how: str, retries: int) -> str:
    return f"the worker running it died ({how}), retried {retries} time(s)"


def worker_env() -> Env:
    """The settings a worker must share with the client: the cache directory (resolved here, so workers whose
    home differs still use the client's) and the reader settings that are part of a cache key."""
    from opscope.store.keys import cache_root

    env: Env = {CACHE_ENV: str(cache_root().absolute())}
    for name in FORWARDED_ENV:
        env[name] = os.environ.get(name)
    return env


def _apply_env(env: Env | None) -> None:
    for name, value in (env or {}).items():
        if value is None:
            os.environ.pop(name, None)
        elif os.environ.get(name) != value:
            os.environ[name] = value


def _timed(fn: Callable[[Any], Any], item: Any, env: Env | None = None) -> tuple[bool, Any, float]:
    """Run one task where it is sent: ``(True, value, seconds)``, or ``(False, one-line error, seconds)`` when
    it raised. The error is made here, so an exception class the client cannot import still reads right."""
    _apply_env(env)
    start = time.perf_counter()
    try:
        value = fn(item)
    except Exception as exc:  # a task's failure is its item's outcome, never the executor's
        return False, describe_error(exc), time.perf_counter() - start
    return True, value, time.perf_counter() - start


def _outcome(key: str, result: tuple[bool, Any, float], attempts: int) -> TaskOutcome:
    ok, value, seconds = result
    if ok:
        return TaskOutcome(key, value=value, attempts=attempts, seconds=seconds)
    return TaskOutcome(key, error=str(value), attempts=attempts, seconds=seconds)


def _check(items: Sequence[Any], keys: Sequence[str]) -> None:
    if len(items) != len(keys):
        raise ValueError(f"{len(items)} items but {len(keys)} keys")


class InProcess:
    """Runs the tasks one after the other in the caller (``workers=0``): for tests and debugging."""

    name = "in-process (no workers)"
    workers = 0

    def run(self, fn: Callable[[Any], Any], items: Sequence[Any], keys: Sequence[str],
            progress: Callable[[int, int], None] | None = None) -> list[TaskOutcome]:
        _check(items, keys)
        outcomes = []
        for i, (item, key) in enumerate(zip(items, keys)):
            outcomes.append(_outcome(key, _timed(fn, item), 1))
            if progress:
                progress(i + 1, len(items))
        return outcomes

    def close(self) -> None:
        pass

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: connection.Connection, max_tasks: int, tuned: bool = False) -> None:
    """A pool worker: run up to ``max_tasks`` tasks sent down the pipe, answer each, then exit. ``tuned``: the
    caller's process was tuned (opscope.runtime.tune): its workers are too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle: it ends the workers
    if tuned:
        runtime.tune()
    for _ in range(max_tasks):
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):  # the caller closed the pool
            return
        try:
            fn, item, env = pickle.loads(payload)  # noqa: S301 - sent by the process that started this one
            result = _timed(fn, item, env)
        except Exception as exc:  # the task could not even be unpickled here (a function not importable)
            result = (False, f"the task cannot be loaded in the worker: {describe_error(exc)}", 0.0)
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            data = pickle.dumps((False, f"the task's result cannot be sent back: {describe_error(exc)}",
                                 result[2]))
        conn.send_bytes(data)


class _Worker:
    def __init__(self, proc: BaseProcess, conn: connection.Connection) -> None:
        self.proc = proc
        self.conn = conn
        self.tasks = 0

    def stop(self, timeout: float = 2.0) -> None:
        self.conn.close()  # the worker's next recv sees EOF and it returns
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout)


def default_workers() -> int:
    """One worker per core this process may run on."""
    return usable_cores()


class LocalPool:
    """Worker processes on this machine, each running one task at a time through its own pipe."""

    def __init__(self, workers: int | None = None, max_tasks_per_child: int = MAX_TASKS_PER_CHILD,
                 death_retries: int = DEATH_RETRIES) -> None:
        self.workers = workers if workers is not None else default_workers()
        if self.workers < 1:
            raise UsageError(f"a local pool needs at least one worker, not {self.workers}")
        self.name = f"local pool ({self.workers} worker{'s' if self.workers != 1 else ''})"
        self.max_tasks_per_child = max_tasks_per_child
        self.death_retries = death_retries
        # forkserver/spawn, never fork: the caller may already run pyarrow's or DuckDB's threads
        method = "forkserver" if "forkserver" in get_all_start_methods() else "spawn"
        self._ctx: Any = get_context(method)  # typeshed's BaseContext lacks Process/Pipe
        self._idle: list[_Worker] = []
        self._retired: list[_Worker] = []  # served their tasks; exiting on their own
        self._started = 0

    @property
    def processes_started(self) -> int:
        """Worker processes started so far (replacements included)."""
        return self._started

    def _spawn(self) -> _Worker:
        ours, theirs = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_serve, args=(theirs, self.max_tasks_per_child, runtime.tuned()),
                                 daemon=True, name="opscope-worker")
        proc.start()
        theirs.close()  # only the worker holds its end now: its death is EOF on ours
        self._started += 1
        return _Worker(proc, ours)

    def run(self, fn: Callable[[Any], Any], items: Sequence[Any], keys: Sequence[str],
            progress: Callable[[int, int], None] | None = None) -> list[TaskOutcome]:
        _check(items, keys)
        total = len(items)
        outcomes: list[TaskOutcome | None] = [None] * total
        attempts = [0] * total
        deaths = [0] * total
        todo = deque(range(total))
        busy: dict[_Worker, int] = {}
        env = worker_env()
        done = 0

        def finish(i: int, outcome: TaskOutcome) -> None:
            nonlocal done
            outcomes[i] = outcome
            done += 1
            if progress:
                progress(done, total)

        def died(i: int, worker: _Worker) -> None:
            worker.proc.join(5)
            how = describe_exit(worker.proc.exitcode)
            worker.stop()
            deaths[i] += 1
            if deaths[i] > self.death_retries:
                finish(i, TaskOutcome(keys[i], error=died_message(how, deaths[i] - 1), attempts=attempts[i]))
            else:
                todo.appendleft(i)  # again, in a fresh worker

        try:
            while todo or busy:
                while todo and len(busy) < self.workers:
                    i = todo.popleft()
                    try:
                        payload = pickle.dumps((fn, items[i], env), protocol=pickle.HIGHEST_PROTOCOL)
                    except Exception as exc:
                        finish(i, TaskOutcome(keys[i], error=f"the task cannot be sent to a worker: "
                                                             f"{describe_error(exc)}", attempts=0))
                        continue
                    fresh = not self._idle
                    worker = self._idle.pop() if self._idle else self._spawn()
                    worker.tasks += 1
                    attempts[i] += 1
                    try:
                        worker.conn.send_bytes(payload)
                    except OSError:
                        if fresh:  # a new worker that cannot even start: this run counts, so it ends
                            died(i, worker)
                        else:  # it died while idle: not this item's doing
                            attempts[i] -= 1
                            worker.stop()
                            todo.appendleft(i)
                        continue
                    busy[worker] = i
                self._retired = [w for w in self._retired if w.proc.exitcode is None]  # reap the exited
                if not busy:  # every item left was settled without a worker (it could not be sent)
                    continue
                waitables: list[Any] = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
                ready = set(connection.wait(waitables))
                for worker in [w for w in busy if w.conn in ready or w.proc.sentinel in ready]:
                    i = busy.pop(worker)
                    result = None
                    try:
                        if worker.conn.poll():  # an answer, or EOF when it died
                            result = pickle.loads(worker.conn.recv_bytes())  # noqa: S301 - from our own worker
                    except (EOFError, OSError):
                        pass
                    if result is not None:
                        finish(i, _outcome(keys[i], result, attempts[i]))
                        if worker.tasks >= self.max_tasks_per_child:
                            # it exits by itself after its last task; reaped later, not waited for here (a
                            # process's exit takes tens of ms, which would hold up the next dispatch)
                            worker.conn.close()
                            self._retired.append(worker)
                        else:
                            self._idle.append(worker)
                        continue
                    died(i, worker)
        finally:
            for worker in busy:  # only when interrupted: workers still running are ended, not waited for
                worker.proc.kill()
                worker.stop()
        return [o for o in outcomes if o is not None]

    def close(self) -> None:
        for worker in self._idle:
            worker.conn.close()  # each sees EOF and returns; then they end together, not one after another
        for worker in self._idle + self._retired:
            worker.stop()
        self._idle, self._retired = [], []

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _suspicious(dask_scheduler: Any, keys: list[Any]) -> dict[Any, int]:
    """On the scheduler: how many workers died while running each task."""
    return {k: dask_scheduler.tasks[k].suspicious for k in keys if k in dask_scheduler.tasks}


class DaskExecutor:
    """Tasks on a Dask distributed cluster: an existing scheduler's ``ADDRESS``, or ``local:N`` workers started
    (and closed) here, bound to 127.0.0.1 only. The workers must see the trace files and the cache directory at
    the same paths as the client (a shared file system when they run on other hosts)."""

    def __init__(self, spec: str) -> None:
        try:
            import dask
            import distributed
        except ImportError:
            raise UsageError("--dask needs the dask extra: pip install 'opscope[dask]'") from None
        self._cluster: Any = None
        spec = spec.strip()
        if spec.startswith("local:") or spec == "local":
            count = spec.partition(":")[2]
            if not count.isdigit() or int(count) < 1:
                raise UsageError(f"--dask {spec}: give the number of local workers, e.g. --dask local:4")
            n = int(count)
            # worker-saturation 1.0 with one thread per worker: a worker holds only the task it runs, so one
            # that dies takes no queued bystander with it (the scheduler's allowed-failures, default 3, is
            # then the retries of the task that killed it)
            with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
                self._cluster = distributed.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                    # the scheduler's HTTP server runs even without a dashboard: any free port, this host only
                    # (None would take 8787 and ":0" every interface)
                    dashboard_address="127.0.0.1:0", worker_dashboard_address=None,
                    # a dead worker is its item's one-line error: the cluster's own log lines would bury it
                    silence_logs=logging.CRITICAL)
            self.client: Any = distributed.Client(self._cluster)
            self.name = f"Dask local cluster ({n} worker{'s' if n != 1 else ''})"
        else:
            if not spec:
                raise UsageError("--dask needs a scheduler address (tcp://HOST:8786) or local:N")
            try:
                self.client = distributed.Client(spec, timeout=DASK_CONNECT_TIMEOUT_S)
            except Exception as exc:
                reason = describe_error(exc)
                raise UsageError(f"--dask {spec}: cannot reach a Dask scheduler there ({reason}); start one "
                                 f"(dask scheduler) and give its address, e.g. tcp://HOST:8786, or use "
                                 f"--dask local:N") from None
            try:  # a scheduler without workers would leave every task waiting
                self.client.wait_for_workers(1, timeout=DASK_CONNECT_TIMEOUT_S)
            except Exception:
                self.client.close()
                raise UsageError(f"--dask {spec}: the scheduler there has no workers; start some "
                                 f"(dask worker {spec}) or use --dask local:N") from None
            count_now = len(self.client.scheduler_info().get("workers", {}))
            self.name = f"Dask cluster {self.client.scheduler.address} ({count_now} worker" \
                        f"{'s' if count_now != 1 else ''})"
        self.workers = len(self.client.scheduler_info().get("workers", {}))

    def run(self, fn: Callable[[Any], Any], items: Sequence[Any], keys: Sequence[str],
            progress: Callable[[int, int], None] | None = None) -> list[TaskOutcome]:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        _check(items, keys)
        total = len(items)
        if not total:
            return []
        env = worker_env()
        # pure=False: the same item twice is two runs (a file may have changed). A task that raised is not
        # retried (its error is its file's, as in the local pool); one whose worker died is, by the scheduler.
        futures = [self.client.submit(_timed, fn, item, env, pure=False) for item in items]
        index = {f.key: i for i, f in enumerate(futures)}
        outcomes: list[TaskOutcome | None] = [None] * total
        done = 0
        try:
            for batch in as_completed(futures).batches():
                got: dict[int, tuple[bool, Any, float] | BaseException] = {}
                for future in batch:
                    # result() waits again when a worker that held the result died and it is recomputed
                    try:
                        got[index[future.key]] = future.result()
                    except Exception as exc:
                        got[index[future.key]] = exc
                died = self.client.run_on_scheduler(_suspicious, keys=[f.key for f in batch])
                for future in batch:
                    i = index[future.key]
                    deaths, result = died.get(future.key, 0), got[i]
                    runs = deaths + 1  # every death was a run, and so is the one that ended it
                    if isinstance(result, KilledWorker):
                        # its last run died too: the runs are the deaths
                        deaths = max(deaths, result.allowed_failures + 1)
                        outcomes[i] = TaskOutcome(keys[i], error=died_message("Dask KilledWorker", deaths - 1),
                                                  attempts=deaths)
                    elif isinstance(result, BaseException):
                        outcomes[i] = TaskOutcome(keys[i], error=describe_error(result), attempts=runs)
                    else:
                        outcomes[i] = _outcome(keys[i], result, runs)
                    done += 1
                    if progress:
                        progress(done, total)
                # the results are here: release them on the workers, so a worker dying later does not make
                # the scheduler compute them again
                self.client.cancel(batch)
        finally:
            self.client.cancel(futures)
        return [o for o in outcomes if o is not None]

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def executor_for(dask: str | None = None, workers: int | None = None) -> Executor:
    """The executor for a job: Dask when ``dask`` is given (an address or ``local:N``), else a local pool of
    ``workers`` processes (default one per core); ``workers=0`` runs the tasks in this process."""
    if dask is not None:
        return DaskExecutor(dask)
    if workers is not None and workers < 0:
        raise UsageError(f"--workers must be 0 (in this process) or more, not {workers}")
    if workers == 0:
        return InProcess()
    return LocalPool(workers)
