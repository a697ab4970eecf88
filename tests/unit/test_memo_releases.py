"""What advise's rules and the report's sections let go of once every one naming it has run (model.memo.Releases):
the values go, the results stay."""

from __future__ import annotations

import dataclasses

from support.gpu import kernel, launch, step
from support.tracefiles import write_trace, x

from opscope.ingest import open_trace


def _trace(tmp_path):
    events = [step(1, 0, 400), step(2, 400, 400)]
    for i in range(8):  # a mm per 100 us, its kernel launched inside it, some idle between
        ts = 100 * i
        events += [x("aten::mm", ts + 5, 30, cat="cpu_op"), launch(ts + 10, corr=i + 1),
                   kernel("gemm", ts + 20, 40, corr=i + 1)]
    return open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)


def _held(trace, module: str) -> bool:
    memo = trace.memo_slot
    return memo is not None and any(key.startswith(f"{module}.") for key in memo.values)


def test_advise_lets_go_of_the_launches_once_every_rule_naming_them_has_run(tmp_path, monkeypatch):
    import opscope.advise
    from opscope.advise import advise

    # one thread: the rules in their listed order, the gpu-idle rule's graph (which reads the launches without naming
    # them) first. On two threads a tiny trace's other rules may all end before the graph asks: it makes them again
    monkeypatch.setattr(opscope.advise, "usable_cores", lambda: 1)
    trace = _trace(tmp_path)
    whole = advise(trace)
    assert not _held(trace, "opscope.analyses.links")  # memcpy, dominant-op and roofline name them: all ran
    again = advise(_trace(tmp_path))  # the same findings from a fresh trace (the values asked again are computed)
    assert [f.to_dict() for f in whole.findings] == [f.to_dict() for f in again.findings]

    trace = _trace(tmp_path)
    advise(trace, only=["gpu-idle"])  # no rule that ran names them: kept (the dependency graph read them)
    assert _held(trace, "opscope.analyses.links")


def test_the_report_lets_go_of_the_gpu_analysis_and_the_graph_after_their_last_sections(tmp_path, monkeypatch):
    import opscope.compose.page.trace as page

    held: dict[str, bool] = {}

    def watched(spec):
        def build(ctx, **options):
            held[spec.id] = _held(ctx.trace, "opscope.analyses.gpu")  # before the section is built
            return spec.build(ctx, **options)

        return dataclasses.replace(spec, build=build)

    import opscope.analyses.depgraph as depgraph

    builds = []
    build_graph = depgraph._build
    monkeypatch.setattr(depgraph, "_build", lambda trace: builds.append(1) or build_graph(trace))
    monkeypatch.setattr(page, "SECTIONS", tuple(watched(s) for s in page.SECTIONS))
    trace = _trace(tmp_path)
    sections = page.trace_sections(trace)
    assert builds == [1]  # the advice's dependency graph is the overview's critical path's: built once
    assert [s.id for s in sections] == [s.id for s in page.SECTIONS]  # reading order, whatever the build order
    order = list(page.BUILD_ORDER)
    readers = [s.id for s in page.SECTIONS if "opscope.analyses.gpu" in s.reads]
    last = max(order.index(r) for r in readers)
    assert all(held[name] for name in order[order.index("advice") + 1:last + 1])  # left by advice for them
    assert not any(held[name] for name in order[last + 1:])  # then gone
    assert not _held(trace, "opscope.analyses.gpu") and not _held(trace, "opscope.analyses.depgraph")


def test_each_section_of_the_report_is_built_as_an_analysis_runs(tmp_path, monkeypatch):
    import contextlib

    import opscope.compose.page.trace as page

    inside: list[bool] = []
    depth = [0]

    @contextlib.contextmanager
    def working():  # what a tuned process does here: its heap trimmed by growth while the section runs
        depth[0] += 1
        try:
            yield
        finally:
            depth[0] -= 1

    def watched(spec):
        def build(ctx, **options):
            inside.append(depth[0] > 0)
            return spec.build(ctx, **options)

        return dataclasses.replace(spec, build=build)

    monkeypatch.setattr(page, "working", working)
    monkeypatch.setattr(page, "SECTIONS", tuple(watched(s) for s in page.SECTIONS))
    page.trace_sections(_trace(tmp_path))
    assert inside == [True] * len(page.SECTIONS)
