"""Recorded inputs -> a call of a registered overload with typed values (``opscope.repro.rebuild``).

The overloads come from the torch installed here (its schema registry), so these tests need torch; the expected
overloads, argument names and bounds are torch's documented schemas, written out by hand.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from opscope.repro.rebuild import NotRebuiltError, rebuild  # noqa: E402
from opscope.repro.values import T, TorchAttr, source  # noqa: E402


def by_name(call) -> dict:
    return {p.name: p for p in call.params()}


# --- overloads from recorded types ----------------------------------------------------------------------------

def test_add_of_two_tensors_is_the_tensor_overload_with_alpha_as_a_keyword():
    call = rebuild("aten::add", [[2, 3], [2, 3], []], [[3, 1], [1, 2], []], ["float", "float", "Scalar"],
                   ["", "", "1"])
    assert call.overload == "Tensor"
    assert [p.name for p in call.args] == ["self", "other"] and [p.name for p in call.kwargs] == ["alpha"]
    assert call.args[1].value == T((2, 3), (1, 2), "float32")  # a transposed input keeps its strides
    assert call.kwargs[0].value == 1


def test_add_of_a_tensor_and_a_scalar_is_the_scalar_overload():
    call = rebuild("aten::add", [[4], [], []], [[1], [], []], ["c10::Half", "Scalar", "Scalar"], ["", "2.5", "1"])
    assert call.overload == "Scalar"
    p = by_name(call)
    assert p["self"].value == T((4,), (1,), "float16") and p["other"].value == 2.5 and p["alpha"].value == 1


def test_to_dtype_turns_the_recorded_scalar_type_number_into_a_torch_dtype():
    # c10::ScalarType 6 is Float; aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False,
    # bool copy=False, MemoryFormat? memory_format=None); to.device and to.other do not take these types
    call = rebuild("aten::to", [[2, 2], [], [], [], []], [[2, 1], [], [], [], []],
                   ["c10::BFloat16", "Scalar", "Scalar", "Scalar", ""], ["", "6", "False", "False", ""])
    assert call.overload == "dtype"
    p = by_name(call)
    assert p["dtype"].value == TorchAttr("float32") and source(p["dtype"].value) == "torch.float32"
    assert p["non_blocking"].value is False and p["copy"].value is False and p["memory_format"].value is None
    assert getattr(torch, p["dtype"].value.name) is torch.float32
    assert [q.name for q in call.args] == ["self", "dtype", "non_blocking", "copy", "memory_format"]
    assert call.kwargs == ()  # all positional in to.dtype (kwarg-only ones: see gelu below)


def test_kwarg_only_arguments_go_to_kwargs():
    # aten::gelu(Tensor self, *, str approximate='none'): not recorded -> the schema's default, as a keyword
    call = rebuild("aten::gelu", [[3, 4], []], [[4, 1], []], ["float", ""], ["", ""])
    assert [p.name for p in call.args] == ["self"] and [p.name for p in call.kwargs] == ["approximate"]
    assert call.kwargs[0].value == "none" and call.kwargs[0].note == "not recorded: the schema's default"


def test_a_missing_value_without_a_default_is_a_reason():
    # aten::mul.Scalar(Tensor self, Scalar other): the scalar's value not recorded and no default
    with pytest.raises(NotRebuiltError, match="no overload of aten::mul takes the recorded inputs"):
        rebuild("aten::mul", [[4], []], [[1], []], ["float", "Scalar"], ["", ""])


def test_cat_takes_a_tensor_list_with_each_tensor_exact():
    call = rebuild("aten::cat", [[[2, 3], [4, 3]], []], [[[3, 1], [1, 4]], []], ["TensorList", "Scalar"], ["", "0"])
    p = by_name(call)
    assert p["tensors"].value == (T((2, 3), (3, 1), "float32"), T((4, 3), (1, 4), "float32"))
    assert p["dim"].value == 0
    assert any("dtypes of a tensor list are not recorded" in n for n in call.notes)


def test_recorded_list_arguments_are_parsed_without_evaluation():
    call = rebuild("aten::conv2d", [[1, 4, 8, 8], [4, 1, 3, 3], [], [], [], [], []],
                   [[256, 64, 8, 1], [9, 9, 3, 1], [], [], [], [], []],
                   ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                   ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "4"])
    p = by_name(call)
    assert p["stride"].value == (2, 2) and p["padding"].value == (1, 1) and p["groups"].value == 4
    assert p["bias"].value is None


def test_unrecorded_strides_are_contiguous_and_say_so():
    call = rebuild("aten::relu", [[2, 3, 4]], None, ["float"], None)
    assert call.args[0].value == T((2, 3, 4), (12, 4, 1), "float32")
    assert "strides not recorded: tensors rebuilt contiguous" in call.notes


# --- index-like integer tensors stay in range -------------------------------------------------------------------

def test_embedding_indices_stay_below_the_number_of_rows():
    call = rebuild("aten::embedding", [[30522, 512], [1, 141], [], [], []], [[512, 1], [141, 1], [], [], []],
                   ["float", "long int", "Scalar", "Scalar", "Scalar"], ["", "", "-1", "False", "False"])
    p = by_name(call)
    assert p["indices"].value == T((1, 141), (141, 1), "int64", high=30522)
    assert p["weight"].value.high is None


@pytest.mark.parametrize(("dim", "high"), [("1", 7), ("0", 5), ("-1", 7)])
def test_gather_index_stays_below_the_size_of_the_gathered_dimension(dim, high):
    call = rebuild("aten::gather", [[5, 7], [], [5, 3], []], [[7, 1], [], [3, 1], []],
                   ["float", "Scalar", "long int", "Scalar"], ["", dim, "", "False"])
    assert call.overload == "default"
    assert by_name(call)["index"].value == T((5, 3), (3, 1), "int64", high=high)


# --- what cannot be rebuilt, and why --------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "words"), [
    ("aten::no_such_op_anywhere", "is not registered in this torch"),
    ("vllm::moe_forward", "is not registered in this torch"),
    ("triton_poi_fused_add_mul_0", "a Triton kernel that torch.compile generated"),
    ("record_param_comms", "a collective (record_param_comms)"),
    ("c10d::allreduce_", "a collective"),
    ("Conv2DBackpropFilter", "a TensorFlow op (Conv2DBackpropFilter)"),
    ("MatMul", "a TensorFlow op (MatMul)"),
    ("ConvolutionBackward0", "a PyTorch autograd node (ConvolutionBackward0)"),
    ("AddmmBackward", "a PyTorch autograd node (AddmmBackward)"),
    ("Torch-Compiled Region: 0/0", "a torch.compile region"),
])
def test_ops_that_cannot_be_replayed_give_their_reason(op, words):
    with pytest.raises(NotRebuiltError) as info:
        rebuild(op, [[4]], [[1]], ["float"], [""])
    assert words in str(info.value)


def test_a_trace_without_shapes_says_how_to_record_them():
    with pytest.raises(NotRebuiltError, match=r"recorded without input shapes and types \(profile with "
                                              r"record_shapes=True\)"):
        rebuild("aten::relu", None, None, None, None)


def test_a_damaged_record_is_a_reason():
    with pytest.raises(NotRebuiltError, match="differ in length"):
        rebuild("aten::relu", [[4], [4]], None, ["float"], None)
    with pytest.raises(NotRebuiltError, match=r"sizes that are not integers .*\(a damaged record\)"):
        rebuild("aten::relu", [[-4]], None, ["float"], None)  # a negative size


def test_max_memory_refuses_big_inputs():
    with pytest.raises(NotRebuiltError, match="more than --max-memory"):
        rebuild("aten::relu", [[1 << 20, 1 << 10]], None, ["float"], None, max_bytes=1 << 30)


# --- recorded text never reaches a message raw -------------------------------------------------------------------

HOSTILE = [
    "aten::relu\x1b[31m",
    "evil\nop",
    "x" * 500,
    "aten::x'); import os; os.system('true'); ('",
    "\u202eaten::relu",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_op_names_are_not_echoed(name):
    with pytest.raises(NotRebuiltError) as info:
        rebuild(name, [[4]], [[1]], ["float"], [""])
    message = str(info.value)
    assert name not in message and "\x1b" not in message and "\n" not in message and "\u202e" not in message
    assert len(message) < 300


@pytest.mark.parametrize("text", ["\x1b[2J", "evil\nline", "y" * 500, "__import__('os')"])
def test_hostile_types_and_values_are_not_echoed(text):
    for types, concrete in ((["float", text], ["", "1"]), (["float", "Scalar"], ["", text])):
        with pytest.raises(NotRebuiltError) as info:
            rebuild("aten::mul", [[4], []], [[1], []], types, concrete)
        message = str(info.value)
        assert text not in message and "\x1b" not in message and "\n" not in message and len(message) < 400
