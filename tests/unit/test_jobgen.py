"""support.jobgen on a tiny hand-built Kineto rank trace: every expected time below is worked out by hand from the
base's layout (in the docstring of ``tiny_base``), or measured from the written files, never taken from the
generator's own arithmetic."""

from __future__ import annotations

import copy
import gzip
import json
import statistics
import zlib
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest
from support.jobgen import (
    drop_rank,
    insert_time,
    make_job,
    other_world,
    shift_steps,
    truncate_rank,
)
from support.tracefiles import x

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float"
T0 = 1_000_000  # µs: the base's clock starts here, so a negative rank offset keeps timestamps positive
COMM_ARGS = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
             "dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg",
             "Process Group Ranks": "[0, 1]"}


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, **args) -> dict:
    return x(name, T0 + ts, dur, cat="kernel", pid=0, tid=stream, device=0, stream=stream, correlation=corr, **args)


def launch(ts: float, corr: int) -> dict:
    return x("cudaLaunchKernel", T0 + ts, 5, cat="cuda_runtime", correlation=corr)


def tiny_base() -> list[dict]:
    """Two steps of rank 0 of a world of 2 (times in µs after T0).

    Step 1 [0, 1000): gemm [100, 300) corr 1, gemm_small [300, 350) corr 2 on stream 7; the allreduce
                      ncclKernel [400, 450) corr 3 on stream 8 (record_param_comms [100, 110) launches it).
    Step 2 [1000, 2000): relu [1100, 1150) corr 4, gemm [1150, 1400) corr 5; ncclKernel [1500, 1600) corr 6.
    The straggler's kernel per step is the longest compute kernel ending before the step's collective: gemm
    [100, 300) in step 1, gemm [1150, 1400) in step 2. A flow s at 20 -> f at 100, an instant at 500, a metadata
    event at 5.
    """
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": T0 + 5, "args": {"name": "python"}},
        x("ProfilerStep#1", T0 + 0, 1000, cat="user_annotation"),
        x("aten::mm", T0 + 10, 50),
        launch(20, 1),
        launch(70, 2),
        x("record_param_comms", T0 + 100, 10, **COMM_ARGS, **{"Global rank start": 0, "Global rank stride": 1}),
        launch(105, 3),
        kernel("gemm", 100, 200, 1),
        kernel("gemm_small", 300, 50, 2),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 400, 50, 3, stream=8, **COMM_ARGS),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": T0 + 20, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": T0 + 100, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": T0 + 500},
        x("ProfilerStep#2", T0 + 1000, 1000, cat="user_annotation"),
        launch(1010, 4),
        launch(1020, 5),
        x("record_param_comms", T0 + 1030, 10, **COMM_ARGS, **{"Global rank start": 0, "Global rank stride": 1}),
        launch(1035, 6),
        kernel("relu", 1100, 50, 4),
        kernel("gemm", 1150, 250, 5),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1500, 100, 6, stream=8, **COMM_ARGS),
    ]


DIST = {"backend": "nccl", "rank": 0, "world_size": 2, "pg_count": 1,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]}


@pytest.fixture
def base(tmp_path: Path) -> Path:
    doc = {"schemaVersion": 1, "distributedInfo": DIST, "traceEvents": tiny_base()}
    path = tmp_path / "base.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def load(path: Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=Decimal)


def ns(value) -> int:
    return int(Decimal(value) * 1000)


def timed(doc: dict, offset: int = 0) -> list[tuple[str, str, int, int | None]]:
    """(ph, name, ts, end) in ns relative to T0 and with the rank's offset taken out, in file order."""
    out = []
    for ev in doc["traceEvents"]:
        ts = ns(ev["ts"]) - offset - T0 * 1000
        end = ts + ns(ev["dur"]) if "dur" in ev else None
        out.append((ev["ph"], ev["name"], ts, end))
    return out


def find(rows, name: str, nth: int = 0) -> tuple[int, int | None]:
    hits = [(ts, end) for _, n, ts, end in rows if n == name]
    return hits[nth]


def us(v: float) -> int:
    return round(v * 1000)


