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
import io
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from opscope.errors import TraceError
from opscope.ingest.numbers import int64
from opscope.ingest.source import ByteSource

#: csv's own limit is 128 KiB per field; templated kernel names stay far below this, hostile ones are cut by it.
_FIELD_LIMIT = 16 << 20
_INT64_LIMIT = Decimal(2**63)


@dataclass
class CsvTable:
    """A CSV file's header and rows (each as long as the header), and the counts of what was repaired."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    merged_names: int = 0
    dropped_short: int = 0
    truncated: bool = False
    truncated_reason: str = ""
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
            warn(f"file is truncated ({self.truncated_reason or 'compressed stream ends early'}); the complete rows "
                 "were read")
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
        self.source = ByteSource(path, text=True)
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
        table.truncated_reason = self.source.corrupt_reason
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
    """An integer field within int64; None when empty, not an integer or out of range (``0x...`` hex counts)."""
    return int64(text, whole=True)


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
    if t.isascii() and t.isdigit() and len(t) < 19:
        return int(t), 1
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None, 1
    if not d.is_finite() or d < 0:
        return None, 1
    exponent = d.as_tuple().exponent  # as written: "1.62068E+14" has 9, "1234500.0" has -1
    if not isinstance(exponent, int) or exponent > 18 or d >= _INT64_LIMIT:
        return None, 1  # beyond int64 ns (hostile or garbage): no time
    resolution = 10 ** exponent if exponent > 0 else 1
    return int(d.to_integral_value()), resolution


class ArrowTableStream:
    """A CSV file parsed by Arrow's CSV reader in blocks of rows (C++, ~10x Python's csv module), every column as
    text. Rows Arrow cannot place (a name with unquoted commas, a short or cut row) come to a handler and are
    repaired or dropped here as :class:`TableStream` does; the repaired rows come last, in one more batch."""

    def __init__(self, path: Path, text_column: int | None) -> None:
        from opscope.ingest.registry import read_head

        first = read_head(path).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")
        try:
            header = next(csv.reader([first]), [])
        except csv.Error as exc:
            raise TraceError(path, f"has a header that is not CSV ({exc})") from None
        if not any(h.strip() for h in header):
            raise TraceError(path, "holds no CSV header")
        self.table = CsvTable(path, [h.strip() for h in header], [])
        self.text_column = text_column
        self.source = ByteSource(path, text=True)
        self._file = _BlockFile(self.source.blocks())
        self._odd: list[str] = []

    def _invalid(self, row) -> str:
        self._odd.append(row.text)
        return "skip"

    def batches(self, block_size: int = 4 << 20):
        """Lists of string arrays (one per header column), a block of rows at a time."""
        import io as _io

        import pyarrow as pa
        import pyarrow.csv as pacsv

        table = self.table
        width = len(table.header)
        names = [f"c{i}" for i in range(width)]
        reader_file = _io.BufferedReader(self._file, buffer_size=1 << 20)
        try:
            reader = pacsv.open_csv(
                reader_file,
                read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=block_size),
                parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=self._invalid),
                convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.binary()),
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False))
            for batch in reader:
                if batch.num_rows:
                    yield [_text(batch.column(i)) for i in range(width)]
        except (pa.ArrowInvalid, OSError) as exc:
            if "Empty CSV file" in str(exc):
                return
            raise TraceError(table.path, f"is not readable as CSV ({str(exc).splitlines()[0]})") from None
        table.truncated = self.source.truncated
        table.truncated_reason = self.source.corrupt_reason
        table.no_final_newline = self._file.last not in (b"\n", b"")
        repaired = self._repair(width)
        if repaired:
            yield [_text(pa.array([r[i] for r in repaired], pa.binary())) for i in range(width)]

    def _repair(self, width: int) -> list[list[bytes]]:
        table = self.table
        text_column = self.text_column
        out: list[list[bytes]] = []
        for k, text in enumerate(self._odd):
            try:
                row = next(csv.reader([text]), [])
            except csv.Error:
                row = []  # a stray carriage return or NUL: no row
                table.dropped_short += 1
                continue
            if len(row) > width and text_column is not None:
                extra = len(row) - width
                row = row[:text_column] + [",".join(row[text_column:text_column + extra + 1])] + \
                    row[text_column + extra + 1:]
                out.append([c.encode("utf-8", "surrogatepass") for c in row])
                table.merged_names += 1
            elif not any(c.strip() for c in row):
                continue
            elif k == len(self._odd) - 1 and (table.no_final_newline or table.truncated) and \
                    self._file.tail.rstrip(b"\r\n").endswith(text.encode("utf-8", "surrogatepass").rstrip(b"\r\n")):
                table.cut_last_row = True
                table.no_final_newline = False  # said as a cut row instead
            else:
                table.dropped_short += 1
        return out


def _text(values):
    """Binary fields -> strings, invalid UTF-8 replaced (only for a column that has some)."""
    import pyarrow as pa

    try:
        return values.cast(pa.string())
    except (pa.ArrowInvalid, UnicodeError):
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()],
                        pa.string())


def _valid_utf8(blocks):
    """The blocks with invalid UTF-8 replaced by U+FFFD: Arrow hands a bad row to Python as text, and fails on it."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for block in blocks:
        if block.isascii() and not decoder.getstate()[0]:
            yield block  # the usual case (rocprof writes ASCII): nothing to repair, no copy
        else:
            yield decoder.decode(block).encode("utf-8")
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8")


class _BlockFile(io.RawIOBase):
    """A readable file over decompressed blocks (a :class:`ByteSource`), remembering how the content ends."""

    def __init__(self, blocks) -> None:
        super().__init__()
        self._blocks = _valid_utf8(blocks)
        self._view = memoryview(b"")
        self.last = b""
        self.tail = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not len(self._view):
            block = next(self._blocks, None)
            if block is None:
                return 0
            if block:
                self.last = block[-1:]
                self.tail = (self.tail + block[-(1 << 16):])[-(1 << 16):]
                self._view = memoryview(block)
        n = min(len(buffer), len(self._view))
        buffer[:n] = self._view[:n]
        self._view = self._view[n:]
        return n
