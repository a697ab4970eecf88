"""Ranks against each other (analyses/job/ranks.py) and the job's inputs (scale/discover.py, scale/dataset.py), on
summaries and files built here; every expected value is worked out by hand in the test."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from opscope.analyses.job import ranks as rv
from opscope.analyses.job.rank import IDLE_SCHEMA, STEPS_SCHEMA, WORK_SCHEMA, RankSummary
from opscope.errors import UsageError


def summary(rank: int, steps: dict[int, int], work: list[tuple[int, str, str, int]] = (),
            idle: dict[str, int] | None = None) -> RankSummary:
    """A rank whose step N lasts steps[N] ns (compute 60%, comm 30% of it)."""
    t = pa.table({"step": list(steps), "ts_ns": [1000 * s for s in steps], "dur_ns": list(steps.values()),
                  "compute_ns": [d * 6 // 10 for d in steps.values()],
                  "comm_ns": [d * 3 // 10 for d in steps.values()]},
                 schema=STEPS_SCHEMA)
    w = pa.Table.from_pylist([{"step": s, "category": c, "name": n, "ns": ns} for s, c, n, ns in work],
                             schema=WORK_SCHEMA)
    i = pa.Table.from_pylist([{"cause": c, "idle_ns": v} for c, v in (idle or {}).items()], schema=IDLE_SCHEMA)
    return RankSummary(path=f"rank-{rank}.json", rank=rank, rank_source="distributed info", world_size=4, steps=t,
                       calls=pa.table({}), work=w, idle=i)


def per_rank_rows(rows: list[tuple[int, int, int, int, int]]) -> pa.Table:
    """(instance, rank, step, wait_ns, late_ns) rows of the collectives' per-rank timing."""
    return pa.Table.from_pylist([{"instance": i, "rank": r, "step": s, "wait_ns": w, "late_ns": d}
                                 for i, r, s, w, d in rows])


def test_compared_steps_are_those_most_ranks_have_and_a_shifted_rank_is_named():
    ranks = {0: summary(0, {4: 10, 5: 10, 6: 10}), 1: summary(1, {4: 10, 5: 10, 6: 10}),
             2: summary(2, {5: 10, 6: 10, 7: 10}), 3: summary(3, {})}
    steps, notes = rv.compared_steps(ranks)
    assert steps == [4, 5, 6]  # the range most ranks have
    assert any(n.startswith("rank 2 has steps 5-7, most ranks 4-6: it is compared on steps 5-6") for n in notes)
    assert any("rank(s) 3 have no steps" in n for n in notes)


def test_a_rank_without_any_of_the_compared_steps_is_named():
    ranks = {0: summary(0, {4: 10, 5: 10}), 1: summary(1, {4: 10, 5: 10}), 2: summary(2, {14: 10, 15: 10})}
    steps, notes = rv.compared_steps(ranks)
    assert steps == [4, 5]
    assert notes == ["rank 2 has steps 14-15, most ranks 4-5: it shares none of them and is left out of the step "
                     "figures"]


def test_delay_is_the_summed_lateness_per_step_and_the_straggler_is_over_1_percent():
    # 4 ranks, steps 1 and 2 of 100 us; rank 3 is 8 us late at each of the step's two collectives (16 us per step);
    # rank 1 is 0.5 us late once per step (jitter, under 1% of the step)
    ranks = {r: summary(r, {1: 100_000, 2: 100_000}) for r in range(4)}
    rows = []
    for step in (1, 2):
        for k in range(2):
            inst = 2 * step + k
            for r in range(4):
                late = 8_000 if r == 3 else (500 if r == 1 and k == 0 else 0)
                rows.append((inst, r, step, 0 if r == 3 else 8_000, late))
    per_step = rv.rank_steps(ranks, per_rank_rows(rows), [1, 2])
    got, measured = rv.rank_rows(ranks, per_step, per_rank_rows(rows), None)
    assert measured == "collectives"
    delays = {r["rank"]: r["delay_ns"] for r in got}
    assert delays == {0: 0, 1: 500, 2: 0, 3: 16_000}
    assert [r["rank"] for r in got if r["straggler"]] == [3]  # 16 us >= 1% of 100 us; 0.5 us is not
    assert {r["rank"]: r["wait_ns"] for r in got} == {0: 16_000, 1: 16_000, 2: 16_000, 3: 0}
    slowest = rv.slowest_per_step(per_step).to_pylist()
    assert [(s["step"], s["slowest_rank"], s["by_ns"]) for s in slowest] == [(1, 3, 16_000), (2, 3, 16_000)]


