"""The reproducer harness as users run it: a script assembled the way ``opscope repro`` writes it (the harness's
prelude, the case's literals, the harness's functions, the ``__main__`` lines), run in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.timing import limit

torch = pytest.importorskip("torch")


from opscope.repro import harness  # noqa: E402  (after the torch check: the harness imports torch)

MARKER = "# --- the case ---\n"

# Runs a script with every import of opscope failing, to prove the script needs only torch (opscope is installed
# in the test's environment, so leaving it off the path would prove nothing).
WITHOUT_OPSCOPE = ("import runpy, sys; sys.modules['opscope'] = None; script = sys.argv[1]; sys.argv = sys.argv[1:]; "
                   "runpy.run_path(script, run_name='__main__')")


def write_script(path: Path, case: str) -> Path:
    """A reproducer as the writer assembles it."""
    prelude, functions = Path(harness.__file__).read_text().split(MARKER)
    header = "#!/usr/bin/env python3\n# opscope repro: a test case\n"
    main = '\nif __name__ == "__main__":\n    sys.exit(main(globals()))\n'
    path.write_text(header + prelude + textwrap.dedent(case) + functions + main)
    return path


def run(script: Path, *argv: str, text: bool = False) -> tuple[int, str, dict | None]:
    """Exit status, stdout and the result (from --json; None with ``text``, the printed summary) of the script in a
    child process."""
    out = script.parent / "out.json"
    out.unlink(missing_ok=True)
    args = list(argv) if text else [*argv, "--json", str(out)]
    p = subprocess.run([sys.executable, "-c", WITHOUT_OPSCOPE, str(script), *args], capture_output=True, text=True,
                       timeout=limit(120), cwd=script.parent)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, json.loads(out.read_text()) if out.exists() else None


def recorded_children(fn, op_name: str) -> list[str]:
    """The ops under ``op_name``'s event when ``fn`` runs under torch.profiler, found by time containment on its
    thread (as a trace records them), in start order."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = list(prof.events())
    top = min((e for e in events if e.name == op_name), key=lambda e: e.time_range.start)
    inside = [e for e in events if e is not top and e.thread == top.thread
              and top.time_range.start <= e.time_range.start and e.time_range.end <= top.time_range.end]
    return list(dict.fromkeys(e.name for e in sorted(inside, key=lambda e: e.time_range.start)))


def test_a_depthwise_convolution_replays_what_torch_records_and_channels_last_matches(tmp_path):
    # the seeds' case in small: a 3x3 depthwise convolution (groups = channels), NCHW
    x, w = torch.randn(2, 8, 12, 12), torch.randn(8, 1, 3, 3)
    recorded = recorded_children(lambda: torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8), "aten::conv2d")
    assert "aten::convolution" in recorded
    script = write_script(tmp_path / "case_1.py", f"""
        OP = 'aten::conv2d'
        OVERLOAD = 'default'
        DEVICE = 'cpu'
        ARGS = [
            T((2, 8, 12, 12), (1152, 144, 12, 1), 'float32'),   # input: Tensor
            T((8, 1, 3, 3), (9, 9, 3, 1), 'float32'),           # weight: Tensor
            None,                                               # bias: Tensor?
            [1, 1],                                             # stride: int[]
            [1, 1],                                             # padding: int[]
            [1, 1],                                             # dilation: int[]
            8,                                                  # groups: int
        ]
        KWARGS = {{}}
        TRACE_NS = 40000
        RECORDED_OPS = {recorded!r}
        RECORDED_KERNELS = []
        VARIANTS = {{
            'channels_last': 'model.to(memory_format=torch.channels_last); x = x.to(memory_format=torch.channels_last)',
            'compile': 'model = torch.compile(model)',
            'tf32': 'torch.backends.cuda.matmul.allow_tf32 = True',
        }}
    """)
    code, stdout, r = run(script, "--budget", "0.05")
    assert code == 0 and stdout == "" and r is not None
    assert r["status"] == "ok" and r["error"] is None and r["op"] == "aten::conv2d" and r["device"] == "cpu"
    assert r["replay_ns"] > 0 and r["runs"] == len(r["times_ns"]) >= 5 and r["trace_ns"] == 40000
    assert r["ratio"] == pytest.approx(r["replay_ns"] / 40000, rel=1e-3)
    assert r["check"] == "same" and r["check_of"] == "ops", r
    assert r["recorded"] == recorded and set(r["replayed"]) == set(recorded) and r["missing"] == r["extra"] == []
    # auto: every variant but compile; tf32 needs cuda
    variants = {v["name"]: v for v in r["variants"]}
    assert list(variants) == ["channels_last", "tf32"]
    assert variants["tf32"]["status"] == "needs cuda"
    cl = variants["channels_last"]
    assert cl["status"] == "ok" and cl["within_tolerance"] is True and cl["replay_ns"] > 0 and cl["speedup"] > 0
    # every run of the variant and of the baseline beside it, at least 5 a side: enough for opscope's interval
    assert cl["runs"] == len(cl["times_ns"]) >= 5 and len(cl["baseline_times_ns"]) >= 5
    assert cl["change"].startswith("model.to(memory_format=torch.channels_last)")
    assert cl["max_abs_err"] <= 1e-5


