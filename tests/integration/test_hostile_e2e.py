"""Hostile trace text and file names: no traceback, and trace text never drives the output.

Each trace is written here; the checks read the CLI's bytes: no ESC, bell or other control byte reaches stdout
(terminal or CSV), rich markup in trace text and file names prints literally."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from support.cli import run_cli_many
from support.tracefiles import small_gpu_trace, write_trace, x

#: Every C0 control but newline, plus DEL: none may reach stdout from trace text.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f]")
HOSTILE = "aten::mm\x1b[31mRED\x07[bold]x[/]\x9b2J\rend"


def _hostile_trace(path: Path) -> Path:
    return write_trace(path, [x(HOSTILE, 0, 10), x("=HYPERLINK(1)", 20, 10), x("-2+3", 40, 10)])


def test_control_characters_in_op_names_are_written_out_on_the_terminal_and_in_csv(tmp_path):
    trace = _hostile_trace(tmp_path / "t.json")
    table, as_csv = run_cli_many([("ops", str(trace)), ("ops", str(trace), "--format", "csv")],
                                 cache=tmp_path / "cache")
    for res in (table, as_csv):
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
        assert not _CONTROL.search(res.stdout), repr(res.stdout)
        assert "\x9b" not in res.stdout
    # the name shows with its controls spelled out, markup kept literally
    shown = "aten::mm\\x1b[31mRED\\x07[bold]x[/]\\x9b2J\\x0dend"
    assert shown in table.stdout
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(as_csv.stdout))}
    assert set(rows) == {shown, "'=HYPERLINK(1)", "'-2+3"}
    assert rows[shown]["calls"] == "1"


def test_csv_cell_with_a_newline_stays_one_valid_record(tmp_path):
    trace = write_trace(tmp_path / "t.json", [x("two\nlines", 0, 10), x("b", 20, 5)])
    (res,) = run_cli_many([("ops", str(trace), "--format", "csv")], cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert sorted(r["name"] for r in rows) == ["b", "two\nlines"]


def test_file_name_holding_rich_markup_is_plain_text_in_every_command(tmp_path):
    folder = tmp_path / "x["
    folder.mkdir()
    trace = _hostile_trace(folder / "].json")  # the path reads x[/].json: a closing tag to rich
    commands = [(c, str(trace)) for c in ("summary", "ops", "kernels", "gpu", "memory", "steps", "scope", "advise")]
    missing = folder / "[bold]no.json"
    commands.append(("ops", str(missing)))
    results = run_cli_many(commands, cache=tmp_path / "cache")
    for args, res in zip(commands, results):
        assert "MarkupError" not in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
        assert not _CONTROL.search(res.stdout), (args, repr(res.stdout))
        if args[1] == str(missing):
            assert res.returncode == 2 and str(missing) in res.stderr, res.stderr
        else:
            assert res.returncode == 0, (args, res.stderr)


def test_bad_option_values_give_one_line_errors_not_tracebacks(tmp_path):
    trace = write_trace(tmp_path / "t.json", [x("a", 0, 10), x("b", 20, 5)])
    t = str(trace)
    bad = [
        (("ops", t, "--steps", "99999999999999999999"), "step numbers go up to"),
        (("ops", t, "--steps", "1-99999999999999"), "step numbers go up to"),
        (("ops", t, "--steps", "1-5000000"), "at most"),
        (("gpu", t, "--short-gap-us", "inf"), "finite"),
        (("query", t, ""), "no table"),
    ]
    results = run_cli_many([args for args, _ in bad] + [("ops", t, "--by", "name,name", "--format", "csv")],
                           cache=tmp_path / "cache")
    for (args, words), res in zip(bad, results):
        assert res.returncode == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("opscope: error: ") and words in lines[0], (args, lines)
    by_twice = results[-1]
    assert by_twice.returncode == 0, by_twice.stderr
    rows = list(csv.DictReader(io.StringIO(by_twice.stdout)))
    assert sorted((r["name"], r["calls"]) for r in rows) == [("a", "1"), ("b", "1")]


def _memory(ts: float, nbytes: int, allocated: int) -> dict:
    return {"ph": "i", "s": "t", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1,
            "args": {"Bytes": nbytes, "Total Allocated": allocated, "Total Reserved": max(allocated, 0),
                     "Addr": 1, "Device Type": 0, "Device Id": -1}}


def test_times_and_byte_counts_at_the_int64_edges_are_dropped_and_counted_not_a_crash(tmp_path):
    # 9.2e15 us = 9.2e18 ns: inside int64, but the span from -9.2e18 overflows it; 1e308 is far outside.
    events = [x("a", 5, 10), _memory(6, 100, 100), _memory(7, 2**62, 2**63 - 1), _memory(8, -2**63, -2**63),
              x("far", 9.2e15, 10), x("before", -9.2e15, 10), x("huge", 1e308, 1e308), _memory(9.2e15, 1, 101)]
    trace = write_trace(tmp_path / "t.json", events)
    t = str(trace)
    commands = [("memory", t), ("memory", t, "--timeline", "5"), ("summary", t, "--format", "json"), ("advise", t),
                ("gpu", t), ("steps", t)]
    results = run_cli_many(commands, cache=tmp_path / "cache")
    for args, res in zip(commands, results):
        assert res.returncode == 0, (args, res.stderr)
        assert "Traceback" not in res.stderr, (args, res.stderr)
    rows = json.loads(results[2].stdout)
    dropped = {r["metric"]: r["value"] for r in rows if r["section"] == "not_mapped"}
    # far, before and huge (events) and the record at 9.2e15 us: four times out of range
    assert dropped["events with missing, negative, non-numeric or out-of-range (beyond 73 years) ts/dur (dropped)"] == 4
    # the records of 2^62 and -2^63 bytes
    assert dropped["memory records with a byte count beyond 2^53 (dropped)"] == 2
    events = {r["metric"]: r["value"] for r in rows if r["section"] == "overview"}["events"]
    assert events == 1  # only "a" is left


def test_odd_device_properties_and_a_hostile_run_json_do_not_crash_advise(tmp_path):
    odd = tmp_path / "odd"
    odd.mkdir()
    props = [{"id": [1], "name": 5, "totalGlobalMem": "lots", "computeMajor": "x", "computeMinor": [2]}, 7, "s"]
    write_trace(odd / "t.json", small_gpu_trace(), header={"deviceProperties": props})
    rec = tmp_path / "rec"
    rec.mkdir()
    write_trace(rec / "t.json", small_gpu_trace())
    (rec / "run.json").write_text(json.dumps({
        "traces": ["t.json", {"a": 1}, 5], "cpu": 5, "threads": "x", "environment": [1], "options": 3,
        "gpus": [1, "a", {"name": 5, "total_memory": "x", "index": [1]}], "step_times_ns": "x",
        "recorded_steps": {"a": 1}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    secret = write_trace(tmp_path / "secret.json", small_gpu_trace())
    (elsewhere / "run.json").write_text(json.dumps({"traces": [str(secret), "../secret.json"]}))
    commands = [("advise", str(odd / "t.json")), ("advise", str(rec / "t.json")), ("advise", str(rec)),
                ("summary", str(rec / "t.json")), ("advise", str(elsewhere))]
    results = run_cli_many(commands, cache=tmp_path / "cache")
    for args, res in zip(commands[:4], results):
        assert res.returncode == 0, (args, res.stderr)
        assert "Traceback" not in res.stderr, (args, res.stderr)
    # a run.json naming paths outside its directory opens none of them
    refused = results[-1]
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "holds no trace" in refused.stderr and "secret" not in refused.stdout


def test_run_json_readers_keep_only_values_of_the_right_type():
    from opscope.analyses.recording import clean_run, trace_names

    run = {"traces": ["a.json", "/etc/passwd", "../b.json", 5, "", ".."], "cpu": 5, "threads": {"intra_op": 2},
           "gpus": [1, {"name": "H100"}], "step_times_ns": [1, "2", True, 3]}
    assert trace_names(run) == ["a.json"]
    clean = clean_run(run)
    assert "cpu" not in clean and clean["threads"] == {"intra_op": 2}
    assert clean["gpus"] == [{"name": "H100"}] and clean["step_times_ns"] == [1, 3]


def test_json_escapes_del_and_c1_controls_that_json_itself_writes_raw(tmp_path):
    # JSON escapes only C0 controls; U+009B (CSI on a terminal taking 8-bit controls) and DEL would pass raw
    name = "c1\x9b2J del\x7f e\u0301"
    trace = write_trace(tmp_path / "t.json", [x(name, 0, 10), x("b", 20, 5)])
    outs = run_cli_many([("ops", str(trace), "-f", "json"), ("query", str(trace), "SELECT name FROM events", "-f",
                                                                "json")], cache=tmp_path / "cache")
    for res in outs:
        assert res.returncode == 0, res.stderr
        assert not re.search("[\x7f-\x9f]", res.stdout), repr(res.stdout)
        assert "c1\\u009b2J del\\u007f" in res.stdout
        assert name in {r["name"] for r in json.loads(res.stdout)}  # the document still holds the name as it is
