"""`opscope job`: a whole job (every rank's trace) at once: stragglers, collectives, clock alignment."""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from opscope.cli.app import app
from opscope.cli.common import say, show, stderr
from opscope.cli.options import FormatOpt, LimitOpt, NoCacheOpt

if TYPE_CHECKING:
    from opscope.scale.job import JobRun

JobArg = Annotated[list[str], typer.Argument(
    metavar="DIR|GLOB|FILES",
    help="The job's rank traces: a directory (searched recursively), a glob (quote it: 'traces/rank-*.json.gz') or "
         "several files; any format opscope reads.", show_default=False)]
DaskOpt = Annotated[str | None, typer.Option(
    "--dask", help="Run the per-rank tasks on a Dask cluster: a scheduler address (tcp://host:8786) or local:N (a "
                   "local cluster of N workers). Workers must see the trace files and the cache at the same paths. "
                   "Needs the dask extra.", show_default=False)]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", "-j", help="Processes of the local pool (default: one per core).", show_default=False)]


@app.command()
def job(
    paths: JobArg,
    format: FormatOpt = "table",
    limit: LimitOpt = 0,
    table: Annotated[str, typer.Option(help="The table --format csv writes (JSON writes all): ranks, steps, "
                                            "rank_steps, why, collectives, instances, clocks.")] = "ranks",
    no_align: Annotated[bool, typer.Option("--no-align", help="Do not estimate and remove the ranks' clock "
                                                              "offsets.")] = False,
    dask: DaskOpt = None,
    workers: WorkersOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """The job view: every rank's trace read in parallel (each into its own cache entry), then combined.

    Per rank: step time, compute and collective time per step, how long it waited in collectives and how much
    later than the others it arrived (its delay); the stragglers (delay >= 1% of the step and apart from the other
    ranks' jitter), the slowest rank of each step, and where a straggler's extra time goes (kernels, ops, idle
    causes against the median rank).
    Collectives are matched across ranks by process group and order; per call the arrival skew, each rank's
    wait and transfer time, bus bandwidth (nccl-tests definitions) against the link's peak where known. Clocks
    of ranks on different hosts are aligned on the ends of blocking collectives (--no-align to skip).

    Missing, unreadable, truncated files, ranks of another job (different world size) and workers that die are
    each named in one line; the rest of the job is still analysed.
    """
    from opscope.analyses.job.report import job_report
    from opscope.scale.job import run_job

    progress = TaskProgress("reading ranks")
    try:
        run = run_job(paths, dask=dask, workers=workers, align=not no_align, use_cache=not no_cache,
                      progress=progress)
    finally:
        progress.close()
    assert run.view is not None
    from opscope.scale.executor import peak_rss_bytes

    problems = run.problems
    if format == "table":  # the entries left out are said on stderr, one line each (a data format's notes go there)
        for line in run.inputs.skipped:
            say(line)
        problems = [p for p in problems if p not in run.inputs.skipped]
    resources = {"combining_peak_rss_bytes": peak_rss_bytes(),
                 "worker_peak_rss_bytes": max(run.worker_peak_rss.values(), default=None),
                 "task_seconds_total": round(sum(run.task_seconds.values()), 3),
                 "task_seconds_max": round(max(run.task_seconds.values(), default=0.0), 3)}
    show(job_report(run.view, spec=", ".join(paths), files=len(run.inputs.files), world_size=run.world_size,
                    executor=run.executor, problems=problems, limit=limit, table=table, resources=resources),
         format)


class TaskProgress:
    """Tasks done of all, as a bar on a terminal's stderr (nothing when stderr is not a terminal)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not stderr().is_terminal:
            return
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeRemainingColumn(), console=stderr(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()



def executor_from_env() -> tuple[str | None, int | None]:
    """The executor of a command that takes a job but has no --dask/--workers options: $OPSCOPE_DASK (a scheduler
    address or local:N) and $OPSCOPE_WORKERS (the local pool's size)."""
    workers = os.environ.get("OPSCOPE_WORKERS", "").strip()
    return os.environ.get("OPSCOPE_DASK") or None, int(workers) if workers.isdigit() else None


def run_job_from_env(specs: Sequence[str | Path], **options: Any) -> "JobRun":
    """:func:`opscope.scale.job.run_job` for a command without executor options, with a progress bar."""
    from opscope.scale.job import run_job

    dask, workers = executor_from_env()
    progress = TaskProgress("reading ranks")
    try:
        return run_job(specs, dask=dask, workers=workers, progress=progress, **options)
    finally:
        progress.close()


def job_tables(spec: Path) -> dict[str, object]:
    """Every rank of the job read into the cache (in parallel), as the rank-partitioned dataset's tables."""
    from opscope.cli.common import say
    from opscope.errors import UsageError
    from opscope.scale.dataset import dataset_tables, job_dataset
    from opscope.store.keys import cache_root

    run = run_job_from_env([spec], summarize=False)
    for line in run.problems:
        say(line)
    if not run.entries:
        raise UsageError(f"{spec}: no rank could be read into the cache")
    return dataset_tables(job_dataset(run.entries, cache_root()))
