"""The reproducer harness's parts, in process: inputs rebuilt with exact layouts, the output comparison,
variant selection and state, the profiler's child ops. The harness is torch code, so these tests need torch."""

from __future__ import annotations

import ast
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opscope.repro import harness  # noqa: E402  (after the torch check: the harness imports torch)
from opscope.repro.harness import T  # noqa: E402

HARNESS = Path(harness.__file__)


def case(op="aten::conv2d", args=(), kwargs=None, variants=None, **more) -> harness.Case:
    ns = {"OP": op, "ARGS": list(args), "KWARGS": kwargs or {}, "VARIANTS": variants or {}, **more}
    return harness.Case.from_namespace(ns)


# ---------------------------------------------------------------------------------------------------- the file


def test_the_file_is_a_prelude_a_marker_and_functions_importing_only_stdlib_and_torch():
    text = HARNESS.read_text()
    assert text.count("\n# --- the case ---\n") == 1
    prelude, functions = text.split("\n# --- the case ---\n")
    tree = ast.parse(text)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert "opscope" not in imported
    assert imported - set(sys.stdlib_module_names) == {"torch"}
    # the prelude holds the imports and T; the case's literals (which use T and torch) go right after it
    assert "class T(NamedTuple)" in prelude and "import torch" in prelude and "def main(" in functions
    assert "class T" not in functions and "\nimport " not in functions


def test_t_has_the_shape_the_writer_uses():
    assert T._fields == ("size", "stride", "dtype", "high")
    t = T((8, 3, 96, 96), (27648, 9216, 96, 1), "float32")
    assert t.high is None and t == ((8, 3, 96, 96), (27648, 9216, 96, 1), "float32", None)
    assert T((4,), (1,), "int64", 10).high == 10


# ---------------------------------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(("size", "stride", "elements"), [
    ((2, 3, 4), (12, 4, 1), 24),                    # contiguous: numel
    ((2, 3, 4, 5), (60, 1, 15, 3), 120),            # channels_last: numel again, other order
    ((3, 4), (0, 1), 4),                            # expanded: one row shared
    ((2, 2), (10, 1), 12),                          # rows with a gap: 1 + 10 + 1
    ((4, 0, 3), (3, 3, 1), 0),                      # empty
    ((), (), 1),                                    # 0-d
])
def test_storage_elements(size, stride, elements):
    assert harness.storage_elements(T(size, stride, "float32")) == elements


def test_a_channels_last_input_is_rebuilt_with_its_exact_strides():
    x = harness.make_tensor(T((2, 3, 4, 5), (60, 1, 15, 3), "float32"), "cpu")
    assert x.shape == (2, 3, 4, 5) and x.stride() == (60, 1, 15, 3) and x.dtype == torch.float32
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert x.untyped_storage().nbytes() == 120 * 4


@pytest.mark.parametrize(("size", "stride"), [
    ((2, 3, 4, 5, 6), (360, 1, 90, 18, 3)),  # channels_last_3d
    ((4, 3), (1, 4)),                         # transposed
    ((3, 4), (0, 1)),                         # expanded
    ((2, 2), (10, 1)),                        # gaps between rows
])
def test_strided_layouts_are_rebuilt_exactly(size, stride):
    x = harness.make_tensor(T(size, stride, "float32"), "cpu")
    assert (tuple(x.shape), x.stride()) == (size, stride)
    assert x.untyped_storage().nbytes() == harness.storage_elements(T(size, stride, "float32")) * 4


def test_integer_tensors_stay_below_high_or_eight():
    idx = harness.make_tensor(T((4000,), (1,), "int64", high=5), "cpu")
    assert idx.dtype == torch.int64 and set(idx.tolist()) == {0, 1, 2, 3, 4}
    small = harness.make_tensor(T((4000,), (1,), "int32"), "cpu")
    assert small.dtype == torch.int32 and set(small.tolist()) == set(range(8))
    # a bound beyond what uint8 holds is cut to 256, not wrapped round
    wide = harness.make_tensor(T((4000,), (1,), "uint8", high=100000), "cpu")
    assert int(wide.max()) > 200
    flags = harness.make_tensor(T((1000,), (1,), "bool"), "cpu")
    assert flags.dtype == torch.bool and set(flags.tolist()) == {False, True}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "complex64", "float8_e4m3fn", "float8_e5m2",
                                   "uint16", "int8"])
