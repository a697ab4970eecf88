"""``opscope report`` of two checkouts side by side (round by round, each with its own cache directory so that
neither removes the other's kept results), on the 54 MB sample and the ~1 GB trace: wall time (median of
``--repeat``), peak RSS and the file's size; then the timeline section alone, in process, on each trace.

    python bench/report_timeline.py --base /path/to/other/checkout/src --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpu import wall_and_rss as run  # one child process: wall seconds and peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
TRACES = {"sample": ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz",
          "1 GB": Path("/tmp/opscope-bench/big-1gb.json.gz")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other checkout's src directory")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-timeline-bench-"))
    sides = {"base": (str(args.base), tmp / "cache-base"), "this": (str(ROOT / "src"), tmp / "cache-this")}
    traces = {k: p for k, p in TRACES.items() if p.exists()}
    for src, cache in sides.values():  # fill each side's cache (not timed)
        env = {**os.environ, "PYTHONPATH": src, "OPSCOPE_CACHE_DIR": str(cache)}
        for t in traces.values():
            run([sys.executable, "-m", "opscope.cli", "report", str(t), "-o", str(tmp / "warm.html"), "--force"], env)
    results: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for _ in range(args.repeat):
        for tname, t in traces.items():
            for side, (src, cache) in sides.items():
                env = {**os.environ, "PYTHONPATH": src, "OPSCOPE_CACHE_DIR": str(cache)}
                out = tmp / f"{side}-{tname.replace(' ', '')}.html"
                wall, rss = run([sys.executable, "-m", "opscope.cli", "report", str(t), "-o", str(out), "--force"],
                                env)
                results.setdefault((tname, side), []).append((wall, rss, out.stat().st_size))
    print("| trace | checkout | wall s | peak RSS MiB | report MB |\n|---|---|---:|---:|---:|")
    for (tname, side), rs in results.items():
        walls = [r[0] for r in rs]
        print(f"| {tname} | {side} | {statistics.median(walls):.2f} ({', '.join(f'{w:.2f}' for w in walls)}) | "
              f"{max(r[1] for r in rs)} | {rs[-1][2] / 1e6:.2f} |")
    os.environ["OPSCOPE_CACHE_DIR"] = str(sides["this"][1])
    sys.path.insert(0, str(ROOT / "src"))
    from opscope.advise.context import AdviceContext
    from opscope.compose.page.timeline import timeline
    from opscope.ingest import open_trace

    for tname, t in traces.items():
        times = []
        for _ in range(args.repeat):
            trace = open_trace(t)
            start = time.perf_counter()
            timeline(AdviceContext(trace))
            times.append(time.perf_counter() - start)
        print(f"timeline section, {tname}: {statistics.median(times):.2f} s ({', '.join(f'{x:.2f}' for x in times)})")


if __name__ == "__main__":
    main()