def test_insert_time_shifts_later_events_and_stretches_the_ones_spanning_t():
    events = [
        {"ph": "X", "name": "span", "ts": 10.0, "dur": 100.0},        # 10 < 50 <= 110: grows
        {"ph": "X", "name": "ends_at_t", "ts": 20.0, "dur": 30.0},    # ends exactly at 50: grows
        {"ph": "X", "name": "before", "ts": 0.0, "dur": 5.5},         # ends before: untouched
        {"ph": "X", "name": "starts_at_t", "ts": 50.0, "dur": 1.25},  # ts >= t: shifts
        {"ph": "s", "name": "flow", "ts": 49.999, "id": 1},
        {"ph": "f", "name": "flow", "ts": 50.001, "id": 1},
        {"ph": "i", "name": "mark", "ts": 60.0},
        {"ph": "M", "name": "process_name", "ts": 70.0},
    ]
    insert_time(events, 50_000, 2_500)
    got = {(e["name"], e["ph"]): (e["ts"], e.get("dur")) for e in events}
    assert got[("span", "X")] == (10.0, 102.5)
    assert got[("ends_at_t", "X")] == (20.0, 32.5)
    assert got[("before", "X")] == (0.0, 5.5)
    assert got[("starts_at_t", "X")] == (52.5, 1.25)
    assert got[("flow", "s")] == (49.999, None)
    assert got[("flow", "f")] == (52.501, None)
    assert got[("mark", "i")] == (62.5, None)
    assert got[("process_name", "M")] == (70.0, None)
    with pytest.raises(ValueError, match="delta_ns"):
        insert_time(events, 0, -1)


def test_insert_time_is_exact_in_ns_at_kineto_magnitudes():
    # 4.4e12 µs: a double resolves ~1 ns there, so round(ts * 1000) can be off by one; insert_time must not be
    # (4455129191346.443 * 1000 rounds to ...444 in doubles)
    ev = {"ph": "X", "name": "k", "ts": 4455129191346.443, "dur": 2.029}
    insert_time([ev], 0, 1)
    assert json.dumps(ev["ts"]) == "4455129191346.444"
    assert ev["dur"] == 2.029


def test_straggler_and_collectives_by_hand(base: Path, tmp_path: Path):
    offsets = [0, 5_000_000, -2_000_123]
    job = make_job(base, tmp_path / "job", 3, straggler=1, delay_ns=30_000, offsets_ns=offsets)
    assert [p.name for p in job.files] == ["rank-0.json.gz", "rank-1.json.gz", "rank-2.json.gz"]
    assert job.ranks == 3 and job.straggler == 1 and job.offsets_ns == offsets
    assert job.steps == [1, 2] and job.collectives_per_rank == 2
    assert job.delay_per_step_ns == {1: 30_000, 2: 30_000}
    rows = [timed(load(p), offsets[r]) for r, p in enumerate(job.files)]
    for r in range(3):
        late = r == 1
        # step 1: the straggler's gemm is 30 µs longer, everything after it on that rank 30 µs later; the others
        # wait those 30 µs inside the collective, which ends at 480 everywhere
        assert find(rows[r], "gemm", 0) == (us(100), us(330 if late else 300))
        assert find(rows[r], "gemm_small") == ((us(330), us(380)) if late else (us(300), us(350)))
        assert find(rows[r], "ncclKernel_AllReduce_RING_LL_Sum_float", 0) == (us(430 if late else 400), us(480))
        assert find(rows[r], "ProfilerStep#1") == (us(0), us(1030))
        assert find(rows[r], "mark") == (us(530), None)
        assert [ts for ph, _, ts, _ in rows[r] if ph in "sf"] == [us(20), us(100)]
        # step 2 starts 30 µs later on every rank; the straggler's gemm grows again, the collective ends at 1660
        assert find(rows[r], "relu") == ((us(1130), us(1180)))
        assert find(rows[r], "gemm", 1) == (us(1180), us(1460 if late else 1430))
        assert find(rows[r], "ncclKernel_AllReduce_RING_LL_Sum_float", 1) == (us(1560 if late else 1530),
                                                                               us(1660))
        assert find(rows[r], "ProfilerStep#2") == (us(1030), us(2060))
        # metadata keeps its time: no offset, no shift
        assert find(timed(load(job.files[r])), "process_name") == (us(5), None)


