"""opscope.runtime.typer_values converts option values as typer's pydantic adapters do, value by value, on the
parameters of every opscope command; and it answers (without typer's converter) for the values people type."""

from __future__ import annotations

import os
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer._click import Context
from typer._coercion import build_runtime_param

from opscope.cli import app
from opscope.runtime.typer_values import _MISS, fast_list, fast_value, install

STR_VALUES = ["table", "json", "", " a b ", "é", "\udcff", "name,shapes", "-x"]
INT_VALUES = ["0", "5", "-3", "20", "007", "1_000", " 5", "5 ", "+5", "5.0", "x", "", "99999999999999999999",
              "100", "101", 5, 0, -1]
FLOAT_VALUES = ["0", "10", "10.5", "-1", "0.001", "1e3", "inf", "nan", " 1", "1.", ".5", "x", "", "0.01", "0.009",
                10.0, 0.5, -0.5, 3]


def path_values(tmp: Path) -> list[Any]:
    f = tmp / "t.json"
    f.write_text("{}")
    return ["x.json", "", "./a//b/", str(f), str(tmp), "-", "\udcff", f, Path("opscope-demo")]


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """``fn(*args, **kwargs)``'s result with its type, or the error it raised (type and message)."""
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # the error is what is compared
        return "error", (type(exc).__name__, str(exc))
    return "value", (type(value).__name__, value)


def candidates(annotation: Any, tmp: Path) -> list[Any]:
    if annotation is str:
        return STR_VALUES
    if annotation is int:
        return INT_VALUES
    if annotation is float:
        return FLOAT_VALUES
    if annotation is bool:
        return [True, False]
    if annotation is Path:
        return path_values(tmp)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [*(m.value for m in annotation), *(m.value.upper() for m in annotation), "nope", *annotation]
    return []


def test_fast_values_equal_typers_own_on_every_command_parameter(tmp_path):
    assert install()
    group = typer.main.get_command(app)
    answered: Counter[str] = Counter()
    checked = 0
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        ctx = Context(command, info_name=name)
        for param in command.params:
            desc = param.type_descriptor
            if desc.file_annotation is not None or desc.is_list or desc.is_tuple:
                continue
            for value in candidates(desc.annotation, tmp_path):
                stock = outcome(build_runtime_param(desc)._coerce_value, value, param=param, ctx=ctx)
                fast = outcome(fast_value, desc.annotation, desc.parameter_info, value, param, ctx)
                checked += 1
                if fast == ("value", ("object", _MISS)):
                    continue  # typer's own converter decides
                assert fast == stock, (name, param.name, value)
                answered[getattr(desc.annotation, "__name__", str(desc.annotation))] += 1
                via_param = outcome(param.get_runtime_param()._coerce_value, value, param=param, ctx=ctx)
                assert via_param == stock, (name, param.name, value)
    assert checked > 500
    lists = 0
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        ctx = Context(command, info_name=name)
        for param in command.params:
            desc = param.type_descriptor
            if not desc.is_list or desc.file_annotation is not None:
                continue
            items = candidates(desc.annotation.__args__[0], tmp_path)
            for values in [(), *((v,) for v in items), tuple(items[:3]), list(items[:2])]:
                stock = outcome(build_runtime_param(desc)._coerce_value, values, param=param, ctx=ctx)
                fast = outcome(fast_list, desc.annotation, desc.parameter_info, values, param, ctx)
                lists += 1
                if fast != ("value", ("object", _MISS)):
                    assert fast == stock, (name, param.name, values)
                    answered[f"list[{desc.annotation.__args__[0].__name__}]"] += 1
                via_param = outcome(param.get_runtime_param()._coerce_value, values, param=param, ctx=ctx)
                assert via_param == stock, (name, param.name, values)
    assert lists > 20
    # every kind of parameter opscope has is answered without pydantic for the common spellings
    assert {"str", "int", "float", "Path", "bool"} <= set(answered), answered
    assert {"MemoryView", "ExportFormat"} <= set(answered), answered
    assert {"list[Path]", "list[str]"} <= set(answered), answered


def test_errors_stay_typers_own_words(tmp_path):
    """A value the adapter rejects goes to typer's converter: the message is pydantic's, as before."""
    assert install()
    group = typer.main.get_command(app)
    gpu = group.commands["gpu"]  # type: ignore[attr-defined]
    ctx = Context(gpu, info_name="gpu")
    limit = next(p for p in gpu.params if p.name == "limit")
    gap = next(p for p in gpu.params if p.name == "short_gap_us")
    assert fast_value(int, limit.type_descriptor.parameter_info, "x", limit, ctx) is _MISS
    with pytest.raises(Exception) as exc:
        limit.get_runtime_param()._coerce_value("x", param=limit, ctx=ctx)
    assert "valid integer" in str(exc.value)
    assert fast_value(float, gap.type_descriptor.parameter_info, "-1", gap, ctx) is _MISS
    with pytest.raises(Exception) as exc:
        gap.get_runtime_param()._coerce_value("-1", param=gap, ctx=ctx)
    assert "greater than or equal to 0" in str(exc.value)


def test_unreadable_existing_path_is_still_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    f = tmp_path / "secret.json"
    f.write_text("{}")
    f.chmod(0)
    group = typer.main.get_command(app)
    summary = group.commands["summary"]  # type: ignore[attr-defined]
    trace = next(p for p in summary.params if p.name == "trace")
    ctx = Context(summary, info_name="summary")
    stock = outcome(build_runtime_param(trace.type_descriptor)._coerce_value, str(f), param=trace, ctx=ctx)
    fast = outcome(fast_value, Path, trace.type_descriptor.parameter_info, str(f), trace, ctx)
    assert stock[0] == "error" and fast == stock
