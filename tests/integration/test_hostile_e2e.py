"""Hostile inputs (issue 14 parts 2 and 7): each command runs in a child process with a timeout, so a
hang fails the test instead of stalling the suite."""

from __future__ import annotations

import os
import sys

import pytest
from support.cli import assert_one_line_error, run_cli
from support.hostile import fifo
from support.memory import hand_trace
from support.tracefiles import write_trace

from opscope.analyses.memory import MAX_TIMELINE_BUCKETS


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
