"""Run the hostile corpus (tests/support/hostile_corpus.py) through every table command and format; print the tally.

    python tools/hostile_fuzz.py [--scale ci|full] [--out DIR] [--jobs 2] [--formats table,csv,json]
                                 [--only CLASS,...] [--per-file] [--corpus kineto|readers] [--seed N]

One child process per file runs every command in turn (tests/support/hostile_driver.py) with a time limit per
command and per file; what each run did is checked by ``support.hostile_corpus.problems`` (traceback, exit code,
error lines, control bytes on stdout, CSV validity and formula cells, JSON validity). Prints one line per file with a
problem, then the totals, the slowest run and the largest peak owned (anonymous) memory over the start-up amount,
relative to the file's size. ``--scale full`` uses the full sizes (2 million names, a 50 MB name, a 2 GiB gzip
bomb...): tens of minutes.
``--corpus readers`` runs the second corpus (tests/support/hostile_formats.py: every reader's numeric edges, NUL and
junk tails, sizes and gzip bombs) with its own command set; ``--seed`` picks its variant (the held-out check uses a
seed not used while fixing). "largest memory" is also given as a ratio to the budget the test allows (200 MiB + 4x
the decompressed content). Exit code 1 when any run had a problem.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import hostile_corpus, hostile_formats
from support.hostile_run import run_corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("ci", "full"), default="ci")
    parser.add_argument("--corpus", choices=("kineto", "readers"), default="kineto")
    parser.add_argument("--seed", type=int, default=1, help="the readers corpus's variant")
    parser.add_argument("--out", type=Path, help="where to write the corpus (default: a temporary folder)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--formats", help="default: table,csv,json (kineto), table,json (readers)")
    parser.add_argument("--only", help="comma-separated classes: " + ",".join(hostile_corpus.GENERATORS)
                        + " (kineto); " + ",".join(hostile_formats.GENERATORS) + " (readers)")
    parser.add_argument("--per-file", action="store_true", help="a line per file: size, slowest run, peak owned memory")
    parser.add_argument("--command-cpu-s", type=int, default=60,
                        help="CPU seconds a command may use before it counts as unbounded work")
    parser.add_argument("--file-timeout", type=float, default=900)
    opts = parser.parse_args()
    root = opts.out or Path(tempfile.mkdtemp(prefix="opscope-hostile-"))
    t0 = time.monotonic()
    readers = opts.corpus == "readers"
    module = hostile_formats if readers else hostile_corpus
    formats = (opts.formats or ",".join(module.FORMATS)).split(",")
    corpus = hostile_formats.build(root, opts.scale, opts.seed) if readers else hostile_corpus.build(root, opts.scale)
    if opts.only:
        corpus = {k: v for k, v in corpus.items() if k in opts.only.split(",")}
    files = [f for fs in corpus.values() for f in fs]
    print(f"corpus: {len(files)} files in {root} ({time.monotonic() - t0:.1f} s to write)", flush=True)
    good = hostile_corpus.good_trace(root)
    if readers:
        good.parent.mkdir(parents=True, exist_ok=True)
        good.write_bytes(hostile_corpus.good_document())
        results = hostile_formats.run(corpus, good, formats, root / "cache", opts.command_cpu_s, opts.file_timeout,
                                      opts.jobs)
    else:
        results = run_corpus(files, good, hostile_corpus.COMMANDS, formats, root / "cache", opts.command_cpu_s,
                             opts.file_timeout, opts.jobs)
    runs = [r for res in results for r in res.runs]
    bad = 0
    for res in results:
        found = res.problems()
        if found:
            bad += 1
            print(f"{res.file.relative_to(root)}:")
            for p in found[:8]:
                print(f"    {p}")
    if opts.per_file:
        print(f"{'file':<44} {'MiB on disk':>11} {'slowest s':>9} {'peak MiB':>9}")
        for res in results:
            slowest = max((r["seconds"] for r in res.runs), default=0.0)
            print(f"{str(res.file.relative_to(root))[-44:]:<44} {_size(res.file) / 2**20:>11.2f} "
                  f"{slowest:>9.2f} {res.peak_kb / 1024:>9.0f}")
    ok = sum(r["rc"] == 0 and not r["problems"] for r in runs)
    clean = sum(r["rc"] == 2 and not r["problems"] for r in runs)
    worst = max(runs, key=lambda r: r["seconds"])
    over = max(results, key=lambda res: res.peak_kb - res.startup_kb)
    print(f"\n{len(runs)} runs on {len(files)} files ({len(module.COMMANDS)} commands x {','.join(formats)}): "
          f"{ok} results, {clean} clean one-line errors, {len(runs) - ok - clean} with a problem; "
          f"{sum(bool(r.hung) for r in results)} files killed for time; {bad} files with a problem")
    print(f"slowest run: {worst['seconds']:.2f} s ({' '.join(worst['args'][:1])} [{worst['fmt']}] on "
          f"{Path(worst['args'][1]).name if worst['args'][0] != 'diff' else worst['args'][1:3]})")
    print(f"largest memory over start-up: {(over.peak_kb - over.startup_kb) / 1024:.0f} MiB on "
          f"{over.file.name} ({_size(over.file) / 2**20:.2f} MiB on disk; start-up "
          f"{over.startup_kb / 1024:.0f} MiB)")
    ratio = max(results, key=lambda res: hostile_formats.budget_ratio(res))
    print(f"largest share of the memory budget (200 MiB + 4x content): {hostile_formats.budget_ratio(ratio):.2f} on "
          f"{ratio.file.name} ({(ratio.peak_kb - ratio.startup_kb) / 1024:.0f} MiB, content "
          f"{hostile_formats.content_size(ratio.file) / 2**20:.1f} MiB)")
    print(f"wall time {time.monotonic() - t0:.0f} s")
    return 1 if bad else 0


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


if __name__ == "__main__":
    sys.exit(main())
