"""opscope: a profiler and trace analyzer for deep-learning workloads.

The pipeline runs in one direction: ``ingest`` turns a trace file into a
:class:`~opscope.model.Trace` (Arrow tables), ``analyses`` (then ``advise`` and ``diff``)
turn it into tables and answer with a :class:`~opscope.report.Report`, and ``render``
shows a Report in the chosen format. ``capture`` and ``cli`` sit at the edges.

The API for programs and notebooks: :func:`profile` (record), :func:`step` (mark a step),
:func:`load` (a trace or a recording as data frames).
"""

from opscope.errors import TraceError
from opscope.version import __version__


def __getattr__(name: str):
    # Imported on first use so that `import opscope` does not pull in pyarrow or torch.
    if name in ("profile", "load", "Loaded"):
        from opscope import api

        return getattr(api, name)
    if name == "step":
        from opscope.capture.session import step

        return step
    raise AttributeError(f"module 'opscope' has no attribute {name!r}")


__all__ = ["Loaded", "TraceError", "__version__", "load", "profile", "step"]
