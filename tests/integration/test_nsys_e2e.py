"""The nsys SQLite reader on real exports (pipit's test data, MIT; see tests/data/nsys/README.md): the CLI's numbers
against the same quantities computed here with SQL on the file, independently of the reader, and against the
survey's figures (docs/surveys/formats.md §5)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support.cli import run_cli_many
from support.nsys import gunzip_saxpy
from support.shared import shared_trace

from opscope.analyses.links import link_table
from opscope.ingest import open_trace

CLOVERLEAF = "nsys/perlmutter-cloverleaf-cuda.sqlite"


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _cli_json(path: Path, cache: Path, *commands: str) -> dict[str, list]:
    results = run_cli_many([(c, str(path), "--format", "json", "--limit", "0") if c == "kernels" else
                            (c, str(path), "--format", "json") for c in commands], cache=cache)
    out = {}
    for c, res in zip(commands, results):
        assert res.returncode == 0, (c, res.stderr)
        out[c] = json.loads(res.stdout)
    return out


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory) -> Path:
    return gunzip_saxpy(tmp_path_factory.mktemp("nsys"))


def test_saxpy_cli_numbers_equal_the_databases(saxpy, cache):
    n_kernels, kernel_ns = _sql(saxpy, "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert (n_kernels, kernel_ns) == (5, 88_573_480)  # the survey's figures
    copies = {k: (n, ns) for k, n, ns, _ in _sql(
        saxpy, "SELECT copyKind, COUNT(*), SUM(end - start), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1")}
    assert _sql(saxpy, "SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")[0][0] == 2_621_440_000
    assert {k: n for k, (n, _) in copies.items()} == {1: 10, 2: 5}
    device = _sql(saxpy, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                         "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    out = _cli_json(saxpy, cache, "summary", "kernels", "gpu", "steps")
    kernels = {r["name"]: r for r in out["kernels"]}
    assert (kernels["saxpy"]["calls"], kernels["saxpy"]["total_ns"]) == (n_kernels, kernel_ns)
    assert (kernels["Memcpy HtoD (Pageable -> Device)"]["calls"],
            kernels["Memcpy HtoD (Pageable -> Device)"]["total_ns"]) == copies[1]
    assert (kernels["Memcpy DtoH (Device -> Pageable)"]["calls"],
            kernels["Memcpy DtoH (Device -> Pageable)"]["total_ns"]) == copies[2]
    summary = {r["metric"]: r["value"] for r in out["summary"] if r["section"] == "overview"}
    assert summary["gpu_busy_ns"] == _union_ns(device)
    (dev_row,) = [r for r in out["gpu"] if r.get("stream") is None]
    assert (dev_row["compute_ns"], dev_row["busy_ns"]) == (kernel_ns, _union_ns(device))
    assert out["steps"] == []  # its NVTX ranges are MPI calls and "saxpy": none is named like a step


def test_saxpy_runtime_nvtx_and_links(saxpy):
    trace = open_trace(saxpy, use_cache=False)
    kinds = trace.events["kind"].to_pylist()
    names = trace.events["name"].to_pylist()
    (runtime_rows,) = _sql(saxpy, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67")[0]
    (backtraces,) = _sql(saxpy, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67")[0]
    assert (runtime_rows, backtraces) == (57, 38)  # the survey's trap: 95 rows, 57 correlation ids
    assert kinds.count("runtime") == runtime_rows
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["nsys CUDA backtrace rows (RUNTIME eventClass 67, copies of the calls they surround; skipped)"] \
        == backtraces
    ranges = _sql(saxpy, "SELECT COALESCE(n.text, s.value), COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                         "ON s.id = n.textId WHERE n.eventType = 59 GROUP BY 1")
    assert sum(n for _, n in ranges) == 22
    got: dict[str, int] = {}
    for k, n in zip(kinds, names):
        if k == "user_annotation":
            got[n] = got.get(n, 0) + 1
    assert got == dict(ranges)
    links = link_table(trace).to_pylist()
    launches = [names[lk["launch_row"]] for lk in links if names[lk["device_row"]].startswith("saxpy")]
    assert launches == ["cudaLaunchKernel_v7000"] * 5
    assert all(lk["launch_row"] is not None and not lk["link_inferred"] for lk in links)
    meta = trace.metadata
    assert meta["tool"] == "Nsight Systems 2022.2.1.31"
    assert [(p["id"], p["name"], p["totalGlobalMem"], p["computeMajor"]) for p in meta["device_properties"]] == [
        (0, "NVIDIA A100-SXM4-40GB", 42_297_524_224, 8)]


def test_cloverleaf_matches_the_database(cache):
    path = shared_trace(CLOVERLEAF)
    by_name = {n: (c, ns) for n, c, ns in _sql(
        path, "SELECT s.value, COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
              "ON s.id = k.shortName GROUP BY 1")}
    assert by_name == {"par_ranged2d_kernel": (331, 267_056_876), "par_reduce_kernel": (13, 22_654_310),
                       "par_ranged1d_kernel": (968, 4_693_354)}  # the survey's figures
    copies = _sql(path, "SELECT COUNT(*), SUM(end - start), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0]
    assert copies == (279, 9_390_923, 225_116_952)
    out = _cli_json(path, cache, "kernels", "summary")
    kernels = {r["name"]: (r["calls"], r["total_ns"]) for r in out["kernels"] if r["kind"] == "kernel"}
    assert kernels == {f"clover::{n}": v for n, v in by_name.items()}
    memcpy = [(r["calls"], r["total_ns"]) for r in out["kernels"] if r["kind"] == "memcpy"]
    assert (sum(c for c, _ in memcpy), sum(ns for _, ns in memcpy)) == copies[:2]
    trace = open_trace(path, use_cache=False)
    kinds = trace.events["kind"].to_pylist()
    assert kinds.count("runtime") == _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0] == 3048
    links = [lk for lk in link_table(trace).to_pylist() if kinds[lk["device_row"]] == "kernel"]
    assert len(links) == 1312 and all(lk["launch_row"] is not None and not lk["link_inferred"] for lk in links)
    assert len(trace.metadata["device_properties"]) == 4
