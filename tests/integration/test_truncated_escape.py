"""A trace cut off inside a ``\\u00`` escape. Every command gives a result with warning lines or
exactly one error line; ``diff`` of a recoverable and an unrecoverable file gave the first's warning and the
second's error (two lines) until both traces were opened before either said anything."""

from __future__ import annotations

import gzip
import json

import pytest
from support.cli import assert_one_line_error, run_cli_many
from support.tracefiles import small_gpu_trace, x

TRUNCATED = "file is truncated (the file ends before the trace does)"


def _cut_in_escape(path, events, gz):
    """The trace's JSON up to and including ``\\u00`` of its first escaped control character."""
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1)
    cut = text[: text.index("\\u0001") + len("\\u00")].encode()
    path.write_bytes(gzip.compress(cut) if gz else cut)
    return path


@pytest.fixture(params=[False, True], ids=["json", "gz"])
def cut_files(request, tmp_path):
    """A file whose 12 events come before the cut (recoverable), and one cut inside its first event."""
    suffix = ".json.gz" if request.param else ".json"
    late = _cut_in_escape(tmp_path / f"late{suffix}", small_gpu_trace() + [x("a\u0001b", 5000, 1)], request.param)
    early = _cut_in_escape(tmp_path / f"early{suffix}", [x("a\u0001b", 1, 1)] + small_gpu_trace(), request.param)
    return late, early


COMMANDS = ["summary", "ops", "kernels", "steps", "scope", "code", "memory", "gpu", "advise"]


def test_every_command_is_a_result_with_warnings_or_one_error(cut_files, cache_dir):
    late, early = cut_files
    runs = [(c, str(f)) for c in COMMANDS for f in (late, early)] + [
        ("query", str(late), "select count(*) from events"), ("query", str(early), "select 1"),
        ("diff", str(late), str(early)), ("diff", str(early), str(late)), ("diff", str(late), str(early), "-f", "json")]
    for res in run_cli_many(runs, cache=cache_dir):
        args = res.args
        if str(early) in args:
            assert_one_line_error(res, early, "truncated before its first complete event")
        else:
            assert res.returncode == 0, (args, res.stderr)
            lines = res.stderr.strip("\n").splitlines()
            assert lines[0] == f"warning: {late}: {TRUNCATED}; recovered 12 complete events", (args, res.stderr)
            assert not any(line.startswith("opscope: error") for line in lines), (args, res.stderr)


def test_diff_of_two_recoverable_files_warns_for_each(tmp_path, cache_dir):
    a = _cut_in_escape(tmp_path / "a.json", small_gpu_trace() + [x("a\u0001b", 5000, 1)], gz=False)
    b = _cut_in_escape(tmp_path / "b.json.gz", small_gpu_trace() + [x("a\u0001b", 5000, 1)], gz=True)
    (res,) = run_cli_many([("diff", str(a), str(b))], cache=cache_dir)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [f"warning: {a}: {TRUNCATED}; recovered 12 complete events",
                                       f"warning: {b}: {TRUNCATED}; recovered 12 complete events"]
