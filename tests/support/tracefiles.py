"""Build small Kineto-style trace files for tests, written the way Kineto writes them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list[dict], header: dict | None = None, gz: bool = False) -> Path:
    doc = {"schemaVersion": 1, **(header or {}), "traceEvents": events, "traceName": str(path)}
    text = json.dumps(doc, indent=1)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def small_gpu_trace() -> list[dict]:
    """Two steps on one thread; one kernel per conv launch, found by correlation.

    Step 1 [0, 1000) us:  aten::conv2d [100, 400) > aten::convolution [110, 390) > cudaLaunchKernel [120, 130)
                          aten::relu [500, 600)
    Step 2 [1000, 3000) us: aten::conv2d [1100, 1300) > cudaLaunchKernel [1110, 1120)
    Kernels on stream 7: conv_kernel [150, 350) corr 1, conv_kernel [1200, 1260) corr 2,
                         relu_kernel [2950, 3050) launched in step 2 (corr 3) but running past its end.
    """
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("aten::conv2d", 100, 300, **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3]]}),
        x("aten::convolution", 110, 280),
        x("cudaLaunchKernel", 120, 10, cat="cuda_runtime", correlation=1),
        x("aten::relu", 500, 100),
        x("ProfilerStep#2", 1000, 2000, cat="user_annotation"),
        x("aten::conv2d", 1100, 200, **{"Input Dims": [[8, 3, 64, 64], [16, 3, 3, 3]]}),
        x("cudaLaunchKernel", 1110, 10, cat="cuda_runtime", correlation=2),
        x("cudaLaunchKernel", 1400, 10, cat="cuda_runtime", correlation=3),
        x("conv_kernel", 150, 200, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1),
        x("conv_kernel", 1200, 60, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2),
        x("relu_kernel", 2950, 100, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=3),
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    ]
