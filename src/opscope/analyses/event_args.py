"""Events' own arguments (the ``args`` table's JSON text), parsed for a few chosen events."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from opscope.model.trace import Trace


def args_by_id(trace: Trace, ids: list[int]) -> dict[int, dict[str, Any]]:
    """The parsed args of these events, by event id: only those whose args are a JSON object (an event without args,
    or with text that is not one, is absent). Reads and parses only these events' rows."""
    if not ids:
        return {}
    picked = trace.args_of(pa.array(ids, pa.int64()))  # these rows alone: the table is not read whole
    out: dict[int, dict[str, Any]] = {}
    for event_id, text in zip(picked["event_id"].to_pylist(), picked["args"].to_pylist()):
        if not isinstance(text, str) or not text:
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            out[event_id] = value
    return out
