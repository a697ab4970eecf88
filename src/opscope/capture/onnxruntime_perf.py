"""Run an ONNX model on ONNX Runtime the way ``migraphx-driver perf`` runs one on MIGraphX (``opscope perf``).

The model runs with random inputs of its declared types (seeded: two runs see the same data): warm-up run(s),
then ``iterations`` runs under ONNX Runtime's own profiler (``SessionOptions.enable_profiling``). The profile
is kept (ONNX Runtime's file, less the warm-up runs' lines, so that every ``model_run`` in it is a measured
one) for :mod:`opscope.analyses.perf_report` and every other command. ``--trace-eval`` runs the model once more
with every node's output made a graph output, like ``MIGRAPHX_TRACE_EVAL=2``.

Needs the ``perf`` extra (onnx, onnxruntime, onnxconverter-common, numpy); imported lazily.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from opscope.analyses.numerics import SCHEMA
from opscope.analyses.perf_report import EvalOutput
from opscope.errors import TraceError, UsageError
from opscope.outfile import write_file

NEEDS_PERF = "opscope perf needs ONNX Runtime: pip install 'opscope[perf]'"
SEED = 0
WARMUP_RUNS = 1
SAMPLE_SIZE = 64  # values kept per output for numerics-diff, as opscope.capture.numerics keeps
EDGE = 5


@dataclass(frozen=True)
class PerfOptions:
    """What ``opscope perf`` was asked for."""

    batch: int = 1
    #: input name (without @) -> its exact shape
    input_dims: Mapping[str, Sequence[int]] = field(default_factory=dict)
    iterations: int = 100
    fp16: bool = False
    provider: str | None = None
    seed: int = SEED
    warmup: int = WARMUP_RUNS


@dataclass(frozen=True)
class PerfRun:
    """A finished profiled run: where its profile is, and the inputs it was given."""

    profile: Path
    provider: str
    inputs: dict[str, tuple[list[int], str]]  # name -> (shape, ORT type)
    iterations: int
    warmup: int


def _modules() -> tuple[Any, Any, Any]:
    try:  # by name: onnxruntime ships no type information, and mypy need not look for it
        np = importlib.import_module("numpy")
        onnx = importlib.import_module("onnx")
        ort = importlib.import_module("onnxruntime")
    except ImportError:
        raise UsageError(NEEDS_PERF) from None
    return np, onnx, ort


def available_providers() -> list[str]:
    """The execution providers this ONNX Runtime build has."""
    _, _, ort = _modules()
    return list(ort.get_available_providers())


def check_provider(provider: str | None) -> str:
    """``provider`` if this ONNX Runtime has it (default: CPUExecutionProvider), else a one-line UsageError."""
    have = available_providers()
    if provider is None:
        return "CPUExecutionProvider"
    if provider not in have:
        raise UsageError(f"execution provider {provider!r} is not available in this ONNX Runtime; "
                         f"choose one of {', '.join(have)}")
    return provider


def load_model(path: Path) -> Any:
    """The ModelProto at ``path``; TraceError (one line) when it cannot be read or is not an ONNX model.
    External weight files are loaded from beside the model, as ONNX Runtime itself would."""
    _, onnx, _ = _modules()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read it ({exc.strerror or exc})") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError and friends: any parse failure means "not a model"
        raise TraceError(path, "is not an ONNX model (not a ModelProto)") from None
    if not model.HasField("graph") or not model.ir_version or not model.graph.node:
        raise TraceError(path, "is not an ONNX model (no graph of operators)")
    try:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError) as exc:
        raise TraceError(path, f"cannot load its external weights ({exc})") from None
    return model


def to_fp16(model: Any, path: Path) -> Any:
    """The model with float tensors converted to float16 (its inputs and outputs stay float32)."""
    try:
        float16 = importlib.import_module("onnxconverter_common.float16")
    except ImportError:
        raise UsageError("--fp16 needs onnxconverter-common: pip install 'opscope[perf]'") from None
    try:
        return float16.convert_float_to_float16(model, keep_io_types=True)
    except Exception as exc:  # the converter's own errors on models it cannot handle
        raise TraceError(path, f"cannot convert it to float16 ({type(exc).__name__}: {exc})") from None


def _session(model: Any, path: Path, provider: str, profile_prefix: str | None) -> Any:
    _, _, ort = _modules()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ORT's warnings (e.g. unused initializers) are not the report
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/... on a model it cannot load
        raise TraceError(path, f"ONNX Runtime cannot load it ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# --- inputs ---------------------------------------------------------------------------------------

def parse_input_dim(spec: str) -> tuple[str, list[int]]:
    """``"@x 1 3 224 224"`` -> ``("x", [1, 3, 224, 224])``; a UsageError saying the form otherwise."""
    parts = spec.split()
    usage = f"bad --input-dim {spec!r}: give @NAME then its dims, e.g. --input-dim @x 1 3 224 224"
    if len(parts) < 2 or not parts[0].startswith("@") or len(parts[0]) < 2:
        raise UsageError(usage)
    try:
        dims = [int(p) for p in parts[1:]]
    except ValueError:
        raise UsageError(usage) from None
    if any(d < 1 for d in dims):
        raise UsageError(f"bad --input-dim {spec!r}: every dim must be 1 or more")
    return parts[0][1:], dims


def resolve_shapes(inputs: Sequence[tuple[str, Sequence[Any]]], batch: int,
                   input_dims: Mapping[str, Sequence[int]], path: Path) -> dict[str, list[int]]:
    """Each input's concrete shape: ``--input-dim`` as given; else the declared shape with its first
    symbolic/unknown dim set to ``batch``; any other unknown dim is an error that says to use --input-dim."""
    names = [n for n, _ in inputs]
    for name in input_dims:
        if name not in names:
            raise UsageError(f"--input-dim @{name}: the model has no input {name!r}; its inputs are "
                             f"{', '.join('@' + n for n in names)}")
    shapes: dict[str, list[int]] = {}
    for name, declared in inputs:
        if name in input_dims:
            given = list(input_dims[name])
            if declared is not None and len(declared) != len(given):
                raise UsageError(f"--input-dim @{name}: the model declares {len(declared)} dims "
                                 f"({_dims_text(declared)}), got {len(given)}")
            fixed = [(i, d) for i, d in enumerate(declared or []) if isinstance(d, int) and d > 0 and d != given[i]]
            if fixed:
                i, d = fixed[0]
                raise UsageError(f"--input-dim @{name}: dim {i} is fixed at {d} in the model, got {given[i]}")
            shapes[name] = given
            continue
        shape: list[int] = []
        batch_used = False
        for i, d in enumerate(declared or []):
            if isinstance(d, int) and d > 0:
                shape.append(d)
            elif not batch_used:
                shape.append(batch)
                batch_used = True
            else:
                raise TraceError(path, f"input {name!r} has dim {i} unknown ({d!r}: {_dims_text(declared)}); "
                                       f"give its shape with --input-dim @{name} D0 D1 ...")
        shapes[name] = shape
    return shapes


def _dims_text(dims: Sequence[Any] | None) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in (dims or [])) + "]"


_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int8)": "int8", "tensor(int16)": "int16", "tensor(int32)": "int32", "tensor(int64)": "int64",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def random_inputs(session_inputs: Sequence[Any], shapes: Mapping[str, list[int]], seed: int,
                  path: Path) -> dict[str, Any]:
    """Random values of each input's declared type: floats ~ N(0, 1); integers in [0, 4) (small, so that an
    index input stays in range of most tables); bools at random."""
    np, _, _ = _modules()
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for inp in session_inputs:
        dtype = _ORT_TYPES.get(inp.type)
        if dtype is None:
            raise TraceError(path, f"input {inp.name!r} is of type {inp.type}, which opscope perf cannot "
                                   "make random values for")
        shape = shapes[inp.name]
        if dtype == "bool":
            feeds[inp.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype.startswith("float"):
            feeds[inp.name] = rng.standard_normal(size=shape).astype(dtype)
        else:
            feeds[inp.name] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def _inputs_of(session: Any) -> list[tuple[str, Any]]:
    return [(i.name, i.shape) for i in session.get_inputs()]


# --- the profiled run -----------------------------------------------------------------------------

def run_perf(path: Path, options: PerfOptions, output: Path, force: bool = False) -> PerfRun:
    """Run the model ``options.warmup`` + ``options.iterations`` times under ORT's profiler; write the profile
    of the measured runs to ``output`` (never over an existing file without ``force``)."""
    provider = check_provider(options.provider)
    model = load_model(path)
    if options.fp16:
        model = to_fp16(model, path)
    staging = Path(tempfile.mkdtemp(prefix="opscope-perf-"))
    try:
        session = _session(model, path, provider, str(staging / "profile"))
        shapes = resolve_shapes(_inputs_of(session), options.batch, options.input_dims, path)
        feeds = random_inputs(session.get_inputs(), shapes, options.seed, path)
        try:
            for _ in range(options.warmup + options.iterations):
                session.run(None, feeds)
        except Exception as exc:  # ORT's RuntimeException etc.: a shape it cannot run, an op that fails
            raise TraceError(path, f"ONNX Runtime failed to run it ({_first_line(exc)})") from None
        written = Path(session.end_profiling())
        text = drop_warmup(written.read_text(encoding="utf-8"), options.warmup)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_file(output, lambda stream: stream.write(text.encode("utf-8")), force)
    types = {i.name: i.type for i in session.get_inputs()}
    return PerfRun(output, provider, {n: (s, types[n]) for n, s in shapes.items()}, options.iterations,
                   options.warmup)


def drop_warmup(text: str, warmup: int) -> str:
    """ONNX Runtime's profile without the lines of its first ``warmup`` ``model_run`` s (the run and every
    event inside it). ORT writes one event per line; lines are kept as written, so the file stays ORT's."""
    if warmup <= 0:
        return text
    lines = text.splitlines()
    events: list[tuple[int, dict[str, Any]]] = []
    for i, line in enumerate(lines):
        body = line.strip().rstrip(",")
        if body.startswith("{"):
            try:
                events.append((i, json.loads(body)))
            except ValueError:
                continue
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for _, e in events
                  if e.get("name") == "model_run" and isinstance(e.get("ts"), int) and isinstance(e.get("dur"), int))
    spans = runs[:warmup]
    drop = {i for i, e in events if isinstance(e.get("ts"), int)
            and any(a <= e["ts"] <= b for a, b in spans)}
    kept = [line for i, line in enumerate(lines) if i not in drop]
    # the last event line must not end with a comma before the closing bracket
    event_lines = [i for i, line in enumerate(kept) if line.strip().startswith("{")]
    if event_lines:
        last = event_lines[-1]
        kept[last] = kept[last].rstrip().rstrip(",")
        for i in event_lines[:-1]:
            if not kept[i].rstrip().endswith(","):
                kept[i] = kept[i].rstrip() + ","
    return "\n".join(kept) + "\n"


