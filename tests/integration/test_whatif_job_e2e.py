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


def test_a_job_directory_with_odd_entries_names_each_on_stderr_and_never_blocks(tmp_path: Path):
    import os

    job = tmp_path / "job"
    write_late_rank_job(job, stall_us=300)
    os.mkfifo(job / "rank-7.json")  # opened for reading, it would block for ever
    (job / "rank-8.json").symlink_to("/dev/zero")  # read, it would never end
    (job / "sub").mkdir()
    (job / "linked").symlink_to(job / "sub")
    (job / "loop").symlink_to(job / "loop")
    odd = {"rank-7.json": "a FIFO (named pipe), not opened", "rank-8.json": "a link to a character device",
           "linked": "a link to a directory, not followed", "loop": "cannot be read (Too many levels"}
    whatif, table, data = run_cli_many([("whatif", str(job), "-f", "json"), ("job", str(job)),
                                        ("job", str(job), "-f", "json")], cache=tmp_path / "cache")
    for res in (whatif, table, data):
        assert res.returncode == 0, res.stderr
        lines = res.stderr.splitlines()
        for name, words in odd.items():  # before: left out without a word
            said = [line for line in lines if line.startswith(f"opscope: {job / name}: left out, ")]
            assert len(said) == 1 and words in said[0], (name, lines)
    assert f"{job / 'rank-7.json'}" not in table.stdout  # said once, on stderr, not again among the table's notes
    assert len(json.loads(whatif.stdout)) == 6  # both ranks' 3 steps
