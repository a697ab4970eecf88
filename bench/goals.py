"""The speed goals on the 1 GB trace, this checkout against another, whole processes timed without a sampler.

    python bench/goals.py open --base OTHER/src [--rounds 5]    # the cold open against gunzip + orjson.loads
    python bench/goals.py cached --base OTHER/src [--rounds 5]  # the first command after the cache write
    python bench/goals.py cached --only advise,diff             # only these commands

``open``: each round runs the reference (``gzip`` + ``orjson.loads`` of the trace), then the first open
(``opscope summary -f json`` into an empty cache directory) of each checkout, their order rotated round by round;
besides the medians, the ratio of each round's reference to its own first open (the two ran under the same load).
``cached``: one cache directory; each command (``kernels``, ``ops``, ``steps``, ``gpu``, ``gpu --idle``, ``memory``,
``advise``, ``diff`` of the trace and a copy of itself, ``critical-path``, ``whatif -c sync=0``) runs ``--rounds``
times per checkout, alternating, with the entries' kept results emptied first, so that it computes its analyses as
the first command after the cache write does. Prints the median and range of each case's wall seconds. ``--base``
is the ``src`` of another checkout with its C parts built (``python setup.py build_ext --inplace`` there); without
it only this checkout runs.

Every process runs with its modules' bytecode compiled beforehand (into a private ``PYTHONPYCACHEPREFIX``), as ``pip
install`` leaves an installed package, whatever ``PYTHONDONTWRITEBYTECODE`` says here: compiling the sources again on
every start would add ~0.2 s to every command that no installed copy pays.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"
TRACE = Path("/tmp/opscope-bench/big-1gb.json.gz")
COMMANDS = {"kernels": ["kernels", "T"], "ops": ["ops", "T"], "steps": ["steps", "T"], "gpu": ["gpu", "T"],
            "gpu --idle": ["gpu", "T", "--idle"], "memory": ["memory", "T"], "advise": ["advise", "T"],
            "diff": ["diff", "T", "C"], "critical-path": ["critical-path", "T"],
            "whatif": ["whatif", "T", "-c", "sync=0"]}


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')[-400:]}")
    return wall


BYTECODE = Path(tempfile.gettempdir()) / "opscope-goals-bytecode"


def environment(**extra: str) -> dict[str, str]:
    """This process's environment with bytecode kept in :data:`BYTECODE` (see the module)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(BYTECODE), **extra}


def compile_bytecode(sources: list[Path]) -> None:
    for src in sources:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "opscope")], env=environment(),
                       stdout=subprocess.DEVNULL, check=True)


def opscope(src: Path, args: list[str], cache: str) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-m", "opscope.cli", *args], environment(PYTHONPATH=str(src), OPSCOPE_CACHE_DIR=cache)


def rotated(items: list, i: int) -> list:
    return items[i % len(items):] + items[:i % len(items)]


def cold_open(checkouts: dict[str, Path], trace: Path, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    reference = f"import gzip, orjson; orjson.loads(gzip.open({str(trace)!r}).read())"
    for i in range(rounds):
        times.setdefault("gunzip + orjson.loads", []).append(timed([sys.executable, "-c", reference], dict(os.environ)))
        for label, src in rotated(list(checkouts.items()), i):
            cache = tempfile.mkdtemp(prefix="opscope-goals-")
            try:
                times.setdefault(f"first open, {label}", []).append(
                    timed(*opscope(src, ["summary", str(trace), "-f", "json"], cache)))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    return times


def cached(checkouts: dict[str, Path], trace: Path, rounds: int, only: list[str] | None = None,
           ) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    cache = tempfile.mkdtemp(prefix="opscope-goals-")
    copy = Path(cache) / f"copy-{trace.name}"
    shutil.copyfile(trace, copy)
    try:
        for src in checkouts.values():  # each checkout's entries (their cache formats may differ)
            for path in (trace, copy):
                timed(*opscope(src, ["summary", str(path), "-f", "json"], cache))
        for name, args in COMMANDS.items():
            if only and name not in only:
                continue
            argv = [str(trace) if a == "T" else str(copy) if a == "C" else a for a in args] + ["-f", "json"]
            for i in range(rounds):
                for label, src in rotated(list(checkouts.items()), i):
                    for results in Path(cache).glob("*/results"):
                        shutil.rmtree(results, ignore_errors=True)
                    times.setdefault(f"{name}, {label}", []).append(timed(*opscope(src, argv, cache)))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("open", "cached"))
    parser.add_argument("--base", type=Path, help="the src of another checkout, timed alongside")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--only", help="with cached: the commands to time, comma-separated (e.g. advise,diff)")
    args = parser.parse_args()
    checkouts = {"this": HERE, **({"base": args.base} if args.base else {})}
    compile_bytecode(list(checkouts.values()))
    if args.what == "open":
        times = cold_open(checkouts, args.trace, args.rounds)
    else:
        times = cached(checkouts, args.trace, args.rounds, args.only.split(",") if args.only else None)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.trace}, {args.rounds} rounds, load average "
          f"{os.getloadavg()[0]:.1f}")
    for case, values in times.items():
        print(f"{case:32} {statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})")
    if args.what == "open":  # each round's reference over its own first opens: the two saw the same load
        reference = times["gunzip + orjson.loads"]
        for label in checkouts:
            ratios = [r / t for r, t in zip(reference, times[f"first open, {label}"], strict=True)]
            print(f"{'faster, per round, ' + label:32} {statistics.median(ratios):6.2f} x "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
