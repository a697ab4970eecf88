"""Recordings as ``opscope record`` leaves them (a trace and its run.json), for the threads rule's tests."""

from __future__ import annotations

import json

from opscope.advise import advise
from opscope.advise.context import find_run_info
from opscope.ingest import open_trace
from support.tracefiles import write_trace, x


def cpu_step(mm_us: int = 50) -> list[dict]:
    """One 100 us step on the CPU with an aten::mm of ``mm_us`` in it."""
    return [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::mm", 10, mm_us)]


def recording(tmp_path, run: dict, events: list[dict] | None = None, header: dict | None = None):
    """A recording directory as opscope record leaves it: a trace and a run.json naming it; returns the trace and
    the run info found beside it."""
    d = tmp_path / "rec"
    d.mkdir()
    trace = write_trace(d / "trace-1.pt.trace.json", events or cpu_step(), header=header)
    (d / "run.json").write_text(json.dumps({"traces": ["trace-1.pt.trace.json"], **run}))
    return open_trace(trace), find_run_info(trace)


def run_json(intra, cores, inter=1, env=None, gpus=0, load=None):
    """run.json's facts: thread settings, usable cores and (``load``: the 1-minute figure) the host's load."""
    cpu = {"usable_cores": cores, "logical_cores": cores}
    if load is not None:
        cpu["load_average"] = [load, load, load]
    return {"threads": {"intra_op": intra, "inter_op": inter}, "cpu": cpu,
            "environment": env or {}, "gpus": [{"index": i, "name": "GPU"} for i in range(gpus)]}


def findings(trace, run):
    return advise(trace, run=run, only=["threads"]).findings
