"""What the dependency graph costs: seconds to build it and to replay it, and the memory it takes, per trace.

    python bench/depgraph.py TRACE [TRACE...] [--repeat 5] [--variant LABEL=ENV ...]

Each run is a child process that opens the trace from the cache (``OPSCOPE_CACHE_DIR``; open it once first),
reads the event columns the graph reads, then times ``dependency_graph`` (device links included) and one
no-change ``replay``. Memory: the child's peak anonymous memory over the whole run (sampled every 3 ms from outside,
as bench/owned_memory.py does), and that peak less the child's anonymous memory before the build (what the graph
and its replay added), in MiB. Variants (``--variant LABEL=ENV``, ENV being ``NAME=VALUE`` pairs separated by
spaces: ``PYTHONPATH=OTHER/src`` for another checkout, ``OPSCOPE_NATIVE=0`` for the Python definitions) run
interleaved round by round; each figure is the median of ``--repeat`` runs with the range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from owned_memory import MIB, parse_env, run

CHILD = """\
import json, resource, sys, time
import pyarrow.compute as pc
from opscope.ingest import open_trace
from opscope.analyses.depgraph import dependency_graph
from opscope.analyses.replay import replay

def anon():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) << 10 for line in fh if line.startswith("RssAnon:"))

trace = open_trace(sys.argv[1])
ev = trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device", "stream", "correlation"])
for column in ev.columns:  # read before the clock starts
    pc.count(column)
before = anon()
t0 = time.perf_counter()
graph = dependency_graph(trace)
t1 = time.perf_counter()
run = replay(graph)
t2 = time.perf_counter()
with open(sys.argv[2], "w") as out:
    json.dump({"nodes": len(graph), "build_s": t1 - t0, "replay_s": t2 - t1, "anon_before": before,
               "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, out)
"""


def stats(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=ENV")
    a = ap.parse_args()
    variants = [(v.partition("=")[0], parse_env(v.partition("=")[2])) for v in a.variant] or [("this", {})]
    results: dict[tuple[str, str], list[dict]] = {}
    for trace in a.traces:
        for r in range(a.repeat):
            for label, extra in variants[r % len(variants):] + variants[:r % len(variants)]:
                env = {**os.environ, **extra}
                with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
                    got = run([sys.executable, "-c", CHILD, str(trace), out.name], env, 0.003, timeout=1800)
                    if got["rc"]:
                        raise SystemExit(f"{label} {trace}: {got['stderr_tail']}")
                    got["child"] = out.read()
                results.setdefault((str(trace), label), []).append(got)
    print(f"{'trace':48} {'variant':10} {'nodes':>10} {'build s':>22} {'replay s':>22} {'peak anon MiB':>22} "
          f"{'added MiB':>22}")
    for (trace, label), runs in results.items():
        child = [json.loads(r["child"]) for r in runs]
        print(f"{trace[-48:]:48} {label:10} {child[0]['nodes']:10,} {stats([c['build_s'] for c in child]):>22} "
              f"{stats([c['replay_s'] for c in child]):>22} {stats([r['anon_mib'] for r in runs]):>22} "
              f"{stats([r['anon_mib'] - c['anon_before'] / MIB for r, c in zip(runs, child)]):>22}")


if __name__ == "__main__":
    main()
