"""Hostile trace files on the read path: each ends in a result or one clean error within
the child's time limit (60 s on an idle machine, scaled: support.timing), with the right events, the warning that
says what was cut, and bounded memory.

Every file here once took more than 120 s or GBs of memory (the sizes below are CI-sized versions).
"""

from __future__ import annotations

import gzip
import json

import pytest
from support import hostile

MB = 1 << 20
# What the child costs before it reads a byte (imports): ~100 MB measured; the bounds below add to it.
START_UP = 150 * MB


def _summary(path, tmp_path, env=None):
    res, rss = hostile.run_cli_peak_rss("summary", str(path), "-f", "json", "--no-cache",
                                        cache=tmp_path / "cache", env=env)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    rows = json.loads(res.stdout)
    events = next(r["value"] for r in rows if r["section"] == "overview" and r["metric"] == "events")
    warnings = {r["metric"]: r["value"] for r in rows if r["section"] == "not_mapped"}
    return events, warnings, rss


def test_header_with_60000_nested_candidate_keys_is_read_in_one_pass(tmp_path):
    path = hostile.header_candidates(tmp_path / "t.json", candidates=60_000)
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {}


def test_deeply_nested_header_is_ignored_with_a_warning_not_a_recursion_error(tmp_path):
    path = hostile.deep_header(tmp_path / "t.json", depth=100_000)
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {"the document's keys before the event array are not valid JSON (ignored)": 1}


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_20_mb_name_is_cut_and_counted_in_bounded_memory(tmp_path, suffix):
    path = hostile.huge_name(tmp_path / f"t{suffix}", name_bytes=20 * MB)
    events, warnings, rss = _summary(path, tmp_path)
    assert events == 4
    # cut to 64 KiB by the reader, the name is still too long to demangle (analyses say so too)
    not_demangled = "events named with more than 16,384 characters (not demangled; short names show their start)"
    assert warnings == {"event names longer than 64 KiB (cut)": 1, not_demangled: 1}
    # The name passes through a few copies (buffer, chunk, decoded str, Arrow); 4 GB for 50 MB before.
    assert rss < START_UP + 12 * 20 * MB, rss


def test_damaged_object_with_20000_name_keys_is_dropped_not_rescanned(tmp_path):
    path = hostile.many_name_keys(tmp_path / "t.json", keys=20_000)
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {"malformed events that could not be repaired (dropped)": 1}


def test_a_string_after_the_document_is_counted_as_junk(tmp_path):
    path = hostile.junk_after_array(tmp_path / "t.json", junk_bytes=1000, form="string")
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    # the string with its two quotes; the document before it is whole, so nothing is "truncated"
    assert warnings == {"bytes after the event array that are not part of the document (ignored)": 1002}


def test_junk_after_a_bare_array_is_counted(tmp_path):
    path = hostile.junk_after_array(tmp_path / "t.json", junk_bytes=1000, form="bare")
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {"bytes after the event array that are not part of the document (ignored)": 1000}


def test_junk_larger_than_16_mib_after_the_array_is_not_read(tmp_path):
    path = hostile.junk_after_array(tmp_path / "t.json.gz", junk_bytes=200 * MB, form="string")
    events, warnings, rss = _summary(path, tmp_path)
    assert events == 3
    assert warnings.pop("more than 16 MiB follow the event array; the rest of the file was not read") == 1
    junk = warnings.pop("bytes after the event array that are not part of the document (ignored)")
    assert 16 * MB < junk < 200 * MB
    assert warnings == {}
    assert rss < START_UP + 8 * 16 * MB, rss  # 200 MB of junk is never held


def test_a_large_string_item_in_the_array_is_dropped(tmp_path):
    path = hostile.junk_after_array(tmp_path / "t.json.gz", junk_bytes=20 * MB, form="item")
    events, warnings, rss = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {"array items that are not event objects (dropped)": 1}
    assert rss < START_UP + 12 * 20 * MB, rss


def test_gzip_bomb_of_repeated_events_stops_at_the_inflate_cap(tmp_path):
    path = hostile.gzip_bomb(tmp_path / "t.json.gz", events=2_000_000)  # ~134 MB of JSON in ~0.6 MB
    size = path.stat().st_size
    cap = int(50 * size)
    events, warnings, rss = _summary(path, tmp_path, env={"OPSCOPE_MAX_INFLATE_RATIO": "50"})
    # The first `cap` bytes hold '{"traceEvents": [' (17 bytes), then events of `length` bytes joined by ",".
    length = len(hostile._event(0).replace("cpu_op", "user_annotation"))
    complete = (cap - 17 + 1) // (length + 1)
    assert cap < 2_000_000 * length  # the cap cuts this file
    assert events == complete
    truncated = [w for w in warnings if w.startswith("file is truncated")]
    assert len(truncated) == 1
    assert f"reading stopped at {cap / MB:.0f} MiB decompressed, 50x its compressed size" in truncated[0]
    assert "OPSCOPE_MAX_INFLATE_RATIO=0" in truncated[0]
    assert rss < START_UP + 8 * cap, rss


def test_deeply_nested_args_are_dropped_not_a_recursion_error(tmp_path):
    path = hostile.deep_args(tmp_path / "t.json", depth=100_000)
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 3
    assert warnings == {
        "events nested more than 512 levels deep (beyond the JSON nesting opscope reads: dropped as hostile)": 1}


def test_many_tiny_events_are_not_hostile(tmp_path):
    path = hostile.many_tiny_events(tmp_path / "t.json", events=300_000)
    events, warnings, _ = _summary(path, tmp_path)
    assert events == 300_000
    assert warnings == {}


def test_a_read_stopped_by_the_inflate_cap_is_cached_apart_from_a_read_with_the_cap_lifted(tmp_path):
    # Served from one cache entry, the capped read would come back after the cap is lifted: the user would never
    # see the rest.
    path = hostile.gzip_bomb(tmp_path / "t.json.gz", events=200_000)
    capped, _ = hostile.run_cli_peak_rss("summary", str(path), "-f", "json", cache=tmp_path / "cache",
                                         env={"OPSCOPE_MAX_INFLATE_RATIO": "5"})
    whole, _ = hostile.run_cli_peak_rss("summary", str(path), "-f", "json", cache=tmp_path / "cache",
                                        env={"OPSCOPE_MAX_INFLATE_RATIO": "0"})
    counts = [next(r["value"] for r in json.loads(res.stdout) if r["metric"] == "events") for res in (capped, whole)]
    written = len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    assert counts[0] < written and "reading stopped at" in capped.stderr
    assert counts[1] == written and "reading stopped" not in whole.stderr
