"""opscope.load(): every analysis of the commands as a method, with the values of the analysis functions."""

from __future__ import annotations

import pytest
from support.tracefiles import small_gpu_trace, write_trace

import opscope.api as api
from opscope.advise import advise
from opscope.analyses.gpu import GpuAnalysis, step_device_table
from opscope.analyses.kernel_classes import class_table
from opscope.analyses.kernels import kernel_table
from opscope.analyses.memory import counter_table, memory_records, peak_table
from opscope.analyses.ops import gpu_op_table, op_table
from opscope.analyses.views import module_tree, tree_table
from opscope.errors import UsageError
from opscope.query import run_sql


@pytest.fixture()
def loaded(tmp_path):
    return api.load(write_trace(tmp_path / "t.json", small_gpu_trace()), frames="arrow", cache=False)


def test_tables_equal_the_analysis_functions(loaded):
    t = loaded.trace
    assert loaded.ops(python_api=True).equals(op_table(t, python_api=True))
    assert loaded.gpu_ops().equals(gpu_op_table(t))
    assert loaded.kernels().equals(kernel_table(t))
    assert loaded.kernel_classes().equals(class_table(t)) and loaded.kernel_classes("2").equals(class_table(t, [2]))
    assert loaded.step_table().equals(step_device_table(t))  # what `opscope steps` shows
    gpu = GpuAnalysis(t)
    assert loaded.gpu_breakdown().equals(gpu.breakdown())
    assert loaded.gpu_idle().equals(gpu.idle())
    assert loaded.gpu_launches().equals(gpu.launches())
    assert loaded.memory_peaks().equals(peak_table(memory_records(t)))
    assert loaded.memory_counters().equals(counter_table(t))
    assert loaded.scope().equals(tree_table(module_tree(t), "total_ns", None, "module"))
    query = "select kind, count(*) as n from events group by 1 order by 1"
    assert loaded.sql(query).equals(run_sql(t, query))


def test_gpu_tables_have_rows_and_the_analysis_is_shared(loaded):
    assert loaded.gpu_breakdown().num_rows > 0
    assert loaded.gpu() is loaded.gpu()
    assert loaded.gpu(5_000) is not loaded.gpu()
    assert loaded.copies().num_rows == 0 and "direction" in loaded.copies().column_names  # no memcpy here
    assert loaded.links().num_rows == 3


def test_advise_and_filters(loaded):
    assert loaded.advise().rows() == advise(loaded.trace).rows()
    assert loaded.advise(rules=["gpu-idle"]).checked == ["gpu-idle"]
    with pytest.raises(UsageError, match="no rule 'nope'"):
        loaded.advise(rules=["nope"])
    filt = loaded.event_filter(match="conv", steps="2")
    assert filt.steps == [2]
    assert loaded.ops(filt=filt).column("name").to_pylist() == ["aten::conv2d"]


def test_notebook_shows_the_report_and_writes_it(loaded, tmp_path):
    import html

    page = loaded.report_html()
    assert page.startswith("<!DOCTYPE html>") and 'id="gpu"' in page
    shown = loaded._repr_html_()
    # the page travels whole in the iframe's srcdoc, escaped, so the notebook's own page is untouched
    prefix = '<iframe title="opscope report" '
    assert shown.startswith(prefix) and shown.endswith('"></iframe>')
    srcdoc = shown.split('srcdoc="', 1)[1][: -len('"></iframe>')]
    assert '"' not in srcdoc and "<" not in srcdoc
    assert html.unescape(srcdoc) == page
    target = loaded.report(tmp_path / "r.html")
    assert target.read_text() == page
    with pytest.raises(UsageError, match="already exists"):
        loaded.report(target)
    loaded.report(target, force=True)
