"""The stream's cut candidates: found backwards from the chunk's limit, they must be exactly those a forward regex
search of the window finds (the last few, last first), whatever the buffer holds."""

from __future__ import annotations

import random

import pytest

from opscope.ingest.chrome.json_stream import _BOUNDARY, _last_boundaries


def _forward(buf: bytes, lo: int, limit: int, end: int, count: int) -> list[int]:
    starts = [m.start() for m in _BOUNDARY.finditer(buf, lo, end) if m.start() < limit]
    return list(reversed(starts[-count:]))


@pytest.mark.parametrize("seed", range(20))
def test_backward_candidates_are_the_forward_ones(seed):
    rng = random.Random(seed)
    pieces = [b"}", b",", b"{", b"]", b" ", b"\n", b'"x},{"', b"}, {", b"} ]", b"a", b"}},{", b"},\n  {"]
    buf = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 400)))
    for _ in range(30):
        lo = rng.randrange(0, len(buf) + 1)
        limit = rng.randrange(lo, len(buf) + 1)
        end = min(len(buf), limit + rng.choice([0, 3, 64]))
        count = rng.choice([1, 2, 6])
        assert _last_boundaries(buf, lo, limit, end, count) == _forward(buf, lo, limit, end, count)
