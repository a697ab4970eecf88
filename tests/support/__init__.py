"""Helpers shared by the tests (imported as ``support``: pytest puts ``tests/`` on the import path)."""

from support.builder import make_trace, row

__all__ = ["make_trace", "row"]
