"""A hand-drawn step for the dependency graph's tests (microseconds): the host enters aten::mm at 5, launches gemm at
10-14 (the kernel runs ``late_start_us`` to ``late_start_us + kernel_us`` on stream 7), leaves aten::mm at 20 and
waits in cudaDeviceSynchronize from 30 until 5 after the kernel ends; then 10 more of its own."""

from __future__ import annotations

from support.builder import make_trace, row


def one_step(late_start_us: float = 16, kernel_us: float = 69):
    kernel_end = late_start_us + kernel_us
    sync_end = kernel_end + 5
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, sync_end + 10),
        row("cpu_op", "aten::mm", 5, 15),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("runtime", "cudaDeviceSynchronize", 30, sync_end - 30),
        row("kernel", "gemm", late_start_us, kernel_us, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])
