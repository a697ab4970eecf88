"""Kernels, launches and steps built by hand for the GPU analysis tests, and the analysis' rows keyed for them."""

from __future__ import annotations

from opscope.analyses.gpu import GpuAnalysis
from opscope.ingest import open_trace
from support.tracefiles import write_trace, x

US = 1000


def kernel(name, ts, dur, stream=7, corr=None, device=0, cat="kernel"):
    args = {"device": device, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return x(name, ts, dur, cat=cat, pid=device, tid=stream, **args)


def launch(ts, corr, name="cudaLaunchKernel", dur=5):
    return x(name, ts, dur, cat="cuda_runtime", correlation=corr)


def step(n, ts, dur):
    return x(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def analyze(tmp_path, events, **kw) -> GpuAnalysis:
    return GpuAnalysis(open_trace(write_trace(tmp_path / "t.json", events), use_cache=False), **kw)


def rows_by_stream(analysis):
    return {(r["device"], r["stream"]): r for r in analysis.breakdown().to_pylist()}


def idle_by_cause(analysis, device=0):
    return {r["cause"]: r["idle_ns"] for r in analysis.idle().to_pylist() if r["device"] == device}


# --- breakdown, concurrency, launches ------------------------------------------------------------------------

def two_streams() -> list[dict]:
    """Window = steps [0, 2000) us. Device 0, stream 7: conv [100,300), HtoD [300,350), memset [400,420),
    DtoH [1200,1300), gemm [1500,1600). Stream 20: NCCL all-reduce [200,500), DtoD [1250,1280).
    Device 1, stream 7: one kernel [500,900). Launches 50 us before each start, gemm's 100 us before."""
    return [
        step(1, 0, 1000), step(2, 1000, 1000),
        launch(50, 1), launch(250, 2, "cudaMemcpyAsync"), launch(350, 4, "cudaMemsetAsync"),
        launch(150, 6), launch(1150, 3, "cudaMemcpyAsync"), launch(1200, 7, "cudaMemcpyAsync"),
        launch(1400, 5), launch(450, 8),
        kernel("conv_kernel", 100, 200, corr=1),
        kernel("Memcpy HtoD (Pageable -> Device)", 300, 50, corr=2, cat="gpu_memcpy"),
        kernel("Memset (Device)", 400, 20, corr=4, cat="gpu_memset"),
        kernel("Memcpy DtoH (Device -> Pageable)", 1200, 100, corr=3, cat="gpu_memcpy"),
        kernel("gemm_kernel", 1500, 100, corr=5),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 200, 300, stream=20, corr=6),
        kernel("Memcpy DtoD (Device -> Device)", 1250, 30, stream=20, corr=7, cat="gpu_memcpy"),
        kernel("other_device_kernel", 500, 400, device=1, corr=8),
    ]
