"""A graph-capture trace and an execution trace that replays its graphs, as vLLM writes them (hand-drawn)."""

from __future__ import annotations

import json

from support.builder import make_trace, row


def capture_trace():
    # two captures: batch 8 (gemm under aten::mm under a module annotation, then a norm) and batch 16 (a different
    # gemm first); each launch carries its kernel's name in its args, as vLLM's capture traces do
    events = [
        row("user_annotation", "capture_8", 0, 100),
        row("user_annotation", "layer0", 1, 40),
        row("cpu_op", "vllm::gemm", 2, 30),
        row("cpu_op", "aten::mm", 3, 20, shapes="[[8, 64], [64, 64]]"),
        row("runtime", "hipLaunchKernel", 4, 2),
        row("cpu_op", "aten::rms_norm", 50, 10),
        row("runtime", "hipLaunchKernel", 51, 2),
        row("runtime", "hipLaunchKernel", 70, 2),  # a launch outside any op
        row("user_annotation", "capture_16", 200, 100),
        row("cpu_op", "aten::mm", 210, 20),
        row("runtime", "hipLaunchKernel", 211, 2),
        row("cpu_op", "aten::add", 240, 10),
        row("runtime", "hipLaunchKernel", 241, 2),
    ]
    kernel = {4: "gemm_8", 51: "rmsnorm", 70: "memset_kernel", 211: "gemm_16", 241: "add_kernel"}
    args = [json.dumps({"kernel": kernel[round(e["ts_ns"] / 1000)]}) if e["name"] == "hipLaunchKernel" else None
            for e in events]
    return make_trace(events, args=args)


def execution_trace(order: list[str]):
    launch = row("runtime", "hipGraphLaunch", 0, 5, correlation=77)
    kernels = [row("kernel", name, 10 + 10 * i, 5, correlation=77, pid=0, tid=7, stream=7, device=0)
               for i, name in enumerate(order)]
    other = [row("cpu_op", "aten::copy_", 199, 5, shapes="[[4], [4]]"),
             row("runtime", "hipLaunchKernel", 200, 2, correlation=78),
             row("kernel", "copy", 210, 4, correlation=78, pid=0, tid=7, stream=7, device=0)]
    return make_trace([launch, *kernels, *other])


def two_step_execution_trace(order: list[str]):
    """Two steps (ProfilerStep#1, #2), each one replay of the graph whose kernels are ``order``."""
    events = []
    for step, start in ((1, 0), (2, 1000)):
        events.append(row("user_annotation", f"ProfilerStep#{step}", start, 900))
        events.append(row("runtime", "hipGraphLaunch", start + 1, 5, correlation=100 + step))
        events.extend(row("kernel", name, start + 10 + 10 * i, 5, correlation=100 + step, pid=0, tid=7, stream=7,
                          device=0) for i, name in enumerate(order))
    return make_trace(events)
