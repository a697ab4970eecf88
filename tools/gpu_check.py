"""Check opscope's GPU paths on a real GPU in one unattended run (``tools/gpu-check``), or its CPU dry run.

    tools/gpu-check [--out DIR] [--dry-run] [--no-install] [--python PY] [--budget SECONDS] [--wheels DIR]

Records a small training program (``tools/gpu_check_program.py``: a conv net and a token MLP in fp32, a transformer
block under autocast, a ``DataLoader`` without workers whose batches are pageable copies, a ``.item()`` inside
``record_function("log_loss")``) with ``opscope record``; checks opscope's kernel-to-op links, steps and device
time against torch's own ``key_averages()`` of the same profiler run; runs ``opscope repro`` with its kernel check
and the GPU variants, ``opscope whatif`` and ``opscope advise`` (and ``advise --measure``), re-runs the program with
each change applied and compares the predicted step times with the re-runs'; measures ``opscope peaks`` and draws
``opscope roofline``, against the datasheet figures opscope has for the device. Every step has a time limit and the
whole run a budget (``--budget``, 450 s on a GPU, 240 s for the dry run).

Output: one line per check, ``PASS``, ``FAIL`` or ``SKIP`` with its figures, on stdout and in ``DIR/gpu-check.txt``,
and the same as JSON in ``DIR/gpu-check.json``; everything the run wrote (the recording, reproducers, re-runs'
step times, each command's output under ``logs/``) stays in DIR. Exit 0 only when no line is ``FAIL``.
``--dry-run`` runs what a CPU can (recording, repro without the GPU variants, whatif, advise --measure, peaks and
roofline on the CPU) and marks the GPU-only checks SKIP with the reason; timing comparisons are shown but not
judged there (a shared CPU's step times say nothing about a GPU's). docs/gpu-check.md says what each line means.

Only the standard library runs here: opscope and torch run in the interpreter ``--python`` names (default: this
one), with the checkout's ``src`` first on ``PYTHONPATH``. Where opscope does not import there, it is installed into
a fresh venv (``DIR/venv``): the checkout's ``src`` and the interpreter's site-packages (torch) on its path through a
``.pth`` file, and the missing dependencies by ``pip install --no-index``, offline, from the wheels of ``--wheels DIR``
(or pip's own find-links); ``--no-install`` never installs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tools" / "gpu_check_program.py"

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
#: Whole-run budgets (seconds): a GPU run must fit in 8 minutes with its start-up; the dry run in about 4 on 2 cores.
GPU_BUDGET_S = 450
DRY_BUDGET_S = 240
#: A step is not started with less than this left of the budget...
MIN_STEP_S = 10
#: ...and says so.
SPENT = "not run: the run's budget was spent"

#: The recording: 20 steps, the profiler skips 2, warms up 2 and records 5; the rest are its unrecorded baseline.
STEPS = 20
SCHEDULE = ("--wait", "2", "--warmup", "2", "--active", "5")
#: Steps of each re-run; the first RERUN_WARMUP are left out of its step time.
RERUN_STEPS = 30
RERUN_WARMUP = 3
REGION = "log_loss"

#: opscope's per-op times against key_averages(): within this share, or this many microseconds (rounding).
OP_REL = 0.02
OP_ABS_US = 5.0
#: Ops below this share of the total are not compared one by one (their sum still is).
OP_MIN_SHARE = 0.002
#: The device time that must have a launching op.
LINKED_SHARE = 0.99
#: opscope's total device time against key_averages()'s.
TOTAL_REL = 0.01
#: A trace step's duration against the program's step clock (run.json): within this share or this many ms.
STEP_REL = 0.15
STEP_ABS_MS = 2.0
#: A predicted step time against the re-run's: within this share, or inside the re-run's p10-p90.
PREDICT_REL = 0.20
#: A measured peak against the datasheet's: at most the datasheet's, at least this share of it.
PEAK_LOW = 0.25
#: CUPTI's synchronisation records, device rows in key_averages() where the profiler records them (Kineto's names).
SYNC_RECORDS = ("Event Sync", "Stream Sync", "Stream Wait Event", "Context Sync", "Unknown Sync")
#: repro's GPU variants.
GPU_VARIANTS = ("tf32", "cudnn_benchmark", "no_cudnn")


@dataclass
class Line:
    status: str
    check: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ran:
    """One command's outcome: ``rc`` None when it did not start or ran out of time."""

    argv: list[str]
    rc: int | None
    out: str
    err: str
    seconds: float
    timed_out: bool = False
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def spent(self) -> bool:
        """Not started: the run's budget was spent."""
        return self.err == SPENT

    def why(self) -> str:
        """Why it failed, in one line: the time limit, or the exit code and the last line of its stderr."""
        if self.spent:
            return SPENT
        if self.timed_out:
            return f"no result after {self.seconds:.0f} s (stopped; {self.log})"
        last = [ln for ln in self.err.strip().splitlines() if ln.strip()]
        return f"exit {self.rc}: {last[-1][:200] if last else 'no message'} ({self.log})"

    def json(self) -> Any:
        try:
            return json.loads(self.out)
        except ValueError:
            return None


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(a: float) -> str:
    return f"{100 * a:.1f}%"


def ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f} ms"


def steady(step_s: list[float]) -> dict[str, float] | None:
    """A re-run's step time: the median of its steps after the first RERUN_WARMUP, with their 10th and 90th
    percentiles (ns)."""
    rest = [s * 1e9 for s in step_s[RERUN_WARMUP:]]
    if len(rest) < 4:
        return None
    deciles = statistics.quantiles(rest, n=10)
    return {"median_ns": statistics.median(rest), "p10_ns": deciles[0], "p90_ns": deciles[-1], "steps": len(rest),
            "step_ns": [round(v) for v in rest]}


