"""Owned memory: the peak anonymous memory (and wall time) of every cached command on the 1 GB trace.

What a command owns is its anonymous memory (``RssAnon`` of ``/proc/PID/status``: its heaps, Python's, the C
library's and Arrow's), not its resident set: the pages of a mapped cache file are the kernel's page cache, clean
and shared, and count in RSS only while mapped. This script runs each command as a whole process and samples
``RssAnon`` (and ``RssFile``, for comparison) of the process and all its descendants, summed (while it has children,
their proportional shares: see :func:`owned`), every ``--period-ms`` (default 3 ms), reporting the largest sum seen
(a sampled peak: a spike shorter than the period can be missed), the wall time around the child, and the child's
CPU seconds (``wait4``'s rusage).

Variants (``--variant LABEL=ENV``, ENV being ``NAME=VALUE`` pairs separated by spaces, ``PYTHONPATH=DIR/src`` for
another checkout) run interleaved, round by round with the order rotated, so that on a shared machine every variant
sees the same load; each figure is the median of ``--repeat`` runs with the range. ``--mode first`` (default) empties
the entries' ``results/`` before each run, as for the first command after the cache write (it computes its analyses);
``--mode kept`` leaves them (it reads what the run before kept). ``first open`` is no cached command: ``summary`` into
an empty cache directory (it parses the trace and writes the entry).

Library cases (``lib:NAME``) are the same work as a command, done by a program that imports pyarrow first and then
calls ``opscope.load(..., frames="arrow")`` and the ``Loaded`` method; ``lib-tuned:NAME`` calls
``opscope.runtime.tune()`` after importing pyarrow, ``lib-early:NAME`` before: to compare library use with the
command.

    python bench/owned_memory.py                                   # every command, 5 runs each
    python bench/owned_memory.py --only advise,diff --repeat 7 --variant base= --variant 'off=OPSCOPE_X=1'
    python bench/owned_memory.py --only kernels,lib:kernels,lib-tuned:kernels

Every process runs with its checkout's bytecode compiled beforehand, as ``bench/goals.py`` runs them (an installed
package has it; without it, a checkout whose modules are compiled again in each run shows ~0.1-0.2 s more CPU per
command, whatever its code).

The 1 GB trace is ``/tmp/opscope-bench/big-1gb.json.gz`` (``bench/ingest.py`` makes it); ``diff`` compares it with a
copy of itself. Writes ``bench/out/owned_memory.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from goals import compile_bytecode, environment

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out" / "owned_memory.json"
BIG = Path("/tmp/opscope-bench/big-1gb.json.gz")
MIB = 1 << 20

#: (name, argv after ``opscope``; T = the trace, C = its copy, H = a scratch .html)
COMMANDS: list[tuple[str, list[str]]] = [
    ("summary", ["summary", "T", "-f", "json"]),
    ("ops", ["ops", "T", "-f", "json"]),
    ("kernels", ["kernels", "T", "-f", "json"]),
    ("kernels --details", ["kernels", "T", "--details", "-f", "json"]),
    ("steps", ["steps", "T", "-f", "json"]),
    ("gpu", ["gpu", "T", "-f", "json"]),
    ("gpu --idle", ["gpu", "T", "--idle", "-f", "json"]),
    ("memory", ["memory", "T", "-f", "json"]),
    ("advise", ["advise", "T", "-f", "json"]),
    ("diff", ["diff", "T", "C", "-f", "json"]),
    ("critical-path", ["critical-path", "T", "-f", "json"]),
    ("whatif", ["whatif", "T", "-c", "sync=0", "-f", "json"]),
    ("roofline", ["roofline", "T", "-f", "json"]),
    ("report", ["report", "T", "-o", "H", "--force"]),
    # not a cached command: the first open (parse, complete, write the cache entry) into an empty cache directory
    ("first open", ["summary", "T", "-f", "json"]),
]

#: the Loaded method of each library case (the work of the command of the same name)
LIBRARY = {"summary": "summary()", "ops": "ops()", "kernels": "kernels()", "steps": "steps()",
           "gpu": "gpu_breakdown()", "memory": "memory_peaks()", "advise": "advise()"}

LIBRARY_CODE = """\
import sys
if sys.argv[1] == "early":  # tuned before pyarrow is imported
    import opscope.runtime
    opscope.runtime.tune()
