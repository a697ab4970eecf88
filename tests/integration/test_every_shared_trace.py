"""Every trace-like file in ../shared/traces opens in ``summary``, ``ops``, ``kernels`` and ``steps``.

The files are walked, not listed, so a trace added to ../shared is covered without a test change. Each format's
numbers are checked against its producing tool's own summary in that format's tests; here every command must
give one valid JSON document, and a file that is not a trace (a script, a model, a system-info table) must give
the one-line error, exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli
from support.shared import SHARED_TRACES
from typer.testing import CliRunner

from opscope.cli.app import app
from opscope.units import format_ns

#: Files of ../shared that are not traces: what a run left beside its trace (scripts, models, notes, op-stats
#: tables, rocprof-compute's system and roofline tables). Each must be refused in one line.
NOT_TRACES_SUFFIXES = (".py", ".onnx", ".md", ".tsv")
NOT_TRACES_NAMES = ("sysinfo.csv", "roofline.csv", "tf_keras_cpu_framework_op_stats.json",
                    "benchmark_simple_add_et.json.gz",  # a PyTorch execution trace: the op graph, no times
                    "memory_timeline.raw.gz")  # torch's export_memory_timeline: sizes over time, no events
COMMANDS = (("summary",), ("ops", "--limit", "5"), ("kernels", "--limit", "5"), ("steps", "--limit", "5"))


def _files() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file())


def _is_trace(path: Path) -> bool:
    return not path.name.endswith(NOT_TRACES_SUFFIXES) and path.name not in NOT_TRACES_NAMES


FILES = _files()


@pytest.fixture(scope="module")
def runner(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("OPSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    return CliRunner()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.skipif(not FILES, reason=f"{SHARED_TRACES} is absent: the real traces are not beside this checkout")
@pytest.mark.parametrize("path", [p for p in FILES if _is_trace(p)],
                         ids=lambda p: str(p.relative_to(SHARED_TRACES)))
def test_trace_opens_in_every_table_command(runner, path):
    for command in COMMANDS:
        result = runner.invoke(app, [*command, str(path), "--format", "json"])
        assert result.exit_code == 0, (command, result.output[-2000:])
        json.loads(result.stdout)  # one valid document


@pytest.mark.skipif(not FILES, reason=f"{SHARED_TRACES} is absent: the real traces are not beside this checkout")
@pytest.mark.parametrize("path", [p for p in FILES if not _is_trace(p)],
                         ids=lambda p: str(p.relative_to(SHARED_TRACES)))
def test_a_file_that_is_not_a_trace_gets_one_line(tmp_path, path):
    assert_one_line_error(run_cli("summary", str(path), cache=tmp_path), path)


@pytest.mark.skipif(not FILES, reason=f"{SHARED_TRACES} is absent: the real traces are not beside this checkout")
@pytest.mark.parametrize("path", [p for p in FILES if _is_trace(p)],
                         ids=lambda p: str(p.relative_to(SHARED_TRACES)))
def test_every_command_shows_one_mean_step_and_one_list_of_top_kernels(runner, path):
    """summary, steps, advise, diff and the report show the same mean step, and summary the rows of kernels."""
    from opscope.advise.context import AdviceContext
    from opscope.analyses.kernels import kernel_table
    from opscope.analyses.reports import steps_report, summary_report
    from opscope.analyses.summary import summarize
    from opscope.diff.normalize import spans
    from opscope.errors import TraceError
    from opscope.ingest import open_trace

    try:
        trace = open_trace(path)
    except TraceError:
        pytest.skip("not readable as a whole trace (its own tests cover the error)")
    durations = trace.steps["dur_ns"].to_pylist()
    summary = summarize(trace)
    top = summary.top_kernels.to_pylist()
    assert top == kernel_table(trace, names="short").slice(0, len(top)).to_pylist()
    if not durations:
        assert summary.steps.mean_ns is None
        return
    mean = round(sum(durations) / len(durations))  # the mean of the steps, from the steps table itself
    assert summary.steps.mean_ns == mean
    assert AdviceContext(trace).step_ns == mean
    base, _ = spans(trace, trace, ("a", "b"))
    assert base.step_ns == mean
    fields = dict(next(s for s in summary_report(trace).sections if s.key == "overview").fields)
    assert fields["steps"].startswith(f"{len(durations)} (mean {format_ns(mean)},")  # the report's overview too
    assert f"mean {format_ns(mean)}," in (steps_report(trace, None).sections[0].legend or "")
