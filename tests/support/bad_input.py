"""Damaged, hostile and odd trace files written as text, one key group per line as Kineto writes them, so
that expected counts follow from the file itself; and checks of how opscope reads or refuses them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from opscope.errors import TraceError
from opscope.ingest import open_trace

US = 1000
TRUNCATED = "file is truncated"


# -- fixtures as text --------------------------------------------------------------------------------

def event(name: str | None = '"aten::add"', ts: str | None = "100", dur: str | None = "10", *,
          ph: str = '"X"', cat: str | None = '"cpu_op"', pid: str = "1", tid: str = "1",
          args: str | None = '{"External id": 1}', extra: str | None = None) -> str:
    """One event as Kineto writes it; every value is JSON *text* (None leaves the key out)."""
    groups = [
        [("ph", ph), ("cat", cat), ("name", name), ("pid", pid), ("tid", tid)],
        [("ts", ts), ("dur", dur)],
        [("args", args)],
    ]
    lines = [", ".join(f'"{k}": {v}' for k, v in g if v is not None) for g in groups]
    if extra:
        lines.append(extra)
    return "  {\n    " + ",\n    ".join(line for line in lines if line) + "\n  }"


def op(i: int) -> str:
    """The i-th well-formed cpu_op: ``aten::op{i}`` at [100 + 20 i, +10) us, External id i."""
    return event(f'"aten::op{i}"', str(100 + 20 * i), "10", args=f'{{"External id": {i}}}')


def document(events: list[str], bare: bool = False) -> str:
    body = ",\n".join(events)
    if bare:
        return "[\n" + body + "\n]\n"
    return '{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + body + '\n  ],\n  "traceName": "bad-input"\n}\n'


def write(path: Path, content: str | bytes, gz: bool = False) -> Path:
    data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def assert_trace_error(path: Path, *words: str) -> str:
    """``open_trace`` refuses ``path`` with a one-line message naming it and holding ``words``."""
    with pytest.raises(TraceError) as info:
        open_trace(path, use_cache=False)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    for word in words:
        assert word.lower() in message.lower(), (word, message)
    return message


def warnings_of(trace) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in trace.warnings:
        out[w["problem"]] = out.get(w["problem"], 0) + w["count"]
    return out


def names(trace) -> list[str]:
    return trace.events["name"].to_pylist()


def args_of(trace, row: int) -> dict:
    args = trace.args
    ids = args["event_id"].to_pylist()
    return json.loads(args["args"][ids.index(row)].as_py())


# -- 2. truncated JSON -----------------------------------------------------------------------------

def _cut_points(text: str, index: int) -> dict[str, int]:
    """Offsets inside the text of event ``aten::op{index}``."""
    start = text.rindex("{", 0, text.index(f'"aten::op{index}"'))
    end = text.index("\n  }", start) + 4  # the event's own closing brace, not that of its args
    return {
        "after_open_brace": start + 1,
        "inside_name": text.index("op", text.index('"name"', start)) + 2,
        "inside_ts": text.index('"ts": ', start) + len('"ts": ') + 1,
        "inside_args": text.index('"External id"', start) + 4,
        "before_close_brace": end - 1,
        "after_close_brace": end,
    }


def _complete_before(text: str, cut: int, total: int) -> int:
    """How many of the ``total`` events of ``text`` end (closing brace included) before offset ``cut``."""
    return sum(1 for i in range(total) if _cut_points(text, i)["after_close_brace"] <= cut)


FIFTY = document([op(i) for i in range(50)])
