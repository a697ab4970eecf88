"""MIGraphX's printed instruction: ``NAME = OP[attrs]{literal}(inputs), [modules] -> SHAPE, target_id=N # debug``.

The text is what ``instruction::print`` writes (AMDMIGraphX ``src/instruction.cpp``), in the compiled program,
in ``migraphx-driver perf`` lines (followed by ``: Tms, P%``) and after ``Run instruction:`` in
``MIGRAPHX_TRACE_EVAL`` dumps. Names hold ``:`` and ``#`` (``main:#output_0``, ``sub:@3``), attribute values nest
brackets and braces, and older drivers (the DCU/DTK fork) print shapes without spaces (``->float_type,{1},{1}``),
so the parser walks the brackets instead of splitting on separators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from opscope.ingest.numbers import int64

#: A number as C++ iostreams print a double (``1.2e-05``, ``nan``, ``-nan``, ``inf``).
NUMBER = r"[-+]?(?:nan|inf|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_SHAPE = re.compile(r"(\w+_type)\s*,\s*\{([^{}]*)\}\s*,\s*\{([^{}]*)\}")
_DYNAMIC = re.compile(r"^dynamic\s*,\s*(\w+_type)")
_MODULE_OF = re.compile(r"^(.+):@\d+$")
_OPEN = {"[": "]", "(": ")", "{": "}"}
_BRACKET = re.compile(r"[\[\](){}]")
#: Operands kept per instruction: no program has more, and a hostile line of millions would cost ~60 bytes of
#: memory per input byte; the rest are counted (``Instruction.inputs_left_out``).
MAX_INPUTS = 65_536

#: MIGraphX element types -> the dtype names opscope's numerics dumps use (torch's), so dumps compare.
DTYPES = {
    "float_type": "float32", "half_type": "float16", "bf16_type": "bfloat16", "double_type": "float64",
    "int8_type": "int8", "uint8_type": "uint8", "int16_type": "int16", "uint16_type": "uint16",
    "int32_type": "int32", "uint32_type": "uint32", "int64_type": "int64", "uint64_type": "uint64",
    "bool_type": "bool", "fp8e4m3fnuz_type": "float8_e4m3fnuz", "fp8e4m3fn_type": "float8_e4m3fn",
    "fp8e5m2_type": "float8_e5m2", "fp8e5m2fnuz_type": "float8_e5m2fnuz", "tuple_type": "tuple",
}


@dataclass(frozen=True)
class Shape:
    """One output shape: MIGraphX type name, lens and strides (None where dynamic)."""

    type: str
    lens: list[int] | None
    strides: list[int] | None

    @property
    def dtype(self) -> str:
        return DTYPES.get(self.type, self.type.removesuffix("_type"))

    @property
    def text(self) -> str:
        """``4x3`` like opscope's numerics dumps; ``scalar`` for no dims; ``?`` when dynamic."""
        if self.lens is None:
            return "?"
        return "x".join(map(str, self.lens)) if self.lens else "scalar"

    @property
    def numel(self) -> int | None:
        if self.lens is None:
            return None
        n = 1
        for d in self.lens:
            n *= d
        return n


@dataclass
class Instruction:
    """One printed instruction, split into its parts (texts as printed)."""

    name: str
    op: str
    attrs: str = ""
    inputs: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    shape: str = ""
    shapes: tuple[Shape, ...] = ()  #: shared between instructions that print the same shape
    tail: str = ""  # target_id / debug symbols after the shape
    inputs_left_out: int = 0  #: inputs beyond :data:`MAX_INPUTS`, not kept
    _attributes: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def module(self) -> str | None:
        """The module an instruction belongs to where its name says (``sub:@3``); None for the root module."""
        m = _MODULE_OF.match(self.name)
        return m.group(1) if m else None

    def attributes(self) -> dict[str, str]:
        """Top-level ``key=value`` pairs of the attributes, values as printed."""
        if self._attributes is not None:
            return self._attributes
        out: dict[str, str] = {}
        last = None
        for part in _split_top(self.attrs, ","):
            key, eq, value = part.partition("=")
            if eq and key.strip() and "{" not in key:
                last = key.strip()
                out[last] = value.strip()
            elif last is not None and part.strip():  # a value with commas: shape=float_type,{2},{1}
                out[last] += "," + part.strip()
        self._attributes = out
        return out

    @property
    def group(self) -> str:
        """The perf Summary's group: ``gpu::code_object::<symbol_name>`` for compiled kernels, else the op name."""
        if self.op == "gpu::code_object":
            symbol = self.attributes().get("symbol_name")
            if symbol:
                return f"gpu::code_object::{symbol}"
        return self.op

    @property
    def type_text(self) -> str:
        return ",".join(s.type for s in self.shapes)

    def to_args(self) -> dict:
        """The instruction as printed, in parts (its parsed shapes are the model's columns: not repeated here)."""
        args: dict = {"instruction": self.name, "op": self.op}
        if self.module:
            args["module"] = self.module
        if self.attrs:
            args["attrs"] = self.attrs
        args["inputs"] = self.inputs
        if self.inputs_left_out:
            args["inputs_left_out"] = self.inputs_left_out
        if self.modules:
            args["module_inputs"] = self.modules
        if self.shape:
            args["shape"] = self.shape
        if self.tail:
            args["extra"] = self.tail
        return args


