"""A hand-drawn job whose one rank arrives late at every collective (microseconds).

Per rank and step (start ``T``): the host launches ``relu`` at T+2-5 (it runs 6 from T+6), ``gemm`` at T+10-15 and
the all-reduce at T+20-25, and waits in cudaStreamSynchronize from T+30 until 5 after the all-reduce ends; the step
ends 9 later. On the device, ``gemm`` runs 100 from T+16 and the all-reduce follows it on the same stream. The late
rank's ``gemm`` starts ``stall_us`` later (its device waited on something the trace does not show). An all-reduce
ends 50 after the last rank has arrived: the early ranks wait inside it. Steps follow each other 20 apart; each
rank's clock is offset by ``offset_us * rank``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opscope.model.trace import Trace
from support.builder import make_trace, row

GEMM_US = 100
TRANSFER_US = 50
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def step_us(stall_us: float) -> float:
    """One step's length on every rank (the late rank sets it)."""
    return 16 + GEMM_US + stall_us + TRANSFER_US + 5 + 9


def late_rank_job(**options: Any) -> dict[int, Trace]:
    """rank -> its Trace (options: :func:`_job_rows`'s)."""
    return {rank: make_trace(rows, metadata={"rank": rank, "world_size": len(job)})
            for job in [_job_rows(**options)] for rank, rows in job.items()}


def _job_rows(ranks: int = 2, late: int = 1, stall_us: float = 300, steps: int = 3, offset_us: float = 5000,
              ) -> dict[int, list[dict[str, Any]]]:
    """rank -> its event rows."""
    out = {}
    for rank in range(ranks):
        rows, t, shift = [], 0.0, offset_us * rank
        for step in range(steps):
            stall = stall_us if rank == late else 0.0
            arrival = t + 16 + GEMM_US + stall
            last = t + 16 + GEMM_US + stall_us
            end = last + TRANSFER_US
            length = step_us(stall_us)
            corr = 10 * step
            rows += [
                row("user_annotation", f"ProfilerStep#{step}", shift + t, length),
                row("runtime", "cudaLaunchKernel", shift + t + 2, 3, correlation=corr + 3),
                row("kernel", "relu", shift + t + 6, 6, correlation=corr + 3, pid=0, tid=7, stream=7, device=0),
                row("runtime", "cudaLaunchKernel", shift + t + 10, 5, correlation=corr + 1),
                row("runtime", "cudaLaunchKernel", shift + t + 20, 5, correlation=corr + 2),
                row("runtime", "cudaStreamSynchronize", shift + t + 30, end + 5 - (t + 30)),
                row("kernel", "gemm", shift + t + 16 + stall, GEMM_US, correlation=corr + 1, pid=0, tid=7,
                    stream=7, device=0),
                row("comm", NCCL, shift + arrival, end - arrival, correlation=corr + 2, pid=0, tid=7, stream=7,
                    device=0),
            ]
            t += length + 20
        out[rank] = rows
    return out


_CAT = {"user_annotation": "user_annotation", "runtime": "cuda_runtime", "kernel": "kernel", "comm": "kernel"}


def write_late_rank_job(directory: Path, **options: Any) -> list[Path]:
    """The same job written as Kineto JSON files ``rank-N.json`` (one per rank)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for rank, rows in _job_rows(**options).items():
        events = []
        for r in rows:
            event = {"ph": "X", "cat": _CAT[r["kind"]], "name": r["name"], "pid": r.get("pid", 1),
                     "tid": r.get("tid", 1), "ts": r["ts_ns"] / 1000, "dur": r["dur_ns"] / 1000, "args": {}}
            if r.get("correlation") is not None:
                event["args"]["correlation"] = r["correlation"]
            if r["kind"] in ("kernel", "comm"):
                event["args"].update(device=r["device"], stream=r["stream"])
            events.append(event)
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": len(
            _job_rows(**options))}, "traceEvents": events}
        path = directory / f"rank-{rank}.json"
        path.write_text(json.dumps(doc))
        files.append(path)
    return files
