"""Hostile sizes through the CLI: a 400,000-character kernel name and 200,000 distinct op names.
Each command runs in a child process that must end within run_cli's 60 s (before the fixes these took > 120 s at
these or 10x these sizes); the outputs are checked against what the generators wrote."""

from __future__ import annotations

import csv
import io
import json

from support.cli import run_cli_many
from support.hostile import long_kernel_name, many_distinct_ops

from opscope.ingest.chrome.columns import MAX_NAME_BYTES

# the reader cuts names at MAX_NAME_BYTES (64 KiB, said in a warning); what is left is still too long to demangle
SHORT_FORM = f"… ({MAX_NAME_BYTES:,} characters, not demangled)"


def test_a_400000_character_kernel_name_is_shown_by_its_start_and_counted(tmp_path):
    trace = str(long_kernel_name(tmp_path / "long.json", 400_000))
    cache = tmp_path / "cache"
    run_cli_many([("ops", trace)], cache=cache)  # read once, so the commands below share the cache
    kernels, ops_gpu, summary, summary_json, full = run_cli_many([
        ("kernels", "--format", "csv", trace), ("ops", "--gpu", "--format", "csv", trace), ("summary", trace),
        ("summary", "--format", "json", trace), ("kernels", "--full-names", "--format", "csv", trace)], cache=cache)
    for res in (kernels, ops_gpu, summary, summary_json, full):
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
    start = "_Z" + "<" * 198
    (row,) = csv.DictReader(io.StringIO(kernels.stdout))
    assert (row["name"], row["kind"], row["calls"]) == (start + SHORT_FORM, "kernel", "1")
    assert start + SHORT_FORM + " (100%)" in ops_gpu.stdout  # the op's top kernel
    assert "not demangled" in summary.stdout
    warnings = {r["metric"]: r["value"] for r in json.loads(summary_json.stdout) if r["section"] == "not_mapped"}
    long_names = "events named with more than 16,384 characters (not demangled; short names show their start)"
    assert warnings == {long_names: 1, f"event names longer than {MAX_NAME_BYTES >> 10} KiB (cut)": 1}
    assert "_Z" + "<" * (MAX_NAME_BYTES - 2) in full.stdout  # the full name as read, where it is asked for


def test_200000_distinct_op_names_through_advise_and_diff(tmp_path):
    n = 200_000
    base = str(many_distinct_ops(tmp_path / "base.json", n))
    new = str(many_distinct_ops(tmp_path / "new.json", n, slower_every=3))
    cache = tmp_path / "cache"
    run_cli_many([("ops", "--limit", "1", base), ("ops", "--limit", "1", new)], cache=cache)
    # two at a time: on a loaded two-core machine four side by side would share the 60 s between them
    advise, advise_json = run_cli_many([("advise", base), ("advise", "--format", "json", base)], cache=cache)
    diff, diff_json = run_cli_many([("diff", base, new), ("diff", "--format", "json", base, new)], cache=cache)
    for res in (advise, advise_json, diff, diff_json):
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
    # 200,000 ops of 1 us, one each: no op takes 25% and none matches a known alternative
    assert json.loads(advise_json.stdout) == []
    rows = json.loads(diff_json.stdout)
    assert len(rows) == n
    # every third op (0, 3, ..., 199,998: 66,667 of them) takes 2 us in the new trace, one call each
    changed = [r for r in rows if r["status"] == "changed"]
    assert len(changed) == 66_667
    assert {(r["base_ns"], r["new_ns"], r["delta_ns"], r["calls_base"], r["calls_new"]) for r in changed} == \
        {(1000, 2000, 1000, 1.0, 1.0)}
    assert {r["name"] for r in changed} == {f"aten::op_{i}" for i in range(0, n, 3)}
    assert rows[:len(changed)] == changed  # the largest changes first
    assert {r["status"] for r in rows[len(changed):]} == {"same"}
    assert "aten::op_0 " in diff.stdout  # the table's first row: the largest change, then by name
