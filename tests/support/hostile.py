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


# --- analyses (i14-analyses) ---

def long_kernel_name(path: Path, length: int, char: str = "<") -> Path:
    """One op launching one kernel whose name is ``length`` characters: ``_Z`` then ``char`` repeated (a mangled-looking
    name no demangler reads, and a template bracket soup for the name shortener)."""
    name = ("_Z" + char * length)[:length]
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 30, "dur": 40,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    import json
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def many_distinct_ops(path: Path, n: int, slower_every: int = 0) -> Path:
    """``n`` ops ``aten::op_<i>``, each recorded once, 1 us long and 2 us apart on one thread, inside one step.
    With ``slower_every`` > 0, every such op takes 2 us instead (a second trace to diff against the first)."""
    parts = [f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":{2 * n + 2}}}']
    for i in range(n):
        dur = 2 if slower_every and i % slower_every == 0 else 1
        parts.append(f'{{"ph":"X","cat":"cpu_op","name":"aten::op_{i}","pid":1,"tid":1,"ts":{2 * i + 0.5},'
                     f'"dur":{dur}}}')
    path.write_text('{"traceEvents":[' + ",".join(parts) + "]}")
    return path
