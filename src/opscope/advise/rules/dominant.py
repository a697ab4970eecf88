"""One op or kernel dominating the time, and known faster alternatives for what takes the time.

Items are the kernels of each device (device time, in the steps) on a GPU trace and the host ops (self time, in
the steps) on a CPU-only trace. A kernel carries the op that launched it (name, input shapes, dtypes, strides),
so alternatives are matched on kernel names, op names and the op's inputs: depthwise-convolution backward,
max pooling, fp32 matmuls/convolutions on GPUs with tensor (matrix) cores, and NCHW convolutions where
channels_last is faster (with cuDNN's layout transposes). Any other item above a share of the time is reported
as dominant without an estimate.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext
from opscope.advise.finding import Finding, Rule
from opscope.advise.remedies import COMPARE_AGAINST, framework
from opscope.analyses.arrays import combined, name_match, rows_equal
from opscope.model.buffers import true_positions
from opscope.model.lookup import index_in
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: An item (a kernel's short name with its launching op, or an op's name) taking this share of the time dominates.
DOMINANT_SHARE = 0.25
#: The frameworks whose traces get the alternatives (their changes are PyTorch code); None: not known.
PYTORCH_OR_UNKNOWN = ("pytorch", None)
#: A known alternative is reported when what it applies to takes at least this share of the time.
ALTERNATIVE_SHARE = 0.05
#: Speed-ups assumed (each is explained where it is used and in the rule's text).
DEPTHWISE_SPEEDUP = 2.0
NCHW_SPEEDUP = 1.25
TENSOR_CORE_SPEEDUP = 2.0
TOP = 8


# --- what is compared ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """A kernel name with the op that launched it (GPU), or an op with its inputs (CPU); time over the window."""

    name: str
    group: str  # what dominance is judged on: the kernel's short name with its launching op, or the op's name
    op: str | None  # the launching op (GPU only)
    shapes: str | None  # of the op (the launching op for a kernel)
    dtypes: str | None
    strides: str | None
    ns: int
    calls: int
    kernel: str | None = None  # the kernel's short name (GPU only)


@dataclass(frozen=True)
class Hardware:
    """What faster math the GPU has, and where we read it."""

    vendor: str  # "nvidia" or "amd"
    capability: float | None
    formats: tuple[str, ...]  # of "tf32", "bf16", "fp16"
    source: str


@dataclass(frozen=True)
class Scope:
    """What the matchers know beyond the item."""

    gpu: bool
    hardware: Hardware | None
    #: the framework that wrote the trace (advise.remedies.framework); the alternatives' changes are PyTorch code
    framework: str | None = None


#: A match: (what matched, the speed-up assumed; None: the time goes away).
Match = tuple[str, float | None]


@dataclass(frozen=True)
class Items:
    """The items that can be in a finding (see :func:`_worth_matching`) and the time of all items."""

    items: list[Item]
    total_ns: int


@dataclass(frozen=True)
class Alternative:
    id: str
    what: str
    match: Callable[[Item, Scope], Match | None]
    why: str  # where the factor comes from, on a GPU trace
    why_cpu: str | None  # and on a CPU-only trace (None: does not apply there)
    change: Callable[[Scope], str]
    what_cpu: str | None = None
    #: how to measure it here: the reproducer variant and the ops it applies to (opscope repro --op); None: no
    #: variant stands for it (the change removes the op)
    variant: Callable[[Scope], str] | None = None
    ops: str | None = None

    def text(self, scope: Scope) -> tuple[str, str]:
        """(what, why) for this kind of trace."""
        if scope.gpu:
            return self.what, self.why
        return self.what_cpu or self.what, self.why_cpu or self.why


# --- the matchers --------------------------------------------------------------------------------------------

_DEPTHWISE_BWD = re.compile(r"conv_depthwise[23]d_(backward|grad)|depthwise\w*(backward|grad|bwd|wgrad|dgrad)|"
                            r"DepthwiseConv2dNativeBackprop|dw_?conv\w*(bwd|backward|wrw|grad)", re.IGNORECASE)
_CONV_BWD_OP = re.compile(r"^aten::(convolution_backward|_?slow_conv2d_backward|thnn_conv2d_backward|"
                          r"mkldnn_convolution_backward|cudnn_convolution_backward\w*|miopen\w*convolution_backward\w*)")
_CONV_FWD_OP = re.compile(r"^aten::(mkldnn_convolution|_convolution|convolution|conv2d|_slow_conv2d_forward|"
                          r"thnn_conv2d|cudnn_convolution|miopen_convolution|miopen_depthwise_convolution|"
                          r"_conv_depthwise2d)$")
_CONV_OP = re.compile(r"^aten::\w*conv", re.IGNORECASE)
_MATMUL_OP = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|addbmm|_addmm_activation)$")
_MAX_POOL = re.compile(r"max_?pool", re.IGNORECASE)
_TRANSPOSE = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|transpose_nchw|convertTensorLayout", re.IGNORECASE)
#: Kernels doing the math of a matmul or convolution (not the elementwise or copy kernels such ops also launch).
_MATH_KERNEL = re.compile(r"gemm|conv|cudnn|dgrad|wgrad|fprop|xmma|cutlass|^Cijk_|igemm|engine|fft2d|winograd",
                          re.IGNORECASE)
#: Names that show fp32 math on the ordinary cores (SIMT sgemm, cuDNN's scudnn, fp32 Tensile GEMMs)...
_FP32_NAME = re.compile(r"sgemm|(^|_)scudnn|cutlass_simt_s|gemm_f32f32_f32f32|f32f32_f32f32_f32|^Cijk_\w*?_SB_")
#: ...and cuDNN's older convolution engines instantiated on float (counted when a convolution op launched them).
_FP32_ENGINE = re.compile(r"(dgrad|wgrad|fprop)\w*_engine<float,")
#: Names that show tensor-core math already (TF32, fp16, bf16, fp8), so there is nothing to gain from them.
_FAST_NAME = re.compile(r"tf32|s1688|s16816|s884|h884|h1688|h16816|i8816|hmma|bf16|f16|fp16|half|e4m3|e5m2|fp8|"
                        r"tensorop|wmma|_HB_|_BB_|_HHS|_BBS|^Cijk_\w*?_(H|B)_|nvjet", re.IGNORECASE)


def _any_of(*patterns: re.Pattern) -> str:
    """One pattern that finds what any of these finds (each keeps its own case rule)."""
    return "|".join(f"(?i:{p.pattern})" if p.flags & re.IGNORECASE else f"(?:{p.pattern})" for p in patterns)


#: What a matcher below needs before it can match an item: its kernel (GPU) or op (CPU) name matches one of these
#: (depthwise/convolution backward, max pooling, fp32 GEMM names, layout transposes, NCHW depthwise forward)...
_CANDIDATE_NAME = _any_of(_DEPTHWISE_BWD, _CONV_BWD_OP, _MAX_POOL, _FP32_NAME, _TRANSPOSE, _CONV_FWD_OP)
#: ... or the op that launched it (GPU) matches one of these (every other GPU match needs a matmul/convolution op).
_CANDIDATE_OP = _any_of(_DEPTHWISE_BWD, _CONV_BWD_OP, _MAX_POOL, _MATMUL_OP, _CONV_OP)


def _dims(text: str | None) -> list | None:
    try:
        dims = json.loads(text) if text else None
    except ValueError:
        return None
    return dims if isinstance(dims, list) else None


def _depthwise_weight(item: Item) -> str | None:
    """The weight of a depthwise convolution among the op's inputs ([C*m, 1, kh, kw] on an input of C > 1
    channels), as text, or None. Backward ops have (grad_output, input, weight), forward ones (input, weight)."""
    dims = _dims(item.shapes)
    if not dims or (not item.op and not item.name.startswith("aten::")):
        return None
    op = item.op or item.name
    position = 1 if _CONV_FWD_OP.search(op) else 2 if _CONV_BWD_OP.search(op) else None
    if position is None or len(dims) <= position:
        return None
    x, w = dims[position - 1], dims[position]
    if not (isinstance(x, list) and isinstance(w, list) and len(x) == 4 and len(w) == 4):
        return None
    if w[1] == 1 and x[1] > 1 and w[0] % x[1] == 0:
        return f"weight {json.dumps(w, separators=(',', ':'))}"
    return None


def _nchw_input(item: Item) -> bool | None:
    """Whether the op's first input is a contiguous NCHW tensor (True), channels_last (False), or unknown."""
    dims, strides = _dims(item.shapes), _dims(item.strides)
    if not dims or not strides:
        return None
    x, s = dims[0], strides[0]
    if not (isinstance(x, list) and isinstance(s, list) and len(x) == 4 and len(s) == 4) or x[1] <= 1:
        return None
    if s[1] == 1 and s[3] == x[1]:
        return False
    if s[3] == 1 and s[1] == x[2] * x[3]:
        return True
    return None


