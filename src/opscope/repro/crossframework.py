"""Reproducing another framework's ops in PyTorch (``opscope repro --as torch``): a TensorFlow op with recorded
input shapes becomes the equivalent aten call (:mod:`opscope.repro.tensorflow`); PyTorch ops are rebuilt as usual."""

from __future__ import annotations

from typing import Any

from opscope.repro.cases import Case
from opscope.repro.rebuild import Call, NotRebuiltError, call_from_values, rebuild
from opscope.repro.registry import OP_NAME
from opscope.repro.tensorflow import TFInput, TorchCall, torch_equivalent

#: Why a TF case has no inputs to map (the readers of today's TF formats find no shapes in them).
NO_TF_SHAPES = ("no input shapes recorded: TF timelines and XProf's trace viewer JSON do not carry them, so there "
                "is nothing to rebuild (an xplane.pb with shapes will have them)")


def calls_for(cases: list[Case], metadata: dict[str, Any], max_bytes: int | None = None) -> list[Call | str]:
    """One Call (or the reason there is none) per case: PyTorch ops rebuilt from their inputs, TensorFlow op types
    mapped to their PyTorch equivalent."""
    calls: list[Call | str] = []
    for case in cases:
        try:
            if OP_NAME.fullmatch(case.op):
                calls.append(rebuild(case.op, case.input_dims, case.input_strides, case.input_types,
                                     case.concrete_inputs, max_bytes))
                continue
            calls.append(_tensorflow(case))
        except NotRebuiltError as exc:
            calls.append(str(exc))
    return calls


def _tensorflow(case: Case) -> Call | str:
    if not case.input_dims or not case.input_types or len(case.input_dims) != len(case.input_types):
        return f"TF op: {NO_TF_SHAPES}"
    inputs = [TFInput(tuple(d) if isinstance(d, list) and all(type(n) is int for n in d) else None,
                      t if isinstance(t, str) else None) for d, t in zip(case.input_dims, case.input_types)]
    mapped = torch_equivalent(case.op, inputs, {})
    if isinstance(mapped, str):
        return mapped
    return _call(mapped)


def _call(mapped: TorchCall) -> Call:
    notes = ("reproduced as the PyTorch equivalent of a TensorFlow op (--as torch)", *mapped.notes)
    return call_from_values(mapped.op, tuple(mapped.args), dict(mapped.kwargs), notes)
