"""The Nsight Systems SQLite export reader (``nsys export --type sqlite``), as registered.

Sniffing is the SQLite header only (this is the one SQLite format opscope reads); :meth:`NsysSqliteReader.read`
then checks for nsys's tables and refuses any other database in one line. The file is opened read-only
(``mode=ro`` URI) and never written. Columns are picked with ``PRAGMA table_info`` because the schema moves
between nsys versions (2.x exports of 2022, 3.x of 2024 are what the tests hold).

What becomes what:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> ``kernel`` (device = deviceId, stream = streamId, name from ``StringIds``
  via demangledName, else shortName, else mangledName; grid, block, registers and shared memory in the args
  under Kineto's keys); ``..._MEMCPY`` -> ``memcpy`` named like Kineto (``Memcpy HtoD (Pageable -> Device)``);
  ``..._MEMSET`` -> ``memset``; ``..._SYNCHRONIZATION`` -> ``sync`` (``Event Sync``, ``Stream Sync``...).
  Device rows get Kineto's pid = device, tid = stream.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime``, named as recorded (``cudaLaunchKernel_v7000``: the version
  suffix stays; the launch/sync name patterns of the analyses match names with it). Rows of eventClass 67
  (CUDA backtraces, copies of calls nested around the real row) are skipped and counted.
- ``correlationId`` -> ``correlation``; the ids are unique per process, so where the export holds several
  processes the value is ``pid << 32 | correlationId``.
- ``NVTX_EVENTS`` push/pop and start/end ranges -> ``user_annotation`` (inline text or ``textId``), marks ->
  ``marker``; ranges named like steps (:data:`STEP_PATTERNS`) also become the trace's steps.
- globalTid -> pid = gtid >> 24 & 0xFFFFFF, tid = gtid & 0xFFFFFF; ``ThreadNames`` (and NVTX thread names) ->
  thread_names; ``PROCESSES`` -> process_names; ``TARGET_INFO_GPU`` -> device_properties (Kineto's keys).
- Times are the export's integer ns (relative to the session start unless the export was normalised
  otherwise); the session's UTC start is ``metadata.session_start_utc_ns``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from opscope.model.trace import Trace

_MAGIC = b"SQLite format 3\x00"
#: NVTX texts that mark steps, tried in this order; the first family with any match gives the steps.
STEP_PATTERNS = (
    re.compile(r"^ProfilerStep#(\d+)$"),
    re.compile(r"^(?i:step)[ _#:-]*(\d+)$"),
    re.compile(r"^(?i:iteration|iter)[ _#:-]*(\d+)$"),
)


class NsysSqliteReader:
    """An Nsight Systems export as SQLite (``.sqlite``)."""

    name = "nsys_sqlite"

    def sniff(self, path: Path, head: bytes) -> bool:
        """True for any SQLite database: :meth:`read` says so in one line when it is not an nsys export."""
        return head.startswith(_MAGIC)

    def read(self, path: Path, *, progress: Any = None, keep_args: bool = True) -> Trace:
        from opscope.ingest import nsys_read  # sqlite3 and the mapping: only when a file is read

        return nsys_read.read(path, progress=progress, keep_args=keep_args)


READER = NsysSqliteReader()
