"""Running only the host-sync rule on a trace file."""

from __future__ import annotations

from opscope.advise import advise
from opscope.ingest import open_trace


def findings(path):
    return advise(open_trace(path), only=["host-sync"]).findings
