"""The Chrome trace-event JSON reader (PyTorch/Kineto, TF timeline, XProf trace viewer), as registered.

This module stays light: sniffing needs only the file's head, and the parser's modules (msgspec, the
JSON stream, the column mapping) are imported by :meth:`ChromeJsonReader.read`, so that a cached open
never loads them.
"""

from __future__ import annotations

from pathlib import Path

from opscope.model.trace import Trace


class ChromeJsonReader:
    """Chrome/Kineto trace JSON, plain or gzip: ``{"traceEvents": [...]}`` or a bare event array."""

    name = "chrome_json"

    def sniff(self, path: Path, head: bytes) -> bool:
        """True for JSON whose head looks like a Chrome trace (object with traceEvents, or array of events)."""
        text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        if text.startswith(b"{"):
            return b'"traceEvents"' in head or b'"schemaVersion"' in head
        if text.startswith(b"["):
            return b'"ph"' in head or b'"ts"' in head or len(text.strip()) <= 2
        return False

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.chrome import reader  # the parser: only when a file is parsed

        return reader.read(path, progress=progress, keep_args=keep_args)


READER = ChromeJsonReader()
