"""``opscope demo``: profile a small MobileNetV2-style training loop on the CPU and save the trace."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opscope.advise.context import host_cores
from opscope.capture import require_torch
from opscope.capture.demo_model import mobilenet_v2_mini
from opscope.capture.outdir import claim_output_dir, make_output_dir
from opscope.capture.runinfo import add_torch_info, run_info
from opscope.capture.runner import write_json_atomic
from opscope.capture.tracefile import save_trace
from opscope.errors import UsageError
from opscope.paths import numbered_names


@contextlib.contextmanager
def profiler_chatter_held() -> Iterator[None]:
    """Hold back what the profiler's C++ side writes to stderr (Kineto's start/stop lines, allocator notes):
    on the demo's own model it is noise. If the block fails, what was held back is written out after all."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded, tests capturing it): nothing to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            os.write(2, held.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def record_demo(output_dir: Path, steps: int = 4, batch: int = 8, image: int = 64, threads: int | None = None,
                with_stack: bool = True):
    """Train the demo model for a few steps under ``torch.profiler``; return ``(trace_path, profiler)``.

    Shapes, memory and Python stacks are recorded; the schedule skips one step and warms up one,
    so ``steps`` active steps are kept.
    """
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile, schedule

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = mobilenet_v2_mini()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, image, image)
    y = torch.randint(0, 10, (batch,))
    make_output_dir(output_dir)
    with profiler_chatter_held(), profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
        record_shapes=True,
        profile_memory=True,
        with_stack=with_stack,
    ) as prof:
        for _ in range(steps + 2):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            prof.step()
    try:
        path = save_trace(prof, output_dir, numbered_names("demo.pt.trace.json", ".pt.trace.json"))
    except OSError as exc:
        raise UsageError(f"{output_dir}: cannot save the demo's trace there ({exc.strerror or exc})") from None
    return path, prof


def demo_run(output: Path, steps: int) -> tuple[Path, dict[str, Any]]:
    """Record the demo as ``opscope record`` records a program: into a fresh directory (``output``, else
    ``output-1``...), with torch's intra-op threads sized for this host (its usable cores less those other processes
    keep busy, by the load average), and a run.json beside the trace that says so. Returns the trace and run.json."""
    torch = require_torch()
    directory, _ = claim_output_dir(output)
    info = run_info(["opscope", "demo", "--steps", str(steps)], Path.cwd())
    host = host_cores(info)
    path, _ = record_demo(directory, steps=steps, threads=host.fitting_intra_op if host is not None else None)
    add_torch_info(info, torch)
    info.update({"status": "finished", "mode": "demo", "traces": [path.name]})
    try:
        write_json_atomic(directory / "run.json", info)
    except OSError as exc:
        raise UsageError(f"{directory}: cannot write run.json there ({exc.strerror or exc})") from None
    return path, info
