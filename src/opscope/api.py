"""The Python API: ``opscope.profile`` to record from inside a program, ``opscope.load`` to read a trace
or a recording into data frames (notebooks), ``opscope.step`` to mark steps.

Nothing here imports torch until a recording starts, so ``import opscope`` stays light.
"""

from __future__ import annotations

import sys
import time
from contextlib import ContextDecorator
from pathlib import Path
from typing import Any

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

    def __exit__(self, exc_type, exc, tb) -> bool:
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
            write_json_atomic(self.output / "run.json", self._info)
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
    run.json (when loaded from a recording directory)."""

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

    def summary(self):
        from opscope.analyses.summary import summarize

        return summarize(self.trace)

    def ops(self, **kwargs):
        """The ``opscope ops`` table as a data frame (keywords of :func:`opscope.analyses.ops.op_table`)."""
        from opscope.analyses.ops import op_table

        return self._frame(op_table(self.trace, **kwargs))

    def kernels(self, **kwargs):
        from opscope.analyses.kernels import kernel_table

        return self._frame(kernel_table(self.trace, **kwargs))

    def _frame(self, table):
        if self.frames == "arrow":
            return table
        if self.frames == "pandas":
            return table.to_pandas()
        import polars as pl

        return pl.from_arrow(table)

    def __repr__(self) -> str:
        return f"Loaded({self.path}, {self.trace!r})"


def load(path: str | Path, *, frames: str = "polars", index: int = 0, cache: bool = True) -> Loaded:
    """Open a trace file, or a recording directory (its ``index``-th trace), for use in a notebook.

    ``frames`` picks the data-frame library: ``polars`` (the ``opscope[polars]`` extra), ``pandas``
    or ``arrow``.
    """
    import json

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
        run = json.loads(run_file.read_text())
        traces = run.get("traces") or []
        if not traces:
            raise TraceError(path, "the recording holds no trace", "see its run.json for what happened")
        if not -len(traces) <= index < len(traces):
            raise UsageError(f"index {index} is out of range: the recording has {len(traces)} trace(s)")
        trace_path = path / traces[index]
    else:
        trace_path = path
    return Loaded(open_trace(trace_path, use_cache=cache), frames, run, trace_path)
