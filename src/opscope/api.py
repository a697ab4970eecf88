"""The Python API: ``opscope.profile`` to record from inside a program, ``opscope.load`` to read a trace
or a recording into data frames (notebooks), ``opscope.step`` to mark steps.

Nothing here imports torch until a recording starts, so ``import opscope`` stays light.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Sequence
from contextlib import ContextDecorator
from pathlib import Path
from typing import Any, Literal

from opscope.capture.session import Recording, RecordOptions
from opscope.errors import TraceError, UsageError
from opscope.model.trace import Trace

FRAME_KINDS = ("polars", "pandas", "arrow")


class profile(ContextDecorator):  # noqa: N801 - used like a function: `with opscope.profile():`
    """Record the enclosed code with ``torch.profiler`` into a directory, as ``opscope record`` does.

    >>> with opscope.profile("runs/resnet", active=5) as p:   # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch)        # optimizer.step() advances the step; or call p.step()
    >>> p.load().events                                          # doctest: +SKIP

    Options are those of :class:`~opscope.capture.session.RecordOptions` (``wait``, ``warmup``,
    ``active``, ``repeat``, ``shapes``, ``memory``, ``stack``, ``modules``, ``flops``, ``activities``,
    ``intra_op_threads``, ``inter_op_threads``). An existing recording in ``output`` is never
    overwritten: ``output-1``, ``output-2``... is used instead.
    """

    def __init__(self, output: str | Path = "opscope-profile", **options: Any) -> None:
        try:
            self.options = RecordOptions(**options).validate()
        except TypeError as exc:
            raise UsageError(f"opscope.profile: {exc}") from None
        self.requested = Path(output)
        self.output: Path | None = None
        self._recording: Recording | None = None
        self._info: dict[str, Any] = {}

    def __enter__(self) -> profile:
        import torch

        from opscope.capture.launch import fresh_output_dir
        from opscope.capture.runinfo import run_info
        from opscope.capture.runner import write_json_atomic

        if self.options.intra_op_threads:
            torch.set_num_threads(self.options.intra_op_threads)
        if self.options.inter_op_threads:
            try:
                torch.set_num_interop_threads(self.options.inter_op_threads)
            except RuntimeError as exc:  # torch allows it only before any inter-op work
                raise UsageError(f"cannot set inter-op threads now ({exc}); use opscope record "
                                 "--inter-op-threads") from None
        self.output, _ = fresh_output_dir(self.requested)
        program = Path(sys.argv[0]).resolve().parent if sys.argv and sys.argv[0] else Path.cwd()
        self._info = run_info(list(sys.argv), program, torch)
        self._info.update({"status": "running", "mode": "api", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self.output.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.output / "run.json", self._info)
        self._recording = Recording(self.output, self.options).start()
        return self

    def step(self) -> None:
        """Mark a step boundary (after the first call, optimizer steps no longer count)."""
        if self._recording is not None:
            self._recording.step(explicit=True)

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        from opscope.capture.runner import write_json_atomic

        recording, self._recording = self._recording, None
        if recording is not None:
            recording.stop()
            self._info.update(recording.result())
            self._info.update({
                "status": "ok" if exc_type is None else "crashed",
                "crash": None if exc_type is None else f"{exc_type.__name__}: {exc}",
                "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            })
            try:  # the recording writes into self.output
                write_json_atomic(recording.output / "run.json", self._info)
            except OSError as exc:  # disk full: the program goes on; its traces are complete
                warnings.warn(f"opscope: cannot update {recording.output / 'run.json'} ({exc.strerror or exc})",
                              stacklevel=2)
        return False

    @property
    def traces(self) -> list[Path]:
        return [self.output / name for name in self._info.get("traces", [])] if self.output else []

    def load(self, frames: str = "polars", index: int = 0) -> Loaded:
        if self.output is None:
            raise UsageError("nothing recorded yet: use the profile as a context manager first")
        return load(self.output, frames=frames, index=index)


class Loaded:
    """A trace's model with its tables as data frames: ``events``, ``steps``, ``flows``, ``counters``,
    ``memory``, ``args``; ``trace`` is the Arrow model the analyses take, ``run`` the recording's
    run.json (when loaded from a recording directory). Every table of the commands has a method here that
    calls the same analysis function (ops, gpu_ops, kernels, step_table, gpu_breakdown, gpu_idle, gpu_launches,
    memory_*, scope, code, advise, sql...) and returns it as a data frame."""

    def __init__(self, trace: Trace, frames: str, run: dict[str, Any] | None, path: Path) -> None:
        self.trace = trace
        self.frames = frames
        self.run = run
        self.path = path
        self._cache: dict[str, Any] = {}

    def table(self, name: str):
        if name not in self._cache:
            arrow = getattr(self.trace, name)
            if self.frames == "arrow":
                self._cache[name] = arrow
            elif self.frames == "pandas":
                self._cache[name] = arrow.to_pandas()
            else:
                import polars as pl

                self._cache[name] = pl.from_arrow(arrow)
        return self._cache[name]

    events = property(lambda self: self.table("events"))
    steps = property(lambda self: self.table("steps"))
    flows = property(lambda self: self.table("flows"))
    counters = property(lambda self: self.table("counters"))
    memory = property(lambda self: self.table("memory"))
    args = property(lambda self: self.table("args"))

    # --- analyses: the same functions the commands call, one method each --------------------------------

    def summary(self):
        """The ``opscope summary`` figures (a :class:`~opscope.analyses.summary.Summary`)."""
        from opscope.analyses.summary import summarize

        return summarize(self.trace)

    def ops(self, **kwargs):
        """The ``opscope ops`` table (keywords of :func:`opscope.analyses.ops.op_table`; build ``filt`` with
        :meth:`event_filter`)."""
        from opscope.analyses.ops import op_table

        return self._frame(op_table(self.trace, **kwargs))

    def gpu_ops(self, **kwargs):
        """The ``opscope ops --gpu`` table: the device work each op launched (keywords of
        :func:`opscope.analyses.ops.gpu_op_table`)."""
        from opscope.analyses.ops import gpu_op_table

        return self._frame(gpu_op_table(self.trace, **kwargs))

    def kernels(self, **kwargs):
        """The ``opscope kernels`` table (keywords of :func:`opscope.analyses.kernels.kernel_table`)."""
        from opscope.analyses.kernels import kernel_table

        return self._frame(kernel_table(self.trace, **kwargs))

    def kernel_classes(self, steps: str | Sequence[int] | None = None):
        """Device time per kernel class (gemm, conv, attention, elementwise, ...: the classes ``opscope diff``
        compares across vendors), over the work launched in ``steps`` (all of it by default)."""
        from opscope.analyses.kernel_classes import class_table

        return self._frame(class_table(self.trace, _steps(steps)))

    def step_table(self):
        """The ``opscope steps`` table: per step, duration, device busy inside the step (and its share), device
        time of the work the step launched, outlier flag."""
        from opscope.analyses.gpu import step_device_table

        return self._frame(step_device_table(self.trace))

    def step_stats(self):
        """Mean/median/p90 step time without the outliers (a :class:`~opscope.analyses.steps.StepStats`)."""
        from opscope.analyses.steps import step_stats, step_table

        return step_stats(step_table(self.trace))

    def gpu(self, short_gap_ns: int = 10_000):
        """The :class:`~opscope.analyses.gpu.GpuAnalysis` behind ``opscope gpu`` (made once per trace and gap)."""
        from opscope.analyses.gpu import gpu_analysis

        return gpu_analysis(self.trace, short_gap_ns)

    def gpu_breakdown(self, short_gap_ns: int = 10_000):
        """The ``opscope gpu`` table: busy time per device and stream by kind of work, idle, concurrency."""
        return self._frame(self.gpu(short_gap_ns).breakdown())

    def gpu_idle(self, short_gap_ns: int = 10_000):
        """The ``opscope gpu --idle`` table: each device's idle time by cause."""
        return self._frame(self.gpu(short_gap_ns).idle())

    def gpu_launches(self, short_gap_ns: int = 10_000):
        """The ``opscope gpu --launches`` table: stream concurrency, kernels and launch delays per device."""
        return self._frame(self.gpu(short_gap_ns).launches())

    def links(self):
        """Device event -> launch -> op links (:func:`opscope.analyses.links.link_table`)."""
        from opscope.analyses.links import link_table

        return self._frame(link_table(self.trace))

    def sync_calls(self):
        """The blocking host-device synchronisations inside the steps (:func:`opscope.analyses.sync.sync_table`)."""
        from opscope.analyses.sync import sync_table

        return self._frame(sync_table(self.trace))

    def copies(self):
        """Every memcpy with direction, memory, size and issuing call (:func:`opscope.analyses.copies.copy_table`)."""
        from opscope.analyses.copies import copies_table

        return self._frame(copies_table(self.trace))

    def memory_records(self, steps: str | Sequence[int] | None = None, devices: Sequence[str] | None = None):
        """The allocation records the ``opscope memory`` tables read (a
        :class:`~opscope.analyses.memory.MemoryRecords`), for the steps and devices given."""
        from opscope.analyses.memory import memory_records

        return memory_records(self.trace, steps=_steps(steps), devices=list(devices) if devices else None)

    def memory_peaks(self, steps: str | Sequence[int] | None = None, devices: Sequence[str] | None = None):
        """The ``opscope memory --view peak`` table: each device's peak allocated/reserved memory."""
        from opscope.analyses.memory import peak_table

        return self._frame(peak_table(self.memory_records(steps, devices)))

    def memory_holders(self, sort: str = "bytes", steps: str | Sequence[int] | None = None,
                       devices: Sequence[str] | None = None):
        """The ``opscope memory --view holders`` table: the ops holding memory at each device's peak."""
        from opscope.analyses.memory import holders_table

        return self._frame(holders_table(self.memory_records(steps, devices), sort))

    def memory_allocations(self, sort: str = "bytes", steps: str | Sequence[int] | None = None,
                           devices: Sequence[str] | None = None):
        """The ``opscope memory --view allocations`` table: allocations by op."""
        from opscope.analyses.memory import allocation_table

        return self._frame(allocation_table(self.memory_records(steps, devices), sort))

    def memory_timeline(self, buckets: int = 20, steps: str | Sequence[int] | None = None,
                        devices: Sequence[str] | None = None):
        """The ``opscope memory --timeline N`` table: the most memory in each of ``buckets`` time buckets."""
        from opscope.analyses.memory import timeline_table

        return self._frame(timeline_table(self.memory_records(steps, devices), buckets))

    def memory_counters(self):
        """The ``opscope memory --view counters`` table: the trace's memory counters."""
        from opscope.analyses.memory import counter_table

        return self._frame(counter_table(self.trace))

    def event_filter(self, kinds: Sequence[str] | None = ("cpu_op",), match: str | None = None,
                     exclude: str | None = None, steps: str | Sequence[int] | None = None):
        """An :class:`~opscope.analyses.filters.EventFilter` as the commands' --kinds/--match/--exclude/--steps
        build it (``steps`` as "2-4,7" or a list of numbers)."""
        from opscope.analyses.filters import EventFilter

        return EventFilter(kinds=tuple(kinds) if kinds else None, match=match, exclude=exclude, steps=_steps(steps))

    def scope(self, sort: str = "total_ns", max_depth: int | None = None, filt=None):
        """The ``opscope scope`` table: op time by nn.Module, one row per module path in tree order."""
        from opscope.analyses.views import module_tree, tree_table

        return self._frame(tree_table(module_tree(self.trace, filt or self.event_filter()), sort, max_depth, "module"))

    def code(self, flat: bool = False, frames: str | None = None, sort: str | None = None,
             max_depth: int | None = None, filt=None):
        """The ``opscope code`` table: op time by Python frame, as a tree of call paths or (``flat``) per frame."""
        from opscope.analyses.views import code_tree, flat_table, tree_table

        tree = code_tree(self.trace, filt or self.event_filter(), frames=frames)
        sort = sort or ("self_ns" if flat else "total_ns")
        return self._frame(flat_table(tree, sort, "frame") if flat else tree_table(tree, sort, max_depth, "frame"))

    def advise(self, rules: Sequence[str] | None = None, peers: Sequence[Loaded] = ()):
        """The ``opscope advise`` findings (an :class:`~opscope.advise.Advice`), with the recording's run.json
        when there is one; ``peers``: the other ranks of the same job."""
        from opscope.advise import advise
        from opscope.advise.context import find_run_info

        run = self.run if self.run is not None else find_run_info(self.path)
        return advise(self.trace, run=run, peers=tuple(p.trace for p in peers), only=list(rules) if rules else None)

    def sql(self, query: str, sandbox: bool = False):
        """The ``opscope query`` result: DuckDB SQL over the trace's tables (``sandbox``: no file, network or
        extension access from the SQL, as ``opscope query --sandbox``)."""
        from opscope.query import run_sql

        return self._frame(run_sql(self.trace, query, sandbox=sandbox))

    def _frame(self, table):
        """An Arrow table as this object's kind of data frame."""
        if self.frames == "arrow":
            return table
        if self.frames == "pandas":
            return table.to_pandas()
        import polars as pl

        return pl.from_arrow(table)

    def report_html(self) -> str:
        """The ``opscope report`` page of this trace, as one self-contained HTML document."""
        from opscope.advise.context import find_run_info
        from opscope.compose.page import trace_page
        from opscope.render.html import HtmlRenderer

        if "report_html" not in self._cache:
            run = self.run if self.run is not None else find_run_info(self.path)
            self._cache["report_html"] = HtmlRenderer().text(trace_page(self.trace, str(self.path), run))
        return self._cache["report_html"]

    def report(self, path: str | Path, force: bool = False) -> Path:
        """Write the ``opscope report`` page to ``path`` (never over an existing file unless ``force``)."""
        from opscope.outfile import write_file

        target = Path(path)
        text = self.report_html().encode("utf-8")
        write_file(target, lambda stream: stream.write(text), force=force)
        return target

    def _repr_html_(self) -> str:
        """Jupyter shows the report inline: the page in an iframe (``srcdoc``), so its scripts and styles stay
        its own and the notebook's do not restyle it."""
        import html

        return (f'<iframe title="opscope report" style="width:100%;height:820px;border:1px solid #ddd" '
                f'srcdoc="{html.escape(self.report_html(), quote=True)}"></iframe>')

    def __repr__(self) -> str:
        return f"Loaded({self.path}, {self.trace!r})"


