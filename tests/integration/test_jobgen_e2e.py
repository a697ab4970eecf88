"""support.jobgen on the real Kineto rank trace (HTA's nccl_parser_config: 3 ProfilerSteps, 21 NCCL kernels with
collective args): the written job read back from the files, and opened by opscope."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from support.cli import run_cli_many
from support.jobgen import make_job
from support.shared import raw_events, shared_trace

BASE = "hta/nccl_parser_config/nccl_data.json.gz"
DELAY = 2_000_000  # ns per step for the straggler


def ns(value) -> int:
    return int(Decimal(value) * 1000)


def nccl(ev: dict) -> bool:
    return ev.get("cat") == "kernel" and "nccl" in ev["name"].lower()


class Rank:
    """One written rank, read back with exact decimals, its clock offset taken out (ns)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
        events = self.doc["traceEvents"]
        self.comms = sorted((ns(e["ts"]) - offset, ns(e["ts"]) + ns(e["dur"]) - offset)
                            for e in events if nccl(e))
        self.steps = {e["name"]: (ns(e["ts"]) - offset, ns(e["dur"])) for e in events
                      if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"}
        self.kernels = sum(1 for e in events if e.get("cat") == "kernel")
        self.first_ts = min(ns(e["ts"]) for e in events if e["ph"] != "M") - offset
        self.events = len(events)


@pytest.fixture(scope="module")
def base() -> dict:
    path = shared_trace(BASE)
    events = raw_events(path)
    return {
        "path": path,
        "comms": sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events if nccl(e)),
        "steps": {e["name"]: (ns(e["ts"]), ns(e["dur"])) for e in events
                  if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"},
        "kernels": sum(1 for e in events if e.get("cat") == "kernel"),
        "first_ts": min(ns(e["ts"]) for e in events if e["ph"] != "M"),
        "events": len(events),
    }


def test_a_straggler_without_jitter_shows_exactly(base: dict, tmp_path: Path):
    offsets = [0, 1_500_000, -730_001, 12_345_678, 999, -5, 40_000_000, 7]
    job = make_job(base["path"], tmp_path, 8, straggler=5, delay_ns=DELAY, offsets_ns=offsets)
    assert job.steps == [4, 5, 6] and job.collectives_per_rank == len(base["comms"]) == 21
    assert job.delay_per_step_ns == {4: DELAY, 5: DELAY, 6: DELAY}
    ranks = [Rank(p, offsets[r]) for r, p in enumerate(job.files)]
    for r, rank in enumerate(ranks):
        assert rank.doc["distributedInfo"]["rank"] == r and rank.doc["distributedInfo"]["world_size"] == 8
        assert rank.events == base["events"] and rank.kernels == base["kernels"]
        # the first event precedes every insertion: it moved by the rank's clock offset alone
        assert rank.first_ts == base["first_ts"]
        # NCCL-like: the i-th collective ends at the same time on every rank
        assert [end for _, end in rank.comms] == [end for _, end in ranks[0].comms]
        # every rank's step is the straggler's delay longer: it computes longer, the others wait that long
        assert {name: dur for name, (_, dur) in rank.steps.items()} == {
            name: dur + DELAY for name, (_, dur) in base["steps"].items()}
    for name, (start, _) in base["steps"].items():
        # the straggler reaches the step's first collective DELAY later than every other rank
        first = next(i for i, (ts, _) in enumerate(base["comms"]) if ts >= start)
        arrival = [rank.comms[first][0] - rank.steps[name][0] for rank in ranks]
        assert arrival[5] - base["comms"][first][0] + start == DELAY
        assert all(a == arrival[5] - DELAY for r, a in enumerate(arrival) if r != 5)


def test_jitter_and_end_jitter_stay_within_their_bounds(base: dict, tmp_path: Path):
    offsets = [r * 250_003 for r in range(6)]
    job = make_job(base["path"], tmp_path, 6, straggler=2, delay_ns=DELAY, offsets_ns=offsets, jitter_ns=20_000,
                   end_jitter_ns=2_000, seed=3)
    ranks = [Rank(p, offsets[r]) for r, p in enumerate(job.files)]
    for i in range(21):
        ends = [rank.comms[i][1] for rank in ranks]
        assert max(ends) - min(ends) <= 2_000
    for step in job.steps:
        assert DELAY - 20_000 <= job.delay_per_step_ns[step] <= DELAY + 20_000
        # every rank's step grows by about the straggler's delay: jitter on either side and the collectives' end
        # jitter are all the difference
        durs = [rank.steps[f"ProfilerStep#{step}"][1] - base["steps"][f"ProfilerStep#{step}"][1] for rank in ranks]
        assert all(abs(d - DELAY) <= 2 * 20_000 + 21 * 2_000 for d in durs), durs
    assert all(rank.kernels == base["kernels"] and len(rank.steps) == 3 for rank in ranks)


def test_opscope_reads_every_rank(base: dict, tmp_path: Path):
    job = make_job(base["path"], tmp_path / "job", 3, straggler=1, delay_ns=DELAY, offsets_ns=[0, 10_000, 20_000],
                   jitter_ns=5_000, end_jitter_ns=1_000)
    results = run_cli_many([("summary", str(p), "--format", "json") for p in [base["path"], *job.files]],
                           cache=tmp_path / "cache")
    for res in results:
        assert res.returncode == 0, res.stderr
    base_rows, *rank_rows = ({(row["section"], row["metric"]): row["value"] for row in json.loads(res.stdout)}
                             for res in results)
    for rows in rank_rows:
        assert rows[("overview", "steps")] == 3
        assert rows[("overview", "events")] == base_rows[("overview", "events")]
        # the straggler's 2 ms per step show in every rank's steps (the others wait for it)
        assert rows[("overview", "step_mean_ns")] - base_rows[("overview", "step_mean_ns")] == pytest.approx(
            DELAY, abs=5_000 + 21 * 1_000)
