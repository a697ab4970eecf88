"""``opscope export`` on the 54 MB sample: wall time and peak RSS of the whole command (read without the cache, then
export), to Chrome JSON and to Perfetto, against ``orjson.loads`` of the same JSON (decompressed in the same child),
plus a read-back check: the Chrome export read by opscope gives the same kernel and op tables as the source.

Each case runs ``--repeat`` times as its own process (median wall time, largest peak RSS). ``--old CHECKOUT`` runs
every export case a second time with that checkout's ``src`` on ``PYTHONPATH``, the two alternating round by
round, and gives both output sizes; ``--cached`` times the export from a warm cache (the read left out: on the
1 GB trace it is most of a cold run); ``--to perfetto`` keeps one format.

    python bench/export.py --repeat 3
    python bench/export.py --old /tmp/old-checkout --to perfetto --cached --repeat 3
    python bench/export.py --old /tmp/old-checkout --to perfetto --cached --repeat 1 --trace BIG --no-readback
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
    ap.add_argument("--old", type=Path, help="another checkout: its export beside this one's, alternating")
    ap.add_argument("--to", choices=["chrome", "perfetto"], help="only this format")
    ap.add_argument("--cached", action="store_true", help="from a warm cache (each checkout its own)")
    ap.add_argument("--no-readback", action="store_true", help="skip the Chrome read-back check")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-export-bench-"))
    checkouts = {"this": ROOT / "src"}
    if args.old is not None:
        checkouts["old"] = args.old.resolve() / "src"
    envs = {who: {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / f"cache-{who}"), "PYTHONPATH": str(src)}
            for who, src in checkouts.items()}
    outs = {"chrome": "out.json", "chrome .gz": "out.json.gz", "perfetto": "out.pftrace"}
    outs = {k: v for k, v in outs.items() if args.to is None or k.split()[0] == args.to}
    cases: dict[str, tuple[list[str], dict[str, str], Path | None]] = {}
    if not args.cached:
        cases["orjson.loads (decompress + parse)"] = ([sys.executable, "-c", ORJSON, str(args.trace)],
                                                      envs["this"], None)
    for who, env in envs.items():
        if args.cached:  # fill the cache once, untimed
            run([sys.executable, "-m", "opscope.cli", "summary", str(args.trace)], env)
        for name, file in outs.items():
            out = tmp / f"{who}-{file}"
            label = f"opscope export --to {name.split()[0]} ({file})" + (f" [{who}]" if args.old else "")
            cases[label] = ([sys.executable, "-m", "opscope.cli", "export", str(args.trace), "--to", name.split()[0],
                             "-o", str(out), "--force"] + ([] if args.cached else ["--no-cache"]), env, out)
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in cases}
    for _ in range(args.repeat):  # round by round: a busy machine slows every case alike
        for name, (cmd, env, _out) in cases.items():
            runs[name].append(run(cmd, env))
    results = {name: (statistics.median(r[0] for r in rs), max(r[1] for r in rs)) for name, rs in runs.items()}
    base = next(iter(results.values()))[0]
    how = "from a warm cache" if args.cached else "no cache"
    print(f"trace: {args.trace.name} ({args.trace.stat().st_size / 1e6:.1f} MB gzip), {how}, median of "
          f"{args.repeat}\n")
    print("| case | wall s | x first | peak RSS MiB | output MB |")
    print("|---|---:|---:|---:|---:|")
    for name, (wall, rss) in results.items():
        out = cases[name][2]
        size = f"{out.stat().st_size / 1e6:.2f}" if out is not None else "-"
        print(f"| {name} | {wall:.2f} | {wall / base:.2f} | {rss} | {size} |")
    if "chrome .gz" in outs and not args.no_readback:
        print()
        print(readback(args.trace, tmp / "this-out.json.gz"))


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
