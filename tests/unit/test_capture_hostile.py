"""Capture writes its files safely in a directory others may have touched, claims its
output directory atomically, publishes only complete traces and finishes the run.json of a program that
died before it could."""

from __future__ import annotations

import gzip
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from opscope.analyses.numerics import DUMP_NAME, SCHEMA
from opscope.analyses.recording import recording_traces, saved_traces
from opscope.capture.finalise import finalised
from opscope.capture.numerics import fresh_dump_dir, save_dump
from opscope.capture.outdir import claim_output_dir, publish
from opscope.capture.runner import write_json_atomic
from opscope.capture.tracefile import save_trace
from opscope.errors import UsageError


def test_run_json_never_follows_a_planted_symlink(tmp_path):
    out = tmp_path / "rec"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / ".run.json.tmp").symlink_to(victim)  # the old fixed temporary name
    write_json_atomic(out / "run.json", {"status": "ok"})
    assert victim.read_text() == "precious"
    assert not (out / "run.json").is_symlink()
    assert json.loads((out / "run.json").read_text()) == {"status": "ok"}
    # only run.json and the planted link remain: no temporary file left behind
    assert sorted(p.name for p in out.iterdir()) == [".run.json.tmp", "run.json"]


# -- the output directory is claimed atomically ----------------------------------------------------------

def test_claim_creates_a_new_directory_with_its_run_json(tmp_path):
    directory, renamed = claim_output_dir(tmp_path / "runs" / "rec", {"status": "starting"})
    assert (directory, renamed) == (tmp_path / "runs" / "rec", False)
    assert json.loads((directory / "run.json").read_text()) == {"status": "starting"}


def test_claim_moves_on_from_a_directory_that_holds_anything(tmp_path):
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "notes.txt").write_text("theirs")
    (tmp_path / "rec-1").write_text("a file, not a directory")
    directory, renamed = claim_output_dir(tmp_path / "rec")
    assert (directory, renamed) == (tmp_path / "rec-2", True)
    assert (tmp_path / "rec" / "notes.txt").read_text() == "theirs"
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["notes.txt"]


