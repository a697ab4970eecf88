"""How well the dependency graph explains each trace: its no-change replay against the measured steps, the share of
the steps' critical paths it cannot explain, and what building and replaying it costs.

    python bench/replay_accuracy.py ../shared/traces [MORE_FILES_OR_FOLDERS...]

For every trace that opscope reads and that has steps: steps, the replay's error against each measured step
(median and worst, |replayed - measured| / measured), the unexplained share of the steps' critical paths (summed
over the steps), graph nodes, and the seconds to build the graph and to replay it (one run each; the trace read from
the cache first).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path


def traces(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.is_file() and not p.name.endswith((".md", ".tsv",
                                                                                                 ".py", ".txt"))))
        else:
            out.append(path)
    return out


def main() -> None:
    from opscope.analyses.critical_path import step_paths
    from opscope.analyses.depgraph import UNEXPLAINED, dependency_graph
    from opscope.analyses.replay import step_times
    from opscope.errors import TraceError, UsageError
    from opscope.ingest import open_trace

    print(f"{'trace':70} {'steps':>5} {'err med':>8} {'err max':>8} {'unexpl':>7} {'nodes':>8} {'build':>6} "
          f"{'replay':>6}")
    for path in traces(sys.argv[1:] or ["../shared/traces"]):
        try:
            trace = open_trace(path)
        except (TraceError, UsageError, OSError):
            continue
        if not trace.steps.num_rows:
            continue
        started = time.perf_counter()
        graph = dependency_graph(trace)
        built = time.perf_counter()
        table = step_times(trace, graph)
        replayed = time.perf_counter()
        measured, got = table["measured_ns"].to_pylist(), table["replayed_ns"].to_pylist()
        errors = [abs(r - m) / m for m, r in zip(measured, got) if m]
        paths = step_paths(trace)
        length = sum(p.length for p in paths)
        unexplained = sum(p.categories.get(UNEXPLAINED, 0) for p in paths)
        name = str(path)[-70:]
        if not errors:
            print(f"{name:70} {0:5}")
            continue
        print(f"{name:70} {len(errors):5} {100 * statistics.median(errors):7.2f}% {100 * max(errors):7.2f}% "
              f"{100 * unexplained / length if length else 0:6.2f}% {len(graph):8,} {built - started:6.2f} "
              f"{replayed - built:6.2f}")


if __name__ == "__main__":
    main()
