"""opscope: a profiler and trace analyzer for deep-learning workloads.

The pipeline runs in one direction: ``ingest`` turns a trace file into a
:class:`~opscope.model.Trace` (Arrow tables), ``analyses`` turn a Trace into
tables, ``render`` shows tables. ``capture`` and ``cli`` sit at the edges.
"""

from opscope.errors import TraceError

__version__ = "0.1.0"


def load(path, *, cache: bool = True):
    """Open a trace file (any supported format) and return its :class:`~opscope.model.Trace`."""
    from opscope.ingest import open_trace

    return open_trace(path, use_cache=cache)


__all__ = ["TraceError", "load", "__version__"]