def test_a_straggler_stands_apart_from_the_ranks_jitter():
    # 8 ranks of 100 us steps; the delays of ranks 0-6 jitter from 0 to 3 us (all over 1% of the step), rank 7 is
    # 20 us late: only rank 7 is more than 5 robust standard deviations above the others
    ranks = {r: summary(r, {1: 100_000}) for r in range(8)}
    lates = [0, 1_000, 2_000, 3_000, 1_500, 2_500, 500, 20_000]
    rows = per_rank_rows([(0, r, 1, 0, late) for r, late in enumerate(lates)])
    got, _ = rv.rank_rows(ranks, rv.rank_steps(ranks, rows, [1]), rows, None)
    assert [r["rank"] for r in got if r["straggler"]] == [7]
    # rank 3 (3 us): the others' median is 1.5 us, MAD 1 us: bound 1.5 + 5 * 1.4826 * 1 = 8.9 us > 3 us
    assert not got[3]["straggler"]


def test_without_collectives_the_delay_is_the_step_time_over_the_other_ranks_median():
    ranks = {0: summary(0, {1: 100_000}), 1: summary(1, {1: 102_000}), 2: summary(2, {1: 130_000})}
    per_step = rv.rank_steps(ranks, per_rank_rows([]), [1])
    got, measured = rv.rank_rows(ranks, per_step, per_rank_rows([]), None)
    assert measured == "step time"
    # leave-one-out medians: rank 0 -> median(102k, 130k) = 116k; rank 2 -> median(100k, 102k) = 101k
    assert {r["rank"]: r["delay_ns"] for r in got} == {0: -16_000, 1: -13_000, 2: 29_000}
    assert [r["rank"] for r in got if r["straggler"]] == [2]


def test_why_names_the_work_a_straggler_does_beyond_the_median_rank():
    work = lambda extra: [(1, "kernel", "gemm", 50_000 + extra), (1, "kernel", "relu", 5_000),  # noqa: E731
                          (1, "cpu_op", "aten::mm", 3_000)]
    ranks = {0: summary(0, {1: 100_000}, work(0), {"host_wait": 2_000}),
             1: summary(1, {1: 100_000}, work(1_000), {"host_wait": 4_000}),
             2: summary(2, {1: 100_000}, work(20_000), {"host_wait": 10_000, "sync": 0})}
    rows = rv.why(ranks, [2], [1]).to_pylist()
    # gemm: 70 us against the median of 50 and 51 us = 50.5 us; idle host_wait: 10 us against median(2, 4) = 3 us
    assert rows[0] == {"rank": 2, "category": "kernel", "name": "gemm", "rank_ns": 70_000, "median_ns": 50_500,
                       "extra_ns": 19_500}
    assert rows[1] == {"rank": 2, "category": "device idle", "name": "host_wait", "rank_ns": 10_000,
                       "median_ns": 3_000, "extra_ns": 7_000}
    assert len(rows) == 2  # relu and mm are no larger than the median's


def test_span_text():
    assert rv.span_text([9, 4, 5, 6]) == "4-6, 9"
    assert rv.span_text([]) == ""


# ---------------------------------------------------------------- inputs

def test_files_are_in_natural_order(tmp_path):
    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.scale.discover import job_inputs

    files = [write_trace(tmp_path / f"rank-{r}.json", small_gpu_trace()) for r in (10, 2, 1)]
    assert job_inputs([tmp_path]).files == [files[2], files[1], files[0]]


def test_rank_from_name():
    from opscope.scale.discover import rank_from_name

    assert rank_from_name(Path("rank-3.json.gz")) == 3
    assert rank_from_name(Path("sampled_rank-1.json.gz")) == 1
    assert rank_from_name(Path("worker12.pt.trace.json")) == 12
    assert rank_from_name(Path("host_7.json")) == 7
    assert rank_from_name(Path("trace.json")) is None
    assert rank_from_name(Path("a1_b2.json")) is None  # two numbers: no guess