def parse_instruction(text: str) -> Instruction | None:
    """The instruction in ``text`` (no timing suffix); None when it is not ``NAME = OP...``."""
    name, eq, rest = text.strip().partition(" = ")
    if not eq or not name or " " in name or not rest:
        return None
    rest = rest.strip()
    i = 0
    n = len(rest)
    while i < n and rest[i] not in "[({" and not rest[i].isspace() and not rest.startswith("->", i):
        i += 1
    op = rest[:i]
    if not op:
        return None
    ins = Instruction(name=name, op=op)
    if op.startswith("@param:"):
        ins.op, ins.attrs = "@param", f"parameter={op[len('@param:'):]}"
    if i < n and rest[i] == "[":
        j = _close(rest, i)
        if j < 0:
            return None
        ins.attrs = rest[i + 1:j]
        i = j + 1
    if i < n and rest[i] == "{":  # a literal's values
        j = _close(rest, i)
        if j < 0:
            return None
        i = j + 1
    if i < n and rest[i] == "(":
        j = _close(rest, i)
        if j < 0:
            return None
        ins.inputs, ins.inputs_left_out = _inputs(rest, i + 1, j)
        i = j + 1
    after = rest[i:].lstrip()
    if after.startswith(","):  # module inputs: ", [then_mod, else_mod]"
        k = after.find("[")
        j = _close(after, k) if k >= 0 else -1
        if j < 0:
            return None
        ins.modules = [s.strip() for s in after[k + 1:j].split(",") if s.strip()]
        after = after[j + 1:].lstrip()
    if after.startswith("->"):
        shape = after[2:].strip()
        for marker in (" # ", ", target_id="):
            cut = shape.find(marker)
            if cut >= 0:
                shape, ins.tail = shape[:cut].strip(), (shape[cut:].strip(", ") + " " + ins.tail).strip()
        ins.shape = shape
        ins.shapes = _shapes(shape)
    elif after:
        ins.tail = after
    return ins


def _inputs(text: str, start: int, end: int) -> tuple[list[str], int]:
    """The comma-separated names in ``text[start:end]``, the first :data:`MAX_INPUTS` of them, and how many more."""
    parts = text.count(",", start, end) + 1
    if parts <= MAX_INPUTS:
        return [s.strip() for s in text[start:end].split(",") if s.strip()], 0
    cut = start
    for _ in range(MAX_INPUTS):
        cut = text.index(",", cut, end) + 1
    return [s.strip() for s in text[start:cut - 1].split(",") if s.strip()], parts - MAX_INPUTS


def _shapes(text: str) -> tuple[Shape, ...]:
    """:func:`parse_shapes`; a short text parsed once per distinct text (a program prints a few shapes many
    times, and the instructions that print one share it)."""
    return _shapes_once(text) if len(text) <= 512 else tuple(parse_shapes(text))


@lru_cache(maxsize=4096)
def _shapes_once(text: str) -> tuple[Shape, ...]:
    return tuple(parse_shapes(text))


def parse_shapes(text: str) -> list[Shape]:
    """The output shape(s): one, a tuple ``[t, {..}, {..}, t, {..}, {..}]`` or ``dynamic, t, {...}``."""
    dyn = _DYNAMIC.match(text)
    if dyn:
        return [Shape(dyn.group(1), None, None)]
    return [Shape(t, _ints(lens), _ints(strides)) for t, lens, strides in _SHAPE.findall(text)]


def _ints(text: str) -> list[int] | None:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [int(p) for p in parts]
    except ValueError:
        return None


def _close(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (nesting all three kinds); -1 when unclosed."""
    stack = []
    for found in _BRACKET.finditer(text, start):  # only the brackets: a long operand list is one step
        c = found.group()
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return found.start()
    return -1


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        if c in _OPEN:
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if cur:
        parts.append("".join(cur))
    return parts


def ms_to_ns(ms: float) -> int | None:
    """Milliseconds as integer ns; None (counted by :mod:`opscope.ingest.numbers`) when not finite or beyond int64."""
    return int64(ms, 1_000_000)
