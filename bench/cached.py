"""Cached-analysis benchmark: every table command as a whole process from the Parquet cache, before and after.

Each command (terminal table and ``--format json``) runs as its own process on the 1 GB trace and on the 54 MB
sample, with the trace's cache already written (one ``opscope summary TRACE`` into a scratch
``OPSCOPE_CACHE_DIR`` first, per checkout: a cache format bump gives each checkout its own entry). Wall time and
peak RSS (``/usr/bin/time -f %M``) are medians of ``--repeat`` runs. With ``--base DIR`` (a checkout of the code
before, e.g. ``git worktree add /work/wt-base 1310aca``) the same commands also run with ``PYTHONPATH=DIR/src``,
interleaved with this checkout's runs, so the table gives before/after from one run on a shared machine.

This checkout keeps what the analyses compute in the cache entry (``results/``), so it has two figures: ``first``,
the first run of the command after the cache was written (its entry's results/ emptied before it: it computes and
keeps them), and ``kept``, the median of the runs after it (they read them). ``diff T T`` compares the 1 GB trace
with a copy of itself (diff refuses one file twice), ``diff T sample`` with the 54 MB sample.
Goals: gpu, kernels, ops, steps, memory <= 1 s; diff <= 1.5 s; advise <= 2 s;
peak RSS of each <= 0.5x the JSON size.

    python bench/cached.py --base /work/wt-base                # table + bench/out/cached.json
    python bench/cached.py --only gpu,advise --profile          # plus a cProfile top-15 per command
    python bench/cached.py --repeat 1 --skip-big
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
OUT = REPO / "bench" / "out" / "cached.json"
BIG = Path("/tmp/opscope-bench/big-1gb.json.gz")
BIG_JSON_BYTES = 987_625_323  # json_bytes in big-1gb.json.gz.meta.json: the 0.5x RSS goal
SAMPLE = SHARED / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

#: (name, goal seconds on the 1 GB trace, argv after ``opscope``; T = the trace, S = the sample)
COMMANDS: list[tuple[str, float, list[str]]] = [
    ("gpu", 1.0, ["gpu", "T"]),
    ("gpu --idle", 1.0, ["gpu", "T", "--idle"]),
    ("kernels", 1.0, ["kernels", "T"]),
    ("ops", 1.0, ["ops", "T"]),
    ("steps", 1.0, ["steps", "T"]),
    ("memory", 1.0, ["memory", "T"]),
    ("diff T T", 1.5, ["diff", "T", "C"]),
    ("diff T sample", 1.5, ["diff", "T", "S"]),
    ("advise", 2.0, ["advise", "T"]),
]

PROFILED = """\
import cProfile, pstats, sys
sys.argv = ["opscope", *sys.argv[1:]]
from opscope.cli.app import main
prof = cProfile.Profile()
prof.enable()
try:
    main()
except SystemExit:
    pass