def test_job_inputs_keep_traces_and_name_what_is_left_out(tmp_path):
    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.scale.discover import is_job_spec, job_inputs

    job = tmp_path / "job"
    (job / "node1").mkdir(parents=True)
    a = write_trace(job / "rank-0.json", small_gpu_trace())
    b = write_trace(job / "node1" / "rank-1.json.gz", small_gpu_trace(), gz=True)
    (job / "notes.txt").write_text("not a trace")
    (job / ".hidden.json").write_text("{}")
    found = job_inputs([job])
    assert sorted(found.files) == sorted([a, b])
    assert len(found.skipped) == 1 and found.skipped[0].startswith(f"{job / 'notes.txt'}: left out")
    assert is_job_spec(job) and is_job_spec(str(job / "rank-*.json")) and not is_job_spec(a)
    assert job_inputs([str(job / "*" / "rank-*.json.gz")]).files == [b]
    with pytest.raises(UsageError, match="no file matches"):
        job_inputs([str(job / "nothing-*.json")])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="is a directory with no trace files in it"):
        job_inputs([empty])


def _odd_entries(job: Path) -> dict[str, str]:
    """A FIFO, a link to /dev/zero, a folder and a link to one, a dangling link, a link loop and a file that cannot
    be read by anyone but root (root reads it: it is then a file that is no trace) beside two ranks; what each
    entry's line must say."""
    import os

    os.mkfifo(job / "rank-7.json")
    (job / "rank-8.json").symlink_to("/dev/zero")
    (job / "sub").mkdir()
    (job / "linked").symlink_to(job / "sub")
    (job / "gone.json").symlink_to(job / "nowhere.json")
    (job / "loop-a").symlink_to(job / "loop-b")
    (job / "loop-b").symlink_to(job / "loop-a")
    locked = job / "rank-9.json"
    locked.write_text("not a trace")
    locked.chmod(0)
    unreadable = "cannot be read" if os.geteuid() != 0 else "is not a trace format"
    return {"rank-7.json": "a FIFO (named pipe), not opened", "rank-8.json": "a link to a character device",
            "linked": "a link to a directory, not followed", "gone.json": "cannot be read (No such file",
            "loop-a": "cannot be read (Too many levels of symbolic links)",
            "loop-b": "cannot be read (Too many levels of symbolic links)", "rank-9.json": unreadable}


def test_job_inputs_name_every_entry_they_leave_out_and_open_no_fifo(tmp_path):
    from support.tracefiles import small_gpu_trace, write_trace

    from opscope.scale.discover import job_inputs

    job = tmp_path / "job"
    job.mkdir()
    ranks = [write_trace(job / f"rank-{r}.json", small_gpu_trace()) for r in (0, 1)]
    said = _odd_entries(job)
    # before: the FIFO, the device, the links and the folder were dropped without a word
    for spec, extra in ((job, {}), (str(job / "*"), {"sub": "a directory"})):
        found = job_inputs([spec])  # a FIFO opened for reading would block here for ever
        assert found.files == ranks
        expected = {**said, **extra}
        assert len(found.skipped) == len(expected), found.skipped
        for name, words in expected.items():
            line = next(line for line in found.skipped if line.startswith(f"{job / name}: left out, "))
            assert words in line, line
    # a FIFO given by name is named too, never opened (no "no such file")
    with pytest.raises(UsageError, match=r"rank-7.json: no trace files found: a FIFO \(named pipe\), not opened"):
        job_inputs([job / "rank-7.json"])


def test_a_recording_directory_is_not_a_job(tmp_path):
    from opscope.scale.discover import is_job_spec

    (tmp_path / "run.json").write_text("{}")
    assert not is_job_spec(tmp_path)


def test_the_dataset_links_each_rank_table_under_its_rank(tmp_path):
    import duckdb

    from opscope.scale.dataset import dataset_tables, job_dataset
    from opscope.store.files import write_table

    entries = {}
    for rank, n in ((0, 2), (3, 5)):
        entry = tmp_path / f"entry{rank}"
        entry.mkdir()
        write_table(pa.table({"dur_ns": list(range(n))}), entry / "events.arrow")
        entries[rank] = str(entry)
    directory = job_dataset(entries, tmp_path / "cache")
    assert job_dataset(entries, tmp_path / "cache") == directory  # made once
    assert (directory / "events" / "rank=3" / "part.arrow").stat().st_ino == (tmp_path / "entry3" /
                                                                              "events.arrow").stat().st_ino
    con = duckdb.connect()
    con.register("events", dataset_tables(directory)["events"])
    assert con.sql("select rank, count(*), sum(dur_ns) from events group by 1 order by 1").fetchall() == \
        [(0, 2, 1), (3, 5, 10)]
