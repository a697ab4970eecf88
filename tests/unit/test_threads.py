"""Analyses on two threads: one trace's memos and an object's cached properties are computed once however many
threads ask, two objects' properties are computed at once, and advise and diff give what they give on one core."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from support import make_trace, row
from support.tracefiles import small_gpu_trace, write_trace

from opscope import threads
from opscope.ingest import open_trace
from opscope.model.memo import memoized
from opscope.model.trace import Trace

WAIT_S = 20  # a deadlock fails the test instead of hanging it


def _trace() -> Trace:
    empty = pa.table({"x": pa.array([], pa.int64())})
    return Trace(events=empty, flows=empty, counters=empty, memory=empty, steps=empty, args=empty)


def test_a_memo_two_threads_ask_for_is_computed_once():
    trace = _trace()
    started, release, calls = threading.Event(), threading.Event(), []

    @memoized()
    def compute(trace: Trace) -> int:
        calls.append(1)
        started.set()
        assert release.wait(WAIT_S)
        return 42

    got: list[int] = []
    first = threading.Thread(target=lambda: got.append(compute(trace)))
    first.start()
    assert started.wait(WAIT_S)
    second = threading.Thread(target=lambda: got.append(compute(trace)))
    second.start()  # asks while the first computes: waits for its value
    release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert got == [42, 42] and len(calls) == 1


def test_a_memo_whose_computation_failed_is_computed_by_the_thread_waiting_for_it():
    trace = _trace()
    started, release = threading.Event(), threading.Event()

    fail = [True]

    @memoized()
    def once(trace: Trace) -> int:
        if fail.pop():  # the first call fails (after the second has asked); the second computes
            started.set()
            assert release.wait(WAIT_S)
            raise RuntimeError("broken")
        return 7

    errors: list[BaseException] = []

    def ask_failing() -> None:
        try:
            once(trace)
        except RuntimeError as exc:
            errors.append(exc)

    first = threading.Thread(target=ask_failing)
    first.start()
    assert started.wait(WAIT_S)
    fail.append(False)
    got: list[int] = []
    second = threading.Thread(target=lambda: got.append(once(trace)))
    second.start()
    release.set()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert len(errors) == 1 and got == [7]


def _advice_rows(path, monkeypatch, cores: int) -> list[dict]:
    from opscope.advise import advise

    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr("opscope.advise.usable_cores", lambda: cores)
    advice = advise(open_trace(path, use_cache=False))
    return [advice.rows(), advice.not_applicable]


def test_advise_on_two_threads_gives_what_one_core_gives(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    assert _advice_rows(path, monkeypatch, 2) == _advice_rows(path, monkeypatch, 1)


def test_a_failing_rule_on_either_thread_raises_the_first_failing_rules_error(tmp_path, monkeypatch):
    from opscope import advise as advise_module
    from opscope.advise.finding import Rule

    def broken(message: str):
        def check(ctx):
            raise ValueError(message)
        return check

    rules = list(advise_module.all_rules())[:2]
    monkeypatch.setattr(advise_module, "all_rules", lambda: [
        rules[0], Rule(id="b1", title="b1", explain="", check=broken("first")), rules[1],
        Rule(id="b2", title="b2", explain="", check=broken("second"))])
    monkeypatch.setattr(advise_module, "usable_cores", lambda: 2)
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    with pytest.raises(ValueError, match="first"):
        advise_module.advise(trace)


def test_a_thread_left_without_a_rule_computes_what_a_running_rule_prepares(tmp_path, monkeypatch):
    from opscope import advise as advise_module
    from opscope.advise.finding import Rule

    prepared = threading.Event()
    threads_seen: dict[str, int] = {}

    def waiting_check(ctx):
        threads_seen["rule"] = threading.get_ident()
        assert prepared.wait(WAIT_S), "the prepare step did not run beside the rule"
        return []

    def failing_step(ctx):
        raise RuntimeError("the rule computes it again and says so")

    def step(ctx):
        threads_seen["step"] = threading.get_ident()
        prepared.set()

    monkeypatch.setattr(advise_module, "all_rules", lambda: [
        Rule(id="slow", title="slow", explain="", check=waiting_check, prepare=(failing_step, step)),
        Rule(id="quick", title="quick", explain="", check=lambda ctx: [])])
    monkeypatch.setattr(advise_module, "usable_cores", lambda: 2)
    trace = open_trace(write_trace(tmp_path / "t.json", small_gpu_trace()), use_cache=False)
    advice = advise_module.advise(trace)
    assert advice.findings == [] and threads_seen["step"] != threads_seen["rule"]


@pytest.mark.parametrize("cores", [1, 2])
def test_a_rule_that_does_not_apply_has_nothing_prepared_for_it(cores, monkeypatch):
    # no device work: gpu-idle does not apply, so neither its idle causes nor the graph it would read are computed
    from opscope import advise as advise_module
    from opscope.analyses import depgraph

    built = []
    build = depgraph._build
    monkeypatch.setattr(depgraph, "_build", lambda trace: built.append(trace) or build(trace))
    monkeypatch.setattr(advise_module, "usable_cores", lambda: cores)
    trace = make_trace([row("cpu_op", "aten::mm", 0, 100), row("cpu_op", "aten::add", 150, 50)])
    advice = advise_module.advise(trace)
    assert "gpu-idle" in advice.not_applicable and built == []


def test_diff_on_two_threads_gives_what_one_core_gives(pair, monkeypatch):
    from opscope.diff import compare

    def rows(cores: int) -> tuple:
        monkeypatch.setattr("opscope.diff.usable_cores", lambda: cores)
        monkeypatch.setattr("opscope.diff.normalize.usable_cores", lambda: cores)
        c = compare(open_trace(pair[0], use_cache=False), open_trace(pair[1], use_cache=False))
        return c.rows.to_pylist(), c.headline, c.summary, c.op_rows.to_pylist()

    assert rows(2) == rows(1)
