"""GPU analysis: busy/idle per device and stream, concurrency, launches, idle causes, and the known traps.

Every expected number is worked out by hand from the trace built in the test (times in µs in the trace,
ns in the results).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from support.gpu import US, analyze, idle_by_cause, kernel, launch, rows_by_stream, step, two_streams
from support.hta_compat import kernel_type_breakdown, temporal_breakdown
from support.tracefiles import write_trace, x

from opscope.analyses.gpu import direction_code
from opscope.analyses.idle import SYNC_CALLS
from opscope.ingest import open_trace

# --- breakdown, concurrency, launches ------------------------------------------------------------------------

def test_breakdown_per_stream_and_device(tmp_path):
    a = analyze(tmp_path, two_streams())
    rows = rows_by_stream(a)
    assert list(rows) == [(0, None), (0, 7), (0, 20), (1, None), (1, 7)]  # device row first, then its streams
    s7 = rows[(0, 7)]
    assert (s7["compute_ns"], s7["memcpy_ns"], s7["memcpy_htod_ns"], s7["memcpy_dtoh_ns"], s7["memset_ns"],
            s7["comm_ns"]) == (300 * US, 150 * US, 50 * US, 100 * US, 20 * US, 0)
    # [100,350) + [400,420) + [1200,1300) + [1500,1600)
    assert s7["busy_ns"] == 470 * US and s7["idle_ns"] == 1530 * US and s7["busy_pct"] == 23.5
    assert s7["window_ns"] == 2000 * US and s7["events"] == 5 and s7["concurrent_ns"] is None
    s20 = rows[(0, 20)]
    assert (s20["comm_ns"], s20["memcpy_dtod_ns"], s20["busy_ns"]) == (300 * US, 30 * US, 330 * US)
    d0 = rows[(0, None)]
    # device unions: memcpy [300,350) + [1200,1300) (DtoD inside it); busy [100,500) + [1200,1300) + [1500,1600)
    assert (d0["compute_ns"], d0["memcpy_ns"], d0["memcpy_dtod_ns"], d0["memset_ns"], d0["comm_ns"]) == (
        300 * US, 150 * US, 30 * US, 20 * US, 300 * US)
    assert d0["busy_ns"] == 600 * US and d0["idle_ns"] == 1400 * US and d0["busy_pct"] == 30.0
    # both streams busy: [200,350) + [400,420) + [1250,1280)
    assert d0["concurrent_ns"] == 200 * US and d0["events"] == 7 and d0["clipped"] == 0
    assert rows[(1, None)]["busy_ns"] == 400 * US and rows[(1, 7)]["busy_pct"] == 20.0


def test_the_gpu_analysis_is_made_once_per_trace_and_device_work_is_told_without_it(tmp_path):
    from opscope.analyses.gpu import gpu_analysis, has_device_work

    trace = open_trace(write_trace(tmp_path / "t.json", two_streams()), use_cache=False)
    assert gpu_analysis(trace) is gpu_analysis(trace)  # the report's sections and the rules share one
    assert has_device_work(trace) and gpu_analysis(trace).has_work
    host_only = open_trace(write_trace(tmp_path / "h.json", [x("aten::mm", 0, 10)]), use_cache=False)
    assert not has_device_work(host_only) and not gpu_analysis(host_only).has_work


def test_launch_statistics(tmp_path):
    a = analyze(tmp_path, two_streams())
    d0 = {r["device"]: r for r in a.launches().to_pylist()}[0]
    assert d0["streams"] == 2 and d0["max_concurrent_streams"] == 2 and d0["launch_threads"] == 1
    assert d0["concurrent_ns"] == 200 * US and d0["concurrent_pct"] == round(100 * 200 / 600, 2)
    # kernels: conv (step 1), NCCL (step 1), gemm (step 2); 200, 300, 100 us
    assert d0["kernels"] == 3 and d0["kernels_per_step"] == 1.5 and d0["median_kernel_ns"] == 200 * US
    # delays 50, 50, 100 us: median 50, p90 (linear) = 50 + 0.8 * 50 = 90
    assert d0["launches"] == 3 and d0["graph_launches"] == 0 and d0["skewed_launches"] == 0
    assert d0["launch_delay_median_ns"] == 50 * US and d0["launch_delay_p90_ns"] == 90 * US


def test_memcpy_direction_names():
    names = {"Memcpy HtoD (Pageable -> Device)": "htod", "Memcpy DtoH (Device -> Pinned)": "dtoh",
             "Memcpy DtoD (Device -> Device)": "dtod", "Memcpy PtoP (Device -> Device)": "ptop",
             "CopyHostToDevice": "htod", "CopyDeviceToHost": "dtoh", "Memcpy HtoH": "other", "dma_request": "other"}
    from opscope.analyses.gpu import MEMCPY_DIRECTIONS

    assert {n: MEMCPY_DIRECTIONS[direction_code(n)] for n in names} == names


# --- idle causes ---------------------------------------------------------------------------------------------

def idle_scenario() -> list[dict]:
    """Window = step [100, 1100) us, one stream. Kernels K1 [100,200) (launched at 90), K2 [300,400) (at 280),
    K3 [500,600) (at 490), K4 [605,700) (at 602: after the 5 us gap began), K5 [708,800) (at 650: queued).
    Host: cudaStreamSynchronize [150,260), DataLoader [410,470) holding cudaDeviceSynchronize [450,460),
    cudaDeviceSynchronize [1000,1050).

    Gaps: [200,300): sync 60 (to 260), host_wait 20 (to 280), other 20 (K2 launched, not started).
    [400,500): host_wait 10, input 50 + sync 10 (sync wins inside the loader), host_wait 20, other 10.
    [600,605): launch_overhead 5. [700,708): kernel_gap 8 (K5 was queued). [800,1100): sync 50, host_wait 250.
    """
    return [
        step(1, 100, 1000),
        launch(90, 1), launch(280, 2), launch(490, 3), launch(602, 4, dur=2), launch(650, 5),
        x("cudaStreamSynchronize", 150, 110, cat="cuda_runtime", correlation=90),
        x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 410, 60, cat="user_annotation"),
        x("cudaDeviceSynchronize", 450, 10, cat="cuda_runtime", correlation=91),
        x("cudaDeviceSynchronize", 1000, 50, cat="cuda_runtime", correlation=92),
        kernel("k1", 100, 100, corr=1), kernel("k2", 300, 100, corr=2), kernel("k3", 500, 100, corr=3),
        kernel("k4", 605, 95, corr=4), kernel("k5", 708, 92, corr=5),
    ]


def test_idle_causes_by_priority(tmp_path):
    a = analyze(tmp_path, idle_scenario())
    causes = idle_by_cause(a)
    assert causes == {"sync": 120 * US, "input_pipeline": 50 * US, "launch_overhead": 5 * US, "kernel_gap": 8 * US,
                      "host_wait": 300 * US, "other": 30 * US}
    device_row = rows_by_stream(a)[(0, None)]
    assert sum(causes.values()) == device_row["idle_ns"] == 1000 * US - 487 * US
    pct = {r["cause"]: r["idle_pct"] for r in a.idle().to_pylist()}
    assert pct["host_wait"] == round(100 * 300 / 513, 2)


def test_short_gap_threshold(tmp_path):
    # with a 5 us threshold neither the 5 us gap before K4 nor the 8 us one before K5 is short: the first is
    # host_wait until K4's launch at 602, then other; the second is other (K5 queued)
    a = analyze(tmp_path, idle_scenario(), short_gap_ns=5 * US)
    causes = idle_by_cause(a)
    assert causes["launch_overhead"] == 0 and causes["kernel_gap"] == 0
    assert causes["host_wait"] == 302 * US and causes["other"] == (30 + 3 + 8) * US


def test_sync_call_names():
    regex = re.compile(SYNC_CALLS)
    blocking = ["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                "cudaMemcpy2D", "hipMemcpy", "hipMemcpyWithStream", "hipStreamSynchronize", "hipDeviceSynchronize",
                "cuCtxSynchronize", "cuMemcpyDtoH_v2"]
    not_blocking = ["cudaMemcpyAsync", "hipMemcpyAsync", "cudaLaunchKernel", "cudaStreamWaitEvent",
                    "cudaEventRecord", "cudaMemcpy2DAsync", "cuMemcpyDtoHAsync_v2"]
    assert [n for n in blocking if not regex.search(n)] == []
    assert [n for n in not_blocking if regex.search(n)] == []


# --- traps ---------------------------------------------------------------------------------------------------

def test_cuda_graph_kernels_all_count(tmp_path):
    """One cudaGraphLaunch (corr 100) runs 100 kernels of 9.9 us every 10 us from 100 us, plus a branch running
    beside the first one on the same stream: the device is busy 99% of the step [100, 1100)."""
    events = [step(1, 100, 1000), launch(90, 100, "cudaGraphLaunch")]
    events += [kernel(f"graph_kernel_{i}", 100 + 10 * i, 9.9, corr=100) for i in range(100)]
    events.append(kernel("graph_branch", 100, 5, corr=100))
    a = analyze(tmp_path, events)
    d0 = rows_by_stream(a)[(0, None)]
    assert d0["busy_ns"] == 100 * 9900 and d0["busy_pct"] == 99.0 and d0["clipped"] == 0
    launches = a.launches().to_pylist()[0]
    assert (launches["kernels"], launches["launches"], launches["graph_launches"]) == (101, 1, 1)
    assert launches["launch_delay_median_ns"] == 10 * US  # the graph's first kernel, once
    # the 99 gaps of 100 ns inside the graph had work queued: kernel gaps, not launch overhead; after the
    # graph's last kernel nothing was launched: host wait
    assert idle_by_cause(a) == {"sync": 0, "input_pipeline": 0, "launch_overhead": 0, "kernel_gap": 99 * 100,
                                "host_wait": 100, "other": 0}


def test_rocm_durations_past_the_next_kernel_are_clipped(tmp_path):
    """K1 says [100,300) but K2 starts at 150 on the same stream; K3 [400,450) is recorded twice."""
    events = [step(1, 0, 1000), launch(10, 1, "hipLaunchKernel"), launch(20, 2, "hipLaunchKernel"),
              launch(30, 3, "hipLaunchKernel"), launch(40, 4, "hipLaunchKernel"),
              kernel("Cijk_Ailk_Bljk_SB", 100, 200, corr=1), kernel("elementwise", 150, 50, corr=2),
              kernel("reduce", 400, 50, corr=3), kernel("reduce", 400, 50, corr=4)]
    a = analyze(tmp_path, events)
    s7 = rows_by_stream(a)[(0, 7)]
    # [100,150) + [150,200) + [400,450); the union without clipping would be 250 us
    assert s7["busy_ns"] == 150 * US and s7["compute_ns"] == 150 * US and s7["clipped"] == 2
    assert any("2 device events ran past the start of the next event" in n for n in a.notes())


def test_nccl_overlapping_compute_keeps_comm_time(tmp_path):
    nccl_thread = x("cudaLaunchKernel", 60, 5, cat="cuda_runtime", tid=2, correlation=2)
    events = [step(1, 0, 1000), launch(50, 1), nccl_thread,
              kernel("sm80_xmma_gemm", 100, 400, corr=1),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200, 200, stream=20, corr=2)]
    a = analyze(tmp_path, events)
    rows = rows_by_stream(a)
    assert rows[(0, 20)]["comm_ns"] == 200 * US and rows[(0, 7)]["compute_ns"] == 400 * US
    d0 = rows[(0, None)]
    assert (d0["busy_ns"], d0["compute_ns"], d0["comm_ns"], d0["concurrent_ns"]) == (400 * US, 400 * US, 200 * US,
                                                                                      200 * US)
    launches = a.launches().to_pylist()[0]
    assert (launches["streams"], launches["launch_threads"], launches["max_concurrent_streams"]) == (2, 2, 2)
    trace = a.trace
    tb = temporal_breakdown(trace).to_pylist()[0]
    assert (tb["window_ns"], tb["compute_ns"], tb["comm_ns"], tb["non_compute_ns"], tb["idle_ns"]) == (
        400 * US, 400 * US, 200 * US, 0, 0)
    kt = {r["kernel_type"]: r["pct"] for r in kernel_type_breakdown(trace).to_pylist()}
    assert kt == {"COMPUTATION": 50.0, "COMPUTATION overlapping COMMUNICATION": 50.0}


def test_ns_resolution_times_that_overlap_when_rounded(tmp_path):
    """K1 [100000, 101001) ns overlaps K2 [101000, 102000) by 1 ns (both read [100, 101) and [101, 102) in whole
    µs); K3 starts 1 ns after K2 ends. Busy counts the overlap once and idle never goes negative."""
    events = [step(1, 99, 5), launch(90, 1), launch(91, 2), launch(92, 3),
              kernel("k1", 100.0, 1.001, corr=1), kernel("k2", 101.0, 1.0, corr=2),
              kernel("k3", 102.001, 0.5, corr=3)]
    a = analyze(tmp_path, events)
    s7 = rows_by_stream(a)[(0, 7)]
    assert s7["busy_ns"] == 2000 + 500 and s7["compute_ns"] == 2500 and s7["clipped"] == 1
    assert s7["idle_ns"] == 5000 - 2500
    causes = idle_by_cause(a)
    assert all(v >= 0 for v in causes.values()) and sum(causes.values()) == 2500


# --- bad input -----------------------------------------------------------------------------------------------

def test_clock_skew_is_reported_not_fatal(tmp_path):
    # k2 starts 30 us before the call that launched it
    events = [step(1, 0, 1000), launch(50, 1), launch(330, 2), kernel("k1", 100, 100, corr=1),
              kernel("k2", 300, 100, corr=2)]
    a = analyze(tmp_path, events)
    launches = a.launches().to_pylist()[0]
    assert launches["skewed_launches"] == 1 and launches["launch_delay_median_ns"] == (50 - 30) * US // 2
    assert any(n.startswith("clock skew: some work starts on the GPU up to 30.000 us") for n in a.launch_notes())
    assert sum(idle_by_cause(a).values()) == 800 * US


def test_hta_definitions_drop_the_last_step(tmp_path):
    """Steps [0,1000) and [1000,2000): HTA leaves out work launched in the last step (k3)."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), launch(50, 1), launch(60, 2, "cudaMemcpyAsync"),
              launch(1050, 3),
              kernel("k1", 100, 100, corr=1), kernel("Memcpy HtoD (Pinned -> Device)", 300, 100, corr=2,
                                                     cat="gpu_memcpy"),
              kernel("k3", 1100, 500, corr=3)]
    trace = open_trace(write_trace(tmp_path / "t.json", events), use_cache=False)
    kept = temporal_breakdown(trace, drop_last_step=True).to_pylist()[0]
    # span [100, 400): compute 100, memory 100, idle 100
    assert (kept["window_ns"], kept["compute_ns"], kept["memory_ns"], kept["idle_ns"]) == (300 * US, 100 * US,
                                                                                           100 * US, 100 * US)
    assert (kept["idle_pct"], kept["compute_pct"], kept["non_compute_pct"]) == (33.33, 33.33, 33.33)
    everything = temporal_breakdown(trace).to_pylist()[0]
    assert everything["window_ns"] == 1500 * US and everything["compute_ns"] == 600 * US
    kt = {r["kernel_type"]: r["time_ns"] for r in kernel_type_breakdown(trace, drop_last_step=True).to_pylist()}
    assert kt == {"COMPUTATION": 100 * US, "MEMORY": 100 * US}


