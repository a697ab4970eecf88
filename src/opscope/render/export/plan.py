"""What one export writes, as plain data: the kept events of the model, the launch links among them, counters and
memory records, the track layout, and opscope's own marks (steps, findings). ``opscope.compose.export`` builds it;
the Chrome and Perfetto writers only lay it out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opscope.model.trace import captured_copies

if TYPE_CHECKING:
    import pyarrow as pa

    from opscope.model.trace import Trace


@dataclass(frozen=True)
class Mark:
    """One slice on an opscope track: ``track`` is ``steps`` or ``findings``."""

    track: str
    name: str
    ts_ns: int
    dur_ns: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Layout:
    """Tracks by the model's ``pid``/``tid`` text: integer process and thread ids, their names and their order
    (host processes first, then devices by number, opscope's own tracks on top)."""

    pid: dict[str, int] = field(default_factory=dict)
    tid: dict[tuple[str, str], int] = field(default_factory=dict)
    process_name: dict[str, str] = field(default_factory=dict)
    process_label: dict[str, str] = field(default_factory=dict)
    process_sort: dict[str, int] = field(default_factory=dict)
    thread_name: dict[tuple[str, str], str] = field(default_factory=dict)
    #: each thread's name as a track shows it alone (a device stream with its device: "GPU 0 stream 7")
    track_name: dict[tuple[str, str], str] = field(default_factory=dict)
    thread_sort: dict[tuple[str, str], int] = field(default_factory=dict)
    device_of: dict[str, int] = field(default_factory=dict)  # processes that hold device work: their device
    opscope_pid: int = 0

    def is_device(self, pid: str) -> bool:
        return pid in self.device_of


@dataclass
class Plan:
    """Everything one export writes, chosen before any byte is written."""

    trace: Trace
    #: row numbers (== event_id) of the kept events, in time order
    rows: pa.Array
    #: launch -> device work links (``launch_row``, ``device_row``) whose both ends are kept
    links: pa.Table
    counters: pa.Table
    memory: pa.Table
    layout: Layout
    marks: list[Mark] = field(default_factory=list)
    #: each memory record's device (``device_type``, ``device_id``) as the memory analysis names it (cuda:0)
    device_names: dict[tuple[int | None, int | None], str] = field(default_factory=dict)
    #: the process (a ``layout`` key) whose tracks hold each device's memory: the device's own; a device without
    #: one of its own (the CPU) is absent, and its memory goes under the process that recorded it
    memory_process: dict[tuple[int | None, int | None], str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """The trace's events (not the copies of a graph capture's ops it may hold)."""
        return self.trace.num_events - captured_copies(self.trace)


@dataclass
class RankPlan:
    """One rank of a job export: its clock offset from the reference rank (its times minus this are on the
    reference's clock), its earliest time, and how to build its plan (called when it is written: one rank held at
    a time)."""

    rank: int
    offset_ns: int
    aligned: bool
    low_ns: int | None
    build: Callable[[], Plan]


@dataclass
class JobPlan:
    """A job's ranks written into one timeline, each moved onto the reference rank's clock."""

    ranks: list[RankPlan]
    #: the rank whose clock the timeline is on (None: no rank could be aligned; each keeps its own)
    reference: int | None
    #: the events kept and in all, over the ranks written (filled in as they are written)
    kept: int = 0
    total: int = 0
