"""Capture: run PyTorch code under the profiler. Needs the ``torch`` extra; imported lazily."""

from __future__ import annotations

from typing import Any


def require_torch() -> Any:
    """The ``torch`` module, or an ImportError that says how to install it (capture's one torch gate)."""
    try:
        import torch
    except ImportError:
        raise ImportError(
            "this needs PyTorch: pip install 'opscope[torch]' (CPU build: pip install torch==2.13.0)"
        ) from None
    return torch
