"""``opscope export``'s writers: an export :class:`~opscope.render.export.plan.Plan` (built by
``opscope.compose.export``) written as a trace that chrome://tracing and the Perfetto UI open.

One renderer per format: :mod:`.chrome` (trace-event JSON that opscope reads back into the same model) and
:mod:`.perfetto` (native protobuf, needs the ``view`` extra); each module is imported when its renderer writes.
"""

from __future__ import annotations

from typing import BinaryIO, ClassVar

from opscope.render.base import FileRenderer
from opscope.render.export.plan import JobPlan, Plan


class ExportRenderer(FileRenderer[Plan | JobPlan]):
    """A timeline file of an export plan: the formats ``opscope export --to`` offers; gzip-compressed when ``gzip``
    (a name ending in .gz) and the format allows it."""

    kind = "export"
    #: the format may be written gzip-compressed (a reader of it inflates it)
    gzip_ok: ClassVar[bool] = False

    def __init__(self, gzip: bool = False) -> None:
        self.gzip = gzip and self.gzip_ok


class ChromeRenderer(ExportRenderer):
    """Chrome trace-event JSON."""

    name = "chrome"
    extension = ".json"
    binary = False
    gzip_ok = True

    def render(self, plan: Plan | JobPlan, out: BinaryIO) -> None:
        from opscope.render.export.chrome import write

        if not isinstance(plan, Plan):
            raise TypeError("Chrome JSON holds one trace: a job exports to Perfetto")
        write(plan, out, self.gzip)


class PerfettoRenderer(ExportRenderer):
    """Perfetto's native protobuf trace."""

    name = "perfetto"
    extension = ".pftrace"
    binary = True

    def require(self) -> None:
        from opscope.render.export.perfetto import require

        require()

    def render(self, plan: Plan | JobPlan, out: BinaryIO) -> None:
        from opscope.render.export.perfetto import write

        write(plan, out)


__all__ = ["ChromeRenderer", "ExportRenderer", "PerfettoRenderer"]
