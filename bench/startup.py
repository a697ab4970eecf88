"""Start-up benchmark: what each library costs to import, and whole ``opscope`` processes that should take a
fraction of a second (``--help``, a command served from the Parquet cache of a small trace).

1. Per library (typer, rich, pydantic, pyarrow, pyarrow.compute, pyarrow.parquet, numpy, duckdb, ...): the time
   of its ``import`` inside a fresh interpreter (median of ``--repeat`` processes), and the process's peak RSS;
   pyarrow also with numpy hidden (pyarrow imports numpy only because it is installed).
2. Whole processes, medians of ``--repeat``: a bare ``python -c pass`` and ``python -c "import pyarrow"`` (the
   floor), ``opscope --help``, ``opscope CMD --help``, and ``summary``/``ops``/``kernels`` (table and
   ``--format json``) on a small shared trace already in the cache (a private cache dir, filled first). The
   cases run round-robin, so a busy machine slows all of them alike; the ratios to the bare interpreter and to
   ``import pyarrow`` are the figures to compare. ``--baseline-src DIR`` runs the opscope commands of a second
   source tree (e.g. ``git archive REV src | tar -x -C DIR``) in the same rounds, for a before/after.

Bytecode is written and used as an installed package has it (PYTHONDONTWRITEBYTECODE is dropped for the children
and one unmeasured round runs first): without .pyc files every run would compile opscope's sources again.

Prints markdown tables and writes bench/out/startup.json.

    python bench/startup.py --repeat 5 [--baseline-src /tmp/base] [--with-numpy]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
OUT = REPO / "bench" / "out" / "startup.json"
#: 1.1 MB gzip (a ResNet-50 step on one GPU, Kineto), and 3.3 MB plain JSON (a CPU training run of torch 2.13)
SMALL = [SHARED / "kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz",
         SHARED / "generated/torch_cpu_mobilenetv2_train.json"]

LIBS = ["typer", "rich.console", "pydantic", "numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "duckdb",
        "jinja2", "msgspec", "orjson", "importlib.metadata", "opscope", "opscope.cli", "opscope.model.trace",
        "opscope.analyses.reports", "opscope.render"]

#: a process to time: its command line and environment
Case = tuple[list[str], dict[str, str]]

IMPORT_ONE = """\
import sys, time
if sys.argv[2] == "hide-numpy":
    sys.modules["numpy"] = None  # pyarrow then runs without it
t0 = time.perf_counter()
__import__(sys.argv[1])
print(time.perf_counter() - t0)
"""


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str, float]:
    """One child process: wall seconds, peak RSS (MiB, from wait4), exit code, stdout, CPU seconds (user + system:
    on a busy machine this moves less than the wall time)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, rusage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return wall, rusage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), text, rusage.ru_utime + rusage.ru_stime


def opscope_cmd() -> list[str]:
    """The installed console script beside this interpreter (what users run), else ``python -m opscope.cli``."""
    script = Path(sys.executable).parent / "opscope"
    return [sys.executable, str(script)] if script.exists() else [sys.executable, "-m", "opscope.cli"]


def round_robin(cases: dict[str, Case], repeat: int) -> dict[str, dict]:
    """Every case once unmeasured (bytecode, page cache), then ``repeat`` times, interleaved; per case the median
    wall time, its spread and the largest RSS."""
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    rss: dict[str, float] = dict.fromkeys(cases, 0.0)
    for i in range(repeat + 1):
        for name, (cmd, env) in cases.items():
            wall, peak, rc, _, cpu = run(cmd, env)
            if rc:
                raise SystemExit(f"failed ({rc}): {' '.join(cmd)}")
            if i:
                walls[name].append(wall)
                cpus[name].append(cpu)
                rss[name] = max(rss[name], peak)
    return {name: {"median_s": round(statistics.median(w), 4), "min_s": round(min(w), 4),
                   "max_s": round(max(w), 4), "cpu_s": round(statistics.median(cpus[name]), 4),
                   "peak_rss_mb": round(rss[name], 1)} for name, w in walls.items()}


def bench_imports(repeat: int, env: dict[str, str]) -> list[dict]:
    """Each library's import time inside a fresh interpreter (median of ``repeat``) and the process's peak RSS."""
    rows = []
    cases = [(lib, "plain") for lib in LIBS] + [("pyarrow", "hide-numpy"), ("pyarrow.parquet", "hide-numpy")]
    for lib, mode in cases:
        times, peaks = [], []
        for i in range(repeat + 1):  # the first writes the bytecode
            _, peak, rc, text, _ = run([sys.executable, "-c", IMPORT_ONE, lib, mode], env)
            if rc:
                break
            if not i:
                continue
            times.append(float(text.strip().splitlines()[-1]))
            peaks.append(peak)
        if not times:
            rows.append({"library": lib, "mode": mode, "import_s": None, "note": "not installed"})
            continue
        rows.append({"library": lib, "mode": mode, "import_s": round(statistics.median(times), 4),
                     "peak_rss_mb": round(max(peaks), 1)})
    return rows