def test_every_kind_of_dtype_builds(dtype):
    x = harness.make_tensor(T((3, 5), (1, 3), dtype), "cpu")
    assert x.dtype == getattr(torch, dtype) and x.stride() == (1, 3)


def test_inputs_repeat_and_lists_of_tensors_are_tensor_lists():
    c = case("aten::cat", [[T((2, 3), (3, 1), "float32"), None, T((1, 3), (3, 1), "float32")], 0],
             {"out_dtype": torch.float16})
    args1, kwargs1 = harness.build_inputs(c, "cpu")
    args2, _ = harness.build_inputs(c, "cpu")
    assert isinstance(args1[0], list) and args1[0][1] is None and args1[1] == 0
    assert kwargs1 == {"out_dtype": torch.float16}
    assert torch.equal(args1[0][0], args2[0][0]) and torch.equal(args1[0][2], args2[0][2])


# ---------------------------------------------------------------------------------------------------- the op


def test_ops_resolve_or_say_they_are_not_registered():
    assert harness.resolve_op("aten::conv2d", "default") is torch.ops.aten.conv2d.default
    for op, overload in (("aten::no_such_op", "default"), ("aten::conv2d", "no_such_overload"),
                         ("vllm::moe_forward", "default"), ("no_namespace", "default")):
        with pytest.raises(harness.CaseError) as e:
            harness.resolve_op(op, overload)
        assert e.value.reason == f"op {op}.{overload} is not registered in this torch ({torch.__version__})"


def test_in_place_ops_are_recognised_by_name_or_schema():
    assert harness.is_inplace("aten::add_", torch.ops.aten.add_.Tensor)
    assert harness.is_inplace("aten::add", torch.ops.aten.add.out)  # out= is a Tensor(a!) argument
    assert not harness.is_inplace("aten::add", torch.ops.aten.add.Tensor)
    assert not harness.is_inplace("aten::conv2d", torch.ops.aten.conv2d.default)
    assert not harness.is_inplace("aten::__and__", torch.ops.aten.__and__.Tensor)
    assert harness.is_inplace("aten::__iand__", torch.ops.aten.__iand__.Tensor)


def test_devices_that_cannot_be_used_say_why():
    assert harness.device_problem("cpu") is None
    assert harness.device_problem("no-such-device") == "unknown device 'no-such-device'"
    if not torch.cuda.is_available():
        assert harness.device_problem("cuda") == "cuda is not available here (run with --device cpu)"
        assert harness.device_problem("cuda:1") == "cuda is not available here (run with --device cpu)"


def test_outputs_are_copies_on_the_cpu():
    x = torch.ones(3)
    (copy,) = harness.tensors_of(x)
    x.add_(1)
    assert copy.tolist() == [1.0, 1.0, 1.0]
    assert [t.tolist() for t in harness.tensors_of((torch.zeros(1), [torch.ones(1), 2.5], None))] == [[0.0], [1.0],
                                                                                                      2.5]


# ---------------------------------------------------------------------------------------------------- compare


def test_equal_outputs_have_no_error():
    a = torch.tensor([1.0, -2.0, 3.0])
    assert harness.compare_tensors(a.clone(), a) == (0.0, 0.0, True)


def test_nan_in_the_same_places_is_equal_and_elsewhere_an_infinite_error():
    want = torch.tensor([1.0, math.nan, math.inf])
    assert harness.compare_tensors(torch.tensor([1.0, math.nan, math.inf]), want) == (0.0, 0.0, True)
    e_abs, e_rel, ok = harness.compare_tensors(torch.tensor([math.nan, math.nan, math.inf]), want)
    assert (e_abs, e_rel, ok) == (math.inf, math.inf, False)
    # a finite value where the baseline has inf: an infinite error too (inf / inf is not NaN here)
    assert harness.compare_tensors(torch.tensor([1.0, math.nan, 5.0]), want) == (math.inf, math.inf, False)