def test_rewrites_the_distributed_info_and_the_group_args(base: Path, tmp_path: Path):
    job = make_job(base, tmp_path / "job", 4, gzip=False, name="r{rank:03d}.json{gz}")
    assert [p.name for p in job.files] == ["r000.json", "r001.json", "r002.json", "r003.json"]
    for r, path in enumerate(job.files):
        assert path.read_bytes()[:1] == b"{"
        doc = load(path)
        dist = doc["distributedInfo"]
        assert (dist["rank"], dist["world_size"]) == (r, 4)
        assert dist["pg_config"][0]["ranks"] == [0, 1, 2, 3] and dist["pg_config"][0]["pg_size"] == 4
        comm = [e for e in doc["traceEvents"] if e["name"] in ("record_param_comms",
                                                              "ncclKernel_AllReduce_RING_LL_Sum_float")]
        assert len(comm) == 4
        for e in comm:
            assert e["args"]["Group size"] == 4
            assert e["args"]["Process Group Ranks"] == "[0, 1, 2, 3]"
            assert e["args"]["Collective name"] == "allreduce" and e["args"]["In msg nelems"] == 1024
    assert job.delay_per_step_ns == {}  # no straggler
    # no straggler, no jitter, no offsets: every rank is the base's timeline
    assert timed(load(job.files[3])) == timed({"traceEvents": tiny_base()})


def test_jitter_measured_from_the_files_matches_the_truth(base: Path, tmp_path: Path):
    ranks, straggler, delay, jitter, end_jitter = 5, 4, 40_000, 8_000, 1_000
    offsets = [0, 123_456, 7_000_001, -999_999, 31_337]
    job = make_job(base, tmp_path / "job", ranks, straggler=straggler, delay_ns=delay, offsets_ns=offsets,
                   jitter_ns=jitter, end_jitter_ns=end_jitter, seed=7)
    rows = [timed(load(p), offsets[r]) for r, p in enumerate(job.files)]
    base_rows = timed({"traceEvents": tiny_base()})
    for i in range(2):
        ends = [find(rows[r], "ncclKernel_AllReduce_RING_LL_Sum_float", i)[1] for r in range(ranks)]
        assert max(ends) - min(ends) <= end_jitter  # type: ignore[operator]
    for step, i in ((1, 0), (2, 1)):
        # every compute kernel of the tiny base ends before its step's collective, so a rank's arrival there (from
        # the step's start) is the base's plus exactly what was inserted into the step on that rank
        arrival = [find(rows[r], NCCL, i)[0] - find(rows[r], f"ProfilerStep#{step}")[0] for r in range(ranks)]
        assert arrival[straggler] - statistics.median(arrival) == job.delay_per_step_ns[step]
        assert delay - jitter <= job.delay_per_step_ns[step] <= delay + jitter
        base_arrival = find(base_rows, NCCL, i)[0] - find(base_rows, f"ProfilerStep#{step}")[0]
        assert [a - base_arrival for a in arrival] == [job.extra_ns[r][step] for r in range(ranks)]
    assert len({tuple(job.extra_ns[r].values()) for r in range(ranks)}) == ranks  # the jitter differs per rank
    for r in range(ranks):
        # same events, same order; nothing on one stream overlaps another; steps stay back to back
        assert [(ph, n) for ph, n, _, _ in rows[r]] == [(ph, n) for ph, n, _, _ in base_rows]
        for stream in (7, 8):
            spans = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in load(job.files[r])["traceEvents"]
                           if e.get("cat") == "kernel" and e["tid"] == stream)
            assert all(a[1] <= b[0] for a, b in pairwise(spans))
        assert find(rows[r], "ProfilerStep#1")[1] <= find(rows[r], "ProfilerStep#2")[0]
    # seeded: the same job twice is the same bytes, another seed is another job
    again = make_job(base, tmp_path / "again", ranks, straggler=straggler, delay_ns=delay, offsets_ns=offsets,
                     jitter_ns=jitter, end_jitter_ns=end_jitter, seed=7)
    assert [p.read_bytes() for p in again.files] == [p.read_bytes() for p in job.files]
    other = make_job(base, tmp_path / "other", ranks, straggler=straggler, delay_ns=delay, jitter_ns=jitter, seed=8)
    assert other.extra_ns != job.extra_ns


