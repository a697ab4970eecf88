"""Kineto ``[memory]`` records as torch writes them, and a hand-built trace whose peaks are worked out by hand."""

from __future__ import annotations

from support.tracefiles import x

CUDA, CPU = (1, 0), (0, -1)


def m(ts: float, addr: int, nbytes: int, allocated: int, reserved: int = 0, device=CUDA, tid=1) -> dict:
    """A Kineto ``[memory]`` instant event as torch writes it."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
                     "Device Id": device[1], "Device Type": device[0], "Addr": addr}}


MiB = 1 << 20


def hand_trace() -> list[dict]:
    """One step [0, 1000) us on thread 1; 300 bytes of cuda:0 were allocated before the trace.

    ops: aten::empty [100, 200); aten::conv2d [300, 600) > aten::empty [310, 320); aten::relu [700, 800)
    cuda:0 records (total after each):
      50   +1000 @A (no op)           1300
      150  +4000 @B aten::empty       5300
      315  +2000 @C inner aten::empty 7300
      400  +8000 @D aten::conv2d     15300  <- peak; reserved grows 2 -> 4 MiB here
      500  -2000 @C                  13300
      750  -4000 @B                   9300
      760  +500  @E aten::relu        9800
      900  -300  @F (no alloc seen)   9500
    cpu records: 160 +64 @B aten::empty (64), 170 -64 @B (0): the same address as a cuda allocation.
    """
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("aten::empty", 100, 100),
        x("aten::conv2d", 300, 300),
        x("aten::empty", 310, 10),
        x("aten::relu", 700, 100),
        m(50, 0xA, 1000, 1300, 2 * MiB),
        m(150, 0xB, 4000, 5300, 2 * MiB),
        m(160, 0xB, 64, 64, device=CPU),
        m(170, 0xB, -64, 0, device=CPU),
        m(315, 0xC, 2000, 7300, 2 * MiB),
        m(400, 0xD, 8000, 15300, 4 * MiB),
        m(500, 0xC, -2000, 13300, 4 * MiB),
        m(750, 0xB, -4000, 9300, 4 * MiB),
        m(760, 0xE, 500, 9800, 4 * MiB),
        m(900, 0xF, -300, 9500, 4 * MiB),
    ]
