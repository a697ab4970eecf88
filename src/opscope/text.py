"""Text shown to a person: whatever comes from outside (trace text, file and directory names, messages of other
programs) never moves the cursor, rings the bell, restyles the terminal or forges a line of its own."""

from __future__ import annotations

import re

#: C0 controls but newline and tab, DEL and the C1 controls (``\x9b`` starts an escape sequence on some terminals).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: The same and the newline: what a line said on its own must not hold.
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _spelled(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str) -> str:
    r"""``text`` with its control characters written out (ESC as the four characters ``\x1b``); newlines and tabs
    stay (a table cell may hold several lines)."""
    return _CONTROL.sub(_spelled, text)


def one_line(text: str) -> str:
    r"""``text`` as one line: :func:`printable`, and a newline written out too (``\x0a``), so that a file name
    holding one cannot start a line that looks like opscope's own."""
    return _CONTROL_OR_NEWLINE.sub(_spelled, text)
