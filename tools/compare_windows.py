"""How opscope's GPU window differs from HTA's and TraceLens's, measured on real traces.

    python tools/compare_windows.py ../shared/traces [--hta PYTHON] [--tracelens PYTHON] [--only SUBSTRING]

For every trace with device work, one markdown row: opscope's window and idle share (busiest device; the
window less unseen busy time), HTA 0.5.0's ``get_temporal_breakdown`` (span of the kernels, rank 0) and
TraceLens's ``get_df_gpu_timeline`` (span of the kernels linked to ops). The reference tools run live in their
own interpreters (dev-only; skipped when absent): ``--hta`` (default /tmp/htavenv/bin/python) and
``--tracelens`` (default /tmp/tlvenv/bin/python). docs/fidelity.md quotes the output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

HTA_CODE = """
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
row = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False).iloc[0]
print(json.dumps({"span_us": float(row["kernel_time(us)"]), "idle_pct": float(row["idle_time_pctg"])}))
"""

TRACELENS_CODE = """
import contextlib, io, json, sys, warnings
warnings.filterwarnings("ignore")
from TraceLens import TreePerfAnalyzer
with contextlib.redirect_stdout(io.StringIO()):
    df = TreePerfAnalyzer.from_file(sys.argv[1]).get_df_gpu_timeline()
t = dict(zip(df["type"], df["time ms"]))
print(json.dumps({"span_us": t["total_time"] * 1000, "idle_pct": 100 * t["idle_time"] / t["total_time"]}))
"""


def opscope_row(path: Path) -> dict | None:
    from opscope.analyses.gpu import GpuAnalysis
    from opscope.ingest import open_trace

    analysis = GpuAnalysis(open_trace(path, use_cache=False))
    if not analysis.has_work:
        return None
    devices = [r for r in analysis.breakdown().to_pylist() if r["stream"] is None]
    top = max(devices, key=lambda r: r["busy_ns"])
    idle_pct = 100 * top["idle_ns"] / top["window_ns"] if top["window_ns"] else None
    return {"steps": analysis.work.steps, "devices": len(devices), "window_us": top["window_ns"] / 1000,
            "idle_pct": idle_pct, "unseen_us": top["unseen_busy_ns"] / 1000}


def reference(python: Path, code: str, target: Path) -> dict | None:
    if not python.exists():
        return None
    try:
        done = subprocess.run([str(python), "-c", code, str(target)], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:60]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell(result: dict | None) -> str:
    if result is None:
        return "-"
    if "error" in result:
        return f"fails ({result['error'].split(':')[0]})"
    return f"{result['span_us'] / 1000:.3f} ms, {result['idle_pct']:.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--hta", type=Path, default=Path("/tmp/htavenv/bin/python"))
    parser.add_argument("--tracelens", type=Path, default=Path("/tmp/tlvenv/bin/python"))
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print("| trace | steps | opscope window, idle (unseen busy) | HTA span, idle | TraceLens span, idle |")
    print("|---|---|---|---|---|")
    for path in sorted(args.folder.rglob("*.json*")):
        relative = path.relative_to(args.folder).as_posix()
        if args.only not in relative:
            continue
        try:
            ours = opscope_row(path)
        except Exception:  # not a trace opscope reads (a non-trace JSON of ../shared): not a row
            continue
        if ours is None:
            continue
        with tempfile.TemporaryDirectory() as folder:  # HTA reads every trace in a directory
            shutil.copy(path, folder)
            hta = reference(args.hta, HTA_CODE, Path(folder))
        tracelens = reference(args.tracelens, TRACELENS_CODE, path)
        unseen = f" ({ours['unseen_us'] / 1000:.3f} ms)" if ours["unseen_us"] else ""
        devices = f", {ours['devices']} devices" if ours["devices"] > 1 else ""
        idle = "-" if ours["idle_pct"] is None else f"{ours['idle_pct']:.2f}%"
        print(f"| {relative}{devices} | {ours['steps']} | {ours['window_us'] / 1000:.3f} ms, {idle}{unseen} "
              f"| {cell(hta)} | {cell(tracelens)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