def pyproject_requirements() -> dict[str, str]:
    """opscope's required dependencies (pyproject.toml) and numpy (torch's), module name -> requirement: to say which
    ones are missing and install those."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    specs = re.findall(r'^\s*"([^"]+)"', block.group(1), re.M) if block else []
    special = {"protobuf": "google.protobuf"}
    out = {}
    for spec in [*specs, "numpy<3"]:
        name = re.match(r"[A-Za-z0-9_.\-]+", spec)
        if name:
            key = name.group(0).lower()
            out[special.get(key, key.replace("-", "_"))] = spec
    return out


PROBE = r"""
import importlib, json, sys
out = {"python": sys.executable, "version": sys.version.split()[0], "missing": [],
       "site": [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        out["missing"].append(name)
try:
    import opscope.cli
    from opscope.version import __version__
    out["opscope"], out["opscope_version"] = opscope.__file__, __version__
except Exception as exc:
    out["opscope_error"] = f"{type(exc).__name__}: {exc}"
try:
    import torch
    out["torch"], out["cuda"] = torch.__version__, torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    out["gpu"] = bool(torch.cuda.is_available())
    if out["gpu"]:
        out["device_name"] = torch.cuda.get_device_name(0)
        out["capability"] = list(torch.cuda.get_device_capability(0))
        out["devices"] = torch.cuda.device_count()
        out["bf16"] = bool(torch.cuda.is_bf16_supported())
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""

#: The recorded steps (run.json) against a re-run's steps, judged as opscope record judges its own unrecorded steps.
OVERHEAD = r"""
import json, sys
from opscope.analyses.recording import compare_steps
c = compare_steps(json.loads(sys.argv[1]), json.loads(sys.argv[2]))
print(json.dumps(None if c is None else {"verdict": c.verdict, "line": c.line()}))
"""

DATASHEET = r"""
import json, sys
from opscope.analyses.peaks import peaks_for
p = peaks_for(sys.argv[1])
print(json.dumps(None if p is None else {"device": p.device, "tflops": p.tflops, "gbps": p.gbps, "source": p.source}))
"""


class GpuCheck:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dry = bool(args.dry_run)
        self.out: Path = args.out
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.budget = float(args.budget or (DRY_BUDGET_S if self.dry else GPU_BUDGET_S))
        self.start = time.monotonic()
        self.lines: list[Line] = []
        self.python = str(args.python or sys.executable)
        self.env = dict(os.environ)
        self.env.update({"OPSCOPE_CACHE_DIR": str(self.out / "cache"), "COLUMNS": "200", "PYTHONUNBUFFERED": "1",
                         "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        self.use_src(True)
        self.count = 0
        self.info: dict[str, Any] = {}
        self.data: dict[str, Any] = {}

    # -- plumbing ---------------------------------------------------------------------------------------------
    def use_src(self, on: bool) -> None:
        """Put the checkout's src first on PYTHONPATH (or take it off: an installed copy runs)."""
        src = str(ROOT / "src")
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]
        self.env["PYTHONPATH"] = os.pathsep.join(([src] if on else []) + parts)

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def add(self, status: str, check: str, detail: str, **figures: Any) -> Line:
        if status == FAIL and SPENT in detail and self.dry:
            status = SKIP  # a slow machine is not a failure of the dry run; on a GPU the run must fit its budget
        line = Line(status, check, detail, figures)
        self.lines.append(line)
        say(f"{status} {check}: {detail}")
        return line

    def timing(self, within: bool) -> str:
        """A timing comparison's status: FAIL outside its tolerance on a GPU; in a dry run SKIP (not judged)."""
        if within:
            return PASS
        return SKIP if self.dry else FAIL

    def out_of_time(self, check: str) -> Line:
        return self.add(FAIL, check, f"{SPENT} ({self.budget:.0f} s)")

    def run(self, name: str, argv: list[str], limit: float, cwd: Path | None = None) -> Ran:
        """Run ``argv`` in its own process group for at most ``limit`` seconds (less what is left of the budget);
        its stdout and stderr go to logs/NN-name.out and .err."""
        self.count += 1
        stem = f"{self.count:02d}-{name}"
        log = f"logs/{stem}.out, .err"
        limit = min(limit, self.left())
        if limit < MIN_STEP_S:
            return Ran(argv, None, "", SPENT, 0.0, False, log)
        shown = " ".join("CODE" if "\n" in a else a for a in argv)
        say(f"{name}: {shown} (at most {limit:.0f} s)")
        began = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
                                    cwd=cwd or self.out, start_new_session=True)
        except OSError as exc:
            return Ran(argv, None, "", f"cannot start: {exc}", 0.0, False, log)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this run started: the command and its children
            except OSError:
                proc.kill()
            out, err = proc.communicate()
        seconds = time.monotonic() - began
        (self.logs / f"{stem}.out").write_text(out or "", encoding="utf-8")
        (self.logs / f"{stem}.err").write_text(err or "", encoding="utf-8")
        return Ran(argv, None if timed_out else proc.returncode, out or "", err or "", seconds, timed_out, log)

    def opscope(self, name: str, *args: str, limit: float = 60, cwd: Path | None = None) -> Ran:
        return self.run(name, [self.python, "-m", "opscope.cli", *args], limit, cwd)

    # -- 1. environment and install ------------------------------------------------------------------------------
    def probe(self, python: str) -> dict[str, Any] | None:
        r = self.run("probe", [python, "-c", PROBE, json.dumps(list(pyproject_requirements()))], 180)
        found = r.json() if r.ok else None
        if not isinstance(found, dict):
            self.data["probe_why"] = r.why()
            return None
        return found

    def environment(self) -> bool:
        """The interpreter, torch and the device; and opscope importable (installed offline where needed).
        False: nothing else can run."""
        info = self.probe(self.python)
        if info is None:
            self.add(FAIL, "environment", f"{self.python} did not run the probe: {self.data.get('probe_why')}")
            return False
        self.info = info
        torch_ok = "torch" in info
        if not torch_ok:
            self.add(FAIL, "environment", f"torch does not import with {self.python} "
                     f"({info.get('torch_error', 'not installed')}): install a CUDA or ROCm build of torch there "
                     "(on Linux x86-64, pip install torch==2.13.0 is the CUDA build; ROCm: the --index-url "
                     "https://download.pytorch.org/whl/rocmX.Y build), or give --python PY of an environment that "
                     "has one; this run installs nothing from the network", python=self.python)
        elif not self.dry and not info.get("gpu"):
            build = (f"CUDA {info['cuda']}" if info.get("cuda") else f"ROCm {info['hip']}" if info.get("hip")
                     else "a CPU-only build")
            self.add(FAIL, "environment", f"torch {info['torch']} ({build}) sees no GPU: on a machine without "
                     "one run --dry-run; a CPU-only build needs the CUDA or ROCm build of torch", torch=info["torch"])
            torch_ok = False
        else:
            device = (f"{info['device_name']} (compute {'.'.join(map(str, info.get('capability') or []))}, "
                      f"{info.get('devices')} device(s))" if info.get("gpu") else "CPU (dry run)")
            build = f"CUDA {info['cuda']}" if info.get("cuda") else f"ROCm {info['hip']}" if info.get("hip") else "CPU"
            self.add(PASS, "environment", f"Python {info['version']} ({self.python}), torch {info['torch']} ({build}), "
                     f"device {device}", python=info["version"], torch=info["torch"], cuda=info.get("cuda"),
                     hip=info.get("hip"), device=info.get("device_name"), capability=info.get("capability"))
        if not torch_ok:
            if "opscope" not in info:
                self.add(SKIP, "install", "not tried: nothing can run without torch (see environment)")
                return False
            self.install(info)
            return False
        return self.install(info)

    def install(self, info: dict[str, Any]) -> bool:
        if "opscope" in info:
            where = "the checkout's src" if str(ROOT / "src") in info["opscope"] else info["opscope"]
            status = SKIP if self.args.no_install else PASS
            self.add(status, "install", f"not needed: opscope {info['opscope_version']} imports from {where} with "
                     f"{self.python}" + (" (--no-install)" if self.args.no_install else ""), path=info["opscope"])
            return True
        missing = ", ".join(info.get("missing") or []) or "none of its dependencies"
        problem = f"opscope does not import with {self.python} ({info.get('opscope_error')}; missing: {missing})"
        if self.args.no_install:
            self.add(FAIL, "install", f"{problem}; --no-install: nothing installed. Install it there with pip "
                     "install -e '.[torch]' (needs the network or a wheelhouse)")
            return False
        # A fresh venv that sees this interpreter's packages (torch among them) through a .pth file, as
        # --system-site-packages would not where the interpreter is itself a venv's, and the checkout's src; only
        # the missing dependencies are installed into it, from wheels already here: pip never reaches the network.
        venv = self.out / "venv"
        made = self.run("venv", [self.python, "-m", "venv", str(venv)], 120)
        py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        sites = [Path(p) for p in (info.get("site") or [])]
        requirements = pyproject_requirements()
        wanted = [requirements[m] for m in info.get("missing") or [] if m in requirements]
        done = made
        if made.ok:
            where = self.run("venv-site", [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], 60)
            if where.ok:
                lines = [str(ROOT / "src"), *map(str, sites)]
                (Path(where.out.strip()) / "opscope_checkout.pth").write_text("\n".join(lines) + "\n")
            done = where
        if done.ok and wanted:
            pip = [str(py), "-m", "pip", "install", "--no-index"]
            for wheels in self.args.wheels or []:
                pip += ["--find-links", str(wheels)]
            done = self.run("pip-install", [*pip, *wanted], 300)
        if not done.ok:
            self.add(FAIL, "install", f"{problem}; an offline install into {venv} failed ({done.why()}): install "
                     f"{' '.join(repr(w) for w in wanted) or 'them'} with {self.python}, or give --wheels DIR with "
                     "their wheels")
            return False
        again = self.probe(str(py))
        if again is None or "opscope" not in again:
            self.add(FAIL, "install", f"{problem}; installed {', '.join(wanted) or 'nothing'} into {venv}, but "
                     f"opscope still does not import there ({(again or {}).get('opscope_error')})")
            return False
        self.python = str(py)
        self.info.update(again)
        self.add(PASS, "install", f"installed offline into {venv}: {', '.join(wanted) or 'no package'} (pip install "
                 f"--no-index), opscope {again['opscope_version']} from the checkout's src (its optional C parts not "
                 "built: the Python paths run)", path=again["opscope"], installed=wanted)
        return True

    # -- 2. the recording ---------------------------------------------------------------------------------------
    def program_args(self) -> list[str]:
        return ["--device", "cpu", "--threads", "1"] if self.dry else ["--device", "cuda"]

    def record(self) -> bool:
        work = self.out / "program"
        work.mkdir(exist_ok=True)
        shutil.copy(PROGRAM, work / "train_check.py")
        rec = self.out / "rec"
        self.data["key_averages_path"] = rec / "key_averages.json"
        # on the CPU one thread, set by record too: run.json then says so, and repro replays the cases with it
        device = ["--cpu", "--intra-op-threads", "1"] if self.dry else ["--cuda"]
        r = self.opscope("record", "record", *SCHEDULE, *device, "-o", str(rec), "--",
                         self.python, "train_check.py", "--steps", str(STEPS), *self.program_args(),
                         "--key-averages", str(rec / "key_averages.json"), limit=150 if self.dry else 180, cwd=work)
        if r.spent:
            self.out_of_time("record")
            return False
        run_json = rec / "run.json"
        run = json.loads(run_json.read_text()) if run_json.is_file() else {}
        traces = [rec / t for t in run.get("traces") or []]
        if not r.ok or not traces or not traces[0].is_file():
            self.add(FAIL, "record", f"opscope record: {r.why()}; run.json {run.get('status', 'absent')}")
            return False
        self.data.update(run=run, trace=traces[0], rec=rec)
        size = traces[0].stat().st_size
        ka = rec / "key_averages.json"
        recorded = run.get("recorded_steps") or []
        self.add(PASS, "record", f"{run.get('steps')} steps, recorded {_span(recorded)} into {traces[0].name} "
                 f"({size / 1e6:.1f} MB), key_averages() {'written' if ka.is_file() else 'MISSING'}; "
                 f"{r.seconds:.1f} s", steps=run.get("steps"), recorded_steps=recorded, trace_bytes=size,
                 seconds=round(r.seconds, 1))
        return True

    # -- 3. links, steps and device time against key_averages() --------------------------------------------------
    def key_averages(self) -> dict[str, Any] | None:
        path = self.data["key_averages_path"]
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def tables(self) -> None:
        trace = str(self.data["trace"])
        steps = self.opscope("steps", "steps", trace, "-f", "json")
        self.check_steps(steps)
        ops = self.opscope("ops", "ops", trace, "-f", "json", "--limit", "0")
        ka = self.key_averages()
        if self.dry:
            self.check_cpu_ops(ops, ka)
            for check in ("kernel-links", "device-time"):
                self.add(SKIP, check, "GPU only: a CPU recording has no kernels")
            return
        gpu_ops = self.opscope("ops-gpu", "ops", "--gpu", trace, "-f", "json", "--limit", "0")
        by_op = self.opscope("kernels-by-op", "kernels", "--by-op", trace, "-f", "json", "--limit", "0")
        gpu = self.opscope("gpu", "gpu", trace, "-f", "json")
        self.check_links(by_op, ka)
        self.check_device_ops(gpu_ops, ka)
        self.check_busy(by_op, gpu, steps, ka)

    def check_steps(self, r: Ran) -> None:
        rows = r.json() if r.ok else None
        if not isinstance(rows, list):
            self.add(FAIL, "steps", f"opscope steps: {r.why()}")
            return
        run = self.data["run"]
        recorded = run.get("recorded_steps") or []
        clock = run.get("step_times_ns") or []
        found = [row["step"] for row in rows]
        pairs = [(row["dur_ns"], clock[row["step"] - 1]) for row in rows if 1 <= row["step"] <= len(clock)]
        diffs = sorted(t - c for t, c in pairs)
        mid_diff = median([float(d) for d in diffs])
        mid_clock = median([float(c) for _, c in pairs])
        figures = {"trace_steps": found, "recorded_steps": recorded, "median_diff_ns": mid_diff,
                   "median_clock_ns": mid_clock}
        if found != recorded:
            self.add(FAIL, "steps", f"the trace has steps {found}, run.json recorded {recorded}", **figures)
            return
        within = abs(mid_diff) <= max(STEP_REL * mid_clock, STEP_ABS_MS * 1e6)
        note = "" if within or not self.dry else " (outside the tolerance; not judged in a dry run)"
        self.add(self.timing(within), "steps", f"{len(found)} steps {_span(found)} as run.json recorded; trace "
                 f"step - step clock: median {ms(mid_diff)} on {ms(mid_clock)} (tolerance {pct(STEP_REL)} or "
                 f"{STEP_ABS_MS:g} ms){note}", **figures)

    def check_cpu_ops(self, r: Ran, ka: dict[str, Any] | None) -> None:
        rows = r.json() if r.ok else None
        if not isinstance(rows, list) or ka is None:
            self.add(FAIL, "op-times", f"opscope ops: {r.why()}" if not isinstance(rows, list) else
                     "the program wrote no key_averages() (see logs of record)")
            return
        ref = {o["name"]: o for o in ka["ops"]}
        total = sum(row["self_ns"] for row in rows) or 1
        worst, compared, bad = 0.0, 0, []
        for row in rows:
            o = ref.get(row["name"])
            if o is None or row["self_ns"] < OP_MIN_SHARE * total:
                continue
            compared += 1
            want = o["self_cpu_time_total_us"] * 1000
            err = abs(row["self_ns"] - want) / max(want, 1)
            worst = max(worst, err)
            if row["calls"] != o["count"] or abs(row["self_ns"] - want) > max(OP_REL * want, OP_ABS_US * 1000):
                bad.append(f"{row['name']} ({row['calls']} calls, {ms(row['self_ns'])} vs {o['count']}, {ms(want)})")
        missing = [n for n, o in ref.items() if n.startswith("aten::") and n not in {row["name"] for row in rows}]
        status = PASS if compared and not bad and not missing else FAIL
        detail = (f"self CPU time and calls of {compared} ops against key_averages(): worst {pct(worst)} "
                  f"(tolerance {pct(OP_REL)} or {OP_ABS_US:g} us)")
        if bad:
            detail += "; differ: " + "; ".join(bad[:3])
        if missing:
            detail += "; not in opscope's table: " + ", ".join(missing[:5])
        self.add(status, "op-times", detail, compared=compared, worst_rel=round(worst, 4), differ=len(bad))

    def check_links(self, r: Ran, ka: dict[str, Any] | None) -> None:
        rows = r.json() if r.ok else None
        if not isinstance(rows, list):
            self.add(FAIL, "kernel-links", f"opscope kernels --by-op: {r.why()}")
            return
        total = sum(row["total_ns"] for row in rows)
        unlinked = sum(row["total_ns"] for row in rows if not row["op"] or row["op"].startswith("("))
        linked = 1 - unlinked / total if total else 0.0
        ours: dict[str, float] = {}
        for row in rows:
            if row["op"] and not row["op"].startswith("("):
                ours[row["op"]] = ours.get(row["op"], 0) + row["total_ns"]
        worst, bad, compared = self.compare(ours, ka, "self_device_time_total_us", total)
        status = PASS if total and linked >= LINKED_SHARE and not bad and compared else FAIL
        detail = (f"{pct(linked)} of {ms(total)} device time has a launching op (at least {pct(LINKED_SHARE)}); "
                  f"each op's own device time against key_averages()' self device time, {compared} ops: worst "
                  f"{pct(worst)} (tolerance {pct(OP_REL)} or {OP_ABS_US:g} us)")
        if bad:
            detail += "; differ: " + "; ".join(bad[:3])
        if ka is None:
            detail += "; the program wrote no key_averages()"
        self.add(status, "kernel-links", detail, linked_share=round(linked, 4), device_ns=total, compared=compared,
                 worst_rel=round(worst, 4), differ=len(bad))

    def compare(self, ours: dict[str, float], ka: dict[str, Any] | None, key: str,
                total: float) -> tuple[float, list[str], int]:
        """Per-op device times (ns) against key_averages()' ``key`` of the CPU ops: the worst relative error, the
        ops beyond the tolerance, and how many were compared (ops above OP_MIN_SHARE of ``total`` on either side)."""
        if ka is None:
            return 0.0, ["no key_averages()"], 0
        ref = {o["name"]: o[key] * 1000 for o in ka["ops"] if "cpu" in o.get("device_type", "").lower()}
        # the ops of both (annotations such as ProfilerStep* and record_function regions are not ops)
        names = set(ours) | {n for n, v in ref.items() if v and n.startswith("aten::")}
        worst, bad, compared = 0.0, [], 0
        for name in sorted(names):
            a, b = ours.get(name, 0.0), ref.get(name, 0.0)
            if max(a, b) < OP_MIN_SHARE * total:
                continue
            compared += 1
            worst = max(worst, abs(a - b) / max(b, 1))
            if abs(a - b) > max(OP_REL * b, OP_ABS_US * 1000):
                bad.append(f"{name} {ms(a)} vs {ms(b)}")
        return worst, bad, compared

    def check_device_ops(self, r: Ran, ka: dict[str, Any] | None) -> None:
        rows = r.json() if r.ok else None
        if not isinstance(rows, list):
            self.add(FAIL, "op-times", f"opscope ops --gpu: {r.why()}")
            return
        ours = {row["name"]: float(row["gpu_ns"] or 0) for row in rows}
        total = max(ours.values(), default=0.0)
        worst, bad, compared = self.compare(ours, ka, "device_time_total_us", total)
        detail = (f"device time of {compared} ops (with the ops they call) against key_averages()' device totals: "
                  f"worst {pct(worst)} (tolerance {pct(OP_REL)} or {OP_ABS_US:g} us)")
        if bad:
            detail += "; differ: " + "; ".join(bad[:3])
        self.add(PASS if compared and not bad else FAIL, "op-times", detail, compared=compared,
                 worst_rel=round(worst, 4), differ=len(bad))

    def check_busy(self, by_op: Ran, gpu: Ran, steps: Ran, ka: dict[str, Any] | None) -> None:
        rows, devices, step_rows = by_op.json(), gpu.json(), steps.json()
        if not (isinstance(rows, list) and isinstance(devices, list) and isinstance(step_rows, list)):
            failed = next(r for r in (by_op, gpu, steps) if not isinstance(r.json(), list))
            self.add(FAIL, "device-time", f"opscope {' '.join(failed.argv[3:5])}: {failed.why()}")
            return
        ours = sum(row["total_ns"] for row in rows)
        theirs, syncs = None, 0.0
        if ka is not None:
            # what torch's own table sums as "Self CUDA time total": device rows, not the GPU's user annotations;
            # nor CUPTI's sync records (when the profiler records them), which opscope keeps apart from the work
            device = [o for o in ka["ops"] if "cpu" not in o.get("device_type", "cpu").lower()
                      and not o.get("is_user_annotation")]
            theirs = sum(o["self_device_time_total_us"] * 1000 for o in device if o["name"] not in SYNC_RECORDS)
            syncs = sum(o["self_device_time_total_us"] * 1000 for o in device if o["name"] in SYNC_RECORDS)
        device_rows = [d for d in devices if d.get("stream") is None]
        busy = sum(d["busy_ns"] for d in device_rows)
        step_busy = sum(s["gpu_busy_ns"] or 0 for s in step_rows)
        problems = []
        if theirs is None or abs(ours - theirs) > TOTAL_REL * max(theirs, 1):
            problems.append(f"device time {ms(ours)} vs key_averages() {ms(theirs)}")
        if busy > ours:
            problems.append(f"busy {ms(busy)} above the device time {ms(ours)}")
        if abs(step_busy - busy) > TOTAL_REL * max(busy, 1):
            problems.append(f"the steps' busy time {ms(step_busy)} vs gpu's {ms(busy)}")
        detail = (f"device time {ms(ours)} (kernels, copies, fills) vs key_averages() {ms(theirs)} (tolerance "
                  f"{pct(TOTAL_REL)}); busy in the step window {ms(busy)}"
                  f" ({pct(busy / sum(d['window_ns'] for d in device_rows)) if device_rows else '-'}), "
                  f"the steps' sum {ms(step_busy)}")
        if syncs:
            detail += f" (key_averages()' sync records left out: {ms(syncs)})"
        if problems:
            detail += "; " + "; ".join(problems)
        self.add(FAIL if problems else PASS, "device-time", detail, device_ns=ours, key_averages_ns=theirs,
                 busy_ns=busy, steps_busy_ns=step_busy)

    # -- 4. repro ------------------------------------------------------------------------------------------------
    def repro(self) -> None:
        # On the CPU the cases are picked by host self time, where an autograd node's own time (ConvolutionBackward0)
        # can rank among the top ones; repro takes such a name for a TensorFlow op: the dry run keeps to aten ops.
        if self.dry:
            choice = ["--variants", "channels_last", "--op", "^aten::", "--budget", "0.1"]
        else:
            choice = ["--variants", ",".join(GPU_VARIANTS), "--budget", "0.3"]
        r = self.opscope("repro", "repro", str(self.data["trace"]), "--top", "5", "-o", str(self.out / "repro"),
                         *choice, "-f", "json", limit=150 if self.dry else 200)
        cases = r.json() if r.ok else None
        if r.spent:
            for check in ("repro", "repro-check", "repro-variants"):
                self.out_of_time(check)
            return
        if not isinstance(cases, list):
            self.add(FAIL, "repro", f"opscope repro: {r.why()}")
            return
        self.data["repro_cases"] = cases
        ran = [c for c in cases if c.get("status") == "ok"]
        ratios = [c["ratio"] for c in ran if c.get("ratio")]
        status = PASS if len(cases) == 5 and len(ran) == len(cases) else FAIL
        self.add(status, "repro", f"{len(cases)} cases, {len(ran)} ran on {ran[0]['device'] if ran else '-'}; "
                 f"replay/trace time per call: median {median(ratios):.2f} ({min(ratios, default=0):.2f}-"
                 f"{max(ratios, default=0):.2f}); {r.seconds:.0f} s" + _not_ok(cases), cases=len(cases), ran=len(ran),
                 ratios=ratios)
        want = "ops" if self.dry else "kernels"
        checked = [c for c in ran if c.get("check") is not None]
        differ = [c for c in checked if c["check"] != "same" or c.get("check_of") != want]
        detail = (f"{len(checked) - len(differ)} of {len(ran)} cases ran the {want} the trace recorded under the op"
                  + (" (on the CPU: ops; the kernel names are checked on a GPU)" if self.dry else ""))
        for c in differ[:3]:
            detail += (f"; case {c['id']} {c['op']}: {c['check']} ({c.get('check_of')}), missing "
                       f"{_names(c.get('missing'))}, extra {_names(c.get('extra'))}")
        unchecked = [c for c in ran if c.get("check") is None]
        if unchecked:
            detail += f"; {len(unchecked)} not checked ({unchecked[0].get('check_note')})"
        self.add(PASS if checked and not differ and not unchecked else FAIL, "repro-check", detail,
                 checked=len(checked), differ=len(differ))
        self.repro_variants(ran)

    def repro_variants(self, ran: list[dict[str, Any]]) -> None:
        if self.dry:
            done = [v for c in ran for v in c.get("variants") or [] if v.get("status") == "ok"]
            self.add(SKIP, "repro-variants", f"GPU only ({', '.join(GPU_VARIANTS)}); on the CPU channels_last ran in "
                     f"{len(done)} case(s)")
            return
        found: dict[str, list[str]] = {v: [] for v in GPU_VARIANTS}
        failed: list[str] = []
        for c in ran:
            for v in c.get("variants") or []:
                name = v.get("name")
                if name not in found:
                    continue
                if v.get("status") == "ok":
                    found[name].append(f"x{v.get('speedup')}")
                elif v.get("status") not in ("not run", "not applicable"):
                    failed.append(f"case {c['id']} {name}: {v.get('status')}")
        parts = [f"{name} {', '.join(s) if s else 'applied to no case'}" for name, s in found.items()]
        status = FAIL if failed or not any(found.values()) else PASS
        self.add(status, "repro-variants", "speed-ups: " + "; ".join(parts)
                 + (f"; failed: {'; '.join(failed[:3])}" if failed else ""),
                 speedups=found, failed=failed)

    # -- 5. predictions against re-runs ----------------------------------------------------------------------------
    def whatif(self) -> None:
        r = self.opscope("whatif", "whatif", str(self.data["trace"]), "-c", f"sync:{REGION}=0", "-f", "json")
        rows = r.json() if r.ok else None
        if not isinstance(rows, list) or not rows:
            self.add(FAIL, "whatif", f"opscope whatif: {r.why()}")
            return
        pieces = re.search(r"\(([\d,]+) pieces?\)", r.err)
        n = int(pieces.group(1).replace(",", "")) if pieces else None
        replayed = median([float(row["replayed_ns"]) for row in rows])
        measured = median([float(row["measured_ns"]) for row in rows])
        predicted = median([float(row["predicted_ns"]) for row in rows])
        self.data.update(replayed=replayed, sync_predicted=predicted)
        status = PASS if self.dry or n else FAIL
        self.add(status, "whatif", f"sync:{REGION}=0 changes {n} pieces: median step {ms(predicted)} predicted, "
                 f"{ms(replayed)} replayed, {ms(measured)} measured (replay error "
                 f"{pct(abs(replayed - measured) / measured) if measured else '-'})"
                 + ("" if n or self.dry else "; the region's .item() wait was not found"),
                 pieces=n, predicted_ns=predicted, replayed_ns=replayed, measured_ns=measured)

    def advise(self) -> None:
        r = self.opscope("advise", "advise", str(self.data["rec"]), "-f", "json")
        found = r.json() if r.ok else None
        if not isinstance(found, list):
            self.add(FAIL, "advise", f"opscope advise: {r.why()}")
            return
        self.data["findings"] = found
        rules = sorted({f["rule"] for f in found})
        self.add(PASS, "advise", f"{len(found)} findings ({', '.join(rules)})", rules=rules)

    def rerun(self, name: str, *change: str) -> dict[str, float] | None:
        times = self.out / "reruns" / f"{name}.json"
        times.parent.mkdir(exist_ok=True)
        r = self.run(f"rerun-{name}", [self.python, "train_check.py", "--steps", str(RERUN_STEPS),
                                       *self.program_args(), *change, "--times", str(times)],
                     90 if self.dry else 120, cwd=self.out / "program")
        if not r.ok or not times.is_file():
            self.data[f"rerun_{name}_why"] = r.why()
            return None
        doc = json.loads(times.read_text())
        result = steady(doc["step_s"])
        if result is not None and doc.get("synced_step_s"):
            result["synced_ns"] = doc["synced_step_s"] * 1e9
        return result

    def overhead(self, rerun_ns: list[int]) -> dict[str, Any]:
        """The recording's recorded steps (run.json) against the re-run's, in opscope record's words."""
        run = self.data.get("run") or {}
        times = run.get("step_times_ns") or []
        recorded = [times[n - 1] for n in run.get("recorded_steps") or [] if isinstance(n, int) and 0 < n <= len(times)]
        r = self.run("overhead", [self.python, "-c", OVERHEAD, json.dumps(recorded), json.dumps(rerun_ns)], 60)
        found = r.json() if r.ok else None
        if isinstance(found, dict):
            return found
        return {"verdict": None, "line": f"no judgement ({r.why() if not r.ok else 'no steps to compare'})"}

    def reruns(self) -> None:
        self.data["base"] = base = self.rerun("baseline")
        replayed = self.data.get("replayed")
        if base is None:
            self.add(FAIL, "rerun-baseline", f"the program without a change: {self.data.get('rerun_baseline_why')}")
        else:
            ratio = replayed / base["median_ns"] if replayed else None
            overhead = self.overhead(base["step_ns"])
            self.add(PASS, "rerun-baseline", f"{base['steps']} steps: {_steady(base)}; the recorded steps replayed "
                     f"{ms(replayed)}: {'-' if ratio is None else f'{ratio:.2f}'}x the re-run (every prediction below "
                     f"is of recorded steps); against the re-run's steps, {overhead['line']}", ratio=ratio,
                     overhead=overhead["verdict"], **base)
        self.predict("predict-sync", f"whatif sync:{REGION}=0", self.data.get("sync_predicted"), "no-item",
                     ["--no-item"], f"the .item() in {REGION} removed")
        if self.dry:
            self.add(SKIP, "predict-pinned", "GPU only: a CPU run makes no host-to-device copies")
            return
        pinned = next((f for f in self.data.get("findings") or [] if f["rule"] == "memcpy"
                       and f["title"].startswith("Pageable")), None)
        if pinned is None:
            self.add(FAIL, "predict-pinned", "advise made no pageable-copy finding; the program copies about 20 MB "
                     "of pageable batches to the device per step")
        else:
            self.predict("predict-pinned", "advise memcpy (pinned batches)", self.minus(pinned), "pin", ["--pin"],
                         "pin_memory=True, non_blocking=True")
        if self.has_tf32():
            self.data["tf32_rerun"] = self.rerun("tf32", "--tf32")

    def minus(self, finding: dict[str, Any]) -> float | None:
        """The replayed step less a finding's saving (its rule's own estimate where it was measured since)."""
        replayed = self.data.get("replayed")
        saving = finding.get("estimated_ns") if finding.get("saving_method") == "measured" else finding["saving_ns"]
        return None if replayed is None or saving is None else replayed - saving

    def has_tf32(self) -> bool:
        info = self.info
        return bool(info.get("cuda")) and not info.get("hip") and (info.get("capability") or [0])[0] >= 8

    def tf32(self) -> None:
        """TF32's predicted step against the TF32 re-run: from advise's finding of fp32 matmuls on a GPU with tensor
        cores (its assumed speed-up), else from the TF32 speed-ups repro measured for its cases."""
        if self.dry:
            self.add(SKIP, "predict-tf32", "GPU only: TF32 is a GPU's tensor-core math")
            return
        if not self.has_tf32():
            self.add(SKIP, "predict-tf32", f"no TF32 on {self.info.get('device_name')} (NVIDIA compute 8.0 and newer)")
            return
        got = self.data.get("tf32_rerun")
        if got is None:
            self.add(FAIL, "predict-tf32", f"the re-run with TF32 on: {self.data.get('rerun_tf32_why', 'not run')}")
            return
        finding = self.tf32_finding(self.data.get("findings"))
        predicted = None if finding is None else self.minus(finding)
        if predicted is not None:
            self.judge("predict-tf32", f"advise dominant-op (assumed speed-up): predicted {ms(predicted)}/step, "
                       f"re-run with TF32 on {_steady(got)}", predicted, got)
            return
        saving, cases = self.repro_tf32_saving()
        replayed = self.data.get("replayed")
        if not cases or replayed is None:
            self.add(FAIL, "predict-tf32", "advise made no finding of fp32 matmuls on tensor cores (the program's fp32 "
                     f"MLP) and repro measured no TF32 speed-up; the TF32 re-run: {_steady(got)}")
            return
        self.judge("predict-tf32", f"no advise finding (kernel names that do not say fp32?); repro's TF32 speed-ups of "
                   f"{cases} cases: predicted {ms(replayed - saving)}/step, re-run with TF32 on {_steady(got)}",
                   replayed - saving, got)

    @staticmethod
    def tf32_finding(findings: Any) -> dict[str, Any] | None:
        return next((f for f in findings or [] if f.get("rule") == "dominant-op"
                     and f["title"].lower().startswith("fp32 matmuls") and f.get("saving_ns") is not None), None)

    def repro_tf32_saving(self) -> tuple[float, int]:
        """The saving per step of the repro cases' measured TF32 speed-ups (each case's device time per recorded
        step x (1 - 1/speed-up)), and how many cases had one."""
        steps = len(self.data["run"].get("recorded_steps") or []) or 1
        saving, cases = 0.0, 0
        for c in self.data.get("repro_cases") or []:
            for v in c.get("variants") or []:
                if v.get("name") == "tf32" and v.get("status") == "ok" and v.get("speedup"):
                    cases += 1
                    saving += max(0.0, c["total_ns"] / steps * (1 - 1 / v["speedup"]))
        return saving, cases

    def predict(self, check: str, what: str, predicted: float | None, name: str, change: list[str],
                applied: str) -> None:
        got = self.rerun(name, *change)
        if got is None:
            self.add(FAIL, check, f"the re-run with {applied}: {self.data.get(f'rerun_{name}_why')}")
            return
        if predicted is None:
            self.add(FAIL, check, f"{what}: no prediction; re-run with {applied}: {_steady(got)}")
            return
        self.judge(check, f"{what}: predicted {ms(predicted)}/step, re-run with {applied} {_steady(got)}",
                   predicted, got)

    def judge(self, check: str, text: str, predicted: float, got: dict[str, float]) -> None:
        ratio = predicted / got["median_ns"]
        spread = (got["p90_ns"] - got["p10_ns"]) / got["median_ns"]
        within = abs(ratio - 1) <= PREDICT_REL or got["p10_ns"] <= predicted <= got["p90_ns"]
        base = self.data.get("base")
        gain = ""
        if base is not None and self.data.get("replayed"):
            gain = (f"; predicted saving {ms(self.data['replayed'] - predicted)}, re-run's "
                    f"{ms(base['median_ns'] - got['median_ns'])} against the baseline re-run")
        note = "" if within or not self.dry else " (not judged in a dry run)"
        self.add(self.timing(within), check, f"{text}: predicted/re-run {ratio:.2f}, spread {pct(spread)} "
                 f"(tolerance: within {pct(PREDICT_REL)} or inside the re-run's p10-p90){gain}{note}",
                 predicted_ns=predicted,
                 ratio=round(ratio, 3), spread=round(spread, 3), **got)

    def advise_measure(self) -> None:
        r = self.opscope("advise-measure", "advise", str(self.data["rec"]), "--measure", "--measure-dir",
                         str(self.out / "measure"), "--reruns", "1" if self.dry else "2", "--budget",
                         "0.1" if self.dry else "0.3", "-f", "json", limit=120 if self.dry else 200)
        if r.spent:
            self.out_of_time("advise-measure")
            return
        found = r.json() if r.ok else None
        if not isinstance(found, list):
            self.add(FAIL, "advise-measure", f"opscope advise --measure: {r.why()}")
            return
        measured = [f for f in found if f.get("measured")]
        by_repro = [f for f in found if f.get("saving_method") == "measured" and not f.get("measured")]
        self.add(PASS, "advise-measure", f"{len(found)} findings; {len(measured)} re-run with the program changed "
                 f"({', '.join(f['measured']['applied'] for f in measured) or 'none'}), {len(by_repro)} with speed-ups "
                 f"measured by reproducers; {r.seconds:.0f} s", findings=len(found), rerun=len(measured),
                 by_repro=len(by_repro))
        tf32 = self.tf32_finding(found)
        got = self.data.get("tf32_rerun")
        replayed = self.data.get("replayed")
        if tf32 is not None and tf32.get("saving_method") == "measured" and got is not None and replayed:
            predicted = replayed - tf32["saving_ns"]
            self.judge("advise-measure:tf32", f"dominant-op with repro's measured TF32 speed-up: predicted "
                       f"{ms(predicted)}/step, re-run with TF32 on {_steady(got)}", predicted, got)
        for f in measured:
            m = f["measured"]
            check = f"advise-measure:{f['rule']}"
            if m.get("failed"):
                self.add(FAIL, check, f"re-run with {m['applied']} failed: {m['failed']}")
                continue
            predicted = m.get("predicted_step_ns")
            how = "whatif"
            if predicted is None and f.get("estimated_ns") is not None and self.data.get("replayed"):
                predicted, how = self.data["replayed"] - f["estimated_ns"], "estimate"
            got = {"median_ns": float(m["step_ns"]), "p10_ns": float(m["p10_ns"]), "p90_ns": float(m["p90_ns"]),
                   "steps": m["steps"]}
            if predicted is None:
                self.add(SKIP, check, f"{m['applied']}: re-run {_steady(got)}, against {ms(m['baseline_step_ns'])} "
                         "unrecorded; the finding has no saving to predict a step time from", **got)
                continue
            self.judge(check, f"{m['applied']} ({how}): predicted {ms(predicted)}/step, re-run {_steady(got)}",
                       float(predicted), got)

    # -- 6. peaks and roofline ------------------------------------------------------------------------------------
    def peaks(self) -> None:
        path = self.out / "peaks.json"
        r = self.opscope("peaks", "peaks", "--seconds", "1.5" if self.dry else "4", "-o", str(path), "-f", "json",
                         limit=60)
        if not r.ok or not path.is_file():
            self.add(FAIL, "peaks", f"opscope peaks: {r.why()}")
            self.add(SKIP, "peaks-datasheet", "no measured peaks")
            return
        measured = json.loads(path.read_text())
        self.data["peaks_file"] = path
        figures = ", ".join(f"{k} {v:.4g} TFLOP/s" for k, v in measured["tflops"].items())
        self.add(PASS, "peaks", f"{measured['device']}: {figures}, copy {measured['gbps']:.4g} GB/s",
                 tflops=measured["tflops"], gbps=measured["gbps"], device=measured["device"])
        if self.dry:
            self.add(SKIP, "peaks-datasheet", "GPU only: opscope's table has GPUs' datasheets, not CPUs'")
            return
        d = self.run("datasheet", [self.python, "-c", DATASHEET, measured["device"]], 60)
        sheet = d.json() if d.ok else None
        if not isinstance(sheet, dict):
            self.add(FAIL, "peaks-datasheet", f"{measured['device']!r} is not in analyses/data/peaks.json"
                     if d.ok else f"datasheet lookup: {d.why()}")
            return
        parts, bad = [], []
        pairs = [(k, v, sheet["tflops"].get(k)) for k, v in measured["tflops"].items()]
        pairs.append(("copy", measured["gbps"], sheet["gbps"]))
        ratios = {}
        for key, got, peak in pairs:
            if not peak:
                parts.append(f"{key} {got:.4g} (no datasheet figure)")
                continue
            ratios[key] = got / peak
            parts.append(f"{key} {got:.4g} of {peak:g} ({pct(got / peak)})")
            if not PEAK_LOW <= got / peak <= 1:
                bad.append(key)
        self.add(FAIL if bad or not ratios else PASS, "peaks-datasheet",
                 f"measured against {sheet['device']}'s datasheet (TFLOP/s; copy GB/s): {'; '.join(parts)} (expected "
                 f"{pct(PEAK_LOW)}-100%)" + (f"; outside: {', '.join(bad)}" if bad else ""), ratios=ratios,
                 datasheet=sheet["device"])

    def roofline(self) -> None:
        trace = str(self.data["trace"])
        peaks = self.data.get("peaks_file")
        if self.dry:
            self.add(SKIP, "roofline", "GPU only: the datasheet roofs are GPUs' (roofline-measured draws the CPU's)")
        else:
            r = self.opscope("roofline", "roofline", trace, "-f", "json", "--limit", "0")
            self.roofline_line("roofline", r, datasheet=True)
        if peaks is not None:
            r = self.opscope("roofline-measured", "roofline", trace, "--peaks", str(peaks), "-f", "json", "--limit",
                             "0")
            self.roofline_line("roofline-measured", r, datasheet=False)
        else:
            self.add(SKIP, "roofline-measured", "no measured peaks (see peaks)")

    def roofline_line(self, check: str, r: Ran, datasheet: bool) -> None:
        rows = r.json() if r.ok else None
        if not isinstance(rows, list):
            self.add(FAIL, check, f"opscope roofline: {r.why()}")
            return
        known = re.search(r"recognised '(.*?)' as ([^;(]+)", r.err)
        modelled = re.search(r"(\d+(?:\.\d+)?)% of the (?:device time|outermost ops' time)", r.err)
        fast = re.search(r"(\d+) row\(s\) ran faster than their roof", r.err)
        with_roof = [row for row in rows if row.get("pct_of_roof") is not None]
        time_ns = sum(row["device_ns"] for row in rows)
        best = max(with_roof, key=lambda row: row["device_ns"], default=None)
        detail = (f"{len(rows)} rows, {len(with_roof)} under a roof; modelled "
                  f"{modelled.group(1) + '%' if modelled else '-'} of the time ({ms(time_ns)} in rows)")
        if best is not None:
            detail += (f"; largest: {best['name']} {best['dtype']} at {best['pct_of_roof']:.1f}% of its roof "
                       f"({best['bound']}-bound)")
        if fast:
            detail += f"; {fast.group(1)} rows faster than their roof (shown at 100%)"
        if datasheet:
            detail = (f"device {known.group(1)!r} recognised as {known.group(2).strip()}; " if known else
                      "device NOT recognised; ") + detail
        ok = bool(rows) and bool(with_roof) and (known is not None or not datasheet)
        self.add(PASS if ok else FAIL, check, detail, rows=len(rows), with_roof=len(with_roof),
                 recognised=known.group(2).strip() if known else None)

    # -- the run ------------------------------------------------------------------------------------------------
    def steps_in_order(self) -> list[tuple[tuple[str, ...], Callable[[], None]]]:
        """Each step with the checks it reports: the cheap ones first, so that a run out of time still has them."""
        return [(("steps", "op-times", "kernel-links", "device-time"), self.tables), (("whatif",), self.whatif),
                (("advise",), self.advise), (("peaks", "peaks-datasheet"), self.peaks),
                (("roofline", "roofline-measured"), self.roofline),
                (("rerun-baseline", "predict-sync", "predict-pinned"), self.reruns),
                (("repro", "repro-check", "repro-variants"), self.repro), (("predict-tf32",), self.tf32),
                (("advise-measure",), self.advise_measure)]

    def main(self) -> int:
        ready = self.environment() and self.record()
        for checks, step in self.steps_in_order():
            if not ready:
                break
            if self.left() < MIN_STEP_S:
                for check in checks:
                    self.out_of_time(check)
                continue
            try:
                step()
            except Exception as exc:  # one check's surprise must not hide the others' results
                self.add(FAIL, checks[0], f"the check itself failed: {type(exc).__name__}: {exc}")
        if not ready:
            self.add(SKIP, "the rest", "not run: see the FAIL above")
        return self.report()

    def report(self) -> int:
        order = ["environment", "install", "record", "steps", "op-times", "kernel-links", "device-time", "repro",
                 "repro-check", "repro-variants", "whatif", "advise", "rerun-baseline", "predict-sync",
                 "predict-pinned", "predict-tf32", "advise-measure", "peaks", "peaks-datasheet", "roofline",
                 "roofline-measured"]

        def rank(line: Line) -> int:
            base = line.check.split(":")[0]
            return order.index(base) if base in order else len(order)

        lines = sorted(self.lines, key=rank)  # sorted() keeps the order of equal ranks
        failed = any(line.status == FAIL for line in lines)
        width = max(len(line.check) for line in lines)
        seconds = time.monotonic() - self.start
        head = (f"opscope gpu-check ({'dry run on the CPU' if self.dry else 'GPU'}), "
                f"{dt.datetime.now().strftime('%Y-%m-%d %H:%M')}, {seconds:.0f} s: "
                f"{sum(line.status == PASS for line in lines)} PASS, {sum(line.status == FAIL for line in lines)} "
                f"FAIL, {sum(line.status == SKIP for line in lines)} SKIP; output in {self.out}")
        text = head + "\n" + "\n".join(f"{line.status}  {line.check:<{width}}  {line.detail}" for line in lines) + "\n"
        (self.out / "gpu-check.txt").write_text(text, encoding="utf-8")
        doc = {"format": "opscope-gpu-check/1", "mode": "dry-run" if self.dry else "gpu",
               "date": dt.datetime.now().isoformat(timespec="seconds"), "seconds": round(seconds, 1),
               "command": sys.argv, "out": str(self.out), "environment": self.info, "passed": not failed,
               "lines": [{"status": line.status, "check": line.check, "detail": line.detail,
                          "figures": line.figures} for line in lines]}
        (self.out / "gpu-check.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
        sys.stdout.write(text)
        return 1 if failed else 0


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    if len(steps) > 1 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ",".join(map(str, steps))


def _steady(s: dict[str, float] | None) -> str:
    if s is None:
        return "failed"
    return (f"{ms(s['median_ns'])}/step (p10-p90 {ms(s['p10_ns'])}-{ms(s['p90_ns'])}, {s['steps']:.0f} steps)")


def _names(names: Any) -> str:
    if not names:
        return "none"
    shown = [str(n)[:60] for n in names[:2]]
    return ", ".join(shown) + (f" +{len(names) - 2}" if len(names) > 2 else "")


def _not_ok(cases: list[dict[str, Any]]) -> str:
    bad = [f"case {c['id']} {c['op']}: {c['status']}" for c in cases if c.get("status") != "ok"]
    return f"; not ok: {'; '.join(bad[:3])}" if bad else ""


def say(line: str) -> None:
    sys.stderr.write(f"gpu-check: {line}\n")
    sys.stderr.flush()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tools/gpu-check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="a new or empty folder for everything the run writes (default: a new "
                   "temporary folder)")
    p.add_argument("--dry-run", action="store_true", help="run on the CPU what can run there; GPU checks SKIP")
    p.add_argument("--no-install", action="store_true", help="never install opscope (FAIL where it does not import)")
    p.add_argument("--python", help="the interpreter with torch (and opscope's dependencies) to run opscope with "
                   "(default: this one)")
    p.add_argument("--wheels", type=Path, action="append", help="a folder of wheels for the offline install "
                   "(repeatable)")
    p.add_argument("--budget", type=float, help=f"seconds for the whole run (default {GPU_BUDGET_S} on a GPU, "
                   f"{DRY_BUDGET_S} dry)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="opscope-gpu-check-"))
    elif args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        sys.stderr.write(f"gpu-check: {args.out} is not a new or empty folder\n")
        return 2
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    return GpuCheck(args).main()


if __name__ == "__main__":
    sys.exit(main())
