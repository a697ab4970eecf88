"""Two checkouts side by side: the same commands on the same trace, run alternately, medians of N.

For changes that must not cost speed (a re-layout, a refactor): each command runs as a whole process with
``PYTHONPATH`` pointing at one checkout's ``src``, the two checkouts interleaved run by run so that a busy
machine slows both alike. Cached cases share one warm Parquet cache per checkout; uncached ones pass
``--no-cache``. Reports wall time and peak RSS (``/usr/bin/time``), and the ratio new/old.

    git worktree add /tmp/old-checkout <commit>
    python bench/checkouts.py --old /tmp/old-checkout --trace /tmp/opscope-bench/big-1gb.json.gz --repeat 3
    python bench/checkouts.py --old ... --trace BIG --cached-only --command steps --command "diff BIG-COPY"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import run_child

REPO = Path(__file__).resolve().parent.parent
COMMANDS = (["summary"], ["gpu"], ["gpu", "--format", "json"], ["advise"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="the other checkout (its src/ is imported)")
    ap.add_argument("--new", type=Path, default=REPO, help="this checkout by default")
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cached-only", action="store_true", help="skip the --no-cache runs (minutes each on 1 GB)")
    ap.add_argument("--command", action="append", metavar="WORDS",
                    help="a command to time instead of the default ones, e.g. 'steps' or 'diff OTHER.json.gz' "
                         "(the trace goes after its first word); repeatable")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "checkouts.json")
    args = ap.parse_args(argv)

    caches = {side: Path(tempfile.mkdtemp(prefix=f"opscope-{side}-cache-")) for side in ("old", "new")}

    def env(side: str) -> dict[str, str]:
        root = args.old if side == "old" else args.new
        return {**os.environ, "PYTHONPATH": str(root / "src"), "OPSCOPE_CACHE_DIR": str(caches[side])}

    def cmd(words: list[str], cached: bool) -> list[str]:
        return [sys.executable, "-m", "opscope.cli", words[0], str(args.trace), *words[1:],
                *([] if cached else ["--no-cache"])]

    for side in ("old", "new"):  # build each side's cache once; not measured
        built = run_child(cmd(["summary"], True), env=env(side))
        if built.rc:
            print(f"{side}: could not open the trace: {built.stderr_tail}", file=sys.stderr)
            return 2
    for side in ("old", "new"):  # a command that opens another trace (diff) builds its cache here, unmeasured
        for extra in args.command or ():
            run_child(cmd(extra.split(), True), env=env(side))
    rows = []
    for cached in (True,) if args.cached_only else (True, False):
        for words in [c.split() for c in args.command] if args.command else COMMANDS:
            runs: dict[str, list] = {"old": [], "new": []}
            for _ in range(args.repeat):
                for side in ("old", "new"):
                    runs[side].append(run_child(cmd(words, cached), env=env(side)))
            row = {"command": " ".join(words), "cache": "cached" if cached else "--no-cache"}
            for side in ("old", "new"):
                ok = [r for r in runs[side] if r.rc == 0]
                row[f"{side}_s"] = statistics.median(r.wall_s for r in ok) if ok else None
                row[f"{side}_rss_mb"] = round(statistics.median(r.peak_rss_bytes for r in ok) / 2**20) if ok else None
            row["ratio"] = round(row["new_s"] / row["old_s"], 2) if row["old_s"] and row["new_s"] else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| command | cache | old s | new s | new/old | old RSS MB | new RSS MB |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['command']} | {r['cache']} | {r['old_s']} | {r['new_s']} | {r['ratio']} | {r['old_rss_mb']} | "
              f"{r['new_rss_mb']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"trace": str(args.trace), "repeat": args.repeat, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
