"""Advice and diff benchmark: ``opscope advise`` and ``opscope diff`` on a 1 GB trace, and against HTA.

1. From the Parquet cache of the 1 GB trace (built first by one ``opscope summary``): ``opscope advise BIG``
   (every rule) and ``opscope diff BIG COPY`` (COPY: the same bytes under another name, so it has its own
   cache). Whole processes: wall time and peak RSS.
2. ``opscope diff --whole-trace`` against HolisticTraceAnalysis 0.5.0's ``TraceDiff.compare_traces`` (all
   iterations, CPU ops and GPU kernels: the same comparison, per name) on HTA's own trace_diff pair, each timed
   inside its process (load + call) and as a whole process.
3. ``opscope advise`` (all rules) against HTA's load + the analyses its users run for the same questions:
   ``get_temporal_breakdown``, ``get_idle_time_breakdown``, ``get_comm_comp_overlap`` and
   ``get_cuda_kernel_launch_stats``, on the largest GPU trace in ../shared/traces.

Each case runs ``--repeat`` times as its own process; medians are reported. Prints markdown tables and writes
bench/out/advise.json.

    python bench/advise.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import BIG, LARGEST, SHARED, markdown, median_case, opscope_cmd, run, speedups

OUT = Path(__file__).resolve().parent / "out" / "advise.json"
DIFF_PAIR = (SHARED / "hta/trace_diff/control/control.json.gz", SHARED / "hta/trace_diff/test/test.json.gz")

OPSCOPE_DIFF = """\
import json, sys, time
t0 = time.perf_counter()
from opscope.diff import compare
from opscope.ingest import open_trace
t1 = time.perf_counter()
cache = sys.argv[3] == "cache"
a, b = open_trace(sys.argv[1], use_cache=cache), open_trace(sys.argv[2], use_cache=cache)
t2 = time.perf_counter()
rows = compare(a, b, whole_trace=True).rows
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2, "result": rows.num_rows}))
"""

HTA_DIFF = """\
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_diff import LabeledTrace, TraceDiff
t1 = time.perf_counter()
a, b = LabeledTrace("control", trace_dir=sys.argv[1]), LabeledTrace("test", trace_dir=sys.argv[2])
t2 = time.perf_counter()
df = TraceDiff.compare_traces(a, b, control_iteration=a.iterations(), test_iteration=b.iterations())
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2, "result": len(df)}))
"""

OPSCOPE_ADVISE = """\
import json, sys, time
t0 = time.perf_counter()
from opscope.advise import advise
from opscope.ingest import open_trace
t1 = time.perf_counter()
trace = open_trace(sys.argv[1], use_cache=sys.argv[2] == "cache")
t2 = time.perf_counter()
found = advise(trace).findings
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2, "result": [f.rule for f in found]}))
"""

HTA_ANALYSES = """\
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
done = []
for name, call in [("temporal", lambda: ta.get_temporal_breakdown(visualize=False)),
                   ("idle", lambda: ta.get_idle_time_breakdown(visualize=False)),
                   ("comm_comp", lambda: ta.get_comm_comp_overlap(visualize=False)),
                   ("launch", lambda: ta.get_cuda_kernel_launch_stats(visualize=False))]:
    try:
        call()
        done.append(name)
    except Exception as exc:
        done.append(f"{name} failed: {type(exc).__name__}")
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2, "result": done}))
"""


def link_dir(scratch: Path, name: str, path: Path) -> Path:
    """HTA reads a directory of traces: one directory holding a link to the file."""
    d = scratch / name
    d.mkdir(exist_ok=True)
    if not (d / path.name).exists():
        os.symlink(path, d / path.name)
    return d


def bench_big(repeat: int, scratch: Path) -> list[dict]:
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(scratch / "big-cache")}
    copy = scratch / "big-copy.json.gz"
    shutil.copyfile(BIG, copy)
    for path in (BIG, copy):
        run(opscope_cmd("summary", str(path)), env=env)  # builds the caches
    cases = []
    for name, cmd in [("opscope advise (all rules, from the cache)", opscope_cmd("advise", str(BIG))),
                      ("opscope diff BIG COPY (from the caches)", opscope_cmd("diff", str(BIG), str(copy)))]:
        cases.append(median_case(name, "big 0.99 GB", [run(cmd, env=env) for _ in range(repeat)], cmd))
    copy.unlink()
    return cases


def bench_diff_vs_hta(repeat: int, scratch: Path, hta_python: str) -> list[dict]:
    a, b = DIFF_PAIR
    label = "hta/trace_diff control vs test"
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(scratch / "diff-cache")}
    cases = []
    cmd = [sys.executable, "-c", OPSCOPE_DIFF, str(a), str(b), "nocache"]
    cases.append(median_case("opscope: parse JSON + compare", label, [run(cmd, env=env) for _ in range(repeat)],
                             cmd))
    run([sys.executable, "-c", OPSCOPE_DIFF, str(a), str(b), "cache"], env=env)
    cmd = [sys.executable, "-c", OPSCOPE_DIFF, str(a), str(b), "cache"]
    cases.append(median_case("opscope: from the cache + compare", label, [run(cmd, env=env) for _ in range(repeat)],
                             cmd))
    cmd = [hta_python, "-c", HTA_DIFF, str(link_dir(scratch, "control", a)), str(link_dir(scratch, "test", b))]
    cases.append(median_case("HTA 0.5.0: LabeledTrace x2 + TraceDiff.compare_traces", label,
                             [run(cmd) for _ in range(repeat)], cmd))
    return cases


def bench_advise_vs_hta(path: Path, repeat: int, scratch: Path, hta_python: str) -> list[dict]:
    label = f"{path.parent.name}/{path.name}"
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(scratch / f"advise-cache-{path.parent.name}")}
    cases = []
    cmd = [sys.executable, "-c", OPSCOPE_ADVISE, str(path), "nocache"]
    cases.append(median_case("opscope: parse JSON + advise (all rules)", label,
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    run([sys.executable, "-c", OPSCOPE_ADVISE, str(path), "cache"], env=env)
    cmd = [sys.executable, "-c", OPSCOPE_ADVISE, str(path), "cache"]
    cases.append(median_case("opscope: from the cache + advise (all rules)", label,
                             [run(cmd, env=env) for _ in range(repeat)], cmd))
    cmd = [hta_python, "-c", HTA_ANALYSES, str(link_dir(scratch, f"hta-{path.parent.name}", path))]
    cases.append(median_case("HTA 0.5.0: load + temporal, idle, comm/comp overlap, launch stats", label,
                             [run(cmd) for _ in range(repeat)], cmd))
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-big", action="store_true", help="Leave out the 1 GB trace.")
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="opscope-bench-advise-"))
    cases: list[dict] = []
    try:
        if not args.skip_big:
            if BIG.exists():
                cases += bench_big(args.repeat, scratch)
            else:
                print(f"skipping the big trace: {BIG} is absent (bench/ingest.py generates it)", file=sys.stderr)
        hta_ok = Path(args.hta_python).exists() and subprocess.run(
            [args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0
        if not hta_ok:
            print(f"HTA is not importable with {args.hta_python}: the HTA rows are left out", file=sys.stderr)
        elif all(p.exists() for p in DIFF_PAIR):
            cases += bench_diff_vs_hta(args.repeat, scratch, args.hta_python)
            largest = next((p for p in LARGEST if p.exists()), None)
            if largest is not None:
                cases += bench_advise_vs_hta(largest, args.repeat, scratch, args.hta_python)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ratios = speedups(cases)
    print(markdown(cases, ratios))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"machine": {"platform": platform.platform(), "python": platform.python_version(),
                                           "cpus": os.cpu_count()},
                               "cases": [{k: v for k, v in c.items() if k != "runs"} for c in cases],
                               "speedups": ratios}, indent=1))
    print(f"\nwrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
