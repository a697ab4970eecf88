"""CPU time a process uses while it holds a loaded, analysed trace and does nothing (three 5 s sleeps).

    python bench/idle_cpu.py tuned|plain TRACE

``tuned`` calls ``opscope.runtime.tune()`` first (as the command does); ``plain`` does not. Prints the CPU seconds
(user + system, the whole process: every thread) used during each sleep.
"""

from __future__ import annotations

import resource
import sys
import time

from opscope import runtime


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    mode, trace = sys.argv[1], sys.argv[2]
    if mode == "tuned":
        runtime.tune()
    import opscope

    loaded = opscope.load(trace, frames="arrow")
    loaded.advise()
    for _ in range(3):
        before = cpu_seconds()
        time.sleep(5)
        print(f"{mode}: {cpu_seconds() - before:.4f} s of CPU in 5 s idle", flush=True)


if __name__ == "__main__":
    main()
