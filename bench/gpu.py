"""GPU-analysis benchmark: ``opscope gpu`` on a 1 GB trace, and opscope's temporal breakdown against HTA's.

1. ``opscope gpu BIG`` as a whole process from the Parquet cache (the cache is built first by one
   ``opscope summary BIG`` into a scratch ``OPSCOPE_CACHE_DIR``). Goal: under 5 s.
2. On the largest GPU traces of ../shared/traces: HolisticTraceAnalysis 0.5.0's ``TraceAnalysis(trace_dir=DIR)``
   (its load) and ``get_temporal_breakdown()`` (its call), timed inside its own interpreter, against opscope's
   ``open_trace`` (parsing the JSON, or from the cache) and ``temporal_breakdown(trace, drop_last_step=True)``
   (the same figures, see tests/integration/test_hta_fidelity.py), also timed inside the process; plus both as whole
   processes. Goal: opscope at least 10x faster.

Each case runs ``--repeat`` times as its own process; medians are reported. Prints a markdown table and
writes bench/out/gpu.json.

    python bench/gpu.py                       # after /tmp/bench2.done exists (a shared 2-core machine)
    python bench/gpu.py --repeat 1 --skip-big
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
OUT = REPO / "bench" / "out" / "gpu.json"
BIG = Path("/tmp/opscope-bench/big-1gb.json.gz")
#: The largest Kineto traces with device work in ../shared/traces (61 MB of JSON from an MI300 GPU; 87 MB
#: from an MTIA accelerator).
LARGEST = (SHARED / "tracelens/traces/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz",
           SHARED / "hta/mtia_trace_single_rank/mtia_rank_0.json.gz")

OPSCOPE_TIMED = """\
import json, sys, time
t0 = time.perf_counter()
from opscope.analyses.gpu import temporal_breakdown
from opscope.ingest import open_trace
t1 = time.perf_counter()
trace = open_trace(sys.argv[1], use_cache=sys.argv[2] == "cache")
t2 = time.perf_counter()
rows = temporal_breakdown(trace, drop_last_step=True).to_pylist()
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2, "result": rows}))
"""

HTA_TIMED = """\
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = ta.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2,
                  "result": json.loads(df.to_json(orient="records"))}))
"""


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> dict:
    """One child process: wall time, its peak RSS (wait4 rusage), exit code, stdout (JSON when it prints it)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        deadline = t0 + timeout
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode("utf-8", "replace")
        tail = err.read()[-2000:].decode("utf-8", "replace")
    parsed = None
    lines = text.strip().splitlines()
    if lines and lines[-1].startswith("{"):
        parsed = json.loads(lines[-1])
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(rusage.ru_maxrss / 1024, 1), "rc": proc.returncode,
            "timed": parsed, "stderr_tail": tail if proc.returncode else ""}


