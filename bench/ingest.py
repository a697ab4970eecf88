"""Ingest benchmark: how fast and how lean is opening a trace, compared with a bare parse and with HTA.

Every case runs as its own whole process (wall time with ``time.perf_counter`` around the child, peak
RSS from ``os.wait4``'s rusage of that child), repeated ``--repeat`` times; the median is reported.

Cases, per trace:

  reference     ``gzip.open(path).read()`` + ``orjson.loads`` (plain read for a .json) -- the floor
  no-cache      ``python -m opscope.cli summary PATH --no-cache``
  cache-cold    ``python -m opscope.cli summary PATH`` into an empty ``OPSCOPE_CACHE_DIR`` (writes the cache)
  cache-warm    the same command again with that cache dir (reads the Parquet cache)
  hta           ``TraceAnalysis(trace_dir=DIR)`` of HolisticTraceAnalysis 0.5.0, DIR holding only the trace,
                run by the interpreter of a separate venv (``--hta-python``, default /tmp/htavenv/bin/python)

Traces: the checked-in sample ``df_index_resolver.json.gz`` (54 MB of JSON) and a ~``--size-gb`` GB trace
generated from it by replicating its events (written as gzip to ``--work-dir``, reused when present).

Prints a markdown table and writes everything as JSON to ``bench/out/ingest.json``.

    python bench/ingest.py                      # full run (several minutes)
    python bench/ingest.py --skip-big --repeat 1
    python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0 orjson
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL_TRACE = REPO.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
OUT_DIR = REPO / "bench" / "out"
GENERATOR_VERSION = 1

REFERENCE_CODE = """\
import gzip, sys, orjson
p = sys.argv[1]
opener = gzip.open if p.endswith(".gz") else open
with opener(p, "rb") as f:
    data = f.read()
doc = orjson.loads(data)
"""

HTA_CODE = """\
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""


# ----------------------------------------------------------------------------------------------------------
# measuring one child process


@dataclass
class Run:
    wall_s: float
    peak_rss_bytes: int
    rc: int
    stderr_tail: str = ""
    # peak of the summed RSS of the child's process group, sampled every ~0.25 s (only with max_rss_bytes):
    # counts worker processes, which %M (one process) does not; pages shared after fork count once per process
    group_rss_bytes: int = 0


@dataclass
class Case:
    trace: str
    case: str
    command: list[str]
    runs: list[Run] = field(default_factory=list)
    error: str | None = None
    wall_s: float | None = None
    peak_rss_bytes: int | None = None
    wall_ratio: float | None = None
    rss_over_json: float | None = None
    cache_bytes: int | None = None  # size of the Parquet cache (cached re-open only)

    def finish(self) -> None:
        ok = [r for r in self.runs if r.rc == 0]
        if ok:
            self.wall_s = statistics.median(r.wall_s for r in ok)
            self.peak_rss_bytes = int(statistics.median(r.peak_rss_bytes for r in ok))
        bad = [r for r in self.runs if r.rc != 0]
        if bad and self.error is None:
            r = bad[0]
            self.error = f"exit {r.rc}: {r.stderr_tail.strip()[-600:]}"


TIME_BIN = shutil.which("time", path="/usr/bin:/bin")


