"""Remedies applied to a program without editing it: the settings ``advise --measure`` re-runs a recorded program
with (``opscope.capture.rerun``).

The parent puts them in the runner's configuration (the ``changes`` key of ``$OPSCOPE_RUNNER``, which the runner
removes from the environment before the program starts, so neither the program nor its children see it); the
runner applies them in the child, after torch is imported and before the program runs (:func:`apply`). Nothing here
is active in a plain ``opscope record``: only the re-runs of ``advise --measure`` set the key.

What each setting does in the child:

- ``num_workers`` (and ``persistent_workers``, ``pin_memory``): every ``torch.utils.data.DataLoader`` the program
  makes gets these arguments in place of its own (``DataLoader.__init__`` wrapped; positional and keyword arguments
  alike);
- ``intra_op_threads``: torch's intra-op thread count, set before the program starts (with ``OMP_NUM_THREADS`` and
  ``MKL_NUM_THREADS``, which the parent sets) and kept: the program's own ``torch.set_num_threads`` calls are
  ignored (said once on stderr);
- ``skip_sync_in``: inside the ``record_function`` region of that name (``torch.profiler.record_function`` or
  ``torch.autograd.profiler.record_function``, on the thread that entered it), ``torch.cuda.synchronize()`` and the
  ``synchronize()`` of CUDA streams and events return at once. Syncs that produce a value (``.item()``, ``.cpu()``)
  are not skipped: the program needs their value.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

from opscope.errors import UsageError

#: A setting's accepted type, for the checks of :meth:`ProgramChanges.from_dict` (bool before int: a bool is an int).
_TYPES: dict[str, type] = {"num_workers": int, "persistent_workers": bool, "pin_memory": bool, "intra_op_threads": int,
                           "skip_sync_in": str}
#: The DataLoader arguments a change sets.
LOADER_SETTINGS = ("num_workers", "persistent_workers", "pin_memory")


@dataclass(frozen=True)
class ProgramChanges:
    """What a re-run changes in the program (None: left as the program has it)."""

    num_workers: int | None = None
    persistent_workers: bool | None = None
    pin_memory: bool | None = None
    intra_op_threads: int | None = None
    skip_sync_in: str | None = None  # a record_function region's name

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ProgramChanges:
        """From a finding's ``program_change`` (or the runner's configuration): known keys of the right type only."""
        out: dict[str, Any] = {}
        for key, value in values.items():
            want = _TYPES.get(key)
            if want is None:
                raise UsageError(f"unknown program change {key!r}; the changes are {', '.join(_TYPES)}")
            if value is None:
                continue
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise UsageError(f"program change {key}: expected {want.__name__}, got {value!r}")
            if isinstance(value, int) and not 0 <= value <= 1024:
                raise UsageError(f"program change {key}: {value} is out of range (0 to 1024)")
            out[key] = value
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        """The settings made, without those left alone."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def merged(self, other: ProgramChanges) -> ProgramChanges:
        """These settings, with ``other``'s where it makes one."""
        return ProgramChanges(**{**self.to_dict(), **other.to_dict()})

    def describe(self) -> str:
        """The settings in words: ``DataLoader(num_workers=2, persistent_workers=True)``..."""
        parts = []
        loader = [f"{k}={getattr(self, k)}" for k in LOADER_SETTINGS if getattr(self, k) is not None]
        if loader:
            parts.append(f"DataLoader({', '.join(loader)})")
        if self.intra_op_threads is not None:
            parts.append(f"torch.set_num_threads({self.intra_op_threads})")
        if self.skip_sync_in is not None:
            parts.append(f"no synchronize() inside record_function({self.skip_sync_in!r})")
        return ", ".join(parts) or "no change"

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


def _say(line: str) -> None:
    from opscope.text import one_line

    sys.stderr.write(f"opscope: {one_line(line)}\n")
    sys.stderr.flush()


def apply(changes: ProgramChanges, torch: Any) -> list[str]:
    """Apply ``changes`` to ``torch`` (the module, or anything shaped like it) in the running process; what was
    patched, one line each."""
    done: list[str] = []
    loader_args = {k: getattr(changes, k) for k in LOADER_SETTINGS if getattr(changes, k) is not None}
    if loader_args:
        patch_dataloader(torch.utils.data.DataLoader, loader_args)
        done.append(f"DataLoader arguments {loader_args}")
    if changes.intra_op_threads is not None:
        hold_threads(torch, changes.intra_op_threads)
        done.append(f"intra-op threads held at {changes.intra_op_threads}")
    if changes.skip_sync_in is not None:
        skip_syncs_in(torch, changes.skip_sync_in)
        done.append(f"synchronize() skipped inside {changes.skip_sync_in!r}")
    return done


def patch_dataloader(cls: type, arguments: dict[str, Any]) -> None:
    """Make ``cls.__init__`` (a DataLoader class) take ``arguments`` in place of the caller's own."""
    original = cls.__init__  # type: ignore[misc]
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - the wrapped method's own name
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments.update(arguments)
        if bound.arguments.get("num_workers", 0) == 0:  # torch refuses these without workers
            bound.arguments.pop("persistent_workers", None)
            bound.arguments.pop("prefetch_factor", None)
        original(*bound.args, **bound.kwargs)

    __init__._opscope_changed = arguments  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def hold_threads(torch: Any, count: int) -> None:
    """Set torch's intra-op threads to ``count`` and keep them there: later ``torch.set_num_threads`` calls of the
    program are ignored (said once)."""
    original = torch.set_num_threads
    original(count)
    told: list[bool] = []

    @functools.wraps(original)
    def set_num_threads(n: int) -> None:
        if n != count and not told:
            told.append(True)
            _say(f"the program's torch.set_num_threads({n}) is ignored: this run measures {count} intra-op threads")

    set_num_threads._opscope_held = count  # type: ignore[attr-defined]
    torch.set_num_threads = set_num_threads


class _Regions(threading.local):
    """The record_function regions each thread is in, innermost last."""

    def __init__(self) -> None:
        self.names: list[str] = []


def skip_syncs_in(torch: Any, region: str) -> None:
    """Make the explicit synchronize calls inside ``record_function(region)`` return at once."""
    regions = _Regions()
    rf = torch.autograd.profiler.record_function
    enter, exit_ = rf.__enter__, rf.__exit__

    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:  # noqa: N807
        regions.names.append(getattr(self, "name", ""))
        return enter(self)

    @functools.wraps(exit_)
    def __exit__(self: Any, *exc: Any) -> Any:  # noqa: N807
        try:
            return exit_(self, *exc)
        finally:
            if regions.names:
                regions.names.pop()

    rf.__enter__, rf.__exit__ = __enter__, __exit__

    def unless_inside(original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if region in regions.names:
                return None
            return original(*args, **kwargs)

        return call

    cuda = torch.cuda
    cuda.synchronize = unless_inside(cuda.synchronize)
    for name in ("Stream", "Event"):
        cls = getattr(cuda, name, None)
        if cls is not None and hasattr(cls, "synchronize"):
            cls.synchronize = unless_inside(cls.synchronize)


def apply_in_child(values: dict[str, Any]) -> None:
    """The runner's entry: apply the changes of its configuration and say so on stderr."""
    import torch

    changes = ProgramChanges.from_dict(values)
    for line in apply(changes, torch):
        _say(f"advise --measure re-run: {line}")