def wall_and_rss(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """:func:`run` for a child that must succeed: its wall seconds and peak RSS (MiB)."""
    r = run(cmd, env)
    if r["rc"]:
        raise SystemExit(f"failed: {' '.join(cmd)}: {r['stderr_tail']}")
    return r["wall_s"], round(r["peak_rss_mb"])


def median_wall_and_rss(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> tuple[float, int]:
    """:func:`wall_and_rss` ``repeat`` times: the median wall seconds and the largest peak RSS (MiB)."""
    runs = [wall_and_rss(cmd, env) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def median_case(name: str, trace: str, runs: list[dict], command: list[str]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    case = {"trace": trace, "case": name, "command": command, "runs": runs}
    if not ok:
        case["error"] = runs[0]["stderr_tail"][-600:] if runs else "not run"
        return case
    case["wall_s"] = statistics.median(r["wall_s"] for r in ok)
    case["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in ok)
    timed = [r["timed"] for r in ok if r["timed"]]
    for key in ("load_s", "call_s", "import_s"):
        if timed:
            case[key] = round(statistics.median(t[key] for t in timed), 4)
    if timed:
        case["result"] = timed[0]["result"]
    return case


def opscope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "opscope.cli", *args]


def bench_big(repeat: int, scratch: Path) -> list[dict]:
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(scratch / "big-cache")}
    build = run(opscope_cmd("summary", str(BIG)), env=env)
    cases = [median_case("cache build: opscope summary (first open)", "big 0.99 GB", [build],
                         opscope_cmd("summary", str(BIG)))]
    cmd = opscope_cmd("gpu", str(BIG))
    cases.append(median_case("opscope gpu (from the cache)", "big 0.99 GB", [run(cmd, env=env) for _ in range(repeat)],
                             cmd))
    cmd = opscope_cmd("gpu", str(BIG), "--idle", "-f", "json")
    cases.append(median_case("opscope gpu --idle -f json (from the cache)", "big 0.99 GB",
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    return cases


def bench_vs_hta(path: Path, repeat: int, scratch: Path, hta_python: str) -> list[dict]:
    label = f"{path.parent.name}/{path.name}"
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(scratch / f"cache-{path.parent.name}")}
    cases = []
    cmd = [sys.executable, "-c", OPSCOPE_TIMED, str(path), "nocache"]
    cases.append(median_case("opscope: parse JSON + temporal_breakdown", label,
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    run([sys.executable, "-c", OPSCOPE_TIMED, str(path), "cache"], env=env)  # writes the cache
    cmd = [sys.executable, "-c", OPSCOPE_TIMED, str(path), "cache"]
    cases.append(median_case("opscope: from the cache + temporal_breakdown", label,
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    cmd = opscope_cmd("gpu", str(path), "--no-cache")
    cases.append(median_case("opscope gpu --no-cache (all three tables)", label,
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    hta_dir = scratch / f"hta-{path.parent.name}"
    hta_dir.mkdir(exist_ok=True)
    if not (hta_dir / path.name).exists():
        os.symlink(path, hta_dir / path.name)
    cmd = [hta_python, "-c", HTA_TIMED, str(hta_dir)]
    cases.append(median_case("HTA 0.5.0: TraceAnalysis load + get_temporal_breakdown", label,
                             [run(cmd) for _ in range(repeat)], cmd))
    return cases


def speedups(cases: list[dict]) -> list[dict]:
    """Per trace: HTA (load + call) over opscope (load + call), in-process and as whole processes."""
    out = []
    for trace in sorted({c["trace"] for c in cases if c["case"].startswith("HTA")}):
        by = {c["case"]: c for c in cases if c["trace"] == trace and "error" not in c}
        hta = next((c for n, c in by.items() if n.startswith("HTA")), None)
        if hta is None:
            continue
        for name, c in by.items():
            if not name.startswith("opscope:"):
                continue
            out.append({
                "trace": trace, "opscope_case": name,
                "in_process_x": round((hta["load_s"] + hta["call_s"]) / (c["load_s"] + c["call_s"]), 1),
                "call_only_x": round(hta["call_s"] / c["call_s"], 2),
                "whole_process_x": round(hta["wall_s"] / c["wall_s"], 1),
            })
    return out


def markdown(cases: list[dict], ratios: list[dict]) -> str:
    lines = ["| trace | case | wall s (median) | peak RSS MB | load s (in process) | call s (in process) |",
             "|---|---|---:|---:|---:|---:|"]
    for c in cases:
        if "error" in c:
            lines.append(f"| {c['trace']} | {c['case']} | error: {c['error'][:80]!r} | | | |")
            continue
        load = f"{c['load_s']:.3f}" if "load_s" in c else ""
        call = f"{c['call_s']:.4f}" if "call_s" in c else ""
        lines.append(f"| {c['trace']} | {c['case']} | {c['wall_s']:.2f} | {c['peak_rss_mb']:,.0f} | {load} | {call} |")
    if ratios:
        lines += ["", "| trace | opscope case | HTA / opscope, load + call in process | call only | whole process |",
                  "|---|---|---:|---:|---:|"]
        for r in ratios:
            lines.append(f"| {r['trace']} | {r['opscope_case']} | {r['in_process_x']}x | {r['call_only_x']}x | "
                         f"{r['whole_process_x']}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-big", action="store_true", help="Leave out the 1 GB trace.")
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--trace", action="append", type=Path, help="Trace(s) to compare with HTA (default: the "
                                                                 "largest ones in ../shared/traces).")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="opscope-bench-gpu-"))
    cases: list[dict] = []
    try:
        if not args.skip_big:
            if BIG.exists():
                cases += bench_big(args.repeat, scratch)
            else:
                print(f"skipping the big trace: {BIG} is absent (bench/ingest.py generates it)", file=sys.stderr)
        hta_ok = subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0 \
            if Path(args.hta_python).exists() else False
        if not hta_ok:
            print(f"HTA is not importable with {args.hta_python}: the HTA rows are left out", file=sys.stderr)
        for path in args.trace or [p for p in LARGEST if p.exists()]:
            if hta_ok:
                cases += bench_vs_hta(path, args.repeat, scratch, args.hta_python)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ratios = speedups(cases)
    print(markdown(cases, ratios))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"machine": {"platform": platform.platform(), "python": platform.python_version(),
                                           "cpus": os.cpu_count()},
                               "cases": [{k: v for k, v in c.items() if k != "runs"} | {"runs": [
                                   {k: v for k, v in r.items() if k != "timed"} for r in c.get("runs", [])]}
                                         for c in cases],
                               "speedups": ratios}, indent=1))
    print(f"\nwrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
