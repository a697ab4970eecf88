"""The one in-memory shape every reader produces and every analysis reads."""

from opscope.model.schema import EVENT_KINDS, GPU_KINDS, HOST_KINDS
from opscope.model.trace import Trace

__all__ = ["EVENT_KINDS", "GPU_KINDS", "HOST_KINDS", "Trace"]
