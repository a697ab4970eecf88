"""Time limits in the suite: each one guards against a hang, none measures speed.

A busy two-core machine (the suite's own workers, a CPU hog beside them) runs a command several times slower than
an idle one: a report that takes 16 s idle took over 60 s there. So every wall-clock limit a test sets is a base
that an idle machine stays far under, multiplied by ``$OPSCOPE_TEST_TIME_FACTOR`` (default 3). Raise the factor on a
slower or busier machine; nothing else changes. Limits on work done (a command's CPU seconds, its memory) are not
scaled: they do not depend on the load.
"""

from __future__ import annotations

import os

_DEFAULT_FACTOR = 3.0


def factor() -> float:
    """The multiplier of every wall-clock limit ($OPSCOPE_TEST_TIME_FACTOR; a value that is not a positive number
    is an error, not a silent default)."""
    text = os.environ.get("OPSCOPE_TEST_TIME_FACTOR", "").strip()
    if not text:
        return _DEFAULT_FACTOR
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"OPSCOPE_TEST_TIME_FACTOR={text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"OPSCOPE_TEST_TIME_FACTOR={text!r} must be above 0")
    return value


def limit(seconds: float) -> float:
    """A wall-clock limit of ``seconds`` on an idle machine, scaled for this one."""
    return seconds * factor()
