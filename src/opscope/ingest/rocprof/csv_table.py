"""The CSV files of the rocprof family, read leniently: header, rows, and what had to be repaired.

rocprof quotes kernel names in its dispatch tables but not always in its stats files: kokkos's
``results.stats.csv`` holds ``void f<A, B>(C, D),1,535519,535519,32.46`` with the name's commas unquoted. A row
with more fields than the header therefore has a cut name: the surplus fields are joined back into the one
text column (the name), so that the numbers on its right keep their columns. A row with fewer fields, or a
last line without its line end that is short, is dropped and counted. Imported only by the readers' ``read``.
"""

from __future__ import annotations

import codecs
import csv
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from opscope.errors import TraceError
from opscope.ingest.source import ByteSource

#: csv's own limit is 128 KiB per field; templated kernel names stay far below this, hostile ones are cut by it.
_FIELD_LIMIT = 16 << 20


@dataclass
class CsvTable:
    """A CSV file's header and rows (each as long as the header), and the counts of what was repaired."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    merged_names: int = 0
    dropped_short: int = 0
    truncated: bool = False
    cut_last_row: bool = False
    no_final_newline: bool = False
    problems: list[tuple[str, int]] = field(default_factory=list)

    def warn_into(self, warn) -> None:
        """Say what was repaired or dropped through ``warn(problem, count)`` (a TraceBuilder's)."""
        if self.merged_names:
            warn("rows with unquoted commas in their name (the surplus fields were joined back into the name)",
                 self.merged_names)
        if self.dropped_short:
            warn("rows with fewer fields than the header (dropped)", self.dropped_short)
        if self.cut_last_row:
            warn("the file ends inside its last row (truncated?): that row dropped")
        if self.truncated:
            warn("file is truncated (compressed stream ends early); the complete rows were read")
        elif self.no_final_newline:
            warn("the file does not end with a line end: its last row may be cut")


def read_table(path: Path, text_column: int | None) -> CsvTable:
    """The CSV at ``path`` (plain or gzip), all rows at once (small files: stats)."""
    stream = open_table(path, text_column)
    for chunk in stream.chunks():
        stream.table.rows.extend(chunk)
    return stream.table


class TableStream:
    """A CSV file read in chunks of rows: ``table`` has the header at once, the counts once ``chunks`` is done.

    ``text_column`` is the index of the one column that may hold unquoted commas (the name); without one, long
    rows are dropped like short ones.
    """

    def __init__(self, path: Path, text_column: int | None) -> None:
        self.source = ByteSource(path)
        self._lines = _lines(self.source.blocks(), self)
        self.ends_with_newline = True
        self.text_column = text_column
        self._reader = csv.reader(self._lines)
        header: list[str] | None = None
        try:
            for row in self._reader:
                if any(c.strip() for c in row):
                    header = [h.strip() for h in row]
                    break
        except csv.Error as exc:
            raise TraceError(path, f"is not readable as CSV ({exc})") from None
        if header is None:
            raise TraceError(path, "holds no CSV header")
        if header:
            header[0] = header[0].lstrip("\ufeff")
        self.table = CsvTable(path, header, [])

    def chunks(self, size: int = 100_000):
        table = self.table
        width = len(table.header)
        text_column = self.text_column
        chunk: list[list[str]] = []
        pending: list[str] | None = None  # a short row: dropped, or the cut last row once we know it is last
        try:
            for row in self._reader:
                if pending is not None:
                    table.dropped_short += 1
                    pending = None
                if len(row) == width:
                    chunk.append(row)
                elif len(row) > width and text_column is not None:
                    extra = len(row) - width
                    name = ",".join(row[text_column:text_column + extra + 1])
                    chunk.append(row[:text_column] + [name] + row[text_column + extra + 1:])
                    table.merged_names += 1
                elif any(c.strip() for c in row):
                    pending = row
                if len(chunk) >= size:
                    yield chunk
                    chunk = []
        except csv.Error as exc:
            raise TraceError(table.path, f"is not readable as CSV ({exc})") from None
        table.truncated = self.source.truncated
        table.no_final_newline = not self.ends_with_newline
        if pending is not None:
            if table.truncated or table.no_final_newline:
                table.cut_last_row = True
                table.no_final_newline = False  # said as a cut row instead
            else:
                table.dropped_short += 1
        if chunk:
            yield chunk


def open_table(path: Path, text_column: int | None) -> TableStream:
    return TableStream(path, text_column)


def _lines(blocks, stream: TableStream):
    """The decoded lines of the byte blocks, each with its line end (csv joins quoted multi-line fields)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    old = csv.field_size_limit()
    csv.field_size_limit(_FIELD_LIMIT)
    rest = ""
    last = ""
    try:
        for block in blocks:
            text = rest + decoder.decode(block)
            if not text:
                continue
            last = text[-1]
            # only "\n" ends a line (str.splitlines would also cut at \x0c or U+2028 inside a kernel name)
            lines = text.split("\n")
            rest = lines.pop()
            for line in lines:
                yield line + "\n"
        text = rest + decoder.decode(b"", final=True)
        if text:
            last = text[-1]
            yield text
        stream.ends_with_newline = last in ("\n", "")
    finally:
        csv.field_size_limit(old)


def key(column: str) -> str:
    """A column name as compared: lower case, letters and digits only (``Kernel_Name``, ``KernelName``,
    ``kernel-name`` are one column)."""
    return re.sub(r"[^a-z0-9]", "", column.lower())


def as_int(text: str) -> int | None:
    """An integer field; None when empty or not an integer (``0x...`` hex is an integer too)."""
    t = text.strip()
    if not t:
        return None
    try:
        return int(t)
    except ValueError:
        pass
    if t[:2].lower() == "0x":
        try:
            return int(t, 16)
        except ValueError:
            return None
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None
    if d.is_finite() and d == d.to_integral_value():
        return int(d)
    return None


def as_float(text: str) -> float | None:
    t = text.strip()
    if not t:
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def time_ns(text: str) -> tuple[int | None, int]:
    """A timestamp field -> (integer ns, resolution in ns). ``1.62068E+14`` (rocprof-compute on MI300 writes
    its timestamps with 6 significant digits) gives its value and a resolution of 10^9 ns: not a time to the ns."""
    t = text.strip()
    if t.isdigit():
        return int(t), 1
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None, 1
    if not d.is_finite() or d < 0:
        return None, 1
    exponent = d.as_tuple().exponent  # as written: "1.62068E+14" has 9, "1234500.0" has -1
    resolution = 10 ** exponent if isinstance(exponent, int) and exponent > 0 else 1
    return int(d.to_integral_value()), resolution