def _match_depthwise_backward(item: Item, scope: Scope) -> Match | None:
    for text, what in ((item.name, "name"), (item.op, "op")):
        if text and _DEPTHWISE_BWD.search(text):
            return f"{what}: depthwise backward", DEPTHWISE_SPEEDUP
    op = item.op or item.name
    if _CONV_BWD_OP.search(op):
        weight = _depthwise_weight(item)
        if weight:
            return f"{op} with {weight}", DEPTHWISE_SPEEDUP
    return None


def _match_max_pool(item: Item, scope: Scope) -> Match | None:
    for text, what in ((item.name, "name"), (item.op, "op")):
        if text and _MAX_POOL.search(text):
            return f"{what}: max pooling", None
    return None


def _fp32_math(item: Item, scope: Scope) -> str | None:
    """Why this kernel is fp32 math on the ordinary cores, or None."""
    if _FAST_NAME.search(item.name) or _TRANSPOSE.search(item.name):
        return None
    math_op = bool(item.op and (_MATMUL_OP.search(item.op) or _CONV_OP.search(item.op)))
    if _FP32_NAME.search(item.name) or (math_op and _FP32_ENGINE.search(item.name)):
        return "name: fp32 math"
    if not (math_op and _MATH_KERNEL.search(item.name)):
        return None
    tensors = [d for d in (_dims(item.dtypes) or []) if d and d not in ("Scalar", "ScalarList", "TensorList")]
    if not tensors or any(d != "float" for d in tensors):
        return None
    hw = scope.hardware
    # cuDNN convolutions run TF32 by default on NVIDIA GPUs that have it: only names that show fp32 count there
    if _CONV_OP.search(item.op or "") and hw and hw.vendor == "nvidia" and "tf32" in hw.formats:
        return None
    return "op dtypes: float"