def test_errors_against_float32_tolerance():
    want = torch.tensor([1.0, 4.0], dtype=torch.float32)
    # float32(4.00001) = 4 + 21 * 2**-21 (float32's spacing at 4 is 2**-21): 1.0014e-5, within
    # atol + rtol * max|b| = 1e-5 + 1e-5 * 4 = 5e-5
    got = torch.tensor([1.0, 4.00001], dtype=torch.float32)
    e_abs, e_rel, ok = harness.compare_tensors(got, want)
    step = 21 * 2.0**-21
    assert float(got[1]) == 4.0 + step
    assert e_abs == pytest.approx(step, rel=1e-12) and e_rel == pytest.approx(step / 4.0, rel=1e-12) and ok
    # 1 + 1e-4 is beyond atol + rtol * max|b| = 1e-5 + 1e-5 * 4; relative to the output's magnitude (4)
    e_abs, e_rel, ok = harness.compare_tensors(torch.tensor([1.0001, 4.0]), want)
    assert e_abs == pytest.approx(1e-4, rel=1e-3) and e_rel == pytest.approx(2.5e-5, rel=1e-3) and not ok
    # the same error on an element near zero of an output of magnitude 1000 is a reordered sum's: within
    e_abs, e_rel, ok = harness.compare_tensors(torch.tensor([1e-3 + 1e-4, 1000.0]), torch.tensor([1e-3, 1000.0]))
    assert e_rel == pytest.approx(1e-7, rel=1e-2) and ok


def test_relative_error_of_a_zero_reference_uses_the_tiny_float():
    e_abs, e_rel, ok = harness.compare_tensors(torch.tensor([1e-6]), torch.tensor([0.0]))
    assert e_abs == pytest.approx(1e-6) and e_rel == pytest.approx(1e-6 / sys.float_info.min) and ok  # atol 1e-5


def test_a_variant_output_in_another_dtype_is_compared_in_the_baselines_dtype():
    want = torch.tensor([1.0, 2.0, 3.0])
    got = want.to(torch.bfloat16)  # exact in bf16: no error once cast back to float32
    assert harness.compare_tensors(got, want) == (0.0, 0.0, True)
    # bf16 tolerance for a bf16 baseline: 1.6e-2 relative
    base = torch.tensor([100.0], dtype=torch.bfloat16)
    assert harness.compare_tensors(torch.tensor([101.0], dtype=torch.bfloat16), base)[2]
    assert not harness.compare_tensors(torch.tensor([102.0], dtype=torch.bfloat16), base)[2]


def test_integers_must_match_exactly():
    want = torch.tensor([1, 2, 3])
    assert harness.compare_tensors(want.clone(), want) == (0.0, 0.0, True)
    assert harness.compare_tensors(torch.tensor([1, 3, 3]), want) == (1.0, 1 / 3, False)
    assert harness.tolerance(torch.int64) == (0.0, 0.0) and harness.tolerance(torch.float16) == (1e-3, 1e-5)


def test_outputs_compare_worst_over_the_tensors():
    want = [torch.tensor([1.0]), torch.tensor([2.0])]
    got = [torch.tensor([1.0]), torch.tensor([3.0])]
    assert harness.compare_outputs(got, want) == {"max_abs_err": 1.0, "max_rel_err": 0.5, "within_tolerance": False}
    assert harness.compare_outputs(got[:1], want)["within_tolerance"] is False
    assert harness.compare_tensors(torch.zeros(2, 3), torch.zeros(3, 2))[2] is False


# ---------------------------------------------------------------------------------------------------- variants


def test_variant_selection():
    variants = {"channels_last": "a", "compile": "b", "threads=1": "c"}
    assert harness.select_variants("auto", variants) == ["channels_last", "threads=1"]
    assert harness.select_variants("all", variants) == ["channels_last", "compile", "threads=1"]
    assert harness.select_variants("none", variants) == []
    assert harness.select_variants(" compile, tf32 ,", variants) == ["compile", "tf32"]


def test_which_variants_the_harness_knows():
    assert harness.known_variant("threads=4") == harness.Variant(needs="cpu", threads=4)
    for name in ("threads=0", "threads=x", "threads=", "bogus", "Channels_Last"):
        assert harness.known_variant(name) is None
    assert harness.variant_problem(harness.known_variant("tf32"), "cpu") == "needs cuda"
    assert harness.variant_problem(harness.known_variant("no_mkldnn"), "cpu") is None
    assert harness.variant_problem(harness.known_variant("channels_last"), "cpu") is None


def test_compile_without_a_cpp_compiler_says_so(monkeypatch):
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    assert harness.variant_problem(harness.known_variant("compile"), "cpu") == (
        "no C++ compiler for torch.compile (inductor): install g++")