def test_claim_takes_an_existing_empty_directory_of_ours(tmp_path):
    (tmp_path / "rec").mkdir()
    assert claim_output_dir(tmp_path / "rec") == (tmp_path / "rec", False)
    # claimed now: a second claim of the same name goes elsewhere
    assert claim_output_dir(tmp_path / "rec") == (tmp_path / "rec-1", True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a directory away needs root")
def test_claim_never_takes_an_empty_directory_someone_else_owns(tmp_path):
    (tmp_path / "rec").mkdir()
    os.chown(tmp_path / "rec", 4242, 4242)
    assert claim_output_dir(tmp_path / "rec") == (tmp_path / "rec-1", True)
    assert list((tmp_path / "rec").iterdir()) == []


def test_claims_racing_for_one_name_each_get_their_own_directory(tmp_path):
    # os.mkdir and O_EXCL decide in one system call: 16 threads asking at once get 16 directories.
    (tmp_path / "rec").mkdir()  # an empty directory too, the case where run.json's O_EXCL decides
    with ThreadPoolExecutor(16) as pool:
        claimed = list(pool.map(lambda _: claim_output_dir(tmp_path / "rec")[0], range(16)))
    assert sorted(claimed) == sorted({tmp_path / "rec", *(tmp_path / f"rec-{n}" for n in range(1, 16))})


@pytest.mark.parametrize("given", [".", "/"])
def test_claim_refuses_a_nameless_directory_that_is_not_empty(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").write_text("x")
    with pytest.raises(UsageError, match=rf"^{re.escape(given)}: is an existing directory that is not empty"):
        claim_output_dir(Path(given))


def test_claim_names_a_file_in_the_way(tmp_path):
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(UsageError, match=r"afile/sub/rec: cannot create the output directory .*afile is not a dir"):
        claim_output_dir(tmp_path / "afile" / "sub" / "rec")
    assert (tmp_path / "afile").read_text() == "keep"


# -- files are published complete, under a free name, never through a planted link ---------------------

def test_publish_never_replaces_a_file_or_follows_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "trace-1.json").symlink_to(victim)
    written = tmp_path / "staged"
    written.write_text("new trace")
    with pytest.raises(FileExistsError):
        publish(written, tmp_path / "trace-1.json")
    assert victim.read_text() == "precious" and written.read_text() == "new trace"
    publish(written, tmp_path / "trace-2.json")
    assert (tmp_path / "trace-2.json").read_text() == "new trace" and not written.exists()


class FakeProfiler:
    """What save_trace needs of torch.profiler.profile: export_chrome_trace(path), writing ``text`` (None:
    writes nothing, as torch does when its write fails)."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def export_chrome_trace(self, path: str) -> None:
        if self.text is not None:
            Path(path).write_text(self.text)


def test_save_trace_compresses_into_the_first_free_name(tmp_path):
    (tmp_path / "trace-1.pt.trace.json.gz").write_text("an earlier trace")
    names = (f"trace-{n}.pt.trace.json.gz" for n in range(1, 10))
    path = save_trace(FakeProfiler('{"traceEvents": []}\n'), tmp_path, names)
    assert path == tmp_path / "trace-2.pt.trace.json.gz"
    assert gzip.decompress(path.read_bytes()) == b'{"traceEvents": []}\n'
    assert (tmp_path / "trace-1.pt.trace.json.gz").read_text() == "an earlier trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace-1.pt.trace.json.gz", "trace-2.pt.trace.json.gz"]


@pytest.mark.parametrize("text", [None, '{"traceEvents": [{"name": "aten::mm", "ph": "X"'])
def test_save_trace_of_a_failed_or_cut_export_raises_and_leaves_nothing(tmp_path, text):
    with pytest.raises(OSError, match="could not write its trace"):
        save_trace(FakeProfiler(text), tmp_path, ["trace-1.pt.trace.json"])
    assert list(tmp_path.iterdir()) == []  # no trace, no staging directory


# -- a recording whose program died before writing its final run.json ------------------------------------

def test_saved_traces_are_the_published_names_in_order_without_links(tmp_path):
    for name in ("trace-10.pt.trace.json.gz", "trace-2.pt.trace.json.gz", "trace-3.pt.trace.json.gz.tmp",
                 "other.json", "run.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / "trace-4.pt.trace.json.gz").symlink_to(tmp_path / "other.json")
    (tmp_path / "trace-5.pt.trace.json.gz").mkdir()
    assert saved_traces(tmp_path) == ["trace-2.pt.trace.json.gz", "trace-10.pt.trace.json.gz"]


def test_finalised_says_how_the_program_ended_and_lists_what_was_saved(tmp_path):
    (tmp_path / "trace-1.pt.trace.json.gz").write_text("x")
    running = {"status": "running", "started": "2026-01-01T00:00:00", "command": ["python", "t.py"]}
    by_signal = finalised(running, tmp_path, 128 + 11)
    assert by_signal is not None
    assert (by_signal["status"], by_signal["crash"], by_signal["exit_code"], by_signal["traces"]) == \
        ("crashed", "killed by signal 11, SIGSEGV", 139, ["trace-1.pt.trace.json.gz"])
    assert by_signal["command"] == ["python", "t.py"]
    exited = finalised(running, tmp_path, 4)
    assert exited is not None and (exited["status"], exited["exit_code"]) == ("exited", 4)
    # nothing to finish: the runner wrote its final run.json, or never started the program
    assert finalised({**running, "status": "ok"}, tmp_path, 0) is None
    assert finalised({"status": "running"}, tmp_path, 1) is None
    assert finalised(None, tmp_path, 1) is None


# -- numerics dumps ------------------------------------------------------------------------------------

def test_a_dump_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / DUMP_NAME).symlink_to(victim)
    path = save_dump(SCHEMA.empty_table(), tmp_path / "d")
    assert victim.read_text() == "precious"
    assert not path.is_symlink() and pq.read_table(path).num_rows == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [DUMP_NAME]  # no staging directory left


def test_dump_directories_racing_for_one_name_each_get_their_own(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: fresh_dump_dir(tmp_path / "d")[0], range(8)))
    assert sorted(claimed) == sorted({tmp_path / "d", *(tmp_path / f"d-{n}" for n in range(1, 8))})


def test_a_dump_directory_holding_a_link_under_the_dump_name_is_passed_over(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / DUMP_NAME).symlink_to(tmp_path / "nowhere")
    assert fresh_dump_dir(tmp_path / "d") == (tmp_path / "d-1", True)
    assert not (tmp_path / "nowhere").exists()


def test_readers_fall_back_to_the_trace_files_when_run_json_lists_none(tmp_path):
    (tmp_path / "trace-1.pt.trace.json.gz").write_text("x")
    assert recording_traces(tmp_path, {"traces": ["a.json"]}) == (["a.json"], None)
    names, note = recording_traces(tmp_path, {"status": "running"})
    assert names == ["trace-1.pt.trace.json.gz"]
    assert note == (f"{tmp_path / 'run.json'} lists no trace (status 'running': the program may have died before it "
                    "could); reading the trace files in the directory: trace-1.pt.trace.json.gz")
    assert recording_traces(tmp_path / "nothing-here", {"status": "running"}) == ([], None)