def _match_fp32(item: Item, scope: Scope) -> Match | None:
    if not scope.gpu or scope.hardware is None:
        return None
    why = _fp32_math(item, scope)
    return (why, TENSOR_CORE_SPEEDUP) if why else None


def _kernel_layout(name: str) -> str | None:
    """"nchw" or "nhwc" when a convolution kernel's name says which layout its activations have, else None
    (xmma's "nhwckrsc" names the filter layout, not the activations)."""
    lowered = name.lower().replace("nhwckrsc", "")
    return "nchw" if "nchw" in lowered else "nhwc" if "nhwc" in lowered else None


def _match_nchw(item: Item, scope: Scope) -> Match | None:
    if scope.gpu:
        if _TRANSPOSE.search(item.name):
            return "layout transpose", None
        if scope.hardware is None or not (item.op and _CONV_OP.search(item.op)) \
                or not _MATH_KERNEL.search(item.name):
            return None
        layout = _kernel_layout(item.name)
        if layout == "nchw":
            return "NCHW convolution kernel", NCHW_SPEEDUP
        if layout == "nhwc":  # runs NHWC already (on transposed data if the model is NCHW: the transposes count)
            return None
        # no layout in the name: the op's input strides tell (without strides nothing is claimed)
        return ("convolution of an NCHW input (strides)", NCHW_SPEEDUP) if _nchw_input(item) else None
    # CPU: oneDNN's NCHW path is slow for depthwise convolutions (forward; their backward is matched above)
    weight = _depthwise_weight(item)
    if weight and _CONV_FWD_OP.search(item.name) and _nchw_input(item):
        return f"NCHW depthwise convolution, {weight}", NCHW_SPEEDUP
    return None


# --- hardware ------------------------------------------------------------------------------------------------

_AMD_NAME = re.compile(r"\bAMD\b|Radeon|Instinct|\bMI\d{2,3}", re.IGNORECASE)
_AMD_MATRIX_NAME = re.compile(r"\bMI(100|2\d\d|3\d\d|4\d\d)", re.IGNORECASE)
#: Tensile GEMMs name the matrix (MFMA) instruction they use: the GPU has matrix cores.
_MFMA_KERNEL = re.compile(r"^Cijk_\w*_MI\d+x\d+x\d+")
#: NVIDIA library kernels that name the architecture they were built for.
_ARCH_NAME = re.compile(r"(?:^|[_ ])(volta|turing|ampere|hopper|blackwell|sm(\d)(\d))_", re.IGNORECASE)
_ARCH_CAPABILITY = {"volta": 7.0, "turing": 7.5, "ampere": 8.0, "hopper": 9.0, "blackwell": 10.0}


def _nvidia(capability: float, source: str) -> Hardware | None:
    if capability >= 8.0:
        return Hardware("nvidia", capability, ("tf32", "bf16", "fp16"), source)
    if capability >= 7.0:
        return Hardware("nvidia", capability, ("fp16",), source)
    return None


def hardware(ctx: AdviceContext, kernel_names: list[str]) -> Hardware | None:
    """The faster math of the trace's GPUs: from the device properties (NVIDIA: compute capability >= 8.0 has
    TF32, bf16 and fp16 tensor cores, >= 7.0 fp16; AMD Instinct MI100 and newer, or gfx942/gfx950 (9.4, 9.5), have
    bf16/fp16 matrix cores), else from kernel names (volta_/ampere_/sm80_ prefixes; Tensile GEMMs naming an MFMA
    instruction). None when the GPUs have no tensor cores or nothing says."""
    hip = any(k in (ctx.trace.metadata.get("header") or {}) for k in ("roctracer_version", "hip_runtime_version"))
    best: Hardware | None = None
    decided = False  # an NVIDIA capability (or a known AMD GPU) settles it; kernel names are not looked at
    for p in ctx.device_properties:
        name = p.get("name") or ""
        try:
            cap = float(p.get("capability") or "")
        except ValueError:
            cap = None
        if hip or _AMD_NAME.search(name):
            if _AMD_MATRIX_NAME.search(name) or (cap is not None and 9.4 <= cap < 10):
                best, decided = Hardware("amd", cap, ("bf16", "fp16"), f"device properties: {name}"), True
            continue
        if cap is not None:
            decided = True
            found = _nvidia(cap, f"device properties: {name} (compute capability {cap:.1f})")
            if found and (best is None or (found.capability or 0) > (best.capability or 0)):
                best = found
    if decided:
        return best
    for name in kernel_names:
        if _MFMA_KERNEL.match(name):
            return Hardware("amd", None, ("bf16", "fp16"), f"kernel name {name[:60]} (an MFMA instruction)")
    caps = []
    for name in kernel_names:
        m = _ARCH_NAME.search(name)
        if m:
            caps.append((_ARCH_CAPABILITY.get(m.group(1).lower()) or float(f"{m.group(2)}.{m.group(3)}"), name))
    if caps:
        cap, name = max(caps)
        return _nvidia(cap, f"kernel name {name[:60]}")
    return None


