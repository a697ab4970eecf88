"""Writing a repro directory: one script per case that could be rebuilt and ``cases.json`` describing every case.

The directory is claimed atomically (a new one: ``repro``, ``repro-1``...; never an existing one with files);
``cases.json`` is rewritten by atomic replacement only, so it is whole at every moment.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from opscope.capture.outdir import claim_output_dir
from opscope.repro import registry
from opscope.repro.cases import Case, Selection
from opscope.repro.rebuild import Call, NotRebuiltError, rebuild
from opscope.repro.script import Origin, script_text
from opscope.repro.values import to_json
from opscope.repro.variants import applicable
from opscope.version import __version__

CASES_FILE = "cases.json"
#: Identifies the format of cases.json (docs/commands.md, "cases.json"); bumped when a field changes meaning.
SCHEMA = "opscope.repro/1"
#: What a script's file name looks like (the runner runs nothing else).
SCRIPT_NAME = re.compile(r"case_[0-9]{2,4}_[a-z0-9_]{1,60}\.py")
NOT_RUN = "not run"


def write_cases(selection: Selection, out: Path, trace: str, max_bytes: int | None = None,
                calls: list[Call | str] | None = None, threads: int | None = None) -> tuple[Path, dict[str, Any]]:
    """Write the reproducers of ``selection`` into a new directory at ``out`` (or ``out-1``...); return the
    directory and the cases.json document. ``calls`` (one per case: a Call, or the reason there is none)
    replaces rebuilding from the recorded inputs (the TensorFlow mapping gives them). ``threads``: the
    recording's intra-op thread count (its run.json), with which the cases run unless told otherwise."""
    directory, _renamed = claim_output_dir(out, {"schema": SCHEMA, "status": "writing"}, claim_name=CASES_FILE)
    origin = Origin(trace=trace, time_is=selection.time_is, share_of=selection.share_of, device=selection.device)
    entries = []
    for number, case in enumerate(selection.cases, start=1):
        call: Call | str
        if calls is not None:
            call = calls[number - 1]
        else:
            try:
                call = rebuild(case.op, case.input_dims, case.input_strides, case.input_types,
                               case.concrete_inputs, max_bytes)
            except NotRebuiltError as exc:
                call = str(exc)
        entry = case_entry(number, case, call, selection.device)
        if isinstance(call, Call):
            name = entry["script"]
            variants = {v["name"]: v["change"] for v in entry["variants"]}
            _write_new(directory / name, script_text(case, call, origin, variants, name))
        entries.append(entry)
    document = {
        "schema": SCHEMA,
        "written_by": f"opscope {__version__}",
        "torch": registry.torch_version(),
        "trace": trace,
        "trace_device": selection.device,
        "time_is": selection.time_is,
        "share_of": selection.share_of,
        "considered": selection.considered,
        "threads": threads,
        "notes": selection.notes,
        "cases": entries,
    }
    save_cases(directory, document)
    return directory, document


def case_entry(number: int, case: Case, call: Call | str, device: str) -> dict[str, Any]:
    """The cases.json entry of one case before it runs."""
    rebuilt = isinstance(call, Call)
    base = case.op.split("::", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9_]+", "_", base).strip("_")[:40] or "op"
    entry: dict[str, Any] = {
        "id": number,
        "script": f"case_{number:02d}_{slug}.py" if rebuilt else None,
        "op": case.op,
        "overload": call.overload if isinstance(call, Call) else None,
        "leaf_ops": case.leaf_ops,
        "input_dims": case.input_dims,
        "input_strides": case.input_strides,
        "input_types": case.input_types,
        "concrete_inputs": case.concrete_inputs,
        "calls": case.calls,
        "steps": case.steps,
        "share": round(case.share, 6),
        "total_ns": case.total_ns,
        "trace_ns": case.trace_ns,
        "trace_device": device,
        "status": NOT_RUN if rebuilt else call,
        "device": None,
        "replay_ns": None,
        "replay_p10_ns": None,
        "replay_p90_ns": None,
        "runs": None,
        "calls_per_run": None,
        "times_ns": None,
        "ratio": None,
        "profiled_ns": None,
        "profiled_ratio": None,
        "check": None,
        "check_of": None,
        "check_note": None,
        "recorded_ops": case.recorded_ops,
        "recorded_kernels": case.kernels,
        "replayed": None,
        "missing": None,
        "extra": None,
        "variants": [],
        "best_variant": None,
        "best_speedup": None,
        "best_speedup_low": None,
        "best_speedup_high": None,
        "notes": list(call.notes) if isinstance(call, Call) else [],
        "args": None,
    }
    if isinstance(call, Call):
        entry["args"] = [{"name": p.name, "type": p.type, "keyword": p in call.kwargs, "value": to_json(p.value),
                          "note": p.note} for p in call.params()]
        entry["variants"] = [{"name": name, "change": change} for name, change in applicable(call, device).items()]
    return entry


def read_cases(directory: Path) -> dict[str, Any]:
    """The cases.json of a repro directory (UsageError-free: a TraceError-like ValueError says what is wrong)."""
    path = directory / CASES_FILE
    text = path.read_text()
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("schema") != SCHEMA or not isinstance(
            document.get("cases"), list):
        raise ValueError(f"not a cases.json of opscope repro ({SCHEMA})")
    return document


def save_cases(directory: Path, document: dict[str, Any]) -> None:
    """Replace cases.json atomically (a temporary file in the same directory, then a rename)."""
    fd, temp = tempfile.mkstemp(prefix=".cases-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh, indent=1, allow_nan=False)
            fh.write("\n")
        os.replace(temp, directory / CASES_FILE)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` (never replacing a file) with ``text``; executable like any script."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
