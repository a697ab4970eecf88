"""Byte sources: stream a (possibly gzip-compressed) file as decompressed blocks.

Errors become :class:`TraceError` with one line naming the file; a gzip stream that ends early is
reported through ``truncated`` so the reader can keep what came before.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

from opscope.errors import TraceError
from opscope.threads import ahead

try:  # ISA-L's inflate is 2-2.5x zlib's (BENCHMARKS.md); zlib serves where no wheel exists
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel falls back
    _fast_zlib = None  # type: ignore[assignment]
_FAST_ERROR: type[BaseException] = getattr(_fast_zlib, "error", zlib.error)

GZIP_MAGIC = b"\x1f\x8b"
READ_SIZE = 256 << 10
#: Decompressed blocks a prefetching source holds ahead of its reader (each ``block_size``): enough to keep the
#: inflating thread busy while the reader parses, little enough to stay a few MB.
PREFETCH_BLOCKS = 4
# A gzip bomb (a small file of repeated events) would inflate to GBs of events held in memory. Real
# Kineto/Chrome traces compress 7-30x (measured on the shared traces), so inflating stops at 100x the
# compressed size, never below 64 MiB (the floor spares small files of unusual ratio; 64 MiB of the densest
# possible events costs ~0.8 GB to analyse); OPSCOPE_MAX_INFLATE_RATIO=R sets the cap to exactly R x the
# compressed size, 0 lifts it.
INFLATE_RATIO_ENV = "OPSCOPE_MAX_INFLATE_RATIO"
DEFAULT_INFLATE_RATIO = 100
INFLATE_FLOOR = 64 << 20
#: A run of NUL bytes this long cannot be in a text format (JSON, CSV, MIGraphX text): it is what a writer that
#: crashed leaves after what it wrote (a preallocated or zero-filled file), or a gzip bomb of zeros. A text source
#: (``text=True``) stops at the first such run: nothing after it is read, inflated or allocated for.
NUL_RUN = 4096
_NULS = bytes(NUL_RUN)


def read_settings() -> str:
    """The settings that change what a read gives (the inflate cap), as a cache entry's variant: a trace read
    with the cap is cached apart from one read with the cap lifted or changed."""
    return f"{INFLATE_RATIO_ENV}={os.environ[INFLATE_RATIO_ENV]}" if INFLATE_RATIO_ENV in os.environ else ""


def check_readable(path: Path) -> int:
    """Raise a TraceError unless ``path`` is a non-empty regular file; return its size."""
    if not path.exists():
        raise TraceError(path, "no such file", "check the path")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file", "pass one trace file")
    try:
        st = path.stat()
        # a FIFO, socket or device would block open()/read() forever or never end: refuse it up front
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(path, "is not a regular file (a pipe, socket or device)",
                             "save the trace to a file first")
        size = st.st_size
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}") from None
    if size == 0:
        raise TraceError(path, "is empty (0 bytes)", "the profiler may not have finished writing it")
    return size


def inflate_cap(path: Path, compressed_size: int) -> tuple[int | None, float]:
    """(the most decompressed bytes to read from a gzip file of ``compressed_size`` bytes or None, the ratio)."""
    text = os.environ.get(INFLATE_RATIO_ENV, "").strip()
    if not text:
        return max(INFLATE_FLOOR, DEFAULT_INFLATE_RATIO * compressed_size), DEFAULT_INFLATE_RATIO
    try:
        ratio = float(text)
    except ValueError:
        ratio = -1.0
    if not ratio >= 0 or ratio == float("inf"):
        raise TraceError(path, f"{INFLATE_RATIO_ENV}={text!r} is not a ratio",
                         "set it to a number such as 500, or 0 for no limit")
    return (None if ratio == 0 else int(ratio * compressed_size)), ratio


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


class ByteSource:
    """Iterate over the decompressed content of a file in blocks.

    After iteration, ``truncated`` says whether a gzip stream ended before its end marker and
    ``bytes_in`` how many compressed bytes were consumed (for progress bars).
    """

    def __init__(self, path: Path, block_size: int = 2 << 20, prefetch: bool = False, text: bool = False) -> None:
        self.path = path
        self.text = text
        self.block_size = block_size
        # Inflate on a thread ahead of the reader: zlib and ISA-L release the GIL, so on two cores decompression
        # runs beside the parsing instead of before it. Only for whole-file reads (a sniff reads one block).
        self.prefetch = prefetch
        self.size = check_readable(path)
        self.compressed = is_gzip(path)
        self.truncated = False
        self.bytes_in = 0
        self.max_inflate, self.inflate_ratio = inflate_cap(path, self.size) if self.compressed else (None, 0.0)
        self.inflated = 0

    def blocks(self) -> Generator[bytes, None, None]:
        if self.compressed:
            inflate = self._fast_gzip_blocks() if _fast_zlib is not None else self._gzip_blocks()
            if self.text:
                inflate = self._until_nul_run(inflate)
            return ahead(inflate, PREFETCH_BLOCKS, "opscope-inflate") if self.prefetch else inflate
        return self._until_nul_run(self._plain_blocks()) if self.text else self._plain_blocks()

    def _until_nul_run(self, blocks: Generator[bytes, None, None]) -> Generator[bytes, None, None]:
        """``blocks`` up to the first run of :data:`NUL_RUN` NUL bytes (one split by a block boundary is found in the
        next block when it goes on): a text format's content has ended there."""
        given = 0
        try:
            for block in blocks:
                at = block.find(_NULS)
                if at < 0:
                    given += len(block)
                    yield block
                    continue
                if at:
                    yield block[:at]
                self.truncated = True
                self.corrupt_reason = (f"a run of NUL bytes from byte {given + at:,} of the content, as a writer that "
                                       "never finished leaves; nothing after it was read")
                return
        finally:
            blocks.close()

    def _plain_blocks(self) -> Generator[bytes, None, None]:
        with open(self.path, "rb") as fh:
            while block := fh.read(self.block_size):
                self.bytes_in += len(block)
                yield block

    def _fast_gzip_blocks(self) -> Generator[bytes, None, None]:
        """ISA-L inflate of an intact file. At the first sign of damage (an error, or a stream that ends early) the
        file is inflated again by :meth:`_gzip_blocks`, which salvages exactly as before, from where this stopped."""
        assert _fast_zlib is not None
        decomp = _fast_zlib.decompressobj(16 + zlib.MAX_WBITS)
        with open(self.path, "rb") as fh:
            while True:
                raw = fh.read(READ_SIZE)
                if not raw:
                    break
                self.bytes_in += len(raw)
                while raw:
                    try:
                        out = decomp.decompress(raw, self.block_size)
                    except _FAST_ERROR:
                        yield from self._gzip_blocks(skip=self.inflated)
                        return
                    if out:
                        out, stop = self._within_cap(out)
                        yield out
                        if stop:
                            return
                    raw, decomp = _rest_of_input(decomp, _fast_zlib.decompressobj)
        if not decomp.eof:
            yield from self._gzip_blocks(skip=self.inflated)

    def _gzip_blocks(self, skip: int = 0) -> Generator[bytes, None, None]:
        """zlib inflate with salvage; the first ``skip`` decompressed bytes (already given) are not given again."""
        for block in self._zlib_blocks(produced=skip > 0):
            if skip:
                if len(block) <= skip:
                    skip -= len(block)
                    continue
                block, skip = block[skip:], 0
            yield block

    def _zlib_blocks(self, produced: bool) -> Generator[bytes, None, None]:
        # wbits=16+MAX_WBITS: gzip framing. Output is bounded per call (max_length) because trace
        # JSON compresses ~20x: one compressed read could otherwise inflate to hundreds of MB.
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.bytes_in = 0
        self.inflated = 0
        with open(self.path, "rb") as fh:
            while True:
                raw = fh.read(READ_SIZE)
                if not raw:
                    break
                self.bytes_in += len(raw)
                while raw:
                    saved = decomp.copy()
                    try:
                        out = decomp.decompress(raw, self.block_size)
                    except zlib.error as exc:
                        # A failing call returns nothing, yet all it inflated before the damage is
                        # good (a bad CRC trailer fails only after the last byte of data).
                        good = _inflate_until_error(saved, raw)
                        if good:
                            produced = True
                            yield good
                        if produced:
                            # Corruption after good data: keep what came before and say so.
                            self.truncated = True
                            self.corrupt_reason = f"corrupt gzip data ({exc})"
                            return
                        raise TraceError(self.path, f"corrupt gzip data ({exc})",
                                         "the file is damaged; re-copy or re-export it") from None
                    if out:
                        produced = True
                        out, stop = self._within_cap(out)
                        yield out
                        if stop:
                            return
                    raw, decomp = _rest_of_input(decomp, zlib.decompressobj)
        if not decomp.eof:
            self.truncated = True
            tail = decomp.flush()
            if tail:
                yield tail

    corrupt_reason: str = ""

    def _within_cap(self, out: bytes) -> tuple[bytes, bool]:
        """``out`` counted against the inflate cap: (the part that may be handed on, whether inflating stops)."""
        self.inflated += len(out)
        if self.max_inflate is None or self.inflated <= self.max_inflate:
            return out, False
        self._stop_inflating()
        return out[: len(out) - (self.inflated - self.max_inflate)], True

    def _stop_inflating(self) -> None:
        assert self.max_inflate is not None
        self.truncated = True
        self.corrupt_reason = (
            f"reading stopped at {self.max_inflate / (1 << 20):.0f} MiB decompressed, {self.inflate_ratio:g}x its "
            f"compressed size, as a guard against gzip bombs; to read it all set {INFLATE_RATIO_ENV}=0")


