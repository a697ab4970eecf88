"""`opscope whatif JOB`: the late-rank job written as Kineto files (support.late_rank), read by the command as a job,
its ranks joined at their collectives; the prediction without the late rank's wait equals the job written without
it."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_cli_many
from support.late_rank import step_us, write_late_rank_job

US = 1000


def test_whatif_on_a_job_directory(tmp_path: Path):
    late, on_time = tmp_path / "late", tmp_path / "on_time"
    write_late_rank_job(late, stall_us=300)
    write_late_rank_job(on_time, stall_us=0)
    predicted, truth, single = run_cli_many([
        ("whatif", str(late), "-c", "idle@rank:1=0", "-f", "json"),
        ("whatif", str(on_time), "-f", "json"),
        ("whatif", str(late / "rank-0.json"), "-c", "idle=0", "-f", "json"),
    ], cache=tmp_path / "cache")
    for res in (predicted, truth, single):
        assert res.returncode == 0, res.stderr
    rows = json.loads(predicted.stdout)
    measured = {(r["rank"], r["step"]): r["measured_ns"] for r in json.loads(truth.stdout)}
    assert len(rows) == len(measured) == 6
    for r in rows:
        assert r["replayed_ns"] == r["measured_ns"] == step_us(300) * US
        assert abs(r["predicted_ns"] - measured[(r["rank"], r["step"])]) <= 0.02 * measured[(r["rank"], r["step"])]
    assert "3 collective instance(s) joined" in predicted.stderr
    # rank 0 alone: its own trace shows no wait to remove
    assert {r["predicted_ns"] for r in json.loads(single.stdout)} == {step_us(300) * US}
    assert {r["rank"] for r in json.loads(single.stdout)} == {0}
