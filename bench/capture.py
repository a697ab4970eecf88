"""Overhead of capture: step time under ``opscope record`` (and ``opscope numerics``) vs the bare program.

Two programs (``--program``): ``demo``, ``examples/train_demo.py`` (the demo's MobileNetV2-style model, CPU:
op-heavy), and ``heavy``, ``bench/python_heavy.py`` (a small MLP fed by a Dataset whose ``__getitem__`` makes
every element in Python: Python-heavy, where tracing every Python call costs the most). Every case runs as
its own process through opscope's runner, which timestamps each ``optimizer.step()``:

* bare: the runner only times the steps (no profiler);
* record (defaults: shapes, memory, modules, FLOPs; no Python stacks), record --stack (the rich mode)
  and record --no-shapes --no-memory: median of the recorded (active) steps vs the
  same steps of the bare run, and the recorded vs unrecorded ratio *within* each recording (what record,
  summary and advise report), and the time the profiler spent between steps (stopping and saving);
* numerics: the whole program's wall time under ``opscope numerics`` vs the bare program's
  (numerics records statistics of every op's output, so it is a debugging mode, not a profiler).

    python bench/capture.py                                   # demo program, about 2 minutes here
    python bench/capture.py --program heavy --steps 10 --repeat 1 --skip-numerics
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from opscope.analyses.recording import step_inflation  # noqa: E402
from opscope.capture.launch import parse_command, run_program  # noqa: E402
from opscope.capture.session import RecordOptions  # noqa: E402

PROGRAMS = {"demo": ROOT / "examples" / "train_demo.py", "heavy": ROOT / "bench" / "python_heavy.py"}
OUT = ROOT / "bench" / "out" / "capture.json"


def steps_of(run_info: dict, which: list[int] | None) -> list[int]:
    """Durations of the given step numbers (all complete steps when None); durations[j] is step j + 1."""
    durations = run_info["step_times_ns"]
    if which is None:
        return durations
    return [durations[s - 1] for s in which if 1 <= s <= len(durations)]


def run_case(argv: list[str], options: RecordOptions, mode: str) -> dict:
    target = parse_command(argv)
    with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
        t0 = time.perf_counter()
        run = run_program(target, Path(tmp) / "out", options, mode=mode, quiet=True)
        wall = time.perf_counter() - t0
    if run.exit_code != 0 or run.info is None:
        raise SystemExit(f"{mode} run failed with exit code {run.exit_code}")
    return {"wall_s": wall, "info": run.info}


def timed_process(cmd: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir(), env=env)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {r.returncode}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=14, help="training steps per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; medians are reported")
    ap.add_argument("--skip-numerics", action="store_true", help="only the record cases")
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="demo", help="the training script to run")
    ap.add_argument("--image", type=int, default=128, help="demo: input image size (batch 8, 3 channels)")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads for every case (1 leaves a core for the rest of the machine)")
    args = ap.parse_args()
    program = ["python", str(PROGRAMS[args.program]), "--steps", str(args.steps)]
    if args.program == "demo":
        program += ["--image", str(args.image)]
    threads = {"intra_op_threads": args.threads, "inter_op_threads": 1}
    # Skip 1, warm up 1, record about half of the rest: the other half is each run's unrecorded baseline.
    active = max(1, (args.steps - 2) // 2)
    window = dict(wait=1, warmup=1, active=active, **threads)
    recorded = list(range(2, 2 + active))
    cases = {
        "bare": (RecordOptions(**threads), "time"),
        "record (defaults)": (RecordOptions(**window), "record"),
        "record --stack": (RecordOptions(**window, stack=True), "record"),
        "record --no-shapes --no-memory": (RecordOptions(**window, shapes=False, memory=False), "record"),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    within: dict[str, list[float]] = {name: [] for name in cases}  # recorded / unrecorded steps, same run
    saving: dict[str, list[float]] = {name: [] for name in cases}  # the profiler's time between steps, s
    walls_rec: dict[str, list[float]] = {name: [] for name in cases}
    for rep in range(args.repeat):
        for name, (options, mode) in cases.items():
            r = run_case(program, options, mode)
            info = r["info"]
            if mode == "record" and info["recorded_steps"] != recorded:
                raise SystemExit(f"{name}: recorded steps {info['recorded_steps']}, expected {recorded}")
            median = statistics.median(steps_of(info, recorded))
            results[name].append(median / 1e6)
            inflation = step_inflation(info) if mode == "record" else None
            if inflation is not None:
                within[name].append(inflation.ratio)
            saving[name].append((info.get("profiler_ns") or 0) / 1e9)
            walls_rec[name].append(r["wall_s"])
            print(f"[{rep + 1}/{args.repeat}] {name}: median step {median / 1e6:.2f} ms over steps "
                  f"{recorded[0]}-{recorded[-1]}"
                  + (f", {inflation.ratio:.2f}x the unrecorded steps of the same run ({inflation.verdict})"
                     if inflation else "")
                  + f", profiler between steps {saving[name][-1]:.1f} s, process {r['wall_s']:.1f} s", flush=True)

    numerics_cmd = [sys.executable, "-m", "opscope.cli", "numerics", "--output",
                    str(Path(tempfile.mkdtemp(prefix="opscope-bench-num-")) / "n"), "--limit", "1", "--",
                    sys.executable, *program[1:]]
    bare_cmd = [sys.executable, *program[1:]]
    walls: dict[str, list[float]] = {"bare program": [], "opscope numerics": []}
    for rep in range(0 if args.skip_numerics else args.repeat):
        walls["bare program"].append(timed_process(bare_cmd, args.threads))
        numerics_cmd[5] = str(Path(tempfile.mkdtemp(prefix="opscope-bench-num-")) / "n")
        walls["opscope numerics"].append(timed_process(numerics_cmd, args.threads))
        print(f"[{rep + 1}/{args.repeat}] wall: bare {walls['bare program'][-1]:.2f} s, numerics "
              f"{walls['opscope numerics'][-1]:.2f} s", flush=True)

    bare = statistics.median(results["bare"])
    rows = []
    for name, values in results.items():
        m = statistics.median(values)
        rows.append({"case": name, "median_step_ms": round(m, 2), "vs_bare": round(m / bare, 2),
                     "recorded_vs_unrecorded": round(statistics.median(within[name]), 2) if within[name] else None,
                     "profiler_s": round(statistics.median(saving[name]), 1),
                     "process_s": round(statistics.median(walls_rec[name]), 1),
                     "runs_ms": [round(v, 2) for v in values]})
    wall_bare = statistics.median(walls["bare program"]) if walls["bare program"] else None
    for name, values in walls.items() if wall_bare else ():
        m = statistics.median(values)
        rows.append({"case": f"{name} (whole process)", "wall_s": round(m, 2),
                     "ratio": round(m / wall_bare, 2), "runs_s": [round(v, 2) for v in values]})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    out = OUT.with_name(f"capture-{args.program}.json")
    out.write_text(json.dumps({"program": args.program, "steps": args.steps, "image": args.image,
                               "threads": args.threads, "recorded_steps": recorded, "rows": rows}, indent=2))
    print("\n| case | median recorded step (ms) | vs bare | recorded / unrecorded (same run) | profiler between "
          "steps (s) | process (s) |\n|---|---:|---:|---:|---:|---:|")
    for r in rows[:len(results)]:
        ratio = f"{r['recorded_vs_unrecorded']:.2f}x" if r["recorded_vs_unrecorded"] else "-"
        print(f"| {r['case']} | {r['median_step_ms']:.2f} | {r['vs_bare']:.2f}x | {ratio} | {r['profiler_s']:.1f} | "
              f"{r['process_s']:.1f} |")
    if wall_bare:
        print("\n| case | wall s | vs bare |\n|---|---:|---:|")
    for r in rows[len(results):]:
        print(f"| {r['case']} | {r['wall_s']:.2f} | {r['ratio']:.2f}x |")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
