"""CSV: a header and one line per row (times as integer nanoseconds); notes go to stderr.

Text from a trace (op and kernel names) is untrusted: a cell that a spreadsheet would read as a formula
(starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading ``'``, so opening the file
never runs it; control characters other than newline and tab are written out (ESC as the text ``\\x1b``),
so printing the file cannot drive the terminal. Numbers are written as they are (a negative delta stays a number)."""

from __future__ import annotations

import csv
import io

from opscope.render.base import ReportRenderer, Terminal
from opscope.render.data import document, say
from opscope.report import Report
from opscope.text import printable


class CsvRenderer(ReportRenderer):
    """The report's data section as CSV on stdout."""

    name = "csv"
    extension = ".csv"
    binary = False

    def render(self, report: Report, out: Terminal) -> None:
        columns, rows = document(report, keep=("both", "data"))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: cell(v) for k, v in r.items()})
        out.out.file.write(buf.getvalue())
        say(out.err, report)


#: What a spreadsheet takes for the start of a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value):
    """A CSV cell: empty for None, text that could start a formula quoted with ``'``, anything else as it is."""
    if value is None:
        return ""
    if isinstance(value, str):
        # control characters written out (a raw ESC would restyle the terminal that cats the file); newlines
        # stay, the csv module quotes them
        value = printable(value)
        if value.startswith(FORMULA_START):
            return "'" + value
    return value
