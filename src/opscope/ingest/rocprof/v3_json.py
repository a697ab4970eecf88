"""The rocprofv3 JSON reader (``rocprofv3 --output-format json``: one ``{"rocprofiler-sdk-tool": [...]}`` object), as
registered.

Light on purpose: sniffing needs only the head, and the parser (:mod:`opscope.ingest.rocprof.v3_parse`, msgspec and
the chunked array stream) is imported by :meth:`RocprofV3JsonReader.read`.
"""

from __future__ import annotations

import re
from pathlib import Path

from opscope.model.trace import Trace

#: The document's first key: every rocprofv3 JSON file starts with it (rocprofiler-sdk's tool writes it first).
_HEAD = re.compile(rb'\A(?:\xef\xbb\xbf)?[ \t\r\n]*\{[ \t\r\n]*"rocprofiler-sdk-tool"[ \t\r\n]*:')


class RocprofV3JsonReader:
    """rocprofv3 JSON, plain or gzip: kernel dispatches, memory copies, HIP/HSA/RCCL API calls, roctx markers."""

    name = "rocprofv3_json"

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when the document's first key is ``"rocprofiler-sdk-tool"`` (a key elsewhere does not count)."""
        return _HEAD.match(head) is not None

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.rocprof import v3_parse  # the parser: only when a file is parsed

        return v3_parse.read(path, progress=progress, keep_args=keep_args)


READER = RocprofV3JsonReader()