import pyarrow  # (first, as a notebook that used Arrow before opscope would)
import opscope
if sys.argv[1] == "tuned":  # tuned after
    import opscope.runtime
    opscope.runtime.tune()
loaded = opscope.load(sys.argv[2], frames="arrow")
result = eval("loaded." + sys.argv[3])
"""


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (every thread's children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", "rb") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except OSError:
                pass
    return out


def owned(pids: list[int]) -> tuple[int, int]:
    """(anonymous, file) resident bytes, summed over ``pids`` (those that are gone count nothing): ``RssAnon`` and
    ``RssFile`` for a process alone; with children, each process's proportional share (``Pss_Anon``, ``Pss_File`` of
    smaps_rollup), so that pages a forked child still shares with its parent (cxxfilt's ``ldconfig -p``, forked from
    a 300 MiB process before it execs) count once, not twice."""
    if len(pids) == 1:
        keys, where = (b"RssAnon:", b"RssFile:"), "status"
    else:
        keys, where = (b"Pss_Anon:", b"Pss_File:"), "smaps_rollup"
    anon = file = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/{where}", "rb") as fh:
                for line in fh:
                    if line.startswith(keys[0]):
                        anon += int(line.split()[1]) << 10
                    elif line.startswith(keys[1]):
                        file += int(line.split()[1]) << 10
        except (OSError, ValueError):
            pass
    return anon, file


def run(argv: list[str], env: dict[str, str], period_s: float, timeout: float = 600) -> dict:
    """One child process, sampled until it ends: peak RssAnon and RssFile (bytes), wall and CPU seconds, exit code."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        peak_anon = peak_file = 0
        pids = [proc.pid]
        n = 0
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            if n % 5 == 0 or len(pids) > 1:  # the process tree every 5th sample (a walk costs more than a sample)
                pids = tree(proc.pid)
            n += 1
            anon, file = owned(pids)
            peak_anon, peak_file = max(peak_anon, anon), max(peak_file, file)
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(period_s)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-600:].decode("utf-8", "replace")
        out.seek(0, os.SEEK_END)
        return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                "anon_mib": round(peak_anon / MIB, 1), "file_mib": round(peak_file / MIB, 1),
                "rc": proc.returncode, "stdout_bytes": out.tell(), "samples": n,
                "stderr_tail": tail if proc.returncode else ""}


def parse_env(spec: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in spec.split())