def _steps(steps: str | Sequence[int] | None) -> list[int] | None:
    from opscope.analyses.filters import parse_steps

    return parse_steps(steps) if isinstance(steps, str) else list(steps) if steps else None


def load(path: str | Path, *, frames: str = "polars", index: int = 0, cache: bool = True,
         capture: Sequence[str | Path] | None = None) -> Loaded:
    """Open a trace file, or a recording directory (its ``index``-th trace), for use in a notebook.

    A trace whose CUDA/HIP graph replays were recorded at capture too (vLLM, SGLang, xDiT write ``capture_traces/``
    beside it) gets the ops of its replayed kernels from them: ``capture`` names the capture traces or their folder
    (``["none"]``: none), else the folder beside the trace is used when there is one
    (:func:`opscope.analyses.capture_merge.with_capture`).

    ``frames`` picks the data-frame library: ``polars`` (the ``opscope[polars]`` extra), ``pandas``
    or ``arrow``. ``opscope.runtime.tune()`` first (once, before pyarrow is imported) gives the process the
    memory settings the ``opscope`` command uses (on a 1 GB trace, advise's peak 512 MiB against 758); nothing is
    tuned otherwise.
    """
    import json

    from opscope.analyses.capture_merge import capture_note, with_capture
    from opscope.analyses.recording import clean_run, recording_traces
    from opscope.ingest import open_trace

    if frames not in FRAME_KINDS:
        raise UsageError(f"frames must be one of {', '.join(FRAME_KINDS)} (got {frames!r})")
    if frames != "arrow":
        try:
            __import__(frames)
        except ImportError:
            extra = "pip install 'opscope[polars]'" if frames == "polars" else "pip install pandas"
            raise UsageError(f"frames={frames!r} needs {frames}: {extra}, or use frames='arrow'") from None
    path = Path(path)
    run = None
    if path.is_dir():
        run_file = path / "run.json"
        if not run_file.is_file():
            raise TraceError(path, "is a directory without run.json", "give a trace file or a recording directory")
        try:
            run = json.loads(run_file.read_text())
        except (OSError, ValueError):
            raise TraceError(run_file, "is not readable JSON", "give the run.json that opscope record wrote") from None
        if not isinstance(run, dict):
            raise TraceError(run_file, "is not a JSON object", "give the run.json that opscope record wrote")
        run = clean_run(run)
        traces, note = recording_traces(path, run)  # plain file names only: never a path elsewhere
        if note:
            warnings.warn(note, stacklevel=2)
        if not traces:
            raise TraceError(path, "the recording holds no trace", "see its run.json for what happened")
        if not -len(traces) <= index < len(traces):
            raise UsageError(f"index {index} is out of range: the recording has {len(traces)} trace(s)")
        trace_path = path / traces[index]
    else:
        trace_path = path
    trace = with_capture(open_trace(trace_path, use_cache=cache), trace_path,
                         None if capture is None else [Path(p) for p in capture],
                         lambda capture_path: open_trace(capture_path, use_cache=cache))
    note = capture_note(trace)
    if note:
        warnings.warn(note, stacklevel=2)
    return Loaded(trace, frames, run, trace_path)