def test_an_op_this_torch_does_not_have_is_a_status_and_exit_3(tmp_path):
    script = write_script(tmp_path / "case_2.py", """
        OP = 'aten::no_such_op_here'
        OVERLOAD = 'default'
        DEVICE = 'cpu'
        ARGS = [T((4,), (1,), 'float32')]
        KWARGS = {}
        TRACE_NS = 1000
        RECORDED_OPS = []
        RECORDED_KERNELS = []
        VARIANTS = {'channels_last': 'x'}
    """)
    code, _, r = run(script, "--budget", "0.05")
    assert code == 3 and r is not None
    assert r["status"] == f"op aten::no_such_op_here.default is not registered in this torch ({torch.__version__})"
    assert r["replay_ns"] is None and r["variants"] == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the message of a machine without cuda")
def test_a_cuda_case_says_cuda_is_missing_and_runs_with_device_cpu(tmp_path):
    script = write_script(tmp_path / "case_3.py", """
        OP = 'aten::addmm'
        OVERLOAD = 'default'
        DEVICE = 'cuda'
        ARGS = [T((16,), (1,), 'float32'), T((8, 32), (32, 1), 'float32'), T((32, 16), (1, 32), 'float32')]
        KWARGS = {'beta': 1, 'alpha': 1}
        TRACE_NS = 5000
        RECORDED_OPS = []
        RECORDED_KERNELS = ['sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1']
        VARIANTS = {'tf32': 'torch.backends.cuda.matmul.allow_tf32 = True', 'threads=1': 'torch.set_num_threads(1)'}
    """)
    code, _, r = run(script, "--budget", "0.05")
    assert code == 3 and r is not None
    assert r["status"] == "cuda is not available here (run with --device cpu)" and r["device"] == "cuda"

    code, stdout, _ = run(script, "--device", "cpu", "--budget", "0.05", text=True)
    assert code == 0, stdout
    assert "device: cpu (trace: cuda)" in stdout.splitlines()
    assert "tf32" in stdout and "needs cuda" in stdout and "threads=1" in stdout

    code, _, r = run(script, "--device", "cpu", "--budget", "0.05")
    assert code == 0 and r is not None and r["status"] == "ok"
    assert (r["device"], r["trace_device"]) == ("cpu", "cuda") and "device: cpu (trace: cuda)" in r["notes"][0]
    # the kernels are a GPU's: on the CPU the check compares child ops, of which the trace recorded none, and the
    # note says the recording came from another device
    assert r["check"] == "differs" and r["missing"] == [] and "came from a cuda trace" in r["check_note"]
    (threads,) = [v for v in r["variants"] if v["name"] == "threads=1"]
    assert threads["status"] == "ok" and threads["within_tolerance"] is True
