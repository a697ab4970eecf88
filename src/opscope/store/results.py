"""Results of analyses kept beside a cached trace's tables, for the next command on the same trace."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.store.files import crc32, write_ipc
from opscope.store.keys import CACHE_FORMAT

_RESULT_HEADER = 12  # payload size (8 bytes) and CRC-32 (4 bytes), little-endian
_fingerprint: str | None = None


def code_fingerprint() -> str:
    """A hash of opscope's own files (code and data) and pyarrow's version: a result computed by other code is
    never served. Hashed once per process (~180 small files: milliseconds)."""
    global _fingerprint
    if _fingerprint is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{CACHE_FORMAT}|{pa.__version__}".encode())
        for file in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                           and p.suffix != ".pyc"):
            h.update(str(file.relative_to(root)).encode() + b"\0")
            h.update(file.read_bytes())
        _fingerprint = h.hexdigest()
    return _fingerprint


class ResultStore:
    """What analyses computed on a cached trace, kept in its entry for the next command: Arrow tables (IPC,
    LZ4-compressed) and JSON values, one file each, in ``results/<code fingerprint>/`` and named by a hash of the
    entry's name (its trace's key) and the analysis' key.

    Written by the first command that computes a result, atomically (a temporary name renamed into place) and
    with its size and CRC-32 in front; a file that fails the check is removed and the result computed again. A
    result that cannot be written (read-only cache, full disk) is simply not kept. Writing removes the results of
    other code (another opscope version): they would never be read again by this one."""

    def __init__(self, entry: Path) -> None:
        self.root = entry / "results"
        self._entry = entry.name  # in every result's name: a result copied from another entry is never found
        self._pruned = False

    @property
    def dir(self) -> Path:
        return self.root / code_fingerprint()

    def _file(self, key: str) -> Path:
        return self.dir / hashlib.blake2b(f"{self._entry}|{key}".encode(), digest_size=16).hexdigest()

    def _prune(self) -> None:
        # once per store: the folders of other fingerprints (another version's results) go
        self._pruned = True
        mine = self.dir.name
        with contextlib.suppress(OSError):
            for other in self.root.iterdir():
                if other.name == mine:
                    continue
                if other.is_dir():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink(missing_ok=True)

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, the stored value)``, or ``(False, None)`` when there is none (or it was damaged: removed)."""
        file = self._file(key)
        try:
            data = file.read_bytes()
        except OSError:
            return False, None
        size, crc = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:_RESULT_HEADER], "little")
        payload = memoryview(data)[_RESULT_HEADER:]
        try:
            if len(payload) != size or crc32(payload) != crc:
                raise ValueError("checksum")
            if payload[:1] == b"{":
                return True, json.loads(bytes(payload))["v"]
            with pa.ipc.open_file(pa.py_buffer(bytes(payload))) as reader:
                return True, reader.read_all()
        except (ValueError, KeyError, TypeError, pa.ArrowException):
            with contextlib.suppress(OSError):
                file.unlink()  # damaged: computed again and rewritten
            return False, None

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` (a pyarrow Table, or a JSON value that survives a round trip: str, int, float, bool,
        None, lists and str-keyed dicts of them) for the next command."""
        try:
            if isinstance(value, pa.Table):
                sink = pa.BufferOutputStream()
                write_ipc(value, sink, "lz4")  # as the tables: read back fastest
                payload = sink.getvalue().to_pybytes()
            else:
                text = json.dumps({"v": value}, allow_nan=True)
                if json.loads(text)["v"] != value:  # a tuple, a non-str key: would come back different
                    return
                payload = text.encode()
        except (TypeError, ValueError, RecursionError, pa.ArrowException):
            return  # not a value this store can keep: computed again next time
        if not self._pruned:
            self._prune()
        file = self._file(key)
        try:
            self.root.mkdir(exist_ok=True)  # not parents: an entry removed meanwhile is not made again here
            self.dir.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.dir)
        except OSError:
            return  # a read-only or full cache: the result is not kept
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(len(payload).to_bytes(8, "little") + crc32(payload).to_bytes(4, "little"))
                fh.write(payload)
            os.replace(tmp, file)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
