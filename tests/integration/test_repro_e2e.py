"""``opscope repro`` end to end (issue 15, part 10): real GPU traces from ../shared reproduced on the CPU, a CPU
recording made here, the demo model's depthwise-convolution backward, and ``advise --measure``.

Expected values come from the raw JSON (gzip + json, parsed here), from torch run by the test, or by hand; never
from opscope's reader. No timing is asserted (a shared machine): measured ratios and speed-ups are printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from support.shared import SHARED_TRACES, raw_events, shared_trace

torch = pytest.importorskip("torch")

from opscope.ingest import open_trace  # noqa: E402
from opscope.repro.cases import select_cases  # noqa: E402
from opscope.repro.rebuild import NotRebuiltError, rebuild  # noqa: E402
from opscope.repro.values import T  # noqa: E402

# --- raw JSON (independent of opscope's reader) ------------------------------------------------------------------

#: Kineto's "Input type" of a tensor -> torch dtype, written out by hand (c10's C++ type names).
KINETO_DTYPES = {
    "float": torch.float32, "double": torch.float64, "c10::Half": torch.float16, "c10::BFloat16": torch.bfloat16,
    "long int": torch.int64, "int": torch.int32, "bool": torch.bool, "unsigned char": torch.uint8,
    "signed char": torch.int8, "short int": torch.int16, "c10::Float8_e4m3fn": torch.float8_e4m3fn,
}
#: "Input type" values that are not a tensor's.
NOT_TENSORS = {"", "Scalar", "ScalarList", "TensorList", "GenericList"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
FRAMEWORK_OP = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(\.\w+)?")
WRAPPERS = ("autograd::", "profiler::", "torch_compile::", "c10d_functional_wrapper::")


def is_framework_op(e: dict | None) -> bool:
    return (e is not None and e.get("cat") == "cpu_op" and FRAMEWORK_OP.fullmatch(e["name"]) is not None
            and not e["name"].startswith(WRAPPERS))


def parents(events: list[dict]) -> dict[int, dict | None]:
    """id(event) -> the innermost host event enclosing it on its thread (by time containment), for every complete
    host event."""
    threads = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in DEVICE_CATS and e.get("cat") != "gpu_user_annotation":
            threads[(e["pid"], e["tid"])].append(e)
    out: dict[int, dict | None] = {}
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            out[id(e)] = stack[-1] if stack else None
            stack.append(e)
    return out


def top_of(e: dict, parent: dict[int, dict | None]) -> dict:
    """The outermost framework op of the chain of framework ops above ``e`` (``e`` when it is not one)."""
    if not is_framework_op(e):
        return e
    while is_framework_op(parent.get(id(e))):
        e = parent[id(e)]  # type: ignore[assignment]
    return e


def key(e: dict) -> tuple:
    a = e.get("args", {})
    return (e["name"], json.dumps(a.get("Input Dims")), json.dumps(a.get("Input Strides")),
            json.dumps(a.get("Input type")), json.dumps(a.get("Concrete Inputs")))


def device_time_by_top(events: list[dict]) -> dict[int, tuple[dict, Decimal]]:
    """id(top op) -> (that op, device time in µs of everything launched under it): each kernel, copy and memset goes
    to the op around its runtime call (same correlation id), climbed to the outermost framework op."""
    parent = parents(events)
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})}
    out: dict[int, tuple[dict, Decimal]] = {}
    for d in events:
        if d.get("ph") != "X" or d.get("cat") not in DEVICE_CATS:
            continue
        call = launch.get(d["args"].get("correlation"))
        op = parent.get(id(call)) if call is not None else None
        while op is not None and op.get("cat") != "cpu_op":  # the innermost op around the launch
            op = parent.get(id(op))
        if op is None:
            continue
        top = top_of(op, parent)
        out[id(top)] = (top, out.get(id(top), (top, Decimal(0)))[1] + d["dur"])
    return out


TRACELENS = [f"tracelens/traces/{gpu}/{name}" for gpu in ("h100", "mi300") for name in (
    "gaunernst_bert-small-uncased__1016001.json.gz", "Falconsai_nsfw_image_detection__1016002.json.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "google_owlv2-large-patch14-ensemble__1016001.json.gz")]


# --- 1. GPU traces reproduced on the CPU ----------------------------------------------------------------------

@pytest.mark.parametrize("relative", TRACELENS, ids=lambda r: r.split("/", 2)[2].split("__")[0] + "-" + r.split("/")[2])
def test_gpu_trace_cases_are_the_raw_json_ops_and_rebuild_with_their_exact_inputs(relative):
    path = shared_trace(relative)
    events = raw_events(path)
    selection = select_cases(open_trace(path), top=10)
    assert selection.device == "cuda" and len(selection.cases) == 10

    # every case is one (op, dims, strides, types, concrete inputs) of the raw JSON, counted over the outermost ops
    # that launched device work, with that device time
    by_key: dict[tuple, list[tuple[dict, Decimal]]] = defaultdict(list)
    for top, us in device_time_by_top(events).values():
        by_key[key(top)].append((top, us))
    total_us = sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS)
    for case in selection.cases:
        wanted = (case.op, json.dumps(case.input_dims), json.dumps(case.input_strides), json.dumps(case.input_types),
                  json.dumps(case.concrete_inputs))
        verbatim = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == case.op
                    and e["args"].get("Input Dims") == case.input_dims
                    and e["args"].get("Input Strides") == case.input_strides
                    and e["args"].get("Input type") == case.input_types]
        assert verbatim, f"{case.op} {case.input_dims}: no event of the raw JSON has these inputs"
        tops = by_key.get(wanted, [])
        assert case.calls == len(tops), (case.op, case.input_dims)
        us = sum(u for _, u in tops)
        assert case.total_ns == pytest.approx(float(us * 1000), abs=len(tops) * 64)  # rounding per device event
        assert case.trace_ns == case.total_ns // case.calls
        assert case.share == pytest.approx(float(us / total_us), abs=1e-6)
    # the ten biggest, biggest first
    ranked = sorted((sum(u for _, u in tops) for tops in by_key.values()), reverse=True)
    assert [c.total_ns for c in selection.cases] == pytest.approx([float(u * 1000) for u in ranked[:10]], abs=256)

    # rebuilt: at least 8 of 10, each tensor with exactly the recorded size, strides and dtype
    rebuilt, reasons = 0, []
    for case in selection.cases:
        try:
            call = rebuild(case.op, case.input_dims, case.input_strides, case.input_types, case.concrete_inputs)
        except NotRebuiltError as exc:
            reasons.append(f"{case.op}: {exc}")
            continue
        rebuilt += 1
        params = call.params()
        assert case.input_types is not None and case.input_dims is not None and case.input_strides is not None
        tensors = 0
        for i, rtype in enumerate(case.input_types):
            if rtype in NOT_TENSORS:
                if rtype == "TensorList":
                    value = params[i].value
                    assert isinstance(value, tuple) and [list(t.size) for t in value] == case.input_dims[i]
                continue
            assert rtype in KINETO_DTYPES, f"a recorded type this test does not know: {rtype!r}"
            value = params[i].value
            assert isinstance(value, T), (case.op, i, value)
            assert list(value.size) == case.input_dims[i] and list(value.stride) == case.input_strides[i]
            assert getattr(torch, value.dtype) is KINETO_DTYPES[rtype]
            tensors += 1
        assert tensors == sum(isinstance(p.value, T) for p in params)
    print(f"{relative}: {rebuilt}/10 rebuilt; not rebuilt: {reasons}")
    assert rebuilt >= 8, reasons
