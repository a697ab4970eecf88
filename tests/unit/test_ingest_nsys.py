"""The Nsight Systems SQLite reader on exports BUILT here from the documented schema (tests/support/nsys.py; not
files nsys wrote: those are in tests/integration/test_nsys_e2e.py), with every expected value worked out by hand
from the rows the builder writes."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sqlite3

import pytest
from support.cli import assert_one_line_error, run_cli_many
from support.nsys import PID, TID, G, build_export, gpid, gtid, small_export_tables

from opscope.analyses.idle import SYNC_CALLS
from opscope.analyses.links import LAUNCH_NAMES, link_table
from opscope.errors import TraceError
from opscope.ingest import open_trace, pick_reader
from opscope.ingest.nsys import READER


def _open(path):
    return open_trace(path, use_cache=False)


def _rows(trace, kind):
    t = trace.events.to_pylist()
    return [r for r in t if r["kind"] == kind]


@pytest.fixture
def small(tmp_path):
    return build_export(tmp_path / "small.sqlite", small_export_tables())


def test_sniff_takes_sqlite_and_leaves_json(small, tmp_path):
    assert pick_reader(small).name == "nsys_sqlite"
    js = tmp_path / "t.json"
    js.write_text('{"traceEvents": []}')
    assert pick_reader(js).name == "chrome_json"
    assert not READER.sniff(js, js.read_bytes())


def test_device_rows(small):
    trace = _open(small)
    kernels = _rows(trace, "kernel")
    assert [(k["name"], k["ts_ns"], k["dur_ns"], k["device"], k["stream"], k["pid"], k["tid"]) for k in kernels] == [
        ("void gemm<float>(float *, int)", 1150, 1000, 0, 7, "0", "7"),
        ("relu_kernel", 2600, 500, 0, 7, "0", "7"),
        ("void gemm<float>(float *, int)", 5150, 1000, 0, 7, "0", "7")]
    copies = _rows(trace, "memcpy")
    assert [(m["name"], m["ts_ns"], m["dur_ns"], m["correlation"]) for m in copies] == [
        ("Memcpy HtoD (Pageable -> Device)", 2200, 300, 2)]
    assert _rows(trace, "memset") == [] and _rows(trace, "sync") == []  # those tables are absent: no error


def test_kernel_and_memcpy_args_use_kinetos_keys(small):
    trace = open_trace(small, use_cache=True)  # args are kept on a cached read
    by_id = dict(zip(trace.args["event_id"].to_pylist(), trace.args["args"].to_pylist()))
    gemm = next(r for r in _rows(trace, "kernel") if r["name"].startswith("void gemm"))
    args = json.loads(by_id[gemm["event_id"]])
    assert args["grid"] == [64, 2, 1] and args["block"] == [256, 1, 1]
    assert args["registers per thread"] == 32
    assert args["shared memory"] == 1024 + 2048
    assert args["correlation"] == 1 and args["stream"] == 7
    copy = _rows(trace, "memcpy")[0]
    cargs = json.loads(by_id[copy["event_id"]])
    assert cargs["bytes"] == 4096
    assert cargs["memory bandwidth (GB/s)"] == pytest.approx(4096 / 300)


def test_runtime_rows_skip_backtraces_and_keep_their_names(small):
    trace = _open(small)
    runtime = _rows(trace, "runtime")
    assert [(r["name"], r["ts_ns"], r["dur_ns"], r["correlation"]) for r in runtime] == [
        ("cudaLaunchKernel_v7000", 1000, 100, 1), ("cudaMemcpyAsync_v3020", 1200, 100, 2),
        ("cudaLaunchKernel_v7000", 1400, 100, 3), ("cudaStreamSynchronize_v3020", 1600, 1600, 4),
        ("cudaLaunchKernel_v7000", 5000, 100, 5)]
    assert {(r["pid"], r["tid"]) for r in runtime} == {(str(PID), str(TID))}
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["nsys CUDA backtrace rows (RUNTIME eventClass 67, copies of the calls they surround; skipped)"] == 1
    assert warnings["nsys table OSRT_API (not read)"] == 3
    # the version-suffixed names are still launches and syncs for the analyses that go by name
    assert re.match(LAUNCH_NAMES["kernel"], "cudaLaunchKernel_v7000")
    assert re.match(LAUNCH_NAMES["memcpy"], "cudaMemcpyAsync_v3020")
    assert re.match(SYNC_CALLS, "cudaStreamSynchronize_v3020")
    assert re.match(SYNC_CALLS, "cudaMemcpy_v3020") and not re.match(SYNC_CALLS, "cudaMemcpyAsync_v3020")


def test_device_work_links_to_its_launch_by_correlation(small):
    trace = _open(small)
    names = trace.events["name"].to_pylist()
    links = link_table(trace).to_pylist()
    assert len(links) == 4
    got = [(names[lk["device_row"]], names[lk["launch_row"]], lk["link_inferred"]) for lk in links]
    assert got == [("void gemm<float>(float *, int)", "cudaLaunchKernel_v7000", False),
                   ("Memcpy HtoD (Pageable -> Device)", "cudaMemcpyAsync_v3020", False),
                   ("relu_kernel", "cudaLaunchKernel_v7000", False),
                   ("void gemm<float>(float *, int)", "cudaLaunchKernel_v7000", False)]
    ts = trace.events["ts_ns"].to_pylist()
    assert [ts[lk["launch_row"]] for lk in links] == [1000, 1200, 1400, 5000]


def test_nvtx_ranges_marks_and_steps(small):
    trace = _open(small)
    ranges = _rows(trace, "user_annotation")
    assert [(r["name"], r["ts_ns"], r["dur_ns"]) for r in ranges] == [("step 1", 900, 3100), ("step 2", 4900, 2100)]
    assert [(m["name"], m["ts_ns"], m["dur_ns"]) for m in _rows(trace, "marker")] == [("checkpoint", 950, 0)]
    steps = trace.steps.to_pylist()
    assert [(s["step"], s["name"], s["ts_ns"], s["dur_ns"], s["pid"], s["tid"]) for s in steps] == [
        (1, "step 1", 900, 3100, str(PID), str(TID)), (2, "step 2", 4900, 2100, str(PID), str(TID))]
    by_step = {(r["name"], r["ts_ns"]): r["step"] for r in _rows(trace, "kernel")}
    assert by_step == {("void gemm<float>(float *, int)", 1150): 1, ("relu_kernel", 2600): 1,
                       ("void gemm<float>(float *, int)", 5150): 2}


def test_metadata(small):
    meta = _open(small).metadata
    assert meta["format"] == "nsys_sqlite"
    assert meta["tool"] == "Nsight Systems 2024.5.1.113"
    assert meta["session_start_utc_ns"] == 1_700_000_000_000_000_000
    assert meta["thread_names"] == {f"{PID}/{TID}": "trainer"}  # the NVTX name the program gave wins
    assert meta["process_names"] == {str(PID): "train.py"}  # only processes with events
    (gpu,) = meta["device_properties"]
    assert gpu == {"id": 0, "name": "NVIDIA Test GPU", "totalGlobalMem": 8_000_000_000, "numSms": 10,
                   "computeMajor": 8, "computeMinor": 6, "maxThreadsPerBlock": 1024, "warpSize": 32,
                   "maxThreadsPerMultiprocessor": 48 * 32, "regsPerBlock": 65536, "sharedMemPerBlock": 49152}


def test_thread_names_table_alone(tmp_path):
    tables = small_export_tables()
    tables["NVTX_EVENTS"] = [r for r in tables["NVTX_EVENTS"] if r["eventType"] != 39]
    meta = _open(build_export(tmp_path / "t.sqlite", tables)).metadata
    assert meta["thread_names"] == {f"{PID}/{TID}": "main thread"}


@pytest.mark.parametrize(("texts", "family"), [
    (["ProfilerStep#4", "step 1", "iteration 9"], [(4, "ProfilerStep#4")]),
    (["Step_3", "iteration 9", "stepping"], [(3, "Step_3")]),
    (["iter 7", "iteration#8", "forward"], [(7, "iter 7"), (8, "iteration#8")]),
    (["forward", "step", "my step 2"], []),
])
def test_step_rule_first_family_with_a_match(tmp_path, texts, family):
    tables = small_export_tables()
    tables["NVTX_EVENTS"] = [{"start": 100 * i, "end": 100 * i + 50, "eventType": 59, "text": t, "globalTid": G}
                             for i, t in enumerate(texts)]
    trace = _open(build_export(tmp_path / "s.sqlite", tables))
    assert [(s["step"], s["name"]) for s in trace.steps.to_pylist()] == family
    assert len(_rows(trace, "user_annotation")) == len(texts)  # every range stays an annotation too


def test_correlation_ids_of_two_processes_do_not_mix(tmp_path):
    """Both processes use correlationId 1: each kernel must link to the launch of its own process."""
    a, b = gtid(100, 100), gtid(200, 200)
    tables = {
        "StringIds": [{"id": 1, "value": "cudaLaunchKernel_v7000"}, {"id": 2, "value": "k_a"},
                      {"id": 3, "value": "k_b"}],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            {"start": 3000, "end": 3050, "eventClass": 0, "globalTid": b, "correlationId": 1, "nameId": 1},
            {"start": 1000, "end": 1050, "eventClass": 0, "globalTid": a, "correlationId": 1, "nameId": 1}],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            {"start": 1100, "end": 1200, "deviceId": 0, "streamId": 7, "correlationId": 1, "globalPid": gpid(100),
             "demangledName": 2},
            {"start": 3100, "end": 3200, "deviceId": 1, "streamId": 7, "correlationId": 1, "globalPid": gpid(200),
             "demangledName": 3}],
    }
    trace = _open(build_export(tmp_path / "mp.sqlite", tables))
    ev = trace.events.to_pylist()
    links = {ev[lk["device_row"]]["name"]: ev[lk["launch_row"]]["pid"] for lk in link_table(trace).to_pylist()}
    assert links == {"k_a": "100", "k_b": "200"}
    assert {r["correlation"] for r in ev if r["kind"] == "kernel"} == {(100 << 32) | 1, (200 << 32) | 1}


def test_name_columns_of_another_version_and_missing_names(tmp_path):
    """Kernels with only shortName (no demangledName column) and an id StringIds lacks."""
    tables = {"StringIds": [{"id": 1, "value": "short_k"}],
              "CUPTI_ACTIVITY_KIND_KERNEL": [{"start": 10, "end": 20, "deviceId": 0, "streamId": 1, "shortName": 1},
                                             {"start": 30, "end": 40, "deviceId": 0, "streamId": 1, "shortName": 99}]}
    con = sqlite3.connect(tmp_path / "v.sqlite")
    con.execute("CREATE TABLE StringIds (id, value)")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, shortName)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "short_k")])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?)",
                    [(r["start"], r["end"], 0, 1, None, r["shortName"]) for r in tables["CUPTI_ACTIVITY_KIND_KERNEL"]])
    con.commit()
    con.close()
    trace = _open(tmp_path / "v.sqlite")
    assert [k["name"] for k in _rows(trace, "kernel")] == ["short_k", "<kernel without a name>"]
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["names whose id is not in StringIds (named by their kind)"] == 1


def test_sync_rows_and_unclosed_ranges(tmp_path):
    tables = small_export_tables()
    tables["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"] = [
        {"start": 3150, "end": 3190, "deviceId": 0, "streamId": 7, "correlationId": 4, "globalPid": gpid(PID),
         "syncType": 3, "eventId": 4294967295},
        {"start": 6200, "end": 6300, "deviceId": 0, "streamId": 4294967295, "correlationId": 9,
         "globalPid": gpid(PID), "syncType": 4}]
    tables["NVTX_EVENTS"].append({"start": 7100, "end": None, "eventType": 59, "text": "left open", "globalTid": G})
    tables["NVTX_EVENTS"].append({"start": 7200, "end": 7300, "eventType": 59, "text": "no thread", "globalTid": None})
    trace = _open(build_export(tmp_path / "s.sqlite", tables))
    assert [(s["name"], s["dur_ns"], s["stream"]) for s in _rows(trace, "sync")] == [
        ("Stream Sync", 40, 7), ("Context Sync", 100, -1)]
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["NVTX ranges never closed (kept with no duration)"] == 1
    assert [(r["pid"], r["tid"]) for r in _rows(trace, "user_annotation") if r["name"] == "no thread"] == [("", "")]


def test_progress_reaches_the_file_size(small):
    seen: list[tuple[int, int]] = []
    READER.read(small, progress=lambda done, total: seen.append((done, total)), keep_args=False)
    size = small.stat().st_size
    assert seen and all(total == size for _, total in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and 0 < done[-1] <= size


def test_the_file_is_not_written(small):
    before = hashlib.sha256(small.read_bytes()).hexdigest()
    listing = sorted(p.name for p in small.parent.iterdir())
    _open(small)
    assert hashlib.sha256(small.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in small.parent.iterdir()) == listing  # no -journal, -wal or -shm left beside it


# -- bad input: one line naming the file, exit 2 -------------------------------------------------------------

def test_bad_sqlite_files_fail_in_one_line(tmp_path, cache):
    other = tmp_path / "results.db"  # rocprof's own SQLite output has tables like these
    con = sqlite3.connect(other)
    for t in ("HIP", "OPS", "COPY", "KERN"):
        con.execute(f"CREATE TABLE {t} (a)")
    con.commit()
    con.close()
    tables = small_export_tables()
    del tables["StringIds"]
    no_strings = build_export(tmp_path / "nostrings.sqlite", tables)
    whole = build_export(tmp_path / "whole.sqlite", small_export_tables()).read_bytes()
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(whole[: len(whole) // 2])
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    header_only = tmp_path / "header.sqlite"
    header_only.write_bytes(b"SQLite format 3\x00" + b"\x00" * 20)
    zipped = tmp_path / "zipped.sqlite.gz"
    zipped.write_bytes(gzip.compress(whole))
    tables = small_export_tables()
    tables["CUPTI_ACTIVITY_KIND_KERNEL"][1]["start"] = "[bold]soon\n[/bold]"  # SQLite keeps text in any column
    typed = build_export(tmp_path / "typed.sqlite", tables)
    cases = [(typed, "wrong type"), (other, "not an Nsight Systems export"), (no_strings, "without its StringIds"),
             (truncated, "truncated"), (garbage, "SQLite"), (header_only, "truncated"), (zipped, "gunzip")]
    results = run_cli_many([("summary", str(p), "--no-cache") for p, _ in cases], cache=cache)
    for (path, words), res in zip(cases, results):
        assert_one_line_error(res, path, words)


def test_reader_raises_trace_error_for_a_damaged_table(tmp_path):
    """A page damaged inside a table (the header's size is right): a TraceError, not an sqlite3 exception."""
    path = build_export(tmp_path / "d.sqlite", {
        **small_export_tables(),
        "CUPTI_ACTIVITY_KIND_KERNEL": [{"start": i, "end": i + 1, "deviceId": 0, "streamId": 1, "demangledName": 3,
                                        "correlationId": i} for i in range(20000)]})
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for off in range(len(data) - 4 * page, len(data) - page, page):  # trash whole pages near the end
        data[off:off + page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=r"d\.sqlite: is a damaged SQLite database"):
        _open(path)


def test_cli_runs_on_a_built_export(small, cache):
    kernels, steps = run_cli_many([("kernels", str(small), "--format", "json"),
                                   ("steps", str(small), "--format", "json")], cache=cache)
    assert kernels.returncode == 0 and steps.returncode == 0, (kernels.stderr, steps.stderr)
    rows = {r["name"]: (r["calls"], r["total_ns"]) for r in json.loads(kernels.stdout)}
    assert rows == {"gemm": (2, 2000), "relu_kernel": (1, 500), "Memcpy HtoD (Pageable -> Device)": (1, 300)}
    # step 1: gemm 1000 + copy 300 + relu 500 of device time in 900-4000; step 2: gemm 1000 in 4900-7000
    assert [(r["step"], r["dur_ns"], r["gpu_busy_ns"]) for r in json.loads(steps.stdout)] == [
        (1, 3100, 1800), (2, 2100, 1000)]
