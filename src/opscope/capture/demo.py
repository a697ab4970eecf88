"""``opscope demo``: profile a small MobileNetV2-style training loop on the CPU and save the trace."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from opscope.capture import require_torch
from opscope.capture.demo_model import mobilenet_v2_mini
from opscope.capture.outdir import make_output_dir
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
