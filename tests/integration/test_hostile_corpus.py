"""The hostile corpus through every table command and format.

Every file of ``support.hostile_corpus`` (wrong formats, truncations, corrupt gzip, huge numbers, hostile text and
headers, odd structure, pathological sizes including a gzip bomb) is run through every table command as a terminal
table, CSV and JSON, one child process per file with a per-command time limit. Each run must end in a result or one
clean error line naming the file, with no traceback, no control byte on stdout, valid CSV without formula cells and
valid JSON (``support.hostile_corpus.problems``); no run may take 60 s; and the memory each file costs above the
process's start-up stays within a fixed amount plus a few times the file's content size.

The second corpus (``support.hostile_formats``) does the same for every reader: each format's numeric fields at
their edges (fast and slow paths), NUL and junk tails after a valid head, pathological sizes and gzip bombs, special
files; its memory budget is 200 MiB plus 4x the decompressed content.

The corpora here are CI-sized (a few minutes on two cores); ``python tools/hostile_fuzz.py --scale full`` (and
``--corpus readers``) runs the full sizes.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from support import hostile_corpus, hostile_formats
from support.hostile_run import run_corpus

pytestmark = pytest.mark.slow

#: Memory a file may cost above start-up: a fixed amount (pyarrow/duckdb pools, the report) plus this many times the
#: bytes of its content (decompressed): the model's columns and one decoded chunk at a time.
FIXED_MIB = 200
PER_CONTENT_BYTE = 6


def _content_size(path: Path) -> int:
    if path.is_dir():
        return sum(_content_size(p) for p in path.iterdir())
    if path.read_bytes()[:2] != b"\x1f\x8b":
        return path.stat().st_size
    try:
        with gzip.open(path) as fh:
            return sum(len(block) for block in iter(lambda: fh.read(1 << 20), b""))
    except (OSError, EOFError):
        return path.stat().st_size


@pytest.fixture(scope="module")
def corpus_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    corpus = hostile_corpus.build(root, "ci")
    files = [f for fs in corpus.values() for f in fs]
    return run_corpus(files, hostile_corpus.good_trace(root), hostile_corpus.COMMANDS, hostile_corpus.FORMATS,
                      root / "cache", command_cpu_s=60, file_timeout=600)


def test_every_command_on_every_hostile_file_ends_in_a_result_or_one_clean_error(corpus_results):
    found = {str(r.file.name): r.problems() for r in corpus_results if r.problems()}
    assert not found, found
    runs = [run for r in corpus_results for run in r.runs]
    expected = len(hostile_corpus.COMMANDS) * len(hostile_corpus.FORMATS)
    assert all(len(r.runs) == expected for r in corpus_results)  # no file stopped early
    assert max(run["seconds"] for run in runs) < 60
    # the corpus is hostile enough to exercise both outcomes
    assert any(run["rc"] == 0 for run in runs) and any(run["rc"] == 2 for run in runs)


def test_memory_on_each_hostile_file_stays_within_a_few_times_its_content(corpus_results):
    over = {}
    for r in corpus_results:
        budget_kb = (FIXED_MIB << 10) + PER_CONTENT_BYTE * _content_size(r.file) // 1024
        if r.peak_kb - r.startup_kb > budget_kb:
            over[r.file.name] = (f"{(r.peak_kb - r.startup_kb) >> 10} MiB above start-up, "
                                 f"budget {budget_kb >> 10} MiB")
    assert not over, over


@pytest.fixture(scope="module")
def reader_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-readers")
    corpus = hostile_formats.build(root, "ci", seed=1)
    good = root / "good.json"
    good.write_bytes(hostile_corpus.good_document())
    return corpus, hostile_formats.run(corpus, good, hostile_formats.CI_FORMATS, root / "cache", command_cpu_s=60,
                                       file_timeout=300)


def test_every_reader_on_its_hostile_files_ends_in_a_result_or_one_clean_error(reader_results):
    corpus, results = reader_results
    found = {str(r.file.name): r.problems() for r in results if r.problems()}
    assert not found, found
    assert {r.file for r in results} == {f for fs in corpus.values() for f in fs}
    full = hostile_formats.full_command_files(corpus)
    for r in results:
        commands = hostile_formats.FULL_COMMANDS if r.file in full else hostile_formats.COMMANDS
        assert len(r.runs) == len(commands) * len(hostile_formats.CI_FORMATS), r.file.name  # none stopped early
    runs = [run for r in results for run in r.runs]
    assert max(run["seconds"] for run in runs) < 60
    assert any(run["rc"] == 0 for run in runs) and any(run["rc"] == 2 for run in runs)


def test_memory_on_each_reader_hostile_file_stays_within_200_mib_and_4x_its_content(reader_results):
    _, results = reader_results
    over = {r.file.name: f"{(r.peak_kb - r.startup_kb) >> 10} MiB above start-up, "
                         f"{hostile_formats.budget_ratio(r):.2f} of its budget"
            for r in results if hostile_formats.budget_ratio(r) > 1}
    assert not over, over
