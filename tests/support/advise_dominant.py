"""Running only the dominant-op rule on a trace file, and picking its findings by title."""

from __future__ import annotations

from opscope.advise import advise
from opscope.ingest import open_trace


def findings(path):
    return advise(open_trace(path), only=["dominant-op"]).findings


def by_title(found, word):
    return [f for f in found if word in f.title]
