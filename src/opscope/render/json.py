"""JSON: one document, an array of row objects (times as integer nanoseconds); notes go to stderr."""

from __future__ import annotations

import msgspec
from rich.console import Console

from opscope.render.data import document, say
from opscope.report import Report


def render(report: Report, out: Console, err: Console) -> None:
    _, rows = document(report, keep=("both", "data", "json"))
    out.file.write(msgspec.json.format(msgspec.json.encode(rows), indent=2).decode() + "\n")
    say(err, report)
