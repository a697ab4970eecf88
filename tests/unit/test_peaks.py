"""Device peaks for the roofline: the table of published peaks, recognising the devices real traces name, peaks
files (hostile ones too), and `opscope peaks` measuring this machine."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.shared import shared_trace
from typer.testing import CliRunner

from opscope.analyses import peaks as peaks_module
from opscope.analyses.peaks import DTYPES, Peaks, peaks_for, read_peaks_file, trace_devices, trace_peaks
from opscope.cli import app
from opscope.errors import TraceError, UsageError
from opscope.ingest import open_trace

runner = CliRunner()
TABLE = json.loads((Path(peaks_module.__file__).parent / "data" / "peaks.json").read_text())


def _row(name: str) -> dict:
    return next(d for d in TABLE["devices"] if d["name"] == name)


def _fake(*props: dict) -> SimpleNamespace:
    return SimpleNamespace(metadata={"device_properties": list(props)})


# --- the table ---------------------------------------------------------------------------------------------------

def test_every_entry_is_complete_and_sane():
    for d in TABLE["devices"]:
        assert set(d["tflops"]) == set(DTYPES), d["name"]
        figures = [v for v in d["tflops"].values() if v is not None]
        assert figures and all(isinstance(v, (int, float)) and 0 < v < 20000 for v in figures), d["name"]
        assert 100 < d["gbps"] < 20000, d["name"]
        assert "http" in d["source"] and d["match"], d["name"]
        # a matrix unit is never slower than fp32's peak; fp8/int8 never slower than fp16
        if d["tflops"]["fp16"] is not None:
            assert d["tflops"]["fp16"] >= d["tflops"]["fp32"], d["name"]
        if d["tflops"]["fp8"] is not None:
            assert d["tflops"]["fp8"] >= d["tflops"]["fp16"], d["name"]


@pytest.mark.parametrize("name", ["V100 SXM2", "V100 PCIe", "A100 SXM4 40GB", "A100 SXM4 80GB", "A100 PCIe 80GB",
                                  "H100 SXM", "H100 PCIe", "H100 NVL", "H200 SXM", "B200", "L4", "L40S",
                                  "MI250X (one GCD)", "MI300X", "MI325X", "MI355X"])
def test_the_devices_asked_for_are_in_the_table(name):
    assert _row(name)["source"]


# hand-checked against the vendors' datasheets (dense: sparsity figures halved)
DATASHEET = [
    # name as traces write it, table entry, figure, value
    ("NVIDIA H100 80GB HBM3", "H100 SXM", "bf16", 989.4),    # H100 whitepaper: 989.4 dense (datasheet 1,979 sparse)
    ("NVIDIA H100 80GB HBM3", "H100 SXM", "fp8", 1978.9),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", "gbps", 3350),     # H100 datasheet: 3.35 TB/s
    ("NVIDIA H100 PCIe", "H100 PCIe", "fp16", 756.5),        # 1,513 sparse
    ("NVIDIA H100 PCIe", "H100 PCIe", "gbps", 2000),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", "bf16", 312),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", "gbps", 2039),
    ("NVIDIA A100-PG509-200", "A100 SXM4 40GB", "gbps", 1555),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", "fp64", 19.5),  # FP64 Tensor Core (vector 9.7)
    ("Tesla V100-SXM2-16GB", "V100 SXM2", "fp16", 125),
    ("Tesla V100-SXM2-32GB", "V100 SXM2", "fp32", 15.7),
    ("Tesla V100-DGXS-32GB", "V100 SXM2", "gbps", 900),
    ("NVIDIA H200", "H200 SXM", "gbps", 4800),
    ("NVIDIA B200", "B200", "bf16", 2250),                    # HGX B200: 4.5 PFLOPS sparse
    ("NVIDIA L4", "L4", "fp16", 121),                          # 242 sparse
    ("NVIDIA L40S", "L40S", "fp16", 362.05),
    ("AMD Instinct MI300X", "MI300X", "fp16", 1307.4),        # MI300X data sheet
    ("AMD Instinct MI300X", "MI300X", "gbps", 5300),
    ("AMD Instinct MI325X", "MI325X", "gbps", 6000),
    ("AMD Instinct MI250X", "MI250X (one GCD)", "fp16", 383.0 / 2),  # per package 383, two GCDs
    ("AMD Instinct MI355X", "MI355X", "fp8", 5033.2),
]


@pytest.mark.parametrize(("trace_name", "entry", "figure", "value"), DATASHEET)
def test_datasheet_figures(trace_name, entry, figure, value):
    peaks = peaks_for(trace_name)
    assert peaks is not None and peaks.device == entry
    got = peaks.gbps if figure == "gbps" else peaks.tflops[figure]
    assert got == pytest.approx(value, rel=1e-3)
    row = _row(entry)
    assert got == (row["gbps"] if figure == "gbps" else row["tflops"][figure])


def test_no_unit_no_key():
    v100 = peaks_for("Tesla V100-SXM2-16GB")
    assert v100 is not None and not {"bf16", "tf32", "fp8", "int8"} & set(v100.tflops)
    mi250x = peaks_for("AMD Instinct MI250X")
    assert mi250x is not None and "fp8" not in mi250x.tflops and "tf32" not in mi250x.tflops


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("NVIDIA H200 NVL", "H200 NVL"), ("AMD Instinct MI300X VF", "MI300X"), ("AMD Instinct MI210", "MI210"),
    ("gfx908", "MI100"), ("nvidia h100 80gb hbm3", "H100 SXM"),
    # not recognised: unknown, ambiguous (rocminfo names MI250X and MI250 alike; gfx942 is MI300X/A/MI325X)
    ("NVIDIA L40", None), ("NVIDIA GH200 480GB", None), ("AMD Radeon Graphics", None), ("gfx942", None),
    ("AMD Instinct MI250X / MI250", None), ("ARTEMIS", None), ("", None), ("cpu", None)])
def test_names(name, expected):
    p = peaks_for(name)
    assert (p.device if p else None) == expected


# --- the devices real traces name --------------------------------------------------------------------------------

@pytest.mark.parametrize(("relative", "names", "expected"), [
    ("tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz", ["NVIDIA H100 80GB HBM3"], "H100 SXM"),
    ("tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz", ["AMD Instinct MI300X VF"], "MI300X"),
    ("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", ["NVIDIA A100-PG509-200"],
     "A100 SXM4 40GB"),
    ("kineto/traces/after_fix_trace.json", ["NVIDIA H100"], "H100 SXM"),
    ("tracelens/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz", ["AMD Instinct MI210"], "MI210"),
])
def test_real_traces(relative, names, expected):
    trace = open_trace(shared_trace(relative), use_cache=False)
    assert trace_devices(trace) == names
    peaks, how = trace_peaks(trace)
    assert peaks is not None and peaks.device == expected, how
    assert how.startswith(f"recognised {names[0]!r} as {expected}") and "\n" not in how


def test_rocm_kineto_names_no_device_its_properties_do():
    # ROCm 6.2's Kineto calls an MI250 GCD 'AMD Radeon Graphics': gfx90a's compute 9.0, 104 CUs, 64 GiB
    trace = open_trace(shared_trace("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"), use_cache=False)
    assert trace_devices(trace) == ["AMD Radeon Graphics"]
    peaks, how = trace_peaks(trace)
    assert peaks is not None and peaks.device == "MI210" and "by its properties" in how and "MI250 GCD" in how


def test_properties_tell_mi300x_from_mi325x_by_memory():
    base = {"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 4, "warpSize": 64, "numSms": 304}
    assert trace_peaks(_fake({**base, "totalGlobalMem": 192 * 2**30}))[0].device == "MI300X"
    assert trace_peaks(_fake({**base, "totalGlobalMem": 256 * 2**30}))[0].device == "MI325X"
    assert trace_peaks(_fake(base))[0] is None  # no memory: either
    rocprof = {"name": "", "gfx": "gfx90a:sramecc+:xnack-", "multiProcessorCount": 110}
    assert trace_peaks(_fake(rocprof))[0].device == "MI250X (one GCD)"
    nvidia = {"name": "/device:GPU:0", "computeMajor": 9, "computeMinor": 0, "warpSize": 32, "numSms": 132}
    assert trace_peaks(_fake(nvidia))[0] is None
    # an XSpace's device plane: no warp size, the vendor named (what the xplane reader keeps of the plane's stats)
    xspace = {"name": "/device:GPU:0", "computeMajor": 9, "computeMinor": 4, "numSms": 304, "vendor": "AMD",
              "totalGlobalMem": 206141652992}
    assert trace_peaks(_fake(xspace))[0].device == "MI300X"
    assert trace_peaks(_fake({**xspace, "vendor": "NVIDIA"}))[0] is None
    assert trace_peaks(_fake({**xspace, "warpSize": 32}))[0] is None


def test_unknown_and_missing_devices_say_what_to_do():
    peaks, how = trace_peaks(_fake({"id": 0, "name": "ARTEMIS"}))
    assert peaks is None and how == "device not recognised: 'ARTEMIS'; give --peaks FILE (opscope peaks writes one)"
    peaks, how = trace_peaks(SimpleNamespace(metadata={}))
    assert peaks is None and "names no device" in how and "--peaks FILE" in how
    peaks, how = trace_peaks(_fake({"name": "evil\x1b[31m\nname"}))
    assert peaks is None and "\x1b" not in how and "\n" not in how


def test_sm_count_that_disagrees_is_said():
    peaks, how = trace_peaks(_fake({"name": "NVIDIA H100", "numSms": 114}))
    assert peaks is not None and peaks.device == "H100 SXM" and "114 SMs/CUs differ from the 132" in how


def test_mixed_devices_use_the_first_and_say_so():
    peaks, how = trace_peaks(_fake({"name": "NVIDIA A100-SXM4-80GB"}, {"name": "NVIDIA H100 80GB HBM3"}))
    assert peaks.device == "A100 SXM4 80GB" and "also has H100 SXM" in how


# --- peaks files -------------------------------------------------------------------------------------------------

def test_round_trip_and_override(tmp_path):
    p = Peaks("my box", {"fp32": 1.5, "bf16": 12.0}, 100.0, "measured on this machine by opscope peaks (test)")
    f = tmp_path / "peaks.json"
    f.write_text(json.dumps(p.to_json()))
    assert read_peaks_file(f) == p
    got, how = trace_peaks(_fake({"name": "NVIDIA H100 80GB HBM3"}), override=f)
    assert got == p and how.startswith(f"peaks from {f}: my box")


@pytest.mark.parametrize(("content", "says"), [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (b"\xff\xfe", "is not JSON"),
    (b"[" * 60000, "is not JSON"),
    (b'{"device": "x", "tflops": {"fp32": -1}, "gbps": 10}', "tflops.fp32 is -1"),
    (b'{"device": "x", "tflops": {"fp32": NaN}, "gbps": 10}', "is not JSON"),
    (b'{"device": "x", "tflops": {"fp32": 1e999}, "gbps": 10}', "tflops.fp32 is inf"),
    (b'{"device": "x", "tflops": {"fp32": 1}, "gbps": 1e7}', "gbps is 10000000.0"),
    (b'{"device": "x", "tflops": {"fp32": "1"}, "gbps": 10}', "tflops.fp32 is not a number"),
    (b'{"device": "x", "tflops": {"fp32": true}, "gbps": 10}', "tflops.fp32 is not a number"),
    (b'{"device": "x", "tflops": {"fp4": 1}, "gbps": 10}', "tflops has 'fp4'"),
    (b'{"device": "x", "tflops": [], "gbps": 10}', "has no tflops object"),
    (b'{"device": 3, "tflops": {"fp32": 1}, "gbps": 10}', "device is not a text"),
    (b'{"device": "x", "tflops": {"fp32": 1}}', "gbps is not a number"),
    (b'{"device": "x", "tflops": {"fp32": null}, "gbps": 1}', "gives no figure"),
    (b'{"format": "other/9", "device": "x", "tflops": {"fp32": 1}, "gbps": 1}', "has format 'other/9'"),
    (b'{"device": "x", "tflops": {"fp32": 1}, "gbps": 1, "pad": "' + b"a" * 70000 + b'"}', "larger than 64 KiB"),
])
def test_hostile_peaks_files(tmp_path, content, says):
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_peaks_file(f)
    message = str(err.value)
    assert message.startswith(f"{f}: ") and says in message and "\n" not in message


def test_missing_peaks_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_peaks_file(tmp_path / "absent.json")
    with pytest.raises(TraceError, match="is a directory"):
        read_peaks_file(tmp_path)


# --- opscope peaks -----------------------------------------------------------------------------------------------

def test_peaks_command_measures_this_cpu(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "here.json"
    r = runner.invoke(app, ["peaks", "--device", "cpu", "--seconds", "0.2", "-f", "json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    measured = {row["measure"]: row for row in rows}
    assert measured["fp32 matmul"]["median"] > 0 and measured["copy bandwidth"]["median"] > 0
    assert all(row["low"] <= row["median"] <= row["high"] for row in rows)
    peaks = read_peaks_file(out)  # what --peaks FILE reads
    assert peaks.tflops["fp32"] > 0 and peaks.gbps > 0 and math.isfinite(peaks.gbps)
    assert peaks.source.startswith("measured on this machine by opscope peaks")
    again = runner.invoke(app, ["peaks", "--seconds", "0.2", "-o", str(out)])
    assert isinstance(again.exception, UsageError) and "already exists" in str(again.exception)


def test_peaks_command_bad_device():
    r = runner.invoke(app, ["peaks", "--device", "tpu"])
    assert isinstance(r.exception, UsageError) and "cpu or cuda" in str(r.exception)
