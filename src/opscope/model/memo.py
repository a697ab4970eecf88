"""The analyses' memo: a function of a trace (and of other arguments) is computed once per trace and arguments.

``@memoized()`` on a function whose first parameter is a :class:`~opscope.model.trace.Trace`: the key is the
function's module and qualified name with its other arguments, bound by its signature with the defaults applied
(``f(t)`` and ``f(t, x=<default>)`` are one entry), each in a canonical form (:func:`canonical`; an argument without
one is a TypeError, never a key that silently misses). ``ignore`` names arguments that do not change the result (a
value the caller already has, or how to compute it): they are left out of the key.

The memo of a trace lives in a slot the trace carries but does not read (:attr:`Trace.memo_slot`): it goes with the
trace, and a new trace (another object) starts with none (not a WeakKeyDictionary: a value that refers to its trace,
as a GpuAnalysis does, would keep that entry alive for ever). Two threads may analyse one trace (advise's rules): a
value being computed by one is waited for by the other, not computed again; a thread that asks again for what it
is computing computes it again (no waiting on itself). A value is kept and handed out only once
:meth:`Trace.verify` says that the tables it was computed from are what was checked. What is stored must not be
mutated by its users.

Values go when no one will read them (asked for again, a value is computed again): ``serves`` names the memoized
functions that alone read a value (it goes once each of them is in the memo); :class:`Releases` lets a module's
values go once every user naming it (advise's rules, a report's sections) is done; :func:`forget_values` lets a
caller drop modules' values itself.

``keep=True``: the value is also kept in the trace's kept results (:func:`attach_results`: the store attaches them
to a trace it loads from a cache entry), so the next command on the same cached trace reads it instead of computing
it: only for values that are an Arrow table or a JSON value.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from opscope.model.trace import Trace
from opscope.runtime import working

P = ParamSpec("P")
R = TypeVar("R")


class KeptResults(Protocol):
    """Where results outlive the command (the store's ResultStore)."""

    def get(self, key: str) -> tuple[bool, Any]: ...

    def put(self, key: str, value: Any) -> None: ...


class _Memo:
    """One trace's memo: the values, the keys being computed (and by which thread), the kept results, and the keys
    of the values made only for others (``serves``: the functions they serve)."""

    __slots__ = ("computing", "ingredients", "lock", "results", "values")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.computing: dict[str, tuple[threading.Event, int]] = {}
        self.results: KeptResults | None = None
        self.ingredients: dict[str, frozenset[str]] = {}


_slot_lock = threading.Lock()


def _memo_of(trace: Trace) -> _Memo:
    memo = trace.memo_slot
    if memo is None:
        with _slot_lock:
            memo = trace.memo_slot
            if memo is None:
                memo = trace.memo_slot = _Memo()
    return memo


def attach_results(trace: Trace, results: KeptResults) -> None:
    """Keep the ``keep=True`` values of ``trace`` in ``results`` (and read them from there)."""
    _memo_of(trace).results = results


def forget_values(trace: Trace, modules: tuple[str, ...]) -> None:
    """Let go of the values the functions of ``modules`` (module names) computed on ``trace``: a caller done with
    them, so that later work does not peak on top of them. Asked for again, a value is read from the kept results
    or computed again."""
    memo = trace.memo_slot
    if memo is not None:
        with memo.lock:
            prefixes = tuple(f"{module}." for module in modules)  # a key: "module.qualname(arguments)"
            memo.values = {key: value for key, value in memo.values.items() if not key.startswith(prefixes)}


class Releases:
    """The modules each of several users of a trace's memo (advise's rules, a report's sections) names as read by
    it: a module's values are let go (:func:`forget_values`) once every user naming it is done, so that the users
    still to come do not peak on top of them. A user that reads a module without naming it costs a computation
    again, never a wrong value. Thread-safe (two rules may finish at once)."""

    def __init__(self, trace: Trace, named: Iterable[tuple[str, ...]]) -> None:
        self._trace = trace
        self._left = Counter(module for modules in named for module in modules)
        self._lock = threading.Lock()

    def done(self, modules: tuple[str, ...]) -> None:
        """A user naming ``modules`` is done: the values of those no other user still to finish names go."""
        with self._lock:
            self._left.subtract(modules)
            finished = tuple(module for module in modules if self._left[module] <= 0)
        if finished:
            forget_values(self._trace, finished)


def kept_results(trace: Trace) -> KeptResults | None:
    """The kept results attached to ``trace``; None for a trace not read from the cache."""
    memo = trace.memo_slot
    return None if memo is None else memo.results


def canonical(value: Any) -> str:
    """``value`` as text that names it in a memo key: equal for equal values of the same types, and a TypeError for
    a value that has no such form (an object whose repr is its address would make every call a new key)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(f"{f.name}={canonical(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__qualname__}({fields})"
    if isinstance(value, tuple) and type(value) is tuple:
        return f"({''.join(canonical(v) + ', ' for v in value)})"
    if type(value) is list:
        return f"[{', '.join(canonical(v) for v in value)}]"
    if type(value) is dict:
        return f"{{{', '.join(sorted(f'{canonical(k)}: {canonical(v)}' for k, v in value.items()))}}}"
    if type(value) in (set, frozenset):
        return f"{type(value).__name__}({{{', '.join(sorted(canonical(v) for v in value))}}})"
    raise TypeError(f"{value!r} ({type(value).__qualname__}) has no canonical form for a memo key")


class Memoized(Generic[P, R]):
    """A function of a trace, memoized per trace (see the module's doc); :meth:`key` gives a call's key."""

    def __init__(self, fn: Callable[Concatenate[Trace, P], R], keep: bool, ignore: Iterable[str],
                 serves: Iterable[str] = ()) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.keep = keep
        self.serves = frozenset(serves)
        self.signature = inspect.signature(fn)
        names = list(self.signature.parameters)
        if not names:
            raise TypeError(f"{fn.__qualname__}: a memoized function takes the trace first")
        self.ignore = frozenset(ignore)
        unknown = self.ignore - set(names[1:])
        if unknown:
            raise TypeError(f"{fn.__qualname__} has no parameter {sorted(unknown)[0]!r} to ignore")
        self._trace_param = names[0]
        self._name = f"{fn.__module__}.{fn.__qualname__}"
        self._bare_key = ""

    def __reduce__(self) -> str:
        return self.fn.__qualname__  # pickled by name, as the function it wraps (a task sent to a worker process)

    def key(self, trace: Trace, /, *args: P.args, **kwargs: P.kwargs) -> str:
        bound = self.signature.bind(trace, *args, **kwargs)
        bound.apply_defaults()
        try:
            parts = [f"{name}={canonical(value)}" for name, value in bound.arguments.items()
                     if name != self._trace_param and name not in self.ignore]
        except TypeError as exc:
            raise TypeError(f"{self._name}: {exc}") from None
        return f"{self._name}({', '.join(parts)})"

    def __call__(self, trace: Trace, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if args or kwargs:
            key = self.key(trace, *args, **kwargs)
        else:  # the trace alone (most calls): its key once (the defaults' forms do not change)
            key = self._bare_key or self.key(trace)  # type: ignore[call-arg]
            self._bare_key = key
        return _value(trace, key, lambda: self.fn(trace, *args, **kwargs), self.keep, self.serves)


def memoized(*, keep: bool = False, ignore: Iterable[str] = (),
             serves: Iterable[str] = ()) -> Callable[[Callable[Concatenate[Trace, P], R]], Memoized[P, R]]:
    """Memoize a function whose first parameter is a trace (see the module's doc). ``serves``: the memoized
    functions (``module.qualname``) that alone read this one's value; it is let go once each of them has a value in
    the memo (asked for again, it is computed again)."""

    def decorate(fn: Callable[Concatenate[Trace, P], R]) -> Memoized[P, R]:
        return Memoized(fn, keep, ignore, serves)

    return decorate


def _value(trace: Trace, key: str, compute: Callable[[], R], keep: bool, serves: frozenset[str] = frozenset()) -> R:
    """``compute()``, once per trace and ``key`` (which :class:`Memoized` derives: no key is written by hand)."""
    state = _memo_of(trace)
    try:
        return state.values[key]
    except KeyError:
        pass
    me = threading.get_ident()
    with state.lock:
        if key in state.values:
            return state.values[key]
        running = state.computing.get(key)
        if running is None:
            state.computing[key] = (threading.Event(), me)
    if running is not None:
        done, owner = running
        if owner == me:  # asked again while computing it (as before: no waiting on oneself)
            return _compute(trace, state, key, compute, keep)
        done.wait()  # another thread computes it: its value (or this thread's, if it failed)
        return _value(trace, key, compute, keep, serves)
    try:
        value = _compute(trace, state, key, compute, keep)
    finally:
        with state.lock:
            state.computing.pop(key)[0].set()
    _let_go_of_served(state, key, serves)
    return value


def _let_go_of_served(state: _Memo, key: str, serves: frozenset[str]) -> None:
    """Once ``key``'s value is made: the values made only for others (``serves``) go where every function they serve
    now has a value."""
    with state.lock:
        if serves and key in state.values:
            state.ingredients[key] = serves
        if not state.ingredients:
            return
        made = {name.split("(", 1)[0] for name in state.values}
        for ingredient in [k for k, served in state.ingredients.items() if served <= made]:
            del state.ingredients[ingredient]
            state.values.pop(ingredient, None)


def _compute(trace: Trace, state: _Memo, key: str, compute: Callable[[], R], keep: bool) -> R:
    store = state.results if keep else None
    if store is not None:
        found, kept = store.get(key)
        if found:
            state.values[key] = kept
            return kept
    # No trim where an analysis ends (there was one after each kept analysis): with Arrow on the C library's
    # allocator the next analysis reuses what this one freed, and a trim made it fault those pages in again (diff
    # of two 1 GB traces 1.49 -> 1.24 s, peaks within a few MB; BENCHMARKS.md, "Owned memory"); a tuned
    # process trims by growth while it runs instead
    try:
        with working():  # a tuned process trims its heap while an analysis runs (opscope.runtime)
            value = compute()
    except Exception:
        trace.verify()  # a table that changed under the analysis explains its failure: that is the error
        raise
    trace.verify()  # computed from what was checked, or not kept nor given out
    state.values[key] = value
    if store is not None:
        store.put(key, value)
    return value
