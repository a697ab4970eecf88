"""Scaling curves: wall time and peak RSS of opening a Kineto trace from 54 MB to 2 GB of JSON, for opscope
(no cache, first open, cached re-open) against a bare ``gunzip + orjson.loads``, HTA and TraceLens.

Sizes are the 54 MB sample (``df_index_resolver.json.gz``) and copies of it made by ``bench/ingest.py``'s
generator (events replicated K times, ids and timestamps shifted so they stay unique):

  54MB    the sample itself          990MB   19 copies (the ``big-1gb.json.gz`` of bench/ingest.py)
  260MB   5 copies                   2GB     38 copies
  Kx      K copies, for any K

Generated traces go to ``--work-dir`` once and are reused (any ``*.json.gz`` there whose ``.meta.json`` says
it holds K copies of the same source). Cases per size, each a whole process, median of ``--repeat`` runs
(``--big-repeat``, default 1, for sizes of 1.5 GB and more), run as rounds of every case in turn; wall time
around the child and peak RSS from ``/usr/bin/time -f %M`` (``bench/ingest.py``'s ``run_child``):

  reference        gunzip + ``orjson.loads`` of the whole document -- the floor every ratio is taken against
  no-cache         ``python -m opscope.cli summary TRACE --no-cache``
  first open       the same without ``--no-cache``, into an empty ``OPSCOPE_CACHE_DIR`` (writes the cache)
  cached re-open   the same again (reads the cache)
  HTA              ``TraceAnalysis(trace_dir=DIR)`` of HolisticTraceAnalysis 0.5.0 (``--hta-python``)
  TraceLens        ``TreePerfAnalyzer.from_file(TRACE)`` (loads the JSON and builds its call tree;
                   ``--tracelens-python``)

A case that runs past ``--timeout`` or over ``--max-rss-gb`` of resident memory is killed and reported as
such. ``--phases`` (on by default) adds a per-phase profile of opscope's cold open from
``bench/phases.py TRACE`` (its last line: a JSON object phase -> wall seconds, each phase run alone).

Prints markdown tables, writes ``bench/out/curves.json`` and, when altair + vl-convert are importable,
``bench/out/curves.svg``.

    PYTHONPATH=src python bench/curves.py --sizes 54MB,260MB --repeat 1     # validation, ~5 minutes
    PYTHONPATH=src python bench/curves.py                                  # full run (see BENCHMARKS.md)
    python3 -m venv /tmp/tlvenv && /tmp/tlvenv/bin/pip install <TraceLens checkout> "pandas<3"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import (
    GENERATOR_VERSION,
    HTA_CODE,
    OUT_DIR,
    REFERENCE_CODE,
    SMALL_TRACE,
    Case,
    _uncompressed_size,
    hta_available,
    machine_info,
    run_child,
)

INGEST_PY = Path(__file__).resolve().parent / "ingest.py"
NAMED_SIZES = {"54MB": 0, "260MB": 5, "990MB": 19, "2GB": 38}  # 0: the sample itself, not a generated copy
DEFAULT_SIZES = ",".join(NAMED_SIZES)
BIG_BYTES = 1.5e9  # sizes from here on get --big-repeat runs

TRACELENS_CODE = """\
import sys
from TraceLens import TreePerfAnalyzer
TreePerfAnalyzer.from_file(sys.argv[1])
"""
# case names as bench/ingest.py spells them (the same commands), and short names for the pivot table and plot
REFERENCE, NO_CACHE = "reference: gunzip + orjson.loads", "opscope summary --no-cache"
COLD, WARM = "opscope summary, first open (writes cache)", "opscope summary, cached re-open"
HTA, TRACELENS = "HTA 0.5.0 TraceAnalysis load", "TraceLens TreePerfAnalyzer.from_file"
PYTHON_PATH = "opscope summary --no-cache, Python path (OPSCOPE_NATIVE=0)"
SHORT = {REFERENCE: "orjson (reference)", NO_CACHE: "opscope --no-cache", COLD: "opscope first open",
         WARM: "opscope cached", HTA: "HTA 0.5.0", TRACELENS: "TraceLens", PYTHON_PATH: "opscope --no-cache, Python"}


def parse_sizes(spec: str) -> list[tuple[str, int]]:
    """``"54MB,260MB,7x"`` -> ``[("54MB", 0), ("260MB", 5), ("7x", 7)]`` (label, copies; 0 = the sample)."""
    out = []
    for raw in spec.split(","):
        s = raw.strip()
        if not s:
            continue
        key = s.upper()
        if key in NAMED_SIZES:
            out.append((key, NAMED_SIZES[key]))
        elif re.fullmatch(r"[1-9][0-9]*X", key):
            out.append((s.lower(), int(key[:-1])))
        else:
            raise SystemExit(f"curves.py: unknown size {s!r}: use {', '.join(NAMED_SIZES)} or Kx (K copies)")
    if not out:
        raise SystemExit("curves.py: --sizes is empty")
    return out


def tool_version(python: str, dist: str, hint: str) -> tuple[bool, str]:
    """(True, version of ``dist`` in that interpreter) or (False, why not)."""
    if not Path(python).exists():
        return False, f"{python} not found ({hint})"
    r = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"{dist} not importable in {python}: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return True, r.stdout.strip()


def find_generated(work: Path, source: Path, copies: int) -> Path | None:
    """A trace already in ``work`` that holds ``copies`` copies of ``source`` (by its generator's .meta.json).

    The source's mtime is not compared (its size is): re-copying ../shared changes it, not the content, and
    a 1 GB trace takes a minute to regenerate."""
    st = source.stat()
    for meta_path in sorted(work.glob("*.json.gz.meta.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        data = meta_path.with_name(meta_path.name[: -len(".meta.json")])
        if (meta.get("generator") == GENERATOR_VERSION and meta.get("source") == str(source)
                and meta.get("source_size") == st.st_size
                and meta.get("copies") == copies and data.exists() and data.stat().st_size == meta.get("gz_bytes")):
            return data
    return None


def trace_for(label: str, copies: int, source: Path, work: Path) -> tuple[Path, int, dict | None]:
    """(path, JSON bytes, generator metadata or None) for one size; generates the trace when missing."""
    if copies == 0:
        return source, _uncompressed_size(source), None  # also warms the page cache
    path = find_generated(work, source, copies)
    if path is None:
        path = work / f"big-{copies}x.json.gz"
        print(f"[{label}] generating {path} ({copies} copies of {source.name})", file=sys.stderr)
        # in a child: parsing the source here would leave this process hundreds of MB larger
        subprocess.run([sys.executable, str(INGEST_PY), "--generate-only", str(path), "--trace", str(source),
                        "--copies", str(copies)], check=True)
    meta = json.loads(path.with_name(path.name + ".meta.json").read_text())
    _uncompressed_size(path)  # warm the page cache so no case pays for the disk
    return path, int(meta["json_bytes"]), meta


def bench_size(label: str, path: Path, repeat: int, args) -> list[Case]:
    """Every case on one trace, ``repeat`` rounds of all cases in turn (not each case ``repeat`` times in a
    row): on a shared machine a burst of load then hits every case about alike, which keeps the ratios fair.
    A case that failed (error, timeout, memory limit) is not run again in later rounds."""
    py = sys.executable
    base_env = dict(os.environ)
    base_env.pop("OPSCOPE_CACHE_DIR", None)
    tl_env = dict(base_env)
    tl_env.pop("PYTHONPATH", None)  # TraceLens's venv, not opscope's sources
    cli = [py, "-m", "opscope.cli", "summary", str(path)]
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", label)
    scratch = args.work_dir / f"curves-{slug}"
    shutil.rmtree(scratch, ignore_errors=True)
    trace_dir = scratch / "hta"  # HTA reads a directory: one holding only (a link to) the trace
    trace_dir.mkdir(parents=True)
    os.symlink(path, trace_dir / path.name)

    def case(name: str, cmd: list[str], skip: bool, why: str) -> Case | None:
        if skip:
            return None
        c = Case(label, name, cmd)
        c.error = None if why == "" else f"not run: {why}"
        return c

    ref = Case(label, REFERENCE, [py, "-c", REFERENCE_CODE, str(path)])
    nocache, cold, warm = Case(label, NO_CACHE, cli + ["--no-cache"]), Case(label, COLD, cli), Case(label, WARM, cli)
    hta = case(HTA, [args.hta_python, "-c", HTA_CODE, str(trace_dir)], args.skip_hta,
               "" if args.hta_ok else args.hta_why)
    tl = case(TRACELENS, [args.tracelens_python, "-c", TRACELENS_CODE, str(path)], args.skip_tracelens,
              "" if args.tl_ok else args.tl_why)
    python_path = Case(label, PYTHON_PATH, cli + ["--no-cache"]) if args.python_path else None
    cases = [c for c in (ref, nocache, python_path, cold, warm, hta, tl) if c is not None]

    def run(c: Case, env: dict[str, str], cwd: Path | None = None) -> bool:
        if c.error is not None or any(r.rc != 0 for r in c.runs):
            return False  # not runnable, or failed once: it would again
        r = run_child(c.command, env=env, cwd=cwd, timeout=args.timeout, max_rss_bytes=args.max_rss_bytes)
        c.runs.append(r)
        print(f"[{label}] {SHORT[c.case]}: {r.wall_s:.2f}s/{r.peak_rss_bytes / 1e6:.0f}MB"
              + ("" if r.rc == 0 else f" (rc={r.rc})"), file=sys.stderr, flush=True)
        return r.rc == 0

    cache = scratch / "cache"
    for i in range(repeat):
        print(f"[{label}] round {i + 1}/{repeat}", file=sys.stderr, flush=True)
        run(ref, base_env)
        run(nocache, base_env)
        if python_path is not None:  # the same command without the C parts (ingest/chrome/_scan.c, model/_derive.c)
            run(python_path, dict(base_env, OPSCOPE_NATIVE="0"))
        shutil.rmtree(cache, ignore_errors=True)  # first open: an empty cache; re-open: the cache it wrote
        cache.mkdir()
        cache_env = dict(base_env, OPSCOPE_CACHE_DIR=str(cache))
        if run(cold, cache_env):
            run(warm, cache_env)
            warm.cache_bytes = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
        if hta is not None:
            run(hta, base_env, cwd=scratch)
        if tl is not None:
            run(tl, tl_env)
    if cold.runs and cold.runs[-1].rc != 0 and not warm.runs:
        warm.error = "skipped: the first open failed"
    shutil.rmtree(scratch, ignore_errors=True)
    for c in cases:
        c.finish()
        ok = [r for r in c.runs if r.rc == 0]
        if ok:  # all processes: a reader that fans out to workers must not look leaner than it is
            c.peak_rss_bytes = int(statistics.median(max(r.peak_rss_bytes, r.group_rss_bytes) for r in ok))
    return cases


PHASES_SCRIPT = Path(__file__).with_name("phases.py")


def phases_command(module: str | None) -> list[str]:
    """bench/phases.py, or ``python -m MODULE`` (a stand-in, for tests)."""
    return [sys.executable, "-m", module] if module else [sys.executable, str(PHASES_SCRIPT)]


def phases_available(module: str | None) -> tuple[bool, str]:
    if not module:
        return PHASES_SCRIPT.is_file(), "" if PHASES_SCRIPT.is_file() else f"skipped: {PHASES_SCRIPT} is missing"
    r = subprocess.run([sys.executable, "-c", "import importlib.util, sys; "
                        "sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)", module],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return True, ""
    return False, f"skipped: {module} does not exist in this opscope"


def parse_phases(stdout: str) -> dict[str, float]:
    """The numeric entries of the JSON object that is the whole output, or else its last line (so that a
    module may log before it); {} when there is none."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    for text in (stdout, lines[-1] if lines else ""):
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return {str(k): float(v) for k, v in doc.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {}


def run_phases(path: Path, repeat: int, args) -> dict:
    """Median seconds per phase over ``repeat`` runs of ``python -m MODULE TRACE`` (each with an empty cache)."""
    runs: list[dict[str, float]] = []
    errors = []
    print(f"[phases] {path.name}: ", end="", file=sys.stderr, flush=True)
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="curves-phases-", dir=args.work_dir) as cache:
            env = dict(os.environ, OPSCOPE_CACHE_DIR=cache)
            try:
                r = subprocess.run([*phases_command(args.phases_module), str(path)], capture_output=True,
                                   text=True, env=env, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                errors.append(f"timed out after {args.timeout:.0f} s")
                break
        if r.returncode != 0:
            errors.append(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
            break
        seconds = parse_phases(r.stdout)
        if not seconds:
            errors.append(f"no JSON object phase -> seconds in its output: {r.stdout.strip()[-200:]!r}")
            break
        runs.append(seconds)
        print(" ".join(f"{k}={v:.2f}" for k, v in runs[-1].items()), end=" | ", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if errors:
        return {"error": errors[0], "runs": runs}
    keys = list(dict.fromkeys(k for run in runs for k in run))
    return {"seconds": {k: round(statistics.median(run[k] for run in runs if k in run), 3) for k in keys},
            "runs": runs}


# ----------------------------------------------------------------------------------------------------------
# report


def _why(c: dict) -> str:
    err = c.get("error") or "no result"
    if "resident: over the" in err:
        m = re.search(r"killed at ([0-9.]+) GB resident", err)
        return f"out of memory (killed at {m.group(1) if m else '?'} GB)"
    if "timeout]" in err:
        m = re.search(r"killed after the ([0-9]+) s timeout", err)
        return f"timed out ({m.group(1) if m else '?'} s)"
    if "signal 9" in err or re.match(r"exit (-9|137)\b", err):
        return "killed (signal 9: out of memory?)"
    if err.startswith(("not run", "skipped")):
        return err
    return "failed: " + err.replace("|", "\\|").replace("\n", " ")[:200]


def size_label(s: dict) -> str:
    return f"{s['json_bytes'] / 1e6:,.0f} MB" if s["json_bytes"] < 1e9 else f"{s['json_bytes'] / 1e9:.2f} GB"


def markdown_table(sizes: list[dict]) -> str:
    lines = ["| JSON size | case | wall s (median) | wall / reference | peak RSS MB | RSS / JSON size |",
             "|---|---|---:|---:|---:|---:|"]
    multi = False
    for s in sizes:
        for c in s["cases"]:
            if c["wall_s"] is None:
                lines.append(f"| {size_label(s)} | {c['case']} | {_why(c)} | - | - | - |")
                continue
            ratio = "-" if c["wall_ratio"] is None else f"{c['wall_ratio']:.2f}x"
            # a sampled sum well above the largest single process: the case ran several processes
            mark = " †" if any(r["group_rss_bytes"] > 1.1 * r["peak_rss_bytes"] for r in c["runs"]) else ""
            multi = multi or bool(mark)
            lines.append(f"| {size_label(s)} | {c['case']} | {c['wall_s']:.2f} | {ratio} "
                         f"| {c['peak_rss_bytes'] / 1e6:,.0f}{mark} | {c['rss_over_json']:.2f}x |")
    if multi:
        lines.append("\n† several processes at once: peak RSS is their summed RSS (sampled every 0.25 s; pages "
                     "shared after fork count once per process), not the largest process's")
    return "\n".join(lines)


def pivot_table(sizes: list[dict]) -> str:
    """One row per case, one column per size: wall s (x reference) / peak RSS."""
    names = list(dict.fromkeys(c["case"] for s in sizes for c in s["cases"]))
    lines = ["| case | " + " | ".join(size_label(s) for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name in names:
        cells = []
        for s in sizes:
            c = next((c for c in s["cases"] if c["case"] == name), None)
            if c is None:
                cells.append("")
            elif c["wall_s"] is None:
                cells.append(_why(c) if not (c.get("error") or "").startswith("not run") else "not run")
            else:
                cells.append(f"{c['wall_s']:.1f} s ({c['wall_ratio']:.2f}x), {c['peak_rss_bytes'] / 1e9:.2f} GB")
        lines.append(f"| {SHORT.get(name, name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def phases_table(sizes: list[dict]) -> str:
    with_phases = [s for s in sizes if s.get("phases")]
    if not with_phases:
        return ""
    errs = [s for s in with_phases if "seconds" not in s["phases"]]
    ok = [s for s in with_phases if "seconds" in s["phases"]]
    keys = list(dict.fromkeys(k for s in ok for k in s["phases"]["seconds"]))
    lines = []
    if ok:
        lines += ["| JSON size | " + " | ".join(keys) + " | sum | summary --no-cache wall |",
                  "|---|" + "---:|" * (len(keys) + 2)]
        for s in ok:
            sec = s["phases"]["seconds"]
            nc = next((c["wall_s"] for c in s["cases"] if c["case"] == "opscope summary --no-cache"), None)
            lines.append(f"| {size_label(s)} | " + " | ".join(f"{sec[k]:.2f}" if k in sec else "" for k in keys)
                         + f" | {sum(sec.values()):.2f} | " + ("-" if nc is None else f"{nc:.2f}") + " |")
    lines += [f"- {size_label(s)}: phases failed: {s['phases']['error']}" for s in errs]
    return "\n".join(lines)


def write_plot(sizes: list[dict], dest: Path) -> str:
    """An SVG of wall time and peak RSS against JSON size (log-log); returns a note when it cannot."""
    try:
        import altair as alt
        import vl_convert as vlc
    except ImportError as e:
        return f"no plot: {e}"
    rows = [{"JSON GB": s["json_bytes"] / 1e9, "case": SHORT.get(c["case"], c["case"]),
             "wall s": c["wall_s"], "peak RSS GB": c["peak_rss_bytes"] / 1e9}
            for s in sizes for c in s["cases"] if c["wall_s"] is not None]
    if not rows:
        return "no plot: no case finished"
    base = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("JSON GB:Q", scale=alt.Scale(type="log"), title="trace size (GB of JSON)",
                axis=alt.Axis(values=[0.05, 0.1, 0.2, 0.5, 1, 2])),
        color=alt.Color("case:N", title=None))
    wall = base.encode(y=alt.Y("wall s:Q", scale=alt.Scale(type="log"), title="wall s (whole process)")).properties(
        width=320, height=260, title="open time")
    rss_y = alt.Y("peak RSS GB:Q", scale=alt.Scale(type="log"), title="peak RSS (GB)")
    # the memory goal: peak RSS at most the JSON's size
    json_line = alt.Chart(alt.Data(values=[{"JSON GB": s["json_bytes"] / 1e9, "peak RSS GB": s["json_bytes"] / 1e9}
                                           for s in sizes])).mark_line(strokeDash=[4, 4], color="gray").encode(
        x="JSON GB:Q", y="peak RSS GB:Q")
    rss = (base.encode(y=rss_y) + json_line).properties(width=320, height=260,
                                                         title="peak memory (dashed: RSS = JSON size)")
    dest.write_text(vlc.vegalite_to_svg((wall | rss).to_json()))
    return str(dest)


def opscope_location() -> str:
    r = subprocess.run([sys.executable, "-c", "import opscope; print(opscope.__file__)"], capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else "opscope not importable: " + r.stderr.strip()[-200:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES,
                    help=f"comma-separated: {', '.join(NAMED_SIZES)} or Kx (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--big-repeat", type=int, default=1, help="runs per case for sizes of 1.5 GB and more")
    ap.add_argument("--skip-hta", action="store_true", help="do not run HolisticTraceAnalysis")
    ap.add_argument("--skip-tracelens", action="store_true", help="do not run TraceLens")
    ap.add_argument("--python-path", action="store_true",
                    help="also opscope --no-cache with OPSCOPE_NATIVE=0 (its Python paths, without the C parts)")
    ap.add_argument("--hta-python", default="/tmp/htavenv.keep/bin/python",
                    help="interpreter that has HTA 0.5.0 installed (default: %(default)s)")
    ap.add_argument("--tracelens-python", default="/tmp/tlvenv/bin/python",
                    help="interpreter that has TraceLens installed (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before one run is killed (default: 900)")
    ap.add_argument("--max-rss-gb", type=float, default=None,
                    help="resident GB at which one run is killed (default: 80%% of the memory available at start)")
    ap.add_argument("--phases", action=argparse.BooleanOptionalAction, default=True,
                    help="per-phase profile of the cold open from bench/phases.py")
    ap.add_argument("--phases-module", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trace", type=Path, default=SMALL_TRACE, help="source trace (default: %(default)s)")
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "opscope-bench",
                    help="where generated traces and temporary caches go (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "curves.json")
    args = ap.parse_args(argv)

    sizes = parse_sizes(args.sizes)
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    source = args.trace.resolve()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.max_rss_gb is None:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        try:  # MemAvailable counts the page cache that can be dropped; AVPHYS_PAGES does not
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        args.max_rss_gb = round(0.8 * avail / 1e9, 1)
    args.max_rss_bytes = int(args.max_rss_gb * 1e9)
    print(f"a run is killed after {args.timeout:.0f} s or at {args.max_rss_gb} GB resident", file=sys.stderr)

    args.hta_ok, args.hta_why = (False, "skipped") if args.skip_hta else hta_available(args.hta_python)
    tl_ok, tl_why = (False, "skipped") if args.skip_tracelens else tool_version(
        args.tracelens_python, "TraceLens", "see bench/curves.py's docstring")
    args.tl_ok, args.tl_why = tl_ok, tl_why
    for name, ok, why, skip in (("HTA", args.hta_ok, args.hta_why, args.skip_hta),
                                ("TraceLens", tl_ok, tl_why, args.skip_tracelens)):
        if not skip:
            print(f"{name}: {'version ' + why if ok else why}", file=sys.stderr)
    phases_ok, phases_note = phases_available(args.phases_module) if args.phases else (False, "not asked (--no-phases)")
    if args.phases and not phases_ok:
        print(f"phases: {phases_note}", file=sys.stderr)

    machine = machine_info()  # before the run: records which opscope (commit, dirty files) gets measured
    machine["opscope_file"] = opscope_location()
    t_start = time.perf_counter()
    results = []
    for label, copies in sizes:
        path, json_bytes, meta = trace_for(label, copies, source, args.work_dir)
        repeat = args.big_repeat if json_bytes >= BIG_BYTES else args.repeat
        t0 = time.perf_counter()
        cases = bench_size(label, path, repeat, args)
        ref = cases[0].wall_s
        for c in cases:
            c.wall_ratio = round(c.wall_s / ref, 2) if c.wall_s is not None and ref else None
            c.rss_over_json = round(c.peak_rss_bytes / json_bytes, 2) if c.peak_rss_bytes is not None else None
        phases = None
        if args.phases:
            phases = run_phases(path, repeat, args) if phases_ok else None
        results.append({"label": label, "copies": copies, "path": str(path), "file_bytes": path.stat().st_size,
                        "json_bytes": json_bytes, "generated": meta, "repeat": repeat,
                        "seconds": round(time.perf_counter() - t0, 1), "phases": phases,
                        "cases": [asdict(c) for c in cases]})
        # write as we go: a long run that dies late keeps its finished sizes
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"partial": True, "traces": results}, indent=2))

    table, pivot, ptable = markdown_table(results), pivot_table(results), phases_table(results)
    print(table + "\n\n" + pivot)
    if ptable:
        print("\nPer-phase profile of opscope's cold open (s, median):\n\n" + ptable)
    elif args.phases:
        print(f"\nPer-phase profile: {phases_note}")
    plot = write_plot(results, args.out.with_suffix(".svg"))
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine, "argv": sys.argv,
              "repeat": args.repeat, "big_repeat": args.big_repeat, "timeout_s": args.timeout,
              "max_rss_gb": args.max_rss_gb, "hta": args.hta_why if args.hta_ok else None,
              "tracelens": tl_why if tl_ok else None, "phases": phases_note or "ok",
              "seconds": round(time.perf_counter() - t_start, 1), "traces": results,
              "table_md": table, "pivot_md": pivot, "phases_md": ptable, "plot": plot}
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}; plot: {plot}; the run took {report['seconds']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
