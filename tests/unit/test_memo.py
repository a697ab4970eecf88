"""The analyses' memo (opscope.model.memo): keys derived from the function and its arguments, one computation per
trace and key, values kept in a ResultStore for the next command."""

from __future__ import annotations

import pickle
import threading
from dataclasses import dataclass

import pyarrow as pa
import pytest

from opscope.errors import TraceError
from opscope.model.memo import Releases, attach_results, canonical, forget_values, kept_results, memoized
from opscope.model.trace import Trace
from opscope.store.results import ResultStore

WAIT_S = 20


def _trace(n: int = 3) -> Trace:
    events = pa.table({"dur_ns": pa.array(list(range(n)), pa.int64())})
    empty = pa.table({"x": pa.array([], pa.int64())})
    return Trace(events=events, flows=empty, counters=empty, memory=empty, steps=empty, args=empty)


@dataclass(frozen=True)
class _Window:
    steps: tuple[int, ...] | None
    label: str = "all"


def test_a_call_with_the_default_spelled_out_is_the_same_entry():
    calls: list[tuple] = []

    @memoized()
    def scaled(trace: Trace, factor: int = 2, label: str = "x") -> int:
        calls.append((factor, label))
        return factor * trace.num_events

    trace = _trace()
    assert scaled(trace) == 6
    assert scaled(trace, 2) == 6
    assert scaled(trace, factor=2, label="x") == 6
    assert calls == [(2, "x")]
    assert scaled.key(trace) == scaled.key(trace, factor=2) == f"{__name__}.{scaled.__qualname__}(factor=2, label='x')"


def test_two_different_arguments_are_two_entries_and_each_is_computed_once():
    calls: list[int] = []

    @memoized()
    def scaled(trace: Trace, factor: int) -> int:
        calls.append(factor)
        return factor * trace.num_events

    trace = _trace()
    assert [scaled(trace, 2), scaled(trace, 5), scaled(trace, 2), scaled(trace, 5)] == [6, 15, 6, 15]
    assert calls == [2, 5]
    assert scaled.key(trace, 2) != scaled.key(trace, 5)


def test_each_trace_has_its_own_memo():
    @memoized()
    def rows(trace: Trace) -> int:
        return trace.num_events

    first, second = _trace(3), _trace(7)
    assert (rows(first), rows(second), rows(first)) == (3, 7, 3)


def test_keys_of_containers_dataclasses_and_none_are_canonical():
    assert canonical({"b": 1, "a": [1, (2, None)]}) == canonical({"a": [1, (2, None)], "b": 1}) == \
        "{'a': [1, (2, None, )], 'b': 1}"
    assert canonical(_Window((1, 2))) == "_Window(steps=(1, 2, ), label='all')"
    assert canonical(frozenset({"b", "a"})) == "frozenset({'a', 'b'})"
    assert canonical((1,)) != canonical([1])  # a tuple and a list are different arguments
    assert canonical(True) != canonical(1)

    calls: list[object] = []

    @memoized()
    def windowed(trace: Trace, window: _Window | None = None) -> int:
        calls.append(window)
        return 1

    trace = _trace()
    windowed(trace, _Window((1, 2)))
    windowed(trace, _Window((1, 2)))  # an equal value, another object: the same entry
    windowed(trace, _Window((1, 3)))
    assert calls == [_Window((1, 2)), _Window((1, 3))]


def test_an_argument_without_a_canonical_form_is_refused_loudly():
    @memoized()
    def anything(trace: Trace, thing: object) -> int:
        return 1

    with pytest.raises(TypeError, match=r"anything: .*object.* has no canonical form"):
        anything(_trace(), object())
    with pytest.raises(TypeError, match="no canonical form"):
        anything(_trace(), {"fn": len})


def test_ignored_arguments_are_left_out_of_the_key_and_must_exist():
    @memoized(ignore=("helper",))
    def with_helper(trace: Trace, n: int, helper: object = None) -> int:
        return n if helper is None else n + 100

    trace = _trace()
    assert with_helper(trace, 1, helper=object()) == 101
    assert with_helper(trace, 1) == 101  # the same entry: the helper never changes the result
    assert with_helper.key(trace, 1, object()) == with_helper.key(trace, 1)
    with pytest.raises(TypeError, match="no parameter 'nope' to ignore"):
        memoized(ignore=("nope",))(with_helper.fn)


