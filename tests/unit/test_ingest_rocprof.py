"""The rocprof family (v1 results.json, dispatch CSVs of every generation, stats files, rocprofv3 trace CSVs,
rocprof-compute counters), on small files written here in each writer's exact shape; every expected value is
worked out by hand from them.

The rocprofv3 trace CSVs are built from the header in the rocprofiler-sdk documentation (``using-rocprofv3``):
no real file was found, so these tests check the documented layout, not a recorded one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli

from opscope.analyses.kernels import kernel_table
from opscope.analyses.links import link_table
from opscope.ingest import open_trace
from opscope.ingest.chrome import READER as CHROME_JSON
from opscope.ingest.registry import READERS, pick_reader
from opscope.ingest.rocprof.compute_info import READER as COMPUTE_INFO
from opscope.ingest.rocprof.stats_csv import READER as STATS
from opscope.ingest.rocprof.trace_csv import READER as TRACE_CSV
from opscope.ingest.rocprof.v1_json import READER as V1_JSON
from opscope.model.builder import BAD_TIME_WARNING

BASE = 84118000000000  # rocprof's BeginNs/EndNs: ns on the boot clock
ROCPROF_READERS = (V1_JSON, TRACE_CSV, STATS, COMPUTE_INFO)


def _x(pid: int, tid: int, name: str, begin: int, end: int, **args: str) -> dict:
    """A rocprof v1 slice: ts/dur as strings of whole us from the trace start, exact ns in args (strings)."""
    return {"ph": "X", "name": name, "pid": str(pid), "tid": str(tid), "ts": str((begin - BASE) // 1000),
            "dur": str((end - begin) // 1000),
            "args": {"BeginNs": str(begin), "EndNs": str(end), "Name": name, "pid": str(pid), "tid": str(tid),
                     "DurationNs": str(end - begin), **args}}


def _flow(fid: int, s_pid: int, s_tid: int, s_us: int, t_pid: int, t_tid: int, t_us: int) -> list[dict]:
    return [{"ts": s_us, "ph": "s", "cat": "DataFlow", "id": fid, "pid": s_pid, "tid": s_tid, "name": "dep"},
            {"ts": t_us, "ph": "t", "cat": "DataFlow", "id": fid, "pid": t_pid, "tid": t_tid, "name": "dep"}]


def _v1_json(tmp_path: Path) -> Path:
    """rocprof v1 --hip-trace --roctx-trace output for one range around a copy and a kernel launch.

    Markers (pid 0):  "step" [1_000_000, 9_000_000)
    HIP (pid 2, tid 77): hipMemcpy [2_000_000, 4_000_000), hipLaunchKernel [5_000_000, 5_010_000)
    COPY (pid 1):     CopyHostToDevice [2_100_000, 3_900_123) (dev 0, queue 0), FillBuffer [4_100_000, 4_105_500)
    GPU0 (pid 6):     kernel "k(int, float)" [5_020_000, 5_520_777) on queue 3
    flows: 7 hipMemcpy -> copy, 8 hipLaunchKernel (its end, as rocprof writes it) -> kernel
    """
    b = BASE
    events = [
        {},
        {"args": {"name": "Markers and Ranges"}, "ph": "M", "pid": 0, "name": "process_name"},
        {"args": {"name": "CPU HIP API"}, "ph": "M", "pid": 2, "name": "process_name"},
        {"args": {"name": "COPY"}, "ph": "M", "pid": 1, "name": "process_name"},
        {"args": {"name": "GPU0"}, "ph": "M", "pid": 6, "name": "process_name"},
        _x(0, 77, "step", b + 1_000_000, b + 9_000_000),
        _x(2, 77, "hipMemcpy", b + 2_000_000, b + 4_000_000, args="( dst(0x1) sizeBytes(128) kind(1))"),
        _x(2, 77, "hipLaunchKernel", b + 5_000_000, b + 5_010_000, args="( kernel(k) stream(0))"),
        _x(1, 0, "CopyHostToDevice", b + 2_100_000, b + 3_900_123, **{"dev-id": "0", "queue-id": "0"}),
        _x(1, 0, "FillBuffer", b + 4_100_000, b + 4_105_500, **{"dev-id": "0", "queue-id": "0"}),
        _x(6, 1, "k(int, float)", b + 5_020_000, b + 5_520_777, **{"dev-id": "0", "queue-id": "3"}),
        *_flow(7, 2, 77, 2100, 1, 0, 2100),
        *_flow(8, 2, 77, 5010, 6, 1, 5020),
    ]
    other = {"CMD": "rocminfo", "Agent1.Name": "AMD EPYC", "Agent1.DeviceType": "CPU", "Agent2.Name": "gfx90a",
             "Agent2.MarketingName": "AMD Instinct MI210", "Agent2.DeviceType": "GPU", "Agent2.ComputeUnit": "104",
             "Agent2.PoolInfo.Pool1.Segment": "GLOBAL", "Agent2.PoolInfo.Pool1.Size": "67092480(0x3ffc000)KB"}
    path = tmp_path / "results.json"
    # rocprof writes one event per line, "{ "traceEvents":[{}\n,{...}\n..." then otherData at the end
    path.write_text('{ "traceEvents":[' + "\n,".join(json.dumps(e) for e in events) + '\n],\n"otherData": '
                    + json.dumps(other) + "\n}\n")
    return path


def _rows(trace) -> list[dict]:
    return trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "device", "stream", "correlation"]).to_pylist()


def test_v1_json_rows_take_rocprofs_kinds_and_exact_ns(tmp_path):
    path = _v1_json(tmp_path)
    assert pick_reader(path) is V1_JSON
    trace = open_trace(path, use_cache=False)
    got = {r["name"]: (r["kind"], r["ts_ns"], r["dur_ns"], r["device"], r["stream"]) for r in _rows(trace)}
    assert got == {
        "step": ("user_annotation", BASE + 1_000_000, 8_000_000, None, None),
        "hipMemcpy": ("runtime", BASE + 2_000_000, 2_000_000, None, None),
        "hipLaunchKernel": ("runtime", BASE + 5_000_000, 10_000, None, None),
        "CopyHostToDevice": ("memcpy", BASE + 2_100_000, 1_800_123, 0, 0),  # the us strings say 1800
        "FillBuffer": ("memset", BASE + 4_100_000, 5_500, 0, 0),
        "k(int, float)": ("kernel", BASE + 5_020_000, 500_777, 0, 3),
    }
    assert trace.metadata["tool"] == "rocprof" and trace.metadata["format"] == "rocprof_json"
    assert trace.warnings == []  # the leading {} is rocprof's habit, not a loss
    assert trace.metadata["device_properties"] == [
        {"id": 0, "name": "AMD Instinct MI210", "gfx": "gfx90a", "numSms": 104, "totalGlobalMem": 67092480 * 1024}]
    # flows moved onto the ns clock with the events: the kernel's t end sits at its start (to the us)
    flows = {(r["id"], r["phase"]): r["ts_ns"] for r in trace.flows.to_pylist()}
    assert abs(flows[("8", "t")] - (BASE + 5_020_000)) < 1000


def test_v1_json_flows_link_launches_and_ranges(tmp_path):
    trace = open_trace(_v1_json(tmp_path), use_cache=False)
    rows = _rows(trace)
    corr = {r["name"]: r["correlation"] for r in rows}
    assert corr["hipMemcpy"] == corr["CopyHostToDevice"] == 7
    assert corr["hipLaunchKernel"] == corr["k(int, float)"] == 8
    assert corr["FillBuffer"] is None  # no flow points at it
    links = {rows[r["device_row"]]["name"]: (None if r["launch_row"] is None else rows[r["launch_row"]]["name"],
                                             r["annotation"], r["link_inferred"])
             for r in link_table(trace).to_pylist()}
    assert links["CopyHostToDevice"] == ("hipMemcpy", "step", False)
    assert links["k(int, float)"] == ("hipLaunchKernel", "step", False)
    kernels = {r["name"]: (r["calls"], r["total_ns"]) for r in kernel_table(trace).to_pylist()}
    assert kernels["k(int, float)"] == (1, 500_777)


V1_RESULTS_CSV = (
    "Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,vgpr,sgpr,fbar,sig,obj,"
    "DispatchNs,BeginNs,EndNs,CompleteNs,GPUBusy,Wavefronts\n"
    '0,"vecCopy(double*, double*, int) [clone .kd]",2,0,0,4242,4243,1048576,256,0,0,8,16,0,0x0,0x7f00,'
    "100,1000,25800,26000,87.5,16384\n"
    '1,"vecCopy(double*, double*, int) [clone .kd]",2,1,2,4242,4243,1048576,256,0,0,8,16,0,0x0,0x7f00,'
    "26100,30000,48880,49000,90,16384\n"
    # the comma trap: a name with unquoted commas
    "2,void f<int, 2>(int, float),3,0,4,4242,4243,512,64,1024,16,24,32,0,0x0,0x7f08,50000,60000,61000,61100,"
    "12.25,8\n"
)


def test_results_csv_dispatches_with_args_and_counters(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text(V1_RESULTS_CSV)
    assert pick_reader(path) is TRACE_CSV
    trace = open_trace(path, use_cache=False)
    assert [(r["kind"], r["name"], r["ts_ns"], r["dur_ns"], r["device"], r["stream"]) for r in _rows(trace)] == [
        ("kernel", "vecCopy(double*, double*, int)", 1000, 24_800, 2, 0),
        ("kernel", "vecCopy(double*, double*, int)", 30000, 18_880, 2, 1),
        ("kernel", "void f<int, 2>(int, float)", 60000, 1000, 3, 0),
    ]
    kernels = {r["name"]: (r["calls"], r["total_ns"]) for r in kernel_table(trace).to_pylist()}
    assert kernels == {"vecCopy(double*, double*, int)": (2, 43_680), "void f<int, 2>(int, float)": (1, 1000)}
    args = [json.loads(a) for a in trace.args.sort_by("event_id")["args"].to_pylist()]
    assert args[2]["grd"] == 512 and args[2]["wgr"] == 64 and args[2]["lds"] == 1024 and args[2]["scr"] == 16
    assert args[2]["vgpr"] == 24 and args[2]["sgpr"] == 32 and args[2]["obj"] == "0x7f08"
    assert args[0]["dispatch_id"] == 0 and args[0]["queue"] == 0 and args[0]["CompleteNs"] == 26000
    counters = sorted((r["name"], r["series"], r["ts_ns"], r["value"]) for r in trace.counters.to_pylist())
    assert counters == [("GPUBusy", "dispatch 0", 1000, 87.5), ("GPUBusy", "dispatch 1", 30000, 90.0),
                        ("GPUBusy", "dispatch 2", 60000, 12.25), ("Wavefronts", "dispatch 0", 1000, 16384.0),
                        ("Wavefronts", "dispatch 1", 30000, 16384.0), ("Wavefronts", "dispatch 2", 60000, 8.0)]
    assert {"problem": "rows with unquoted commas in their name (the surplus fields were joined back into the "
                       "name)", "count": 1} in trace.warnings


MI300_TIMESTAMPS = (
    "Dispatch_ID,GPU_ID,Queue_ID,PID,TID,Grid_Size,Workgroup_Size,LDS_Per_Workgroup,Scratch_Per_Workitem,"
    "Arch_VGPR,Accum_VGPR,SGPR,Wave_Size,Kernel_Name,Start_Timestamp,End_Timestamp,Correlation_ID,SQ_WAVES,"
    "Wave_Size_1,Correlation_ID_1,XCC_Index\n"
    '1,2,1,239313,239313,1048576,256,0,0,4,4,16,64,"vecCopy(double*, double*, double*, int, int) (.kd)",'
    "1.62068E+14,1.62068E+14,0,16384,64,0,0\n"
    '2,2,1,239313,239313,1048576,256,0,0,4,4,16,64,"vecCopy(double*, double*, double*, int, int) (.kd)",'
    "1.62068E+14,1.62068E+14,0,16384,64,0,0\n"
)


def test_rounded_timestamps_give_no_duration_and_a_warning(tmp_path):
    path = tmp_path / "pmc_perf.csv"
    path.write_text(MI300_TIMESTAMPS)
    trace = open_trace(path, use_cache=False)
    rows = _rows(trace)
    assert [(r["name"], r["ts_ns"], r["dur_ns"]) for r in rows] == [
        ("vecCopy(double*, double*, double*, int, int)", 162068000000000, 0)] * 2
    assert [r["correlation"] for r in rows] == [None, None]  # rocprof-compute writes 0: no id
    problems = {w["problem"]: w["count"] for w in trace.warnings}
    assert problems == {"start/end times rounded by the writer (to multiples of 1,000,000,000 ns, e.g. "
                        "'1.62068E+14'): those kernels' durations are unknown (0 here, args.duration_unknown) and "
                        "their starts approximate": 2}
    assert all(json.loads(a)["duration_unknown"] for a in trace.args["args"].to_pylist())
    # the repeated identity columns of later passes (Wave_Size_1, Correlation_ID_1) and XCC_Index are no counters
    assert sorted(set(trace.counters["name"].to_pylist())) == ["SQ_WAVES"]


KOKKOS_STATS = (
    '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'
    "void hip_parallel_launch<ParallelFor<loop<HIP>(HIP const&, View<int**>), RangePolicy<HIP>, HIP>, 1024u, 1u>"
    "(ParallelFor<loop<HIP>(HIP const&, View<int**>), RangePolicy<HIP>, HIP> const*),3,10,3,62.5\n"
    "init_lock_array_kernel_threadid(int),1,6,6,37.5\n"
    "Unknown command type,4,0,0,0.0\n"
)
KOKKOS_LONG = ("void hip_parallel_launch<ParallelFor<loop<HIP>(HIP const&, View<int**>), RangePolicy<HIP>, HIP>, "
               "1024u, 1u>(ParallelFor<loop<HIP>(HIP const&, View<int**>), RangePolicy<HIP>, HIP> const*)")


def test_stats_file_gives_exactly_its_calls_and_totals(tmp_path):
    path = tmp_path / "results.stats.csv"
    path.write_text(KOKKOS_STATS)
    assert pick_reader(path) is STATS
    trace = open_trace(path, use_cache=False)
    rows = _rows(trace)
    # 10 ns over 3 calls: 4 + 3 + 3, laid end to end from 0; then the next name
    assert [(r["name"], r["ts_ns"], r["dur_ns"]) for r in rows[:4]] == [
        (KOKKOS_LONG, 0, 4), (KOKKOS_LONG, 4, 3), (KOKKOS_LONG, 7, 3), ("init_lock_array_kernel_threadid(int)", 10, 6)]
    kernels = {r["name"]: (r["kind"], r["calls"], r["total_ns"]) for r in kernel_table(trace).to_pylist()}
    assert kernels == {KOKKOS_LONG: ("kernel", 3, 10), "init_lock_array_kernel_threadid(int)": ("kernel", 1, 6),
                       "Unknown command type": ("kernel", 4, 0)}
    assert trace.metadata["rocprof_stats"][1] == {"name": "init_lock_array_kernel_threadid(int)", "calls": 1,
                                                  "total_ns": 6, "average_ns": 6.0, "percentage": 37.5}
    problems = [w["problem"] for w in trace.warnings]
    assert any(p.startswith("rocprof stats file: no timeline") for p in problems)
    assert "rows with unquoted commas in their name (the surplus fields were joined back into the name)" in problems


def test_hip_and_copy_stats_are_runtime_and_copies(tmp_path):
    hip = tmp_path / "results.hip_stats.csv"
    hip.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\nhipMemcpy,2,301,150,90.0\n'
                   "__hipPushCallConfiguration,1,33,33,10.0\n")
    copy = tmp_path / "results.copy_stats.csv"
    copy.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'
                    '"MEMORY_COPY_HOST_TO_DEVICE",2,50,25.0,83.3,20,30,5.0\n"FillBuffer",1,10,10.0,16.7,10,10,0\n')
    hip_rows = _rows(open_trace(hip, use_cache=False))
    assert [(r["kind"], r["name"], r["dur_ns"]) for r in hip_rows] == [
        ("runtime", "hipMemcpy", 151), ("runtime", "hipMemcpy", 150), ("runtime", "__hipPushCallConfiguration", 33)]
    kernels = {r["name"]: (r["kind"], r["calls"], r["total_ns"])
               for r in kernel_table(open_trace(copy, use_cache=False)).to_pylist()}
    assert kernels == {"MEMORY_COPY_HOST_TO_DEVICE": ("memcpy", 2, 50), "FillBuffer": ("memset", 1, 10)}


# rocprofv3 CSV outputs, from the documented headers (no real file found)
V3_KERNELS = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
    '"Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count",'
    '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH","Agent 4",1,5,900,1,33,"add(float*, float const*, int)",11,1000500,1002500,0,0,12,4,48,'
    "256,1,1,1024,1,1\n"
)
V3_HIP = ('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
          '"HIP_RUNTIME_API","hipMemcpy",900,900,10,999000,1000400\n'
          '"HIP_RUNTIME_API","hipLaunchKernel",900,900,11,1000410,1000490\n')
V3_COPY = ('"Kind","Direction","Source_Agent_Id","Destination_Agent_Id","Correlation_Id","Start_Timestamp",'
           '"End_Timestamp"\n"MEMORY_COPY","HOST_TO_DEVICE","Agent 0","Agent 4",10,999100,1000300\n')
V3_MARKER = ('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
             '"MARKER_CORE_API","iteration, 1",900,900,2,998000,1003000\n'
             '"MARKER_CORE_API","mark",900,900,3,998500,998500\n')


def test_v3_trace_csvs_read_with_their_siblings_and_link(tmp_path):
    for kind, text in (("kernel", V3_KERNELS), ("hip_api", V3_HIP), ("memory_copy", V3_COPY),
                       ("marker_api", V3_MARKER)):
        (tmp_path / f"900_{kind}_trace.csv").write_text(text)
    (tmp_path / "901_hip_api_trace.csv").write_text(V3_HIP)  # another run's: not picked up
    path = tmp_path / "900_kernel_trace.csv"
    assert pick_reader(path) is TRACE_CSV
    trace = open_trace(path, use_cache=False)
    rows = _rows(trace)
    got = sorted((r["kind"], r["name"], r["ts_ns"], r["dur_ns"], r["device"], r["stream"], r["correlation"])
                 for r in rows)
    assert got == sorted([
        ("kernel", "add(float*, float const*, int)", 1000500, 2000, 4, 5, 11),
        ("runtime", "hipMemcpy", 999000, 1400, None, None, 10),
        ("runtime", "hipLaunchKernel", 1000410, 80, None, None, 11),
        ("memcpy", "MEMORY_COPY_HOST_TO_DEVICE", 999100, 1200, 4, -1, 10),
        ("user_annotation", "iteration, 1", 998000, 5000, None, None, 2),
        ("marker", "mark", 998500, 0, None, None, 3),
    ])
    assert trace.metadata["tool"] == "rocprofv3"
    assert [Path(f).name for f in trace.metadata["files"]] == [
        "900_kernel_trace.csv", "900_hip_api_trace.csv", "900_marker_api_trace.csv", "900_memory_copy_trace.csv"]
    assert any(w["problem"].startswith("read together with the other rocprofv3 files") for w in trace.warnings)
    links = {rows[r["device_row"]]["name"]: (rows[r["launch_row"]]["name"], r["annotation"], r["link_inferred"])
             for r in link_table(trace).to_pylist()}
    assert links == {"add(float*, float const*, int)": ("hipLaunchKernel", "iteration, 1", False),
                     "MEMORY_COPY_HOST_TO_DEVICE": ("hipMemcpy", "iteration, 1", False)}


# -- bad input -------------------------------------------------------------------------------------------

def test_missing_end_column_is_one_line_exit_2(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("Index,KernelName,gpu-id,queue-id,BeginNs\n0,k,0,0,100\n")
    res = run_cli("summary", str(path), cache=tmp_path / "cache")
    assert_one_line_error(res, path, "no end time column")


def test_api_csv_without_times_is_one_line_exit_2(tmp_path):
    path = tmp_path / "x_hip_api_trace.csv"
    path.write_text('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp"\n'
                    '"HIP_RUNTIME_API","hipMemcpy",1,1,1,5\n')
    res = run_cli("summary", str(path), cache=tmp_path / "cache")
    assert_one_line_error(res, path, "no end time column")


def test_non_numeric_times_and_a_cut_last_row_are_dropped_and_said(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("Index,KernelName,gpu-id,queue-id,BeginNs,EndNs\n0,a,0,0,100,300\n1,b,0,0,soon,400\n"
                    "2,c,0\n3,c,0,0,500,900\n4,d,0,0,1000")  # a short row; the last line cut, no line end
    trace = open_trace(path, use_cache=False)
    assert [(r["name"], r["dur_ns"]) for r in _rows(trace)] == [("a", 200), ("c", 400)]
    problems = {w["problem"]: w["count"] for w in trace.warnings}
    assert problems["rows with fewer fields than the header (dropped)"] == 1
    assert problems[BAD_TIME_WARNING] == 1
    assert problems["the file ends inside its last row (truncated?): that row dropped"] == 1


def test_stats_with_words_for_numbers_is_one_line_exit_2(tmp_path):
    path = tmp_path / "results.stats.csv"
    path.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\nk,many,lots,1,1\n')
    res = run_cli("kernels", str(path), cache=tmp_path / "cache")
    assert_one_line_error(res, path, "no readable rows")


def test_header_only_dispatch_table_is_one_line_exit_2(tmp_path):
    path = tmp_path / "timestamps.csv"
    path.write_text("Dispatch_ID,Kernel_Name,GPU_ID,Start_Timestamp,End_Timestamp\n")
    res = run_cli("summary", str(path), cache=tmp_path / "cache")
    assert_one_line_error(res, path, "no records")


def test_sysinfo_is_refused_with_what_to_open(tmp_path):
    path = tmp_path / "sysinfo.csv"
    path.write_text("workload_name,command,ip_blocks,timestamp,version\nvcopy,./vcopy,SQ,now,2\n")
    res = run_cli("summary", str(path), cache=tmp_path / "cache")
    assert_one_line_error(res, path, "sysinfo.csv", "not a trace", "pmc_perf.csv")


# -- sniffing -----------------------------------------------------------------------------------------------

KINETO_HEAD = (b'{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [{"ph": "X", "cat": "kernel", '
               b'"name": "GPU0", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 1}}]}')
CHROME_HEAD = b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "COPY"}}]}'
HEADS = {
    "v1_json": None,  # filled in the test from the built file
    "results_csv": V1_RESULTS_CSV.encode(),
    "mi300": MI300_TIMESTAMPS.encode(),
    "stats": KOKKOS_STATS.encode(),
    "v3_kernels": V3_KERNELS.encode(),
    "v3_hip": V3_HIP.encode(),
    "v3_copy": V3_COPY.encode(),
    "sysinfo": b"workload_name,command,ip_blocks,timestamp\n",
    "roofline": b"device,HBMBw,HBMBwLow\n0,1,2\n",
    "kineto": KINETO_HEAD,
    "chrome": CHROME_HEAD,
    "plain_csv": b"a,b,c\n1,2,3\n",
    "ort_csv_like": b"Name,Calls,Total\nx,1,2\n",
}
OWNER = {"v1_json": V1_JSON, "results_csv": TRACE_CSV, "mi300": TRACE_CSV, "stats": STATS, "v3_kernels": TRACE_CSV,
         "v3_hip": TRACE_CSV, "v3_copy": TRACE_CSV, "sysinfo": COMPUTE_INFO, "roofline": COMPUTE_INFO}


def test_each_rocprof_sniff_takes_its_files_and_no_other(tmp_path):
    heads = dict(HEADS, v1_json=_v1_json(tmp_path).read_bytes())
    for label, head in heads.items():
        for reader in ROCPROF_READERS:
            assert reader.sniff(Path("x"), head) == (OWNER.get(label) is reader), (label, reader.name)
    # Chrome traces stay the Chrome reader's, and the rocprof readers come before it in the registry
    assert CHROME_JSON.sniff(Path("x"), KINETO_HEAD) and CHROME_JSON.sniff(Path("x"), CHROME_HEAD)
    order = [r.name for r in READERS]
    assert all(order.index(r.name) < order.index("chrome_json") for r in ROCPROF_READERS)


@pytest.mark.parametrize("label", ["results_csv", "stats", "v3_hip"])
def test_csv_sniffs_read_the_header_not_the_name(tmp_path, label):
    path = tmp_path / "data.txt"  # no telling file name
    path.write_bytes(HEADS[label])
    assert pick_reader(path) is OWNER[label]


def test_csv_stream_chunks_keep_rows_whole_across_blocks_and_gzip(tmp_path):
    import gzip

    from opscope.ingest.rocprof.csv_table import ArrowTableStream, open_table

    text = V1_RESULTS_CSV + "3,\"multi\nline\",0,0\n4,last,0,0,0,1,1,1,1,1,1,1,1,1,0x0,0x0,1,2"  # short row, cut tail
    plain = tmp_path / "results.csv"
    plain.write_text(text)
    packed = tmp_path / "results.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    names = ["vecCopy(double*, double*, int) [clone .kd]"] * 2 + ["void f<int, 2>(int, float)"]
    for path in (plain, packed):
        stream = open_table(path, 1)  # Python's csv module (the stats files)
        chunks = list(stream.chunks(size=2))
        assert [len(c) for c in chunks] == [2, 1]
        assert [r[1] for c in chunks for r in c] == names
        t = stream.table
        assert (t.merged_names, t.dropped_short, t.cut_last_row) == (1, 1, True)
        arrow = ArrowTableStream(path, 1)  # Arrow's reader in small blocks (the dispatch and trace files)
        got = [name for columns in arrow.batches(block_size=200) for name in columns[1].to_pylist()]
        assert got == names  # the repaired row comes last
        t = arrow.table
        assert (t.merged_names, t.dropped_short, t.cut_last_row) == (1, 1, True)
    # the same trace either way
    assert _rows(open_trace(plain, use_cache=False)) == _rows(open_trace(packed, use_cache=False))


def test_many_dispatches_take_the_column_wise_path_with_the_same_results(tmp_path):
    # 300 rows: past the value-by-value path for few rows; one counter value blank
    lines = ["Index,KernelName,gpu-id,queue-id,BeginNs,EndNs,GPUBusy,Note"]
    for i in range(300):
        busy = "" if i == 7 else str(i / 2)
        lines.append(f'{i},"k{i % 3}(int, int)",0,{i % 2},{1000 * i},{1000 * i + 10 + i},{busy},x{i}')
    path = tmp_path / "results.csv"
    path.write_text("\n".join(lines) + "\n")
    trace = open_trace(path, use_cache=False)
    kernels = {r["name"]: (r["calls"], r["total_ns"]) for r in kernel_table(trace).to_pylist()}
    assert kernels == {f"k{j}(int, int)": (100, sum(10 + i for i in range(j, 300, 3))) for j in range(3)}
    counters = {r["series"]: r["value"] for r in trace.counters.to_pylist()}
    assert set(trace.counters["name"].to_pylist()) == {"GPUBusy"}  # "Note" is text, not a counter
    assert len(counters) == 299 and counters["dispatch 9"] == 4.5 and "dispatch 7" not in counters
    assert sum(counters.values()) == sum(i / 2 for i in range(300) if i != 7)


@pytest.mark.parametrize("body", [
    b"Index,KernelName,gpu-id,queue-id,BeginNs,EndNs\n0,k,0,0,1e309,1E+30\n1,k,0,0," + b"9" * 5000
    + b",1\n2,k,0,0,5,9\n",
    b"Index,KernelName,gpu-id,queue-id,BeginNs,EndNs\n0,k\xff\xfe,0,0,5,9,extra,\xc3\n1,\"k\xcb\",0,0,10,20\n",
    b"Index,KernelName,gpu-id,queue-id,BeginNs,EndNs\n0,k,99999999999999999999999,0x,5,9\n1,k,0,0,\r7,\x009\n",
])
def test_hostile_csv_values_are_recovered_or_dropped_never_a_crash(tmp_path, body):
    path = tmp_path / "results.csv"
    path.write_bytes(body)
    trace = open_trace(path, use_cache=False)
    rows = _rows(trace)
    assert rows and all(r["dur_ns"] >= 0 and 0 <= r["ts_ns"] < 2**61 for r in rows)
    assert all(r["device"] is None or abs(r["device"]) < 2**63 for r in rows)
    assert trace.warnings  # each has something to say
