"""Demangled and short names of real kernels against c++filt, and the Python API of ops against torch's own
namespaces and on real traces."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess

import pytest
from support.shared import shared_trace

from opscope.analyses import names
from opscope.analyses.names import (
    demangle_all,
    python_api,
    short_name,
)
from opscope.analyses.ops import op_table
from opscope.ingest import open_trace

MANGLED_TRACES = [
    "tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz",
]


def _mangled_names_of(relative: str) -> list[str]:
    doc = json.loads(gzip.decompress(shared_trace(relative).read_bytes()))
    return sorted({e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("_Z")})


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="needs the c++filt program to compare with")
def test_real_mangled_names_demangle_as_cxxfilt_does():
    mangled = [n for r in MANGLED_TRACES for n in _mangled_names_of(r)]
    assert len(mangled) >= 8
    reference = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                               check=True).stdout.split("\n")
    ours = demangle_all(mangled)
    assert [ours[n] for n in mangled] == reference[:len(mangled)]
    # the bfloat16 kernels of the sglang trace do demangle (c++filt leaves unreadable names as they are)
    assert any(v.startswith("void aiter::add_rmsnorm_quant_kernel<") for v in ours.values())


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="this runtime's __cxa_demangle predates DF16b")
def test_short_form_of_a_real_bfloat16_kernel():
    name = next(n for n in _mangled_names_of(MANGLED_TRACES[0]) if "add_rmsnorm_quant_kernel" in n)
    assert short_name(name) == "aiter::add_rmsnorm_quant_kernel"


COMMON_OPS = {
    "aten::conv2d": "torch.nn.functional.conv2d",
    "aten::addmm": "torch.addmm",
    "aten::linear": "torch.nn.functional.linear",
    "aten::add_": "torch.Tensor.add_",
    "aten::cross_entropy_loss": "torch.nn.functional.cross_entropy",
    "aten::linalg_vector_norm": "torch.linalg.vector_norm",
    "aten::to": "torch.Tensor.to",
    "aten::mm": "torch.mm",
}
MORE_OPS = ["aten::relu", "aten::relu_", "aten::matmul", "aten::bmm", "aten::softmax", "aten::layer_norm",
            "aten::batch_norm", "aten::max_pool2d", "aten::adaptive_avg_pool2d", "aten::embedding",
            "aten::dropout", "aten::gelu", "aten::cat", "aten::sum", "aten::mean", "aten::mul", "aten::copy_",
            "aten::view", "aten::transpose", "aten::scaled_dot_product_attention", "aten::empty",
            "aten::zero_", "aten::fill_", "aten::_foreach_add_", "aten::upsample_bilinear2d", "aten::nll_loss_nd"]


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


def test_python_api_of_common_torch_ops():
    torch = pytest.importorskip("torch")
    for op, api in COMMON_OPS.items():
        assert python_api(op) == api, op
    for op in list(COMMON_OPS) + MORE_OPS:
        api = python_api(op)
        assert api is not None, op
        assert callable(_resolve(api)), (op, api)
    # The function the table names really dispatches to the op: profile it and look.
    with torch.profiler.profile() as prof:
        torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3))
        torch.addmm(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2))
        torch.ones(2).add_(1)
    recorded = {e.name for e in prof.events()}
    assert {"aten::conv2d", "aten::addmm", "aten::add_"} <= recorded


def test_every_table_entry_exists_in_this_torch():
    torch = pytest.importorskip("torch")
    table = names._api_table()
    if table["torch_version"].split("+")[0].rsplit(".", 1)[0] != torch.__version__.split("+")[0].rsplit(".", 1)[0]:
        pytest.skip(f"table made with torch {table['torch_version']}, this is {torch.__version__}")
    missing = [api for api in table["aten"].values() if not callable(_resolve(api))]
    assert not missing
    assert len(table["aten"]) > 1000


def test_ops_table_shows_the_api_on_real_tf_and_torch_traces():
    tf = open_trace(shared_trace("tf-timeline/FrankWork-conv_relation/timeline.ctf.json"), use_cache=False)
    rows = {r["name"]: r["python_api"] for r in op_table(tf, python_api=True).to_pylist()}
    assert rows["Conv2DBackpropInput"] == "tf.raw_ops.Conv2DBackpropInput"
    assert rows["Conv2DBackpropFilter"] == "tf.raw_ops.Conv2DBackpropFilter"
    assert all(v is None or re.match(r"^tf\.[\w.]+$", v) for v in rows.values())
    torch_trace = open_trace(shared_trace("hta/trace_diff/control/control.json.gz"), use_cache=False)
    rows = {r["name"]: r["python_api"] for r in op_table(torch_trace, python_api=True).to_pylist()}
    assert rows["aten::mm"] == "torch.mm" and rows["aten::add_"] == "torch.Tensor.add_"
