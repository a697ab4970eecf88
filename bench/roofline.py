"""What `opscope roofline` costs on a 1 GB trace whose ops record their shapes: HTA's big-trace recipe
(bench/ingest.py's make_big_trace: a real trace's events repeated, shifted in time) applied to TraceLens's owlv2 H100
trace, opened once into the cache, then `opscope roofline TRACE -f json` timed warm (median with the range) with its
peak RSS, and what share of the device time has a work model.

    python bench/roofline.py [--repeat 3] [--size-gb 1.0] [SHARED_TRACES]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import make_big_trace

SOURCE = "tracelens/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, int(done.stderr.strip().splitlines()[-1]), done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared", nargs="?", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "opscope-bench")
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    dest = args.work_dir / f"roofline-{args.size_gb:g}gb.json.gz"
    meta = make_big_trace(Path(args.shared) / SOURCE, dest, args.size_gb)
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(args.work_dir / "roofline-cache")}
    cmd = [sys.executable, "-m", "opscope.cli", "roofline", str(dest), "-f", "json"]
    first, _, _ = timed(cmd, env)
    runs = [timed(cmd, env) for _ in range(args.repeat)]
    seconds = [s for s, _, _ in runs]
    rows = json.loads(runs[-1][2].stdout)
    coverage = next((line for line in runs[-1][2].stderr.splitlines() if "work model hold" in line), "")
    print(f"{dest.name}: {meta['events']:,} events, {meta['json_bytes'] / 1e9:.2f} GB of JSON; first run {first:.1f} s "
          f"(opens the trace), warm {statistics.median(seconds):.2f} s ({min(seconds):.2f}-{max(seconds):.2f}, "
          f"{args.repeat} runs), peak RSS {max(r for _, r, _ in runs) / 1024:.0f} MiB; {len(rows)} rows")
    print(coverage)


if __name__ == "__main__":
    main()
