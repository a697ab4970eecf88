"""MIGraphX text output, as registered: ``migraphx-driver perf`` reports (:mod:`.perf`) and ``MIGRAPHX_TRACE_EVAL``
dumps (:mod:`.trace_eval`). Sniffing reads only the head; the parsers are imported by ``read``."""

from __future__ import annotations

import re
from pathlib import Path

from opscope.model.trace import Trace

_NUM = r"[-+]?(?:nan|inf|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
#: a timed instruction line of any driver version: ``NAME = ...: 0.0088ms, 91%``
_TIMED_LINE = re.compile(rb"^\S+ = .*:\s*" + _NUM.encode() + rb"ms\s*,\s*" + _NUM.encode() + rb"%\s*$", re.M)
_PROGRAM_LINE = re.compile(rb"^(?:\S+:)?@\d+ = \S", re.M)
_RUN_LINE = re.compile(rb"^Run instruction: \S+ = ", re.M)


#: What a document about MIGraphX (a README, notes, a web page) has and the driver never prints: Markdown headings,
#: code fences, table rows and links, reStructuredText and HTML markup. Such a file may quote perf lines; it is not
#: perf output.
_DOCUMENT_LINE = re.compile(rb"^(?:#{1,6} \S|```|~~~|\|[^\n]*\|\s*$|\.\. [\w-]+::|<(?:!DOCTYPE|html|p|div|pre)\b)"
                            rb"|\]\((?:https?://|\.{0,2}/|#)", re.M | re.I)


def _text_head(head: bytes) -> bytes | None:
    """The head as MIGraphX text may be: not JSON, not binary, not a document that quotes MIGraphX output. A run of
    NUL bytes (a writer that never finished) ends the text: the reader stops there too."""
    from opscope.ingest.source import NUL_RUN

    cut = head.find(bytes(NUL_RUN))
    head = head if cut < 0 else head[:cut]
    text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not text or text[:1] in (b"{", b"[") or b"\0" in head or _DOCUMENT_LINE.search(head):
        return None
    return head


class MigraphxPerfReader:
    """``migraphx-driver perf`` output (every driver version), by its report lines, or MIGraphX program text that
    stops before one (read to say precisely what is missing)."""

    name = "migraphx_perf"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = _text_head(head)
        if text is None:
            return False
        if b"Running performance report" in text or _TIMED_LINE.search(text):
            return True
        if re.search(rb"^Summary:\s*$", text, re.M) and b"Total instructions time:" in text:
            return True
        if _RUN_LINE.search(text):
            return False  # a TRACE_EVAL dump: the next reader
        # the program printed before the timings (a big model's may fill the head), or almost-perf text
        return (b"MIGraphX Version" in text or b'module: "' in text) and bool(_PROGRAM_LINE.search(text))

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.migraphx import perf

        return perf.read(path, progress=progress, keep_args=keep_args)


class MigraphxTraceEvalReader:
    """A ``MIGRAPHX_TRACE_EVAL`` dump (any level): its ``Time:`` lines as a trace."""

    name = "migraphx_trace_eval"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = _text_head(head)
        return text is not None and bool(_RUN_LINE.search(text))

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.migraphx import trace_eval

        return trace_eval.read(path, progress=progress, keep_args=keep_args)


READER = MigraphxPerfReader()
TRACE_EVAL_READER = MigraphxTraceEvalReader()