@pytest.mark.parametrize("name", ["dma_request", "Memset (Device)"])
def test_copy_and_fill_kernels_count_as_memory(tmp_path, name):
    """MTIA-style device events in a kernel category whose names say they move or fill memory."""
    a = analyze(tmp_path, [step(1, 0, 100), kernel(name, 10, 20, cat="mtia_ccp_events")])
    row = rows_by_stream(a)[(0, None)]
    assert row["compute_ns"] == 0 and row["memcpy_ns" if name.startswith("dma") else "memset_ns"] == 20 * US


def _merge_by_hand(rows):
    """Union per group, the slow obvious way: sort, then extend or start a new interval."""
    out = {}
    for g, s, e in sorted(rows):
        spans = out.setdefault(g, [])
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    return [(g, s, e) for g in sorted(out) for s, e in out[g]]


@pytest.mark.parametrize("scale", [1, 1 << 62])  # 1 << 62: group shifts overflow int64, one group at a time
def test_merged_intervals_match_a_plain_merge(scale):
    import random

    import pyarrow as pa

    from opscope.analyses.gpu import merged_intervals

    rng = random.Random(7)
    rows = []
    for _ in range(300):
        g = rng.randrange(4)
        s = rng.randrange(1000)
        rows.append((g, s * scale // 1000 if scale > 1 else s, (s + rng.randrange(60)) * (scale // 1000 or 1)))
    rows = [(g, s, max(s, e)) for g, s, e in rows]
    m = merged_intervals(pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.int64()),
                         pa.array([r[2] for r in rows], pa.int64()))
    got = sorted(zip(m["group"].to_pylist(), m["start"].to_pylist(), m["end"].to_pylist()))
    assert got == _merge_by_hand(rows)
    # "first" points at a row that opens its interval
    for g, s, first in zip(m["group"].to_pylist(), m["start"].to_pylist(), m["first"].to_pylist()):
        assert rows[first][0] == g and rows[first][1] == s


def test_memcpy_of_unknown_direction_counts_as_other(tmp_path):
    events = [step(1, 0, 100), kernel("hipMemcpyAsync copy", 10, 20, cat="gpu_memcpy"),
              kernel("Memcpy DtoH (Device -> Pinned)", 40, 5, cat="gpu_memcpy")]
    row = rows_by_stream(analyze(tmp_path, events))[(0, None)]
    assert (row["memcpy_ns"], row["memcpy_other_ns"], row["memcpy_dtoh_ns"], row["memcpy_htod_ns"]) == (
        25 * US, 20 * US, 5 * US, 0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("launches_known", [True, False])
def test_idle_levels_in_c_agree_with_the_definition(seed, launches_known):
    # the sweep's causes per boundary: every cover overlapping the others at random, touching ends included
    import random

    from opscope.analyses import idle
    from opscope.analyses.intervals import sweep

    rng = random.Random(seed)
    parts = []
    for code in range(6):
        starts = sorted(rng.randrange(0, 400) for _ in range(rng.randint(1, 40)))
        ends = [s + rng.choice([0, 1, 5, 30, 120]) for s in starts]
        parts.append(pa.table({"code": pa.array([code] * len(starts), pa.int8()), "start": pa.array(starts, pa.int64()),
                               "end": pa.array(ends, pa.int64())}))
    points = sweep(pa.concat_tables(parts))
    code, delta = points["code"].combine_chunks(), points["delta"].combine_chunks()
    covers = dict.fromkeys(range(6))
    got = idle._levels_in_c(code, delta, launches_known)
    assert got is not None
    want = idle._levels(code, delta, covers, launches_known)
    assert got[0].to_pylist() == want[0].to_pylist()
    assert got[1].to_pylist() == want[1].to_pylist()
    assert len(set(want[0].to_pylist())) > 2  # several causes met
