"""rocprof-compute's real counter CSVs (../shared/traces/rocprofiler-compute/vcopy, 3 vecCopy dispatches per GPU)
through the command line: the kernels' times equal End - Start of the file's rows (computed here with the csv
module), the counters are the file's own values, MI300's rounded timestamps give no made-up duration, and the
workload's sysinfo/roofline files are refused in one line.
"""

from __future__ import annotations

import csv
import json

import pytest
from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.shared import shared_trace

VCOPY = "rocprofiler-compute/vcopy"


def _file_kernel_ns(path) -> list[int]:
    with open(path, newline="") as fh:
        return [int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in csv.DictReader(fh)]


@pytest.mark.parametrize(("gpu", "total"), [("MI100", 62_560), ("MI200", 52_320)])
def test_vcopy_kernels_equal_the_files_times(tmp_path, gpu, total):
    stamps = shared_trace(f"{VCOPY}/{gpu}/timestamps.csv")
    perf = shared_trace(f"{VCOPY}/{gpu}/pmc_perf.csv")
    durations = _file_kernel_ns(stamps)
    assert sum(durations) == total  # the survey's reference, from the file itself
    results = run_cli_many([("kernels", str(f), "--format", "json") for f in (stamps, perf)]
                           + [("steps", str(stamps), "--format", "json")], cache=tmp_path / "cache")
    for res in results[:2]:
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [(r["name"], r["kind"], r["calls"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in rows] == [
            ("vecCopy", "kernel", 3, total, min(durations), max(durations))]
    assert results[2].returncode == 0 and json.loads(results[2].stdout) == []


def test_vcopy_counters_are_the_files_values(tmp_path):
    perf = shared_trace(f"{VCOPY}/MI100/pmc_perf.csv")
    with open(perf, newline="") as fh:
        rows = list(csv.DictReader(fh))
    res = run_cli("query", str(perf), "--format", "json",
                  "select name, series, ts_ns, value from counters where name in ('SQ_WAVES', 'GRBM_GUI_ACTIVE', "
                  "'TCC_HIT[0]', 'obj_1', 'Correlation_ID', 'wave_size') order by name, series",
                  cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    got = [(r["name"], r["series"], r["ts_ns"], r["value"]) for r in json.loads(res.stdout)]
    want = sorted((name, f"dispatch {r['Dispatch_ID']}", int(r["Start_Timestamp"]), float(r[name]))
                  for r in rows for name in ("SQ_WAVES", "GRBM_GUI_ACTIVE", "TCC_HIT[0]"))
    assert got == want  # identity columns (obj_1, Correlation_ID, wave_size) are no counters


def test_mi300_rounded_timestamps_are_warned_not_made_into_durations(tmp_path):
    perf = shared_trace(f"{VCOPY}/MI300X_A1/pmc_perf.csv")
    res, summary = run_cli_many([("kernels", str(perf), "--format", "json"),
                                 ("summary", str(perf), "--format", "json")], cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    assert [(r["name"], r["calls"], r["total_ns"]) for r in json.loads(res.stdout)] == [("vecCopy", 3, 0)]
    assert summary.returncode == 0, summary.stderr
    said = {r["metric"]: r["value"] for r in json.loads(summary.stdout) if r["section"] == "not_mapped"}
    assert said == {"start/end times rounded by the writer (to multiples of 10,000,000,000 ns, e.g. '8.1097E+14'): "
                    "those kernels' durations are unknown (0 here, args.duration_unknown) and their starts "
                    "approximate": 3}


@pytest.mark.parametrize(("name", "what"), [("MI100/sysinfo.csv", "sysinfo.csv"),
                                            ("MI200/roofline.csv", "roofline.csv")])
def test_workload_descriptions_are_refused_in_one_line(tmp_path, name, what):
    path = shared_trace(f"{VCOPY}/{name}")
    assert_one_line_error(run_cli("summary", str(path), cache=tmp_path / "cache"), path, what, "not a trace")
