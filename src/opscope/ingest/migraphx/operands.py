"""Each MIGraphX instruction's operands as the model's ``shapes``/``dtypes``/``strides``/``concrete_inputs`` columns.

A printed instruction names its operands (``@3 = gpu::code_object[...](@1,@2,@0) -> half_type, {1, 2, 3}, {6, 3,
1}``) and gives only its own output shape, so each operand's shape is the output shape of the instruction it names,
as printed earlier in the listing (MIGraphX prints instructions in order, every definition before its uses).

The record of one instruction, in the JSON text the work models read (``analyses/work.py``):

* one entry per input operand, in printed order: its lens (logical sizes, as printed; a tuple operand is a list of
  lens, its dtype ``TensorList``), its dtype (``float32``, ``float16``, ...) and its strides (a broadcast operand has
  stride 0 along the broadcast dimensions: it is that much smaller in memory);
* then the instruction's output: its lens, dtype and strides (a tuple output as a ``TensorList`` entry);
* for ``*pooling`` ops that print their window (``lengths={3, 3}``), one more entry without a shape or dtype whose
  concrete value is the window (``"[3, 3]"``), as Kineto records an ``int[]`` argument.

Compiled programs pass each GPU instruction the buffer it writes as an operand (an allocation, a ``load`` from
scratch, the ``#output`` parameter): ``gpu::code_object`` the one at ``output_arg`` (the last when not printed), other
``gpu::``/``hip::``/``cpu::``/``dnnl::`` ops their last operand where it has the output's shape and type. That
operand is the output, not an input: it is left out of the inputs (the output entry stands for it). MIOpen's
convolutions (``gpu::convolution``, ``gpu::quant_convolution``, ``gpu::convolution_backwards``, ...) take
``(x, w, workspace, y)``: the workspace (scratch, not data) is left out too.

An instruction with an operand that is not defined earlier, with a dynamic shape, or with more operands than the
parser keeps (:data:`~opscope.ingest.migraphx.grammar.MAX_INPUTS`), has no record (None).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from opscope.ingest.migraphx.grammar import Instruction, Shape

#: Namespaces of the ops that write into an output buffer passed as their last operand.
_ALLOCATING = ("gpu::", "hip::", "cpu::", "dnnl::")
#: MIOpen convolutions: ``(x, w, workspace, y)``.
_WORKSPACE_OPS = frozenset({"gpu::convolution", "gpu::quant_convolution", "gpu::convolution_backwards",
                            "gpu::deconvolution", "gpu::miopen_convolution", "gpu::conv_bias", "gpu::conv_bias_relu"})

#: One record: shapes, dtypes, strides, concrete inputs (JSON texts; concrete None when no entry has a value).
Record = tuple[str, str, str, str | None]


def _ints(text: str) -> list[int] | None:
    """``{3, 3}`` (an attribute's printed list) -> [3, 3]; None when it is not a list of ints."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    try:
        values = [int(p) for p in body[1:-1].split(",") if p.strip()]
    except ValueError:
        return None
    return values if 0 < len(values) <= 16 else None


def _output_operand(ins: Instruction, operands: list[Sequence[Shape]]) -> int | None:
    """Which operand is the buffer the instruction writes its output into (see the module), None when none is."""
    n = len(operands)
    if ins.op == "gpu::code_object":
        text = ins.attributes().get("output_arg", "-1").strip()
        try:
            at = int(text)
        except ValueError:
            return None
        at = n + at if at < 0 else at
        return at if 0 <= at < n else None
    if n < 2 or not ins.op.startswith(_ALLOCATING):
        return None
    last = operands[-1]
    same = len(last) == len(ins.shapes) and all(
        a.type == b.type and a.lens == b.lens for a, b in zip(last, ins.shapes))
    return n - 1 if same else None


def _entry(shapes: Sequence[Shape]) -> tuple[object, str, object]:
    """(lens, dtype, strides) of one operand or output: a tensor, or a TensorList for a tuple."""
    if len(shapes) == 1:
        return shapes[0].lens, shapes[0].dtype, shapes[0].strides
    return [s.lens for s in shapes], "TensorList", [s.strides for s in shapes]


def record(ins: Instruction, defined: dict[str, Sequence[Shape]]) -> Record | None:
    """The record of ``ins`` (see the module), its operands looked up in ``defined`` (name -> output shapes)."""
    if not ins.shapes or ins.inputs_left_out:
        return None
    operands: list[Sequence[Shape]] = []
    for name in ins.inputs:
        shapes = defined.get(name)
        if not shapes:
            return None
        operands.append(shapes)
    out_at = _output_operand(ins, operands)
    inputs = [s for k, s in enumerate(operands) if k != out_at]
    if ins.op in _WORKSPACE_OPS and out_at is not None and len(inputs) >= 3:
        del inputs[2]
    if any(s.lens is None or s.strides is None for shapes in [*inputs, ins.shapes] for s in shapes):
        return None  # a dynamic shape: sizes unknown
    entries = [_entry(s) for s in [*inputs, ins.shapes]]
    concrete: list[str] | None = None
    window = _ints(ins.attributes().get("lengths", "")) if ins.op.endswith("pooling") else None
    if window is not None:
        entries.append(([], "", []))
        concrete = [""] * (len(entries) - 1) + [json.dumps(window)]
    return (json.dumps([e[0] for e in entries], separators=(",", ":")), json.dumps([e[1] for e in entries]),
            json.dumps([e[2] for e in entries], separators=(",", ":")), json.dumps(concrete) if concrete else None)


class Listing:
    """The output shapes a listing has defined so far, by instruction name: each instruction read in order gets its
    record, and its name defines its output from there on."""

    def __init__(self) -> None:
        self.defined: dict[str, Sequence[Shape]] = {}

    def record(self, ins: Instruction) -> Record | None:
        rec = record(ins, self.defined)
        if ins.shapes:
            self.defined[ins.name] = ins.shapes
        else:
            self.defined.pop(ins.name, None)
        return rec


def records(instructions: Iterable[Instruction]) -> list[Record | None]:
    """The record of each instruction, in order (:class:`Listing`)."""
    listing = Listing()
    return [listing.record(ins) for ins in instructions]