def conv_case(variants: dict) -> tuple[harness.Case, object, dict]:
    """A depthwise 3x3 convolution, its op and its baseline outputs."""
    c = case("aten::conv2d", [T((1, 4, 6, 6), (144, 36, 6, 1), "float32"), T((4, 1, 3, 3), (9, 9, 3, 1), "float32"),
                              None, [1, 1], [1, 1], [1, 1], 4], variants=variants)
    op = harness.resolve_op(c.op, c.overload)
    args, kwargs = harness.build_inputs(c, "cpu")
    fn = harness.call_of(op, args, kwargs)
    return c, op, {"replay_ns": 1000, "outputs": harness.first_call(fn, "cpu"), "fn": fn}


def global_state():
    return (torch.get_num_threads(), torch.get_float32_matmul_precision(), torch.backends.mkldnn.enabled,
            torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled, torch.backends.cuda.matmul.allow_tf32,
            torch.is_autocast_enabled("cpu"))


def test_variants_run_compare_and_restore_the_global_state():
    names = ["channels_last", "contiguous", "fp32_precision_high", "no_mkldnn", "deterministic", "threads=1",
             "autocast_bf16", "tf32", "bogus"]
    c, op, baseline = conv_case({n: f"change {n}" for n in names})
    before = global_state()
    results = {n: harness.run_variant(n, c, op, "cpu", 0.01, baseline) for n in names}
    assert global_state() == before
    assert results["bogus"]["status"] == "unknown variant" and results["tf32"]["status"] == "needs cuda"
    for n in names[:6]:
        r = results[n]
        assert r["status"] == "ok" and r["change"] == f"change {n}", r
        assert r["replay_ns"] > 0 and r["speedup"] > 0 and r["within_tolerance"] is True, r
        # every run's time is kept, at least 2 per round on each side (3 rounds: 6 >= the 5 an interval needs)
        assert r["runs"] == len(r["times_ns"]) >= 6 and len(r["baseline_times_ns"]) >= 6
        assert r["replay_ns"] == round(statistics.median(r["times_ns"])) and r["calls_per_run"] >= 1
        # the speed-up is against the baseline timed in the rounds alternating with the variant's
        assert r["baseline_ns"] == round(statistics.median(r["baseline_times_ns"]))
        assert abs(r["speedup"] - r["baseline_ns"] / r["replay_ns"]) < 1e-3 * r["speedup"]
    bf16 = results["autocast_bf16"]
    assert bf16["status"] == "ok" and bf16["within_tolerance"] is False and bf16["max_abs_err"] > 1e-4


def test_a_variant_that_fails_is_a_status_and_restores_the_state():
    # an op that raises under the variant's switch (a stand-in for "no deterministic implementation")
    c = case("aten::relu", [], variants={"deterministic": "x", "threads=1": "y"})
    before = global_state()
    r = harness.run_variant("deterministic", c, lambda *a, **k: 1 / 0, "cpu", 0.01, {"replay_ns": 1, "outputs": []})
    assert r["status"] == "ZeroDivisionError: division by zero" and r["replay_ns"] is None
    assert global_state() == before
    r = harness.run_variant("threads=1", c, lambda *a, **k: 1 / 0, "cpu", 0.01, {"replay_ns": 1, "outputs": []})
    assert r["status"].startswith("ZeroDivisionError") and global_state() == before


def test_channels_last_changes_4d_and_5d_inputs_only():
    assert harness.channels_last(torch.zeros(2, 3, 4, 5)).stride() == (60, 1, 15, 3)
    assert harness.channels_last(torch.zeros(2, 3, 4, 5, 6)).is_contiguous(memory_format=torch.channels_last_3d)
    assert harness.channels_last(torch.zeros(3, 4)).stride() == (4, 1)


# ---------------------------------------------------------------------------------------------------- check


def children_by_time(prof, op_name: str) -> list[str]:
    """Distinct names of the events inside the first ``op_name`` event's time span on its thread: the
    containment walk, independent of the harness's cpu_children walk."""
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    top = min((e for e in events if e.name == op_name), key=lambda e: e.time_range.start)
    inside = sorted((e for e in events if e is not top and e.thread == top.thread
                     and top.time_range.start <= e.time_range.start and e.time_range.end <= top.time_range.end),
                    key=lambda e: e.time_range.start)
    return list(dict.fromkeys(e.name for e in inside))