# --- the changes ---------------------------------------------------------------------------------------------

def _depthwise_change(scope: Scope) -> str:
    if scope.gpu:
        return ("put the model and its inputs in channels_last (model.to(memory_format=torch.channels_last), "
                "x.to(memory_format=torch.channels_last)) under torch.autocast('cuda', dtype=torch.float16): PyTorch "
                "hands depthwise convolutions to cuDNN/MIOpen mainly for half-precision inputs, instead of its own "
                "conv_depthwise2d kernels; set torch.backends.cudnn.benchmark = True; or try another grouped-conv "
                "implementation (torch.compile); time the layer alone with its shapes before and after")
    return ("put the model and its inputs in channels_last (model.to(memory_format=torch.channels_last), "
            "x.to(memory_format=torch.channels_last)) so oneDNN's NHWC depthwise kernels run; time the layer alone "
            "with its shapes before and after")


def _pool_change(scope: Scope) -> str:
    return ("drop the MaxPool2d and give the convolution before it stride 2 (or put a stride-2 convolution in its "
            "place), as all-convolutional nets do: no pooling forward or backward, and a convolution with a "
            "quarter of the outputs; this changes the model, so retrain and check accuracy")


def _tensor_core_change(scope: Scope) -> str:
    hw = scope.hardware
    if hw and hw.vendor == "amd":
        return ("run in bf16 on the matrix cores: torch.autocast('cuda', dtype=torch.bfloat16) around the forward "
                "pass and loss (no GradScaler needed for bf16)")
    if hw and "tf32" in hw.formats:
        return ("let fp32 matmuls and convolutions use TF32 tensor cores: torch.backends.cuda.matmul.allow_tf32 = "
                "True (or torch.set_float32_matmul_precision('high')) and torch.backends.cudnn.allow_tf32 = True; "
                "or run in bf16 with torch.autocast('cuda', dtype=torch.bfloat16)")
    return ("use the fp16 tensor cores: torch.autocast('cuda', dtype=torch.float16) around the forward pass and "
            "loss, with torch.amp.GradScaler('cuda') for training")


def _tensor_core_variant(scope: Scope) -> str:
    hw = scope.hardware
    return "tf32" if hw and "tf32" in hw.formats else "autocast_bf16" if hw and "bf16" in hw.formats else \
        "autocast_fp16"


def _nchw_change(scope: Scope) -> str:
    return ("model = model.to(memory_format=torch.channels_last) and x = x.to(memory_format=torch.channels_last) "
            "for the inputs (the DataLoader's batches), so the convolutions run NHWC without layout transposes")


_POOL_WHY = ("a stride-2 convolution in place of the pooling removes the pooling, forward and backward; we count the "
             "pooling time as saved (an upper bound for the pooling: the strided convolution's own cost is not "
             "subtracted, nor the 4x cheaper convolution before it added)")

ALTERNATIVES = (
    Alternative(
        "depthwise-backward", "depthwise-convolution backward", _match_depthwise_backward,
        f"PyTorch's CUDA depthwise backward (conv_depthwise2d_grad kernels) is known to be slow "
        f"(pytorch/pytorch#18631) and cuDNN/MIOpen have depthwise kernels for NHWC (channels_last) inputs; we "
        f"assume {DEPTHWISE_SPEEDUP:g}x from a faster kernel (not measured on a GPU by us)",
        f"oneDNN's NCHW depthwise backward is slow: on our 2-core x86 test CPU (torch 2.13) channels_last made the "
        f"backward of MobileNetV2's depthwise layers 1.9x ([8,144,24,24]) and 4.3x ([8,96,48,48]) faster; we "
        f"assume {DEPTHWISE_SPEEDUP:g}x", _depthwise_change, variant=lambda scope: "channels_last",
        ops="convolution_backward|conv_depthwise2d_backward"),
    Alternative(
        "max-pool", "max pooling", _match_max_pool,
        _POOL_WHY, _POOL_WHY, _pool_change),
    Alternative(
        "fp32-on-tensor-cores", "fp32 matmuls and convolutions on a GPU with tensor cores", _match_fp32,
        f"the GPU has faster math than the fp32 these kernels run on the ordinary cores: vendors quote peak "
        f"ratios of 8x for TF32 (A100: 156 vs 19.5 TFLOPS) and fp16 tensor cores (V100: 125 vs 15.7), and 4-8x "
        f"for bf16 on AMD matrix cores (MI250X: 383 vs 95.7, MI300X: 1307 vs 163); real layers gain less, so we "
        f"assume {TENSOR_CORE_SPEEDUP:g}x", None, _tensor_core_change, variant=_tensor_core_variant,
        ops="linear|mm|matmul|conv"),
    Alternative(
        "nchw-conv", "NCHW convolutions and layout transposes", _match_nchw,
        f"cuDNN and MIOpen's tensor-core convolutions run NHWC: with NCHW tensors they transpose the data (those "
        f"kernels go away with channels_last: counted in full) or run slower NCHW kernels; MosaicML measured "
        f"channels_last making convolutions 1.5-2x faster (ResNet-50 about 30% faster on V100/A100); we assume "
        f"{NCHW_SPEEDUP:g}x for the convolution kernels",
        f"oneDNN's NCHW depthwise convolutions ran 1.1x ([8,144,24,24]) and 12.8x ([8,96,48,48]) slower than "
        f"channels_last on our 2-core x86 test CPU (torch 2.13); dense ones ran 0.9-1.5x, so they are not counted; "
        f"we assume {NCHW_SPEEDUP:g}x", _nchw_change, "NCHW depthwise convolutions",
        variant=lambda scope: "channels_last", ops="conv"),
)


