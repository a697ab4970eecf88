"""The operator registry of the torch installed here: which op names exist and their schemas (torch imported
only when asked). Names are checked here before any of them is written into code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from opscope.errors import UsageError

#: What a name must look like before it is even looked up: ``namespace::name`` of identifiers.
OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Argument:
    name: str
    type: str  # torch's spelling: "Tensor", "Optional[Tensor]", "List[int]", "number", "int", "Device"...
    kwarg_only: bool
    has_default: bool
    default: object  # the schema's default (plain Python: None, int, float, bool, str, list)
    writes: bool  # an in-place or out= argument (Tensor(a!))


@dataclass(frozen=True)
class Schema:
    op: str
    overload: str  # "default" for the unnamed overload, as torch.ops spells it
    arguments: tuple[Argument, ...]


def torch_version() -> str:
    return _torch().__version__


def schemas(op: str) -> list[Schema] | None:
    """The registered overloads of ``op`` (None: not registered here, or not a well-formed op name)."""
    if not OP_NAME.fullmatch(op):
        return None
    return _schemas(op)


@lru_cache(maxsize=4096)
def _schemas(op: str) -> list[Schema] | None:
    torch = _torch()
    try:
        found = torch._C._jit_get_schemas_for_operator(op)
    except RuntimeError:
        return None
    result = []
    for s in found:
        overload = s.overload_name or "default"
        if not _IDENTIFIER.fullmatch(overload):
            continue
        arguments = tuple(Argument(a.name, str(a.type), bool(a.kwarg_only), bool(a.has_default_value()),
                                   _plain(a.default_value) if a.has_default_value() else None,
                                   bool(a.alias_info is not None and a.alias_info.is_write))
                          for a in s.arguments)
        if all(_IDENTIFIER.fullmatch(a.name) for a in arguments):
            result.append(Schema(op, overload, arguments))
    return result or None


def _plain(value: object) -> object:
    """A schema default as a plain value (torch gives ints for dtypes and layouts, lists, strs)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return None


def _torch():
    try:
        import torch
    except ImportError:
        raise UsageError("opscope repro needs PyTorch here to check ops and write reproducers: "
                         "pip install 'opscope[torch]' (or pip install torch)") from None
    return torch


def cuda_available() -> bool:
    return bool(_torch().cuda.is_available())
