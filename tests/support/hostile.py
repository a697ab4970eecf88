"""Hostile inputs (issue 14): small generators of files that once made opscope hang or blow up memory.

Each returns the path it wrote; sizes are parameters so a fuzz test can scale them up.
"""

from __future__ import annotations

import os
from pathlib import Path


def fifo(path: Path) -> Path:
    """A named pipe where a trace file is expected: open() on it blocks until a writer appears."""
    os.mkfifo(path)
    return path


def many_steps(path: Path, steps: int, repeat: int = 1) -> Path:
    """``steps`` back-to-back ProfilerStep#N annotations, each holding one op (1.5 us each, 2 us apart);
    ``repeat`` > 1 writes the numbers 0..steps-1 that many times over, one run after another."""
    parts = []
    for k in range(steps * repeat):
        i, t = k % steps, 2 * k
        parts.append(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,'
                     f'"ts":{t},"dur":1.5}}')
        parts.append(f'{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{t + 0.25},"dur":1}}')
    path.write_text('{"traceEvents":[' + ",".join(parts) + "]}")
    return path
