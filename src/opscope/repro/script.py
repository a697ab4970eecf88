"""The text of one reproducer script: a header saying where the case came from, the case as literals, and the
harness (:mod:`opscope.repro.harness`, pasted as it is) that builds the inputs, times the op, checks what it
launched and runs the variants. The script imports torch and the standard library only.

Nothing from the trace reaches the text unquoted: op and argument names match identifier patterns (and the op is
registered), values are written by :func:`opscope.repro.values.source` from parsed, typed values, and the
recorded child-op and kernel names are ``repr`` string literals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from opscope.repro.cases import Case
from opscope.repro.rebuild import Call
from opscope.repro.registry import OP_NAME
from opscope.repro.values import source
from opscope.units import format_ns
from opscope.version import __version__

#: The line of harness.py where the case's literals go (the prelude above it defines ``T``).
MARKER = "# --- the case ---"
_SCHEMA_TYPE = re.compile(r"[A-Za-z0-9_\[\], ]{1,60}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Origin:
    """Where a case came from, for the header (all shown through repr or checked patterns)."""

    trace: str
    time_is: str  # "device time" / "host self time"
    share_of: str
    device: str  # the trace's


@lru_cache(maxsize=1)
def harness_parts() -> tuple[str, str]:
    """The harness's text before and after :data:`MARKER`."""
    text = resources.files("opscope.repro").joinpath("harness.py").read_text()
    before, marker, after = text.partition(MARKER + "\n")
    if not marker:
        raise RuntimeError("opscope/repro/harness.py has no case marker line")
    return before, after


def script_text(case: Case, call: Call, origin: Origin, variants: dict[str, str], name: str) -> str:
    """The whole script for ``case`` rebuilt as ``call``."""
    before, after = harness_parts()
    return "".join([_header(case, call, origin, name), before, MARKER + "\n", _case_block(case, call, origin,
                                                                                         variants), after,
                    '\nif __name__ == "__main__":\n    sys.exit(main(globals()))\n'])


def _header(case: Case, call: Call, origin: Origin, name: str) -> str:
    per_call = "device time" if origin.time_is == "device time" else "duration (host)"
    steps = f" in steps {_ranges(case.steps)}" if case.steps else ""
    lines = [
        "#!/usr/bin/env python3",
        f"# Reproducer of one op of a trace, written by opscope {__version__}. It needs only PyTorch.",
        "#",
        f"# Trace:     {origin.trace!r}",
        f"# Op:        {call.op}.{call.overload}   (the op the model's code called; recorded on {origin.device})",
        f"# Recorded:  {case.calls} call{'s' if case.calls != 1 else ''}{steps}, {format_ns(case.trace_ns)} "
        f"{per_call} per call; {100 * case.share:.1f}% of the {origin.share_of}",
    ]
    leaves = [op for op in case.leaf_ops if OP_NAME.fullmatch(op)]
    if leaves:
        lines.append(f"# Leaf ops:  {', '.join(leaves[:6])}{' ...' if len(leaves) > 6 else ''}")
    if case.kernels:
        lines.append(f"# Kernels:   {len(case.kernels)} distinct (RECORDED_KERNELS below)")
    lines += [f"# Note:      {note}" for note in call.notes]
    lines += [
        "#",
        f"# Run:       python {name} [--device cpu|cuda] [--budget SECONDS] [--variants auto|all|none|NAME,...]",
        "#                    [--json RESULT.json] [--no-check]",
        "",
    ]
    return "\n".join(lines) + "\n"


def _case_block(case: Case, call: Call, origin: Origin, variants: dict[str, str]) -> str:
    per_call = "device time" if origin.time_is == "device time" else "duration"
    if not (OP_NAME.fullmatch(call.op) and _IDENT.fullmatch(call.overload)):
        raise ValueError("unchecked op name")
    lines = [
        f"OP = {call.op!r}",
        f"OVERLOAD = {call.overload!r}",
        f"DEVICE = {origin.device!r}",
        "ARGS = [",
        *_param_lines(call.args),
        "]",
        "KWARGS = {",
        *_param_lines(call.kwargs, keyword=True),
        "}",
        f"TRACE_NS = {int(case.trace_ns)!r}  # recorded {per_call} per call",
        f"RECORDED_OPS = {_string_list(case.recorded_ops)}  # distinct ops under it, as recorded",
        f"RECORDED_KERNELS = {_string_list(case.kernels)}  # distinct kernels under it, as recorded",
        "VARIANTS = {",
        *[f"    {name!r}: {change!r}," for name, change in variants.items()],
        "}",
        "",
    ]
    return "\n".join(lines) + "\n"


def _param_lines(params, keyword: bool = False) -> list[str]:
    lines = []
    for p in params:
        if not _IDENT.fullmatch(p.name):
            raise ValueError("unchecked argument name")
        kind = p.type if _SCHEMA_TYPE.fullmatch(p.type) else "?"
        comment = f"  # {p.name}: {kind}" + (f" ({p.note})" if p.note else "")
        code = f"    {p.name!r}: {source(p.value)}," if keyword else f"    {source(p.value)},"
        lines.append(code + comment)
    return lines


def _string_list(names: list[str]) -> str:
    if not names:
        return "[]"
    return "[\n" + "".join(f"    {str(n)!r},\n" for n in names) + "]"


def _ranges(steps: list[int]) -> str:
    if not steps:
        return ""
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 1:
        return f"{steps[0]}-{steps[-1]}"
    return ",".join(str(s) for s in steps)