# --- trace-eval -----------------------------------------------------------------------------------

def trace_eval(path: Path, options: PerfOptions) -> tuple[list[EvalOutput], pa.Table]:
    """Run the model once with every node output exposed; per node output (in graph order) what
    ``MIGRAPHX_TRACE_EVAL=2`` prints, and the same as numerics-dump rows (:data:`~opscope.analyses.numerics.SCHEMA`)."""
    np, onnx, _ = _modules()
    provider = check_provider(options.provider)
    model = load_model(path)
    if options.fp16:
        model = to_fp16(model, path)
    exposed = _expose_all(model, onnx)
    session = _session(exposed, path, provider, None)
    shapes = resolve_shapes(_inputs_of(session), options.batch, options.input_dims, path)
    feeds = random_inputs(session.get_inputs(), shapes, options.seed, path)
    names = [o.name for o in session.get_outputs()]
    try:
        values = dict(zip(names, session.run(names, feeds)))
    except Exception as exc:
        raise TraceError(path, f"ONNX Runtime failed to run it ({_first_line(exc)})") from None
    values.update(feeds)
    types = _initializer_types(exposed, onnx)
    outputs: list[EvalOutput] = []
    rows: list[dict[str, Any]] = []
    for index, node in enumerate(exposed.graph.node):
        for out_index, name in enumerate(node.output):
            if not name or name not in values:
                continue
            array = np.asarray(values[name])
            item = _eval_output(np, index, node, out_index, name, array, values, types)
            outputs.append(item)
            rows.append(_dump_row(np, item, array))
    return outputs, pa.Table.from_pylist(rows, schema=SCHEMA)