def _group_rss_bytes(pgid: int) -> int:
    """Resident bytes of every process in process group ``pgid`` (Linux /proc; 0 elsewhere)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_bytes()
            if int(stat[stat.rindex(b")") + 2:].split()[2]) != pgid:  # fields after "pid (comm)": state ppid pgrp
                continue
            total += int((d / "statm").read_bytes().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return total


def run_child(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float | None = None, max_rss_bytes: int | None = None) -> Run:
    """Run ``cmd`` with stdout to /dev/null; return its wall time and its own peak RSS.

    ``timeout`` (seconds) and ``max_rss_bytes`` (resident memory of the child's whole process group,
    sampled every ~0.25 s) kill the child when exceeded, so that a tool that cannot cope with a big trace
    is reported as such instead of hanging the run or sending the machine into the OOM killer.

    The RSS comes from GNU ``/usr/bin/time -f %M`` when there is one: Linux carries a process's RSS
    high-water mark across fork+exec, so a child forked straight from this (possibly large) process would
    report at least this process's RSS; ``time`` is a small process in between. Without it, fall back to
    ``os.wait4``'s rusage of the child (then keep this process small, which ``main`` does).
    """
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = [TIME_BIN, "-f", "%e %M", "-o", tf.name, *cmd] if TIME_BIN else cmd
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=env, cwd=cwd, start_new_session=True)
        deadline = None if timeout is None else t0 + timeout
        killed = False
        over_rss = group_peak = 0
        watch = deadline is not None or max_rss_bytes is not None
        next_rss_check = t0
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG if watch else 0)
            if pid:
                break
            now = time.perf_counter()
            if deadline is not None and now > deadline:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: time and the command under it
                killed = True
                watch = False  # next wait4 blocks until the kill lands
                continue
            if max_rss_bytes is not None and now >= next_rss_check:
                next_rss_check = now + 0.25
                rss = _group_rss_bytes(proc.pid)
                group_peak = max(group_peak, rss)
                if rss > max_rss_bytes:
                    os.killpg(proc.pid, signal.SIGKILL)
                    over_rss = rss
                    watch = False
                    continue
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # tell Popen the child is reaped
        err.seek(0)
        tail = err.read()[-4000:].decode("utf-8", "replace")
        rss_kib = rusage.ru_maxrss if sys.platform != "darwin" else rusage.ru_maxrss // 1024
        if TIME_BIN:
            lines = tf.read().strip().splitlines()
            try:
                rss_kib = int(lines[-1].split()[1])
            except (IndexError, ValueError):
                rss_kib = 0
            if lines[:-1]:  # e.g. "Command terminated by signal 9" / "Command exited with non-zero status 1"
                tail += "\n[time] " + " ".join(lines[:-1])
    if killed:
        tail += f"\n[killed after the {timeout:.0f} s timeout]"
    if over_rss:
        tail += f"\n[killed at {over_rss / 1e9:.1f} GB resident: over the {max_rss_bytes / 1e9:.1f} GB limit]"
        rss_kib = max(rss_kib, over_rss // 1024)
    return Run(wall_s=round(wall, 3), peak_rss_bytes=rss_kib * 1024, rc=proc.returncode, stderr_tail=tail,
               group_rss_bytes=group_peak)


# ----------------------------------------------------------------------------------------------------------
# the big trace


def _uncompressed_size(path: Path) -> int:
    n = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        while chunk := f.read(16 << 20):
            n += len(chunk)
    return n


_STEP = re.compile(r"ProfilerStep#(\d+)")


def _kineto_bytes(e: dict, dumps) -> bytes:
    """One event laid out the way Kineto writes it (one event over a few lines, args indented), so the
    generated file has about the source's bytes per event rather than compact JSON's ~20% fewer."""
    head, tail = [], []
    for k, v in e.items():
        if k == "args":
            continue
        (tail if k in ("ts", "dur") else head).append(b'"' + k.encode() + b'": ' + dumps(v))
    out = b"  {\n    " + b", ".join(head)
    if tail:
        out += b",\n    " + b", ".join(tail)
    args = e.get("args")
    if args is not None:
        items = b",".join(dumps(k) + b": " + dumps(v) for k, v in args.items())
        out += b',\n    "args": {\n      ' + items + b"\n    }"
    return out + b"\n  }"


def make_big_trace(source: Path, dest: Path, size_gb: float, copies: int | None = None) -> dict:
    """Write ``dest`` (gzip) with ``source``'s events repeated K times, K chosen for ~size_gb GB of JSON
    (or K = ``copies`` when given; ``size_gb`` is then ignored).

    Copy k is shifted in time by k * (span + 1 ms); correlation/flow ids and External ids are offset by
    k * (their max + 1) so they stay unique; ``ProfilerStep#N`` becomes ``ProfilerStep#(N + k*1000)``.
    Metadata (ph "M") events are written once, with the first copy. Each copy is serialized on its own,
    so the generator holds one parsed trace plus one copy's bytes, not the whole output.
    Reuses ``dest`` when its ``.meta.json`` says it was made from the same source and size.
    """
    import orjson

    meta_path = dest.with_name(dest.name + ".meta.json")
    st = source.stat()
    want: dict = {"generator": GENERATOR_VERSION, "source": str(source), "source_size": st.st_size,
                  "source_mtime": st.st_mtime}
    want.update({"size_gb": size_gb} if copies is None else {"copies": copies})
    if dest.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        # not the source's mtime: re-copying ../shared changes it, not the content (a 1 GB trace takes a
        # minute to regenerate, and other runs may be reading it)
        if all(meta.get(k) == v for k, v in want.items() if k != "source_mtime"):
            print(f"reusing {dest} ({meta['copies']} copies, {meta['json_bytes'] / 1e9:.2f} GB of JSON)",
                  file=sys.stderr)
            return meta

    t0 = time.perf_counter()
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as f:
        doc = orjson.loads(f.read())
    events = doc.pop("traceEvents")
    header = doc

    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t_min = min(e["ts"] for e in timed)
    t_max = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift_us = (t_max - t_min) + 1000  # trace span + 1 ms
    if isinstance(shift_us, float):
        shift_us = round(shift_us, 3)
    del timed

    def int_max(values) -> int:
        return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)

    # flow ids and correlation ids name the same links (runtime call <-> kernel); offset them together
    corr_span = max(int_max(e.get("id") for e in events),
                    int_max((e.get("args") or {}).get("correlation") for e in events)) + 1
    ext_span = int_max((e.get("args") or {}).get("External id") for e in events) + 1
    meta_events = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    del events

    def shifted(e: dict, k: int) -> dict:
        if k == 0:
            return e
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + k * shift_us
        if isinstance(e.get("id"), int):
            e["id"] = e["id"] + k * corr_span
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = _STEP.sub(lambda m: f"ProfilerStep#{int(m.group(1)) + k * 1000}", name)
        args = e.get("args")
        if args and ("correlation" in args or "External id" in args):
            args = dict(args)
            if isinstance(args.get("correlation"), int):
                args["correlation"] += k * corr_span
            if isinstance(args.get("External id"), int):
                args["External id"] += k * ext_span
            e["args"] = args
        return e

    def copy_bytes(k: int) -> bytes:
        evs = (meta_events if k == 0 else []) + body
        return b",\n".join(_kineto_bytes(shifted(e, k), orjson.dumps) for e in evs)

    first = copy_bytes(0)
    if copies is None:
        copies = max(1, round(size_gb * 1e9 / len(first)))

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    json_bytes = 0
    with gzip.open(tmp, "wb", compresslevel=6) as out:
        def write(b: bytes) -> None:
            nonlocal json_bytes
            out.write(b)
            json_bytes += len(b)

        write(b"{\n")
        for key, value in header.items():
            write(b"  " + orjson.dumps(key) + b": " + orjson.dumps(value) + b",\n")
        write(b'  "traceEvents": [\n')
        for k in range(copies):
            if k:
                write(b",\n")
            write(first if k == 0 else copy_bytes(k))
            print(f"  wrote copy {k + 1}/{copies}", file=sys.stderr)
        write(b"\n  ]\n}\n")
    tmp.replace(dest)
    meta = dict(want, copies=copies, json_bytes=json_bytes, events=len(meta_events) + copies * len(body),
                gz_bytes=dest.stat().st_size, seconds=round(time.perf_counter() - t0, 1))
    meta_path.write_text(json.dumps(meta, indent=2))
    print(f"wrote {dest}: {copies} copies, {meta['events']:,} events, {json_bytes / 1e9:.2f} GB of JSON, "
          f"{meta['gz_bytes'] / 1e6:.0f} MB gz, in {meta['seconds']} s", file=sys.stderr)
    return meta


# ----------------------------------------------------------------------------------------------------------
# the cases


def hta_available(python: str) -> tuple[bool, str]:
    if not Path(python).exists():
        return False, f"{python} not found (python3 -m venv /tmp/htavenv && " \
                      f"/tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0 orjson)"
    r = subprocess.run([python, "-c", "import hta, importlib.metadata as m; "
                                      "print(m.version('HolisticTraceAnalysis'))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return False, "import hta failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return True, r.stdout.strip()


def bench_trace(label: str, path: Path, json_bytes: int, args, work: Path) -> list[Case]:
    py = sys.executable
    base_env = dict(os.environ)
    base_env.pop("OPSCOPE_CACHE_DIR", None)
    cli = [py, "-m", "opscope.cli", "summary", str(path)]
    cases: list[Case] = []
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", label)

    def measure(case: Case, env=None, cwd=None, before=None) -> Case:
        print(f"[{label}] {case.case}: ", end="", file=sys.stderr, flush=True)
        for _ in range(args.repeat):
            if before:
                env = before()
            r = run_child(case.command, env=env, cwd=cwd, timeout=args.timeout)
            case.runs.append(r)
            print(f"{r.wall_s:.2f}s/{r.peak_rss_bytes / 1e6:.0f}MB" + ("" if r.rc == 0 else f"(rc={r.rc})"),
                  end=" ", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        case.finish()
        cases.append(case)
        return case

    measure(Case(label, "reference: gunzip + orjson.loads", [py, "-c", REFERENCE_CODE, str(path)]),
            env=base_env)
    measure(Case(label, "opscope summary --no-cache", cli + ["--no-cache"]), env=base_env)
    if args.light_python:
        # The analysis-only install (`pip install opscope`, no torch extra) has no numpy, which pyarrow
        # would otherwise import (~12 MB, ~70 ms).
        light = [args.light_python, "-m", "opscope.cli", "summary", str(path), "--no-cache"]
        measure(Case(label, "opscope summary --no-cache (analysis-only install)", light), env=base_env)

    # cold: each repetition gets a fresh, empty cache dir; warm: re-open from the last one
    cache_root = work / f"cache-{slug}"
    shutil.rmtree(cache_root, ignore_errors=True)
    counter = iter(range(10**6))
    last_env: dict[str, str] = {}

    def fresh_cache() -> dict[str, str]:
        d = cache_root / f"run{next(counter)}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        last_env.clear()
        last_env.update(base_env, OPSCOPE_CACHE_DIR=str(d))
        return dict(last_env)

    cold = measure(Case(label, "opscope summary, first open (writes cache)", cli), before=fresh_cache)
    warm = Case(label, "opscope summary, cached re-open", cli)
    if cold.error:
        warm.error = "skipped: the first open failed"
        warm.finish()
        cases.append(warm)
    else:
        measure(warm, env=dict(last_env))
    cache_bytes = sum(f.stat().st_size for f in Path(last_env["OPSCOPE_CACHE_DIR"]).rglob("*") if f.is_file()) \
        if last_env else 0
    warm.cache_bytes = cache_bytes
    shutil.rmtree(cache_root, ignore_errors=True)

    hta_case = Case(label, "HTA 0.5.0 TraceAnalysis load", [args.hta_python, "-c", HTA_CODE])
    if args.skip_hta:
        pass
    elif not args.hta_ok:
        hta_case.error = f"not run: {args.hta_why}"
        cases.append(hta_case)
    else:
        trace_dir = work / f"hta-{slug}"
        shutil.rmtree(trace_dir, ignore_errors=True)
        trace_dir.mkdir(parents=True)
        os.symlink(path, trace_dir / path.name)
        hta_case.command.append(str(trace_dir))
        measure(hta_case, env=base_env, cwd=work)
        shutil.rmtree(trace_dir, ignore_errors=True)

    ref = cases[0].wall_s
    for c in cases:
        if c.wall_s is not None and ref:
            c.wall_ratio = round(c.wall_s / ref, 2)
        if c.peak_rss_bytes is not None:
            c.rss_over_json = round(c.peak_rss_bytes / json_bytes, 2)
    return cases


# ----------------------------------------------------------------------------------------------------------
# report


def markdown_table(traces: list[dict]) -> str:
    lines = ["| trace | case | wall s (median) | peak RSS MB | wall / reference | RSS / JSON size |",
             "|---|---|---:|---:|---:|---:|"]
    for t in traces:
        for c in t["cases"]:
            if c["wall_s"] is None:
                err = (c["error"] or "no result").replace("|", "\\|").replace("\n", " ")
                lines.append(f"| {t['label']} | {c['case']} | - | - | - | - |")
                lines.append(f"| | ↳ error: {err[:300]} | | | | |")
                continue
            ratio = "-" if c["wall_ratio"] is None else f"{c['wall_ratio']:.2f}x"
            lines.append(f"| {t['label']} | {c['case']} | {c['wall_s']:.2f} | {c['peak_rss_bytes'] / 1e6:,.0f} "
                         f"| {ratio} | {c['rss_over_json']:.2f}x |")
    return "\n".join(lines)


def machine_info() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "nproc": os.cpu_count()}
    with contextlib.suppress(ValueError, OSError, AttributeError):
        info["mem_total_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:  # which opscope was measured: the commit, and the files that differ from it
        git = ["git", "-C", str(REPO)]
        info["git_head"] = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True).stdout.strip()
        info["git_dirty"] = subprocess.run(git + ["status", "--porcelain", "--", "src"], capture_output=True,
                                           text=True).stdout.split("\n")[:-1]
    except OSError:
        pass
    for mod in ("orjson", "pyarrow", "msgspec", "opscope"):
        try:
            from importlib.metadata import version
            info[mod] = version(mod)
        except Exception:
            pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=SMALL_TRACE, help="source trace (default: %(default)s)")
    ap.add_argument("--size-gb", type=float, default=1.0, help="uncompressed size of the generated big trace")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--skip-big", action="store_true", help="only the source trace")
    ap.add_argument("--skip-hta", action="store_true", help="do not run HolisticTraceAnalysis")
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python", help="interpreter that has HTA installed")
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "opscope-bench",
                    help="where the big trace and temporary caches go (default: %(default)s)")
    ap.add_argument("--light-python", default=None,
                    help="interpreter of an analysis-only install (`pip install -e .` in a venv without the "
                         "torch extra) to measure as well")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before one run is killed")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "ingest.json")
    ap.add_argument("--generate-only", type=Path, metavar="DEST", help=argparse.SUPPRESS)
    ap.add_argument("--copies", type=int, default=None, help=argparse.SUPPRESS)  # with --generate-only
    args = ap.parse_args(argv)

    if args.generate_only:
        make_big_trace(args.trace.resolve(), args.generate_only, args.size_gb, args.copies)
        return 0

    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    args.work_dir.mkdir(parents=True, exist_ok=True)
    args.hta_ok, args.hta_why = (False, "skipped") if args.skip_hta else hta_available(args.hta_python)
    if not args.skip_hta:
        print(f"HTA: {'version ' + args.hta_why if args.hta_ok else args.hta_why}", file=sys.stderr)

    machine = machine_info()  # before the run: records which opscope (commit, dirty files) gets measured
    traces = [("sample", args.trace, None)]
    if not args.skip_big:
        big = args.work_dir / f"big-{args.size_gb:g}gb.json.gz"
        # in a child: parsing the source here would leave this process (and the RSS floor of the
        # children it forks, where /usr/bin/time is missing) hundreds of MB larger
        subprocess.run([sys.executable, __file__, "--generate-only", str(big), "--trace", str(args.trace),
                        "--size-gb", str(args.size_gb)], check=True)
        meta = json.loads(big.with_name(big.name + ".meta.json").read_text())
        traces.append((f"big {meta['json_bytes'] / 1e9:.2f} GB", big, meta))

    results = []
    for label, path, meta in traces:
        json_bytes = meta["json_bytes"] if meta else _uncompressed_size(path)  # also warms the page cache
        if meta:
            _uncompressed_size(path)  # warm the page cache so no case pays for the disk
        cases = bench_trace(label, path, json_bytes, args, args.work_dir)
        results.append({"label": label, "path": str(path), "file_bytes": path.stat().st_size,
                        "json_bytes": json_bytes, "generated": meta,
                        "cases": [asdict(c) for c in cases]})

    table = markdown_table(results)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine, "repeat": args.repeat,
              "hta": args.hta_why if args.hta_ok else None, "traces": results, "table_md": table}
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