# --- the items -----------------------------------------------------------------------------------------------

def gpu_items(ctx: AdviceContext) -> tuple[dict[int, Items], list[str]]:
    """Per device, its kernels inside the steps (the whole trace without steps), grouped by name and the
    launching op with its inputs (those :func:`_worth_matching`, and the time of all); and every kernel name."""
    from opscope.analyses.arrays import arange, dictionary_codes, rows_where
    from opscope.analyses.kernels import shown_names
    from opscope.analyses.links import device_links

    ev = ctx.trace.select(["kind", "name", "dur_ns", "step", "device"])
    mask = kind_mask(ev, ("kernel",))
    if ctx.has_steps:
        mask = pc.and_(mask, pc.is_valid(ev["step"]))
    k = ev.filter(mask)
    if k.num_rows == 0:
        return {}, []
    links = device_links(ctx.trace)  # (the rows alone: not link_table's names of every kernel's ops)
    op_row = pc.take(links["op_row"], index_in(rows_where(mask), links["device_row"]))  # event_id: the row
    ops = ctx.trace.select(["name", "shapes", "dtypes", "strides"])
    found = true_positions(pc.is_valid(op_row))
    rows = pc.take(op_row, found)
    # kernel and op names grouped by their dictionary codes (each value once: the model's invariant), turned into
    # text per group, not per kernel (a 1 GB trace: a million long kernel names)
    found_codes = dictionary_codes(ops["name"])
    text, codes = (found_codes[0].cast(pa.string()), pc.cast(found_codes[1], pa.int32())) if found_codes else \
        (pa.array([], pa.string()), None)

    # each kernel's position among those with an op (null without one): one lookup for every column below
    spread = index_in(arange(k.num_rows), pc.cast(found, pa.int64())) if len(rows) else None

    def at(column: str, values: pa.ChunkedArray | pa.Array | None = None) -> pa.Array:
        source = ops[column] if values is None else values
        if spread is None:
            return pa.nulls(k.num_rows, pa.int32() if values is not None else pa.string())
        taken = pc.take(source, rows)
        taken = combined(taken)
        return pc.take(taken if values is not None else taken.cast(pa.string()), spread)

    table = pa.table({
        "device": pc.fill_null(k["device"], -1), "name": pc.filter(codes, mask) if codes is not None else
        combined(k["name"]).cast(pa.string()),
        "op": at("name", codes) if codes is not None else at("name"), "shapes": at("shapes"), "dtypes": at("dtypes"),
        "strides": at("strides"), "dur_ns": k["dur_ns"],
    })
    keys = ["device", "name", "op", "shapes", "dtypes", "strides"]
    g = table.group_by(keys, use_threads=False).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    if codes is not None:  # the groups' names as text
        g = g.set_column(1, "name", pc.take(text, g["name"])).set_column(2, "op", pc.take(text, g["op"]))
    shorts = shown_names(ctx.trace, g["name"])
    op = pc.if_else(pc.equal(g["op"], ""), pa.scalar(None, pa.string()), g["op"])
    group = pc.coalesce(pc.binary_join_element_wise(shorts, " (", op, ")", ""), shorts)
    g = g.append_column("short", shorts).append_column("group", group)
    out: dict[int, Items] = {}
    for device in sorted(pc.unique(g["device"]).to_pylist()):
        mine = rows_equal(g, "device", device)
        kept = mine.filter(_worth_matching(mine["name"], mine["op"], mine["group"], mine["dur_ns_sum"]))
        # a kernel or op without a name (a hostile trace) is the empty name: every matcher reads text
        items = [Item(r["name"] or "", f"{r['short'] or r['name']} ({r['op']})" if r["op"] else r["short"] or
                      r["name"] or "", r["op"], r["shapes"], r["dtypes"], r["strides"], r["dur_ns_sum"],
                      r["dur_ns_count"], r["short"] or r["name"]) for r in kept.to_pylist()]
        out[device] = Items(items, pc.sum(mine["dur_ns_sum"]).as_py() or 0)
    names = sorted(n for n in pc.unique(g["name"]).to_pylist() if n is not None)
    return out, names


