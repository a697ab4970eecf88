"""Hostile recorded values through the rebuild and the writing of literals: text from a trace is
parsed by strict patterns into ints, floats, bools and tuples, or refused; what is written is Python that
``ast.literal_eval`` (or ``float("inf"/"nan")``) reads back as the same value."""

from __future__ import annotations

import ast
import math

import pytest

pytest.importorskip("torch")

from opscope.repro.rebuild import NotRebuiltError, rebuild
from opscope.repro.values import T, TorchAttr, source

CANARY = "__import__('os').system('touch PWNED')"
HOSTILE_TEXT = [CANARY, "[1, 2, os]", "True; x", "1\nimport os", "1\u2028x", "'); x; ('", "0x10", "1_0", "1e309x",
                "os", " x", "\x00", "[" * 400 + "]" * 400, "{}", "None", "b'1'", "1j", "--1"]


def add(alpha, dims=None, strides=None, types=None):
    return rebuild("aten::add", dims if dims is not None else [[2, 3], [2, 3], []],
                   strides if strides is not None else [[3, 1], [3, 1], []],
                   types if types is not None else ["float", "float", "Scalar"], ["", "", alpha])


def literal(text: str):
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.Call):  # float("inf"), float("nan"): the only calls source() writes for a number
        assert isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1
        return float(ast.literal_eval(node.args[0]))
    return ast.literal_eval(text)


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_scalar_text_is_refused_not_evaluated(text):
    with pytest.raises(NotRebuiltError) as caught:
        add(text)
    assert text not in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text", ["[1]", CANARY, "[0, os]", "[1, [2]]", "[" + ",".join(["1"] * 5000) + "]"])
def test_list_arguments_parse_strictly(text):
    dims, types = [[2, 3], [], [], []], ["float", "ScalarList", "Scalar", ""]
    if text == "[1]":
        call = rebuild("aten::sum", dims, [[3, 1], [], [], []], types, ["", text, "False", ""])
        assert next(p.value for p in call.params() if p.name == "dim") == (1,)
    else:
        with pytest.raises(NotRebuiltError):
            rebuild("aten::sum", dims, [[3, 1], [], [], []], types, ["", text, "False", ""])


@pytest.mark.parametrize(("text", "want"), [("1e309", math.inf), ("-1e309", -math.inf), ("nan", math.nan),
                                            ("-inf", -math.inf), (str(2**70), float(2**70)), ("7", 7),
                                            ("-0.5", -0.5), ("1" * 100_000, math.inf)])
def test_numbers_are_parsed_and_written_as_literals_that_read_back(text, want):
    call = add(text)
    alpha = next(p.value for p in call.params() if p.name == "alpha")
    assert type(alpha) is type(want)
    back = literal(source(alpha))
    assert back == want or (math.isnan(want) and math.isnan(back))


@pytest.mark.parametrize(("dims", "strides"), [([[-2, 3], [2, 3], []], None), ([[2**70, 3], [2, 3], []], None),
                                               ([[2, 3], [2, 3], []], [[-3, 1], [3, 1], []]),
                                               ([[2, 3], [2, 3], []], [[3, 1], [2**70, 1], []]),
                                               ([[2, "3"], [2, 3], []], None), ([[2, True], [2, 3], []], None),
                                               ([[[[2]]], [2, 3], []], None)])
def test_sizes_and_strides_no_tensor_can_have_are_a_damaged_record(dims, strides):
    with pytest.raises(NotRebuiltError, match=r"\(a damaged record\)$"):
        add("1", dims=dims, strides=strides)


def test_names_are_checked_before_anything_is_looked_up():
    for name in ("aten::add\nimport os", f"aten::add\"); {CANARY}", "aten::add\u2028x", "__import__('os')",
                 "aten::" + "a" * 100_000, "evil::x", "A" * 100_000):
        with pytest.raises(NotRebuiltError) as caught:
            rebuild(name, [[2]], [[1]], ["float"], [""])
        assert len(str(caught.value)) < 400 and "\n" not in str(caught.value)


@pytest.mark.parametrize("value", ["a'b\"c\n\u2028\x00\x1b\\", CANARY, "x" * 70_000, (1, -2, 2**70, True, None),
                                   (math.inf, -math.inf), T((2, 3), (3, 1), "float32", high=5)])
def test_source_writes_one_literal_that_reads_back(value):
    text = source(value)
    assert "\n" not in text and "\u2028" not in text
    node = ast.parse(text, mode="eval").body
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            assert isinstance(sub.func, ast.Name) and sub.func.id in ("T", "float")
    if not isinstance(value, T) and not (isinstance(value, tuple) and any(isinstance(v, float) for v in value)):
        assert ast.literal_eval(text) == (list(value) if isinstance(value, tuple) else value)


def test_typed_values_refuse_what_is_not_theirs():
    for bad in (lambda: T((2,), (1,), "float32; import os"), lambda: T((-1,), (1,), "float32"),
                lambda: T((2,), (1, 1), "float32"), lambda: TorchAttr("float32.__class__"),
                lambda: T((2,), (1,), "float32", high=0)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError):
        source(object())  # type: ignore[arg-type]
