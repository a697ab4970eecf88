"""`opscope job` and the commands that take a job, on jobs made here from a real rank trace (tests/support/jobgen.py:
a known straggler, jitter, NCCL-like collective ends, known clock offsets) and on the real two-rank set in
../shared/traces; on the local pool and on a real local Dask cluster."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
from support.cli import run_cli
from support.jobgen import drop_rank, make_job, other_world, shift_steps, truncate_rank
from support.shared import shared_trace

BASE = "hta/nccl_parser_config/nccl_data.json.gz"
RANKS = 8
STRAGGLER = 5
DELAY_NS = 4_000_000  # 1.8% of the base's ~225 ms steps


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """One cache for the tests that only read the job (the first run fills it)."""
    return tmp_path_factory.mktemp("job-cache")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    rng = random.Random(18)
    offsets = [0] + [rng.randint(-50_000_000, 50_000_000) for _ in range(RANKS - 1)]
    out = tmp_path_factory.mktemp("job")
    return make_job(shared_trace(BASE), out / "ranks", RANKS, straggler=STRAGGLER, delay_ns=DELAY_NS,
                    offsets_ns=offsets, jitter_ns=20_000, end_jitter_ns=2_000, seed=18)


def job_json(directory: Path, cache: Path, *extra: str) -> tuple[dict, str]:
    res = run_cli("job", str(directory), "--format", "json", *extra, cache=cache)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr


def test_names_the_straggler_its_delay_and_the_clock_offsets(job, warm):
    doc, err = job_json(job.files[0].parent, warm)
    assert doc["job"]["stragglers"] == [STRAGGLER]
    assert doc["job"]["compared_steps"] == job.steps and doc["job"]["clocks_aligned"]
    ranks = {r["rank"]: r for r in doc["ranks"]}
    truth = statistics.fmean(job.delay_per_step_ns[s] for s in job.steps)
    assert abs(ranks[STRAGGLER]["delay_ns"] - truth) <= 0.05 * truth
    for r in range(RANKS):
        expected = job.offsets_ns[r] - job.offsets_ns[0]
        assert abs(ranks[r]["clock_offset_ns"] - expected) <= 5_000, (r, ranks[r]["clock_offset_ns"], expected)
        assert ranks[r]["offset_uncertainty_ns"] <= 5_000
    # every step's slowest rank is the straggler, by about its delay in that step
    for row in doc["steps"]:
        assert row["slowest_rank"] == STRAGGLER
        want = job.delay_per_step_ns[row["step"]]
        assert abs(row["by_ns"] - want) <= 0.05 * want
    # why: the stretched kernel comes first, with the delay as its extra time per step
    why = [w for w in doc["why"] if w["category"] == "kernel"]
    assert abs(why[0]["extra_ns"] - DELAY_NS) <= 0.05 * DELAY_NS
    # the other ranks wait for it in the collectives; it hardly waits
    others = [ranks[r]["wait_ns"] for r in ranks if r != STRAGGLER]
    assert min(others) > 10 * ranks[STRAGGLER]["wait_ns"]
    assert f"rank {STRAGGLER} is" in err
    # collectives: 21 matched instances, by process group; allreduce and broadcast summaries
    assert len(doc["instances"]) == job.collectives_per_rank
    assert {c["collective"] for c in doc["collectives"]} == {"allreduce", "broadcast"}
    assert all(i["ranks"] == RANKS for i in doc["instances"])


def test_the_local_pool_and_a_dask_cluster_give_the_same_answers(job, tmp_path):
    pytest.importorskip("distributed")
    pool, _ = job_json(job.files[0].parent, tmp_path / "cache", "--workers", "2")
    dask, _ = job_json(job.files[0].parent, tmp_path / "cache2", "--dask", "local:2")
    assert pool["job"]["executor"].startswith("local pool") and dask["job"]["executor"].startswith("Dask")
    for table in ("ranks", "steps", "rank_steps", "why", "collectives", "instances", "clocks"):
        assert pool[table] == dask[table], table
    assert pool["resources"]["combining_peak_rss_bytes"] > 0 and dask["resources"]["worker_peak_rss_bytes"] > 0


def test_no_align_leaves_the_clocks_as_they_are(job, warm):
    doc, _ = job_json(job.files[0].parent, warm, "--no-align")
    assert not doc["job"]["clocks_aligned"]
    assert {r["clock_offset_ns"] for r in doc["ranks"]} <= {0, None}
    assert any("--no-align" in n for n in doc["notes"])


def test_csv_writes_the_chosen_table(job, warm):
    res = run_cli("job", str(job.files[0].parent), "--format", "csv", "--table", "collectives", cache=warm)
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[0].split(",")
    assert header[:3] == ["collective", "size_bucket", "calls"]
    bad = run_cli("job", str(job.files[0].parent), "--table", "nope", cache=warm)
    assert bad.returncode == 2 and "--table must be one of" in bad.stderr


def test_faults_are_named_and_the_rest_of_the_job_is_analysed(tmp_path):
    truth = make_job(shared_trace(BASE), tmp_path / "ranks", 8, straggler=3, delay_ns=DELAY_NS,
                     offsets_ns=[1_000_000 * r for r in range(8)], jitter_ns=10_000, seed=3)
    truncated = truncate_rank(truth, 1, keep_fraction=0.5)
    dropped = drop_rank(truth, 6)
    foreign = other_world(truth, 4, 16)
    shift_steps(truth, 7, 10)
    (tmp_path / "ranks" / "notes.txt").write_text("not a trace\n")
    doc, err = job_json(tmp_path / "ranks", tmp_path / "cache")
    lines = err.splitlines()
    assert any(str(truncated) in line and "truncated" in line for line in lines)
    assert any(str(foreign) in line and "world size 16" in line and "left out" in line for line in lines)
    assert any("rank 7 has steps 14-16, most ranks 4-6: it shares none" in line for line in lines)
    assert any("notes.txt" in line and "left out" in line for line in lines)
    assert any("2 of the job's 8 ranks have no trace here (ranks 4, 6)" in line for line in lines), dropped
    analysed = {r["rank"] for r in doc["ranks"]}
    assert 4 not in analysed and 6 not in analysed and {0, 2, 3, 5} <= analysed
    assert doc["job"]["stragglers"] == [3]


def test_a_worker_that_dies_is_named_and_the_rest_goes_on(tmp_path):
    from support.scale import summarize_unless_rank_2

    from opscope.scale.job import run_job

    truth = make_job(shared_trace(BASE), tmp_path / "ranks", 4, straggler=1, delay_ns=DELAY_NS, seed=4)
    run = run_job([tmp_path / "ranks"], workers=2, cache_dir=tmp_path / "cache", task=summarize_unless_rank_2)
    assert sorted(run.summaries) == [0, 1, 3]
    died = [p for p in run.problems if str(truth.files[2]) in p]
    assert len(died) == 1 and "died" in died[0] and "left out" in died[0]
    assert run.view is not None and run.view.stragglers == [1]


def test_a_job_without_collectives_says_alignment_was_not_possible(tmp_path):
    from support.tracefiles import write_trace, x

    (tmp_path / "ranks").mkdir()
    for rank, extra in ((0, 0), (1, 0), (2, 30)):
        events = [x(f"ProfilerStep#{s}", 1000 * s, 100 + extra, cat="user_annotation") for s in (1, 2)]
        events += [x("aten::mm", 1000 * s + 10, 50 + extra) for s in (1, 2)]
        write_trace(tmp_path / "ranks" / f"rank-{rank}.json", events,
                    header={"distributedInfo": {"rank": rank, "world_size": 3}})
    doc, _ = job_json(tmp_path / "ranks", tmp_path / "cache")
    assert not doc["job"]["clocks_aligned"]
    assert any("alignment was not possible" in n for n in doc["notes"])
    assert doc["job"]["delay_from"] == "step time"
    # step times 100, 100, 130 us: rank 2 is 30 us over the others' median
    assert {r["rank"]: r["delay_ns"] for r in doc["ranks"]} == {0: -15_000, 1: -15_000, 2: 30_000}
    assert doc["job"]["stragglers"] == [2]


def test_the_real_two_rank_set(tmp_path):
    a = shared_trace("hta/trace_filter/sampled_rank-0.json.gz")
    b = shared_trace("hta/trace_filter/sampled_rank-1.json.gz")
    doc, err = job_json(Path(str(a).replace("sampled_rank-0", "sampled_rank-*")), tmp_path / "cache")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["job"]["world_size"] == 128
    assert "126 of the job's 128 ranks have no trace here" in err
    assert doc["job"]["compared_steps"] == [551, 552]
    # every matched instance is on both ranks, matched by order (the traces record no process group)
    assert doc["instances"] and all(i["ranks"] == 2 for i in doc["instances"])
    assert any("matched across ranks by order" in n for n in doc["notes"])
    # the step times are the files' own ProfilerStep durations
    steps = {(r["rank"], r["step"]): r["step_ns"] for r in doc["rank_steps"]}
    assert steps[(0, 551)] == 607_312_000 and steps[(1, 552)] == 630_639_000
    assert b.exists()


def test_table_commands_and_query_take_the_job(job, warm):
    directory = job.files[0].parent
    cache = warm
    per_rank = run_cli("kernels", str(directory), "--format", "json", "-n", "3", cache=cache)
    assert per_rank.returncode == 0, per_rank.stderr
    rows = json.loads(per_rank.stdout)
    assert sorted({r["rank"] for r in rows}) == list(range(RANKS))
    for rank in (0, STRAGGLER):
        alone = json.loads(run_cli("kernels", str(job.files[rank]), "--format", "json", "-n", "3",
                                   cache=cache).stdout)
        assert [{k: v for k, v in r.items() if k not in ("rank", "file")} for r in rows if r["rank"] == rank] == alone
    sql = "select rank, count(*) as n, sum(dur_ns) as t from events where kind = 'comm' group by rank order by rank"
    query = run_cli("query", str(directory), sql, "--format", "json", cache=cache)
    assert query.returncode == 0, query.stderr
    rows = {r["rank"]: r for r in json.loads(query.stdout)}
    assert sorted(rows) == list(range(RANKS))
    for row in (rows[0], rows[STRAGGLER]):
        alone = json.loads(run_cli("query", str(job.files[row["rank"]]), sql.replace("rank, ", "").replace(
            " group by rank order by rank", ""), "--format", "json", cache=cache).stdout)[0]
        assert (row["n"], row["t"]) == (alone["n"], alone["t"])
    one_trace_only = run_cli("repro", str(directory), cache=cache)
    assert one_trace_only.returncode == 2


def test_advise_and_report_take_the_job(job, warm, tmp_path):
    cache = warm
    advice = run_cli("advise", str(job.files[0].parent), "--format", "json", "--rules", "communication", cache=cache)
    assert advice.returncode == 0, advice.stderr
    findings = json.loads(advice.stdout)
    titles = [f["title"] for f in findings]
    assert any(t.startswith(f"Straggler: rank {STRAGGLER} reaches the collectives") for t in titles), titles
    # rank 0's overlap finding: its hideable collective time less the time it waited for the straggler
    doc, _ = job_json(job.files[0].parent, cache)
    wait = next(r["wait_ns"] for r in doc["ranks"] if r["rank"] == 0)
    overlap = [f for f in findings if f["title"].startswith("Communication not overlapped")]
    assert overlap, titles
    assert overlap[0]["saving_ns"] == overlap[0]["evidence"][0]["hideable_ns"] - wait
    pytest.importorskip("altair")
    out = tmp_path / "job.html"
    res = run_cli("report", str(job.files[0].parent), "-o", str(out), cache=cache)
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "job_delay_map" in html and "job_ranks" in html
