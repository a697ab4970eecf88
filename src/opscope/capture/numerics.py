"""Numerics of every op (like tfdbg / MIGRAPHX_TRACE_EVAL): where does the first NaN or Inf appear?

:class:`NumericsRecorder` (``with record_numerics() as rec: ...``) puts a ``TorchDispatchMode`` under
the program: every aten op that runs is recorded with the nn.Module active at the time and, per
tensor output, its shape, dtype, min/max/mean/std, NaN/Inf counts, the first/last 5 values and a
64-value strided sample (for diffing two runs). Like tfdbg, min/max/mean/std are over the finite
elements; ``std`` is the population one (correction 0). The stats of each op's tensor inputs, taken
*before* the op runs (so in-place ops show what they were given), are in the ``inputs`` column of the
op's first output row.

Dumps are Parquet (``numerics.parquet``). ``python -m opscope.capture.numerics`` is the child-process
runner of ``opscope numerics``. Only the recorder needs torch: loading, sorting and diffing dumps do not
import it, so ``opscope numerics-diff`` works where torch is not installed.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import runpy
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from opscope.capture import require_torch
from opscope.errors import UsageError

DUMP_NAME = "numerics.parquet"
SAMPLE_SIZE = 64
EDGE = 5  # first5 / last5
SORTS = ("order", "size", "name")
#: Ops whose outputs are uninitialized memory: their values (and any NaN in them) mean nothing.
UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                           "aten::new_empty_strided", "aten::empty_permuted", "aten::resize_"})
_META_KEY = b"opscope"

_STATS = ["min", "max", "mean", "std"]
_SUMMARY_FIELDS = [
    ("shape", pa.string()), ("dtype", pa.string()), ("numel", pa.int64()),
    ("min", pa.float64()), ("max", pa.float64()), ("mean", pa.float64()), ("std", pa.float64()),
    ("nan_count", pa.int64()), ("inf_count", pa.int64()),
]
INPUT_TYPE = pa.struct([("arg", pa.int32()), *_SUMMARY_FIELDS])
SCHEMA = pa.schema([
    ("index", pa.int64()), ("op", pa.string()), ("module", pa.string()), ("backward", pa.bool_()),
    ("output_index", pa.int32()), *_SUMMARY_FIELDS,
    ("first5", pa.list_(pa.float64())), ("last5", pa.list_(pa.float64())), ("sample", pa.list_(pa.float64())),
    ("inputs", pa.list_(INPUT_TYPE)),
])


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
        info.update(zip(_STATS, got[:4]))
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
        return dict.fromkeys(_STATS)
    got = torch.stack([finite.min(), finite.max(), finite.mean(), finite.std(correction=0)]).tolist()
    return dict(zip(_STATS, got))


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
        self._mode = None
        self._handles: list[Any] = []
        self._cache = None
        self._graph_task_id = None

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
        backward = self._graph_task_id() != -1
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
        cached = self._cache.get(t) if version is not None else None
        if cached is not None and cached[0] == version:
            stats = cached[1]
        else:
            stats = _safe(lambda: tensor_stats(t, values=False), t, values=False)
        return {"arg": position, **{k: stats[k] for k, _ in _SUMMARY_FIELDS}}

    def _remember(self, t, stats: dict[str, Any]) -> None:
        version = _version(t)
        if version is not None:
            self._cache[t] = (version, {k: stats[k] for k, _ in _SUMMARY_FIELDS})

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
    except Exception:  # noqa: BLE001
        info = {"shape": shape_text(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "numel": t.numel(),
                **_null_stats(empty=False)}
        if values:
            info.update(first5=None, last5=None, sample=None)
        return info


def record_numerics(max_ops: int | None = None) -> NumericsRecorder:
    """``with record_numerics() as rec: model(x)`` then ``rec.table()`` / ``rec.first_nonfinite()``."""
    return NumericsRecorder(max_ops=max_ops)


# --- dumps: save, load, sort, first non-finite ------------------------------------------------------

def save_dump(table: pa.Table, path: Path, metadata: dict[str, Any] | None = None) -> Path:
    path = Path(path)
    if path.suffix != ".parquet":
        path = path / DUMP_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kind": "numerics", "version": 1, **(metadata or {})}
    table = table.replace_schema_metadata({_META_KEY: json.dumps(meta, default=str).encode()})
    pq.write_table(table, path)
    return path


def dump_path(path: Path) -> Path:
    """A dump file, or the directory holding ``numerics.parquet``."""
    path = Path(path)
    if path.is_dir():
        path = path / DUMP_NAME
        if not path.is_file():
            raise UsageError(f"{path.parent}: holds no {DUMP_NAME} (give a dump written by opscope numerics)")
    elif not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    return path


def load_dump(path: Path) -> pa.Table:
    """Read a dump; a Parquet file that is not one is a one-line error."""
    path = dump_path(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise UsageError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if missing:
        raise UsageError(f"{path}: not a numerics dump (no column {missing[0]!r})")
    return table.select(SCHEMA.names)


def dump_metadata(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(_META_KEY)
    return json.loads(raw) if raw else {}


def sort_rows(table: pa.Table, by: str) -> pa.Table:
    """``order`` (execution), ``size`` (numel, largest first) or ``name`` (op name, then order)."""
    if by not in SORTS:
        raise UsageError(f"cannot sort by {by!r}: choose one of {', '.join(SORTS)}")
    keys = {"order": [], "size": [("numel", "descending")], "name": [("op", "ascending")]}[by]
    return table.sort_by([*keys, ("index", "ascending"), ("output_index", "ascending")])


def first_nonfinite(table: pa.Table) -> dict[str, Any] | None:
    """The first row (in execution order) whose output holds a NaN or Inf, with ``inputs`` of its op."""
    import pyarrow.compute as pc

    bad = pc.or_(pc.greater(pc.fill_null(table["nan_count"], 0), 0), pc.greater(pc.fill_null(table["inf_count"], 0), 0))
    hits = sort_rows(table.filter(bad), "order")
    if hits.num_rows == 0:
        return None
    row = hits.slice(0, 1).to_pylist()[0]
    if not row["inputs"]:  # a later output of a multi-output op: inputs are on output 0
        same = table.filter(pc.and_(pc.equal(table["index"], row["index"]), pc.equal(table["output_index"], 0)))
        row["inputs"] = same["inputs"][0].as_py() if same.num_rows else []
    return row


def fresh_dump_dir(path: Path) -> tuple[Path, bool]:
    """``path``, or ``path-1``, ``path-2``... when it already holds a dump: a dump is never overwritten."""
    from opscope.paths import first_free

    return first_free(path, lambda p: (p / DUMP_NAME).exists() or (p.exists() and not p.is_dir()))


# --- diff of two dumps ------------------------------------------------------------------------------

DIFF_SCHEMA = pa.schema([
    ("index", pa.int64()), ("index_b", pa.int64()), ("op", pa.string()), ("module", pa.string()),
    ("output_index", pa.int32()), ("shape", pa.string()), ("dtype", pa.string()),
    ("max_abs_err", pa.float64()), ("max_rel_err", pa.float64()), ("mean_diff", pa.float64()),
    ("std_diff", pa.float64()), ("nan_diff", pa.int64()), ("inf_diff", pa.int64()), ("diverged", pa.bool_()),
])
_DIFF_COLUMNS = ["index", "op", "module", "output_index", "shape", "dtype", *_STATS, "nan_count", "inf_count",
                 "sample"]


@dataclass
class NumericsDiff:
    """Per matched op output: errors of B against A. ``matched_by``: ``index`` or ``sequence``."""

    table: pa.Table
    matched_by: str
    unmatched_a: int
    unmatched_b: int

    def first_divergence(self) -> dict[str, Any] | None:
        hits = self.table.filter(self.table["diverged"])
        return hits.slice(0, 1).to_pylist()[0] if hits.num_rows else None


def diff_dumps(a: pa.Table, b: pa.Table, rtol: float = 1e-3, atol: float = 1e-5) -> NumericsDiff:
    """Compare two dumps op by op on their stored sample (<= 64 values) and min/max/mean/std.

    Rows are matched by (index, op, output_index) when both dumps have the same ones, else aligned on
    the sequence of (op, output_index) (difflib), which survives ops added or missing in one run. A
    value diverges when |b - a| > atol + rtol * |a| (A is the reference); NaN/Inf count changes and
    shape changes diverge too.
    """
    if rtol < 0 or atol < 0:
        raise UsageError("--rtol and --atol must be 0 or more")
    ra = sort_rows(a, "order").select(_DIFF_COLUMNS).to_pylist()
    rb = sort_rows(b, "order").select(_DIFF_COLUMNS).to_pylist()
    pairs, how = _align(ra, rb)
    rows = [_compare(x, y, rtol, atol) for x, y in pairs]
    return NumericsDiff(pa.Table.from_pylist(rows, schema=DIFF_SCHEMA), how, len(ra) - len(pairs),
                        len(rb) - len(pairs))


def _align(ra: list[dict], rb: list[dict]) -> tuple[list[tuple[dict, dict]], str]:
    def key(r: dict) -> tuple:
        return r["index"], r["op"], r["output_index"]

    if [key(r) for r in ra] == [key(r) for r in rb]:
        return list(zip(ra, rb)), "index"
    ka = [(r["op"], r["output_index"]) for r in ra]
    kb = [(r["op"], r["output_index"]) for r in rb]
    matcher = difflib.SequenceMatcher(None, ka, kb, autojunk=False)
    pairs = [(ra[block.a + k], rb[block.b + k]) for block in matcher.get_matching_blocks() for k in range(block.size)]
    return pairs, "sequence"


def _compare(a: dict, b: dict, rtol: float, atol: float) -> dict[str, Any]:
    same_shape = a["shape"] == b["shape"]
    abs_err = rel_err = None
    samples_close = True
    if same_shape and a["sample"] is not None and b["sample"] is not None:
        abs_err, rel_err, samples_close = _sample_errors(a["sample"], b["sample"], rtol, atol)
    stats_close = all(_close(a[k], b[k], rtol, atol) for k in _STATS)
    nan_diff = _sub(b["nan_count"], a["nan_count"])
    inf_diff = _sub(b["inf_count"], a["inf_count"])
    diverged = not (same_shape and samples_close and stats_close and not nan_diff and not inf_diff)
    return {"index": a["index"], "index_b": b["index"], "op": a["op"], "module": a["module"],
            "output_index": a["output_index"],
            "shape": a["shape"] if same_shape else f"{a['shape']} vs {b['shape']}",
            "dtype": a["dtype"] if a["dtype"] == b["dtype"] else f"{a['dtype']} vs {b['dtype']}",
            "max_abs_err": abs_err, "max_rel_err": rel_err, "mean_diff": _sub(b["mean"], a["mean"]),
            "std_diff": _sub(b["std"], a["std"]), "nan_diff": nan_diff, "inf_diff": inf_diff, "diverged": diverged}


def _sample_errors(sa: list[float], sb: list[float], rtol: float, atol: float) -> tuple[float | None, float | None,
                                                                                          bool]:
    """Max |b-a|, max |b-a|/|a| (where a != 0) over finite pairs; and whether all values are close.

    The same non-finite value on both sides is equal; a non-finite value on one side only is not close.
    """
    abs_err = rel_err = None
    close = len(sa) == len(sb)
    for x, y in zip(sa, sb):
        if not (math.isfinite(x) and math.isfinite(y)):
            close = close and (x == y or (math.isnan(x) and math.isnan(y)))
            continue
        d = abs(y - x)
        abs_err = d if abs_err is None else max(abs_err, d)
        if x != 0:
            r = d / abs(x)
            rel_err = r if rel_err is None else max(rel_err, r)
        close = close and d <= atol + rtol * abs(x)
    return abs_err, rel_err, close


def _close(x: float | None, y: float | None, rtol: float, atol: float) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if not (math.isfinite(x) and math.isfinite(y)):
        return x == y or (math.isnan(x) and math.isnan(y))
    return abs(y - x) <= atol + rtol * abs(x)


def _sub(y: float | None, x: float | None) -> Any:
    return None if x is None or y is None else y - x


# --- running a program under the recorder -----------------------------------------------------------

#: Exit code of the runner when it could not start the program (the CLI's usage-error code).
SETUP_ERROR = 2


def run_program(kind: str, value: str, args: list[str], dump: Path, max_ops: int | None,
                stdout_to_stderr: bool = False) -> int:
    """Run ``python script.py ARGS`` / ``python -m module ARGS`` in a child Python under the recorder.

    The child writes ``dump``; the program's stdin/stderr and exit code are its own (its stdout goes to
    our stderr when ``stdout_to_stderr``, so that JSON/CSV on our stdout stays parseable).
    """
    cmd = [sys.executable, "-m", "opscope.capture.numerics", str(dump), str(max_ops or 0), kind, value, *args]
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the program; we then report
    try:
        return subprocess.run(cmd, env=env, stdout=2 if stdout_to_stderr else None).returncode
    finally:
        signal.signal(signal.SIGINT, previous)


def _fail(message: str) -> None:
    print(f"opscope: error: {message}", file=sys.stderr)
    sys.exit(SETUP_ERROR)


def _check_target(kind: str, value: str) -> None:
    if kind == "script":
        if not Path(value).is_file():
            _fail(f"{value}: no such script")
        return
    import importlib.util

    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(value)
    except (ImportError, ValueError) as exc:
        _fail(f"cannot run -m {value}: {exc}")
    if found is None:
        _fail(f"cannot run -m {value}: no module named {value!r}")


def _run_target(kind: str, value: str, args: list[str]) -> None:
    sys.argv = [value, *args]
    if kind == "module":
        runpy.run_module(value, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(value).resolve().parent))
        runpy.run_path(value, run_name="__main__")


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def main(argv: list[str]) -> None:
    """Child side: ``DUMP MAX_OPS script|module VALUE ARGS...``; always writes the dump, then exits as the
    program did (also when it crashed: the ops up to the crash are what one wants to see)."""
    dump, max_ops, kind, value, args = Path(argv[0]), int(argv[1]) or None, argv[2], argv[3], argv[4:]
    try:
        require_torch()
    except ImportError as exc:
        _fail(str(exc))
    _check_target(kind, value)
    recorder = NumericsRecorder(max_ops=max_ops)
    code, status = 0, "ok"
    try:
        with recorder:
            _run_target(kind, value, args)
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        code, status = 130, "interrupted"
    except BaseException:  # noqa: BLE001 - the program's crash is reported, then passed on
        traceback.print_exc()
        code, status = 1, "crashed"
    finally:
        recorder.save(dump, {"command": [kind, value, *args], "exit_code": code, "status": status})
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