def test_computed_once_when_two_threads_ask():
    trace = _trace()
    started, release, calls = threading.Event(), threading.Event(), []

    @memoized()
    def slow(trace: Trace) -> int:
        calls.append(1)
        started.set()
        assert release.wait(WAIT_S)
        return 42

    got: list[int] = []
    first = threading.Thread(target=lambda: got.append(slow(trace)))
    first.start()
    assert started.wait(WAIT_S)
    second = threading.Thread(target=lambda: got.append(slow(trace)))
    second.start()
    release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert got == [42, 42] and calls == [1]


def test_asking_again_on_the_thread_computing_it_does_not_wait_on_itself():
    depth: list[int] = []

    @memoized()
    def recursive(trace: Trace) -> int:
        depth.append(1)
        if len(depth) == 1:
            return recursive(trace) + 1  # asked again while computing: computed again, no deadlock
        return 10

    trace = _trace()
    assert recursive(trace) == 11
    assert recursive(trace) == 11 and len(depth) == 2


class _Changed(Trace):
    """A trace whose tables changed under the analysis (as a cache file written from outside)."""

    broken = False

    def verify(self) -> None:
        if self.broken:
            raise TraceError("events.arrow", "changed while it was read")


def test_a_value_is_not_kept_nor_given_out_when_the_trace_fails_its_check():
    empty = pa.table({"x": pa.array([], pa.int64())})
    trace = _Changed(events=empty, flows=empty, counters=empty, memory=empty, steps=empty, args=empty)
    calls: list[int] = []

    @memoized()
    def counted(trace: Trace) -> int:
        calls.append(1)
        return len(calls)

    trace.broken = True
    with pytest.raises(TraceError, match="changed while it was read"):
        counted(trace)
    trace.broken = False
    assert counted(trace) == 2  # the first value was not kept
    assert counted(trace) == 2


def test_kept_values_round_trip_through_a_result_store(tmp_path):
    calls: list[str] = []

    @memoized(keep=True)
    def table(trace: Trace, n: int = 2) -> pa.Table:
        calls.append("table")
        return pa.table({"n": list(range(n))})

    @memoized(keep=True)
    def facts(trace: Trace) -> dict:
        calls.append("facts")
        return {"rows": trace.num_events, "names": ["a", None]}

    first = _trace()
    attach_results(first, ResultStore(tmp_path))
    assert kept_results(first) is not None
    assert table(first).to_pylist() == [{"n": 0}, {"n": 1}]
    assert facts(first) == {"rows": 3, "names": ["a", None]}
    assert len(list((tmp_path / "results").glob("*/*"))) == 2

    again = _trace()  # the next command's trace of the same entry
    attach_results(again, ResultStore(tmp_path))
    assert table(again, 2).to_pylist() == [{"n": 0}, {"n": 1}]
    assert facts(again) == {"rows": 3, "names": ["a", None]}
    assert calls == ["table", "facts"]  # read back, not computed again
    assert table(again, 3).num_rows == 3 and calls[-1] == "table"  # another argument: another result

    plain = _trace()  # not from the cache: nothing kept, nothing read
    assert kept_results(plain) is None
    assert facts(plain) == {"rows": 3, "names": ["a", None]} and calls[-1] == "facts"


def test_a_trace_cannot_be_changed_and_a_replaced_one_has_its_own_memo():
    @memoized()
    def rows(trace: Trace) -> int:
        return trace.num_events

    trace = _trace(3)
    assert rows(trace) == 3
    for name in ("events", "flows", "counters", "memory", "steps", "args", "copy_args"):
        with pytest.raises(AttributeError):
            setattr(trace, name, pa.table({"x": [1]}))
    shorter = trace.replace(events=trace.events.slice(0, 1))
    assert (rows(shorter), rows(trace)) == (1, 3)  # the old trace's value never applies to the new one
    assert shorter.metadata is trace.metadata and shorter.steps is trace.steps
    assert trace.events.num_rows == 3


