"""tools/gpu_check.py's judgements, on command outputs and key_averages() documents written in the test: the GPU
checks never run here (no GPU), so their comparisons are checked on figures worked out by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check as g  # noqa: E402

MS = 1_000_000


def checker(tmp_path: Path, dry: bool = False) -> g.GpuCheck:
    args = g.parse(["--out", str(tmp_path / "out"), *(["--dry-run"] if dry else [])])
    args.out = tmp_path / "out"
    return g.GpuCheck(args)


def ran(doc) -> g.Ran:
    return g.Ran(["python", "-m", "opscope.cli", "cmd"], 0, json.dumps(doc), "", 0.1)


def ka_row(name: str, device_us: float, self_device_us: float, device_type: str = "DeviceType.CPU",
           annotation: bool = False, count: int = 1) -> dict:
    return {"name": name, "count": count, "device_type": device_type, "is_user_annotation": annotation,
            "cpu_time_total_us": 0.0, "self_cpu_time_total_us": 0.0, "device_time_total_us": device_us,
            "self_device_time_total_us": self_device_us}


def last(c: g.GpuCheck) -> g.Line:
    return c.lines[-1]


def kernel(op: str, ns: int, name: str = "k") -> dict:
    return {"op": op, "name": name, "kind": "kernel", "total_ns": ns}


# key_averages() of a step: addmm launched 6 ms, its linear around it; copy_ 2 ms; the annotations' own rows
KA = {"ops": [ka_row("aten::linear", 6000, 0), ka_row("aten::addmm", 6000, 6000), ka_row("aten::copy_", 2000, 2000),
              ka_row("ProfilerStep*", 8000, 0, annotation=True), ka_row("log_loss", 10, 0, annotation=True),
              ka_row("gemm_kernel", 6000, 6000, "DeviceType.CUDA"),
              ka_row("Memcpy HtoD", 2000, 2000, "DeviceType.CUDA"),
              ka_row("ProfilerStep*", 8000, 8000, "DeviceType.CUDA", annotation=True)]}


def test_links_pass_when_every_kernel_has_its_op(tmp_path):
    c = checker(tmp_path)
    c.check_links(ran([kernel("aten::addmm", 6 * MS), kernel("aten::copy_", 2 * MS, "Memcpy HtoD")]), KA)
    line = last(c)
    assert line.status == g.PASS, line.detail
    assert line.figures["linked_share"] == 1.0 and line.figures["compared"] == 2


def test_links_fail_on_kernels_without_an_op(tmp_path):
    c = checker(tmp_path)
    # 0.5 ms of 8.5 ms without an op: 94.1% linked, under the 99% asked
    rows = [kernel("aten::addmm", 6 * MS), kernel("aten::copy_", 2 * MS), kernel("(no launching op)", MS // 2)]
    c.check_links(ran(rows), KA)
    assert last(c).status == g.FAIL
    assert "94.1%" in last(c).detail


def test_links_fail_when_an_op_differs_from_key_averages(tmp_path):
    c = checker(tmp_path)
    c.check_links(ran([kernel("aten::addmm", int(6.3 * MS)), kernel("aten::copy_", 2 * MS)]), KA)  # 5% more
    assert last(c).status == g.FAIL
    assert "aten::addmm 6.300 ms vs 6.000 ms" in last(c).detail


def test_device_ops_leave_annotations_out(tmp_path):
    c = checker(tmp_path)
    # ProfilerStep* and log_loss have device totals in key_averages() but are not ops: not compared
    c.check_device_ops(ran([{"name": "aten::linear", "gpu_ns": 6 * MS}, {"name": "aten::addmm", "gpu_ns": 6 * MS},
                            {"name": "aten::copy_", "gpu_ns": 2 * MS}]), KA)
    assert last(c).status == g.PASS, last(c).detail
    assert last(c).figures["compared"] == 3


def test_device_ops_fail_on_an_aten_op_opscope_lacks(tmp_path):
    c = checker(tmp_path)
    c.check_device_ops(ran([{"name": "aten::linear", "gpu_ns": 6 * MS}, {"name": "aten::addmm", "gpu_ns": 6 * MS}]),
                       KA)
    assert last(c).status == g.FAIL
    assert "aten::copy_ 0.000 ms vs 2.000 ms" in last(c).detail


def busy_inputs(busy_ns: int, step_busy_ns: int):
    by_op = ran([kernel("aten::addmm", 6 * MS), kernel("aten::copy_", 2 * MS)])
    gpu = ran([{"device": 0, "stream": None, "busy_ns": busy_ns, "window_ns": 10 * MS},
               {"device": 0, "stream": 7, "busy_ns": busy_ns, "window_ns": 10 * MS}])
    steps = ran([{"step": 1, "gpu_busy_ns": step_busy_ns}])
    return by_op, gpu, steps


def test_device_time_counts_device_rows_but_not_gpu_annotations(tmp_path):
    c = checker(tmp_path)
    c.check_busy(*busy_inputs(7 * MS, 7 * MS), KA)
    line = last(c)
    assert line.status == g.PASS, line.detail
    assert line.figures["device_ns"] == 8 * MS and line.figures["key_averages_ns"] == 8 * MS


def test_device_time_fails_when_busy_exceeds_the_work(tmp_path):
    c = checker(tmp_path)
    c.check_busy(*busy_inputs(9 * MS, 9 * MS), KA)
    assert last(c).status == g.FAIL
    assert "busy 9.000 ms above the device time 8.000 ms" in last(c).detail


def test_steps_fail_when_the_trace_has_other_steps(tmp_path):
    c = checker(tmp_path)
    c.data["run"] = {"recorded_steps": [4, 5], "step_times_ns": [10 * MS] * 8}
    c.check_steps(ran([{"step": 4, "dur_ns": 10 * MS}]))
    assert last(c).status == g.FAIL


def test_steps_compare_with_the_step_clock(tmp_path):
    c = checker(tmp_path)
    c.data["run"] = {"recorded_steps": [4, 5], "step_times_ns": [10 * MS] * 8}
    c.check_steps(ran([{"step": 4, "dur_ns": 11 * MS}, {"step": 5, "dur_ns": 11 * MS}]))  # 1 ms more: within 2 ms
    assert last(c).status == g.PASS, last(c).detail
    c.check_steps(ran([{"step": 4, "dur_ns": 14 * MS}, {"step": 5, "dur_ns": 14 * MS}]))  # 4 ms: 40%, over 2 ms
    assert last(c).status == g.FAIL


def test_steady_leaves_the_first_steps_out():
    s = g.steady([1.0, 1.0, 1.0] + [0.010] * 9 + [0.020])
    assert s is not None
    assert s["steps"] == 10 and s["median_ns"] == pytest.approx(10 * MS)
    assert g.steady([0.01] * 5) is None  # two steps after the warm-up are not a step time


RERUN = {"median_ns": 10 * MS, "p10_ns": 9 * MS, "p90_ns": 13 * MS, "steps": 27}


@pytest.mark.parametrize(("predicted", "dry", "status"), [
    (11.5 * MS, False, g.PASS),   # 15% over: within 20%
    (12.5 * MS, False, g.PASS),   # 25% over, but inside the re-run's p10-p90
    (14.0 * MS, False, g.FAIL),   # 40% over and above p90
    (14.0 * MS, True, g.SKIP),    # the same on the CPU: not judged
    (7.0 * MS, False, g.FAIL),
])
def test_a_prediction_is_judged_against_the_re_run(tmp_path, predicted, dry, status):
    c = checker(tmp_path, dry=dry)
    c.judge("predict-x", "x", predicted, RERUN)
    assert last(c).status == status, last(c).detail
    assert last(c).figures["ratio"] == round(predicted / RERUN["median_ns"], 3)


def test_repro_variants_fail_when_one_fails(tmp_path):
    c = checker(tmp_path)
    cases = [{"id": 1, "variants": [{"name": "tf32", "status": "ok", "speedup": 2.5},
                                    {"name": "cudnn_benchmark", "status": "ok", "speedup": 1.1},
                                    {"name": "no_cudnn", "status": "crashed (exit 9)"},
                                    {"name": "compile", "status": "not run"}]}]
    c.repro_variants(cases)
    assert last(c).status == g.FAIL and "no_cudnn: crashed" in last(c).detail
    cases[0]["variants"][2] = {"name": "no_cudnn", "status": "ok", "speedup": 0.5}
    c.repro_variants(cases)
    assert last(c).status == g.PASS
    assert last(c).figures["speedups"] == {"tf32": ["x2.5"], "cudnn_benchmark": ["x1.1"], "no_cudnn": ["x0.5"]}


def test_tf32_predicted_from_repro_speed_ups(tmp_path):
    c = checker(tmp_path)
    c.info = {"cuda": "12.8", "capability": [9, 0], "device_name": "NVIDIA H100 80GB HBM3"}
    c.data.update(run={"recorded_steps": [4, 5]}, replayed=20 * MS, findings=[],
                  tf32_rerun={"median_ns": 15 * MS, "p10_ns": 14 * MS, "p90_ns": 16 * MS, "steps": 27},
                  # 20 ms of the case's device time over 2 steps, 2x faster with TF32: 5 ms less per step
                  repro_cases=[{"id": 1, "total_ns": 20 * MS, "variants": [{"name": "tf32", "status": "ok",
                                                                           "speedup": 2.0}]}])
    c.tf32()
    line = last(c)
    assert line.check == "predict-tf32" and line.status == g.PASS, line.detail
    assert line.figures["predicted_ns"] == 15 * MS


def test_no_tf32_check_without_tf32(tmp_path):
    c = checker(tmp_path)
    c.info = {"cuda": None, "hip": "6.4", "capability": [9, 4], "device_name": "AMD Instinct MI300X"}
    c.tf32()
    assert last(c).status == g.SKIP


def test_the_requirements_come_from_pyproject():
    wanted = g.pyproject_requirements()
    assert wanted["pyarrow"].startswith("pyarrow>=") and wanted["google.protobuf"].startswith("protobuf")
    assert "numpy" in wanted


def test_the_report_is_ordered_and_exits_1_on_a_fail(tmp_path, capsys):
    c = checker(tmp_path)
    c.add(g.PASS, "peaks", "p")
    c.add(g.FAIL, "record", "r")
    assert c.report() == 1
    text = (c.out / "gpu-check.txt").read_text()
    assert [ln.split()[1] for ln in text.splitlines()[1:]] == ["record", "peaks"]
    doc = json.loads((c.out / "gpu-check.json").read_text())
    assert doc["passed"] is False and [ln["status"] for ln in doc["lines"]] == ["FAIL", "PASS"]
    assert capsys.readouterr().out == text


def test_a_spent_budget_fails_a_gpu_run_and_skips_in_a_dry_run(tmp_path):
    gpu, dry = checker(tmp_path / "gpu"), checker(tmp_path / "dry", dry=True)
    for c in (gpu, dry):
        c.budget = 0
        r = c.run("steps", ["true"], 60)
        assert r.spent and not r.ok
        c.check_steps(r)
    assert (last(gpu).status, last(dry).status) == (g.FAIL, g.SKIP)
    assert g.SPENT in last(dry).detail
