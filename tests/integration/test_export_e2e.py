"""`opscope export` end to end: real traces exported to Chrome JSON read back with the same totals and launch
links; Perfetto protobuf parsed back with perfetto's own classes; bad input and hostile names."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support.cli import assert_one_line_error, run_cli
from support.export import export, perfetto_slices, totals
from support.shared import shared_trace
from support.tracefiles import write_trace, x

from opscope.analyses.kernels import kernel_table
from opscope.analyses.links import device_links
from opscope.analyses.ops import op_table
from opscope.ingest import open_trace

H100 = "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = "tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
ORT = "generated/onnxruntime_cpu_profile.json"
TF = "tf-timeline/joeyearsley-mnist-xla/timeline.ctf.json"


def linked(trace) -> int:
    return len(device_links(trace)["launch_row"]) - device_links(trace)["launch_row"].null_count


@pytest.mark.parametrize("relative", [H100, MI300, ORT, TF])
def test_chrome_round_trip(tmp_path, relative):
    source = shared_trace(relative)
    out = tmp_path / "out.json.gz"
    res = export(source, out)
    assert res.returncode == 0, res.stderr
    original = open_trace(source, use_cache=False)
    n = original.events.num_rows
    assert f"kept {n:,} of {n:,} events" in res.stderr
    back = open_trace(out, use_cache=False)
    # every event comes back with its kind, name and duration; only opscope's marks are added (as profiler spans)
    assert totals(back) == totals(original)
    assert kernel_table(back).sort_by("name").equals(kernel_table(original).sort_by("name"))
    assert op_table(back).sort_by("name").equals(op_table(original).sort_by("name"))
    assert back.memory.num_rows == original.memory.num_rows
    assert back.metadata["tool"] == original.metadata["tool"]
    # an arrow for every launch -> device work link of the original, and the links read back the same
    doc = json.loads(gzip.decompress(out.read_bytes()))
    phases = [e["ph"] for e in doc["traceEvents"]]
    assert phases.count("s") == phases.count("f") == linked(original)
    assert linked(back) == linked(original)
    assert doc["displayTimeUnit"] == "ns"


def test_real_gpu_trace_has_tracks_and_findings(tmp_path):
    source = shared_trace(H100)
    out = tmp_path / "out.json"
    assert export(source, out).returncode == 0
    doc = json.loads(out.read_text())
    meta = {(e["name"], e["args"].get("name")) for e in doc["traceEvents"] if e["ph"] == "M"}
    assert ("thread_name", "stream 7") in meta and ("process_name", "opscope") in meta
    assert ("thread_name", "opscope findings") in meta
    sort = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"] if e["name"] == "process_sort_index"}
    assert sort[19392] < sort[0]  # the CPU process before GPU 0's
    findings = [e for e in doc["traceEvents"] if e.get("args", {}).get("opscope") == "findings"]
    assert any(e["args"]["finding"] == "idle gap" for e in findings)
    assert any(e["ph"] == "C" and e["name"] == "memory cuda:0" for e in doc["traceEvents"])
    out2 = tmp_path / "plain.json"
    assert export(source, out2, "--no-findings").returncode == 0
    assert not any(e.get("args", {}).get("opscope") == "findings" for e in json.loads(out2.read_text())["traceEvents"])


def test_perfetto(tmp_path):
    pytest.importorskip("perfetto")
    source = shared_trace(H100)
    out = tmp_path / "out.pftrace"
    res = export(source, out, fmt="perfetto")
    assert res.returncode == 0, res.stderr
    got = perfetto_slices(out)
    trace = open_trace(source, use_cache=False)
    _, durs = totals(trace, skip_kinds=("marker",))
    want: dict[str, int] = {}
    for (_, name), d in durs.items():
        want[name] = want.get(name, 0) + d
    slices = {n: v for n, v in got["slices"].items() if not any(s[0] in ("steps", "opscope findings") for s in v)}
    assert {n: sum(s[2] for s in v) for n, v in slices.items()} == want
    # flow ids: each begins on a launch and ends on the kernel/memcpy it launched
    starts = {f: n for n, v in got["slices"].items() for s in v for f in s[3]}
    ends = {f: n for n, v in got["slices"].items() for s in v for f in s[4]}
    assert starts.keys() == ends.keys() and len(starts) == linked(trace)
    e = trace.events
    kinds = dict(zip(e["name"].to_pylist(), e["kind"].to_pylist()))
    assert {kinds[n] for n in starts.values()} == {"runtime"}
    assert {kinds[n] for n in ends.values()} <= {"kernel", "memcpy", "memset"}
    peak = max(v for _, v in got["counters"]["memory cuda:0 allocated (bytes)"])
    assert peak == pc.max(trace.memory.filter(pc.equal(trace.memory["device_type"], 1))["total_allocated"]).as_py()
    assert sum(got["instants"].values()) == pc.sum(pc.equal(e["kind"], "marker")).as_py()


@pytest.mark.parametrize("relative", [H100, MI300])
def test_perfetto_tracks_interned_names_and_counts(tmp_path, relative):
    pytest.importorskip("perfetto")
    source = shared_trace(relative)
    out = tmp_path / "out.pftrace"
    assert export(source, out, fmt="perfetto").returncode == 0
    got = perfetto_slices(out)  # resolves every interned id, and checks the sequence flags they need
    names = got["names"]
    assert not [n for n in names.values() if "(none)" in n]
    trace = open_trace(source, use_cache=False)
    e = trace.events
    # every event of the trace is written once: a slice, or an instant for a marker
    marks = {n for n, v in got["slices"].items() if any(s[0] in ("steps", "opscope findings")
                                                        or s[0].startswith("opscope findings (overlap") for s in v)}
    written = sum(len(v) for n, v in got["slices"].items() if n not in marks) + sum(got["instants"].values())
    assert written == e.num_rows
    # each interned name is defined once and stands for an event's own name (the slices carry no text name)
    event_names = set(e["name"].to_pylist())
    assert got["interned"]["event_names"] == len(event_names | marks)
    assert set(got["slices"]) - marks | set(got["instants"]) == event_names
    kinds_of: dict[str, set] = {}
    for n, k in zip(e["name"].to_pylist(), e["kind"].to_pylist()):
        kinds_of.setdefault(n, set()).add(k)
    for name, given in got["annotations"].items():
        if name not in marks:
            assert {a["kind"] for a in given} <= kinds_of[name]
    kinds = {n: min(k) for n, k in kinds_of.items()}
    # device streams named with their device, their memory under the device's process
    device_work = e.filter(pc.is_in(e["kind"], pa.array(["kernel", "memcpy", "memset"])))
    streams = {f"GPU {d} stream {s}" for d, s in zip(device_work["device"].to_pylist(),
                                                     device_work["stream"].to_pylist())}
    stream_tracks = {names[s[5]] for n, v in got["slices"].items() for s in v
                     if kinds.get(n) in ("kernel", "memcpy", "memset")}
    assert {t.split(" (overlap")[0] for t in stream_tracks} == streams
    # one GPU's work (GPU 0 on the H100, GPU 2 on the MI300) and one device's memory (cuda:0, hip:0): the same GPU
    (device,) = set(device_work["device"].to_pylist())
    memory = [n for n in got["counters"] if n.startswith(("memory cuda:0", "memory hip:0"))]
    assert len(memory) == 2 and trace.memory.num_rows
    uuid_of = {n: u for u, n in names.items()}
    for name in memory:
        assert names[got["parents"][uuid_of[name]]].endswith(f"(GPU {device})")
    for name in ("memory cpu allocated (bytes)", "memory cpu reserved (bytes)"):
        assert "(CPU)" in names[got["parents"][uuid_of[name]]]


def test_perfetto_file_is_smaller_than_with_names_written_out(tmp_path):
    """Interning: each distinct name is written once however many events carry it."""
    pytest.importorskip("perfetto")
    name = "void a_kernel_with_a_long_name<float, 128, at::native::SomeFunctor<float>>(int, float*)"
    events = [x(name, 10 * i, 5, cat="kernel", pid=0, tid=7, device=0, stream=7) for i in range(500)]
    path = write_trace(tmp_path / "t.json", events)
    out = tmp_path / "o.pftrace"
    assert export(path, out, fmt="perfetto").returncode == 0
    assert out.read_bytes().count(name.encode()) == 1
    assert len(perfetto_slices(out)["slices"][name]) == 500


def test_cuts_through_the_cli(tmp_path):
    events = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::a", 10, 50), x("aten::b", 20, 2),
              x("ProfilerStep#2", 100, 100, cat="user_annotation"), x("aten::c", 110, 50)]
    path = write_trace(tmp_path / "t.json", events)
    out = tmp_path / "o.json"
    res = export(path, out, "--steps", "1", "--min-dur-us", "3", "--kinds", "cpu_op")
    assert res.returncode == 0, res.stderr
    assert "kept 1 of 5 events" in res.stderr
    back = open_trace(out, use_cache=False)
    assert totals(back)[0] == {("cpu_op", "aten::a"): 1}


# --- bad input ---------------------------------------------------------------------------------------------

def test_existing_output_is_kept(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", [x("aten::a", 0, 5)])
    out = tmp_path / "o.json"
    out.write_text("mine")
    res = run_cli("export", str(path), "--to", "chrome", "-o", str(out), cache=cache)
    assert_one_line_error(res, out, "already exists", "--force")
    assert out.read_text() == "mine"
    assert run_cli("export", str(path), "--to", "chrome", "-o", str(out), "--force", cache=cache).returncode == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_bad_arguments(tmp_path, cache):
    path = write_trace(tmp_path / "t.json", [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::a", 0, 5)])
    missing = tmp_path / "no" / "o.json"
    assert_one_line_error(run_cli("export", str(path), "--to", "chrome", "-o", str(missing), cache=cache), missing,
                          "does not exist")
    out = tmp_path / "o.json"
    res = run_cli("export", str(path), "--to", "chrome", "-o", str(out), "--kinds", "kernal", cache=cache)
    assert res.returncode == 2 and "unknown kind 'kernal'" in res.stderr and "cpu_op" in res.stderr
    assert_one_line_error(run_cli("export", str(path), "--to", "chrome", "-o", str(out), "--steps", "4", cache=cache),
                          path, "selects no step")
    assert not out.exists()


def test_truncated_and_corrupt_traces(tmp_path, cache):
    text = json.dumps({"traceEvents": [x("aten::a", 0, 5)]})
    cut = tmp_path / "cut.json"
    cut.write_text(text[:30])
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(gzip.compress(text.encode())[:20])
    for bad in (cut, corrupt):
        out = tmp_path / f"{bad.name}.out.json"
        assert_one_line_error(run_cli("export", str(bad), "--to", "chrome", "-o", str(out), cache=cache), bad)
        assert not out.exists()


HOSTILE = ['quote " and \\ backslash', "new\nline", "</script><script>alert(1)</script>", "\x1b[31mred\x1b[0m",
           "nul \x00 and \u2028"]


@pytest.mark.parametrize("fmt", ["chrome", "perfetto"])
def test_hostile_names_are_data(tmp_path, fmt):
    if fmt == "perfetto":
        pytest.importorskip("perfetto")
    events = [x(name, 10 * i, 5, pid=name, tid=name) for i, name in enumerate(HOSTILE)]
    path = write_trace(tmp_path / "t.json", events)
    out = tmp_path / ("o.json" if fmt == "chrome" else "o.pftrace")
    res = export(path, out, fmt=fmt)
    assert res.returncode == 0, res.stderr
    if fmt == "chrome":
        doc = json.loads(out.read_text())  # still one valid document
        assert sorted(e["name"] for e in doc["traceEvents"] if e["ph"] == "X") == sorted(HOSTILE)
        assert sorted(totals(open_trace(out, use_cache=False))[0]) == sorted(("cpu_op", n) for n in HOSTILE)
    else:
        assert sorted(perfetto_slices(out)["slices"]) == sorted(HOSTILE)


# --- a job: every rank in one Perfetto file, on one clock ----------------------------------------------------

JOB_BASE = "hta/nccl_parser_config/nccl_data.json.gz"


def test_a_job_exports_to_one_perfetto_file_on_the_reference_clock(tmp_path, cache):
    pytest.importorskip("perfetto")
    from collections import defaultdict

    from support.export import root_name
    from support.jobgen import make_job

    offsets = [0, 5_000_000, -3_000_000, 12_345_678]
    truth = make_job(shared_trace(JOB_BASE), tmp_path / "ranks", 4, offsets_ns=offsets)
    out = tmp_path / "job.pftrace"
    res = run_cli("export", str(tmp_path / "ranks"), "--to", "perfetto", "-o", str(out), cache=cache)
    assert res.returncode == 0, res.stderr
    assert "4 ranks on rank 0's clock" in res.stderr
    got = perfetto_slices(out)
    assert not [n for n in got["names"].values() if "(none)" in n]
    # each collective ends at the same instant on every rank (jobgen made them so, then moved each rank's clock)
    ends: dict[str, list[int]] = defaultdict(list)
    for name, slices in got["slices"].items():
        if name.startswith("ncclKernel"):
            for s in slices:
                ends[root_name(got, s[5])].append(s[1] + s[2])
    assert sorted(ends) == [f"rank {r} python3.10 (GPU 0)" for r in range(4)]
    ranks = [sorted(ends[f"rank {r} python3.10 (GPU 0)"]) for r in range(4)]
    assert len(ranks[0]) == truth.collectives_per_rank
    for r in range(1, 4):
        assert max(abs(a - b) for a, b in zip(ranks[0], ranks[r])) <= 1
    # every rank's events are there once
    total = sum(open_trace(f, use_cache=False).events.num_rows for f in truth.files)
    marks = {n for n, v in got["slices"].items() if any("steps" in s[0] or "opscope findings" in s[0] for s in v)}
    assert sum(len(v) for n, v in got["slices"].items() if n not in marks) + sum(got["instants"].values()) == total
    # Chrome JSON holds one trace
    chrome = run_cli("export", str(tmp_path / "ranks"), "--to", "chrome", "-o", str(tmp_path / "j.json"), cache=cache)
    assert_one_line_error(chrome, tmp_path / "ranks", "--to perfetto")
