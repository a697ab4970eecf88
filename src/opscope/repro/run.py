"""Running the scripts of a repro directory, each in its own process with a time limit, and keeping what each
measured in cases.json (rewritten after every case, so an interrupted run keeps the cases it finished).

A case that crashes, hangs or prints no result gets that as its status; the other cases still run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opscope.repro.variants import choose
from opscope.repro.writer import NOT_RUN, SCRIPT_NAME, save_cases
from opscope.runtime import child_environment, starting_programs

#: The result fields a script reports that cases.json keeps.
RESULT_FIELDS = ("status", "device", "replay_ns", "runs", "calls_per_run", "times_ns", "ratio", "profiled_ns",
                 "profiled_ratio", "check", "check_of", "check_note", "replayed", "missing", "extra")
_VARIANT_FIELDS = ("status", "replay_ns", "runs", "calls_per_run", "times_ns", "speedup", "baseline_ns",
                   "baseline_times_ns", "max_abs_err", "max_rel_err", "within_tolerance", "compile_s")
#: What opscope computes from the reported runs (:mod:`opscope.repro.timings`), cleared with the rest.
_VARIANT_COMPUTED = ("p10_ns", "p90_ns", "speedup_low", "speedup_high", "delta_ns", "delta_low_ns", "delta_high_ns",
                     "verdict")
#: Run times kept per list (a second of budget times a few hundred short runs, many variants).
MAX_TIMES = 20_000


def run_cases(directory: Path, document: dict[str, Any], device: str | None = None, budget: float = 1.0,
              variants: str = "auto", timeout: float | None = None, only: set[int] | None = None,
              progress: Callable[[str], None] | None = None, threads: int | None = None) -> dict[str, Any]:
    """Run every case of ``document`` that has a script (or those in ``only``); update and save it. ``threads``:
    CPU threads for the ops (default: the recording's, from cases.json's ``threads``, else torch's own)."""
    if threads is None and isinstance(document.get("threads"), int) and document["threads"] > 0:
        threads = document["threads"]
    for entry in document["cases"]:
        if not isinstance(entry, dict) or (only is not None and entry.get("id") not in only):
            continue
        script = entry.get("script")
        if not isinstance(script, str) or not SCRIPT_NAME.fullmatch(script):
            continue
        names = _variant_names(entry, variants)
        limit = timeout if timeout is not None else default_timeout(budget, len(names), "compile" in names)
        if progress:
            plural = "s" if len(names) != 1 else ""
            progress(f"case {entry.get('id')}: {entry.get('op')} ({len(names)} variant{plural})")
        result = run_script(directory / script, device, budget, names, limit, threads)
        merge(entry, result, names)
        save_cases(directory, document)
    return document


def default_timeout(budget: float, variants: int, compiles: bool) -> float:
    """Seconds before a case counts as hung: its timed runs, warm-ups and checks, with room for a slow op."""
    return 120.0 + (1 + variants) * budget * 4 + (600.0 if compiles else 0.0)


def _variant_names(entry: dict[str, Any], wanted: str) -> list[str]:
    """The variants of ``wanted`` that this case offers (cases.json lists those that apply to it)."""
    offered = [str(v["name"]) for v in entry.get("variants") or ()
               if isinstance(v, dict) and isinstance(v.get("name"), str)]
    return choose(offered, wanted)


def run_script(script: Path, device: str | None, budget: float, variants: list[str],
               timeout: float, threads: int | None = None) -> dict[str, Any]:
    """Run one script; its result object, or one describing how it failed."""
    script = script.resolve()  # run from its own directory: a relative path would point elsewhere there
    fd, out = tempfile.mkstemp(prefix=".result-", suffix=".json", dir=script.parent)
    os.close(fd)
    command = [sys.executable, str(script), "--json", out, "--budget", repr(float(budget)),
               "--variants", ",".join(variants) if variants else "none"]
    if device:
        command += ["--device", device]
    if threads:
        command += ["--threads", str(int(threads))]
    try:
        try:
            with starting_programs():
                done = subprocess.run(command, cwd=script.parent, capture_output=True, text=True, timeout=timeout,
                                      errors="replace", env=child_environment())
        except subprocess.TimeoutExpired:
            return {"status": f"hung: no result after {timeout:.0f} s (killed; --timeout sets the limit)"}
        result = _read_result(Path(out))
        if result is None:
            last = _last_line(done.stderr) or _last_line(done.stdout)
            return {"status": f"crashed (exit {done.returncode}) before writing a result" +
                              (f": {last}" if last else "")}
        return result
    finally:
        Path(out).unlink(missing_ok=True)


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def merge(entry: dict[str, Any], result: dict[str, Any], asked: list[str]) -> None:
    """Copy a script's result into its cases.json entry (typed, finite values only), with the spread of its runs,
    each variant's speed-up interval and verdict, and the best variant (:mod:`opscope.repro.timings`)."""
    from opscope.repro.timings import best_variant, case_fields, variant_fields

    for key in RESULT_FIELDS:
        entry[key] = _clean(result.get(key), key)
    if not isinstance(entry.get("status"), str) or not entry["status"]:
        entry["status"] = "no status in the script's result"
    entry.update(case_fields(entry))
    notes = result.get("notes")
    if isinstance(notes, list):
        entry["notes"] = [*entry.get("notes", []), *(str(n) for n in notes if isinstance(n, str))]
    measured = {v.get("name"): v for v in result.get("variants") or () if isinstance(v, dict)}
    for variant in entry.get("variants") or ():
        name = variant.get("name")
        if name in measured:
            for key in _VARIANT_FIELDS:
                variant[key] = _clean(measured[name].get(key), key)
            variant.update(variant_fields(variant) if variant.get("status") == "ok"
                           else dict.fromkeys(_VARIANT_COMPUTED))
        else:
            for key in (*_VARIANT_FIELDS, *_VARIANT_COMPUTED):
                variant.pop(key, None)
            variant["status"] = "no result (the script did not report it)" if name in asked else NOT_RUN
    best = best_variant(entry.get("variants"))
    entry.update(best_variant=best["name"] if best else None,
                 best_speedup=best["speedup"] if best else None,
                 best_speedup_low=best.get("speedup_low") if best else None,
                 best_speedup_high=best.get("speedup_high") if best else None)


def _clean(value: Any, key: str = "") -> Any:
    """A JSON value as cases.json keeps it: non-finite floats as null, strings cut to one readable line, lists cut
    to 256 items (run times to :data:`MAX_TIMES`)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, str):
        return value[:2000]
    if isinstance(value, list):
        return [_clean(v) for v in value[:MAX_TIMES if key.endswith("times_ns") else 256]]
    return None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
