"""String-aware bracket scanning of JSON text, in one linear pass, without decoding it.

Used where the reader must know the structure of text it cannot (yet) decode: where the top-level
``"traceEvents"`` key is in a header, whether the first item of a buffer is complete, where the document
closes after the event array. Strings are matched with possessive quantifiers: the plain
``"(?:[^"\\]|\\.)*"`` costs Python's regex engine ~100 bytes of backtracking state per character, GBs
on one long string.
"""

from __future__ import annotations

import re

#: One complete JSON string (escapes respected), linear time and constant memory.
STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_STRUCTURE = re.compile(rb'["{}\[\]]')
_COLON_BRACKET = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*\[")
_WS_COLON = b" \t\r\n:"
_SCALAR_END = re.compile(rb"[,\]}]")


class KeyScan:
    """Find ``"key": [`` at depth 1 of an object, over a buffer that grows between calls.

    The scan resumes where the last call stopped, so a header read block by block costs one pass.
    ``closed`` turns true when the top-level object ends without the key.
    """

    def __init__(self, key: bytes) -> None:
        self._key = b'"' + key + b'"'
        self._pos = 0
        self._depth = 0
        self.closed = False

    @property
    def scanned(self) -> int:
        """How far the scan has gone (just after the closing ``}`` once ``closed``)."""
        return self._pos

    def find(self, buf: bytes | bytearray) -> int | None:
        """Index just after the ``[`` of the top-level key in ``buf``, or None (not seen yet)."""
        pos, depth = self._pos, self._depth
        try:
            while True:
                m = _STRUCTURE.search(buf, pos)
                if m is None:
                    pos = len(buf)
                    return None
                i = m.start()
                c = buf[i]
                if c == 0x22:  # '"'
                    s = STRING.match(buf, i)
                    if s is None:
                        pos = i  # unterminated string: read on from its start
                        return None
                    if depth == 1 and buf[i:s.end()] == self._key:
                        k = _COLON_BRACKET.match(buf, s.end())
                        if k is not None:
                            pos = i
                            return k.end()
                        if not bytes(buf[s.end():]).strip(_WS_COLON):
                            pos = i  # the ": [" may be in the next block
                            return None
                    pos = s.end()
                elif c == 0x7B or c == 0x5B:  # '{' '['
                    depth += 1
                    pos = i + 1
                else:
                    depth -= 1
                    pos = i + 1
                    if depth <= 0:
                        self.closed = True
                        return None
        finally:
            self._pos, self._depth = pos, depth


_OPENINGS = re.compile(rb"[{\[]+")


def value_end(buf: bytes, start: int) -> int | None:
    """End of the JSON value (object, array or string) starting at ``buf[start]``; None if it runs past ``buf``.

    Other values (numbers, literals) end at the next ``,``/``]``/``}``; they are never large.
    """
    c = buf[start:start + 1]
    if c == b'"':
        s = STRING.match(buf, start)
        return s.end() if s is not None else None
    if c not in (b"{", b"["):
        m = _SCALAR_END.search(buf, start)
        return m.start() if m is not None else None
    depth = 0
    pos = start
    while True:
        m = _STRUCTURE.search(buf, pos)
        if m is None:
            return None
        i = m.start()
        ch = buf[i]
        if ch == 0x22:
            s = STRING.match(buf, i)
            if s is None:
                return None
            pos = s.end()
            continue
        if ch in (0x7B, 0x5B):
            # a run of openings at once: 5,000,000 '[' cost one match, not one per bracket
            pos = _OPENINGS.match(buf, i).end()  # type: ignore[union-attr]
            depth += pos - i
            continue
        depth -= 1
        pos = i + 1
        if depth == 0:
            return pos