def test_child_ops_of_conv2d_match_what_the_profiler_records_for_f_conv2d():
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.conv2d(x, w, None, 1, 1)
    expected = children_by_time(prof, "aten::conv2d")
    assert "aten::convolution" in expected

    op = torch.ops.aten.conv2d.default
    ops, kernels, profiled_ns = harness.profile_once(lambda: op(x, w, None, [1, 1], [1, 1], [1, 1], 1), "aten::conv2d",
                                                     "cpu")
    assert profiled_ns is not None and profiled_ns > 0  # the median of the op's event over the timed calls
    assert "aten::convolution" in ops and kernels == []
    assert set(ops) == set(expected)


def test_the_check_compares_name_sets_and_says_when_nothing_was_recorded():
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    fn = lambda: torch.ops.aten.conv2d.default(x, w)  # noqa: E731
    ops, _, _ = harness.profile_once(fn, "aten::conv2d", "cpu")
    same = harness.check_case(case(RECORDED_OPS=list(reversed(ops))), fn, "cpu")
    assert same["check"] == "same" and same["check_of"] == "ops" and same["missing"] == same["extra"] == []
    assert same["check_note"] is None and same["replayed"] == ops

    differs = harness.check_case(case(RECORDED_OPS=["aten::convolution", "aten::cudnn_convolution"]), fn, "cpu")
    assert differs["check"] == "differs" and differs["missing"] == ["aten::cudnn_convolution"]
    assert "aten::convolution" not in differs["extra"] and "aten::_convolution" in differs["extra"]

    # the trace ran nothing under the op: a replay that runs child ops differs
    nothing = harness.check_case(case(RECORDED_OPS=[]), fn, "cpu")
    assert nothing["check"] == "differs" and nothing["missing"] == [] and set(nothing["extra"]) == set(ops)
    unknown = harness.check_case(case(), fn, "cpu")
    assert unknown["check"] is None and "carries no recorded ops" in unknown["check_note"]

    # kernels recorded on a GPU, replayed on the CPU: child ops compared, and the note says where they came from
    other = harness.check_case(case(DEVICE="cuda", RECORDED_OPS=ops, RECORDED_KERNELS=["k"]), fn, "cpu")
    assert other["check"] == "same" and other["check_of"] == "ops"
    assert "came from a cuda trace" in other["check_note"]
    neither = harness.check_case(case(DEVICE="cuda:0", RECORDED_KERNELS=["k"]), fn, "cpu")
    assert neither["check"] is None and neither["check_note"] == (
        "the case carries no recorded ops or kernels: nothing to compare; the recorded ops came from a cuda:0 "
        "trace and this replay ran on cpu: they can differ for that reason alone")

    missing = harness.check_case(case(op="aten::mm", RECORDED_OPS=["x"]), fn, "cpu")
    assert missing["check"] is None and missing["check_note"].startswith("the profiler failed: LookupError")


# ---------------------------------------------------------------------------------------------------- main


def run_main(tmp_path, ns: dict, *argv: str) -> tuple[int, dict]:
    out = tmp_path / "out.json"
    code = harness.main(ns, ["--json", str(out), "--budget", "0.01", *argv])
    return code, json.loads(out.read_text())


def test_main_runs_an_in_place_op_and_writes_every_field(tmp_path):
    ns = {"OP": "aten::add_", "OVERLOAD": "Tensor", "DEVICE": "cpu",
          "ARGS": [T((4, 4), (4, 1), "float32"), T((4, 4), (4, 1), "float32")], "KWARGS": {"alpha": 2},
          "TRACE_NS": 0, "RECORDED_OPS": [], "RECORDED_KERNELS": [], "VARIANTS": {"contiguous": "x.contiguous()"}}
    code, r = run_main(tmp_path, ns)
    assert code == 0 and r["status"] == "ok" and r["error"] is None
    assert set(r) == {"status", "op", "overload", "device", "trace_device", "torch", "threads", "replay_ns",
                      "runs", "calls_per_run", "times_ns", "trace_ns", "ratio", "profiled_ns", "profiled_ratio",
                      "check", "check_of", "check_note", "recorded", "replayed", "missing", "extra", "variants",
                      "notes", "error"}
    # add_ runs no op under it, as the (empty) recording says
    assert r["ratio"] is None and r["check"] == "same" and r["replayed"] == []
    assert r["notes"][0] == "in-place op: inputs change between timed runs"
    # one variant: the baseline timed alone (5 runs at least) and in 3 rounds beside it (2 runs at least each);
    # replay_ns the median of all its runs
    (v,) = r["variants"]
    assert r["runs"] == len(r["times_ns"]) >= 11 and r["replay_ns"] == round(statistics.median(r["times_ns"]))
    assert set(v["baseline_times_ns"]) <= set(r["times_ns"])
    assert r["notes"][1].startswith(f"replay_ns: the median of the baseline's {r['runs']} timed runs")
    assert len(r["notes"]) == 2
    # the variant's fresh inputs equal the baseline's: its first output is the baseline's first output
    assert v["name"] == "contiguous" and v["max_abs_err"] == 0.0 and v["within_tolerance"] is True
    assert list(tmp_path.iterdir()) == [tmp_path / "out.json"]  # no temporary file left