prof.disable()
sys.stdout = sys.__stderr__
st = pstats.Stats(prof, stream=sys.stderr)
st.sort_stats("tottime").print_stats(15)
st.sort_stats("cumulative").print_stats(15)
"""


def run(argv: list[str], env: dict[str, str], timeout: float = 900) -> dict:
    """One child process under /usr/bin/time: wall seconds, peak RSS (MiB), exit code, stdout size."""
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *argv], stdin=subprocess.DEVNULL,
                              stdout=out, stderr=subprocess.PIPE, env=env, timeout=timeout)
        wall = time.perf_counter() - t0
        text = rss.read().strip().splitlines()
        out.seek(0, os.SEEK_END)
        size = out.tell()
    kb = int(text[-1]) if text and text[-1].isdigit() else 0
    return {"wall_s": round(wall, 3), "rss_mb": round(kb / 1024, 1), "rc": proc.returncode, "stdout_bytes": size,
            "stderr_tail": proc.stderr[-600:].decode("utf-8", "replace") if proc.returncode else ""}


def env_for(src: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "OPSCOPE_CACHE_DIR": str(cache), "COLUMNS": "200"}


def argv_for(args: list[str], trace: Path, fmt: str, copy: Path | None = None) -> list[str]:
    real = [str(trace) if a == "T" else str(SAMPLE) if a == "S" else str(copy or trace) if a == "C" else a
            for a in args]
    return [sys.executable, "-m", "opscope.cli", *real, *(["-f", "json"] if fmt == "json" else [])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, help="a checkout of the code before (its src/ runs the baseline column)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-big", action="store_true", help="only the 54 MB sample")
    ap.add_argument("--only", help="commands to run, comma-separated names as in the table (e.g. gpu,advise)")
    ap.add_argument("--formats", default="table,json")
    ap.add_argument("--profile", action="store_true", help="also a cProfile top-15 (tottime, cumulative) per command")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/opscope-bench-cached-cache"),
                    help="scratch OPSCOPE_CACHE_DIR (kept between runs: the first open of the 1 GB trace is slow)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    commands = [c for c in COMMANDS if only is None or c[0] in only]
    traces = ([("big 0.99 GB", BIG)] if not a.skip_big and BIG.exists() else []) + [("sample 54 MB", SAMPLE)]
    checkouts = [("after", REPO / "src")] + ([("before", a.base.resolve() / "src")] if a.base else [])
    formats = a.formats.split(",")
    a.cache.mkdir(parents=True, exist_ok=True)
    copies = {}
    for _label, trace in traces:  # a copy of each trace for "diff T T" (diff refuses the same file twice)
        copies[trace] = a.cache / f"copy-{trace.name}"
        if not copies[trace].exists():
            shutil.copyfile(trace, copies[trace])

    for label, trace in traces:  # write the cache entry of every trace, per checkout (each has its own format)
        for path in (trace, copies[trace]):
            for who, src in checkouts:
                r = run([sys.executable, "-m", "opscope.cli", "summary", str(path)], env_for(src, a.cache))
                if r["rc"]:
                    raise SystemExit(f"cache build failed ({who}, {label}): {r['stderr_tail']}")
                print(f"# cache of {path.name} ready for {who} ({r['wall_s']:.1f} s)", file=sys.stderr, flush=True)

    results = []
    for label, trace in traces:
        for name, goal, args in commands:
            if "S" in args and trace == SAMPLE:
                continue  # the sample against itself is "diff T T"
            for fmt in formats:
                argv = argv_for(args, trace, fmt, copies[trace])
                runs: dict[str, list[dict]] = {who: [] for who, _ in checkouts}
                for entry in a.cache.glob("*/results"):  # the first run after the cache write computes them
                    shutil.rmtree(entry, ignore_errors=True)
                runs["first"] = [run(argv, env_for(REPO / "src", a.cache))]
                for _ in range(a.repeat):  # interleaved: both checkouts see the same load on a shared machine
                    for who, src in checkouts:
                        runs[who].append(run(argv, env_for(src, a.cache)))
                row = {"trace": label, "command": name, "format": fmt, "goal_s": goal if "big" in label else None,
                       "argv": ["opscope", *argv[3:]]}
                for who, rs in runs.items():
                    ok = [r for r in rs if r["rc"] == 0]
                    if not ok:
                        row[who] = {"error": rs[0]["stderr_tail"]}
                        continue
                    row[who] = {"wall_s": statistics.median(r["wall_s"] for r in ok),
                                "rss_mb": statistics.median(r["rss_mb"] for r in ok), "runs": rs}
                results.append(row)
                print(line(row), file=sys.stderr, flush=True)
                if a.profile and fmt == formats[0]:
                    prof = subprocess.run([sys.executable, "-c", PROFILED, *argv[3:]],
                                          env=env_for(REPO / "src", a.cache), capture_output=True, text=True)
                    row["profile"] = prof.stderr
                    print(f"\n## cProfile: opscope {' '.join(row['argv'][1:])}\n{prof.stderr}", flush=True)

    print(markdown(results, bool(a.base)))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                             "load": os.getloadavg()},
                                 "repeat": a.repeat, "results": results}, indent=1))


def fmt_case(c: dict | None) -> tuple[str, str]:
    if not c:
        return "", ""
    if "error" in c:
        return "error", ""
    return f"{c['wall_s']:.2f}", f"{c['rss_mb']:,.0f}"


def line(row: dict) -> str:
    first, after, before = (fmt_case(row.get(w)) for w in ("first", "after", "before"))
    return f"{row['trace']:12} {row['command']:14} {row['format']:5} first {first[0]:>6} s {first[1]:>6} MB " \
           f"kept {after[0]:>6} s {after[1]:>6} MB before {before[0]:>6} s {before[1]:>6} MB"


def _speed(r: dict, who: str) -> str:
    ok = all(r.get(w) and "error" not in r[w] for w in (who, "before"))
    return f"{r['before']['wall_s'] / r[who]['wall_s']:.1f}x" if ok else ""


def markdown(results: list[dict], with_base: bool) -> str:
    head = "| trace | command | format | goal s | first: wall s | first: RSS MB | kept: wall s | kept: RSS MB |"
    rule = "|---|---|---|---:|---:|---:|---:|---:|"
    if with_base:
        head += " before: wall s | before: RSS MB | speed-up first | speed-up kept |"
        rule += "---:|---:|---:|---:|"
    lines = [head, rule]
    for r in results:
        first, after, before = (fmt_case(r.get(w)) for w in ("first", "after", "before"))
        goal = f"{r['goal_s']:g}" if r["goal_s"] else ""
        text = (f"| {r['trace']} | {r['command']} | {r['format']} | {goal} | {first[0]} | {first[1]} | {after[0]} | "
                f"{after[1]} |")
        if with_base:
            text += f" {before[0]} | {before[1]} | {_speed(r, 'first')} | {_speed(r, 'after')} |"
        lines.append(text)
    lines.append(f"\nMedians of the runs per cell; peak RSS by /usr/bin/time -f %M; RSS goal on the 1 GB trace: "
                 f"<= {BIG_JSON_BYTES / 2 / 1e6:.0f} MB.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
