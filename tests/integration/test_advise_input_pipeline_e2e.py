"""input-pipeline rule: DataLoader waits on real GPU traces (with and without workers) and a CPU recording made
here, and its --explain."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from support import tracemutate as tm
from support.shared import shared_trace
from support.timing import limit
from typer.testing import CliRunner

from opscope.advise import advise
from opscope.cli import app
from opscope.ingest import open_trace
from opscope.units import format_ns

LOADER_CATS = ("cpu_op", "user_annotation", "python_function", "Operator")


def is_loader(e: dict) -> bool:
    """The rule's definition: host spans whose name mentions the DataLoader (its record_function annotation and,
    with stacks, the Python frames of torch/utils/data/dataloader.py)."""
    return e.get("ph") == "X" and e.get("cat") in LOADER_CATS and "dataloader" in str(e.get("name", "")).lower()


def union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(a, b):
    """Total overlap of two lists of disjoint sorted intervals."""
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def test_single_process_loader_on_a_gpu_trace_matches_the_raw_json():
    path = shared_trace("kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz")
    doc = tm.load(path)
    steps = tm.steps(doc)
    w0, w1 = steps[0][1], steps[-1][2]
    loader = union([(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in doc["traceEvents"] if is_loader(e)])
    busy = [(max(s, w0), min(e, w1)) for s, e in tm.busy_union(doc, 0) if e > w0 and s < w1]
    waiting = sum(e - s for s, e in loader) - overlap(loader, busy)  # device idle while the host loads
    f = advise(open_trace(path), only=["input-pipeline"]).findings
    assert len(f) == 1 and "single process" in f[0].title
    assert f[0].estimated_ns == pytest.approx(waiting * 1000 / len(steps), abs=1)
    assert "num_workers=" in f[0].remedy
    per_step = {r["step"]: r for r in f[0].evidence}
    for number, s, e in steps:
        inside = union([(ev["ts"], ev["ts"] + ev["dur"]) for ev in doc["traceEvents"] if is_loader(ev)
                        and s <= ev["ts"] < e])
        assert per_step[number]["dataloader_ns"] == sum(b - a for a, b in inside) * 1000
        in_step = [(max(a, w0), min(b, w1)) for a, b in inside]
        idle = sum(b - a for a, b in in_step) - overlap(in_step, busy)
        assert per_step[number]["device_idle_ns"] == pytest.approx(idle * 1000, abs=1)
    assert per_step[6]["device_idle_ns"] > 0.9 * per_step[6]["dataloader_ns"]  # the device waits for the batch


def test_loader_with_workers_is_not_a_bottleneck():
    # the same model with num_workers=4: by the raw JSON, the device is idle while the host is in the
    # DataLoader for far less than the rule's 5% of a step
    path = shared_trace("kineto/samples/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    doc = tm.load(path)
    steps = tm.steps(doc)
    w0, w1 = steps[0][1], steps[-1][2]
    loader = union([(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)) for e in doc["traceEvents"]
                    if is_loader(e) and e["ts"] < w1 and e["ts"] + e["dur"] > w0])
    busy = [(max(s, w0), min(e, w1)) for s, e in tm.busy_union(doc, 0) if e > w0 and s < w1]
    waiting = sum(e - s for s, e in loader) - overlap(loader, busy)
    assert loader and waiting < 0.001 * (w1 - w0)  # under 0.1% of the window
    a = advise(open_trace(path), only=["input-pipeline"])
    assert a.findings == [] and "input-pipeline" not in a.not_applicable


def test_explain(tmp_path):
    r = CliRunner().invoke(app, ["advise", "--explain", "input-pipeline"])
    assert r.exit_code == 0 and "Fires when waiting for input" in r.stdout and "num_workers" in r.stdout


SLOW_LOADER = textwrap.dedent("""
    import time, torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            time.sleep(0.004)  # a slow decode: 4 ms per sample, 16 ms per batch
            return torch.randn(16), torch.tensor(i % 2)

    model = torch.nn.Linear(16, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(Slow(), batch_size=4):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
""")


def test_recorded_cpu_program_with_a_slow_loader(tmp_path):
    pytest.importorskip("torch", reason="recording needs the torch extra")
    script = tmp_path / "slow_loader.py"
    script.write_text(SLOW_LOADER)
    out = tmp_path / "rec"
    # --stack: the Python frames that let the finding name __getitem__ (record's default leaves them out)
    r = subprocess.run([sys.executable, "-m", "opscope.cli", "record", "--stack", "-o", str(out), "--", "python",
                        str(script)],
                       capture_output=True, text=True, timeout=limit(300), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    trace_file = next(out.glob("*.pt.trace.json.gz"))
    doc = tm.load(trace_file)
    steps = tm.steps(doc)
    loader = sum(b - a for _, s, end in steps
                 for a, b in union([(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                                    if is_loader(e) and s <= e["ts"] < end]))
    f = advise(open_trace(trace_file), only=["input-pipeline"]).findings
    assert len(f) == 1
    assert f[0].estimated_ns == pytest.approx(loader * 1000 / len(steps), abs=len(steps))  # µs floats -> ns
    assert f[0].estimated_ns >= 16_000_000 * 0.9  # four 4 ms samples per batch
    # the cause: the script's __getitem__, its time from the raw JSON (its calls that start inside a loader span
    # of the steps, on the same thread, clipped to it), per step
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if is_loader(e)
             and any(s <= e["ts"] < end for _, s, end in steps)]
    merged = {tid: union([(a, b) for t, a, b in spans if t == tid]) for tid in {t for t, _, _ in spans}}
    calls = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "python_function" and e["name"].endswith("): __getitem__") and "slow_loader.py" in \
                e["name"]:
            for a, b in merged.get(e["tid"], []):
                if a <= e["ts"] < b and (e["ts"] > a or e["ts"] + e["dur"] <= b):
                    calls.append((e["ts"], min(e["ts"] + e["dur"], b)))
    assert len(calls) >= 4 * len(steps)  # four samples per batch
    getitem_us = sum(b - a for a, b in union(calls)) / len(steps)
    assert f[0].title.endswith(f"__getitem__ ({format_ns(round(getitem_us * 1000))})")
    assert "slow_loader.py(" in f[0].title
    # through the CLI on the recording directory: run.json's cores decide whether workers are suggested
    run = json.loads((out / "run.json").read_text())
    assert isinstance(run["cpu"]["load_average"], list) and len(run["cpu"]["load_average"]) == 3
    r = CliRunner().invoke(app, ["advise", str(out), "--rules", "input-pipeline", "--format", "json"])
    assert r.exit_code == 0, r.stdout
    finding = json.loads(r.stdout)[0]
    change = finding["remedy"]
    free = run["cpu"]["usable_cores"] - run["threads"]["intra_op"] - round(run["cpu"]["load_average"][0])
    if free >= 1:
        assert f"num_workers={min(8, free)}," in change
    else:  # __getitem__ sleeps: the loader waits, so workers help even without a free core
        assert "num_workers=2," in change and "mostly waits" in change and "__getitem__ cheaper" in change
    # the workers are simulated: the main process waits max(0, L/n - S) per step
    assert finding["saving_method"] == "simulated" and finding["change"].startswith("loader=")
