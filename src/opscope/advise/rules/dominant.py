"""One op or kernel dominating the time, and known faster alternatives for what dominates.

Items are the kernels (device time, short names) on a GPU trace and the host ops (self time) on a CPU-only
trace. Known alternatives are matched on names (and, for depthwise convolutions on the CPU, on the weight's
shape): depthwise-conv backward kernels, max pooling, NCHW<->NHWC layout transposes, and fp32 matmuls/convs
on GPUs with tensor cores (read from the device properties).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, Rule
from opscope.render.units import format_ns

#: An item taking at least this share of the time dominates.
DOMINANT_SHARE = 0.25
#: A known alternative is reported when what it applies to takes at least this share.
ALTERNATIVE_SHARE = 0.05
TOP = 8


@dataclass(frozen=True)
class Item:
    name: str
    shapes: str | None
    ns: int  # over the window
    calls: int


@dataclass(frozen=True)
class Alternative:
    id: str
    what: str
    applies: Callable[[Item, AdviceContext], bool]
    speedup: float | None  # None: the time goes away entirely (upper bound)
    why: str
    change: Callable[[AdviceContext], str]


def _regex(pattern: str) -> Callable[[Item, AdviceContext], bool]:
    compiled = re.compile(pattern, re.IGNORECASE)
    return lambda item, ctx: bool(compiled.search(item.name))


_DEPTHWISE_BWD = re.compile(r"conv_depthwise2d_(backward|grad)|depthwise.*(backward|grad)|"
                            r"DepthwiseConv2dNativeBackprop", re.IGNORECASE)
_CONV_BWD = re.compile(r"^aten::(convolution_backward|_?slow_conv2d_backward|thnn_conv2d_backward|"
                       r"mkldnn_convolution_backward)")


def _depthwise_backward(item: Item, ctx: AdviceContext) -> bool:
    if _DEPTHWISE_BWD.search(item.name):
        return True
    if item.shapes and _CONV_BWD.search(item.name):  # weight [O, 1, kh, kw]: one input channel per group
        try:
            dims = json.loads(item.shapes)
            weight = dims[2]
        except (ValueError, IndexError, TypeError):
            return False
        return isinstance(weight, list) and len(weight) == 4 and weight[1] == 1 and weight[0] > 1
    return False


_FP32_MATH = re.compile(r"sgemm|(^|_)scudnn|implicit_convolve_sgemm|xmma\w*f32f32|gemm_f32f32|"
                        r"cutlass_simt_s", re.IGNORECASE)
_ALREADY_FAST = re.compile(r"tf32|s1688|s16816|tensorop_s|hgemm|bf16|h1688|h16816|hmma|fp16|half",
                           re.IGNORECASE)


#: Kernel-name prefixes of NVIDIA's libraries that name the architecture they were built for.
_ARCH_PREFIX = re.compile(r"^(?:void )?(volta|turing|ampere|hopper|sm(\d)(\d))_", re.IGNORECASE)
_ARCH_CAPABILITY = {"volta": 7.0, "turing": 7.5, "ampere": 8.0, "hopper": 9.0}


def capability(ctx: AdviceContext) -> float | None:
    """The highest compute capability of the trace's GPUs: from the device properties, else from kernel names
    that carry their architecture (volta_sgemm_..., sm80_xmma_...), else None."""
    caps = []
    for p in ctx.device_properties:
        try:
            caps.append(float(p.get("capability") or ""))
        except ValueError:
            continue
    if not caps and ctx.gpu is not None:
        for name in ctx.kernels["name"].to_pylist():
            m = _ARCH_PREFIX.match(name or "")
            if m:
                caps.append(_ARCH_CAPABILITY.get(m.group(1).lower()) or float(f"{m.group(2)}.{m.group(3)}"))
    return max(caps) if caps else None


def _fp32_on_tensor_cores(item: Item, ctx: AdviceContext) -> bool:
    cap = capability(ctx)
    return ctx.gpu is not None and cap is not None and cap >= 7.0 and bool(_FP32_MATH.search(item.name)) \
        and not _ALREADY_FAST.search(item.name)


def _tensor_core_change(ctx: AdviceContext) -> str:
    if (capability(ctx) or 0) >= 8.0:
        return ("let fp32 matmuls and convs use TF32 tensor cores: torch.backends.cuda.matmul.allow_tf32 = True "
                "(or torch.set_float32_matmul_precision('high')) and torch.backends.cudnn.allow_tf32 = True; or "
                "run in bf16 with torch.autocast('cuda', dtype=torch.bfloat16)")
    return ("use the fp16 tensor cores: torch.autocast('cuda', dtype=torch.float16) with torch.cuda.amp.GradScaler "
            "for training")


ALTERNATIVES = (
    Alternative("depthwise-backward", "depthwise-convolution backward", _depthwise_backward, 2.0,
                "PyTorch's depthwise backward paths (conv_depthwise2d_grad on CUDA, the slow im2col path on the "
                "CPU) are known to be several times slower per FLOP than dense convolutions; we assume a "
                "conservative 2x from a faster kernel",
                lambda ctx: "try channels_last (model.to(memory_format=torch.channels_last) and the inputs too) so "
                            "cuDNN/oneDNN's NHWC depthwise kernels run, set torch.backends.cudnn.benchmark = True, "
                            "or torch.compile the model; reproduce the op alone with its shapes to compare"),
    Alternative("max-pool", "max pooling", _regex(r"max_?pool"), None,
                "a stride-2 convolution in place of the pooling removes the pooling (forward and backward) and "
                "makes the convolution before it 4x cheaper; we count only the pooling time (an upper bound "
                "for the pooling, a lower one for the whole change)",
                lambda ctx: "replace MaxPool2d with a stride-2 convolution (as ResNet-D / all-conv nets do); this "
                            "changes the model, so retrain and check accuracy"),
    Alternative("layout-transpose", "NCHW<->NHWC layout transposes",
                _regex(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|transpose_nchw|convertTensorLayout"), None,
                "the library converts NCHW tensors to NHWC for its tensor-core kernels and back; with the model "
                "and inputs in channels_last these conversions disappear",
                lambda ctx: "model = model.to(memory_format=torch.channels_last) and "
                            "x = x.to(memory_format=torch.channels_last)"),
    Alternative("fp32-on-tensor-cores", "fp32 matmuls and convolutions on a GPU with tensor cores",
                _fp32_on_tensor_cores, 2.0,
                "the GPU has tensor cores (compute capability >= 7.0) but these kernels run fp32 on the ordinary "
                "cores; NVIDIA quotes up to 8x (TF32 on A100) and 8-16x (fp16), we assume a conservative 2x",
                _tensor_core_change),
)


def items(ctx: AdviceContext) -> tuple[list[Item], str]:
    """The items compared and what their time is: kernels on GPU traces, host ops on CPU-only traces."""
    if ctx.gpu is not None:
        k = ctx.kernels.filter(pc.equal(ctx.kernels["kind"], "kernel"))
        return [Item(n, None, t, c) for n, t, c in zip(k["name"].to_pylist(), k["total_ns"].to_pylist(),
                                                       k["calls"].to_pylist())], "device kernel time"
    from opscope.analyses.filters import EventFilter
    from opscope.analyses.ops import op_table

    filt = EventFilter(kinds=("cpu_op",), steps=tuple(ctx.trace.steps["step"].to_pylist()) or None)
    ops = op_table(ctx.trace, by=("name", "shapes"), filt=filt)
    return [Item(n, s, t, c) for n, s, t, c in zip(ops["name"].to_pylist(), ops["shapes"].to_pylist(),
                                                   ops["self_ns"].to_pylist(), ops["calls"].to_pylist())], \
        "host op self time"


def check(ctx: AdviceContext) -> list[Finding]:
    found, basis = items(ctx)
    total = sum(i.ns for i in found)
    if not total:
        return []
    findings: list[Finding] = []
    claimed: set[str] = set()
    for alt in ALTERNATIVES:
        matched = [i for i in found if alt.applies(i, ctx)]
        ns = sum(i.ns for i in matched)
        if not matched or ns < ALTERNATIVE_SHARE * total:
            continue
        claimed.update(i.name for i in matched)
        gain = ns if alt.speedup is None else ns * (1 - 1 / alt.speedup)
        saving = ctx.per_step(gain)
        findings.append(Finding(
            rule=RULE.id,
            title=f"{alt.what[0].upper()}{alt.what[1:]}: {100.0 * ns / total:.1f}% of the {basis} "
                  f"({format_ns(ctx.per_step(ns))} per {ctx.unit})",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=(f"{alt.why}; saving = {format_ns(ctx.per_step(ns))} per {ctx.unit} x "
                      + ("1 (the time goes away)" if alt.speedup is None else f"(1 - 1/{alt.speedup:g})")),
            change=alt.change(ctx),
            evidence=_rows(ctx, matched, total),
            evidence_title=f"what it applies to, by {basis}",
        ))
    by_name: dict[str, int] = {}
    for i in found:
        by_name[i.name] = by_name.get(i.name, 0) + i.ns
    for name, ns in sorted(by_name.items(), key=lambda kv: -kv[1]):
        if ns < DOMINANT_SHARE * total:
            break
        if name in claimed:
            continue
        findings.append(Finding(
            rule=RULE.id,
            title=f"{name} takes {100.0 * ns / total:.1f}% of the {basis} ({format_ns(ctx.per_step(ns))} per "
                  f"{ctx.unit})",
            saving_ns=None,
            saving_pct=None,
            estimate=("no faster alternative is known to opscope for this one, so no saving is estimated; what it "
                      "would save is its share times the speed-up you find"),
            change=(f"look at its shapes (opscope ops --by name,shapes --match '{re.escape(name)[:60]}' or "
                    f"opscope kernels --by-op) and benchmark it alone with those shapes against other "
                    f"implementations, dtypes or layouts"),
            evidence=_rows(ctx, [i for i in found if i.name == name], total),
            evidence_title=f"{basis}, by shapes" if ctx.gpu is None else basis,
        ))
    return findings


def _rows(ctx: AdviceContext, matched: list[Item], total: int) -> list[dict]:
    matched = sorted(matched, key=lambda i: -i.ns)[:TOP]
    rows = [{"name": i.name, "shapes": i.shapes, "calls_per_step": round(i.calls / ctx.steps, 2),
             "time_ns": ctx.per_step(i.ns), "share_pct": round(100.0 * i.ns / total, 2)} for i in matched]
    if ctx.gpu is not None:  # kernels have no shapes of their own
        for r in rows:
            del r["shapes"]
    return rows


RULE = Rule(
    id="dominant-op",
    title="One op or kernel dominates; known faster alternatives",
    explain=f"""\
Compares the kernels of a GPU trace by device time (short names: template instances together), or the host
ops of a CPU-only trace by self time (grouped by name and input shapes), inside the steps.

Known alternatives (each reported when what it applies to takes at least {ALTERNATIVE_SHARE:.0%} of that time):
""" + "\n".join(f"- {a.id}: {a.what}. {a.why}. Saving = time x "
                + ("1." if a.speedup is None else f"(1 - 1/{a.speedup:g}).") for a in ALTERNATIVES) + f"""

Tensor cores are read from the device properties (Kineto's deviceProperties, or the GPUs in run.json; without
them, from kernel names that carry their architecture: volta_, turing_, ampere_, hopper_, smXY_): compute
capability 8.0 and newer have TF32 and bf16, 7.x fp16. Kernels whose names show TF32, fp16 or bf16
math (s1688, tf32, hmma, bf16...) are not counted.

Any other item taking at least {DOMINANT_SHARE:.0%} is reported as dominant without an estimated saving:
opscope knows no faster alternative for it, and inventing a speed-up would be a guess.""",
    check=check,
)
