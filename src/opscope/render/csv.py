"""CSV: a header and one line per row (times as integer nanoseconds); notes go to stderr."""

from __future__ import annotations

import csv
import io

from rich.console import Console

from opscope.render.data import document, say
from opscope.report import Report


def render(report: Report, out: Console, err: Console) -> None:
    columns, rows = document(report, keep=("both", "data"))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    out.file.write(buf.getvalue())
    say(err, report)
