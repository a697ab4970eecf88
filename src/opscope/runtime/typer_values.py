"""Option values without pydantic: typer (0.29) turns every command-line value into its type through a pydantic
TypeAdapter, and importing pydantic for that (with its plugin loader, which imports importlib.metadata) costs
about as much as the rest of a cached command's start-up.

:func:`install` gives each parameter a converter that does what the adapter would do for the values opscope's
options take: a ``str``, a ``bool``, an ``int`` or ``float`` (within ``min``/``max``), a ``Path``, an Enum
choice, or a list of one of them. For anything else (and for every value the adapter would reject, so that typer's
error message is its own, word for word) it hands the value to typer's own converter. tests/unit/test_typer_values.py
checks both against each other value by value.

Installed by :func:`opscope.runtime.tune_command` in the command's own process, never on import. Nothing is
installed when typer's internals are not the ones this was written against: typer then works as shipped, only
slower to start.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, cast, get_args, get_origin

#: parameter settings under which the adapter does more than convert (these take typer's own converter)
_PATH_DEFAULTS = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "readable": True,
                  "resolve_path": False, "allow_dash": False, "path_type": None}
_MISS = object()


def _digits(text: str, leading_zero: bool) -> bool:
    """1 to 18 ASCII digits (no sign, space or underscore); without ``leading_zero``, none before another digit."""
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit() and (leading_zero or text == "0" or text[0] != "0")


def _plain_number(text: str, annotation: type) -> bool:
    """``text`` is an integer (or, for a float, a decimal fraction) in the plainest spelling: -12, 0, 3.25. Every
    other spelling pydantic may read its own way (1_000, 1e3, ' 5', inf): those go to typer's converter."""
    whole, dot, fraction = text.removeprefix("-").partition(".")
    if not _digits(whole, leading_zero=False):
        return False
    return not dot or (annotation is float and _digits(fraction, leading_zero=True))


def _utf8(value: str) -> bool:
    # text that is not valid Unicode (lone surrogates from undecodable argv bytes) is left to typer's converter
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fast_value(annotation: Any, info: Any, value: Any, param: Any = None, ctx: Any = None) -> Any:
    """What typer's pydantic adapter returns for ``value`` of a parameter of ``annotation`` (and ParameterInfo
    ``info``), or ``_MISS`` when this cannot tell for sure (typer's converter then decides, errors included)."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return _MISS
    if annotation is str:
        return value if type(value) is str and _utf8(value) else _MISS
    if annotation is bool:
        # _parse_cli_bool then pydantic's bool: only the unambiguous spellings here
        if type(value) is bool:
            return value
        return _MISS
    if annotation is int or annotation is float:
        if info.clamp:
            return _MISS
        if type(value) is annotation:
            number = value
        elif type(value) is str and _plain_number(value, annotation):
            number = annotation(value)
        else:
            return _MISS
        if info.min is not None and not number >= info.min:
            return _MISS
        if info.max is not None and not number <= info.max:
            return _MISS
        return number
    if annotation is Path:
        if any(getattr(info, k) != v for k, v in _PATH_DEFAULTS.items()):
            return _MISS
        from typer._param_types import coerce_cli_path

        if type(value) is Path or type(value) is type(Path()):
            return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)
        if type(value) is not str or not value or not _utf8(value):
            return _MISS
        # path_type=None: its checks see the string as typed, as they do behind pydantic; then the Path that
        # pydantic would have made of it
        return Path(cast(str, coerce_cli_path(value, info, path_type=None, param=param, ctx=ctx)))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice

        try:
            return coerce_cli_choice(value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return _MISS
    return _MISS


def fast_list(annotation: Any, info: Any, values: Any, param: Any = None, ctx: Any = None) -> Any:
    """:func:`fast_value` for a ``list[T]`` parameter's values (a list, as the adapter gives), or ``_MISS`` when it
    cannot tell for one of them (typer's converter then takes the whole list)."""
    items = get_args(annotation)
    if get_origin(annotation) is not list or len(items) != 1 or not isinstance(values, (list, tuple)):
        return _MISS
    out = []
    for value in values:
        converted = fast_value(items[0], info, value, param, ctx)
        if converted is _MISS:
            return _MISS
        out.append(converted)
    return out


def install() -> bool:
    """Make typer convert values with :func:`fast_value` first; False (and nothing changed) when typer's
    internals differ from those this was written against."""
    try:
        from typer import core
        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:
        return False
    param_cls = getattr(core, "_TyperParameter", None)
    if param_cls is None or not hasattr(param_cls, "get_runtime_param") or not hasattr(RuntimeParam, "_coerce_value"):
        return False
    if getattr(param_cls.get_runtime_param, "_opscope_fast", False):
        return True

    class FastRuntimeParam(RuntimeParam):
        """typer's RuntimeParam (same None and multi-value handling) converting with fast_value first."""

        convert: Callable[..., Any] = staticmethod(fast_value)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            result = self.convert(self.annotation, self.parameter_info, value, param, ctx)
            if result is not _MISS:
                return result
            return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)

    class FastListRuntimeParam(FastRuntimeParam):
        """The same for a list parameter (``list[Path]``: several traces): each value converted as the item's."""

        convert = staticmethod(fast_list)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            plain = desc.file_annotation is None and not desc.is_tuple
            kind = FastRuntimeParam if plain and not desc.is_list else FastListRuntimeParam if plain else None
            self._runtime_param = build_runtime_param(desc) if kind is None else \
                kind(parameter_info=desc.parameter_info, annotation=desc.annotation)
        return self._runtime_param

    get_runtime_param._opscope_fast = True  # type: ignore[attr-defined]
    param_cls.get_runtime_param = get_runtime_param
    return True