def test_a_trace_that_handed_its_tables_over_has_none():
    trace = _trace(3)
    events = trace.events
    held = trace.hand_over()
    assert held["events"] is events and held["copy_args"] is None
    assert sorted(held) == ["args", "copy_args", "counters", "events", "flows", "memory", "steps"]
    with pytest.raises(RuntimeError, match="handed its tables over"):
        trace.select(["dur_ns"])
    with pytest.raises(RuntimeError, match="handed its tables over"):
        _ = trace.steps


def test_a_memoized_analysis_keeps_its_name_and_pickles_as_itself():
    from opscope.analyses.kernels import kernel_table

    assert kernel_table.__name__ == "kernel_table" and "One row per kernel name" in (kernel_table.__doc__ or "")
    assert pickle.loads(pickle.dumps(kernel_table)) is kernel_table  # a task sent to a worker process
    assert not hasattr(_trace(), "results") and not hasattr(Trace, "memo")


def test_forgetting_a_module_lets_go_of_its_values_alone():
    calls: list[str] = []

    @memoized()
    def here(trace: Trace) -> int:
        calls.append("here")
        return trace.num_events

    def other(trace: Trace) -> int:
        calls.append("elsewhere")
        return 1

    other.__module__ = "opscope.somewhere_else"  # as if defined there (its key names that module)
    elsewhere = memoized()(other)

    trace = _trace()
    here(trace), elsewhere(trace)
    forget_values(trace, (__name__,))
    here(trace), elsewhere(trace)
    assert calls == ["here", "elsewhere", "here"]  # this module's value computed again, the other's kept
    forget_values(trace, ("opscope.somewhere",))  # a prefix of a module's name is not that module
    elsewhere(trace)
    assert calls == ["here", "elsewhere", "here"]


def test_a_module_goes_once_every_user_naming_it_is_done():
    calls: list[str] = []

    def counted(name: str, module: str):
        def fn(trace: Trace) -> int:
            calls.append(name)
            return trace.num_events

        fn.__module__ = module
        fn.__qualname__ = name
        return memoized()(fn)

    shared, own = counted("shared", "opscope.shared"), counted("own", "opscope.own")
    trace = _trace()
    shared(trace), own(trace)
    releases = Releases(trace, [("opscope.shared",), ("opscope.shared", "opscope.own"), ()])
    releases.done(("opscope.shared",))  # one of the two users naming it: still held
    shared(trace)
    assert calls == ["shared", "own"]
    releases.done(())
    releases.done(("opscope.shared", "opscope.own"))  # the last user of both: both go
    shared(trace), own(trace)
    assert calls == ["shared", "own", "shared", "own"]


def test_a_value_made_only_for_others_goes_once_each_of_them_is_made():
    calls: list[str] = []

    def counted(name: str, body, **options):
        def fn(trace: Trace) -> int:
            calls.append(name)
            return body(trace)

        fn.__module__, fn.__qualname__ = "opscope.here", name
        return memoized(**options)(fn)

    ingredient = counted("ingredient", lambda t: t.num_events, serves=("opscope.here.a", "opscope.here.b"))
    a = counted("a", lambda t: ingredient(t) + 1)
    b = counted("b", lambda t: ingredient(t) + 2)
    trace = _trace()
    assert a(trace) == trace.num_events + 1
    ingredient(trace)  # still held: b has not been made
    assert calls == ["a", "ingredient"]
    assert b(trace) == trace.num_events + 2 and calls == ["a", "ingredient", "b"]
    ingredient(trace)  # a and b made: it went, and is made again when asked
    assert calls == ["a", "ingredient", "b", "ingredient"]


def test_every_function_a_memoized_analysis_serves_is_a_memoized_function():
    import importlib
    import pkgutil

    import opscope
    from opscope.model.memo import Memoized

    found = {}
    for info in pkgutil.walk_packages(opscope.__path__, "opscope."):
        if info.name.startswith(("opscope.analyses", "opscope.advise", "opscope.diff")):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional extra's module (not where the extra is missing)
                continue
            found.update({f"{info.name}.{k}": v for k, v in vars(module).items() if isinstance(v, Memoized)})
    served = {name for m in found.values() for name in m.serves}
    assert served and served <= set(found), sorted(served - set(found))
