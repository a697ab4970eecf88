"""A what-if prediction checked against a re-run: a CPU program recorded with a slow region, its predicted step time
without the region (``opscope whatif -c op:REGION=0``), and the same program recorded again without it.

    python bench/whatif_rerun.py [--rounds 3] [--sleep-ms 20] [--region busy|sleep] [--active 20]

Each round records the program with the region (``SLOW=1``) and without it (``SLOW=0``) with ``opscope record``
(``--active`` profiled steps), predicts the second from the first, and prints the predicted and re-run median step
times and their ratio; then the median of the ratios and their range. The region is host work in Python (or a
sleep), the rest of the step a small model's forward and backward passes on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """
import os, time, torch
torch.set_num_threads(1)  # one core: the step does not swing with what else the machine runs
slow = os.environ.get("SLOW") == "1"
sleep_s = float(os.environ.get("SLEEP_MS", "30")) / 1000
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
for step in range(int(os.environ.get("STEPS", "30"))):
    for _ in range(16):
        loss = model(x).square().mean()
        loss.backward()
    if slow:
        with torch.profiler.record_function("slow_region"):
            if os.environ.get("REGION") == "sleep":
                time.sleep(sleep_s)
            else:  # host work (a Python loop): the core stays busy, as in a slow preprocessing step
                end = time.perf_counter() + sleep_s
                while time.perf_counter() < end:
                    pass
    opt.step()
    opt.zero_grad()
"""


def opscope(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        raise SystemExit(f"opscope {' '.join(args)} failed: {done.stderr[-600:]}")
    return done.stdout


def record(script: Path, out: Path, slow: bool, sleep_ms: int, region: str, active: int) -> Path:
    opscope("record", "--active", str(active), "--no-memory", "-o", str(out), "--", sys.executable, str(script),
            env={"SLOW": "1" if slow else "0", "SLEEP_MS": str(sleep_ms), "REGION": region,
                 "STEPS": str(active + 10)})
    return next(out.glob("*.pt.trace.json*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleep-ms", type=int, default=20, help="the region's length")
    parser.add_argument("--active", type=int, default=20, help="profiled steps per recording (their median is used)")
    parser.add_argument("--region", choices=("busy", "sleep"), default="busy",
                        help="host work in Python (busy) or a wait (sleep: the core idles, and on a shared machine "
                             "the work after it may run slower)")
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="opscope-whatif-") as tmp:
        script = Path(tmp) / "program.py"
        script.write_text(PROGRAM)
        for i in range(args.rounds):
            slow = record(script, Path(tmp) / f"slow-{i}", True, args.sleep_ms, args.region, args.active)
            fast = record(script, Path(tmp) / f"fast-{i}", False, args.sleep_ms, args.region, args.active)
            rows = json.loads(opscope("whatif", str(slow), "-c", "op:slow_region=0", "-f", "json"))
            predicted = statistics.median(r["predicted_ns"] for r in rows)
            measured_slow = statistics.median(r["measured_ns"] for r in rows)
            rerun = statistics.median(r["dur_ns"] for r in json.loads(opscope("steps", str(fast), "-f", "json")))
            ratios.append(predicted / rerun)
            print(f"round {i + 1}: with the region {measured_slow / 1e6:.2f} ms, predicted without "
                  f"{predicted / 1e6:.2f} ms, re-run without {rerun / 1e6:.2f} ms: predicted/re-run "
                  f"{predicted / rerun:.3f}")
    print(f"predicted/re-run: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) over "
          f"{len(ratios)} rounds; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
