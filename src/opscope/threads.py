"""Work on a helper thread, with its errors raised in the caller's: the one place opscope starts threads for speed.

The work handed over is Arrow (compute, IPC), zlib/ISA-L or opscope's C code, which all run without the GIL, so two
threads use two cores. ``ahead`` runs an iterator a few items ahead of its consumer (inflating, scanning);
``side_by_side`` runs two independent pieces of work at once.
"""

from __future__ import annotations

import functools
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


class cached_property(functools.cached_property[T]):  # noqa: N801 - a drop-in for functools' decorator
    """:func:`functools.cached_property` without its lock: on Python < 3.12 that lock is one per property for
    every instance, so two threads computing the same property of two objects (the GPU analyses of the two traces
    of a diff) would take turns. An object's property is computed by one thread at a time here (each trace's
    analyses stay on one thread); two threads asking one object at once would compute it twice, the same value."""

    def __get__(self, instance: object, owner: type | None = None) -> T:  # type: ignore[override]
        if instance is None:
            return self  # type: ignore[return-value]
        cache, name = instance.__dict__, self.attrname or self.func.__name__
        value = cache.get(name, _END)
        if value is _END:
            value = cache[name] = self.func(instance)
        return value
