"""Bad input given to the ``opscope`` command: one error line on stderr (exit code 2) or the partial read with its
warning, never a traceback; the runs are started together, once, by the ``cli`` fixture.

Every fixture is written as text (``support.bad_input``), one key group per line like Kineto writes it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from support.bad_input import (
    FIFTY,
    TRUNCATED,
    US,
    _complete_before,
    _cut_points,
    args_of,
    assert_trace_error,
    document,
    event,
    names,
    op,
    warnings_of,
    write,
)
from support.cli import assert_one_line_error, run_cli, run_cli_many

from opscope.errors import TraceError
from opscope.ingest import open_trace

TOO_DEEP = "events nested more than 512 levels deep (beyond the JSON nesting opscope reads: dropped as hostile)"


# -- the command-line runs ---------------------------------------------------------------------------

# The command-line runs are started together, once, by the ``cli`` fixture: every test that checks what
# ``opscope`` prints registers its input file's builder here with the command line to run on it.
CLI_CASES: dict[str, tuple] = {}


def cli_case(*command: str):
    """Register ``builder(folder) -> path`` to be run as ``opscope COMMAND[0] PATH COMMAND[1:]``."""
    def register(builder):
        CLI_CASES[builder.__name__] = (builder, command)
        return builder
    return register


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """``{builder name: (input path, finished opscope run)}`` for every registered case."""
    folder = tmp_path_factory.mktemp("cli-inputs")
    cache = tmp_path_factory.mktemp("cli-cache")
    paths = {name: builder(folder) for name, (builder, _) in CLI_CASES.items()}
    commands = [(command[0], str(paths[name]), *command[1:]) for name, (_, command) in CLI_CASES.items()]
    results = run_cli_many(commands, cache)
    return {name: (paths[name], res) for name, res in zip(CLI_CASES, results)}


# -- 1. empty file ---------------------------------------------------------------------------------

@cli_case("summary")
def empty_file(folder: Path) -> Path:
    return write(folder / "empty.json", b"")


def test_empty_file(cli):
    path, res = cli["empty_file"]
    assert_one_line_error(res, path, "empty (0 bytes)")
    assert_trace_error(path, "empty (0 bytes)")


# -- 2. truncated JSON -----------------------------------------------------------------------------

@cli_case("summary")
def truncated_json(folder: Path) -> Path:
    return write(folder / "cut.json", FIFTY[:_cut_points(FIFTY, 29)["inside_name"]])


@pytest.mark.parametrize("where", ["after_open_brace", "inside_name", "inside_ts", "inside_args",
                                   "before_close_brace", "after_close_brace"])
def test_truncated_json_recovers_complete_events(tmp_path, cli, where):
    text = FIFTY
    cut = _cut_points(text, 29)[where]  # mid-way through the 30th event
    path = write(tmp_path / "cut.json", text[:cut])
    expected = _complete_before(text, cut, 50)
    assert expected == (30 if where == "after_close_brace" else 29)

    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(expected)]
    assert trace.events["ts_ns"].to_pylist() == [(100 + 20 * i) * US for i in range(expected)]
    assert trace.events["external_id"].to_pylist() == list(range(expected))
    assert trace.metadata["truncated"] is True
    truncated = [w for w in warnings_of(trace) if w.startswith(TRUNCATED)]
    assert len(truncated) == 1 and f"recovered {expected} complete events" in truncated[0]

    if where == "inside_name":  # the command itself, once: exit 0 and the warning on stderr
        cli_path, res = cli["truncated_json"]
        assert cli_path.read_bytes() == path.read_bytes()
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
        flat = " ".join(res.stderr.split())
        assert "warning:" in flat and TRUNCATED in flat and f"recovered {expected} complete events" in flat
        assert re.search(rf"^events\s+{expected}\s*$", res.stdout, re.M), res.stdout


# -- 3. corrupt gzip -------------------------------------------------------------------------------

@cli_case("summary")
def gzip_magic_then_garbage(folder: Path) -> Path:
    return write(folder / "garbage.json.gz", b"\x1f\x8b" + b"this is not deflate data at all" * 10)


def test_corrupt_gzip(tmp_path, cli):
    path, res = cli["gzip_magic_then_garbage"]
    assert_one_line_error(res, path, "corrupt gzip data")
    assert_trace_error(path, "corrupt gzip data")
    bad_body = write(tmp_path / "bad-body.json.gz",
                     b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff\xfe\x07garbage" * 30)
    assert_trace_error(bad_body, "corrupt gzip data")
    assert_trace_error(write(tmp_path / "magic.json.gz", b"\x1f\x8b"), "gzip stream ends before any data")


# -- 4. JSON that is not a trace -------------------------------------------------------------------

@cli_case("summary")
def json_object_not_a_trace(folder: Path) -> Path:
    return write(folder / "hello.json", '{"hello": [1, 2]}')


@cli_case("summary")
def json_number(folder: Path) -> Path:
    return write(folder / "number.json", "42")


def test_json_that_is_not_a_trace(tmp_path, cli):
    path, res = cli["json_object_not_a_trace"]
    assert_one_line_error(res, path, "not a trace", "hello")
    path, res = cli["json_number"]
    assert_one_line_error(res, path, "not a trace")
    for i, (content, words) in enumerate([
        ('{"hello": [1, 2]}', ("not a trace", "top-level keys: hello")),
        ("42", ("not a trace",)),
        ("-1.5e3", ("not a trace",)),
        ('"just a string"', ("not a trace",)),
        ("null", ("not a trace",)),
        ("[1, 2, 3]", ("no trace events",)),
        ('["a", "b"]', ("no trace events",)),
        ('{"traceEvents": 5}', ("not a trace",)),
        ('{"schemaVersion": 1, "traceEvents": {"a": 1}}', ("not a trace",)),
        ("not json at all", ("not a trace",)),
        ("\x00\x01\x02 binary", ("not a trace",)),
    ]):
        assert_trace_error(write(tmp_path / f"other{i}.json", content), *words)


# -- 7. hostile nesting ----------------------------------------------------------------------------

def _deep_args_trace(path: Path, open_: str, close: str) -> Path:
    depth = 100_000
    deep = event('"hostile::deep"', "300", "10", args='{"deep": ' + open_ * depth + "1" + close * depth + "}")
    good = [op(i) for i in range(10)]
    return write(path, document(good[:5] + [deep] + good[5:]))


@cli_case("summary")
def deep_args(folder: Path) -> Path:
    return _deep_args_trace(folder / "deep.json", "[", "]")


@pytest.mark.parametrize("open_, close", [("[", "]"), ('{"a": ', "}")])
def test_absurdly_deep_args_are_dropped(tmp_path, cli, open_, close):
    path = _deep_args_trace(tmp_path / "deep.json", open_, close)
    trace = open_trace(path, use_cache=False)
    assert names(trace) == [f"aten::op{i}" for i in range(10)]
    assert warnings_of(trace) == {TOO_DEEP: 1}

    if open_ == "[":
        cli_path, res = cli["deep_args"]
        assert cli_path.read_bytes() == path.read_bytes()
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr and "RecursionError" not in res.stderr
        assert re.search(r"^events\s+10\s*$", res.stdout, re.M), res.stdout


# -- 8. directory and missing path -----------------------------------------------------------------

@cli_case("summary")
def a_directory(folder: Path) -> Path:
    path = folder / "a-folder.json"
    path.mkdir()
    return path


@cli_case("ops")
def a_missing_path(folder: Path) -> Path:
    return folder / "nope.json"


def test_directory_and_missing_path(cli):
    folder, res = cli["a_directory"]
    assert_one_line_error(res, folder, "is a directory")
    missing, res = cli["a_missing_path"]
    assert_one_line_error(res, missing, "no such file")
    with pytest.raises(TraceError, match="directory"):
        open_trace(folder, use_cache=False)
    with pytest.raises(TraceError, match="no such file"):
        open_trace(missing, use_cache=False)


# -- 10. integers beyond int64 ---------------------------------------------------------------------

HUGE = "123456789012345678901234567890"
U64 = str(2 ** 64 - 1)


@cli_case("kernels", "--format", "json")
def huge_ids(folder: Path) -> Path:
    huge, u64 = HUGE, U64
    events = [
        event('"cudaLaunchKernel"', "100", "10", cat='"cuda_runtime"',
              args=f'{{"External id": 5, "correlation": {huge}}}'),
        event('"aten::big_ext"', "200", "10", args=f'{{"External id": {u64}, "correlation": 9}}'),
        event('"aten::big_pid"', "300", "10", pid=huge, tid=u64, args='{"External id": -' + huge + "}"),
        event('"flow"', "105", None, ph='"s"', cat='"ac2g"', args=None, extra=f'"id": {huge}, "bp": "e"'),
        event('"flow"', "150", None, ph='"f"', cat='"ac2g"', args=None, extra=f'"id": {u64}, "bp": "e"'),
        event('"kern"', "150", "20", cat='"kernel"', pid="0", tid="7",
              args=f'{{"correlation": {u64}, "stream": {huge}, "device": 0}}'),
    ]
    return write(folder / "huge-ids.json", document(events))


def test_ids_beyond_int64(cli):
    huge, u64 = HUGE, U64
    path, res = cli["huge_ids"]
    trace = open_trace(path, use_cache=False)
    ev = trace.events.to_pylist()
    by_name = {e["name"]: e for e in ev}
    assert set(by_name) == {"cudaLaunchKernel", "aten::big_ext", "aten::big_pid", "kern"}
    assert by_name["cudaLaunchKernel"]["correlation"] is None
    assert by_name["cudaLaunchKernel"]["external_id"] == 5
    assert by_name["aten::big_ext"]["external_id"] is None
    assert by_name["aten::big_ext"]["correlation"] == 9
    assert by_name["aten::big_pid"]["pid"] == huge
    assert by_name["aten::big_pid"]["tid"] == u64
    assert by_name["aten::big_pid"]["external_id"] is None
    assert by_name["kern"]["correlation"] is None
    assert by_name["kern"]["stream"] == 7  # args' stream does not fit: the device row's tid says it
    assert by_name["kern"]["kind"] == "kernel" and by_name["kern"]["dur_ns"] == 20 * US
    assert sorted(trace.flows["id"].to_pylist()) == sorted([huge, u64])
    assert trace.flows["ts_ns"].to_pylist() == [105 * US, 150 * US]
    assert args_of(trace, ev.index(by_name["cudaLaunchKernel"]))["correlation"] == int(huge)

    assert res.returncode == 0, res.stderr
    assert [r["name"] for r in json.loads(res.stdout)] == ["kern"]


# -- 11. metadata only -----------------------------------------------------------------------------

@cli_case("summary")
def metadata_only(folder: Path) -> Path:
    meta = [
        event('"process_name"', None, None, ph='"M"', cat=None, args='{"name": "python"}'),
        event('"thread_name"', None, None, ph='"M"', cat=None, args='{"name": "main"}'),
        event('"process_labels"', None, None, ph='"M"', cat=None, args='{"labels": "rank 0"}'),
    ]
    return write(folder / "meta-only.json", document(meta))


def test_metadata_only_file_is_rejected(cli):
    path, res = cli["metadata_only"]
    line = assert_one_line_error(res, path, "no trace events")
    assert "metadata" in line
    with pytest.raises(TraceError, match="no trace events"):
        open_trace(path, use_cache=False)


# -- 13. cache safety ------------------------------------------------------------------------------

def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cache_survives_a_file_overwritten_with_garbage(tmp_path, cache):
    path = tmp_path / "trace.json"
    good = document([op(i) for i in range(5)])
    write(path, good)
    cached_stat = path.stat()
    first = open_trace(path, cache_dir=cache)
    assert names(first) == [f"aten::op{i}" for i in range(5)] and "from_cache" not in first.metadata
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert len(entries) == 1 and (entries[0] / "meta.json").is_file()
    before = _snapshot(cache)

    garbage = b"\x00\x13garbage, not a trace\xfe" * 7
    assert len(garbage) != len(good.encode())
    write(path, garbage)
    assert_one_line_error(run_cli("ops", str(path), cache=cache), path, "not a trace")
    assert _snapshot(cache) == before  # the earlier entry is untouched and nothing was added

    # Garbage of the very size and mtime of the cached file is not mistaken for it either.
    write(path, "x" * cached_stat.st_size)
    os.utime(path, ns=(cached_stat.st_atime_ns, cached_stat.st_mtime_ns))
    assert path.stat().st_size == cached_stat.st_size
    assert path.stat().st_mtime_ns == cached_stat.st_mtime_ns
    with pytest.raises(TraceError):
        open_trace(path, cache_dir=cache)
    assert _snapshot(cache) == before

    write(path, good)
    again = open_trace(path, cache_dir=cache)
    assert names(again) == names(first) and "from_cache" not in again.metadata
    cached = open_trace(path, cache_dir=cache)
    assert names(cached) == names(first) and "from_cache" in cached.metadata
    for rel, data in before.items():
        assert (cache / rel).read_bytes() == data
