"""The per-rank task: open one rank's trace (into its own cache entry) and reduce it to its RankSummary.

It runs in a worker process (the local pool or a Dask worker), so it is a module-level function of plain,
picklable arguments, and what it returns is small: a rank's summary tables, never its events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from opscope.analyses.job.rank import RankSummary
from opscope.scale.executor import peak_rss_bytes


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to read one rank: the file and the cache to read and write (a path the workers share
    with the client; the executor sends the client's reader settings with every task)."""

    path: str
    cache_dir: str | None
    use_cache: bool = True
    #: False: read the rank into the cache and say who it is, without its summary tables (for `query DIR`)
    summarize: bool = True


@dataclass
class RankResult:
    summary: RankSummary
    #: the rank's cache entry (a directory of Arrow IPC files), when the cache was used
    entry: str | None
    #: the peak resident memory of the worker process so far (bytes) and the task's wall time (s)
    peak_rss: int
    seconds: float


def summarize_rank(task: RankTask) -> RankResult:
    from opscope.analyses.job.rank import rank_summary
    from opscope.ingest import open_trace
    from opscope.ingest.source import read_settings
    from opscope.scale.discover import rank_from_name
    from opscope.store.entry import published

    started = time.perf_counter()
    path = Path(task.path)
    cache_dir = Path(task.cache_dir) if task.cache_dir else None
    trace = open_trace(path, use_cache=task.use_cache, cache_dir=cache_dir)
    summary = rank_summary(trace, task.path, rank_from_name(path), full=task.summarize)
    entry = None
    if task.use_cache:
        found = published(path, cache_dir, read_settings())
        entry = str(found) if found is not None else None
    return RankResult(summary=summary, entry=entry, peak_rss=peak_rss_bytes(),
                      seconds=time.perf_counter() - started)
