"""Say what a JSON file that yields no trace events is, and what to open instead (the error path only).

Profilers write several JSON files beside their traces; opened by mistake they parse as JSON but hold no
trace events, and "was the profiler stopped before any step ran?" would send the user the wrong way. Only
the file's first 64 KiB are looked at, and only after reading found nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from opscope.errors import TraceError
from opscope.ingest.source import ByteSource

_HEAD = 64 << 10
#: XProf/TensorBoard tool data (op stats, kernel stats...): Google Charts DataTables with "cols" and "rows".
_DATATABLE = re.compile(rb'"cols"\s*:\s*\[\s*\{\s*"id"\s*:')
#: torch.profiler's export_memory_timeline: a bare array whose first item is an array of numbers
#: (raw: [ts, action, bytes, category] rows; .json: [times, sizes]).
_NUMBER_ROWS = re.compile(rb"^\s*\[\s*\[\s*-?\d")
#: The first "ts" whose value is text: a string, or a bare word that JSON would not even accept.
_TS_TEXT = re.compile(rb'"ts"\s*:\s*"((?:[^"\\]|\\.){0,40})')


def head_of(path: Path) -> bytes:
    source = ByteSource(path, block_size=_HEAD)
    blocks = source.blocks()
    try:
        return next(blocks, b"")[:_HEAD]
    except (OSError, TraceError):  # a damaged file is reported by the caller's own message
        return b""
    finally:
        blocks.close()


def what_it_is(head: bytes, dropped_times: int) -> tuple[str, str] | None:
    """``(problem, hint)`` for a file with no trace events, when its head says what it is instead; else None."""
    if _DATATABLE.search(head) and b'"rows"' in head:
        return ("is an XProf/TensorBoard tool table (\"cols\"/\"rows\", such as framework_op_stats), not a trace",
                "open the profile's trace instead: XProf's trace viewer JSON, or torch's *.pt.trace.json")
    if _NUMBER_ROWS.match(head):
        return ("is a PyTorch memory timeline from export_memory_timeline (sizes over time, no events), not a trace",
                "open the trace recorded with profile_memory=True instead; opscope memory reads its allocations")
    if dropped_times:
        m = _TS_TEXT.search(head)
        example = f'; the first: "ts": "{m.group(1).decode("utf-8", "replace")}"' if m else ""
        return (f"has {dropped_times:,} events but none with a usable time: ts/dur missing, negative, out of range or "
                f"not a number{example}",
                "write ts and dur as numbers of microseconds")
    return None
