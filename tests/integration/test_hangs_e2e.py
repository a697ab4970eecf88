"""No hang, no quadratic path, no silent repeat: each command runs in a child
process with a timeout, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import json
import os
import sys

import pytest
from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.hostile import fifo, many_steps
from support.memory import hand_trace
from support.tracefiles import write_trace

from opscope.analyses.memory import MAX_TIMELINE_BUCKETS
from opscope.analyses.reports import STEPS_TERMINAL_ROWS


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_fifo_is_refused_not_waited_on(tmp_path):
    path = fifo(tmp_path / "trace.json")
    res = run_cli("summary", str(path), cache=tmp_path / "cache")  # run_cli waits at most 60 s
    assert_one_line_error(res, path, "not a regular file")


def test_memory_timeline_bucket_count_is_capped(tmp_path):
    path = write_trace(tmp_path / "mem.json", hand_trace())
    res = run_cli("memory", str(path), "--timeline", "5000000", cache=tmp_path / "cache")
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and f"at most {MAX_TIMELINE_BUCKETS}" in res.stderr, res.stderr
    ok = run_cli("memory", str(path), "--timeline", str(MAX_TIMELINE_BUCKETS), "-f", "json",
                 "--device", "cuda:0", "--limit", "0", cache=tmp_path / "cache")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count('"bucket"') == MAX_TIMELINE_BUCKETS


def test_steps_terminal_shows_a_bounded_number_of_rows_and_says_so(tmp_path):
    n = STEPS_TERMINAL_ROWS + 200
    path = many_steps(tmp_path / "steps.json", n)
    table, data = run_cli_many([("steps", str(path)), ("steps", str(path), "-f", "json")], cache=tmp_path / "c")
    assert table.returncode == 0 and data.returncode == 0, (table.stderr, data.stderr)
    assert f"the first {STEPS_TERMINAL_ROWS} of {n} steps" in table.stdout
    # the data document still holds every step, numbered as the generator wrote them
    assert [r["step"] for r in json.loads(data.stdout)] == list(range(n))


def test_repeated_step_numbers_are_counted_and_said(tmp_path):
    # ProfilerStep#0..2 written twice (two schedules): 6 annotated intervals, 3 of them repeat a number
    path = many_steps(tmp_path / "steps.json", 3, repeat=2)
    res = run_cli("steps", str(path), "-f", "json", cache=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    assert sorted(r["step"] for r in json.loads(res.stdout)) == [0, 0, 1, 1, 2, 2]
    assert "3 rows repeat a step number" in res.stderr
