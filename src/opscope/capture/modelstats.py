"""Model statistics (like tfprof's model analysis): per nn.Module parameters, output shape and FLOPs.

One forward pass on an example input, under ``torch.no_grad()`` and ``eval()``: forward hooks record
each module's output shape, ``torch.utils.flop_counter.FlopCounterMode`` counts FLOPs per module.
FLOPs follow torch's convention: only matmul-like ops (mm/addmm/bmm/conv/attention...) are counted,
one multiply-add = 2 FLOPs, bias additions and elementwise ops (BatchNorm, ReLU, pooling) are not.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.capture import require_torch
from opscope.capture.demo_model import mobilenet_v2_mini
from opscope.errors import UsageError

ROOT = "(model)"
SORTS = ("order", "params", "flops", "name")

SCHEMA = pa.schema([
    ("module", pa.string()),
    ("depth", pa.int32()),
    ("type", pa.string()),
    ("output_shape", pa.string()),
    ("params", pa.int64()),
    ("param_bytes", pa.int64()),
    ("params_pct", pa.float64()),
    ("flops", pa.int64()),
    ("flops_pct", pa.float64()),
    ("calls", pa.int64()),
])


# --- the target: which model, which input ---------------------------------------------------------

def parse_input_shape(text: str) -> tuple[int, ...]:
    """``8,3,224,224`` (or ``8x3x224x224``) -> (8, 3, 224, 224); every size a positive integer."""
    parts = [p.strip() for p in text.split("," if "," in text else "x")]
    if not text.strip() or any(not p for p in parts):
        raise UsageError(f"--input-shape {text!r}: give positive integers separated by commas, e.g. 8,3,224,224")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"--input-shape {text!r}: {_first_bad(parts)!r} is not an integer") from None
    bad = [n for n in shape if n <= 0]
    if bad:
        raise UsageError(f"--input-shape {text!r}: sizes must be positive (got {bad[0]})")
    return shape


def _first_bad(parts: list[str]) -> str:
    for p in parts:
        try:
            int(p)
        except ValueError:
            return p
    return ""


def load_model(target: str):
    """``demo``, ``path/to/file.py:factory`` or ``package.module:factory`` -> the nn.Module factory() returns."""
    torch = require_torch()
    if target == "demo":
        return mobilenet_v2_mini()
    if ":" not in target:
        raise UsageError(f"model {target!r}: give path/to/file.py:factory, package.module:factory or demo")
    where, factory_name = target.rsplit(":", 1)
    if not where or not factory_name:
        raise UsageError(f"model {target!r}: both the file/module and the factory name are needed (FILE:FACTORY)")
    owner = _import_file(Path(where)) if _looks_like_file(where) else _import_module(where)
    factory = _attribute(owner, factory_name, where)
    if not callable(factory):
        raise UsageError(f"{where}:{factory_name} is an object of type {type(factory).__name__}, not a "
                         "callable factory")
    try:
        model = factory()
    except Exception as exc:
        raise UsageError(f"{where}:{factory_name}() failed: {_one_line(exc)}") from exc
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{where}:{factory_name}() returned an object of type {type(model).__name__}, not a "
                         "torch.nn.Module")
    return model


def _looks_like_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or os.sep in where


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"{path}: no such file" if not path.exists() else f"{path}: is not a file")
    spec = importlib.util.spec_from_file_location(f"_opscope_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported as Python (give a .py file)")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the model file's own sibling imports work, as under `python file.py`
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"{path}: importing it failed: {_one_line(exc)}") from exc
    return module


def _import_module(name: str) -> Any:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as under `python -m`
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"cannot import module {name!r}: {exc}") from exc
    except Exception as exc:
        raise UsageError(f"importing module {name!r} failed: {_one_line(exc)}") from exc


def _attribute(owner: Any, dotted: str, where: str) -> Any:
    value = owner
    for part in dotted.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{where} has no {dotted!r}")
        value = getattr(value, part)
    return value


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def example_input(model, shape: tuple[int, ...]):
    """A float32 ``randn`` tensor of ``shape`` on the device of the model's first parameter."""
    torch = require_torch()
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else "cpu"
    return torch.randn(*shape, device=device)


# --- the statistics -----------------------------------------------------------------------------

@dataclass
class _Seen:
    """What the forward hooks saw of one module."""

    output_shape: str | None = None
    calls: int = 0


