"""The job's dependency graph: ranks on one clock, joined at their collectives (opscope.analyses.job.replay), and
``@rank:N`` changes; values from the hand-drawn late-rank job (support.late_rank)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.late_rank import GEMM_US, TRANSFER_US, late_rank_job, step_us
from support.shared import shared_trace

from opscope.analyses.job.replay import job_graph, job_whatif_table
from opscope.analyses.whatif import parse_change, whatif_table
from opscope.errors import UsageError

US = 1000


def _rows(table):
    return [(r["rank"], r["step"], r["measured_ns"], r["replayed_ns"], r["predicted_ns"]) for r in table.to_pylist()]


def test_the_job_replay_gives_back_every_rank_and_step():
    table, picked, job = job_whatif_table(late_rank_job(), [])
    assert job.joins == 3 and job.contradicted == 0 and job.unjoined == 0
    assert picked == []
    for _, _, measured, replayed, predicted in _rows(table):
        assert measured == replayed == predicted == step_us(300) * US


def test_removing_the_late_ranks_wait_gives_back_the_job_without_it():
    # rank 1's gemm waits 300 us on something the trace does not show, and rank 0 waits for it in the all-reduce
    late = late_rank_job(stall_us=300)
    on_time = late_rank_job(stall_us=0)
    truth, _, _ = job_whatif_table(on_time, [])
    predicted, picked, _ = job_whatif_table(late, [parse_change("idle@rank:1=0")])
    assert picked == [3]
    expected = {(r, s): m for r, s, m, _, _ in _rows(truth)}
    for rank, step, _, _, got in _rows(predicted):
        assert abs(got - expected[(rank, step)]) <= 0.02 * expected[(rank, step)]
        assert got == step_us(0) * US  # by hand: 16 + 100 + 50 + 5 + 9


def test_a_change_on_one_rank_moves_the_other_only_through_the_collective():
    late = late_rank_job(stall_us=300)
    # rank 0's own trace has nothing unexplained: alone, removing its idle changes nothing
    alone, picked = whatif_table(late[0], [parse_change("idle=0")])
    assert picked == [0] and alone["predicted_ns"].to_pylist() == alone["replayed_ns"].to_pylist()
    # in the job, rank 1's change shortens rank 0's steps as much as its own
    joined, _, _ = job_whatif_table(late, [parse_change("idle@rank:1=0")])
    assert {r: p for r, s, _, _, p in _rows(joined) if s == 0} == {0: step_us(0) * US, 1: step_us(0) * US}
    nothing, picked, _ = job_whatif_table(late, [parse_change("idle@rank:0=0")])
    assert picked == [0] and all(m == p for _, _, m, _, p in _rows(nothing))


def test_a_collectives_transfer_is_its_time_after_the_last_arrival():
    table, picked, _ = job_whatif_table(late_rank_job(stall_us=300), [parse_change("comm=0.5")])
    assert picked == [6]  # the three transfers of each rank
    assert {p for *_, p in _rows(table)} == {(step_us(300) - TRANSFER_US / 2) * US}
    # the late rank's gemm made twice as long delays everyone by its 100 us
    slower, _, _ = job_whatif_table(late_rank_job(stall_us=0), [parse_change("kernel:gemm@rank:1=2")])
    assert {p for *_, p in _rows(slower)} == {(step_us(0) + GEMM_US) * US}


def test_four_ranks_join_through_chained_join_nodes():
    job = job_graph(late_rank_job(ranks=4, late=2))
    assert job.joins == 3
    table, _, _ = job_whatif_table(late_rank_job(ranks=4, late=2), [parse_change("idle@rank:2=0")])
    assert {p for *_, p in _rows(table)} == {step_us(0) * US}


@pytest.mark.parametrize(("text", "rank", "shown"), [("idle@rank:1=0", 1, "idle@rank:1=0"),
                                                     ("kernel:a@b@rank:12=0.5", 12, "kernel:a@b@rank:12=0.5"),
                                                     ("comm=2", None, "comm=2")])
def test_changes_name_a_rank(text, rank, shown):
    change = parse_change(text)
    assert change.rank == rank and str(change) == shown


@pytest.mark.parametrize("text", ["idle@rank:x=0", "idle@rank:=0", "idle@rank:-1=0"])
def test_bad_ranks_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_change(text)


def test_a_job_made_from_a_real_rank_replays_exactly(tmp_path: Path):
    from support.jobgen import make_job

    from opscope.ingest import open_trace

    truth = make_job(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"), tmp_path, 3, straggler=1,
                     delay_ns=2_000_000, offsets_ns=[0, 10**9, -5 * 10**8], jitter_ns=100_000, seed=1)
    traces = {rank: open_trace(path, use_cache=False) for rank, path in enumerate(truth.files)}
    table, _, job = job_whatif_table(traces, [])
    assert job.joins == truth.collectives_per_rank and job.contradicted == 0
    assert len(table) == 3 * len(truth.steps)
    for _, _, measured, replayed, _ in _rows(table):
        assert replayed == measured


def test_the_job_replay_is_the_same_in_c_and_by_the_definitions(monkeypatch):
    changes = [parse_change(c) for c in ("idle@rank:1=0", "comm=0.5", "kernel:gemm=2")]
    tables = []
    for native in ("1", "0"):
        monkeypatch.setenv("OPSCOPE_NATIVE", native)
        tables.append([job_whatif_table(late_rank_job(ranks=3), [c])[0].to_pylist() for c in changes])
    assert tables[0] == tables[1]


def _two_rank_trace(comms: list[tuple[float, float]], rank: int):
    """One rank: a step per collective, the host launching it and waiting for it (us)."""
    from support.builder import make_trace, row
    from support.late_rank import NCCL

    rows = []
    for k, (start, end) in enumerate(comms):
        t = 1000 * k
        rows += [row("user_annotation", f"ProfilerStep#{k}", t, 900),
                 row("runtime", "cudaLaunchKernel", t + 10, 5, correlation=k + 1),
                 row("runtime", "cudaStreamSynchronize", t + 20, end + 5 - 20),
                 row("comm", NCCL, t + start, end - start, correlation=k + 1, pid=0, tid=7, stream=7, device=0)]
    return make_trace(rows, metadata={"rank": rank, "world_size": 2})


def test_clocks_that_disagree_keep_the_measured_span_and_the_replay():
    # the two instances disagree on rank 1's clock (ends 0 apart, then rank 1 ending 400 later): whatever offset
    # the alignment settles on, in one instance a member ends before the other arrives there
    traces = {0: _two_rank_trace([(100, 200), (100, 200)], 0), 1: _two_rank_trace([(150, 200), (500, 600)], 1)}
    table, _, job = job_whatif_table(traces, [])
    assert job.joins == 2 and job.contradicted >= 1
    assert all(m == r for _, _, m, r, _ in _rows(table))


def test_orders_that_contradict_each_other_drop_a_join_and_keep_the_replay(monkeypatch):
    import opscope.analyses.job.replay as job_replay

    # two collectives each rank makes on one stream, matched crosswise (as a wrong match would): rank 0's first is
    # rank 1's second; no order of the join nodes can serve both, so one join is dropped
    traces = {0: _two_rank_trace([(100, 200), (100, 200)], 0), 1: _two_rank_trace([(100, 200), (100, 200)], 1)}
    real = job_replay._joins

    def crosswise(traces, graphs):
        joins, notes, offsets = real(traces, graphs)
        first, second = joins
        first.members[1], second.members[1] = second.members[1], first.members[1]
        return joins, notes, offsets

    monkeypatch.setattr(job_replay, "_joins", crosswise)
    job = job_graph(traces)
    assert job.unjoined == 1 and job.joins == 1
    assert any("left unjoined" in note for note in job.notes)
