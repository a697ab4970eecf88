"""What the analyses compute on a cached trace is kept in its cache entry (results/) and read back
by the next command; a kept result is never served to other code, other options or a changed trace, and a damaged
one is computed again. Plus the cheap facts the cache gives without reading columns (event count, copy args)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from support.tracefiles import small_gpu_trace, write_trace, x

import opscope.advise as advise_mod
import opscope.analyses.gpu as gpu_mod
from opscope.advise import advise
from opscope.analyses.copies import copy_table
from opscope.analyses.gpu import GpuAnalysis, gpu_analysis
from opscope.ingest import open_trace
from opscope.model.memo import kept_results
from opscope.store import results as results_mod

# small_gpu_trace by hand: window = the two steps, [0, 3000) us; kernels on device 0, stream 7: [150, 350),
# [1200, 1260) and [2950, 3050) cut at the window's end -> busy 200 + 60 + 50 us; idle the rest of 3000 us.
BUSY_NS = 310_000
IDLE_NS = 3_000_000 - BUSY_NS


def _cached(tmp_path, cache, events=None):
    path = write_trace(tmp_path / "t.json", events or small_gpu_trace())
    first = open_trace(path, cache_dir=cache)  # parses and writes the entry
    assert "from_cache" not in first.metadata
    trace = open_trace(path, cache_dir=cache)
    assert trace.metadata.get("from_cache")
    return path, trace


def _results(cache):
    return sorted(p for p in cache.glob("*/results/*/*") if not p.name.startswith(".tmp-"))


def _device_row(table: pa.Table) -> dict:
    return next(r for r in table.to_pylist() if r["stream"] is None)


def _recomputing(*_args, **_kwargs):
    raise AssertionError("computed again instead of read from the cache entry")


def test_gpu_tables_are_kept_and_read_back_without_recomputing(tmp_path, cache, monkeypatch):
    path, trace = _cached(tmp_path, cache)
    computed = gpu_analysis(trace)
    row = _device_row(computed.breakdown())
    assert (row["busy_ns"], row["idle_ns"], row["compute_ns"]) == (BUSY_NS, IDLE_NS, BUSY_NS)
    idle = computed.idle().to_pylist()
    assert sum(r["idle_ns"] for r in idle) == IDLE_NS
    launches = computed.launches().to_pylist()
    assert launches[0]["kernels"] == 3
    notes = computed.notes()
    assert _results(cache)  # kept

    monkeypatch.setattr(gpu_mod, "device_work", _recomputing)
    again = GpuAnalysis(open_trace(path, cache_dir=cache))
    assert again.breakdown().to_pylist() == computed.breakdown().to_pylist()
    assert again.idle().to_pylist() == idle
    assert again.launches().to_pylist() == launches
    assert again.notes() == notes
    # another short-gap setting is another result: not served from the one kept
    with pytest.raises(AssertionError, match="computed again"):
        GpuAnalysis(open_trace(path, cache_dir=cache), short_gap_ns=1).idle()


def test_a_damaged_result_is_computed_again_and_rewritten(tmp_path, cache):
    path, trace = _cached(tmp_path, cache)
    expected = gpu_analysis(trace).breakdown().to_pylist()
    kept = _results(cache)
    for file in kept:
        data = bytearray(file.read_bytes())
        data[-1] ^= 0xFF
        file.write_bytes(bytes(data))
    assert GpuAnalysis(open_trace(path, cache_dir=cache)).breakdown().to_pylist() == expected
    store = results_mod.ResultStore(kept[0].parent.parent.parent)
    found, rewritten = store.get(gpu_mod.gpu_breakdown.key(trace))
    assert found and rewritten.to_pylist() == expected  # rewritten whole


def test_results_of_other_code_are_not_served_and_make_way(tmp_path, cache, monkeypatch):
    path, trace = _cached(tmp_path, cache)
    gpu_analysis(trace).breakdown()
    (old,) = {p.parent for p in _results(cache)}
    monkeypatch.setattr(results_mod, "_fingerprint", "another version of opscope")
    with monkeypatch.context() as patched:
        patched.setattr(gpu_mod, "device_work", _recomputing)
        with pytest.raises(AssertionError, match="computed again"):
            GpuAnalysis(open_trace(path, cache_dir=cache)).breakdown()
    GpuAnalysis(open_trace(path, cache_dir=cache)).breakdown()  # kept for this code; the other code's results go
    assert not old.exists()
    assert {p.parent.name for p in _results(cache)} == {"another version of opscope"}


def test_results_copied_from_another_entry_are_not_served(tmp_path, cache, monkeypatch):
    import shutil

    _, trace = _cached(tmp_path, cache)
    gpu_analysis(trace).breakdown()
    other = write_trace(tmp_path / "other.json", small_gpu_trace() + [x("aten::other", 4000, 1)])
    open_trace(other, cache_dir=cache)
    theirs = open_trace(other, cache_dir=cache)
    entry = Path(trace.metadata["from_cache"])
    shutil.copytree(entry / "results", Path(theirs.metadata["from_cache"]) / "results", dirs_exist_ok=True)
    computed = []
    real = gpu_mod.device_work
    monkeypatch.setattr(gpu_mod, "device_work", lambda *a, **k: computed.append(1) or real(*a, **k))
    GpuAnalysis(open_trace(other, cache_dir=cache)).breakdown()
    assert computed  # computed on its own trace, not read from the results of the other


def test_an_entry_removed_meanwhile_is_not_made_again(tmp_path):
    store = results_mod.ResultStore(tmp_path / "gone")
    store.put("t", pa.table({"n": [1]}))
    assert not (tmp_path / "gone").exists()


def test_a_changed_trace_keeps_nothing(tmp_path, cache):
    _, cached = _cached(tmp_path, cache)
    assert kept_results(cached) is not None
    with pytest.raises(AttributeError):
        cached.events = cached.events.slice(0, 3)  # type: ignore[misc]  # a trace is not changed once built
    trace = cached.replace(events=cached.events.slice(0, 3))  # no longer the cached trace
    assert kept_results(trace) is None
    assert trace.num_events == 3 and cached.num_events == 12
    gpu_analysis(trace).breakdown()
    assert _results(cache) == []


def test_store_round_trips_tables_and_json_and_refuses_what_would_change(tmp_path):
    store = results_mod.ResultStore(tmp_path)
    # two chunks with different dictionaries (as Parquet row groups read back): the IPC file holds one per column
    names = pa.chunked_array([pa.array(["a", "b"]).dictionary_encode(), pa.array(["c", "a"]).dictionary_encode()])
    table = pa.table({"name": names, "n": pa.array([1, 2, 3, 4], pa.int64())})
    store.put("t", table)
    found, back = store.get("t")
    assert found and back.to_pylist() == table.to_pylist()
    store.put("j", {"compute": 5, "notes": ["x", None], "pct": 12.5})
    assert store.get("j") == (True, {"compute": 5, "notes": ["x", None], "pct": 12.5})
    store.put("tuple", {"pair": (1, 2)})  # would come back as a list
    store.put("set", {1, 2})  # not JSON
    assert store.get("tuple") == (False, None) and store.get("set") == (False, None)
    assert store.get("never written") == (False, None)


def test_advice_is_kept_per_rules_and_run(tmp_path, cache, monkeypatch):
    path, trace = _cached(tmp_path, cache)
    first = advise(trace)
    monkeypatch.setattr(advise_mod, "all_rules", _recomputing)
    again = advise(open_trace(path, cache_dir=cache))
    assert again == first
    with pytest.raises(AssertionError, match="computed again"):
        advise(open_trace(path, cache_dir=cache), run={"cpu": {"usable_cores": 4}})


def test_event_count_from_the_footer_without_reading_columns(tmp_path, cache):
    path, trace = _cached(tmp_path, cache)
    assert trace.num_events == 12  # the 12 complete events of small_gpu_trace
    assert trace._events is None  # no column was read for it
    assert open_trace(path, use_cache=False).num_events == 12


def test_copy_args_hold_only_the_copies_and_give_the_same_sizes(tmp_path, cache):
    events = [*small_gpu_trace(),
              x("cudaMemcpyAsync", 1500, 10, cat="cuda_runtime", correlation=9),
              x("Memcpy HtoD (Pageable -> Device)", 1520, 30, cat="gpu_memcpy", pid=0, tid=7, device=0, stream=7,
                correlation=9, bytes=4096)]
    path, trace = _cached(tmp_path, cache, events)
    memcpy_row = trace.select(["kind"])["kind"].to_pylist().index("memcpy")
    assert trace.copy_args["event_id"].to_pylist() == [memcpy_row]
    assert trace.args.num_rows == 14  # every event's args are still there for query and the other analyses
    parsed = open_trace(path, use_cache=False)
    assert parsed.copy_args.to_pylist() == trace.copy_args.to_pylist()
    assert [c["bytes"] for c in copy_table(trace)] == [c["bytes"] for c in copy_table(parsed)] == [4096]


def test_args_of_some_events_read_batch_by_batch_never_load_the_whole_table(tmp_path, cache):
    path, trace = _cached(tmp_path, cache)
    kinds = trace.select(["kind"])["kind"].to_pylist()
    kernels = [row for row, kind in enumerate(kinds) if kind == "kernel"]  # event ids are rows here
    picked = trace.args_of(pa.array([kernels[1], kernels[0], kernels[0], None], pa.int64()))
    assert callable(trace.held_args())  # still in the entry: read batch by batch, not kept by the trace
    parsed = open_trace(path, use_cache=False)
    whole = parsed.args.filter(pa.compute.is_in(parsed.args["event_id"], value_set=pa.array(kernels[:2])))
    assert picked.to_pylist() == whole.to_pylist() and picked.num_rows == 2  # the table's order, each row once
    assert trace.args_of(pa.array([], pa.int64())).num_rows == 0
    assert trace.args_of(pa.array([10**9], pa.int64())).num_rows == 0  # no such event


def test_summary_totals_are_kept_and_read_back_without_reading_the_events(tmp_path, cache, monkeypatch):
    import opscope.analyses.summary as summary_mod

    path, trace = _cached(tmp_path, cache)
    first = summary_mod.summarize(trace)
    # by hand from small_gpu_trace: three kernels on device 0, 200 + 60 + 100 us of them (the last not cut: the
    # summary's GPU busy time is the union of the device work, not windowed)
    assert first.devices == [0] and first.gpu_busy_ns == 360_000
    monkeypatch.setattr(summary_mod, "_totals", _recomputing)
    monkeypatch.setattr(summary_mod, "_by_kind", _recomputing)
    again = summary_mod.summarize(open_trace(path, cache_dir=cache))
    assert again.rows() == first.rows()