def shape_text(value: Any) -> str | None:
    """``8x16x32x32`` for a tensor, ``scalar`` for a 0-d one; tensors in tuples/lists/dicts joined by ", "."""
    torch = require_torch()
    from torch.utils._pytree import tree_leaves

    if isinstance(value, torch.Tensor):
        return "x".join(map(str, value.shape)) if value.dim() else "scalar"
    parts = [shape_text(leaf) for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    return ", ".join(p for p in parts if p) or None


def model_stats(module, example_input, max_depth: int | None = None) -> pa.Table:
    """One row per module in tree order: params, output shape and FLOPs of the subtree rooted there.

    ``example_input`` is a tensor or a tuple of positional arguments. The root's name is ``(model)``,
    the others are their ``named_modules()`` paths. ``max_depth`` keeps rows with depth <= it; the
    figures stay subtree totals.
    """
    if max_depth is not None and max_depth < 0:
        raise UsageError(f"--max-depth must be 0 or more (got {max_depth})")
    seen, counts = _run_forward(module, example_input)
    names = list(module.named_modules())
    flops = _flops_by_module(module, counts)
    total_params = _param_count(module)
    total_flops = flops.get(module, 0)
    rows = []
    for name, mod in names:
        depth = name.count(".") + 1 if name else 0
        if max_depth is not None and depth > max_depth:
            continue
        params = _param_count(mod)
        f = flops.get(mod, 0)
        rows.append({
            "module": name or ROOT, "depth": depth, "type": type(mod).__name__,
            "output_shape": seen[mod].output_shape, "params": params, "param_bytes": _param_bytes(mod),
            "params_pct": _pct(params, total_params), "flops": f, "flops_pct": _pct(f, total_flops),
            "calls": seen[mod].calls,
        })
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _run_forward(module, example_input) -> tuple[dict, dict]:
    """Run the model once, in eval mode without autograd; return what the hooks and the counter saw."""
    torch = require_torch()
    from torch.utils.flop_counter import FlopCounterMode

    args = example_input if isinstance(example_input, tuple) else (example_input,)
    seen = {mod: _Seen() for _, mod in module.named_modules()}

    def hook(mod, _inputs, output) -> None:
        entry = seen.setdefault(mod, _Seen())
        entry.calls += 1
        if entry.output_shape is None:
            entry.output_shape = shape_text(output)

    handles = [mod.register_forward_hook(hook) for mod in seen]
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(*args)
    except Exception as exc:
        shapes = ", ".join(shape_text(a) or type(a).__name__ for a in args)
        raise UsageError(f"the forward pass failed with input shape {shapes}: {_one_line(exc)}") from exc
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
    return seen, counter.get_flop_counts()


def _tracker_names(root) -> dict[str, Any]:
    """The names FlopCounterMode's ModuleTracker gives modules: ``Root``, ``Root.child.0``... -> module.

    It names the root by its class and each child ``parent.attr`` walking ``named_children()``;
    doing the same walk maps its keys back to module objects (and so to named_modules() paths).
    """
    known: dict[Any, str] = {}
    visited: set[int] = set()

    def visit(mod) -> None:
        name = known.setdefault(mod, type(mod).__name__)
        if id(mod) in visited:
            return
        visited.add(id(mod))
        for child_name, child in mod.named_children():
            known[child] = f"{name}.{child_name}"
            visit(child)

    visit(root)
    return {name: mod for mod, name in known.items()}


def _flops_by_module(root, counts: dict[str, dict[Any, int]]) -> dict[Any, int]:
    by_name = _tracker_names(root)
    return {by_name[key]: sum(per_op.values()) for key, per_op in counts.items() if key in by_name}


def _param_count(mod) -> int:
    return sum(p.numel() for p in mod.parameters())


def _param_bytes(mod) -> int:
    return sum(p.numel() * p.element_size() for p in mod.parameters())


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def sort_stats(table: pa.Table, by: str) -> pa.Table:
    """``order`` (tree order), ``params`` / ``flops`` (largest first) or ``name``; ties keep tree order."""
    if by not in SORTS:
        raise UsageError(f"cannot sort by {by!r}: choose one of {', '.join(SORTS)}")
    if by == "order":
        return table
    order = pa.array(range(table.num_rows))
    keyed = table.append_column("_order", order)
    keys = [("module", "ascending")] if by == "name" else [(by, "descending")]
    return keyed.sort_by([*keys, ("_order", "ascending")]).drop_columns(["_order"])


def indented(table: pa.Table) -> pa.Table:
    """The module column indented two spaces per depth, to show the tree in a terminal table."""
    names = [("  " * d) + m for m, d in zip(table.column("module").to_pylist(), table.column("depth").to_pylist())]
    return table.set_column(table.schema.get_field_index("module"), "module", pa.array(names, pa.string()))
