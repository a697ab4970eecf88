"""Errors that reach the user as one line: which file, what is wrong, what to do."""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """A trace file that cannot be read. ``str()`` is the one-line message for the user."""

    def __init__(self, path: str | Path | None, problem: str, hint: str = "") -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.hint = hint
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = f"{self.path}: " if self.path else ""
        tail = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.problem}{tail}"


class UsageError(Exception):
    """A command used wrongly (bad option value); the message says what to change."""
