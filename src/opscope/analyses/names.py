"""Readable names: demangled C++ kernel names, their short forms, and the Python API behind an op.

Every function that takes a column works on its distinct values (the dictionary), not on its rows:
a trace has millions of kernel launches but a few hundred kernel names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from importlib import resources

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.model.derive import LONG_NAME_CHARS

_MEMORY_NAME = re.compile(r"^(Memcpy|Memset)\b")
#: What a compiler appends to a function it cloned or split: ROCm's kernel descriptor (``[clone .kd]``), GCC's
#: ``[clone .cold]`` and ``[clone .isra.0]``. Not part of the function's name: the short form leaves it out (else
#: every ROCm kernel's short form would be ``[clone .kd]``, the last word of its demangled name).
_CLONE_SUFFIX = re.compile(r"(?:\s*\[clone \.[^\[\]]*\])+$")
#: Tensile (rocBLAS/hipBLASLt) GEMM kernels: the problem type, macro tile and matrix instruction, then
#: dozens of tuning parameters (``..._MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_...``) that the short form drops.
_TENSILE = re.compile(r"^(Cijk_\w+?_MT\d+x\d+x\d+(?:_MI\d+(?:x\d+)+)?)_\w+$")
#: Checked first: on a name that is not all word characters the lazy ``\w+?`` above would retry at every ``_MT``.
_TENSILE_SHAPE = re.compile(r"Cijk_\w+")
_TF_OP = re.compile(r"^[A-Z][A-Za-z0-9]*$")


# --- demangling ------------------------------------------------------------------------------------

def demangle(name: str) -> str:
    """The demangled C++ name (``_ZN2at6native...`` -> ``void at::native::...``); other names unchanged, and so are
    names longer than ``LONG_NAME_CHARS`` (no real kernel name comes near; the model counts them in a warning)."""
    if not name.startswith("_Z") or len(name) > LONG_NAME_CHARS:
        return name
    hit = _DEMANGLED.get(name)
    return hit if hit is not None else demangle_all([name])[name]


def demangle_all(names: list[str]) -> dict[str, str]:
    """``{name: demangled}`` for these names, each demangled once.

    The C++ runtime's own ``__cxa_demangle`` (through ``cxxfilt``) does the work. Names it rejects
    are given, in one batch, to the ``c++filt`` program when the machine has it: binutils often knows
    newer manglings than the installed C++ runtime (``DF16b``, ``std::bfloat16_t``, came with GCC 13).
    A name neither can read (or one that is not mangled) is kept as it is.
    """
    out: dict[str, str] = {}
    failed: list[str] = []
    demangler = _demangler()
    for name in names:
        if name in out:
            continue
        out[name] = name
        if not name.startswith("_Z") or len(name) > LONG_NAME_CHARS:
            continue
        hit = _DEMANGLED.get(name)
        if hit is not None:
            out[name] = hit
            continue
        try:
            if demangler is None:
                raise LookupError("no cxxfilt")
            out[name] = demangler(name)
        except Exception:
            if "\n" not in name and len(name) < _MAX_MANGLED:
                failed.append(name)
    if failed:
        out.update(_cxxfilt_program(failed))
    if len(_DEMANGLED) > _CACHE_LIMIT:
        _DEMANGLED.clear()
    _DEMANGLED.update((k, v) for k, v in out.items() if k.startswith("_Z"))
    return out


_MAX_MANGLED = 1 << 16
_CACHE_LIMIT = 1 << 17
#: mangled name -> demangled (or itself when unreadable): each name is demangled once per process
_DEMANGLED: dict[str, str] = {}


@lru_cache(maxsize=1)
def _demangler() -> Callable[[str], str] | None:
    try:
        import cxxfilt
    except ImportError:
        return None
    return cxxfilt.demangle


def _cxxfilt_program(names: list[str]) -> dict[str, str]:
    """Names demangled by the ``c++filt`` program (one process for all); {} without it."""
    import shutil
    import subprocess

    program = shutil.which("c++filt")
    if program is None:
        return {}
    try:
        done = subprocess.run([program], input="\n".join(names) + "\n", capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError, UnicodeError):
        return {}
    lines = done.stdout.split("\n")
    if done.returncode != 0 or len(lines) < len(names):
        return {}
    return {n: d for n, d in zip(names, lines) if d and d != n}


# --- short names -----------------------------------------------------------------------------------

def short_name(name: str) -> str:
    """The function's qualified name without return type, template arguments and parameter list.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    -> ``at::native::vectorized_elementwise_kernel``. Mangled names are demangled first. Names without
    ``<`` or ``(`` (``volta_sgemm_128x64_nn``) and memory copies (``Memcpy HtoD (Pageable -> Device)``)
    are kept as they are, but for Tensile GEMMs, cut after their tile shape. Wrappers named by what they
    wrap keep their first type argument (``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>``).
    A name longer than ``LONG_NAME_CHARS`` is not demangled: its short form is its first ``_LONG_NAME_SHOWN``
    characters and a note that says so. Linear in the name's length.
    """
    if len(name) > LONG_NAME_CHARS:
        return f"{name[:_LONG_NAME_SHOWN]}… ({len(name):,} characters, not demangled)"
    name = _CLONE_SUFFIX.sub("", demangle(name).strip())
    symbol = name.removesuffix(".kd")  # ROCm's kernel descriptor symbol of a Tensile kernel
    tensile = _TENSILE.match(symbol) if _TENSILE_SHAPE.fullmatch(symbol) else None
    if tensile:
        return tensile.group(1)
    if ("<" not in name and "(" not in name) or _MEMORY_NAME.match(name):
        return name
    head = _drop_parameters(name)
    text = _drop_templates(head)
    # The return type (and qualifiers) are separated by spaces outside parentheses: keep the last word.
    words = _split_top_level_spaces(text)
    short = words[-1] if words else text
    if short and _GENERIC_ENTRY.search(short):
        inner = _first_type_argument(head, short)
        if inner:
            return f"{short}<{inner}>"
    return short or name


_LONG_NAME_SHOWN = 200

#: Entry points that only wrap the real kernel, named by their first type argument
#: (``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>``, ``ck_tile::kentry<1, Fwd<...>>``).
_GENERIC_ENTRY = re.compile(r"(^|::)(Kernel2?|kentry|device_kernel)$")
_NUMBER_ARGUMENT = re.compile(r"^(\([\w: ]+\))?-?\d[\w.]*$|^(true|false)$")


def _first_type_argument(head: str, short: str) -> str | None:
    """The short form of the first template argument of ``short`` that is a type, not a number."""
    at = head.rfind(short + "<")
    if at < 0:
        return None
    args: list[str] = []
    depth, paren, start = 0, 0, at + len(short) + 1
    for i in range(start, len(head)):
        c = head[i]
        if c in "([{":
            paren += 1
        elif c in ")]}":
            paren -= 1
        elif paren == 0 and c == "<":
            depth += 1
        elif paren == 0 and c == ">" and head[i - 1] != "-":
            if depth == 0:
                args.append(head[start:i])
                break
            depth -= 1
        elif paren == 0 and depth == 0 and c == ",":
            args.append(head[start:i])
            start = i + 1
    for arg in args:
        arg = arg.strip()
        if arg and not _NUMBER_ARGUMENT.match(arg):
            words = _split_top_level_spaces(_drop_templates(arg))
            return words[-1] if words else None
    return None


def _drop_parameters(name: str) -> str:
    """Cut the trailing ``(...)`` parameter list (matched on parentheses only: ``>`` may appear inside)."""
    end = len(name)
    while end and name[end - 1] == " ":
        end -= 1
    for qualifier in (" const", " volatile", " &&", " &"):
        if name[:end].endswith(qualifier):
            end -= len(qualifier)
    if end == 0 or name[end - 1] != ")":
        return name[:end]
    depth = 0
    for i in range(end - 1, -1, -1):
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return name[:i] if i else name[:end]
    return name[:end]


def _drop_templates(text: str) -> str:
    """Remove ``<...>`` groups. Inside parentheses opened within the current group, ``<`` and ``>`` are
    comparisons (``enable_if<((8)>(0)), void>``), not brackets; ``->`` and ``operator<`` are not either."""
    out: list[str] = []
    angle = 0
    parens: list[int] = []  # the template depth at which each open parenthesis started
    for i, c in enumerate(text):
        literal = False
        if c == "(":
            parens.append(angle)
            literal = True
        elif c == ")":
            if parens:
                parens.pop()
            literal = True
        elif c in "<>" and parens and parens[-1] == angle:
            literal = True  # a comparison inside parentheses
        elif c == "<" and not _is_operator_at(text, i):
            angle += 1
        elif c == ">" and angle and not (i and text[i - 1] == "-"):
            angle -= 1
        else:
            literal = True
        if literal and angle == 0:
            out.append(c)
    return "".join(out)


def _is_operator_at(text: str, i: int) -> bool:
    """``operator<`` / ``operator<<``: a ``<`` that belongs to the function's name, not a template. Looks back at most
    one ``<`` (no operator has more), so a name of many ``<`` is not scanned again at each one."""
    if i and text[i - 1] == "<":
        i -= 1
    return text.endswith("operator", 0, i)


def _split_top_level_spaces(text: str) -> list[str]:
    words: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth = max(0, depth - 1)
        elif c == " " and depth == 0:
            if i > start:
                words.append(text[start:i])
            start = i + 1
    if start < len(text):
        words.append(text[start:])
    return words


# --- the Python API of an op -----------------------------------------------------------------------

@lru_cache(maxsize=1)
def _api_table() -> dict:
    """The generated table (``data/python_api.json``, see ``tools/gen_python_api.py``); empty if it is missing."""
    try:
        text = resources.files("opscope.analyses").joinpath("data/python_api.json").read_text()
        data = json.loads(text)
    except (OSError, ValueError, ModuleNotFoundError):
        return {"aten": {}, "tf": {}, "tf_raw_ops": frozenset()}
    data["tf_raw_ops"] = frozenset(data.get("tf_raw_ops", ()))
    return data


def python_api(op: str, framework: str | None = None) -> str | None:
    """The Python function a user calls that records this op, or None.

    ``aten::conv2d`` -> ``torch.nn.functional.conv2d``, ``aten::addmm`` -> ``torch.addmm``,
    ``aten::add_`` -> ``torch.Tensor.add_``. TensorFlow op types (``MatMul``, ``Conv2DBackpropInput``)
    map to the public function where TensorFlow has one for the op (``tf.matmul``), else to
    ``tf.raw_ops.<Op>``; they are looked up only when ``framework`` is ``"tensorflow"`` or unknown (None),
    so that a CamelCase annotation in a PyTorch trace, or an ONNX op type, is not taken for a TF op.
    """
    table = _api_table()
    if op.startswith("aten::"):
        base = op[len("aten::"):].split(".", 1)[0]
        return table["aten"].get(base)
    if framework not in (None, "tensorflow"):
        return None
    if _TF_OP.match(op) and op in table["tf_raw_ops"]:
        return table["tf"].get(op) or f"tf.raw_ops.{op}"
    return None


_FRAMEWORKS = {"pytorch": "pytorch", "kineto": "pytorch", "torch": "pytorch", "tensorflow": "tensorflow",
               "tf": "tensorflow", "xprof": "tensorflow", "onnxruntime": "onnxruntime", "ort": "onnxruntime",
               "migraphx": "migraphx", "migraphx-driver perf": "migraphx", "migraphx_trace_eval": "migraphx"}


def framework_of(metadata: dict) -> str | None:
    """The framework that wrote the trace, from the reader's ``tool`` (None when the file does not say)."""
    return _FRAMEWORKS.get(str(metadata.get("tool") or "").lower())


# --- on columns ----------------------------------------------------------------------------------

def map_distinct(values: pa.Array | pa.ChunkedArray, fn: Callable[[str], str | None],
                 prepare: Callable[[list[str]], dict[str, str]] | None = None, *, encoded: bool = False) -> pa.Array:
    """``fn`` applied to each distinct string of ``values`` once; the result has one value per row.

    ``prepare`` (e.g. :func:`demangle_all`) sees all distinct values first, in one call, so that what it
    caches (demangled names) is computed in one batch before ``fn`` runs on each value. ``encoded``: the result
    as a dictionary array whose values are distinct (rows equal as strings have equal codes, so grouping on it
    groups the strings), not a copy of each row's string.
    """
    values = combined(values)
    if pa.types.is_dictionary(values.type):
        dictionary, indices = values.dictionary, values.indices
    else:
        codes = pc.dictionary_encode(values)
        dictionary, indices = codes.dictionary, codes.indices
    distinct = dictionary.to_pylist()
    if prepare is not None:
        prepare([v for v in distinct if v is not None])
    mapped = pa.array([None if v is None else fn(v) for v in distinct], pa.string())
    if encoded:  # two names may map to one string: one code for it
        distinct_mapped = pc.dictionary_encode(mapped)
        return pa.DictionaryArray.from_arrays(pc.take(distinct_mapped.indices, indices), distinct_mapped.dictionary)
    return pc.take(mapped, indices)


def maps_to_value(values: pa.Array | pa.ChunkedArray, fn: Callable[[str], str | None]) -> pa.Array:
    """Per row, whether ``fn`` gives its string a value (not None): ``pc.is_valid(map_distinct(values, fn))`` without
    a string per row (a take of ~2 M strings cost more than everything else the caller did)."""
    return pc.is_valid(map_distinct(values, fn, encoded=True))


def demangled(values: pa.Array | pa.ChunkedArray, *, encoded: bool = False) -> pa.Array:
    return map_distinct(values, demangle, prepare=demangle_all, encoded=encoded)


def short_names(values: pa.Array | pa.ChunkedArray, *, encoded: bool = False) -> pa.Array:
    return map_distinct(values, short_name, prepare=demangle_all, encoded=encoded)


def distinct_short_names(values: pa.Array | pa.ChunkedArray, *, encoded: bool = False) -> pa.Array:
    """Short names that still tell different names apart (:func:`distinct_forms` of the distinct values)."""
    values = combined(values)
    shown = distinct_forms([v for v in pc.unique(values).to_pylist() if v is not None])
    return map_distinct(values, lambda v: shown.get(v, v), encoded=encoded)


def distinct_forms(names: list[str]) -> dict[str, str]:
    """``{name: shown}``: each name's short form, unless another of ``names`` that is a different kernel has the same
    one: then those keep their template arguments (``k<float, 5ul>`` and ``k<float, 2ul>``), and where even that is
    the same (they differ in parameters), the whole demangled name. Names that demangle to the same text (a kernel
    written mangled and demangled) are one kernel and share a form. No two different kernels read the same."""
    demangle_all(names)
    shown = {v: short_name(v) for v in names}
    for forms in (_with_templates, demangle):
        kernels: dict[str, set[str]] = {}
        for v, form in shown.items():
            kernels.setdefault(form, set()).add(demangle(v))
        shown = {v: forms(v) if len(kernels[s]) > 1 else s for v, s in shown.items()}
    return shown


def _with_templates(name: str) -> str:
    """The qualified name with its template arguments: no return type, no parameter list."""
    short = short_name(name)
    head = _drop_parameters(_CLONE_SUFFIX.sub("", demangle(name).strip()))
    at = head.rfind(short.split("<", 1)[0] + "<")
    return head[at:] if at >= 0 else head


def python_apis(values: pa.Array | pa.ChunkedArray, framework: str | None = None) -> pa.Array:
    return map_distinct(values, lambda op: python_api(op, framework))
