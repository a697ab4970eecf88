"""Work on a helper thread, with its errors raised in the caller's: the one place opscope starts threads for speed.

The work handed over is Arrow (compute, IPC), zlib/ISA-L or opscope's C code, which all run without the GIL, so two
threads use two cores. ``ahead`` runs an iterator a few items ahead of its consumer (inflating, scanning);
``side_by_side`` runs two independent pieces of work at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

_END = object()


def ahead(items: Iterator[T], depth: int, name: str) -> Generator[T, None, None]:
    """``items`` produced on a daemon thread named ``name``, at most ``depth`` ahead of the consumer; an exception
    in the producer is raised in the consumer at the point the stream reached. Closing the generator early stops
    the producer at its next item."""
    import queue  # here: a cached command, which imports this module with the cache, never reads ahead

    handoff: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        """Hand ``item`` over unless the consumer stopped; whether it was."""
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            last: object = _END
        except BaseException as exc:  # handed to the consumer, who raises it
            last = exc
        put(last)

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity): work is split across threads only where there are two or
    more; the local worker pool and the thread grid of ``tune-threads`` size themselves by it too."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def side_by_side(first: Callable[[], A], second: Callable[[], B], name: str) -> tuple[A, B]:
    """``(first(), second())``, ``first`` on a thread named ``name``. An error of ``second`` is raised first (after
    the thread ends), else ``first``'s."""
    result: list = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(first())
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    helper = threading.Thread(target=run, name=name)
    helper.start()
    try:
        other = second()
    finally:
        helper.join()
    if failed:
        raise failed[0]
    return result[0], other
