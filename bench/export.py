"""``opscope export`` on the 54 MB sample: wall time and peak RSS of the whole command (read without the cache, then
export), to Chrome JSON and to Perfetto, against ``orjson.loads`` of the same JSON (decompressed in the same child),
plus a read-back check: the Chrome export read by opscope gives the same kernel and op tables as the source.

Each case runs ``--repeat`` times as its own process (median wall time, largest peak RSS).

    python bench/export.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from gpu import wall_and_rss as run  # one child process: wall seconds and peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
ORJSON = "import gzip, sys, orjson; orjson.loads(gzip.decompress(open(sys.argv[1], 'rb').read()))"



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=SAMPLE)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-export-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache")}
    outs = {"chrome": tmp / "out.json", "chrome .gz": tmp / "out.json.gz", "perfetto": tmp / "out.pftrace"}
    cases = {"orjson.loads (decompress + parse)": [sys.executable, "-c", ORJSON, str(args.trace)]}
    for name, out in outs.items():
        cases[f"opscope export --to {name.split()[0]} ({out.name})"] = [
            sys.executable, "-m", "opscope.cli", "export", str(args.trace), "--to", name.split()[0], "-o", str(out),
            "--force", "--no-cache"]
    results = {}
    for name, cmd in cases.items():
        runs = [run(cmd, env) for _ in range(args.repeat)]
        results[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
    base = results["orjson.loads (decompress + parse)"][0]
    print(f"trace: {args.trace.name} ({args.trace.stat().st_size / 1e6:.1f} MB gzip), median of {args.repeat}\n")
    print("| case | wall s | x orjson | peak RSS MiB | output MB |")
    print("|---|---:|---:|---:|---:|")
    for (name, (wall, rss)), out in zip(results.items(), [None, *outs.values()]):
        size = f"{out.stat().st_size / 1e6:.1f}" if out is not None else "-"
        print(f"| {name} | {wall:.2f} | {wall / base:.2f} | {rss} | {size} |")
    print()
    print(readback(args.trace, outs["chrome .gz"]))


def readback(source: Path, exported: Path) -> str:
    """Whether the export reads back with the source's kernel and op tables."""
    sys.path.insert(0, str(ROOT / "src"))
    from opscope.analyses.kernels import kernel_table
    from opscope.analyses.ops import op_table
    from opscope.ingest import open_trace

    a, b = open_trace(source, use_cache=False), open_trace(exported, use_cache=False)
    kernels = kernel_table(a).sort_by("name").equals(kernel_table(b).sort_by("name"))
    ops = op_table(a).sort_by("name").equals(op_table(b).sort_by("name"))
    return (f"read-back: {a.events.num_rows:,} events -> {b.events.num_rows:,} (opscope's marks added); kernel "
            f"table equal: {kernels}; op table equal: {ops}")


if __name__ == "__main__":
    main()