#: the CLI with numpy loaded first: pyarrow imports it only because it is installed, and the table commands leave
#: it out (opscope.cli.app.NUMPY_FREE); this is what they cost with it (the outputs are compared below)
ARROW_NO_NUMPY = "import sys; sys.modules['numpy'] = None; import pyarrow, pyarrow.compute, pyarrow.parquet"
NUMPY_MAIN = "import sys, numpy; sys.argv[0] = 'opscope'; from opscope.cli import main; main()"


def opscope_cases(env: dict[str, str], tag: str = "", op: list[str] | None = None) -> dict[str, Case]:
    """The opscope processes of one source tree (``env``'s PYTHONPATH), named with ``tag``."""
    op = op or opscope_cmd()
    cases = {f"opscope --help{tag}": ([*op, "--help"], env),
             f"opscope summary --help{tag}": ([*op, "summary", "--help"], env),
             f"opscope gpu --help{tag}": ([*op, "gpu", "--help"], env)}
    for trace in (t for t in SMALL if t.exists()):
        short = trace.name.split(".")[0]
        for cmd in ("summary", "ops", "kernels"):
            cases[f"opscope {cmd} {short} (cached){tag}"] = ([*op, cmd, str(trace)], env)
            cases[f"opscope {cmd} {short} -f json (cached){tag}"] = ([*op, cmd, str(trace), "--format", "json"], env)
    return cases


def bench_commands(repeat: int, env: dict[str, str], baseline: dict[str, str] | None,
                   with_numpy: bool = False) -> dict[str, dict]:
    """The whole processes, round-robin, against ``python -c pass`` and ``python -c 'import pyarrow'``."""
    op = opscope_cmd()
    for trace in (t for t in SMALL if t.exists()):
        run([*op, "summary", str(trace)], env)  # fills the cache (its format is the same for both trees)
    cases: dict[str, Case] = {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        "python -c 'import pyarrow'": ([sys.executable, "-c", "import pyarrow"], env),
        "python -c 'import pyarrow, .compute, .parquet' (numpy hidden)": ([sys.executable, "-c", ARROW_NO_NUMPY], env),
        **opscope_cases(env),
    }
    if baseline is not None:
        cases.update(opscope_cases(baseline, " [baseline]"))
    if with_numpy:
        loaded = opscope_cases(env, " [numpy loaded]", [sys.executable, "-c", NUMPY_MAIN])
        cases.update(loaded)
        for name, (cmd, _) in loaded.items():  # the same bytes on stdout, or the figure means nothing
            plain = run(cases[name.removesuffix(" [numpy loaded]")][0], env)
            if run(cmd, env)[3] != plain[3]:
                raise SystemExit(f"numpy changes the output of {name}")
    results = round_robin(cases, repeat)
    bare = results["python -c pass"]["median_s"]
    arrow = results["python -c 'import pyarrow'"]["median_s"]
    for r in results.values():
        r["x_bare_python"] = round(r["median_s"] / bare, 2)
        r["x_import_pyarrow"] = round(r["median_s"] / arrow, 2)
    return results


def markdown(imports: list[dict], commands: dict[str, dict]) -> str:
    lines = ["| library | import (s) | peak RSS (MiB) |", "|---|---:|---:|"]
    for r in imports:
        name = r["library"] + (" (numpy hidden)" if r["mode"] == "hide-numpy" else "")
        lines.append(f"| {name} | {r['import_s'] if r['import_s'] is not None else 'not installed'} | "
                     f"{r.get('peak_rss_mb', '')} |")
    lines += ["", "| process | median (s) | min-max (s) | x `python -c pass` | x `import pyarrow` | CPU (s) | "
                  "peak RSS (MiB) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in commands.items():
        lines.append(f"| `{name}` | {r['median_s']:.3f} | {r['min_s']:.3f}-{r['max_s']:.3f} | {r['x_bare_python']} | "
                     f"{r['x_import_pyarrow']} | {r['cpu_s']:.3f} | {r['peak_rss_mb']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--skip-imports", action="store_true", help="only the whole processes")
    ap.add_argument("--with-numpy", action="store_true", help="also the opscope processes with numpy loaded first "
                                                              "(after checking that their output is the same)")
    ap.add_argument("--baseline-src", type=Path, help="a second source tree (its src/ folder's parent) to time "
                                                      "in the same rounds")
    args = ap.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="opscope-startup-cache-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO / "src")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    baseline = None if args.baseline_src is None else {**env, "PYTHONPATH": str(args.baseline_src / "src")}
    try:
        imports = [] if args.skip_imports else bench_imports(args.repeat, env)
        commands = bench_commands(args.repeat, env, baseline, args.with_numpy)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(markdown(imports, commands))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"repeat": args.repeat, "baseline_src": str(args.baseline_src or ""), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg()}
    args.out.write_text(json.dumps({**meta, "imports": imports, "commands": commands}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
