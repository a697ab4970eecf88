"""``opscope peaks``: what this machine's device achieves, measured: matrix-multiply FLOP/s per data type and copy
bandwidth, for the roofline of traces recorded here (``--peaks FILE``).

Each measurement runs one operation over and over for its share of the time budget: a warm-up, then repetitions of
about equal length; the result is the median rate over the repetitions, with the lowest and highest. A matmul of
two n x n matrices counts 2n^3 floating-point operations; a copy of B bytes moves 2B (read and written). With torch
(CPU, or a CUDA/ROCm GPU: torch calls both ``cuda``) the device's own kernels run; with numpy alone, its BLAS on
the CPU (fp32 and fp64: numpy has no fast fp16/bf16 matmul).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opscope.analyses.peaks import Peaks
from opscope.errors import UsageError

#: repetitions of each measurement (the median of these is the result)
REPETITIONS = 5
_INSTALL = "install opscope[torch] (or numpy) to measure: pip install 'opscope[torch]'"


@dataclass(frozen=True)
class Measured:
    """One measured rate: the median over the repetitions, and their lowest and highest."""

    what: str       # "fp32" (a matmul's data type) or "copy"
    median: float   # TFLOP/s for a matmul, GB/s for the copy
    low: float
    high: float
    repetitions: int
    size: str       # the operation measured: "matmul 4096x4096" or "copy 1 GiB"


@dataclass
class Measurement:
    device: str
    backend: str                         # "torch 2.x (cpu)", "numpy 2.x"
    rates: list[Measured] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def peaks(self) -> Peaks:
        """The measured rates as peaks (what ``--output`` writes and ``--peaks FILE`` reads)."""
        tflops = {m.what: m.median for m in self.rates if m.what != "copy" and m.median > 0}
        copy = next((m for m in self.rates if m.what == "copy"), None)
        how = "; ".join(f"{m.what}: {m.size}" for m in self.rates)
        day = dt.date.today().isoformat()
        source = (f"measured on this machine by opscope peaks ({day}, {self.backend}; median of {REPETITIONS}: "
                  f"{how})")
        return Peaks(self.device, tflops, copy.median if copy else 0.0, source)


def _timed(run: Callable[[], None], sync: Callable[[], None], budget: float) -> list[float]:
    """Seconds per call of ``run`` in each of REPETITIONS repetitions that together take about ``budget`` seconds,
    after a warm-up of a tenth of it that also sizes them (threads that slept, clocks that dropped, come back)."""
    warm, count = max(budget / 10, 0.02), 0
    sync()
    start = time.perf_counter()
    while count < 2 or time.perf_counter() - start < warm:
        run()
        count += 1
        if count % 4 == 0:
            sync()
    sync()
    per_call = max(time.perf_counter() - start, 1e-9) / count
    calls = max(1, int(budget * 0.9 / REPETITIONS / per_call))
    out = []
    for _ in range(REPETITIONS):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        out.append(max(time.perf_counter() - start, 1e-9) / calls)
    return out


def _sized(make: Callable[[int], Callable[[], None]], sync: Callable[[], None], budget: float, smallest: int,
           largest: int) -> tuple[int, list[float]]:
    """:func:`_timed` of the operation ``make(n)`` at the largest n (doubling from ``smallest`` up to ``largest``)
    whose one call takes under a fifth of a repetition: a slow unit is measured at a size that fits the budget."""
    size = smallest
    while True:
        run = make(size)
        run()  # the first call pays for setup (a BLAS handle, a kernel's selection): not timed
        took = math.inf
        for _ in range(3):  # the fastest of three: one call can lose the CPU to another process
            sync()
            start = time.perf_counter()
            run()
            sync()
            took = min(took, time.perf_counter() - start)
        if size * 2 > largest or took * 8 * 5 * REPETITIONS > budget:  # doubling n costs 8x the time
            return size, _timed(run, sync, budget)
        size *= 2


def _rate(what: str, size: str, work: float, seconds: list[float], scale: float) -> Measured:
    rates = sorted(work / s / scale for s in seconds)
    return Measured(what, statistics.median(rates), rates[0], rates[-1], len(rates), size)


def _gib(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def cpu_name() -> str:
    from opscope.capture.runinfo import cpu_info

    info = cpu_info()
    cores = info.get("usable_cores")
    return f"CPU: {info.get('model') or info.get('machine') or 'unknown'}" + (f" ({cores} cores)" if cores else "")


def available_device(device: str | None) -> str:
    """``device`` checked against what this machine has ("cpu" or "cuda"); None: cuda where torch sees one, else
    cpu."""
    try:
        import torch
    except ImportError:
        if device == "cuda":
            raise UsageError("--device cuda needs torch with CUDA or ROCm: pip install 'opscope[torch]'") from None
        return "cpu"
    has_gpu = bool(torch.cuda.is_available())
    if device == "cuda" and not has_gpu:
        raise UsageError("--device cuda: torch sees no CUDA or ROCm GPU on this machine; measure with --device cpu")
    return device or ("cuda" if has_gpu else "cpu")


def measure(device: str | None = None, seconds: float = 3.0, progress: Callable[[str], None] | None = None) \
        -> Measurement:
    """Measure this machine's device (see the module's text) in about ``seconds``."""
    chosen = available_device(device)
    try:
        import torch
    except ImportError:
        pass
    else:
        return _measure_torch(torch, chosen, seconds, progress)
    try:
        import numpy as np
    except ImportError:
        raise UsageError(f"opscope peaks needs torch or numpy; {_INSTALL}") from None
    return _measure_numpy(np, seconds, progress)


def _measure_torch(torch: Any, device: str, seconds: float, progress: Callable[[str], None] | None) -> Measurement:
    gpu = device == "cuda"
    if gpu:
        name = str(torch.cuda.get_device_name(0))
        backend = f"torch {torch.__version__} ({'ROCm' if getattr(torch.version, 'hip', None) else 'CUDA'})"
        sync = torch.cuda.synchronize
        n, copy_bytes = 16384, 1 << 30
        dtypes = [("fp32", torch.float32), ("fp16", torch.float16)]
        if torch.cuda.is_bf16_supported():
            dtypes.append(("bf16", torch.bfloat16))
    else:
        name = cpu_name()
        backend = f"torch {torch.__version__} (CPU, {torch.get_num_threads()} threads)"

        def sync() -> None:
            return None

        n, copy_bytes = 4096, 256 << 20
        dtypes = [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
    result = Measurement(name, backend)
    share = seconds / (len(dtypes) + 1)
    tf32 = torch.backends.cuda.matmul.allow_tf32 if gpu else None
    for key, dtype in dtypes:
        if progress:
            progress(f"{key} matmul")

        def matmul(size: int, dtype: Any = dtype) -> Callable[[], None]:
            a = torch.randn(size, size, device=device).to(dtype)
            b = torch.randn(size, size, device=device).to(dtype)
            return lambda: torch.mm(a, b)

        try:
            if gpu:  # the fp32 matmul itself, not TF32 (a tensor-core peak of its own)
                torch.backends.cuda.matmul.allow_tf32 = False
            size, times = _sized(matmul, sync, share, 2048 if gpu else 128, n)
        except (RuntimeError, TypeError) as exc:  # a data type this device's matmul does not take
            result.notes.append(f"{key}: not measured ({str(exc).splitlines()[0][:120]})")
            continue
        finally:
            if gpu:
                torch.backends.cuda.matmul.allow_tf32 = tf32
        result.rates.append(_rate(key, f"matmul {size}x{size}", 2.0 * size**3, times, 1e12))
    if progress:
        progress(f"copy {_gib(copy_bytes)}")
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    times = _timed(lambda: dst.copy_(src), sync, share)
    result.rates.append(_rate("copy", f"copy {_gib(copy_bytes)}", 2.0 * copy_bytes, times, 1e9))
    if not gpu:
        result.notes.append("CPU: bf16/fp16 matmuls are fast only where the CPU has units for them (AMX, "
                            "AVX512-FP16/BF16); elsewhere they are converted and slower than fp32")
    return result


def _measure_numpy(np: Any, seconds: float, progress: Callable[[str], None] | None) -> Measurement:
    result = Measurement(cpu_name(), f"numpy {np.__version__} (no torch)")
    n, copy_bytes = 4096, 256 << 20
    share = seconds / 3

    def sync() -> None:
        return None

    rng = np.random.default_rng(0)
    for key, dtype in (("fp32", np.float32), ("fp64", np.float64)):
        if progress:
            progress(f"{key} matmul")

        def matmul(size: int, dtype: Any = dtype) -> Callable[[], None]:
            a = rng.standard_normal((size, size)).astype(dtype)
            b = rng.standard_normal((size, size)).astype(dtype)
            out = np.empty((size, size), dtype=dtype)
            return lambda: np.matmul(a, b, out=out)

        size, times = _sized(matmul, sync, share, 128, n)
        result.rates.append(_rate(key, f"matmul {size}x{size}", 2.0 * size**3, times, 1e12))
    if progress:
        progress(f"copy {_gib(copy_bytes)}")
    src = np.ones(copy_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    times = _timed(lambda: np.copyto(dst, src), sync, share)
    result.rates.append(_rate("copy", f"copy {_gib(copy_bytes)}", 2.0 * copy_bytes, times, 1e9))
    result.notes.append("numpy alone: fp16/bf16 matmuls not measured (install opscope[torch])")
    return result
