"""advise --measure's closed loop on a real program: a CPU program whose DataLoader waits is recorded without workers,
advise proposes workers and predicts the step time with them (``whatif loader=...``), and re-runs the program with
them (opscope's runner sets ``num_workers``); the prediction against the re-run.

    python bench/advise_measure.py [--rounds 3] [--sleep-ms 5] [--batch 4] [--steps 40] [--active 8] [--reruns 2]

Each round records the program with ``opscope record --stack --active 8`` (the Python frames show that the loader
sleeps, so the input-pipeline rule proposes workers without a free core; ``--intra-op-threads`` at the core count, so
that no core counts as free and the proposal is the same 2 workers on every machine; the prediction is the median of
the recorded steps, 8 of them so that a busy moment of the machine does not set it), then runs ``opscope advise REC
--measure --rules input-pipeline`` and prints the predicted and re-run steady-state step times and their ratio; then
the median of the ratios and their range. The program: each sample sleeps ``--sleep-ms``, ``--batch`` samples a
batch, and a small model's forward and backward passes (4 per step, one thread) are the rest of the step.
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
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)
sleep_s = float(os.environ.get("SLEEP_MS", "5")) / 1000
batch = int(os.environ.get("BATCH", "4"))
steps = int(os.environ.get("STEPS", "40"))

class Slow(Dataset):
    def __len__(self):
        return batch * steps
    def __getitem__(self, i):
        time.sleep(sleep_s)
        return torch.randn(32), i % 2

model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Slow(), batch_size=batch):
    for _ in range(4):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
    opt.step()
"""


def opscope(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        raise SystemExit(f"opscope {' '.join(args)} failed: {done.stderr[-800:]}")
    return done


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleep-ms", type=float, default=5, help="each sample's sleep in __getitem__")
    parser.add_argument("--batch", type=int, default=4, help="samples per batch")
    parser.add_argument("--steps", type=int, default=40, help="steps (batches) the program makes")
    parser.add_argument("--active", type=int, default=8, help="recorded steps (the prediction is their median)")
    parser.add_argument("--reruns", type=int, default=2, help="re-runs per round (advise --reruns)")
    args = parser.parse_args()
    env = {"SLEEP_MS": str(args.sleep_ms), "BATCH": str(args.batch), "STEPS": str(args.steps)}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="opscope-advise-measure-") as tmp:
        work = Path(tmp)
        (work / "program.py").write_text(PROGRAM)
        for i in range(args.rounds):
            out = work / f"rec-{i}"
            opscope("record", "--stack", "--no-memory", "--active", str(args.active), "--intra-op-threads",
                    str(cores()), "-o", str(out), "--",
                    sys.executable, "program.py", cwd=work, env=env)
            done = opscope("advise", str(out), "--measure", "--rules", "input-pipeline", "--reruns",
                           str(args.reruns), "--format", "json", cwd=work, env=env)
            findings = [f for f in json.loads(done.stdout) if f.get("measured")]
            if not findings:
                raise SystemExit(f"round {i + 1}: no finding was re-run: {done.stderr[-800:]}")
            m = findings[0]["measured"]
            if m["failed"] or m["predicted_step_ns"] is None:
                raise SystemExit(f"round {i + 1}: {m['failed'] or 'no prediction'}")
            ratio = m["predicted_step_ns"] / m["step_ns"]
            ratios.append(ratio)
            print(f"round {i + 1}: recorded {m['baseline_step_ns'] / 1e6:.2f} ms/step without workers; with "
                  f"{m['applied']}: predicted {m['predicted_step_ns'] / 1e6:.2f} ms (from recorded steps of "
                  f"{m['trace_step_ns'] / 1e6:.2f} ms), re-run {m['step_ns'] / 1e6:.2f} "
                  f"ms (p10-p90 {m['p10_ns'] / 1e6:.2f}-{m['p90_ns'] / 1e6:.2f}, {m['steps']} steps): "
                  f"predicted/re-run {ratio:.3f}")
    print(f"predicted/re-run: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) over "
          f"{len(ratios)} rounds; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
