"""repro's timings: the spread of a case's runs, each variant's speed-up interval and verdict, and the best variant,
from hand-built run times (every expected value worked out by hand below)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from opscope.render.base import Terminal
from opscope.render.csv import CsvRenderer
from opscope.render.json import JsonRenderer
from opscope.repro.report import repro_report
from opscope.repro.run import merge
from opscope.repro.timings import NO_RUNS, best_variant, variant_fields

BASE = [100, 110, 120, 130, 140]  # median 120; p10 at position 0.4: 104; p90 at 3.6: 136


def variant(name: str, times: list[int], base: list[int] = BASE, within: bool = True) -> dict:
    return {"name": name, "status": "ok", "replay_ns": 1, "runs": len(times), "times_ns": times,
            "baseline_times_ns": base, "speedup": 9.9, "baseline_ns": 1, "max_abs_err": 0.0, "max_rel_err": 0.0,
            "within_tolerance": within}


def test_a_variant_far_faster_is_faster_with_its_interval():
    # variant = base - 60: the pairwise differences are 10 (j - i) - 60; their median -60; 5 against 5 puts the
    # interval at the 3rd and 23rd of the 25 ordered differences: -100, -90, -90 ... -30, -30, -20 -> [-90, -30]
    f = variant_fields(variant("a", [v - 60 for v in BASE]))
    assert (f["delta_ns"], f["delta_low_ns"], f["delta_high_ns"]) == (-60, -90, -30)
    assert f["verdict"] == "faster"
    # speed-up 120 / (120 - 60) = 2; its interval 120 / (120 - 30) = 1.333 to 120 / (120 - 90) = 4
    assert (f["speedup"], f["speedup_low"], f["speedup_high"]) == (2.0, 1.333, 4.0)
    # the variant's runs 40 50 60 70 80: median 60, p10 44, p90 76; the baseline's median beside it 120
    assert (f["replay_ns"], f["p10_ns"], f["p90_ns"], f["runs"], f["baseline_ns"]) == (60, 44, 76, 5, 120)


def test_an_interval_holding_no_change_is_no_difference():
    # base + 5: differences 10 (j - i) + 5 (-35 once, -25 twice, ... 35 twice, 45 once), median 5, interval the
    # 3rd and 23rd: [-25, 35]: it holds 0
    f = variant_fields(variant("b", [v + 5 for v in BASE]))
    assert (f["delta_ns"], f["delta_low_ns"], f["delta_high_ns"]) == (5, -25, 35)
    assert f["verdict"] == "no difference"
    assert (f["speedup"], f["speedup_low"], f["speedup_high"]) == (0.96, 0.7742, 1.263)  # 120/125, 120/155, 120/95


def test_far_slower_is_slower_and_too_few_runs_give_no_verdict():
    # base + 100: differences 10 (j - i) + 100, the 3rd and 23rd 70 and 130
    f = variant_fields(variant("d", [v + 100 for v in BASE]))
    assert (f["delta_low_ns"], f["delta_high_ns"], f["verdict"]) == (70, 130, "slower")
    assert f["speedup"] == 0.5455  # 120 / 220
    # 3 runs: no 95% interval; the speed-up is the ratio of the medians, 120 / 50
    few = variant_fields(variant("c", [40, 50, 60]))
    assert few["verdict"] == "too few runs to tell" and few["speedup"] == 2.4 and few["speedup_low"] is None
    # a result without run times (an older script's): its own figures stay, no verdict
    old = variant_fields({"name": "x", "status": "ok", "replay_ns": 5, "speedup": 1.5})
    assert old["verdict"] == NO_RUNS and "speedup" not in old and old["p10_ns"] is None


def test_the_best_variant_is_the_fastest_found_faster_within_tolerance():
    measured = []
    for v in (variant("a", [v - 60 for v in BASE]), variant("b", [v + 5 for v in BASE]),
              variant("c", [40, 50, 60]), variant("e", [v - 80 for v in BASE], within=False)):
        v.update(variant_fields(v))
        measured.append(v)
    # c (2.4x, too few runs), b (no difference) and e (outputs beyond tolerance) are not candidates
    assert best_variant(measured)["name"] == "a"
    assert best_variant(measured[1:3]) is None


def run_entry() -> tuple[dict, dict]:
    entry = {"id": 1, "op": "aten::conv2d", "script": "case_01_conv2d.py", "calls": 4, "share": 0.5,
             "trace_ns": 240, "input_dims": [[1, 4, 6, 6]], "input_types": ["float"], "status": "not run",
             "variants": [{"name": n, "change": f"change {n}"} for n in ("a", "b", "c", "tf32")]}
    base_all = [*BASE, 100, 110, 120, 130, 140, 125]  # the baseline's runs alone and beside the variants
    result = {"status": "ok", "device": "cpu", "replay_ns": 120, "runs": 11, "times_ns": base_all, "ratio": 0.5,
              "variants": [variant("a", [v - 60 for v in BASE]), variant("b", [v + 5 for v in BASE]),
                           variant("c", [40, 50, 60]), {"name": "tf32", "status": "needs cuda"}]}
    return entry, result


def test_merge_keeps_every_run_and_adds_the_spread_and_the_verdicts():
    entry, result = run_entry()
    merge(entry, result, ["a", "b", "c", "tf32"])
    # the baseline's 11 runs in order: 100 100 110 110 120 120 125 130 130 140 140: median 120 (the 6th);
    # p10 at position 1.0: 100; p90 at position 9.0: 140
    assert (entry["replay_ns"], entry["replay_p10_ns"], entry["replay_p90_ns"], entry["runs"]) == (120, 100, 140, 11)
    assert entry["times_ns"] == result["times_ns"]
    verdicts = {v["name"]: v["verdict"] for v in entry["variants"]}
    assert verdicts == {"a": "faster", "b": "no difference", "c": "too few runs to tell", "tf32": None}
    assert entry["variants"][0]["times_ns"] == [40, 50, 60, 70, 80]
    assert (entry["best_variant"], entry["best_speedup"], entry["best_speedup_low"],
            entry["best_speedup_high"]) == ("a", 2.0, 1.333, 4.0)


def render(report, renderer) -> str:
    out = io.StringIO()
    console = Console(file=out, width=400, color_system=None)
    renderer().render(report, Terminal(console, Console(file=io.StringIO())))
    return out.getvalue()


def test_table_json_and_csv_show_the_spread(tmp_path: Path):
    entry, result = run_entry()
    merge(entry, result, ["a", "b", "c", "tf32"])
    report = repro_report(tmp_path, {"cases": [entry], "trace": "t.json", "time_is": "host self time"}, ran=True)
    cases = report.sections[1].arrow.to_pylist()[0]
    assert (cases["replay_ns"], cases["replay_p10_p90"], cases["runs"]) == (120, "100 ns-140 ns", 11)
    assert cases["best_variant"] == "a x2.00 (1.33x-4.00x)"
    rows = {r["variant"]: r for r in report.sections[2].arrow.to_pylist()}
    assert (rows["a"]["p10_ns"], rows["a"]["p90_ns"], rows["a"]["runs"]) == (44, 76, 5)
    assert rows["a"]["speedup_ci"] == "1.33x-4.00x" and rows["b"]["verdict"] == "no difference"
    assert rows["c"]["speedup_ci"] is None and rows["c"]["verdict"] == "too few runs to tell"
    (doc,) = json.loads(render(report, JsonRenderer))
    assert (doc["replay_p10_ns"], doc["replay_p90_ns"], doc["runs"]) == (100, 140, 11)
    assert doc["variants"][1]["verdict"] == "no difference" and doc["times_ns"][:2] == [100, 110]
    header, row = render(report, CsvRenderer).splitlines()[:2]
    fields = dict(zip(header.split(","), row.split(",")))
    assert (fields["replay_ns"], fields["replay_p10_ns"], fields["replay_p90_ns"], fields["runs"]) == \
        ("120", "100", "140", "11")
    assert (fields["best_variant"], fields["best_speedup_low"]) == ("a", "1.333")
