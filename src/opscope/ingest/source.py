"""Byte sources: stream a (possibly gzip-compressed) file as decompressed blocks.

Errors become :class:`TraceError` with one line naming the file; a gzip stream that ends early is
reported through ``truncated`` so the reader can keep what came before.
"""

from __future__ import annotations

import stat
import zlib
from collections.abc import Generator
from pathlib import Path

from opscope.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
READ_SIZE = 256 << 10


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


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


class ByteSource:
    """Iterate over the decompressed content of a file in blocks.

    After iteration, ``truncated`` says whether a gzip stream ended before its end marker and
    ``bytes_in`` how many compressed bytes were consumed (for progress bars).
    """

    def __init__(self, path: Path, block_size: int = 2 << 20) -> None:
        self.path = path
        self.block_size = block_size
        self.size = check_readable(path)
        self.compressed = is_gzip(path)
        self.truncated = False
        self.bytes_in = 0

    def blocks(self) -> Generator[bytes, None, None]:
        if self.compressed:
            yield from self._gzip_blocks()
        else:
            with open(self.path, "rb") as fh:
                while block := fh.read(self.block_size):
                    self.bytes_in += len(block)
                    yield block

    def _gzip_blocks(self) -> Generator[bytes, None, None]:
        # wbits=16+MAX_WBITS: gzip framing. Output is bounded per call (max_length) because trace
        # JSON compresses ~20x: one compressed read could otherwise inflate to hundreds of MB.
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        produced = False
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
                        yield out
                    if decomp.unconsumed_tail:
                        raw = decomp.unconsumed_tail
                    elif decomp.eof:
                        raw = decomp.unused_data
                        if raw.lstrip(b"\x00"):
                            decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)  # next gzip member
                        else:
                            raw = b""
                    else:
                        raw = b""
        if not decomp.eof:
            self.truncated = True
            tail = decomp.flush()
            if tail:
                yield tail

    corrupt_reason: str = ""


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
