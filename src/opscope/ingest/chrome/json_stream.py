"""Stream the big event array of a JSON trace in decodable chunks, without loading the document.

Chrome/Kineto traces are one JSON object whose bulk is the ``traceEvents`` array (or a bare array).
Decoding the whole document at once costs ~7x the file size in memory. Instead we cut the array at
object boundaries into chunks of a few MB and hand each chunk, as a small JSON array, to a typed
decoder. A cut is only a *candidate* (a ``}`` followed by ``,`` or ``]``); it is proven right by the
chunk decoding: a cut inside a string or a nested value leaves the chunk unbalanced and it fails.

When the fast path cannot proceed (malformed or truncated input), the rest of the array is handed to
:mod:`opscope.ingest.chrome.salvage`, which recovers every complete, repairable event and counts the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgspec

from opscope.ingest.chrome import json_scan, salvage

_WS = b" \t\r\n"
_CUT_SEARCH_TRIES = 6
_CUT_WINDOW = 64 << 10
_BOUNDARY = re.compile(rb"\}\s*(?:,\s*\{|\])")
_MAX_PROLOGUE = 256 << 20
#: What follows the event array is a few small keys; beyond this much it is junk and is not read.
MAX_EPILOGUE = 16 << 20

_decode_dict = msgspec.json.Decoder(dict).decode


@dataclass
class StreamReport:
    """What the stream learned about the document beside the events."""

    header: dict[str, Any] = field(default_factory=dict)
    bare_array: bool = False
    truncated: bool = False
    salvaged: bool = False
    salvage: salvage.SalvageStats = field(default_factory=salvage.SalvageStats)
    found_events: bool = False
    header_invalid: bool = False  # the keys before the array are not valid JSON (ignored)
    junk_after_array: int = 0  # bytes after the event array that are not part of the document
    epilogue_cut: bool = False  # more than MAX_EPILOGUE bytes followed the array; the rest was not read


class NotAnEventArray(Exception):  # noqa: N818 - a verdict the reader acts on, not an error shown
    """The document is JSON-like but holds no event array (a different format or not a trace)."""


def _array_close(buf: bytes, pos: int, end: int) -> int | None:
    """Index of the first ``}`` in ``buf[pos:end]`` followed by blanks and ``]`` (a candidate end of the array).

    ``bytes.find`` for the ``]``: record arrays rarely hold one anywhere else, so a chunk is passed over at memchr
    speed (a regex scan for the pair costs ~1.5 s per GB)."""
    i = buf.find(b"]", pos, end)
    while i != -1:
        j = i - 1
        while j >= pos and buf[j] in _WS:
            j -= 1
        if j >= pos and buf[j] == 0x7D:
            return j
        i = buf.find(b"]", i + 1, end)
    return None


def _skip(buf: bytes, pos: int, chars: bytes) -> int:
    n = len(buf)
    while pos < n and buf[pos] in chars:
        pos += 1
    return pos


def _last_boundaries(buf: bytes, lo: int, limit: int, end: int, count: int) -> list[int]:
    """The last ``count`` boundary candidates (``_BOUNDARY`` matches within ``buf[lo:end]``) starting before
    ``limit``, last first. Searched backwards from ``limit`` (``rfind`` of ``}``): the same ones a forward search of
    the window finds, without going over the hundreds before them. (Matches cannot overlap: one consumes only
    blanks, ``,``, ``{`` or ``]`` after its ``}``.)"""
    found: list[int] = []
    at = limit
    while len(found) < count:
        i = buf.rfind(b"}", lo, at)
        if i == -1:
            break
        if _BOUNDARY.match(buf, i, end):
            found.append(i)
        at = i
    return found


class EventArrayStream:
    """Yield decoded batches of events from ``blocks`` (decompressed bytes).

    ``decode_batch(json_array_bytes)`` turns one chunk into a list; it must raise
    ``msgspec.DecodeError``/``msgspec.ValidationError`` on malformed input. ``decode_items(buffer, start, end)``,
    when given, is tried first on the chunk's items where they lie (no copy); it returns None to decline, and
    whatever it returns otherwise is yielded as the chunk's events (with empty chunk bytes). ``make_event`` builds one
    event from a repaired single-object byte string (used by salvage).
    """

    def __init__(
        self,
        blocks: Iterator[bytes],
        decode_batch: Callable[[bytes], list],
        decode_one: Callable[[bytes], Any],
        array_key: bytes = b"traceEvents",
        chunk_size: int = 1 << 20,
        stop_at_end: bool = False,
        decode_items: Callable[[bytes, int, int], Any] | None = None,
    ) -> None:
        self._blocks = blocks
        self._decode_batch = decode_batch
        self._decode_one = decode_one
        # tried first on a chunk's items in place (buffer, start, end): a result, or None to decode_batch the chunk
        self._decode_items = decode_items
        self._array_key = array_key
        self._chunk_size = chunk_size
        self.report = StreamReport()
        self._eof = False
        # A nested array (``stop_at_end``, the blocks starting at its ``[``): reading stops where it closes and
        # what follows it is left in ``rest`` for the caller, who reads on from the same blocks.
        self._stop_at_end = stop_at_end
        self.rest = b""

    @property
    def eof(self) -> bool:
        """Whether the blocks are used up."""
        return self._eof

    # -- buffer management -------------------------------------------------
    def _next(self) -> bytes:
        try:
            return next(self._blocks)
        except StopIteration:
            self._eof = True
            return b""

    def _more(self, buf: bytes) -> bytes:
        block = self._next()
        return buf + block if buf else block

    def _fill(self, rest: bytes, want: int) -> bytes:
        """``rest`` extended by whole blocks until it holds ``want`` bytes or the input ends.

        One join, not one concatenation per block: a large item costs a copy, not a copy per block.
        """
        parts = [rest]
        have = len(rest)
        while have < want and not self._eof:
            block = self._next()
            parts.append(block)
            have += len(block)
        return b"".join(parts) if len(parts) > 1 else rest

    def batches(self) -> Iterator[tuple[list, bytes]]:
        """Yield ``(events, chunk_bytes)``; ``chunk_bytes`` is the JSON array the events came from."""
        buf = b""
        while not self._eof and len(buf) < 64:
            buf = self._more(buf)
        start = _skip(buf, 0, _WS + b"\xef\xbb\xbf")
        while start >= len(buf) and not self._eof:
            buf = self._more(b"")
            start = _skip(buf, 0, _WS + b"\xef\xbb\xbf")
        if start >= len(buf):
            raise NotAnEventArray("holds only whitespace")
        buf = buf[start:]  # a byte-order mark or blank lines before the document would fail the prefix
        first = buf[:1]
        if first == b"[":
            self.report.bare_array = True
            pos = 1
        elif first == b"{":
            # Only a top-level key counts: the same key inside a header value or string is not the array.
            scan = json_scan.KeyScan(self._array_key)
            prologue = bytearray(buf)
            while True:
                found = scan.find(prologue)
                if found is not None or scan.closed or self._eof or len(prologue) > _MAX_PROLOGUE:
                    break
                prologue += self._next()
            buf = bytes(prologue)
            del prologue
            if found is None:
                self._raise_no_events(buf[:scan.scanned] if scan.closed else buf)
            pos = found
            prefix = buf[: buf.rfind(b'"' + self._array_key + b'"', 0, pos)].rstrip(_WS)
            if prefix.endswith(b","):
                prefix = prefix[:-1]
            try:
                self.report.header.update(_decode_dict(prefix + b"}"))
            except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
                self.report.header_invalid = True  # the events can still be read
        else:
            raise NotAnEventArray("does not start with '{' or '['")
        self.report.found_events = True
        buf = buf[pos:]
        yield from self._array_body(buf)

    def _raise_no_events(self, buf: bytes) -> NoReturn:
        try:
            doc = msgspec.json.decode(buf)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            if self._eof:
                raise NotAnEventArray("is not valid JSON and has no \"traceEvents\" array") from None
            raise NotAnEventArray("has no \"traceEvents\" array near its start") from None
        keys = ", ".join(list(doc)[:6]) if isinstance(doc, dict) else type(doc).__name__
        raise NotAnEventArray(f"is JSON without a \"traceEvents\" array (top-level keys: {keys})")

    def _array_body(self, buf: bytes) -> Iterator[tuple[list, bytes]]:
        pos = 0
        want = self._chunk_size
        while True:
            if not self._eof and len(buf) - pos < want:
                buf = self._fill(buf[pos:], want)
                pos = 0
            pos = _skip(buf, pos, _WS + b",")
            if pos < len(buf) and buf[pos:pos + 1] == b"]":
                if self._stop_at_end:
                    self.rest = buf[pos + 1:]
                    return
                self._finish(buf[pos + 1:])
                return
            if pos >= len(buf):
                if self._eof:
                    self.report.truncated = True  # the array never closed: the file ends early
                    return
                continue
            cut = self._cut(buf, pos)
            if cut is not None:
                events, chunk, pos = cut
                want = self._chunk_size
                yield events, chunk
                continue
            if not self._eof and json_scan.value_end(buf, pos) is None:
                # The first item runs past the buffer (one large event): read on, doubling what is asked
                # for, so that the rescans of the buffer add up to a linear cost.
                want = 2 * (len(buf) - pos)
                continue
            # No provable boundary: recover this region object by object, then go fast again.
            self.report.salvaged = True
            region = buf[pos:]
            events, consumed, close = salvage.recover_events(
                region, self._decode_one, self.report.salvage, final=self._eof
            )
            if events:
                yield events, b""
            if close is not None:
                if self._stop_at_end:
                    self.rest = region[close:]
                    return
                self._finish(region[close:])
                return
            if consumed == 0:
                if self._eof:
                    self.report.truncated = True
                    return
                # one object larger than a chunk (or one that never closes: 5,000,000 '['): read on, doubling what is
                # asked for, so that the salvage's rescans of the region add up to a linear cost
                want = 2 * (len(buf) - pos) + self._chunk_size
                continue
            if self._eof and consumed >= len(region):
                self.report.truncated = True
                return
            pos += consumed

    def _cut(self, buf: bytes, pos: int) -> tuple[list, bytes, int] | None:
        """Find the last provable event boundary in ``buf[pos:]`` (within a chunk) and decode up to it."""
        limit = min(len(buf), pos + self._chunk_size)
        if self._stop_at_end:
            # A nested array is followed by more of the document (the next record array): the cut candidates near
            # the limit may lie beyond its end, so the end of the array is tried first where one is in reach.
            close = _array_close(buf, pos, min(len(buf), limit + 64))
            if close is not None:
                result = self._decode_to(buf, pos, close)
                if result is not None:
                    return result
        result = self._try_cuts(buf, pos, limit)
        if result is None and limit < len(buf):
            result = self._try_cuts(buf, pos, len(buf))  # one event larger than a chunk
        return result

    def _try_cuts(self, buf: bytes, pos: int, limit: int) -> tuple[list, bytes, int] | None:
        # Candidates: "}" then "," then the next event's "{" (or the array's "]"). Kernel names
        # such as "{lambda()#1}, at::..." put "}," inside strings, hence the "{" look-ahead.
        window = _CUT_WINDOW
        lo = max(pos, limit - window)
        while True:
            candidates = _last_boundaries(buf, lo, limit, min(len(buf), limit + 64), _CUT_SEARCH_TRIES)
            if candidates or lo == pos:
                break
            window *= 4  # geometric: a boundary far back costs a linear scan, not one per window
            lo = max(pos, limit - window)
        for close in candidates:
            result = self._decode_to(buf, pos, close)
            if result is not None:
                return result
        return None

    def _decode_to(self, buf: bytes, pos: int, close: int) -> tuple[list, bytes, int] | None:
        """The items of ``buf[pos:close + 1]`` (``close`` at a ``}``) decoded as one array; None if that fails."""
        if self._decode_items is not None:
            kept = self._decode_items(buf, pos, close + 1)
            if kept is not None:
                return kept, b"", close + 1
        chunk = b"[" + buf[pos:close + 1] + b"]"
        try:
            events = self._decode_batch(chunk)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
            return None
        return events, chunk, close + 1

    def _finish(self, tail: bytes) -> None:
        """Read the document's keys after the event array (``"traceName"``, ``"deviceProperties"``...).

        At most MAX_EPILOGUE bytes are read; anything that is not the rest of the document is counted as junk.
        """
        parts = [tail]
        have = len(tail)
        while not self._eof:
            if have > MAX_EPILOGUE:
                self.report.epilogue_cut = True
                break
            block = self._next()
            parts.append(block)
            have += len(block)
        tail = b"".join(parts).strip(_WS)
        del parts
        if self.report.bare_array:
            self.report.junk_after_array = len(tail)
            return
        if tail.startswith(b","):
            tail = tail[1:]
        if not tail or tail == b"}":
            return
        doc = b"{" + tail
        end = json_scan.value_end(doc, 0)
        if end is None:
            if self.report.epilogue_cut:
                self.report.junk_after_array = len(tail)
            else:
                self.report.truncated = True  # the document never closes
            return
        try:
            self.report.header.update(_decode_dict(doc[:end]))
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            self.report.junk_after_array = len(tail)
            return
        self.report.junk_after_array = len(doc[end:].strip(_WS))
