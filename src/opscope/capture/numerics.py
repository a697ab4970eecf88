"""Numerics of every op (like tfdbg / MIGRAPHX_TRACE_EVAL): where does the first NaN or Inf appear?

:class:`NumericsRecorder` (``with record_numerics() as rec: ...``) puts a ``TorchDispatchMode`` under
the program: every aten op that runs is recorded with the nn.Module active at the time and, per
tensor output, its shape, dtype, min/max/mean/std, NaN/Inf counts, the first/last 5 values and a
64-value strided sample (for diffing two runs). Like tfdbg, min/max/mean/std are over the finite
elements; ``std`` is the population one (correction 0). The stats of each op's tensor inputs, taken
*before* the op runs (so in-place ops show what they were given), are in the ``inputs`` column of the
op's first output row.

Dumps are Parquet (``numerics.parquet``, format in :mod:`opscope.analyses.numerics`, which reads them;
:mod:`opscope.diff.numerics` compares two). :func:`run_with_numerics` runs a program under the recorder
in a child process (the runner of :mod:`opscope.capture.runner`, with :class:`NumericsInstrument`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from opscope.analyses.numerics import DUMP_NAME, SCHEMA, STATS, SUMMARY_FIELDS, first_nonfinite
from opscope.capture import require_torch
from opscope.errors import UsageError

if TYPE_CHECKING:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    from opscope.capture.launch import Target
    from opscope.capture.runner import Outcome, Program

SAMPLE_SIZE = 64
EDGE = 5  # first5 / last5
#: Ops whose outputs are uninitialized memory: their values (and any NaN in them) mean nothing.
UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                           "aten::new_empty_strided", "aten::empty_permuted", "aten::resize_"})
_META_KEY = b"opscope"


# --- statistics of one tensor (runs inside the dispatch mode, where the mode is off) ---------------

def shape_text(shape) -> str:
    """``8x16x32x32``; ``scalar`` for a 0-d tensor."""
    return "x".join(map(str, shape)) if len(shape) else "scalar"


def _null_stats(empty: bool) -> dict[str, Any]:
    zero = 0 if empty else None
    return {"min": None, "max": None, "mean": None, "std": None, "nan_count": zero, "inf_count": zero}


def _readable(t) -> bool:
    torch = require_torch()
    return (t.layout == torch.strided and not t.is_meta and not t.is_quantized and not t.is_nested
            and type(t) in (torch.Tensor, torch.nn.Parameter))


def _as_float(t):
    """Floats stay (half/bfloat16/float8 widened to float32), complex -> magnitude, the rest -> float64."""
    torch = require_torch()
    if t.is_complex():
        t = t.abs()
    if t.is_floating_point():
        return t if t.dtype in (torch.float32, torch.float64) else t.float()
    return t.to(torch.float64)


def tensor_stats(t, values: bool = True) -> dict[str, Any]:
    """Summary of a tensor: shape, dtype, numel, finite min/max/mean/std, NaN/Inf counts (+ values)."""
    torch = require_torch()
    info: dict[str, Any] = {"shape": shape_text(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                            "numel": t.numel()}
    if values:
        info.update(first5=None, last5=None, sample=None)
    if t.numel() == 0 or not _readable(t):
        info.update(_null_stats(empty=t.numel() == 0))
        return info
    with torch.no_grad():
        flat = _as_float(t.detach()).reshape(-1)
        summary = [flat.min(), flat.max(), flat.mean(), flat.std(correction=0)]
        counts = [torch.isnan(flat).sum(), torch.isinf(flat).sum()]
        parts = [torch.stack(summary).double(), torch.stack(counts).double()]
        if values:
            n = flat.numel()
            k = min(SAMPLE_SIZE, n)
            positions = torch.arange(k, device=flat.device) * n // k
            parts += [flat[:EDGE].double(), flat[-EDGE:].double(), flat[positions].double()]
        got = torch.cat(parts).tolist()  # one device->host copy for everything
        info.update(zip(STATS, got[:4]))
        info["nan_count"], info["inf_count"] = int(got[4]), int(got[5])
        if info["nan_count"] or info["inf_count"]:
            info.update(_finite_stats(flat))
    if values:
        m = min(EDGE, flat.numel())
        rest = got[6:]
        info.update(first5=rest[:m], last5=rest[m:2 * m], sample=rest[2 * m:])
    return info


def _finite_stats(flat) -> dict[str, Any]:
    """min/max/mean/std over the finite elements only (tfdbg's convention); None if there are none."""
    torch = require_torch()
    finite = flat[torch.isfinite(flat)]
    if finite.numel() == 0:
        return dict.fromkeys(STATS)
    got = torch.stack([finite.min(), finite.max(), finite.mean(), finite.std(correction=0)]).tolist()
    return dict(zip(STATS, got))


# --- the recorder ---------------------------------------------------------------------------------

@cache
def _mode_class():
    """The TorchDispatchMode subclass, made on first use so importing this module does not import torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _NumericsMode(TorchDispatchMode):
        def __init__(self, recorder: NumericsRecorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return self.recorder._on_op(func, args, kwargs or {})

    return _NumericsMode


class NumericsRecorder:
    """Records every op's outputs while active. ``max_ops``: after that many rows, only non-finite
    outputs are kept (so a long run still finds its first NaN without holding every row)."""

    def __init__(self, max_ops: int | None = None) -> None:
        self.max_ops = max_ops
        self.dropped = 0
        self._rows: list[dict[str, Any]] = []
        self._count = 0
        self._names: dict[Any, str] = {}
        self._roots: set[str] = set()
        self._local = threading.local()  # the module stack of each thread
        self._mode: TorchDispatchMode | None = None
        self._handles: list[Any] = []
        self._cache: WeakIdKeyDictionary | None = None  # tensor -> (its version, its summary stats)
        self._graph_task_id: Callable[[], int] | None = None

    # context manager ------------------------------------------------------------------------------
    def __enter__(self) -> NumericsRecorder:
        torch = require_torch()
        from torch.nn.modules import module as nn_module
        from torch.utils.weak import WeakIdKeyDictionary

        self._cache = WeakIdKeyDictionary()
        self._handles = [nn_module.register_module_forward_pre_hook(self._enter_module),
                         nn_module.register_module_forward_hook(self._exit_module, always_call=True)]
        self._graph_task_id = torch._C._current_graph_task_id
        self._mode = _mode_class()(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode is not None:  # entered
            self._mode.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._handles, self._cache, self._names, self._roots = [], None, {}, set()

    # module scopes --------------------------------------------------------------------------------
    def _stack(self) -> list[tuple[Any, str]]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def _enter_module(self, module, _args) -> None:
        stack = self._stack()
        stack.append((module, self._name_of(module, stack)))

    def _exit_module(self, module, _args, _output) -> None:
        stack = self._stack()
        if any(m is module for m, _ in stack):
            while stack and stack.pop()[0] is not module:
                pass

    def _name_of(self, module, stack: list[tuple[Any, str]]) -> str:
        """named_modules() paths of the first root model; later roots get their class name as prefix."""
        name = self._names.get(module)
        if name is not None:
            return name
        if stack:  # a module that is no child of the running model (made in forward, kept in a list)
            return f"{stack[-1][1]}/{type(module).__name__}"
        label = type(module).__name__
        n = 1
        while label in self._roots:
            n += 1
            label = f"{type(module).__name__}#{n}"
        prefix = "" if not self._roots else f"{label}."
        self._roots.add(label)
        for path, sub in module.named_modules():
            self._names.setdefault(sub, f"{prefix}{path}" if path else label)
        return self._names[module]

    # ops ------------------------------------------------------------------------------------------
    def _on_op(self, func, args: tuple, kwargs: dict) -> Any:
        from torch.utils._pytree import tree_leaves

        torch = require_torch()
        index = self._count
        self._count += 1
        op = func._schema.name
        stack = self._stack()
        module = stack[-1][1] if stack else ""
        backward = self._graph_task_id is not None and self._graph_task_id() != -1
        inputs = [self._input_stats(i, t) for i, t in enumerate(_tensors(tree_leaves((args, kwargs)), torch))]
        out = func(*args, **kwargs)
        for i, t in enumerate(_tensors(tree_leaves(out), torch)):
            stats = self._output_stats(op, t)
            row = {"index": index, "op": op, "module": module, "backward": backward, "output_index": i,
                   **stats, "inputs": inputs if i == 0 else []}
            self._keep(row)
        return out

    def _output_stats(self, op: str, t) -> dict[str, Any]:
        if op in UNINITIALIZED:
            info = {"shape": shape_text(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                    "numel": t.numel(), "first5": None, "last5": None, "sample": None}
            return {**info, **_null_stats(empty=False)}
        stats = _safe(lambda: tensor_stats(t, values=True), t, values=True)
        self._remember(t, stats)
        return stats

    def _input_stats(self, position: int, t) -> dict[str, Any]:
        version = _version(t)
        cached = self._cache.get(t) if version is not None and self._cache is not None else None
        if cached is not None and cached[0] == version:
            stats = cached[1]
        else:
            stats = _safe(lambda: tensor_stats(t, values=False), t, values=False)
        return {"arg": position, **{k: stats[k] for k, _ in SUMMARY_FIELDS}}

    def _remember(self, t, stats: dict[str, Any]) -> None:
        version = _version(t)
        if version is not None and self._cache is not None:
            self._cache[t] = (version, {k: stats[k] for k, _ in SUMMARY_FIELDS})

    def _keep(self, row: dict[str, Any]) -> None:
        bad = bool(row["nan_count"] or row["inf_count"])
        if self.max_ops is not None and len(self._rows) >= self.max_ops and not bad:
            self.dropped += 1
            return
        self._rows.append(row)

    # results --------------------------------------------------------------------------------------
    def table(self) -> pa.Table:
        """All recorded rows (one per tensor output), in execution order."""
        return pa.Table.from_pylist(self._rows, schema=SCHEMA)

    def first_nonfinite(self) -> dict[str, Any] | None:
        """The first output with a NaN or Inf, with its op's ``inputs`` stats; None if all were finite."""
        return first_nonfinite(self.table())

    def save(self, path: Path, metadata: dict[str, Any] | None = None) -> Path:
        """Write the dump as Parquet (``path`` may be a directory: ``path/numerics.parquet``)."""
        meta = {"max_ops": self.max_ops, "dropped": self.dropped, **(metadata or {})}
        return save_dump(self.table(), path, meta)


def _tensors(leaves: list[Any], torch) -> list[Any]:
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _version(t) -> int | None:
    try:
        return t._version
    except (RuntimeError, AttributeError):  # inference tensors have no version counter
        return None


def _safe(compute, t, values: bool) -> dict[str, Any]:
    """Never let a statistic break the user's program: unreadable tensors get null stats."""
    try:
        return compute()
    except Exception:
        info = {"shape": shape_text(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "numel": t.numel(),
                **_null_stats(empty=False)}
        if values:
            info.update(first5=None, last5=None, sample=None)
        return info


def record_numerics(max_ops: int | None = None) -> NumericsRecorder:
    """``with record_numerics() as rec: model(x)`` then ``rec.table()`` / ``rec.first_nonfinite()``."""
    return NumericsRecorder(max_ops=max_ops)


# --- dumps -----------------------------------------------------------------------------------------

def save_dump(table: pa.Table, path: Path, metadata: dict[str, Any] | None = None) -> Path:
    """Write ``table`` (rows of :data:`~opscope.analyses.numerics.SCHEMA`) as a dump; ``path`` may be its
    directory."""
    path = Path(path)
    if path.suffix != ".parquet":
        path = path / DUMP_NAME
    from opscope.capture.outdir import staging_dir

    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kind": "numerics", "version": 1, **(metadata or {})}
    table = table.replace_schema_metadata({_META_KEY: json.dumps(meta, default=str).encode()})
    # Written whole under a private name first, then renamed: a reader never sees half a dump, and a link
    # planted under the dump's name is replaced, never followed.
    with staging_dir(path.parent) as staging:
        pq.write_table(table, staging / DUMP_NAME)
        os.replace(staging / DUMP_NAME, path)
    return path


def fresh_dump_dir(path: Path) -> tuple[Path, bool]:
    """``path``, or ``path-1``, ``path-2``... when it already holds a dump (or a file), with the dump's name
    claimed there (an empty ``numerics.parquet`` made with O_EXCL, which the dump then replaces): a dump is
    never overwritten, also by a second run started at the same moment."""
    from opscope.capture.outdir import make_output_dir
    from opscope.paths import all_taken, numbered_names

    for n, name in enumerate(numbered_names(path.name)):
        candidate = path.with_name(name)
        if candidate.exists() and not candidate.is_dir():
            continue
        make_output_dir(candidate)
        try:
            os.close(os.open(candidate / DUMP_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(f"{candidate}: cannot write the dump there ({exc.strerror or exc}); give another "
                             "directory with --output") from None
        return candidate, n > 0
    raise UsageError(f"{path}: {all_taken(path.name)}")


# --- running a program under the recorder -----------------------------------------------------------

def run_with_numerics(target: Target, dump: Path, max_ops: int | None, stdout_to_stderr: bool = False) -> int:
    """Run ``python script.py ARGS`` / ``python -m module ARGS`` in a child of opscope's Python under the
    recorder; returns its exit code.

    The child writes ``dump``; the program's stdin/stderr and exit code are its own (its stdout goes to
    our stderr when ``stdout_to_stderr``, so that JSON/CSV on our stdout stays parseable).
    """
    from opscope.capture.launch import run_child, target_config

    config = {"mode": "numerics", "dump": str(dump), "max_ops": max_ops, "target": target_config(target)}
    return run_child(sys.executable, config, stdout=2 if stdout_to_stderr else None)


class NumericsInstrument:
    """The runner's instrument for ``opscope numerics``: the recorder around the program; the dump is
    always written (also after a crash: the ops up to it are what one wants to see)."""

    import_error_is_setup_error = False

    def __init__(self, config: dict[str, Any]) -> None:
        self.dump = Path(config["dump"])
        self.recorder = NumericsRecorder(max_ops=config["max_ops"])
        self.command: list[str] = []

    def prepare(self) -> None:
        from opscope.capture.runner import fail

        try:
            require_torch()
        except ImportError as exc:
            fail(str(exc))

    def start(self, program: Program) -> None:
        self.command = [program.kind, program.value, *program.args]
        self.recorder.__enter__()

    def finish(self, outcome: Outcome) -> None:
        self.recorder.__exit__(None, None, None)
        self.recorder.save(self.dump, {"command": self.command, "exit_code": outcome.exit_code,
                                       "status": outcome.status})
