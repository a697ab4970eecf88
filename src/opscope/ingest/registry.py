"""Which readers exist, and which one reads a given file: the ``Reader`` protocol and the registry.

A reader is an object with a ``name``, ``sniff(path, head)`` (does the file's first 64 KiB look like my
format?) and ``read(path, *, progress, keep_args)`` (the file as a Trace, before ``complete``). The
registry is the tuple :data:`READERS`, asked in order; adding a format is one module and one line there.
Reader objects must be cheap to import: the parser's own modules are imported inside ``read``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from opscope.errors import TraceError
from opscope.ingest.chrome import READER as CHROME_JSON
from opscope.ingest.migraphx import READER as MIGRAPHX_PERF
from opscope.ingest.migraphx import TRACE_EVAL_READER as MIGRAPHX_TRACE_EVAL
from opscope.ingest.nsys import READER as NSYS_SQLITE
from opscope.ingest.onnxruntime import READER as ONNXRUNTIME_JSON
from opscope.ingest.rocprof.compute_info import READER as ROCPROF_COMPUTE_INFO
from opscope.ingest.rocprof.stats_csv import READER as ROCPROF_STATS
from opscope.ingest.rocprof.trace_csv import READER as ROCPROF_CSV
from opscope.ingest.rocprof.v1_json import READER as ROCPROF_JSON
from opscope.ingest.rocprof.v3_json import READER as ROCPROF_V3_JSON
from opscope.ingest.source import ByteSource
from opscope.ingest.xplane import READER as XPLANE_PB
from opscope.model.trace import Trace

Progress = Callable[[int, int], None]
_HEAD = 64 << 10
#: What to say when no reader knows a file (the README's "Formats" table has the details).
KNOWN_FORMATS = ("opscope reads PyTorch/Kineto and Chrome trace JSON, ONNX Runtime profiles, XProf xplane.pb, "
                 "MIGraphX perf output, rocprof CSV/JSON, rocprofv3 JSON and Nsight Systems SQLite exports")


@runtime_checkable
class Reader(Protocol):
    """One source format."""

    #: Short unique name (``chrome_json``), as in ``metadata.format``.
    name: str

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when ``head`` (the first 64 KiB, decompressed) is this reader's format."""
        ...

    def read(self, path: Path, *, progress: Progress | None = None, keep_args: bool = True) -> Trace:
        """The file as a Trace (through :class:`opscope.model.builder.TraceBuilder`), not yet completed.

        ``progress(done_bytes, total_bytes)`` is called as the file is read; with ``keep_args=False`` the
        ``args`` table may be left empty. Raises :class:`~opscope.errors.TraceError` for a bad file.
        """
        ...


#: The readers, in the order they are asked; the first whose ``sniff`` says yes reads the file.
READERS: tuple[Reader, ...] = (
    MIGRAPHX_PERF,
    MIGRAPHX_TRACE_EVAL,
    NSYS_SQLITE,
    ROCPROF_V3_JSON,
    ONNXRUNTIME_JSON,
    ROCPROF_JSON,
    ROCPROF_CSV,
    ROCPROF_STATS,
    ROCPROF_COMPUTE_INFO,
    XPLANE_PB,
    CHROME_JSON,
)


class UnknownReaderError(LookupError):
    """A reader name that is not in the registry."""


def _check(readers: tuple[Reader, ...]) -> dict[str, Reader]:
    """The registry by name; a malformed entry or a repeated name fails at import, not on some file."""
    by_name: dict[str, Reader] = {}
    for reader in readers:
        if not isinstance(reader, Reader) or not isinstance(reader.name, str):
            raise TypeError(f"{reader!r} is not a Reader (needs name, sniff(path, head) and read(path, ...))")
        if reader.name in by_name:
            raise ValueError(f"two readers are named {reader.name!r}")
        by_name[reader.name] = reader
    return by_name


_BY_NAME = _check(READERS)


def reader_named(name: str) -> Reader:
    """The registered reader called ``name``; :class:`UnknownReaderError` names the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownReaderError(f"no reader named {name!r}; the readers are: {', '.join(_BY_NAME)}") from None


def read_head(path: Path) -> bytes:
    """The first 64 KiB of the file's content (decompressed if gzip)."""
    source = ByteSource(path, block_size=_HEAD)
    blocks = source.blocks()
    try:
        head = next(blocks, b"")
    finally:
        blocks.close()
    if not head and source.compressed and source.truncated:
        raise TraceError(path, "gzip stream ends before any data", "the file is truncated")
    return head[:_HEAD]


def pick_reader(path: Path) -> Reader:
    """The reader for ``path``, by content (not by file name); a TraceError when none reads it."""
    head = read_head(path)
    if not head.strip(b" \t\r\n\x0b\x0c\x00"):
        raise TraceError(path, "holds no data (only whitespace, NUL bytes or an empty gzip stream)")
    for reader in READERS:
        if reader.sniff(path, head):
            return reader
    if head.lstrip()[:1] in (b"{", b"["):
        # JSON of some other shape: the Chrome reader says precisely what is missing
        return reader_named("chrome_json")
    raise TraceError(path, "is not a trace format opscope reads", KNOWN_FORMATS)