def cpu_items(ctx: AdviceContext) -> Items:
    """Host ops inside the steps (the whole trace without steps) by name and inputs, with their self time
    (an op whose only child is an op of the same name counts once, as in the ops table): those
    :func:`_worth_matching`, and the time of all."""
    ev = ctx.trace.select(["kind", "name", "shapes", "dtypes", "strides", "op_self_ns", "merged", "step"])
    mask = pc.and_(kind_mask(ev, ("cpu_op",)), pc.invert(pc.fill_null(ev["merged"], False)))
    if ctx.has_steps:
        mask = pc.and_(mask, pc.is_valid(ev["step"]))
    ev = ev.filter(mask)
    if ev.num_rows == 0:
        return Items([], 0)
    keys = ["name", "shapes", "dtypes", "strides"]
    table = pa.table({**{c: combined(ev[c]).cast(pa.string()) for c in keys},
                      "self_ns": pc.fill_null(ev["op_self_ns"], 0)})
    g = table.group_by(keys, use_threads=False).aggregate([("self_ns", "sum"), ("self_ns", "count")])
    kept = g.filter(_worth_matching(g["name"], None, g["name"], g["self_ns_sum"]))
    return Items([Item(r["name"] or "", r["name"] or "", None, r["shapes"], r["dtypes"], r["strides"], r["self_ns_sum"],
                       r["self_ns_count"]) for r in kept.to_pylist()], pc.sum(g["self_ns_sum"]).as_py() or 0)


def _worth_matching(names: pa.ChunkedArray, ops: pa.ChunkedArray | None, groups: pa.ChunkedArray | pa.Array,
                    ns: pa.ChunkedArray) -> pa.Array:
    """Which grouped rows can be in a finding: those an alternative may match (their kernel or op name matches one
    of the patterns the matchers start from) and those of a group with at least DOMINANT_SHARE of the time. The
    others are left as a total: with a million distinct op names, a Python object each took minutes."""
    maybe = combined(name_match(names, _CANDIDATE_NAME))
    if ops is not None:
        maybe = pc.or_(maybe, combined(name_match(ops, _CANDIDATE_OP)))
    total = pc.sum(ns).as_py() or 0
    by_group = pa.table({"group": groups, "ns": ns}).group_by("group", use_threads=False).aggregate([("ns", "sum")])
    big = by_group.filter(pc.greater_equal(pc.cast(by_group["ns_sum"], pa.float64(), safe=False),
                                           DOMINANT_SHARE * total))
    unnamed = pc.or_(pc.is_null(names), pc.is_null(groups))  # kept as they are: their group is not a string
    return pc.or_(pc.or_(maybe, pc.fill_null(pc.is_in(groups, value_set=big["group"]), False)), unnamed)


# --- the rule ------------------------------------------------------------------------------------------------

def check(ctx: AdviceContext) -> list[Finding]:
    if ctx.gpu is not None:
        per_device, names = gpu_items(ctx)
        hw = hardware(ctx, names)
        scope = Scope(True, hw, framework(ctx.trace))
        many = len(per_device) > 1
        findings = []
        for device, items in sorted(per_device.items()):
            where = f" on GPU {device}" if many else ""
            findings += _findings(ctx, items, scope, f"device kernel time{where}", device)
        return findings
    return _findings(ctx, cpu_items(ctx), Scope(False, None, framework(ctx.trace)), "host op self time")


