"""Link rows described by names and times, to compare links with what a test expects."""

from __future__ import annotations

US = 1000


def _described(trace, table):
    """Link rows as (device name, device ts) -> (launch name/ts, op, top op, annotation, inferred)."""
    events = trace.events.select(["name", "ts_ns"]).to_pylist()

    def at(row):
        return None if row is None else (events[row]["name"], events[row]["ts_ns"])

    return {at(r["device_row"]): (at(r["launch_row"]), r["op_name"], r["top_op_name"], r["annotation"],
                                  r["link_inferred"]) for r in table.to_pylist()}
