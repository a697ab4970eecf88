"""Recover events from a damaged JSON event array, one object at a time.

The slow path behind :mod:`opscope.ingest.chrome.json_stream`. It finds each top-level object by a
string-aware bracket scan, decodes it, and when that fails tries the repairs for defects that real
profilers write: invalid UTF-8, raw control characters and unescaped quotes inside names (Kineto),
and ``NaN``/``Infinity`` tokens. What cannot be repaired is counted, never guessed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

#: Objects nested deeper than this are refused (hostile input), not recursed into.
MAX_DEPTH = 512

# A JSON string (escapes respected, raw control characters tolerated) or one structural bracket. The
# possessive quantifiers keep the match linear and its memory constant on a long string.
#: A string, a run of opening brackets (taken at once: 5,000,000 '[' are one token) or one closing bracket.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[{\[]++|[}\]]', re.DOTALL)
# A JSON string, or a number no float can hold: NaN / Infinity (Python's json.dumps writes them) and
# exponents such as 1e400 (the decoder refuses them as out of range).
_STRING_OR_NONFINITE = re.compile(
    rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|-?Infinity|NaN|-?\d+(?:\.\d*)?[eE]\+?\d{3,}', re.DOTALL
)
_CONTROL = re.compile(rb"[\x00-\x1f]")
# Escapes in a string: a surrogate pair, a lone surrogate (JavaScript writers; not valid Unicode) or any
# other escape (consumed whole so that an escaped backslash is never read as the start of one).
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPE = re.compile(
    rb"\\(?:(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)",
    re.DOTALL,
)
# Kineto writes `"name": "...", "pid": ...`: a name holding raw quotes is still delimited by the
# next known key, which lets us re-escape the quotes inside it.
_NAME_START = re.compile(rb'"name"\s*:\s*"')
_NAME_END = re.compile(rb'"\s*,\s*"(?:ph|cat|pid|tid|ts|dur|args|id|s|bp)"\s*:')
_UNESCAPED_QUOTE = re.compile(rb'(?<!\\)"')


@dataclass
class SalvageStats:
    """Counts of what the salvage pass saw; turned into warnings by the reader."""

    recovered: int = 0
    repaired_utf8: int = 0
    repaired_control: int = 0
    repaired_quotes: int = 0
    repaired_nonfinite: int = 0
    dropped_malformed: int = 0
    dropped_too_deep: int = 0
    dropped_not_object: int = 0
    incomplete_tail_bytes: int = 0


class _Mender:
    """Substitution callback for :data:`_STRING_OR_NONFINITE` that notes which defects it mended."""

    def __init__(self) -> None:
        self.control = False
        self.nonfinite = False
        self.surrogate = False

    def __call__(self, m: re.Match) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            if _SURROGATE_HINT.search(tok):
                tok = _ESCAPE.sub(self._lone_surrogate, tok)
            if not _CONTROL.search(tok):
                return tok
            self.control = True
            return _CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
        if tok[-1:].isdigit() and float(tok) not in (float("inf"), float("-inf")):
            return tok  # an exponent with three digits that is still in range (1e-300, 1e300)
        self.nonfinite = True
        return b"null"

    def _lone_surrogate(self, m: re.Match) -> bytes:
        if m.group(2) is None:
            return m.group(0)
        self.surrogate = True
        return b"\\ufffd"


def _requote_names(obj: bytes) -> bytes:
    """Re-escape the raw quotes of each ``"name"`` value up to the next known key, in one pass.

    (A lazy ``"name":"(.*?)"<known key>`` regex rescans to the end of the object for every ``"name"``
    that no known key follows: quadratic on an object of many such keys.)
    """
    ends = list(_NAME_END.finditer(obj))
    end_starts = [m.start() for m in ends]
    out: list[bytes] = []
    pos = 0
    while (m := _NAME_START.search(obj, pos)) is not None:
        k = bisect.bisect_left(end_starts, m.end())
        if k == len(ends):
            break  # no known key after this name, nor after any later one
        end = ends[k]
        out += (obj[pos:m.end()], _UNESCAPED_QUOTE.sub(b'\\\\"', obj[m.end():end.start()]), end.group(0))
        pos = end.end()
    out.append(obj[pos:])
    return b"".join(out)


def repair(obj: bytes, stats: SalvageStats) -> bytes:
    """Return ``obj`` with the known writer defects mended (counting each kind)."""
    utf8_fixed = False
    try:
        obj.decode("utf-8")
    except UnicodeDecodeError:
        obj = obj.decode("utf-8", "replace").encode("utf-8")
        utf8_fixed = True
    mender = _Mender()
    obj = _STRING_OR_NONFINITE.sub(mender, obj)
    # Raw newlines *between* keys are how Kineto lays out events: only those inside strings count.
    stats.repaired_control += mender.control
    stats.repaired_nonfinite += mender.nonfinite
    stats.repaired_utf8 += utf8_fixed or mender.surrogate  # invalid Unicode, either way
    return obj


def decode_with_repairs(obj: bytes, decode_one: Callable[[bytes], Any], stats: SalvageStats) -> Any:
    """Decode one event object, mending it if needed; None when it cannot be read."""
    try:
        return decode_one(obj)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        pass
    except RecursionError:
        stats.dropped_too_deep += 1
        return None
    mended = repair(obj, stats)
    try:
        return decode_one(mended)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        pass
    requoted = _requote_names(mended)
    if requoted != mended:
        try:
            event = decode_one(requoted)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            pass
        else:
            stats.repaired_quotes += 1
            return event
    stats.dropped_malformed += 1
    return None


def recover_events(
    region: bytes,
    decode_one: Callable[[bytes], Any],
    stats: SalvageStats,
    final: bool,
) -> tuple[list, int, int | None]:
    """Scan ``region`` (the inside of the event array) for complete top-level objects.

    Returns ``(events, consumed, close)``: the decoded events, how many bytes of ``region`` were
    fully used, and the offset just after the array's closing ``]`` if it was seen (else None).
    With ``final`` the region is all that is left of the file, so an unfinished object is counted
    as truncated instead of being left for the next call.
    """
    events: list = []
    depth = 0
    obj_start = -1
    consumed = 0
    too_deep = False
    for m in _TOKEN.finditer(region):
        tok = m.group(0)
        c = tok[:1]
        if c == b'"':
            if depth == 0:
                stats.dropped_not_object += 1
                consumed = m.end()
            continue
        if c in b"{[":
            if depth == 0:
                if c == b"[":
                    stats.dropped_not_object += 1
                obj_start = m.start()
            depth += len(tok)
            if depth > MAX_DEPTH:
                too_deep = True
        else:  # closing bracket
            if depth == 0:
                if c == b"]":
                    return events, m.start(), m.end()
                continue  # stray '}' between events
            depth -= 1
            if depth == 0:
                end = m.end()
                if too_deep:
                    stats.dropped_too_deep += 1
                    too_deep = False
                elif region[obj_start:obj_start + 1] == b"{":
                    event = decode_with_repairs(region[obj_start:end], decode_one, stats)
                    if event is not None:
                        events.append(event)
                        stats.recovered += 1
                consumed = end
    if final and depth > 0:
        stats.incomplete_tail_bytes += len(region) - max(obj_start, consumed)
        consumed = len(region)
    return events, consumed, None
