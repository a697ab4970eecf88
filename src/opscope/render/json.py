"""JSON: one document, an array of row objects (times as integer nanoseconds); notes go to stderr."""

from __future__ import annotations

import re

import msgspec

from opscope.render.base import ReportRenderer, Terminal
from opscope.render.data import document, say
from opscope.report import Report

# JSON escapes C0 controls itself but writes DEL and the C1 controls (U+0080..U+009F, e.g. U+009B, a terminal's
# CSI) raw; in UTF-8 they are 0x7f and 0xc2 0x80..0x9f, bytes that occur nowhere else in an encoded document.
_RAW_CONTROL = re.compile(b"\x7f|\xc2[\x80-\x9f]")


def _escaped(match: re.Match) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


class JsonRenderer(ReportRenderer):
    """The report's data section as one JSON document on stdout."""

    name = "json"
    extension = ".json"
    binary = False

    def render(self, report: Report, out: Terminal) -> None:
        section = report.data_section()
        if section is not None and section.document is not None:
            value: object = section.document
        else:
            _, value = document(report, keep=("both", "data", "json"))
        data = _RAW_CONTROL.sub(_escaped, msgspec.json.format(msgspec.json.encode(value), indent=2))
        out.out.file.write(data.decode() + "\n")
        say(out.err, report)
