"""bench/curves.py and the pieces of bench/ingest.py it relies on: the copy count of the
trace generator, the per-run memory limit, the summed RSS of a case's processes, the per-phase hook."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


curves = _load("curves")  # puts bench/ on sys.path for its own `from ingest import ...`; take it off again
if str(BENCH) in sys.path:
    sys.path.remove(str(BENCH))
ingest = sys.modules["ingest"]


def test_sizes_are_named_sizes_or_copy_counts():
    assert curves.parse_sizes("54MB, 260mb,990MB,2GB") == [("54MB", 0), ("260MB", 5), ("990MB", 19), ("2GB", 38)]
    assert curves.parse_sizes("7x,1X") == [("7x", 7), ("1x", 1)]
    for bad in ("3GB", "0x", "", "x"):
        with pytest.raises(SystemExit):
            curves.parse_sizes(bad)


def test_phase_output_is_the_numbers_of_a_json_object_possibly_after_log_lines():
    assert curves.parse_phases('{"decompress": 0.5, "parse": 2}') == {"decompress": 0.5, "parse": 2.0}
    assert curves.parse_phases('reading...\n{"parse": 1.25, "events": "many", "ok": true}\n') == {"parse": 1.25}
    assert curves.parse_phases("no json here") == {}
    assert curves.parse_phases("[1, 2]") == {}


def test_generator_copy_count_shifts_each_copy_and_is_found_again(tmp_path):
    events = small_gpu_trace()
    src = write_trace(tmp_path / "src.json", events)
    work = tmp_path / "work"
    dest = work / "two.json.gz"
    meta = ingest.make_big_trace(src, dest, 99.0, copies=2)  # size_gb is ignored when copies is given
    doc = json.loads(gzip.decompress(dest.read_bytes()))
    body = [e for e in events if e["ph"] != "M"]
    assert meta["copies"] == 2
    assert len(doc["traceEvents"]) == meta["events"] == 1 + 2 * len(body)
    assert meta["json_bytes"] == len(gzip.decompress(dest.read_bytes()))
    # copy 1 is copy 0 shifted by the span (0 .. 3050 us) + 1 ms, with correlations offset by max + 1 = 4
    first, second = doc["traceEvents"][: len(body) + 1], doc["traceEvents"][len(body) + 1:]
    assert [e["ts"] for e in second] == [e["ts"] + 4050 for e in first if e["ph"] != "M"]
    corr = [e["args"]["correlation"] for e in doc["traceEvents"] if "correlation" in e.get("args", {})]
    assert sorted(corr) == [1, 1, 2, 2, 3, 3, 5, 5, 6, 6, 7, 7]
    assert "ProfilerStep#1001" in {e["name"] for e in second}

    assert curves.find_generated(work, src, 2) == dest
    assert curves.find_generated(work, src, 3) is None
    before = dest.stat().st_mtime_ns
    ingest.make_big_trace(src, dest, 1.0, copies=2)  # reused, not rewritten
    assert dest.stat().st_mtime_ns == before


GROW = "b = bytearray({n}); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep({s})"


def test_a_run_over_the_memory_limit_is_killed_and_says_so():
    r = ingest.run_child([sys.executable, "-c", GROW.format(n=400_000_000, s=5)], timeout=limit(60),
                         max_rss_bytes=200_000_000)
    assert r.rc != 0
    assert "over the 0.2 GB limit" in r.stderr_tail
    assert r.wall_s < 5  # killed, not slept out
    case = ingest.Case("t", "c", [])
    case.runs.append(r)
    case.finish()
    assert curves._why({"error": case.error}).startswith("out of memory (killed at 0.")


def test_the_summed_rss_of_a_case_counts_its_worker_processes():
    code = ("import os, time\n"
            "pids = [os.fork() for _ in range(1)]\n"  # parent and one child each hold ~150 MB
            + GROW.format(n=150_000_000, s=1.5) + "\n"
            "if pids[0]:\n    os.waitpid(pids[0], 0)\n")
    r = ingest.run_child([sys.executable, "-c", code], timeout=limit(60), max_rss_bytes=10**11)
    assert r.rc == 0
    assert 140e6 < r.peak_rss_bytes < 220e6  # %M: the largest single process
    assert r.group_rss_bytes > 1.7 * 150e6  # the sum of both (sampled)


def test_whole_run_on_a_small_trace_with_a_phase_module(tmp_path, monkeypatch):
    src = write_trace(tmp_path / "small.json.gz", small_gpu_trace(), gz=True)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fakephases.py").write_text(
        "import json, sys, os\n"
        "assert os.environ['OPSCOPE_CACHE_DIR']\n"
        "print('a log line'); print(json.dumps({'decompress': 0.25, 'parse': 1.5, 'trace': sys.argv[1]}))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(mods), *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = tmp_path / "out" / "curves.json"
    rc = curves.main(["--trace", str(src), "--sizes", "2x", "--repeat", "1", "--skip-hta",
                      "--tracelens-python", str(tmp_path / "no-such-python"), "--phases-module", "fakephases",
                      "--work-dir", str(tmp_path / "work"), "--out", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    (size,) = report["traces"]
    assert size["copies"] == 2 and size["generated"]["copies"] == 2
    cases = {c["case"]: c for c in size["cases"]}
    assert list(cases) == [curves.REFERENCE, curves.NO_CACHE, curves.COLD, curves.WARM, curves.TRACELENS]
    for name in (curves.REFERENCE, curves.NO_CACHE, curves.COLD, curves.WARM):
        assert cases[name]["error"] is None and len(cases[name]["runs"]) == 1, cases[name]["error"]
    assert cases[curves.REFERENCE]["wall_ratio"] == 1.0
    assert cases[curves.WARM]["cache_bytes"] > 0
    assert cases[curves.TRACELENS]["error"].startswith("not run:")
    assert size["phases"]["seconds"] == {"decompress": 0.25, "parse": 1.5}
    assert "| decompress | parse |" in report["phases_md"]
    assert "not run" in report["pivot_md"]
