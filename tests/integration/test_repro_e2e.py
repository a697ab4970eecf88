"""``opscope repro`` end to end: real GPU traces from ../shared reproduced on the CPU, a CPU
recording made here, the demo model's depthwise-convolution backward, and ``advise --measure``.

Expected values come from the raw JSON (gzip + json, parsed here), from torch run by the test, or by hand; never
from opscope's reader. No timing is asserted (a shared machine): measured ratios and speed-ups are printed.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from support.shared import raw_events, shared_trace
from support.timing import limit

torch = pytest.importorskip("torch")

from opscope.ingest import open_trace  # noqa: E402
from opscope.repro.cases import select_cases  # noqa: E402
from opscope.repro.rebuild import NotRebuiltError, rebuild  # noqa: E402
from opscope.repro.values import T  # noqa: E402

# --- raw JSON (independent of opscope's reader) ------------------------------------------------------------------

#: Kineto's "Input type" of a tensor -> torch dtype, written out by hand (c10's C++ type names).
KINETO_DTYPES = {
    "float": torch.float32, "double": torch.float64, "c10::Half": torch.float16, "c10::BFloat16": torch.bfloat16,
    "long int": torch.int64, "int": torch.int32, "bool": torch.bool, "unsigned char": torch.uint8,
    "signed char": torch.int8, "short int": torch.int16, "c10::Float8_e4m3fn": torch.float8_e4m3fn,
}
#: "Input type" values that are not a tensor's.
NOT_TENSORS = {"", "Scalar", "ScalarList", "TensorList", "GenericList"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
FRAMEWORK_OP = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(\.\w+)?")
WRAPPERS = ("autograd::", "profiler::", "torch_compile::", "c10d_functional_wrapper::")


def is_framework_op(e: dict | None) -> bool:
    return (e is not None and e.get("cat") == "cpu_op" and FRAMEWORK_OP.fullmatch(e["name"]) is not None
            and not e["name"].startswith(WRAPPERS))


def parents(events: list[dict]) -> dict[int, dict | None]:
    """id(event) -> the innermost host event enclosing it on its thread (by time containment), for every complete
    host event."""
    threads = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in DEVICE_CATS and e.get("cat") != "gpu_user_annotation":
            threads[(e["pid"], e["tid"])].append(e)
    out: dict[int, dict | None] = {}
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            out[id(e)] = stack[-1] if stack else None
            stack.append(e)
    return out


def top_of(e: dict, parent: dict[int, dict | None]) -> dict:
    """The outermost framework op of the chain of framework ops above ``e`` (``e`` when it is not one)."""
    if not is_framework_op(e):
        return e
    while is_framework_op(parent.get(id(e))):
        e = parent[id(e)]  # type: ignore[assignment]
    return e


def key(e: dict) -> tuple:
    a = e.get("args", {})
    return (e["name"], json.dumps(a.get("Input Dims")), json.dumps(a.get("Input Strides")),
            json.dumps(a.get("Input type")), json.dumps(a.get("Concrete Inputs")))


def device_time_by_top(events: list[dict]) -> dict[int, tuple[dict, Decimal]]:
    """id(top op) -> (that op, device time in µs of everything launched under it): each kernel, copy and memset goes
    to the op around its runtime call (same correlation id), climbed to the outermost framework op."""
    parent = parents(events)
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})}
    out: dict[int, tuple[dict, Decimal]] = {}
    for d in events:
        if d.get("ph") != "X" or d.get("cat") not in DEVICE_CATS:
            continue
        call = launch.get(d["args"].get("correlation"))
        op = parent.get(id(call)) if call is not None else None
        while op is not None and op.get("cat") != "cpu_op":  # the innermost op around the launch
            op = parent.get(id(op))
        if op is None:
            continue
        top = top_of(op, parent)
        out[id(top)] = (top, out.get(id(top), (top, Decimal(0)))[1] + d["dur"])
    return out


TRACELENS = [f"tracelens/traces/{gpu}/{name}" for gpu in ("h100", "mi300") for name in (
    "gaunernst_bert-small-uncased__1016001.json.gz", "Falconsai_nsfw_image_detection__1016002.json.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "google_owlv2-large-patch14-ensemble__1016001.json.gz")]


# --- 1. GPU traces reproduced on the CPU ----------------------------------------------------------------------

@pytest.mark.parametrize("relative", TRACELENS, ids=lambda r: r.split("/", 2)[2].split("__")[0] + "-" + r.split("/")[2])
def test_gpu_trace_cases_are_the_raw_json_ops_and_rebuild_with_their_exact_inputs(relative):
    path = shared_trace(relative)
    events = raw_events(path)
    selection = select_cases(open_trace(path), top=10)
    assert selection.device == "cuda" and len(selection.cases) == 10

    # every case is one (op, dims, strides, types, concrete inputs) of the raw JSON, counted over the outermost ops
    # that launched device work, with that device time
    by_key: dict[tuple, list[tuple[dict, Decimal]]] = defaultdict(list)
    for top, us in device_time_by_top(events).values():
        by_key[key(top)].append((top, us))
    total_us = sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS)
    for case in selection.cases:
        wanted = (case.op, json.dumps(case.input_dims), json.dumps(case.input_strides), json.dumps(case.input_types),
                  json.dumps(case.concrete_inputs))
        verbatim = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == case.op
                    and e["args"].get("Input Dims") == case.input_dims
                    and e["args"].get("Input Strides") == case.input_strides
                    and e["args"].get("Input type") == case.input_types]
        assert verbatim, f"{case.op} {case.input_dims}: no event of the raw JSON has these inputs"
        tops = by_key.get(wanted, [])
        assert case.calls == len(tops), (case.op, case.input_dims)
        us = sum(u for _, u in tops)
        assert case.total_ns == pytest.approx(float(us * 1000), abs=len(tops) * 64)  # rounding per device event
        # per call: the median of the calls' device times, from the raw JSON
        assert case.trace_ns == pytest.approx(float(statistics.median(u for _, u in tops)) * 1000, abs=64)
        assert case.share == pytest.approx(float(us / total_us), abs=1e-6)
    # the ten biggest, biggest first
    ranked = sorted((sum(u for _, u in tops) for tops in by_key.values()), reverse=True)
    assert [c.total_ns for c in selection.cases] == pytest.approx([float(u * 1000) for u in ranked[:10]], abs=256)

    # rebuilt: at least 8 of 10, each tensor with exactly the recorded size, strides and dtype
    rebuilt, reasons = 0, []
    for case in selection.cases:
        try:
            call = rebuild(case.op, case.input_dims, case.input_strides, case.input_types, case.concrete_inputs)
        except NotRebuiltError as exc:
            reasons.append(f"{case.op}: {exc}")
            continue
        rebuilt += 1
        params = call.params()
        assert case.input_types is not None and case.input_dims is not None and case.input_strides is not None
        tensors = 0
        for i, rtype in enumerate(case.input_types):
            if rtype in NOT_TENSORS:
                if rtype == "TensorList":
                    value = params[i].value
                    assert isinstance(value, tuple) and [list(t.size) for t in value] == case.input_dims[i]
                continue
            assert rtype in KINETO_DTYPES, f"a recorded type this test does not know: {rtype!r}"
            value = params[i].value
            assert isinstance(value, T), (case.op, i, value)
            assert list(value.size) == case.input_dims[i] and list(value.stride) == case.input_strides[i]
            assert getattr(torch, value.dtype) is KINETO_DTYPES[rtype]
            tensors += 1
        assert tensors == sum(isinstance(p.value, T) for p in params)
    print(f"{relative}: {rebuilt}/10 rebuilt; not rebuilt: {reasons}")
    assert rebuilt >= 8, reasons


# --- the command line -------------------------------------------------------------------------------------------

def opscope(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``opscope ARGS`` in a child process (the test's cache folder, from the environment); ``timeout`` is an idle
    machine's limit (scaled: support.timing)."""
    p = subprocess.run([sys.executable, "-m", "opscope.cli", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=limit(timeout), env=os.environ.copy())
    assert "Traceback" not in p.stderr, p.stderr
    return p


@pytest.mark.slow
def test_bert_h100_reproduced_on_the_cpu_through_the_cli(tmp_path):
    path = shared_trace("tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    p = opscope("repro", str(path), "--top", "6", "--device", "cpu", "--variants", "none", "--budget", "0.02",
                "-o", str(tmp_path / "bert"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    document = json.loads((tmp_path / "bert" / "cases.json").read_text())
    assert document["schema"] == "opscope.repro/1" and document["trace_device"] == "cuda"
    cases = document["cases"]
    assert len(cases) == 6
    ok = [c for c in cases if c["status"] == "ok"]
    assert len(ok) >= 5, [(c["op"], c["status"]) for c in cases]
    for c in cases:
        assert c["trace_device"] == "cuda"
        if c["status"] == "ok":
            assert c["device"] == "cpu" and c["replay_ns"] > 0 and c["check"] in ("same", "differs")
            assert (tmp_path / "bert" / c["script"]).is_file()
        else:
            assert isinstance(c["status"], str) and c["status"].strip() and c["status"] != "not run"
    print("bert h100 on the cpu:", [(c["op"], c["status"], c["check"], c["ratio"]) for c in cases])


# --- 2. a CPU recording made here --------------------------------------------------------------------------------

class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 16 * 16, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def tops_by_key(events: list[dict]) -> dict[tuple, list[dict]]:
    """Every outermost framework op of the raw JSON (no framework op above it), by (op, inputs)."""
    parent = parents(events)
    out: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if is_framework_op(e) and not is_framework_op(parent.get(id(e))):
            out[key(e)].append(e)
    return out


def test_a_cpu_recording_made_here_replays_its_top_three_ops(tmp_path):
    torch.manual_seed(0)
    model, x = Tiny().eval(), torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        for _ in range(2):
            model(x)
        # as opscope record does: the profiler's first steps skipped (the first call under it is many times slower)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as prof:
            for _ in range(5):
                model(x)
                prof.step()
    trace = tmp_path / "tiny.pt.trace.json"
    prof.export_chrome_trace(str(trace))

    # a relative output directory (the scripts run from their own directory, so the runner must not pass it on)
    p = opscope("repro", str(trace), "--top", "3", "--variants", "none", "--budget", "0.05", "--format", "json",
                "-o", "out", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cases = json.loads(p.stdout)
    assert len(cases) == 3
    expected = tops_by_key(raw_events(trace))
    for c in cases:
        assert c["trace_device"] == "cpu" and c["device"] == "cpu"
        assert c["status"] == "ok" and c["check"] == "same", (c["op"], c["status"], c["missing"], c["extra"])
        assert c["replay_ns"] > 0
        # the median with the 10th-90th percentile of every timed run, all of them kept
        assert c["replay_p10_ns"] <= c["replay_ns"] <= c["replay_p90_ns"] and c["runs"] == len(c["times_ns"]) >= 5
        calls = expected[(c["op"], json.dumps(c["input_dims"]), json.dumps(c["input_strides"]),
                          json.dumps(c["input_types"]), json.dumps(c["concrete_inputs"]))]
        assert c["calls"] == len(calls) == 3  # once per recorded forward
        assert c["trace_ns"] == pytest.approx(statistics.median(e["dur"] for e in calls) * 1000, abs=1)
        print(f"{c['op']} {c['input_dims'][:2]}: recorded {c['trace_ns']} ns, replayed {c['replay_ns']} ns, "
              f"ratio {c['replay_ns'] / c['trace_ns']:.2f}")


# --- 3 and 4. the demo model's depthwise-convolution backward ---------------------------------------------------

@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory) -> Path:
    """Two training steps of the demo model (MobileNetV2-style), recorded as ``opscope demo`` does."""
    from opscope.capture.demo import record_demo

    path, _ = record_demo(tmp_path_factory.mktemp("demo") / "rec", steps=2, with_stack=False)
    return path


def depthwise(entry: dict) -> bool:
    """A convolution_backward of a 3x3 depthwise layer: weight [C, 1, 3, 3] on an input of C > 1 channels."""
    dims = entry["input_dims"]
    return len(dims[2]) == 4 and dims[2][1:] == [1, 3, 3] and dims[1][1] == dims[2][0] > 1


def own_depthwise_backward(entry: dict) -> tuple[float, float]:
    """The case's depthwise backward recomputed here with torch, NCHW and channels_last: both gradients must agree
    within 1e-4; returns the worst absolute difference and the largest gradient value."""
    grad_dims, x_dims, w_dims = entry["input_dims"][:3]
    stride, padding = (json.loads(entry["concrete_inputs"][i]) for i in (4, 5))  # as recorded: "[1, 1]"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(x_dims, generator=g)
    w = torch.randn(w_dims, generator=g)
    grads = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        xi = x.clone().to(memory_format=fmt).requires_grad_()
        wi = w.clone().to(memory_format=fmt).requires_grad_()
        y = torch.nn.functional.conv2d(xi, wi, None, stride, padding, 1, x_dims[1])
        assert list(y.shape) == grad_dims  # the recorded grad_output is this forward's output
        gy = torch.randn(grad_dims, generator=torch.Generator().manual_seed(1)).to(memory_format=fmt)
        gx, gw = torch.autograd.grad(y, (xi, wi), gy)
        assert gx.is_contiguous(memory_format=fmt)
        grads.append((gx, gw))
    (nx, nw), (cx, cw) = grads
    torch.testing.assert_close(cx, nx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cw, nw, rtol=1e-4, atol=1e-4)
    worst = max(float((cx - nx).abs().max()), float((cw - nw).abs().max()))
    return worst, max(float(nx.abs().max()), float(nw.abs().max()))


@pytest.mark.slow
def test_the_demo_depthwise_backward_runs_channels_last_with_equal_outputs(tmp_path, demo_trace):
    p = opscope("repro", str(demo_trace), "--op", "convolution_backward", "--top", "6", "--variants",
                "channels_last", "--budget", "0.05", "--format", "json", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cases = json.loads(p.stdout)
    assert cases and all(c["op"] == "aten::convolution_backward" for c in cases)
    found = [c for c in cases if depthwise(c)]
    assert found, [c["input_dims"][2] for c in cases]
    for c in found:
        (cl,) = [v for v in c["variants"] if v["name"] == "channels_last"]
        assert c["status"] == "ok" and c["check"] == "same", c["status"]
        assert cl["status"] == "ok" and cl["speedup"] > 0 and cl["replay_ns"] > 0
        assert "model.to(memory_format=torch.channels_last)" in cl["change"]
        # the verdict is what its interval says (usually "faster" here, about 2-4x; no test asserts a timing: a CI
        # machine's neighbours can stretch a few runs of 0.3 ms to 40)
        low, mid, high = cl["speedup_low"], cl["speedup"], cl["speedup_high"]
        if low is None:  # under 5 runs of a side: no interval
            assert cl["verdict"] == "too few runs to tell" and high is None, cl
        else:
            high = math.inf if high is None else high  # the interval's fast end leaves no positive time: unbounded
            assert low <= mid <= high, cl
            assert cl["verdict"] == ("faster" if low > 1 else "slower" if high < 1 else "no difference") or \
                (cl["verdict"] == "faster" and low == 1) or (cl["verdict"] == "slower" and high == 1), cl  # rounded
        assert c["replay_p10_ns"] <= c["replay_ns"] <= c["replay_p90_ns"] and c["runs"] == len(c["times_ns"])
        worst, biggest = own_depthwise_backward(c)
        # reduction order differs between the layouts: the weight gradient sums N*H*W products, so an fp32
        # difference of ~1e-6 of the gradient's size is expected, not a changed result
        assert cl["max_abs_err"] <= 1e-5 * biggest, (c["input_dims"], cl)
        print(f"depthwise backward {c['input_dims'][:3]}: channels_last {cl['speedup']}x ({cl['verdict']}), "
              f"max_abs_err {cl['max_abs_err']:.3g} (flagged within tolerance: {cl['within_tolerance']}); "
              f"own check: {worst:.3g} of gradients up to {biggest:.3g}")
    # every depthwise case's channels_last outputs are within the fp32 tolerance, which the harness takes relative to
    # the output's magnitude (max|a-b| <= 1e-5 + 1e-5 * max|b|): the weight gradient sums N*H*W products in another
    # order, and the own check above shows differences of that size between the layouts in plain torch too
    for c in found:
        (cl,) = [v for v in c["variants"] if v["name"] == "channels_last"]
        assert cl["within_tolerance"] is True, (c["input_dims"], cl)
        assert cl["max_rel_err"] == pytest.approx(cl["max_abs_err"] / max_output(c), rel=0.5) or cl["max_abs_err"] == 0


def max_output(case: dict) -> float:
    """The largest gradient of a depthwise backward case, recomputed here (the scale max_rel_err is taken against)."""
    return own_depthwise_backward(case)[1]


MEASURED = re.compile(r"--measure: ([a-z0-9-]+): ([0-9.]+)x measured \(opscope repro --run (\S+) ")


@pytest.mark.slow
def test_advise_measure_uses_the_measured_depthwise_factor(tmp_path, demo_trace):
    p = opscope("advise", str(demo_trace), "--measure", "--rules", "dominant-op", "--format", "json", "--budget",
                "0.05", "--measure-dir", str(tmp_path / "m"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    findings = json.loads(p.stdout)
    measured = {m.group(1): (float(m.group(2)), m.group(3)) for m in MEASURED.finditer(p.stderr)}
    print("advise --measure:", measured)
    depthwise_findings = [f for f in findings if f["title"].startswith("Depthwise-convolution backward")]
    if "depthwise-backward" not in measured:
        # not measured: either no finding uses it (a recording on a loaded machine can put the depthwise backward
        # under the rule's share; only what a finding uses is measured), or the note says why, and the factor
        # stays assumed
        if depthwise_findings:
            assert re.search(r"--measure: (depthwise-backward could not be measured|no reproducible)", p.stderr), \
                p.stderr
            assert "factor: the speed-up assumed" in depthwise_findings[0]["evidence_title"]
        return
    factor, directory = measured["depthwise-backward"]
    # the factor, recomputed from the measured cases: time-weighted over the depthwise cases whose variant ran and
    # kept the outputs within tolerance
    document = json.loads((Path(directory) / "cases.json").read_text())
    total = weighted = 0.0
    for c in document["cases"]:
        if c["op"] != "aten::convolution_backward" or not depthwise(c):
            continue
        (cl,) = [v for v in c["variants"] if v["name"] == "channels_last"]
        if c["status"] == "ok" and cl["status"] == "ok" and cl["within_tolerance"]:
            total += c["total_ns"]
            weighted += c["total_ns"] / cl["speedup"]
    assert weighted > 0 and factor == pytest.approx(round(total / weighted, 3), abs=1e-3)

    (f,) = depthwise_findings
    assert f["estimate"].startswith("Measured on this machine: channels_last made")
    assert "replaces the assumed factor" in f["estimate"] and f"(1 - 1/{factor:g})" in f["estimate"]
    assert f"opscope repro --run {directory} --variants channels_last" in f["remedy"]
    assert "factor: the speed-up measured" in f["evidence_title"]
    assert f["evidence"] and {r["factor"] for r in f["evidence"]} == {f"{factor:g}x"}
    for f in findings:  # any other finding of a measured alternative says so too (NCHW depthwise convolutions)
        if "speed-up measured" in (f["evidence_title"] or ""):
            assert f["estimate"].startswith("Measured on this machine")
            assert {r["factor"] for r in f["evidence"]} <= {f"{v:g}x" for v, _ in measured.values()}
