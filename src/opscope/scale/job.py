"""Run a job: find its rank traces, summarise every rank as a task on an executor, check that the ranks make
one job, and combine their summaries into the job view. The process that runs this holds the ranks' summaries
(small tables), never a rank's events.

Faults are named, one line each, and the rest of the job is analysed: a file that cannot be read (missing,
truncated beyond recovery, not a trace), a worker that died on a rank, a file whose world size is not the job's
(another job's trace), two files of one rank, ranks of the world size that have no file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opscope.analyses.job.rank import RankSummary
from opscope.analyses.job.ranks import span_text
from opscope.analyses.job.view import JobView, job_view
from opscope.scale.discover import JobInputs, job_inputs
from opscope.scale.rank_task import RankResult, RankTask, summarize_rank


@dataclass
class JobRun:
    """A job's view and how it was made."""

    inputs: JobInputs
    summaries: dict[int, RankSummary]
    #: one line per fault: a rank left out, a file that failed, ranks with no file
    problems: list[str]
    executor: str
    world_size: int | None
    #: rank -> its cache entry (a directory of Arrow IPC files), for the rank-partitioned dataset
    entries: dict[int, str]
    #: per rank: the worker's peak resident memory (bytes) and the task's seconds
    worker_peak_rss: dict[int, int] = field(default_factory=dict)
    task_seconds: dict[int, float] = field(default_factory=dict)
    view: JobView | None = None


def run_job(specs: Sequence[str | Path], *, dask: str | None = None, workers: int | None = None, align: bool = True,
            use_cache: bool = True, cache_dir: Path | None = None,
            progress: Callable[[int, int], None] | None = None, summarize: bool = True,
            task: Callable[[RankTask], RankResult] = summarize_rank) -> JobRun:
    """Summarise every rank of the job named by ``specs`` on the executor (``dask``: a scheduler address or
    ``local:N``; else a local process pool of ``workers``) and combine the summaries. ``summarize=False``: only
    read every rank into the cache (``run.entries``), no view. ``task``: the per-rank function (a module-level
    function of a :class:`RankTask`; another one wraps :func:`summarize_rank`, e.g. in tests)."""
    from opscope.store.keys import cache_root

    inputs = job_inputs([str(s) for s in specs])
    root = cache_dir or cache_root()
    tasks = [RankTask(str(p), str(root), use_cache, summarize) for p in inputs.files]
    results, problems, name = run_per_file(inputs, task, tasks, dask=dask, workers=workers, progress=progress)
    run = _assemble(inputs, results, problems, name)
    if summarize:
        run.view = job_view(run.summaries, align=align)
    return run


def run_per_file(inputs: JobInputs, fn: Callable[[Any], Any], items: Sequence[Any], *, dask: str | None = None,
                 workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> tuple[list[tuple[Path, Any]], list[str], str]:
    """``fn`` on one item per file of ``inputs`` on the executor: the values that came back (with their file), one
    line per file left out (the inputs' own and each task's error or dead worker), and the executor's name."""
    from opscope.scale.executor import executor_for

    with executor_for(dask=dask, workers=workers) as executor:
        outcomes = executor.run(fn, items, [str(p) for p in inputs.files], progress)
        name = executor.name
    results: list[tuple[Path, Any]] = []
    problems = list(inputs.skipped)
    for path, outcome in zip(inputs.files, outcomes):
        if outcome.error is not None:
            text = outcome.error if str(path) in outcome.error else f"{path}: {outcome.error}"
            problems.append(f"{text}; left out")
        else:
            results.append((path, outcome.value))
    return results, problems, name


def _assemble(inputs: JobInputs, results: list[tuple[Path, RankResult]], problems: list[str],
              executor: str) -> JobRun:
    """Which results make the job: one per rank, of one world size."""
    sizes = Counter(r.summary.world_size for _, r in results if r.summary.world_size is not None)
    world = sizes.most_common(1)[0][0] if sizes else None
    summaries: dict[int, RankSummary] = {}
    entries: dict[int, str] = {}
    peaks: dict[int, int] = {}
    seconds: dict[int, float] = {}
    owner: dict[int, Path] = {}
    from_names = []
    for path, result in results:
        s = result.summary
        if s.rank is None:
            problems.append(f"{path}: no rank in its distributed info nor in its file name; left out "
                            "(name rank files rank-N.json)")
            continue
        if world is not None and s.world_size is not None and s.world_size != world:
            problems.append(f"{path}: world size {s.world_size}, the job's is {world} (a trace of another job?); "
                            "left out")
            continue
        if world is not None and s.rank >= world:
            problems.append(f"{path}: rank {s.rank} is outside the world size {world}; left out")
            continue
        if s.rank in summaries:
            problems.append(f"{path}: rank {s.rank} again (also {owner[s.rank]}); left out")
            continue
        if s.facts.get("truncated"):
            problems.append(f"{path}: the file is truncated; rank {s.rank}'s figures cover what could be read")
        if s.rank_source == "file name":
            from_names.append(s.rank)
        summaries[s.rank], owner[s.rank] = s, path
        peaks[s.rank], seconds[s.rank] = result.peak_rss, result.seconds
        if result.entry:
            entries[s.rank] = result.entry
    if from_names:
        problems.append(f"rank(s) {span_text(from_names)} taken from the file names: their traces record no "
                        "distributed rank")
    if world is not None:
        missing = sorted(set(range(world)) - set(summaries))
        if missing:
            problems.append(f"{len(missing)} of the job's {world} ranks have no trace here (ranks "
                            f"{_short_span(missing)}): the view covers the {len(summaries)} given")
    return JobRun(inputs=inputs, summaries=summaries, problems=problems, executor=executor, world_size=world,
                  entries=entries, worker_peak_rss=peaks, task_seconds=seconds)


def _short_span(numbers: list[int]) -> str:
    text = span_text(numbers)
    return text if len(text) <= 80 else text[:77].rsplit(",", 1)[0] + ", ..."
