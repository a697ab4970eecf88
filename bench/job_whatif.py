"""What `opscope whatif JOB` costs and how it predicts: a job of N ranks made from one real Kineto rank trace
(tests/support/jobgen.py: HTA's nccl_parser_config, a straggler, jitter, clock offsets), and the hand-drawn job whose
one rank arrives late at every collective (tests/support/late_rank.py).

    python bench/job_whatif.py [--ranks 8] [--repeat 5] [SHARED_TRACES]

Prints the seconds of `opscope whatif DIR -c comm=0.5 -f json` (a fresh cache: the first run reads the ranks; then
warm runs, median with the range), the job graph's nodes and joins, the no-change replay's worst error over every
rank and step, and, for the late-rank job, the prediction without the late rank's wait (`-c idle@rank:1=0`) against
the same job written without it.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.jobgen import make_job
from support.late_rank import write_late_rank_job


def whatif(directory: Path, change: str, cache: Path) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "opscope.cli", "whatif", str(directory), "-c", change, "-f", "json"],
                          capture_output=True, text=True, env={**os.environ, "OPSCOPE_CACHE_DIR": str(cache)},
                          check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared", nargs="?", default=str(Path(__file__).resolve().parent.parent.parent / "shared"
                                                           / "traces"))
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = Path(args.shared) / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
        make_job(base, root / "job", args.ranks, straggler=1, delay_ns=2_000_000, jitter_ns=100_000, seed=1,
                 offsets_ns=[rank * 7_000_000 for rank in range(args.ranks)])
        first, rows = whatif(root / "job", "comm=0.5", root / "cache")
        warm = [whatif(root / "job", "comm=0.5", root / "cache")[0] for _ in range(args.repeat)]
        error = max(abs(r["replayed_ns"] - r["measured_ns"]) / r["measured_ns"] for r in rows)
        print(f"{args.ranks} ranks, {len(rows)} rank-steps: first run {first:.2f} s (reads the ranks), warm "
              f"{statistics.median(warm):.2f} s ({min(warm):.2f}-{max(warm):.2f}, {args.repeat} runs); worst "
              f"no-change replay error {100 * error:.2f}%")
        write_late_rank_job(root / "late", stall_us=300)
        write_late_rank_job(root / "on_time", stall_us=0)
        _, predicted = whatif(root / "late", "idle@rank:1=0", root / "cache")
        _, truth = whatif(root / "on_time", "idle=1", root / "cache")
        measured = {(r["rank"], r["step"]): r["measured_ns"] for r in truth}
        worst = max(abs(r["predicted_ns"] - measured[(r["rank"], r["step"])]) / measured[(r["rank"], r["step"])]
                    for r in predicted)
        print(f"late-rank job: predicted without rank 1's wait against the job without it: worst error "
              f"{100 * worst:.2f}% over {len(predicted)} rank-steps (measured {sorted(set(measured.values()))} ns)")


if __name__ == "__main__":
    main()
