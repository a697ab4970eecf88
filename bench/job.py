"""Whole-job benchmark: `opscope job` on synthetic jobs made from a real rank trace at 8, 32 and 128
ranks, on the local process pool and on a local Dask cluster.

Each job is written by tests/support/jobgen.py from ../shared/traces/hta/nccl_parser_config/nccl_data.json.gz (a real
Kineto rank trace of 3 steps and 21 NCCL collectives): every rank gets jitter, one rank a known extra delay per step,
and every rank a known clock offset. For each size and executor: a cold run (each rank parsed and cached) and a warm
run (from the cache), each as its own process: wall time; the peak memory of the combining process (the `opscope
job` process's own, from its JSON `resources`) and of the workers (the largest peak a task reported); the straggler
found and its delay against the truth; the largest clock-offset error.

    python bench/job.py                      # 8, 32, 128 ranks; writes bench/out/job.json, prints markdown
    python bench/job.py --ranks 8 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support.jobgen import make_job  # noqa: E402

BASE = REPO.parent / "shared" / "traces" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
OUT = REPO / "bench" / "out" / "job.json"
DELAY_NS = 3_000_000
JITTER_NS = 20_000
END_JITTER_NS = 2_000


def opscope_job(directory: Path, cache: Path, executor: list[str]) -> dict:
    """One `opscope job DIR --format json` process: wall seconds and its JSON document."""
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "opscope.cli", "job", str(directory), "--format", "json", *executor]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "doc": json.loads(proc.stdout)}


HTA_LOAD = """
import json, resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
print(json.dumps({"load_s": round(t1 - t0, 2), "ranks": len(ta.t.traces),
                  "self_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "children_peak_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}))
"""


def hta_load(directory: Path, python: str) -> dict | None:
    """The reference: HTA 0.5.0 loading every rank of the job into one process (its own interpreter)."""
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-c", HTA_LOAD, str(directory)], capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode:
        return {"error": proc.stderr[-600:]}
    return {"wall_s": round(wall, 2), **json.loads(proc.stdout.strip().splitlines()[-1])}


def accuracy(doc: dict, truth) -> dict:
    ranks = {r["rank"]: r for r in doc["ranks"]}
    expected = statistics.fmean(truth.delay_per_step_ns[s] for s in truth.steps)
    found = doc["job"]["stragglers"]
    delay = ranks[truth.straggler]["delay_ns"]
    offset_err = max(abs((ranks[r]["clock_offset_ns"] or 0) - (truth.offsets_ns[r] - truth.offsets_ns[0]))
                     for r in ranks)
    return {"stragglers": found, "delay_ms": round(delay / 1e6, 4), "true_delay_ms": round(expected / 1e6, 4),
            "delay_error_pct": round(100 * abs(delay - expected) / expected, 2), "offset_error_us": offset_err / 1e3}


def case(n: int, scratch: Path, repeat: int, executors: dict[str, list[str]], hta_python: str | None) -> list[dict]:
    rng = random.Random(n)
    offsets = [0] + [rng.randint(-50_000_000, 50_000_000) for _ in range(n - 1)]
    job_dir = scratch / f"job{n}"
    t0 = time.perf_counter()
    truth = make_job(BASE, job_dir, n, straggler=n // 3, delay_ns=DELAY_NS, offsets_ns=offsets,
                     jitter_ns=JITTER_NS, end_jitter_ns=END_JITTER_NS, seed=n)
    made = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in truth.files)
    rows = []
    for name, flags in executors.items():
        cold, warm = [], []
        for _ in range(repeat):
            cache = scratch / f"cache-{n}-{name.split()[0]}"
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(opscope_job(job_dir, cache, flags))
            warm.append(opscope_job(job_dir, cache, flags))
        for label, runs in (("cold (parse + cache)", cold), ("warm (from cache)", warm)):
            docs = [r["doc"] for r in runs]
            res = [d["resources"] for d in docs]
            rows.append({
                "ranks": n, "executor": name, "run": label, "files_mb": round(size / 1e6, 1),
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "per_rank_s": round(statistics.median(r["wall_s"] for r in runs) / n, 3),
                "combining_peak_mb": round(max(r["combining_peak_rss_bytes"] for r in res) / 2**20),
                "worker_peak_mb": round(max(r["worker_peak_rss_bytes"] for r in res) / 2**20),
                "task_s_total": statistics.median(r["task_seconds_total"] for r in res),
                **accuracy(docs[0], truth), "generated_s": round(made, 1)})
    if hta_python:
        ref = hta_load(job_dir, hta_python)
        if ref and "error" not in ref:
            rows.append({"ranks": n, "executor": "HTA 0.5.0 TraceAnalysis(trace_dir) load", "run": "all ranks in one "
                         "process", "files_mb": round(size / 1e6, 1), "wall_s": ref["wall_s"],
                         "per_rank_s": round(ref["wall_s"] / n, 3), "combining_peak_mb": ref["self_peak_mb"],
                         "worker_peak_mb": ref["children_peak_mb"], "stragglers": "-", "delay_ms": "-",
                         "true_delay_ms": "-", "delay_error_pct": "-", "offset_error_us": float("nan")})
        else:
            print(f"HTA failed on {n} ranks: {ref}", file=sys.stderr)
    shutil.rmtree(job_dir, ignore_errors=True)
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| ranks | executor | run | wall (s) | per rank (s) | combining peak (MiB) | worker peak (MiB) | "
            "straggler found | delay (ms) vs truth | offset error (µs) |")
    lines = [head, "|" + "---|" * 10]
    lines.extend(f"| {r['ranks']} | {r['executor']} | {r['run']} | {r['wall_s']} | {r['per_rank_s']} | "
                 f"{r['combining_peak_mb']} | {r['worker_peak_mb']} | {r['stragglers']} | " + (
                     f"{r['delay_ms']} vs {r['true_delay_ms']} ({r['delay_error_pct']}%) | {r['offset_error_us']:.3f} |"
                     if r["delay_ms"] != "-" else "- | - |") for r in rows)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 32, 128])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--hta-python", default=None, help="a Python with HolisticTraceAnalysis 0.5.0 (the reference)")
    args = parser.parse_args(argv)
    if not BASE.is_file():
        raise SystemExit(f"{BASE}: the base rank trace is missing (../shared/traces)")
    executors = {f"local pool ({args.workers} workers)": ["--workers", str(args.workers)]}
    if not args.no_dask:
        executors[f"Dask local:{args.workers}"] = ["--dask", f"local:{args.workers}"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="opscope-job-bench-") as tmp:
        for n in args.ranks:
            rows += case(n, Path(tmp), args.repeat, executors, args.hta_python)
            print(markdown(rows), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "rows": rows}, indent=2))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
