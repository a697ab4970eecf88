"""``opscope report`` from the cache: the whole command's wall time, peak RSS and the file's size, on the 54 MB
sample and on the ~1 GB trace ``bench/ingest.py`` generates, against ``opscope summary`` of the same cached trace
in the same run (the cheapest whole command: start-up, opening the cache, one analysis).

Each trace is read once first (that fills the cache; not timed), then the cases alternate, ``--repeat`` times each
(median wall time, largest peak RSS). The Vega bundle is built once before (cached like the trace).

    python bench/report.py --repeat 3                 # the sample and, if present, /tmp/opscope-bench/big-1gb.json.gz
    python bench/report.py --big /path/to/big.json.gz
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu import wall_and_rss as run  # one child process: wall seconds and peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
BIG = Path("/tmp/opscope-bench/big-1gb.json.gz")



def bench(trace: Path, repeat: int, env: dict, out: Path) -> list[str]:
    opscope = [sys.executable, "-m", "opscope.cli"]
    run([*opscope, "summary", str(trace)], env)  # fills the cache
    cases = {"opscope summary (cached)": [*opscope, "summary", str(trace)],
             "opscope report (cached)": [*opscope, "report", str(trace), "-o", str(out), "--force"]}
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, cmd in cases.items():
            runs[name].append(run(cmd, env))
    base = statistics.median(r[0] for r in runs["opscope summary (cached)"])
    lines = []
    for name, rs in runs.items():
        wall = statistics.median(r[0] for r in rs)
        size = f"{out.stat().st_size / 1e6:.2f}" if "report" in name else "-"
        every = ", ".join(f"{r[0]:.2f}" for r in rs)
        lines.append(f"| {trace.name} | {name} | {wall:.2f} ({every}) | {wall / base:.2f} | "
                     f"{max(r[1] for r in rs)} | {size} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", type=Path, default=BIG, help="the ~1 GB trace (skipped when absent)")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-report-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache")}
    subprocess.run([sys.executable, "-c", "from opscope.render.html.document import vega_bundle; vega_bundle()"],
                   env=env, check=True)
    traces = [SAMPLE] + ([args.big] if args.big.exists() and not args.skip_big else [])
    print(f"median of {args.repeat} (each run in brackets); ratio = wall / opscope summary's wall in the same run\n")
    print("| trace | case | wall s | x summary | peak RSS MiB | report MB |")
    print("|---|---|---:|---:|---:|---:|")
    for trace in traces:
        for line in bench(trace, args.repeat, env, tmp / f"{trace.name}.html"):
            print(line, flush=True)


if __name__ == "__main__":
    main()