def test_main_says_when_the_op_raises(tmp_path):
    ns = {"OP": "aten::mm", "ARGS": [T((2, 3), (3, 1), "float32"), T((4, 5), (5, 1), "float32")]}
    code, r = run_main(tmp_path, ns)
    assert code == 3 and r["status"].startswith("the op raised: RuntimeError: ") and r["replay_ns"] is None
    assert r["error"].startswith("RuntimeError: ")


def test_main_prints_a_summary_without_json(capsys):
    ns = {"OP": "aten::relu", "ARGS": [T((8,), (1,), "float32")], "TRACE_NS": 1000,
          "VARIANTS": {"tf32": "torch.backends.cuda.matmul.allow_tf32 = True"}}
    assert harness.main(ns, ["--budget", "0.01"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("op: aten::relu.default") and "\ndevice: cpu\n" in out and "ratio" in out
    assert "tf32" in out and "needs cuda" in out
    # the replay's median with the 10th to 90th percentile of its runs
    assert re.search(r"replay: .+ median \(p10-p90 .+-.+, \d+ runs\)", out), out


def test_an_unwritable_json_path_is_one_line_and_exit_2(tmp_path, capsys):
    ns = {"OP": "aten::relu", "ARGS": [T((8,), (1,), "float32")]}
    assert harness.main(ns, ["--budget", "0.01", "--json", str(tmp_path / "missing" / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and err.count("\n") == 1


def test_ratios_keep_four_significant_digits():
    assert [harness.significant(x) for x in (1 / 32000, 123456.7, 1.23456)] == [3.125e-05, 123500.0, 1.235]


def test_json_has_no_bare_non_finite_numbers():
    assert harness.json_safe({"a": [math.inf, -math.inf, math.nan, 1.5]}) == {"a": ["inf", "-inf", "nan", 1.5]}


@pytest.mark.parametrize(("ns", "text"), [(812, "812 ns"), (45600, "45.6 us"), (1_234_000, "1.23 ms"),
                                          (2_500_000_000, "2.5 s"), (None, "-")])
def test_format_ns(ns, text):
    assert harness.format_ns(ns) == text


def test_the_scripts_percentiles_are_opscopes():
    # the script needs only torch, so it carries its own p10/p90 for its printed summary: the same interpolation
    from opscope.analyses import noise

    values = [7, 1, 3, 9, 4, 12, 5]
    for q in (0.1, 0.5, 0.9):
        assert harness.quantile(values, q) == noise.quantile(sorted(values), q)
    # by hand: sorted 1 3 4 5 7 9 12; p10 at position 0.6: 1 + 0.6 x 2 = 2.2; p90 at 5.4: 9 + 0.4 x 3 = 10.2
    assert harness.quantile(values, 0.1) == pytest.approx(2.2) and harness.quantile(values, 0.9) == pytest.approx(10.2)
    assert harness.p10_p90([1000, 2000]) == "1.1 us-1.9 us" and harness.p10_p90(None) == "-"


def test_timing_keeps_every_run_and_makes_the_minimum_past_the_budget():
    t = harness.time_fn(lambda: None, 1e-6, 1, min_runs=7)
    assert t["runs"] == len(t["times_ns"]) >= 7 and all(isinstance(v, int) for v in t["times_ns"])
    assert t["replay_ns"] == round(statistics.median(t["times_ns"])) and t["calls_per_run"] >= 1
