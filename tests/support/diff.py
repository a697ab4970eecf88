"""The hand-built pair of traces the diff tests compare: a base run and a slower new one."""

from __future__ import annotations

from support.tracefiles import x


def launch(ts, corr):
    return x("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=corr)


def kernel(name, ts, dur, corr):
    return x(name, ts, dur, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=corr)


def base_events(repeat: int = 1):
    """Two steps of 1000 us (``repeat`` times: 2 x ``repeat`` steps, the same per-step means). Per step: aten::mm
    100 us self (launches k_mm, 200 us); the odd steps also aten::relu 50 us (launches k_relu, 30 us)."""
    out = []
    for r in range(repeat):
        s, c = 2000 * r, 3 * r
        out += [
            x(f"ProfilerStep#{2 * r + 1}", s, 1000, cat="user_annotation"),
            x("aten::mm", s + 10, 100), launch(s + 20, c + 1), kernel("k_mm", s + 120, 200, c + 1),
            x("aten::relu", s + 300, 50), launch(s + 310, c + 2), kernel("k_relu", s + 400, 30, c + 2),
            x(f"ProfilerStep#{2 * r + 2}", s + 1000, 1000, cat="user_annotation"),
            x("aten::mm", s + 1010, 100), launch(s + 1020, c + 3), kernel("k_mm", s + 1120, 200, c + 3),
        ]
    return out


def new_events(steps: int = 2):
    """``steps`` steps of 1200 us. Per step: aten::mm 150 us (k_mm 300 us), aten::add 20 us (k_add 10 us); no relu.
    k_mm starts 78 us after its launch returns: a first kernel that waited over 100 us would be queued behind
    unseen work (see tests/unit/test_gpu_unseen.py)."""
    out = []
    for i, s in enumerate(range(0, 1200 * steps, 1200)):
        c = 10 * (i + 1)
        out += [x(f"ProfilerStep#{i + 1}", s, 1200, cat="user_annotation"),
                x("aten::mm", s + 10, 150), launch(s + 20, c), kernel("k_mm", s + 100, 300, c),
                x("aten::add", s + 600, 20), launch(s + 605, c + 1), kernel("k_add", s + 700, 10, c + 1)]
    return out


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def loader_events(step_us: int, loader_us: int, mm_us: int, mm_at: int, steps: int = 2) -> list[dict]:
    """A CPU-only run of ``steps`` steps of ``step_us``: per step the DataLoader [0, loader_us) holding aten::stack
    (its last 50 us but 10), the user's __getitem__ frame inside it, and aten::mm [mm_at, mm_at + mm_us)."""
    out = []
    for i in range(steps):
        s = i * step_us
        out += [x(f"ProfilerStep#{i + 1}", s, step_us, cat="user_annotation"),
                x(LOADER, s, loader_us, cat="user_annotation"),
                x("train_slow.py(23): __getitem__", s + 5, loader_us - 60, cat="python_function"),
                x("aten::stack", s + loader_us - 50, 40), x("aten::mm", s + mm_at, mm_us)]
    return out


def write_recording(directory, events) -> None:
    """A recording directory as opscope record leaves it: the trace and a run.json naming it."""
    import json

    from support.tracefiles import write_trace

    directory.mkdir()
    write_trace(directory / "host-1.pt.trace.json", events)
    (directory / "run.json").write_text(json.dumps({"traces": ["host-1.pt.trace.json"], "status": "ok",
                                                    "cpu": {"usable_cores": 2}, "threads": {"intra_op": 2}}))
