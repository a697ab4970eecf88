"""What every renderer is: a class with a name, a file extension and a binary flag, and a ``render`` method that
lays out one kind of document (a :class:`~opscope.report.Report`, a report page, an export plan, a graph).

Renderers never compute: every number they show is in the document the computing layers (analyses, advise,
diff, and ``opscope.compose`` for pages, exports and graphs) built. ``opscope.render.RENDERERS`` lists where each
class is; a command imports only the renderer it picks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Generic, TypeVar

from opscope.report import Report

if TYPE_CHECKING:
    from rich.console import Console

D = TypeVar("D")
O = TypeVar("O")  # noqa: E741  where the output goes: the terminal's consoles or a file's stream
R = TypeVar("R", bound="Renderer")


class Renderer(ABC, Generic[D, O]):
    """One output format of one kind of document."""

    #: what ``--format`` (or ``--to``) says to pick it; unique among the renderers of its kind
    name: ClassVar[str]
    #: the usual ending of a file in this format, with its dot (".json"); "" when it is shown, never written
    extension: ClassVar[str]
    #: the output is bytes that only a file can hold, not text a terminal or pipe can show
    binary: ClassVar[bool] = False

    #: the kind of document it shows: its group in the registry (``opscope.render.RENDERERS``)
    kind: ClassVar[str]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The names of the registered renderers of this kind (``ReportRenderer.names()``: the --format
        choices), in registry order; no renderer is imported to say them."""
        from opscope.render import RENDERERS

        return tuple(RENDERERS.get(cls.kind, ()))

    @classmethod
    def named(cls: type[R], name: str) -> type[R]:
        """The registered renderer of this kind called ``name``, imported now; a name not registered is a
        programming error (the CLI checks what a user types against :meth:`names`), said loudly."""
        from opscope.render import RENDERERS, load

        where = RENDERERS.get(cls.kind, {}).get(name)
        if where is None:
            raise ValueError(f"no renderer named {name!r} among the {cls.__name__}s; registered: "
                             f"{', '.join(cls.names())}")
        found = load(where)
        if not issubclass(found, cls) or found.name != name:
            raise TypeError(f"{where} is registered as the {cls.__name__} {name!r} but is not one")
        return found

    def require(self) -> None:
        """Raise a one-line UsageError, before any work, when something this renderer needs is not installed."""

    @abstractmethod
    def render(self, document: D, out: O) -> None:
        """Lay ``document`` out in this format and write it to ``out``."""


class Terminal:
    """Where a report goes: ``out`` gets the document (the terminal, or a pipe to a program), ``err`` the lines for
    the person running the command (notes, the headline beside a data document)."""

    # a plain class, not a dataclass: every command imports this module, and a dataclass costs ~0.5 ms to make
    __slots__ = ("err", "out")

    def __init__(self, out: Console, err: Console) -> None:
        self.out = out
        self.err = err


class ReportRenderer(Renderer[Report, Terminal]):
    """Shows a command's :class:`~opscope.report.Report`: the formats ``--format`` offers."""

    kind = "report"


class FileRenderer(Renderer[D, BinaryIO]):
    """Writes a document into a file's byte stream (``opscope.outfile.write_file`` gives it the stream; text
    formats write UTF-8)."""