def argv_for(name: str, args: list[str], trace: Path, copy: Path, html: Path) -> list[str]:
    if name.startswith(("lib:", "lib-tuned:", "lib-early:")):
        kind, _, command = name.partition(":")
        how = {"lib": "plain", "lib-tuned": "tuned", "lib-early": "early"}[kind]
        return [sys.executable, "-c", LIBRARY_CODE, how, str(trace), LIBRARY[command]]
    real = [str(trace) if a == "T" else str(copy) if a == "C" else str(html) if a == "H" else a for a in args]
    return [sys.executable, "-m", "opscope.cli", *real]


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def json_bytes(trace: Path) -> int:
    meta = trace.with_name(trace.name + ".meta.json")
    if meta.exists():
        return int(json.loads(meta.read_text())["json_bytes"])
    import gzip

    with gzip.open(trace, "rb") as fh:
        return sum(len(b) for b in iter(lambda: fh.read(1 << 24), b""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=BIG)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", help="commands, comma-separated names as in COMMANDS, lib:NAME, lib-tuned:NAME")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=ENV",
                    help="a variant: environment settings (space-separated NAME=VALUE), repeatable")
    ap.add_argument("--mode", choices=("first", "kept"), default="first")
    ap.add_argument("--period-ms", type=float, default=3.0)
    ap.add_argument("--cache", type=Path, help="OPSCOPE_CACHE_DIR to use (default: a fresh one, removed at the end)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()

    names = [c for c, _ in COMMANDS]
    only = a.only.split(",") if a.only else [n for n in names if n != "first open"]
    cases = []
    for name in only:
        if name in names:
            cases.append((name, dict(COMMANDS)[name]))
        elif name.partition(":")[0] in ("lib", "lib-tuned", "lib-early") and name.partition(":")[2] in LIBRARY:
            cases.append((name, []))
        else:
            raise SystemExit(f"unknown command {name!r}")
    variants = [(label, parse_env(spec)) for label, _, spec in (v.partition("=") for v in a.variant)] or [("", {})]
    size = json_bytes(a.trace)
    scratch = Path(tempfile.mkdtemp(prefix="opscope-owned-"))
    cache = a.cache or scratch / "cache"
    copy = scratch / f"copy-{a.trace.name}"
    shutil.copyfile(a.trace, copy)
    html = scratch / "report.html"
    base_env = environment(OPSCOPE_CACHE_DIR=str(cache), PYTHONPATH=str(REPO / "src"))
    compile_bytecode(sorted({Path(({**base_env, **env})["PYTHONPATH"]) for _, env in variants}))
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results = []
    try:
        for path in (a.trace, copy):  # the cache entries, once per checkout (each may have its own cache format)
            for src in sorted({({**base_env, **env})["PYTHONPATH"] for _, env in variants}):
                r = run([sys.executable, "-m", "opscope.cli", "summary", str(path), "-f", "json"],
                        {**base_env, "PYTHONPATH": src}, a.period_ms / 1000)
                if r["rc"]:
                    raise SystemExit(f"the first open failed: {r['stderr_tail']}")
                print(f"# first open of {path.name} ({src}): {r['wall_s']:.2f} s, {r['anon_mib']:.0f} MiB anon",
                      file=sys.stderr, flush=True)
        for name, args in cases:
            argv = argv_for(name, args, a.trace, copy, html)
            runs: dict[str, list[dict]] = {label: [] for label, _ in variants}
            for i in range(a.repeat):
                order = variants[i % len(variants):] + variants[:i % len(variants)]
                for label, env in order:
                    if a.mode == "first":
                        for results_dir in cache.glob("*/results"):
                            shutil.rmtree(results_dir, ignore_errors=True)
                    run_env = {**base_env, **env}
                    if name == "first open":
                        run_env["OPSCOPE_CACHE_DIR"] = tempfile.mkdtemp(dir=scratch)
                    r = run(argv, run_env, a.period_ms / 1000)
                    if name == "first open":
                        shutil.rmtree(run_env["OPSCOPE_CACHE_DIR"], ignore_errors=True)
                    if r["rc"]:
                        print(f"# {name} [{label}] failed: {r['stderr_tail']}", file=sys.stderr, flush=True)
                    runs[label].append(r)
            for label, _ in variants:
                ok = [r for r in runs[label] if r["rc"] == 0]
                row = {"command": name, "variant": label, "runs": runs[label]}
                if ok:
                    row.update({k: stats([r[k] for r in ok]) for k in ("anon_mib", "file_mib", "wall_s", "cpu_s")})
                    row["anon_per_json"] = row["anon_mib"]["median"] * MIB / size
                results.append(row)
                print(line(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{started}, {a.trace} ({size:,} bytes of JSON), mode {a.mode}, {a.repeat} runs, "
          f"sampled every {a.period_ms:g} ms; load average at the end {os.getloadavg()[0]:.1f}\n")
    print(markdown(results))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"started": started, "trace": str(a.trace), "json_bytes": size, "mode": a.mode,
                                 "repeat": a.repeat, "period_ms": a.period_ms, "variants": a.variant,
                                 "results": results}, indent=1))


def _range(s: dict, digits: int) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def line(row: dict) -> str:
    if "anon_mib" not in row:
        return f"{row['command']:18} {row['variant']:14} failed"
    return (f"{row['command']:18} {row['variant']:14} anon {_range(row['anon_mib'], 0):>16} MiB "
            f"({row['anon_per_json']:.2f}x JSON)  file {row['file_mib']['median']:5.0f} MiB  "
            f"wall {_range(row['wall_s'], 2):>18} s  cpu {row['cpu_s']['median']:.2f} s")


def markdown(results: list[dict]) -> str:
    lines = ["| command | variant | peak anon MiB: median (range) | anon / JSON | peak file MiB | wall s: median "
             "(range) | CPU s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if "anon_mib" not in r:
            lines.append(f"| {r['command']} | {r['variant']} | failed | | | | |")
            continue
        lines.append(f"| {r['command']} | {r['variant']} | {_range(r['anon_mib'], 0)} | {r['anon_per_json']:.2f}x | "
                     f"{r['file_mib']['median']:.0f} | {_range(r['wall_s'], 2)} | {r['cpu_s']['median']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