def _expose_all(model: Any, onnx: Any) -> Any:
    """A copy of ``model`` whose every node output is also a graph output (types from shape inference where it
    finds them; ORT takes an output without one)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(exposed)
    except Exception:  # a model shape inference cannot handle still runs: outputs go without types
        inferred = exposed
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    present = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name and name not in present:
                info = known.get(name)
                if info is None:
                    info = onnx.helper.make_empty_tensor_value_info(name)
                exposed.graph.output.append(info)
                present.add(name)
    return exposed


def _initializer_types(model: Any, onnx: Any) -> dict[str, str]:
    """Weights as ``float32[4x3x3x3]`` (they are no node's output, so the run does not return them)."""
    out = {}
    for t in model.graph.initializer:
        try:
            dtype = str(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        except (KeyError, ValueError, TypeError):
            dtype = "?"
        out[t.name] = f"{dtype}[{'x'.join(map(str, t.dims)) or 'scalar'}]"
    return out


def _eval_output(np: Any, index: int, node: Any, out_index: int, name: str, array: Any,
                 values: Mapping[str, Any], types: Mapping[str, str]) -> EvalOutput:
    flat = array.reshape(-1)
    numeric = flat.dtype.kind in "fiub"
    classes: list[str] = []
    first_bad: int | None = None
    first_kind: str | None = None
    stats: dict[str, float | None] = dict.fromkeys(("min", "max", "mean", "std"))
    nan = inf = 0
    if numeric and flat.size:
        wide = flat.astype(np.float64)
        isnan, isinf = np.isnan(wide), np.isinf(wide)
        nan, inf = int(isnan.sum()), int(isinf.sum())
        finite = wide[~(isnan | isinf)]
        zero = finite == 0
        tiny = np.finfo(flat.dtype).tiny if flat.dtype.kind == "f" else 0.0
        subnormal = (~zero) & (np.abs(finite) < tiny)
        for label, present in (("normal", bool(((~zero) & ~subnormal).any())), ("zero", bool(zero.any())),
                               ("nan", nan > 0), ("inf", inf > 0), ("subnormal", bool(subnormal.any()))):
            if present:
                classes.append(label)
        if finite.size:
            stats = {"min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean()),
                     "std": float(finite.std())}
        if nan or inf:
            bad = np.flatnonzero(isnan | isinf)
            first_bad = int(bad[0])
            first_kind = "nan" if isnan[first_bad] else "inf"
    shown = flat.tolist() if flat.size <= 2 * EDGE else [*flat[:EDGE].tolist(), *flat[-EDGE:].tolist()]
    inputs = [(i, _type_text(values[i]) if i in values else types.get(i, "?")) for i in node.input if i]
    return EvalOutput(index=index, node=node.name or name, op=node.op_type, output_index=out_index, output=name,
                      inputs=inputs, dtype=str(flat.dtype), shape=list(array.shape), numel=int(flat.size),
                      classes=classes, values=shown, elided=flat.size > 2 * EDGE,
                      nan_count=nan, inf_count=inf, first_nonfinite=first_bad, first_nonfinite_kind=first_kind,
                      **stats)


def _type_text(value: Any) -> str:
    shape = "x".join(map(str, getattr(value, "shape", ()))) or "scalar"
    return f"{getattr(value, 'dtype', '?')}[{shape}]"


def _dump_row(np: Any, item: EvalOutput, array: Any) -> dict[str, Any]:
    flat = array.reshape(-1)
    numeric = flat.dtype.kind in "fiub" and flat.size > 0
    wide = flat.astype(np.float64) if numeric else None
    k = min(SAMPLE_SIZE, flat.size)
    sample = wide[np.arange(k) * flat.size // k].tolist() if wide is not None and k else None
    return {"index": item.index, "op": item.op, "module": item.node, "backward": False,
            "output_index": item.output_index, "shape": "x".join(map(str, item.shape)) or "scalar",
            "dtype": item.dtype, "numel": item.numel, "min": item.min, "max": item.max, "mean": item.mean,
            "std": item.std, "nan_count": item.nan_count if numeric else None,
            "inf_count": item.inf_count if numeric else None,
            "first5": wide[:EDGE].tolist() if wide is not None else None,
            "last5": wide[-EDGE:].tolist() if wide is not None else None, "sample": sample, "inputs": []}


# --- files ----------------------------------------------------------------------------------------

def free_name(path: Path, suffix: str) -> Path:
    """``path`` (whose name ends in ``suffix``) if nothing is there, else ``STEM-1SUFFIX``, ``STEM-2SUFFIX``...: a
    default name never replaces an earlier run's file (a name given with -o is refused instead, unless --force)."""
    if not path.exists() and not path.is_symlink():
        return path
    stem = path.name.removesuffix(suffix)
    for i in range(1, 10_000):
        candidate = path.with_name(f"{stem}-{i}{suffix}")
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
    raise UsageError(f"{path}: and 9,999 numbered names beside it are taken; give a name with -o")


def write_dump(table: pa.Table, path: Path, force: bool, metadata: Mapping[str, Any]) -> int:
    """Write node outputs as a numerics dump (``opscope numerics-diff`` reads it); never over a file without
    ``force``."""
    import pyarrow.parquet as pq

    meta = {"kind": "numerics", "version": 1, "source": "opscope perf --trace-eval", **metadata}
    table = table.replace_schema_metadata({b"opscope": json.dumps(meta, default=str).encode()})
    return write_file(path, lambda stream: pq.write_table(table, stream), force)
