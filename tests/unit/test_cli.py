"""What the commands stand on without running them: the cache (reused, invalidated, read lazily), terminal tables,
and the demo's holding back of profiler chatter."""

from __future__ import annotations

import os

import pytest
from support.tracefiles import small_gpu_trace, write_trace

from opscope.ingest import open_trace


def test_cache_reused_and_invalidated(trace_file, cache_dir):
    first = open_trace(trace_file)
    assert "from_cache" not in first.metadata
    entries = list(cache_dir.iterdir())
    assert len(entries) == 1
    second = open_trace(trace_file)
    assert second.metadata["from_cache"] == str(entries[0])
    assert second.events.to_pylist() == first.events.to_pylist()
    assert second.args.num_rows == first.args.num_rows
    # Changing the file makes a new entry; the old one is left as it was.
    events = small_gpu_trace()
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::new", "pid": 1, "tid": 1, "ts": 4000,
                   "dur": 1, "args": {}})
    write_trace(trace_file, events, gz=True)
    third = open_trace(trace_file)
    assert "from_cache" not in third.metadata
    assert "aten::new" in third.events["name"].cast("string").to_pylist()
    assert len(list(cache_dir.iterdir())) == 2


def test_cached_open_reads_columns_lazily_and_answers_the_same(trace_file, cache_dir):
    from opscope.analyses.kernels import kernel_table
    from opscope.analyses.ops import op_table
    from opscope.analyses.steps import step_table
    from opscope.analyses.summary import summarize

    fresh = open_trace(trace_file)
    cached = open_trace(trace_file)
    assert "from_cache" in cached.metadata
    # Only the columns the op table needs are read from the cache...
    assert op_table(cached).to_pylist() == op_table(fresh).to_pylist()
    assert cached._events is None and set(cached._event_columns) < set(fresh.events.column_names)
    # ...and every other answer is the same as from the file itself.
    assert kernel_table(cached).to_pylist() == kernel_table(fresh).to_pylist()
    assert step_table(cached).to_pylist() == step_table(fresh).to_pylist()
    assert summarize(cached).rows() == summarize(fresh).rows()
    assert cached.events.to_pylist() == fresh.events.to_pylist()
    starts = cached.events["ts_ns"].to_pylist()
    assert starts == sorted(starts)  # the model keeps events in time order


def test_uncached_open_reads_args_again_only_when_asked(trace_file):
    plain = open_trace(trace_file, use_cache=False)
    assert callable(plain._tables["args"])  # not kept while parsing: most commands never read them
    cached = open_trace(trace_file)
    assert plain.args.to_pylist() == cached.args.to_pylist()
    assert plain.args.num_rows == plain.events.num_rows


def test_terminal_tables_cut_long_shapes_but_json_keeps_them():
    import pyarrow as pa
    from rich.console import Console

    from opscope.render.terminal import CUT_AT, cut, table_view

    long = "[" + ",".join(["[128,440]"] * 200) + "]"
    assert cut("[[1,2]]") == "[[1,2]]"
    assert cut(long) == long[:CUT_AT] + f"... (+{len(long) - CUT_AT:,} chars)"
    console = Console(width=400, record=True)
    console.print(table_view(pa.table({"name": ["aten::mm"], "shapes": [long]})))
    text = console.export_text()
    assert f"(+{len(long) - CUT_AT:,} chars)" in text and long not in text


def test_demo_holds_back_profiler_chatter_but_not_on_failure(capfd):
    from opscope.capture.demo import profiler_chatter_held

    with profiler_chatter_held():
        os.write(2, b"profiler_start chatter\n")
    assert "chatter" not in capfd.readouterr().err
    with pytest.raises(ValueError), profiler_chatter_held():
        os.write(2, b"the reason it failed\n")
        raise ValueError("boom")
    assert "the reason it failed" in capfd.readouterr().err
    os.write(2, b"stderr works again\n")
    assert "stderr works again" in capfd.readouterr().err
