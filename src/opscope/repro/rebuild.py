"""From a case's recorded inputs to a call of a registered overload with typed values, or the reason there is none.

The trace records each op's inputs positionally: ``Input type`` (a dtype for a tensor, ``Scalar``,
``ScalarList``, ``TensorList``, ``GenericList`` or ``""`` for None), ``Input Dims``, ``Input Strides`` and
``Concrete Inputs`` (scalars and lists as text). The overload is the first registered schema whose arguments
accept every recorded input; values are parsed from the text by strict patterns (never evaluated) into the types
of :mod:`opscope.repro.values`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import zip_longest

from opscope.repro import registry
from opscope.repro.values import LAYOUTS, MEMORY_FORMATS, SCALAR_TYPES, T, TorchAttr, Value, contiguous_strides

#: Kineto's ``Input type`` of a tensor (the C++ type name of its dtype) -> torch dtype name.
RECORDED_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "long long": "int64", "int64_t": "int64", "int": "int32",
    "short int": "int16", "short": "int16", "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "unsigned short": "uint16", "unsigned int": "uint32", "unsigned long": "uint64",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
}
_SCALAR_TAGS = ("Scalar", "Int", "Bool", "Double", "Float", "SymInt")
_LIST_TAGS = ("ScalarList", "GenericList", "IntList", "DoubleList", "BoolList")
#: Namespaces whose ops need more than this process to run (a process group, a serving engine's state).
_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_dtensor")
#: The largest size or stride accepted (a bigger one is corrupt, or would not fit any memory).
_MAX_EXTENT = 1 << 48
#: Recorded values that may be shown in a message (anything else is shown as "?").
_SHOWABLE = re.compile(r"[A-Za-z0-9_:.<> ]{1,80}")

_INT = re.compile(r"-?[0-9]{1,19}")
_FLOAT = re.compile(r"-?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]{1,3})?|-?inf|nan")
_LIST = re.compile(r"\[\s*(.*?)\s*\]", re.DOTALL)


class NotRebuiltError(Exception):
    """A case that cannot be rebuilt here; ``str()`` is the reason, for the table and cases.json."""


@dataclass(frozen=True)
class Param:
    """One argument of the call as the script writes it."""

    name: str
    type: str  # the schema's type
    value: Value
    note: str | None = None  # e.g. "not recorded: the schema's default"


@dataclass(frozen=True)
class Call:
    op: str
    overload: str
    args: tuple[Param, ...]
    kwargs: tuple[Param, ...]
    notes: tuple[str, ...]

    def params(self) -> tuple[Param, ...]:
        return self.args + self.kwargs

    def tensors(self) -> list[T]:
        found: list[T] = []

        def walk(value: Value) -> None:
            if isinstance(value, T):
                found.append(value)
            elif isinstance(value, tuple):
                for v in value:
                    walk(v)

        for p in self.params():
            walk(p.value)
        return found

    def storage_bytes(self) -> int:
        return sum(t.storage_elements() * _itemsize(t.dtype) for t in self.tensors())


def rebuild(op: str, dims: list | None, strides: list | None, types: list | None, concrete: list | None,
            max_bytes: int | None = None) -> Call:
    """The call of ``op`` with these recorded inputs (raises :class:`NotRebuiltError` with the reason)."""
    namespace = op.split("::", 1)[0] if registry.OP_NAME.fullmatch(op) else None
    if namespace is None:
        raise NotRebuiltError(_not_an_op(op))
    if namespace in _COLLECTIVE_NAMESPACES:
        raise NotRebuiltError("a collective: replaying it needs a process group of several ranks (not built)")
    found = registry.schemas(op)
    if found is None:
        raise NotRebuiltError(f"{_show(op)} is not registered in this torch ({registry.torch_version()}): a custom op "
                         "of a library not installed here, or from another torch version")
    if types is None or dims is None:
        raise NotRebuiltError("recorded without input shapes and types (profile with record_shapes=True)")
    if len(dims) != len(types):
        raise NotRebuiltError("the recorded Input Dims and Input type differ in length (a damaged record)")
    strides_recorded = strides is not None and len(strides) == len(dims)
    problems = []
    damaged: str | None = None
    for schema in found:
        try:
            call = _match(schema, dims, strides if strides_recorded else None, types,
                          concrete if concrete is not None and len(concrete) == len(dims) else None)
        except _DamagedError as exc:
            damaged = str(exc)
            continue
        except _MismatchError as exc:
            problems.append(str(exc))
            continue
        notes = list(call.notes)
        if not strides_recorded and call.tensors():
            notes.append("strides not recorded: tensors rebuilt contiguous")
        if concrete is None and any(p.note for p in call.params()):
            notes.append("scalar arguments not recorded (no Concrete Inputs in this trace): schema defaults used, "
                         "which may differ from the run")
        call = Call(call.op, call.overload, call.args, call.kwargs, tuple(notes))
        call = _bound_indices(call)
        if max_bytes is not None and call.storage_bytes() > max_bytes:
            raise NotRebuiltError(f"its inputs need {call.storage_bytes() / 2**30:.1f} GiB, more than --max-memory "
                             f"({max_bytes / 2**30:.1f} GiB)")
        return call
    if damaged is not None:  # what no overload can take: the record, not the overload, is the problem
        raise NotRebuiltError(f"{damaged} (a damaged record)")
    recorded = ", ".join(("None" if t == "" else _show(t)) if isinstance(t, str) else "?" for t in types)
    raise NotRebuiltError(f"no overload of {op} takes the recorded inputs ({recorded})"
                     + (f": {problems[0]}" if len(problems) == 1 else ""))


class _MismatchError(Exception):
    pass


class _DamagedError(_MismatchError):
    """Recorded sizes or strides no tensor can have (negative, beyond any memory, not integers)."""


def _match(schema: registry.Schema, dims: list, strides: list | None, types: list,
           concrete: list | None) -> Call:
    if len(types) > len(schema.arguments):
        raise _MismatchError(f"{len(types)} inputs recorded, {schema.overload} takes {len(schema.arguments)}")
    args: list[Param] = []
    kwargs: list[Param] = []
    notes: list[str] = []
    first_dtype = next((RECORDED_DTYPES[t] for t in types if isinstance(t, str) and t in RECORDED_DTYPES), "float32")
    missing = object()
    rows = zip_longest(schema.arguments, types, dims, strides or [], concrete or [], fillvalue=missing)
    for argument, rtype, rdims, rstrides, rvalue in rows:
        assert isinstance(argument, registry.Argument)
        if rtype is missing:  # fewer recorded than the schema has: only defaults may fill the rest
            if not argument.has_default:
                raise _MismatchError(f"argument {argument.name} not recorded")
            param = Param(argument.name, argument.type, _default(argument), "not recorded: the schema's default")
        else:
            param = _param(argument, rtype, rdims, None if rstrides is missing else rstrides,
                           None if rvalue is missing else rvalue, first_dtype, notes)
        (kwargs if argument.kwarg_only else args).append(param)
    return Call(schema.op, schema.overload, tuple(args), tuple(kwargs), tuple(notes))


def _param(argument: registry.Argument, rtype, rdims, rstrides, rvalue, first_dtype: str,
           notes: list[str]) -> Param:
    kind = argument.type
    base = kind[len("Optional["):-1] if kind.startswith("Optional[") else kind
    optional = kind.startswith("Optional[")
    if not isinstance(rtype, str):
        raise _MismatchError("a recorded type that is not text")
    if rtype in RECORDED_DTYPES:
        if base != "Tensor":
            raise _MismatchError(f"{argument.name} takes {kind}, a tensor was recorded")
        return Param(argument.name, kind, _tensor(rdims, rstrides, RECORDED_DTYPES[rtype], notes))
    if rtype == "" and not _nested(rdims):
        return _unrecorded(argument, optional or base == "Generator", f"{argument.name} ({kind}) was not recorded")
    if rtype == "TensorList" or (rtype in _LIST_TAGS and _nested(rdims)):
        if base not in ("List[Tensor]", "List[Optional[Tensor]]"):
            raise _MismatchError(f"{argument.name} takes {kind}, a list of tensors was recorded")
        nested_strides = rstrides if isinstance(rstrides, list) and len(rstrides) == len(rdims) else None
        items: list[Value] = []
        for i, sub in enumerate(rdims):
            if base == "List[Optional[Tensor]]" and sub == []:
                items.append(None)
                continue
            items.append(_tensor(sub, nested_strides[i] if nested_strides else None, first_dtype, notes))
        note = "the dtypes of a tensor list are not recorded: the op's first tensor dtype used"
        if note not in notes and items:
            notes.append(note)
        return Param(argument.name, kind, tuple(items))
    if rtype in _SCALAR_TAGS or rtype in _LIST_TAGS:
        if rvalue in (None, ""):
            return _unrecorded(argument, optional, f"the value of {argument.name} was not recorded")
        parse = _scalar if rtype in _SCALAR_TAGS else _scalar_list
        return Param(argument.name, kind, parse(argument.name, base, _text(rvalue)))
    raise _MismatchError(f"a recorded input of type {_show(rtype)} is not supported")


def _unrecorded(argument: registry.Argument, none_allowed: bool, problem: str) -> Param:
    """An argument whose value the trace did not record: None where the schema takes it, else the schema's default
    (said in the param's note), else a mismatch."""
    if none_allowed:
        return Param(argument.name, argument.type, None)
    if argument.has_default:
        return Param(argument.name, argument.type, _default(argument), "not recorded: the schema's default")
    raise _MismatchError(problem)


def _nested(dims) -> bool:
    return isinstance(dims, list) and len(dims) > 0 and all(isinstance(d, list) for d in dims)


def _text(value) -> str:
    if not isinstance(value, str):
        raise _MismatchError("a recorded value that is not text")
    return value.strip()


#: Said when a tensor's recorded strides are not one per dimension (an opaque tensor's, or a damaged record).
OTHER_RANK = "recorded strides of a tensor input that are not one per dimension: that input rebuilt contiguous"


def _tensor(dims, strides, dtype: str, notes: list[str] | None = None) -> T:
    if not isinstance(dims, list) or not all(type(n) is int and 0 <= n < _MAX_EXTENT for n in dims):
        raise _DamagedError("recorded tensor sizes that are not integers from 0 to 2**48")
    if isinstance(strides, list) and len(strides) == len(dims):
        if not all(type(n) is int and 0 <= n < _MAX_EXTENT for n in strides):
            # never contiguous in their place: the case would claim strides it does not have
            raise _DamagedError("recorded tensor strides that are not integers from 0 to 2**48")
        stride = tuple(strides)
    else:
        if strides is not None and notes is not None and OTHER_RANK not in notes:
            notes.append(OTHER_RANK)
        stride = contiguous_strides(dims)
    return T(tuple(dims), stride, dtype)


def _scalar(name: str, base: str, text: str, enums: bool = True) -> Value:
    """A recorded scalar as the type the schema takes."""
    if base == "bool":
        if text in ("True", "False"):
            return text == "True"
        if text in ("0", "1"):
            return text == "1"
        raise _MismatchError(f"{name} takes bool, {_show(text)} was recorded")
    if base in ("int", "SymInt"):
        if not _INT.fullmatch(text):
            raise _MismatchError(f"{name} takes int, {_show(text)} was recorded")
        number = int(text)
        if enums and name in ("dtype", "out_dtype", "scalar_type"):
            return _attr(SCALAR_TYPES, number, name)
        if enums and name == "memory_format":
            return _attr(MEMORY_FORMATS, number, name)
        if enums and name == "layout":
            return _attr(LAYOUTS, number, name)
        return number
    if base == "float":
        if _INT.fullmatch(text) or _FLOAT.fullmatch(text):
            return float(text)
        raise _MismatchError(f"{name} takes float, {_show(text)} was recorded")
    if base in ("number", "Scalar"):
        if text in ("True", "False"):
            return text == "True"
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
        raise _MismatchError(f"{name} takes a number, {_show(text)} was recorded")
    raise _MismatchError(f"{name} takes {base}, a scalar was recorded")


def _scalar_list(name: str, base: str, text: str) -> tuple:
    item_type = {"List[int]": "int", "List[SymInt]": "int", "List[float]": "float", "List[bool]": "bool",
                 "List[number]": "number", "List[Scalar]": "number"}.get(base)
    if item_type is None:
        raise _MismatchError(f"{name} takes {base}, a list of scalars was recorded")
    match = _LIST.fullmatch(text)
    if match is None:
        raise _MismatchError(f"{name}: {_show(text)} is not a list")
    inner = match.group(1)
    if not inner:
        return ()
    items = [part.strip() for part in inner.split(",")]
    if len(items) > 4096:
        raise _MismatchError(f"{name}: a list of {len(items)} values")
    return tuple(_scalar(name, item_type, item, enums=False) for item in items)


def _attr(table: dict[int, str], number: int, name: str) -> TorchAttr:
    if number not in table:
        raise _MismatchError(f"{name}={number} is not a value opscope knows")
    return TorchAttr(table[number])


def _default(argument: registry.Argument) -> Value:
    value = argument.default
    base = argument.type[len("Optional["):-1] if argument.type.startswith("Optional[") else argument.type
    if value is None or isinstance(value, bool | float | str):
        return value
    if isinstance(value, int):
        if base in ("int", "SymInt") and argument.name in ("dtype", "memory_format", "layout"):
            table = {"dtype": SCALAR_TYPES, "memory_format": MEMORY_FORMATS, "layout": LAYOUTS}[argument.name]
            return _attr(table, value, argument.name)
        return value
    if isinstance(value, list) and all(isinstance(v, bool | int | float) for v in value):
        return tuple(value)
    raise _MismatchError(f"the default of {argument.name} cannot be written")


# --- integer inputs that index something ---------------------------------------------------------------------

#: op base name -> (index argument, what bounds it): "rows:<arg>" (size 0 of that tensor), "dim:<arg>" (the
#: size of <arg> along the ``dim`` argument), "classes:<arg>" (size 1 of <arg>, or size 0 when 1-D),
#: "value:<arg>" (an int argument), "each:<arg>" (a list of index tensors, one per dimension of <arg>).
_INDEX_BOUNDS = {
    "embedding": ("indices", "rows:weight"),
    "embedding_bag": ("indices", "rows:weight"),
    "_embedding_bag": ("indices", "rows:weight"),
    "_embedding_bag_forward_only": ("indices", "rows:weight"),
    "embedding_dense_backward": ("indices", "value:num_weights"),
    "embedding_backward": ("indices", "value:num_weights"),
    "gather": ("index", "dim:self"),
    "scatter": ("index", "dim:self"),
    "scatter_": ("index", "dim:self"),
    "scatter_add": ("index", "dim:self"),
    "scatter_add_": ("index", "dim:self"),
    "scatter_reduce": ("index", "dim:self"),
    "index_select": ("index", "dim:self"),
    "index_add": ("index", "dim:self"),
    "index_add_": ("index", "dim:self"),
    "index_copy": ("index", "dim:self"),
    "index_copy_": ("index", "dim:self"),
    "index_fill": ("index", "dim:self"),
    "index_fill_": ("index", "dim:self"),
    "take_along_dim": ("indices", "dim:self"),
    "nll_loss": ("target", "classes:self"),
    "nll_loss_forward": ("target", "classes:self"),
    "nll_loss2d_forward": ("target", "classes:self"),
    "nll_loss_nd": ("target", "classes:self"),
    "cross_entropy_loss": ("target", "classes:self"),
    "one_hot": ("self", "value:num_classes"),
    "index": ("indices", "each:self"),
    "_index_put_impl_": ("indices", "each:self"),
    "index_put": ("indices", "each:self"),
    "index_put_": ("indices", "each:self"),
}
_INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64")


def _bound_indices(call: Call) -> Call:
    """Integer tensors that index something get values below what they index (``T.high``)."""
    rule = _INDEX_BOUNDS.get(call.op.split("::", 1)[1])
    if rule is None:
        return call
    index_name, bound = rule
    how, source_name = bound.split(":")
    by_name = {p.name: p.value for p in call.params()}
    source = by_name.get(source_name)

    def bounded(value: Value, high: int | None) -> Value:
        if isinstance(value, T) and value.dtype in _INTEGER_DTYPES and high is not None and high > 0:
            return T(value.size, value.stride, value.dtype, high)
        return value

    def rewrite(p: Param) -> Param:
        if p.name != index_name:
            return p
        if how == "each" and isinstance(p.value, tuple) and isinstance(source, T):
            size = source.size
            items = tuple(bounded(v, size[i] if i < len(size) else None) for i, v in enumerate(p.value))
            return Param(p.name, p.type, items, p.note)
        high: int | None = None
        if how == "rows" and isinstance(source, T) and source.size:
            high = source.size[0]
        elif how == "value" and isinstance(source, int) and not isinstance(source, bool):
            high = source
        elif how == "classes" and isinstance(source, T) and source.size:
            high = source.size[1] if len(source.size) > 1 else source.size[0]
        elif how == "dim" and isinstance(source, T) and isinstance(by_name.get("dim"), int):
            dim = by_name["dim"]
            assert isinstance(dim, int)
            if -len(source.size) <= dim < len(source.size):
                high = source.size[dim]
        return Param(p.name, p.type, bounded(p.value, high), p.note)

    return Call(call.op, call.overload, tuple(rewrite(p) for p in call.args), tuple(rewrite(p) for p in call.kwargs),
                call.notes)


def _itemsize(dtype: str) -> int:
    if dtype in ("float64", "int64", "complex64", "uint64"):
        return 8
    if dtype == "complex128":
        return 16
    if dtype in ("float32", "int32", "uint32"):
        return 4
    if dtype in ("float16", "bfloat16", "int16", "uint16"):
        return 2
    return 1


def _not_an_op(op: str) -> str:
    if op.startswith("triton_"):
        return ("a Triton kernel that torch.compile generated: its source is not in the trace (reproduce the "
                "compiled model's region instead; not built)")
    if op.startswith(("CompiledFunction", "Torch-Compiled Region")):
        return "a torch.compile region, not one op (not rebuilt)"
    if op == "record_param_comms":
        return "a collective (record_param_comms): replaying it needs a process group of several ranks (not built)"
    if re.fullmatch(r"[A-Z][A-Za-z0-9]*Backward\d*", op):  # torch's autograd node: ConvolutionBackward0
        return (f"a PyTorch autograd node ({_show(op)}): its work is the ops recorded inside it, each reproduced on "
                "its own (not rebuilt)")
    if re.fullmatch(r"_?[A-Z][A-Za-z0-9]*", op):
        shown = op if len(op) <= 80 else f"{op[:60]}... ({len(op)} characters)"  # a status is one line
        return (f"a TensorFlow op ({shown}): with --as torch opscope writes the PyTorch equivalent where there is "
                "one")
    return f"not a PyTorch op ({_show(op)}): only registered framework ops (namespace::name) can be replayed"


def _show(text: str) -> str:
    """Recorded text safe to put in a message (letters, digits and a few signs), else '?'."""
    return text if isinstance(text, str) and _SHOWABLE.fullmatch(text) else "?"


# --- a call from typed values (the TensorFlow mapping gives them) --------------------------------------------

def call_from_values(op: str, args: tuple, kwargs: dict, notes: tuple[str, ...] = ()) -> Call:
    """The call of the first overload of ``op`` that takes these typed values (raises NotRebuiltError)."""
    found = registry.schemas(op)
    if found is None:
        raise NotRebuiltError(f"{_show(op)} is not registered in this torch ({registry.torch_version()})")
    for schema in found:
        positional = [a for a in schema.arguments if not a.kwarg_only]
        keyword = {a.name: a for a in schema.arguments if a.kwarg_only}
        if len(args) > len(positional) or any(k not in keyword and k not in {a.name for a in positional}
                                              for k in kwargs):
            continue
        params: list[Param] = []
        ok = True
        for i, argument in enumerate(schema.arguments):
            if i < len(args) and not argument.kwarg_only:
                value, given = args[i], True
            elif argument.name in kwargs:
                value, given = kwargs[argument.name], True
            else:
                value, given = None, False
            if not given:
                if not argument.has_default:
                    ok = False
                    break
                try:
                    params.append(Param(argument.name, argument.type, _default(argument)))
                except _MismatchError:
                    ok = False
                    break
                continue
            if not _accepts(argument.type, value):
                ok = False
                break
            params.append(Param(argument.name, argument.type, value))
        if ok:
            names = {a.name for a in schema.arguments if a.kwarg_only}
            return _bound_indices(Call(op, schema.overload, tuple(p for p in params if p.name not in names),
                                       tuple(p for p in params if p.name in names), tuple(notes)))
    raise NotRebuiltError(f"no overload of {_show(op)} takes the mapped arguments")


def _accepts(kind: str, value: Value) -> bool:
    """Whether a schema type takes a typed value."""
    optional = kind.startswith("Optional[")
    base = kind[len("Optional["):-1] if optional else kind
    if value is None:
        return optional
    if base == "Tensor":
        return isinstance(value, T)
    if base == "bool":
        return isinstance(value, bool)
    if base in ("int", "SymInt"):
        return isinstance(value, int | TorchAttr) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, float | int) and not isinstance(value, bool)
    if base in ("number", "Scalar"):
        return isinstance(value, bool | int | float)
    if base.startswith("List[") and isinstance(value, tuple | list):
        item = base[len("List["):-1]
        return all(_accepts(item, v) for v in value)
    return False
