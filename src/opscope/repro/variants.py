"""Which alternatives apply to an op, and the code change each stands for.

A variant is run by the script's harness beside the baseline (same inputs, timed the same way, outputs compared).
Only the variants that can change how this op runs on this device are offered; ``compile`` is offered to every
op but runs only when asked (``--variants all`` or by name): compiling takes seconds to minutes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from opscope.errors import UsageError
from opscope.repro.rebuild import Call
from opscope.repro.values import T, contiguous_strides

_CONV = re.compile(r"conv|_convolution", re.IGNORECASE)
_POOL = re.compile(r"pool", re.IGNORECASE)
_NORM = re.compile(r"batch_norm|group_norm|instance_norm")
_MATMUL = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|addbmm|_addmm_activation|einsum|"
                     r"_scaled_mm|linear_backward|mm_backward)$")
_ATTENTION = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|_cudnn_attention")
_DETERMINISTIC = re.compile(r"conv|scatter|index_add|index_put|index_copy|embedding\w*backward|gather|"
                            r"interpolate|upsample|grid_sampler|max_pool\w*backward|avg_pool\w*backward|"
                            r"nll_loss\w*backward|ctc_loss|cumsum", re.IGNORECASE)

#: Every variant the harness knows, with the change in a model it stands for (threads=N is added per machine).
CHANGES = {
    "channels_last": "model = model.to(memory_format=torch.channels_last); x = x.to(memory_format=torch.channels_last)",
    "contiguous": "x = x.contiguous()  (the recorded inputs were strided differently)",
    "tf32": "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True",
    "fp32_precision_high": "torch.set_float32_matmul_precision('high')",
    "autocast_bf16": "with torch.autocast(device_type, dtype=torch.bfloat16): ...",
    "autocast_fp16": "with torch.autocast(device_type, dtype=torch.float16): ...",
    "cudnn_benchmark": "torch.backends.cudnn.benchmark = True",
    "no_cudnn": "torch.backends.cudnn.enabled = False",
    "no_mkldnn": "torch.backends.mkldnn.enabled = False",
    "deterministic": "torch.use_deterministic_algorithms(True)",
    "compile": "fn = torch.compile(fn)",
}
#: Variants ``auto`` leaves out (they take long; ask for them by name or with ``all``).
SLOW = ("compile",)


def applicable(call: Call, device: str, cpu_count: int | None = None) -> dict[str, str]:
    """The variants that apply to ``call`` on ``device`` ("cpu" or "cuda"), name -> code change."""
    op = call.op
    tensors = call.tensors()
    floats32 = any(t.dtype == "float32" for t in tensors)
    spatial = any(len(t.size) in (4, 5) for t in tensors)
    family_layout = bool(_CONV.search(op) or _POOL.search(op) or _NORM.search(op))
    math = bool(_MATMUL.search(op) or _CONV.search(op) or _ATTENTION.search(op))
    names: list[str] = []
    if family_layout and spatial:
        names.append("contiguous" if any(_channels_last(t) for t in tensors) else "channels_last")
    elif any(not _contiguous(t) for t in tensors):
        names.append("contiguous")
    if math and floats32:
        if device == "cuda":
            names.append("tf32")
        if _MATMUL.search(op):
            names.append("fp32_precision_high")
        if "backward" not in op:  # autocast casts the inputs of forward ops; a backward op called alone is not cast
            names += ["autocast_bf16", "autocast_fp16"]
    if _CONV.search(op):
        names += ["cudnn_benchmark", "no_cudnn"] if device == "cuda" else ["no_mkldnn"]
    elif device == "cpu" and (_MATMUL.search(op) or _POOL.search(op) or _NORM.search(op)):
        names.append("no_mkldnn")
    if _DETERMINISTIC.search(op):
        names.append("deterministic")
    found = {name: CHANGES[name] for name in names}
    if device == "cpu":
        cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
        for n in sorted({1, max(1, cores // 2)}):
            if n != cores:
                found[f"threads={n}"] = f"torch.set_num_threads({n})"
    found["compile"] = CHANGES["compile"]
    return found


def choose(offered: Iterable[str], wanted: str) -> list[str]:
    """Names to run of those ``offered`` (the ones that apply): ``auto`` (all but the slow ones), ``all``, ``none``
    or a comma list (a known name that does not apply is left out; an unknown one is a UsageError)."""
    offered = list(offered)
    if wanted == "auto":
        return [n for n in offered if n not in SLOW]
    if wanted == "all":
        return offered
    if wanted == "none":
        return []
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHANGES and not re.fullmatch(r"threads=[0-9]{1,4}", n)]
    if unknown:
        raise UsageError(f"unknown variant {unknown[0]!r}: use auto, all, none or names from "
                         f"{', '.join(CHANGES)}, threads=N")
    return [n for n in names if n in offered]


def parse_variants(wanted: str) -> str:
    """Check a --variants value early (before any work); returns it."""
    choose((), wanted)
    return wanted


def _contiguous(t: T) -> bool:
    return all(n == 1 or s == e for n, s, e in zip(t.size, t.stride, contiguous_strides(t.size)))


def _channels_last(t: T) -> bool:
    if len(t.size) != 4:
        return False
    _n, c, h, w = t.size
    return c > 1 and tuple(t.stride) == (h * w * c, 1, w * c, c)


def summary(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"
