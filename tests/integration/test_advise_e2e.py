"""The advice framework through the CLI (JSON, --explain, tables, usage errors, bad files) and the gpu-idle rule
on real traces, checked against their raw JSON."""

from __future__ import annotations

import json

import pytest
from support.shared import shared_trace
from support.tracefiles import small_gpu_trace, write_trace
from typer.testing import CliRunner

from opscope.advise import advise, all_rules, rule
from opscope.cli import app
from opscope.ingest import open_trace

runner = CliRunner()


def test_gpu_idle_on_a_real_trace_matches_the_raw_json():
    from support import tracemutate as tm

    path = shared_trace("hta/trace_diff/control/control.json.gz")
    doc = tm.load(path)
    steps = tm.steps(doc)
    w0, w1 = steps[0][1], steps[-1][2]
    busy = sum(min(e, w1) - max(s, w0) for s, e in tm.busy_union(doc, 3) if e > w0 and s < w1)
    idle_us = (w1 - w0) - busy
    f = advise(open_trace(path), only=["gpu-idle"]).findings[0]
    assert abs(f.saving_ns - idle_us * 1000 / len(steps)) <= 1


def test_cli_advise_json_and_explain(tmp_path):
    p = write_trace(tmp_path / "t.json", small_gpu_trace())
    r = runner.invoke(app, ["advise", str(p), "--format", "json", "--rules", "gpu-idle"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows[0]["rule"] == "gpu-idle" and rows[0]["saving_ns"] == 1_345_000
    assert {"title", "evidence", "estimate", "change", "saving_pct"} <= set(rows[0])
    r = runner.invoke(app, ["advise", "--explain", "gpu-idle"])
    assert r.exit_code == 0 and rule("gpu-idle").explain.splitlines()[0] in r.stdout
    r = runner.invoke(app, ["advise", "--explain", "all"])
    assert all(x.id in r.stdout for x in all_rules())


def test_cli_advise_table_names_the_finding(tmp_path):
    p = write_trace(tmp_path / "t.json", small_gpu_trace())
    r = runner.invoke(app, ["advise", str(p)])
    assert r.exit_code == 0, r.output
    assert "GPU 0 is idle" in r.stdout and "gpu-idle" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["advise", "--explain", "no-such-rule"], "no rule 'no-such-rule'"),
    (["advise"], "give a trace"),
    (["advise", "--rules", "nope", "{trace}"], "no rule 'nope'"),
])
def test_cli_advise_usage_errors(tmp_path, cache_dir, args, message):
    from support.cli import run_cli

    p = write_trace(tmp_path / "t.json", small_gpu_trace())
    res = run_cli(*[a.format(trace=p) for a in args], cache=cache_dir)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_advise_on_bad_files_gets_one_line_and_exit_2(tmp_path, cache_dir):
    import gzip

    from support.cli import assert_one_line_error, run_cli_many

    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    not_trace = tmp_path / "config.json"
    not_trace.write_text('{"model": "resnet", "lr": 0.1}')
    half = tmp_path / "half.json.gz"
    half.write_bytes(gzip.compress(b'{"traceEvents": [')[:10])
    cases = [empty, corrupt, not_trace, half, tmp_path / "missing.json"]
    results = run_cli_many([("advise", str(p)) for p in cases] + [("diff", str(cases[0]), str(cases[1]))],
                           cache=cache_dir)
    for path, res in zip(cases + [empty], results):
        assert_one_line_error(res, path)


def test_longest_gaps_of_a_real_trace_show_the_data_loader_from_the_raw_json():
    from support import tracemutate as tm

    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    doc = tm.load(path)
    steps = tm.steps(doc)
    w0, w1 = steps[0][1], steps[-1][2]
    busy = [(s, e) for s, e in tm.busy_union(doc, 0) if e > w0 and s < w1]
    edges = [w0] + [e for _, e in busy]
    gaps = sorted(((s, e) for s, e in zip(edges, [s for s, _ in busy] + [w1]) if e > s), key=lambda g: g[0] - g[1])
    host = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator", "Runtime",
                                                                                      "cuda_runtime", "user_annotation")
            and not e["name"].startswith("ProfilerStep#")]
    f = advise(open_trace(path), only=["gpu-idle"]).findings[0]
    shown = [e for e in f.evidence if e["what"] == "gap"]
    for (g0, g1), row in zip(gaps[:3], shown):
        assert row["idle_ns"] == round((g1 - g0) * 1000)
        inside = sorted((max(e["ts"], g0), min(e["ts"] + e["dur"], g1)) for e in host
                        if e["ts"] < g1 and e["ts"] + e["dur"] > g0)
        covered, end = 0.0, g0
        for s, e in inside:
            covered += max(0.0, e - max(s, end))
            end = max(end, e)
        assert row["host_busy_pct"] == pytest.approx(100 * covered / (g1 - g0), abs=0.01)
        assert row["host_op"].startswith("enumerate(DataLoader)#")