def _findings(ctx: AdviceContext, worth: Items, scope: Scope, basis: str,
              device: int | None = None) -> list[Finding]:
    items, total = worth.items, worth.total_ns
    if not total:
        return []
    matched: dict[str, list[tuple[Item, Match]]] = {a.id: [] for a in ALTERNATIVES}
    for item in items if scope.framework in PYTORCH_OR_UNKNOWN else ():  # their changes are PyTorch code
        for alt in ALTERNATIVES:  # the first alternative that applies claims the item
            m = alt.match(item, scope)
            if m:
                matched[alt.id].append((item, m))
                break
    findings: list[Finding] = []
    covered: dict[str, int] = {}  # group -> its time in the alternatives' findings
    for alt in ALTERNATIVES:
        hits = matched[alt.id]
        ns = sum(i.ns for i, _ in hits)
        if not hits or ns < ALTERNATIVE_SHARE * total:
            continue
        measured = ctx.measured.get(alt.id)
        if measured is not None:  # the speed-up measured here replaces the assumed one
            hits = [(i, (basis, None if f is None else measured.factor)) for i, (basis, f) in hits]
        for i, _ in hits:
            covered[i.group] = covered.get(i.group, 0) + i.ns
        # a measured factor below 1 (slower here) saves nothing: the change is not worth making on this machine
        gain = max(0.0, sum(i.ns if f is None else i.ns * (1 - 1 / f) for i, (_, f) in hits))
        saving = ctx.per_step(gain)
        parts: dict[float | None, int] = {}  # speed-up factor (None: the work goes away) -> its time
        for i, (_, f) in hits:
            parts[f] = parts.get(f, 0) + i.ns
        how = " + ".join(f"{format_ns(ctx.per_step(ns_f))} x " + ("1 (goes away)" if f is None else f"(1 - 1/{f:g})")
                         for f, ns_f in sorted(parts.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)))
        hw = f" Hardware: {scope.hardware.source}." if alt.id == "fp32-on-tensor-cores" and scope.hardware else ""
        what, why = alt.text(scope)
        if measured is not None:
            slower = " - slower, so no saving" if measured.factor < 1 else ""
            why = f"measured on this machine: {measured.detail}{slower} (it replaces the assumed factor)"
        findings.append(Finding(
            rule=RULE.id,
            title=f"{what[0].upper()}{what[1:]}: {100.0 * ns / total:.1f}% of the {basis} "
                  f"({format_ns(ctx.per_step(ns))} per {ctx.unit})",
            saving_ns=saving,
            saving_pct=ctx.pct(saving),
            estimate=f"{why[0].upper()}{why[1:]}. Saving per {ctx.unit} = {how}.{hw}{_bottleneck(ctx, device)}",
            remedy=alt.change(scope) + _measure_hint(ctx, alt, scope),
            saving_method="measured" if measured is not None else "estimated",
            evidence=_rows(ctx, hits, total, scope),
            evidence_title=f"what it applies to, by {basis} (basis: what matched; factor: the speed-up "
                           f"{'measured' if measured is not None else 'assumed'})",
        ))
    by_group: dict[str, int] = {}
    for i in items:
        by_group[i.group] = by_group.get(i.group, 0) + i.ns
    for group, ns in sorted(by_group.items(), key=lambda kv: -kv[1]):
        if ns < DOMINANT_SHARE * total:
            break
        if ns - covered.get(group, 0) < DOMINANT_SHARE * total:  # the alternatives' findings cover enough of it
            continue
        mine = [i for i in items if i.group == group]
        part = covered.get(group, 0)
        also = (f" {format_ns(ctx.per_step(part))} of it is in the findings above, with their estimates."
                if part else "")
        findings.append(Finding(
            rule=RULE.id,
            title=f"{group} takes {100.0 * ns / total:.1f}% of the {basis} ({format_ns(ctx.per_step(ns))} per "
                  f"{ctx.unit})",
            saving_ns=None,
            saving_pct=None,
            estimate=("no known faster alternative, so no saving is estimated: inventing a speed-up would be a "
                      "guess; it would save its time x (1 - 1/the speed-up you measure)." + also),
            remedy=_dominant_change(mine, scope),
            evidence=_rows(ctx, [(i, None) for i in mine], total, scope),
            evidence_title=f"{basis} of {group}, by input shapes" + (" of the launching op" if scope.gpu else ""),
        ))
    return findings


def _measure_hint(ctx: AdviceContext, alt: Alternative, scope: Scope) -> str:
    """Where to measure the change on this machine (the reproducer of the ops it applies to)."""
    if alt.variant is None or alt.ops is None:
        return ""
    measured = ctx.measured.get(alt.id)
    if measured is not None:
        return f". Measured with: {measured.command}"
    source = shlex.quote(str(ctx.trace.metadata.get("source") or "TRACE"))
    return (f". Measure it on this machine: opscope repro {source} --op '{alt.ops}' --variants "
            f"{alt.variant(scope)} (opscope advise --measure uses what it measures)")


def matched_items(ctx: AdviceContext) -> tuple[Scope, list[tuple[Alternative, Item, Match]]]:
    """Every item that an alternative with a variant claims (all devices), for measuring the alternatives: only
    those of an alternative that gets a finding on that device (ALTERNATIVE_SHARE of its time or more), so that
    nothing is measured that no finding would use."""
    if ctx.gpu is not None:
        per_device, names = gpu_items(ctx)
        scope = Scope(True, hardware(ctx, names), framework(ctx.trace))
        groups = list(per_device.values())
    else:
        scope, groups = Scope(False, None, framework(ctx.trace)), [cpu_items(ctx)]
    claimed = []
    for found in groups:
        mine: dict[str, list[tuple[Alternative, Item, Match]]] = {}
        for item in found.items if scope.framework in PYTORCH_OR_UNKNOWN else ():
            for alt in ALTERNATIVES:  # the first alternative that applies claims the item, as in the findings
                m = alt.match(item, scope)
                if m:
                    mine.setdefault(alt.id, []).append((alt, item, m))
                    break
        for hits in mine.values():
            if not found.total_ns or sum(i.ns for _, i, _ in hits) < ALTERNATIVE_SHARE * found.total_ns:
                continue
            claimed += [(alt, item, m) for alt, item, m in hits if alt.variant is not None and m[1] is not None]
    return scope, claimed


def _dominant_change(items: list[Item], scope: Scope) -> str:
    name = items[0].kernel or items[0].name
    inner = re.search(r"<([\w.]+)>$", name)  # wrappers named by what they wrap: cutlass::Kernel2<cutlass_80_...>
    pattern = re.escape(inner.group(1) if inner else name.split("::")[-1])
    against = COMPARE_AGAINST[scope.framework]
    if scope.gpu:
        return (f"see which ops launch it and with what shapes (opscope kernels --by-op --match '{pattern}'; "
                f"opscope ops --gpu --by name,shapes), then time that op alone with those shapes against {against}")
    return (f"see its shapes (opscope ops --by name,shapes --match '{pattern}') and time the op alone with "
            f"those shapes against {against}")


