"""The XProf XSpace reader (``*.xplane.pb`` of TensorFlow 2, JAX and PyTorch/XLA), as registered.

This module stays light: sniffing looks at the first bytes only; protobuf and the mapping are imported by
:meth:`XPlaneReader.read`.
"""

from __future__ import annotations

from pathlib import Path

from opscope.model.trace import Trace

#: What the first plane's name starts with in every XSpace we know (the host, a device, the run's environment).
PLANE_NAMES = (b"/host:", b"/device:", b"Task Environment")


def varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    """The base-128 varint at ``at`` and the offset after it; (-1, at) when it is cut off or longer than 10 bytes.

    Only the sniff and the recovery of a damaged file's whole planes frame records by hand; every plane is
    decoded by protobuf itself."""
    value = shift = 0
    for i in range(at, min(at + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    return -1, at


def looks_like_xspace(head: bytes) -> bool:
    """``0a <len> [08 <id>] 12 <len> "/host:"|"/device:"|"Task Environment"``: an XSpace's first plane (field 1),
    optionally its id (field 1, written first when it is not 0), then its name (field 2)."""
    if head[:1] != b"\x0a":
        return False
    size, at = varint(head, 1)
    if size <= 0:
        return False
    if head[at:at + 1] == b"\x08":
        plane_id, at = varint(head, at + 1)
        if plane_id < 0:
            return False
    if head[at:at + 1] != b"\x12":
        return False
    length, at = varint(head, at + 1)
    if length <= 0 or length > size:
        return False
    return head[at:at + length].startswith(PLANE_NAMES)


class XPlaneReader:
    """XProf's XSpace protobuf, plain or gzip."""

    name = "xplane_pb"

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when the head is an XSpace's first plane (by content, not the file name)."""
        return looks_like_xspace(head)

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.xplane import reader  # protobuf and the mapping: only when a file is parsed

        return reader.read(path, progress=progress, keep_args=keep_args)


READER = XPlaneReader()