def test_agrees_with_insert_time_applied_one_edit_at_a_time(base: Path, tmp_path: Path):
    """The generator applies all insertions at once; doing them one by one with insert_time, in the order the
    task defines (the straggler's kernel ends, then each collective's end), must give the same files."""
    ranks, delay = 3, 25_000
    job = make_job(base, tmp_path / "job", ranks, straggler=2, delay_ns=delay, gzip=False)
    events = [copy.deepcopy(tiny_base()) for _ in range(ranks)]

    def end_of(evs: list[dict], name: str, nth: int) -> int:
        e = [e for e in evs if e["name"] == name][nth]
        return ns(Decimal(str(e["ts"]))) + ns(Decimal(str(e["dur"])))

    for nth in (0, 1):  # the straggler's gemm in each step
        insert_time(events[2], end_of(events[2], "gemm", nth), delay)
    for nth in (0, 1):
        ends = [end_of(evs, "ncclKernel_AllReduce_RING_LL_Sum_float", nth) for evs in events]
        for evs, end in zip(events, ends):
            insert_time(evs, end, max(ends) - end)
    for r in range(ranks):
        assert timed(load(job.files[r])) == timed(json.loads(json.dumps({"traceEvents": events[r]}),
                                                             parse_float=Decimal))


def test_faults(base: Path, tmp_path: Path):
    job = make_job(base, tmp_path / "job", 4)
    plain = make_job(base, tmp_path / "plain", 2, gzip=False)

    whole = gzip.decompress(job.files[1].read_bytes())
    assert truncate_rank(job, 1, keep_fraction=0.5) == job.files[1]
    cut = job.files[1].read_bytes()
    assert cut[:2] == b"\x1f\x8b"
    with pytest.raises(EOFError):  # a cut stream, as a killed writer leaves it
        gzip.decompress(cut)
    assert zlib.decompressobj(31).decompress(cut) == whole[: len(whole) // 2]

    text = plain.files[0].read_bytes()
    truncate_rank(plain, 0)
    assert plain.files[0].read_bytes() == text[: int(len(text) * 0.6)]
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain.files[0].read_bytes())

    assert drop_rank(job, 2) == job.files[2] and not job.files[2].exists()

    assert other_world(job, 3, 16) == job.files[3]
    assert job.files[3].read_bytes()[:2] == b"\x1f\x8b"
    assert load(job.files[3])["distributedInfo"]["world_size"] == 16
    assert load(job.files[3])["distributedInfo"]["rank"] == 3

    before = timed(load(job.files[0]))
    assert shift_steps(job, 0, 5) == job.files[0]
    after = timed(load(job.files[0]))
    assert [n for _, n, _, _ in after if n.startswith("ProfilerStep")] == ["ProfilerStep#6", "ProfilerStep#7"]
    assert [(ph, ts, end) for ph, _, ts, end in after] == [(ph, ts, end) for ph, _, ts, end in before]


def test_bad_arguments(base: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="straggler 3"):
        make_job(base, tmp_path / "a", 3, straggler=3)
    with pytest.raises(ValueError, match="2 offsets for 3 ranks"):
        make_job(base, tmp_path / "b", 3, offsets_ns=[0, 1])
    with pytest.raises(ValueError, match=">= 0"):
        make_job(base, tmp_path / "c", 3, jitter_ns=-1)


def test_a_base_without_distributed_info_takes_its_world_from_the_collectives(tmp_path: Path):
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": tiny_base()}))
    job = make_job(path, tmp_path / "job", 3, gzip=False)
    doc = load(job.files[2])
    assert "distributedInfo" not in doc  # not invented: the rank comes from the file name then
    assert {e["args"]["Process Group Ranks"] for e in doc["traceEvents"] if "Group size" in e.get("args", {})} == {
        "[0, 1, 2]"}
    with pytest.raises(ValueError, match="keep_fraction"):
        truncate_rank(job, 0, keep_fraction=1.5)