def _bottleneck(ctx: AdviceContext, device: int | None) -> str:
    """How busy the device was: kernel time saved shortens the step only while the device is the bottleneck."""
    if device is None or not ctx.breakdown.num_rows:
        return ""
    busy = [r["busy_pct"] for r in ctx.breakdown.to_pylist() if r["device"] == device]
    if not busy or busy[0] is None:
        return ""
    return (f" The step shortens by this much only while the device is the bottleneck (it was busy "
            f"{busy[0]:.0f}% of the window).")


def _rows(ctx: AdviceContext, hits: Sequence[tuple[Item, Match | None]], total: int, scope: Scope) -> list[dict]:
    """Evidence rows: GPU items by short kernel name, launching op and its input shapes; CPU ones by op and
    input shapes; each with what matched (basis) and the speed-up assumed (factor)."""
    merged: dict[tuple, dict] = {}
    for i, m in hits:
        basis, factor = m if m else (None, None)
        row = merged.setdefault((i.kernel or i.name, i.op, i.shapes, basis), {
            "name": i.kernel or i.name, **({"op": i.op} if scope.gpu else {}), "shapes": i.shapes, "basis": basis,
            "factor": None if m is None else ("goes away" if factor is None else f"{factor:g}x"),
            "calls_per_step": 0, "time_ns": 0})
        row["calls_per_step"] += i.calls
        row["time_ns"] += i.ns
    rows = sorted(merged.values(), key=lambda r: -r["time_ns"])[:TOP]
    for r in rows:
        r["share_pct"] = round(100.0 * r["time_ns"] / total, 2)
        r["calls_per_step"] = round(r["calls_per_step"] / ctx.steps, 2)
        r["time_ns"] = ctx.per_step(r["time_ns"])
    return rows


def _explain_line(a: Alternative) -> str:
    if a.why_cpu == a.why:
        return f"- {a.id}: {a.what}. {a.why[0].upper()}{a.why[1:]}."
    cpu = f" CPU: {a.why_cpu}." if a.why_cpu else " (GPU traces only.)"
    return f"- {a.id}: {a.what}. GPU: {a.why}.{cpu}"


RULE = Rule(
    id="dominant-op",
    title="One op or kernel dominates; known faster alternatives",
    explain=f"""\
Compares the kernels of each GPU by device time (inside the steps; the whole trace without steps), each with
the op that launched it and that op's input shapes, dtypes and strides; on a CPU-only trace, the host ops by
self time, per name and inputs.

Known alternatives, each reported when what it applies to takes at least {ALTERNATIVE_SHARE:.0%} of that time (an
item goes to the first that applies, in this order; saving = time x (1 - 1/speed-up), or all of it where the
time goes away):
""" + "\n".join(_explain_line(a) for a in ALTERNATIVES) + f"""

What counts: depthwise backward = kernels or ops named so (conv_depthwise2d_backward, DepthwiseConv...Backward,
aten::_conv_depthwise2d_backward, depthwise wgrad/dgrad kernels), or a convolution backward whose weight is
[C*m, 1, kh, kw] on an input of C > 1 channels. Max pooling = max_pool names. fp32 math = names showing it
(sgemm, scudnn, Tensile _SB_ GEMMs, cuDNN's dgrad/wgrad/fprop engines on float) or a matmul/convolution kernel
whose op has float inputs only; names showing TF32, fp16, bf16 or fp8 math (tf32, s1688, s16816, h884, hmma,
bf16...) are not counted, nor cuBLASLt's nvjet kernels (their names do not say), nor, on NVIDIA GPUs with TF32,
convolutions without an fp32 name (cuDNN uses TF32 by default). Tensor cores are read from the device properties
(NVIDIA compute capability >= 8.0: TF32, bf16, fp16; >= 7.0: fp16; AMD Instinct MI100 and newer or
gfx942/gfx950: bf16/fp16 matrix cores), else from kernel names (volta_, ampere_, sm80_...; Tensile GEMMs naming
an MFMA instruction). NCHW = cuDNN layout transposes (nchwToNhwc...), and on tensor-core GPUs convolution
kernels whose name says nchw, or, with no layout in the name, whose op's input strides are NCHW (without strides
nothing is assumed); on the CPU, depthwise convolutions with NCHW input strides.

Any other item (a kernel's short name with the op that launched it; an op's name on the CPU) taking at least
{DOMINANT_SHARE:.0%} is reported as dominant without an estimated saving: opscope knows no faster alternative
for it. Left out: whether the device is the bottleneck (a kernel's time shortens the step only while it is; the
estimate says how busy the device was), and speed-ups of the model's other layers from the same change.""",
    check=check,
    not_simulated="the alternative's speed-up is assumed or measured (advise --measure), not a duration the trace has",
    releases=("opscope.analyses.links",),  # the device events' launches: the dependency graph reads them first
)