def _rest_of_input(decomp, new_member: Callable[[int], Any]) -> tuple[bytes, Any]:
    """(the compressed input still to feed, the decompressor to feed it to) after a ``decompress`` call of either
    inflater: the rest of a block cut by the output bound, else the next gzip member (zero padding ends the file).

    eof first: at a member's end zlib leaves the rest of the input in both ``unconsumed_tail`` and ``unused_data``,
    and feeding the tail back to the finished member loops forever (multi-member gzip)."""
    if decomp.eof:
        rest = decomp.unused_data
        return (rest, new_member(16 + zlib.MAX_WBITS)) if rest.lstrip(b"\x00") else (b"", decomp)
    return decomp.unconsumed_tail, decomp


def _inflate_until_error(decomp, raw: bytes) -> bytes:
    """What ``decomp`` (the state before ``raw``) inflates from ``raw`` up to the point where it fails.

    Feeds ``raw`` in small pieces, and the piece that fails byte by byte, so that nothing inflated
    before the damage is lost with the failing call's output.
    """
    out: list[bytes] = []
    step = 4096
    i = 0
    while i < len(raw) and not decomp.eof:
        piece = raw[i:i + step]
        before = decomp.copy() if step > 1 else None
        try:
            out.append(decomp.decompress(piece))
        except zlib.error:
            if before is None:
                break
            decomp, step = before, 1
            continue
        i += len(piece)
    return b"".join(out)


def decoded_lines(blocks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a text read block by block (a line may span blocks; bytes that are not UTF-8 replaced), one at a
    time, without their newline."""
    pending: list[bytes] = []
    for block in blocks:
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            pending.append(block[start:end])
            yield b"".join(pending).decode("utf-8", "replace")
            pending = []
            start = end + 1
        if start < len(block):
            pending.append(block[start:])
    if pending:
        yield b"".join(pending).decode("utf-8", "replace")
