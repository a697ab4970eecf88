"""Reading an ONNX Runtime profile: ``opscope summary FILE --no-cache`` against ``orjson.loads`` of the same file, and
against the plain Chrome reader on it (what the ORT mapping adds), on a synthetic profile and on the real one.

ORT stops recording at 1,000,000 events by default (``Profiler::global_max_num_events_``), so a profile's largest
size is about 1 GB with ORT's ~900-byte node args: the synthetic file repeats the real profile's runs (8 nodes and
2 Session events each, times shifted) up to ``--events``. Each case runs ``--repeat`` times in its own process
(median wall time, largest peak RSS).

    python bench/ingest_onnxruntime.py --events 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from gpu import median_wall_and_rss  # child processes: median wall seconds, largest peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "generated" / "onnxruntime_cpu_profile.json"
ORJSON = "import sys, orjson; orjson.loads(open(sys.argv[1], 'rb').read())"
CHROME = ("import sys; from pathlib import Path; from opscope.ingest.chrome import reader; "
          "reader.read(Path(sys.argv[1]), keep_args=False)")


def synthesize(real: Path, out: Path, events: int) -> int:
    """ORT's lines of one run of the real profile, repeated with shifted times until ``events`` events."""
    lines = [ln.rstrip(",\n") for ln in real.read_text().splitlines()[1:-1]]
    raw = [json.loads(ln) for ln in lines]
    first_run = next(i for i, e in enumerate(raw) if e["name"] == "SequentialExecutor::Execute")
    period = 10  # Execute, model_run and 8 nodes
    template = [(raw[i], lines[i]) for i in range(first_run, first_run + period)]
    t0 = min(e["ts"] for e, _ in template)
    span = max(e["ts"] + e["dur"] for e, _ in template) - t0 + 50
    written = 0
    with out.open("w") as fh:
        fh.write("[\n")
        shift = 0
        while written < events:
            for e, line in template:
                if written == events:
                    break
                ts = e["ts"] + shift
                fh.write(("," if written else "") + line.replace(f'"ts" :{e["ts"]},', f'"ts" :{ts},', 1) + "\n")
                written += 1
            shift += span
        fh.write("]\n")
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-ort-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT / "src")}
    synthetic = tmp / "ort_profile.json"
    n = synthesize(REAL, synthetic, args.events)
    print(f"median of {args.repeat}; synthetic: {n:,} events, {synthetic.stat().st_size / 1e6:.0f} MB\n")
    print("| file | case | wall s | x orjson | peak RSS MiB |")
    print("|---|---|---:|---:|---:|")
    for label, path in (("real (202 events, 0.15 MB)", REAL), (f"synthetic ({n:,} events)", synthetic)):
        cases = {"orjson.loads": [sys.executable, "-c", ORJSON, str(path)],
                 "Chrome reader alone (read, no args)": [sys.executable, "-c", CHROME, str(path)],
                 "opscope summary --no-cache": [sys.executable, "-m", "opscope.cli", "summary", str(path),
                                                "--no-cache"]}
        results = {}
        for name, cmd in cases.items():
            results[name] = median_wall_and_rss(cmd, args.repeat, env)
        base = results["orjson.loads"][0]
        for name, (wall, rss) in results.items():
            print(f"| {label} | {name} | {wall:.2f} | {wall / base:.1f} | {rss} |")
    synthetic.unlink()


if __name__ == "__main__":
    main()
