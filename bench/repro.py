"""Reproducer benchmark: ``opscope repro`` writing the top 20 cases of a 1 GB trace from the cache, and
running 20 CPU cases with ``--budget`` seconds each.

1. **Writing.** A ~1 GB trace *with shapes* is made from the MI300 owlv2 trace of ../shared (TraceLens; every op
   carries Input Dims/Strides/type and Concrete Inputs) the way ``bench/ingest.py`` makes its big trace (copies
   shifted in time, ids offset). After one ``opscope summary`` builds the cache, each case runs as its own process,
   ``--repeat`` times: ``opscope summary BIG`` (the reference: start-up + opening the cache + the summary
   analyses) and ``opscope repro BIG --top 20 --no-run`` (start-up + opening the cache + selecting, rebuilding
   and writing 20 scripts and cases.json). Wall time and peak RSS, medians.
2. **Running.** ``opscope repro TRACE --top 20 --budget B --variants auto`` on a CPU recording of the demo model
   (recorded here first with ``opscope demo``), once: total wall time against the timed budget (each case's
   baseline gets B seconds, each variant B seconds in rounds alternating with B seconds of baseline), so the
   overhead per case (a fresh Python importing torch, inputs, warm-up, the profiler check) shows.

Prints markdown and writes bench/out/repro.json.

    python bench/repro.py --repeat 3 --budget 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import LARGEST, run
from ingest import make_big_trace

OUT = Path(__file__).resolve().parent / "out" / "repro.json"
SOURCE = LARGEST[0]  # the MI300 owlv2 trace: every op has its shapes, strides, types and scalar inputs


def opscope(*args: str) -> list[str]:
    return [sys.executable, "-m", "opscope.cli", *args]


def medians(name: str, runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"case": name, "error": runs[0]["stderr_tail"][-400:] if runs else "not run"}
    return {"case": name, "wall_s": statistics.median(r["wall_s"] for r in ok),
            "walls": [r["wall_s"] for r in ok], "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in ok)}


def writing(work: Path, repeat: int, size_gb: float) -> list[dict]:
    big = work / f"big-shapes-{size_gb:g}gb.json.gz"
    if not big.exists():
        print(f"making {big} from {SOURCE} ...", flush=True)
        make_big_trace(SOURCE, big, size_gb)
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(work / "repro-cache")}
    build = run(opscope("summary", str(big)), env=env)
    cases = [{"case": "cache build: opscope summary (first open)", "wall_s": build["wall_s"],
              "peak_rss_mb": build["peak_rss_mb"]}]
    cases.append(medians("opscope summary (from the cache): reference",
                         [run(opscope("summary", str(big)), env=env) for _ in range(repeat)]))
    runs = []
    for i in range(repeat):
        out = work / f"repro-out-{i}"
        shutil.rmtree(out, ignore_errors=True)
        runs.append(run(opscope("repro", str(big), "--top", "20", "--no-run", "-o", str(out), "--format", "json"),
                        env=env))
    cases.append(medians("opscope repro --top 20 --no-run (from the cache)", runs))
    document = json.loads((work / "repro-out-0" / "cases.json").read_text())
    cases[-1]["cases"] = len(document["cases"])
    cases[-1]["scripts"] = sum(1 for c in document["cases"] if c["script"])
    return cases


def running(work: Path, budget: float) -> dict:
    demo = work / "repro-demo"
    shutil.rmtree(demo, ignore_errors=True)
    run(opscope("demo", "--output", str(demo)), timeout=1800)
    trace = next(demo.glob("*.json"))
    out = work / "repro-run"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    result = run(opscope("repro", str(trace), "--top", "20", "--budget", str(budget), "-o", str(out),
                         "--format", "json"), timeout=3600)
    wall = time.perf_counter() - t0
    document = json.loads((out / "cases.json").read_text())
    cases = document["cases"]
    ran = [c for c in cases if c["status"] == "ok"]
    variants = sum(1 for c in cases for v in c["variants"] if v.get("status") not in (None, "not run"))
    timed = budget * (len(ran) + 2 * variants)  # baseline B; each variant B of its own + B of paired baseline
    return {"case": f"opscope repro --top 20 --budget {budget:g} (demo model, CPU)", "wall_s": round(wall, 1),
            "peak_rss_mb": result["peak_rss_mb"], "cases": len(cases), "ran": len(ran), "variants_run": variants,
            "timed_budget_s": round(timed, 1), "overhead_s_per_case": round((wall - timed) / max(1, len(ran)), 2),
            "ratios": [c["ratio"] for c in ran], "checks": [c["check"] for c in ran]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/opscope-bench"))
    parser.add_argument("--skip-write", action="store_true")
    parser.add_argument("--skip-run", action="store_true")
    args = parser.parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    if not args.skip_write:
        results["writing"] = writing(args.work_dir, args.repeat, args.size_gb)
        print("| case | wall s (median) | runs | peak RSS MB |\n|---|---:|---|---:|")
        for c in results["writing"]:
            print(f"| {c['case']} | {c.get('wall_s')} | {c.get('walls', '')} | {c.get('peak_rss_mb')} |")
    if not args.skip_run:
        results["running"] = running(args.work_dir, args.budget)
        print(json.dumps(results["running"], indent=1))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
