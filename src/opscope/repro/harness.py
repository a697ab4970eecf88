"""A standalone reproducer of one op call from a trace, written by opscope (``opscope repro``).

It needs only torch. It rebuilds the call's inputs with the recorded shapes, strides and dtypes (random values,
fixed seed), times the op, checks under torch.profiler that it runs what the trace recorded under the op, and
times the variants (the code changes worth trying) beside it, comparing their outputs with the baseline's.

    python THIS_FILE.py [--device D] [--budget SECONDS] [--variants auto|all|none|NAME,...] [--json PATH]
                        [--no-check]

Exit status: 0 when the baseline ran (even if a variant failed), 3 when the case could not run (the reason is in
the output), 2 for a bad command line or an unwritable --json path.
"""

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch


class T(NamedTuple):
    """A tensor input: size, strides and dtype (a ``torch`` attribute name) as recorded. ``high``: exclusive upper
    bound of an integer tensor whose values index something; None: small values in [0, 8)."""

    size: tuple
    stride: tuple
    dtype: str
    high: int | None = None


# --- the case ---
# Everything below is the same in every reproducer: it reads the case above (OP, ARGS, ...) and runs it.

DEFAULT_BUDGET = 1.0  # seconds of timing for the baseline, and again for each variant
WARMUP_CALLS = 3

#: torch.testing's default (rtol, atol) per output dtype; dtypes not listed (integers, bool) must match exactly.
TOLERANCES = {  # (rtol, atol): torch.testing's, but rtol for float32/64 allows a reordered reduction (see below)
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-10, 1e-7),
}

NO_COMPILER = "no C++ compiler for torch.compile (inductor): install g++"


class Case(NamedTuple):
    """The case's literals, read from the script's globals."""

    op: str
    overload: str
    device: str
    args: list
    kwargs: dict
    trace_ns: int | None
    recorded_ops: list | None  # None: not recorded (nothing to check against); []: the trace ran none under it
    recorded_kernels: list
    variants: dict

    @classmethod
    def from_namespace(cls, ns: dict) -> "Case":
        return cls(op=ns["OP"], overload=ns.get("OVERLOAD", "default"), device=ns.get("DEVICE", "cpu"),
                   args=list(ns.get("ARGS", [])), kwargs=dict(ns.get("KWARGS", {})), trace_ns=ns.get("TRACE_NS"),
                   recorded_ops=None if ns.get("RECORDED_OPS") is None else list(ns["RECORDED_OPS"]),
                   recorded_kernels=list(ns.get("RECORDED_KERNELS", [])), variants=dict(ns.get("VARIANTS", {})))


class CaseError(Exception):
    """The case cannot run here; ``reason`` becomes the result's status."""

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


# ---------------------------------------------------------------------------------------------------- inputs


def storage_elements(t: T) -> int:
    """Elements a storage needs so that every element of the strided view lies in it (0 for an empty tensor)."""
    if any(n == 0 for n in t.size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.size, t.stride))


def make_tensor(t: T, device: str) -> torch.Tensor:
    """A tensor with exactly ``t``'s size, strides and dtype: random values in a storage viewed with as_strided."""
    dtype = getattr(torch, t.dtype)
    n = storage_elements(t)
    if dtype == torch.bool:
        storage = torch.randint(0, 2, (n,), device=device).bool()
    elif dtype.is_floating_point or dtype.is_complex:
        # randn has no float8 kernels: draw in float32 and convert
        draw = torch.float32 if dtype.itemsize == 1 else dtype
        storage = torch.randn(n, dtype=draw, device=device).to(dtype)
    else:
        high = t.high or 8
        if dtype.is_signed or dtype == torch.uint8:
            high = min(high, torch.iinfo(dtype).max + 1)  # a bound the dtype cannot hold would wrap around
        storage = torch.randint(0, high, (n,), device=device).to(dtype)
    return torch.as_strided(storage, tuple(t.size), tuple(t.stride))


def build_value(value: Any, device: str) -> Any:
    """An argument as the op gets it: each T becomes a tensor (also inside lists); anything else is passed as is."""
    if isinstance(value, T):  # before the list case: T is a tuple
        return make_tensor(value, device)
    if isinstance(value, list | tuple):
        return [build_value(v, device) for v in value]
    return value


def build_inputs(case: Case, device: str) -> tuple[list, dict]:
    """The op's positional and keyword arguments, the same values on every call (a fixed seed)."""
    torch.manual_seed(0)
    args = [build_value(a, device) for a in case.args]
    kwargs = {k: build_value(v, device) for k, v in case.kwargs.items()}
    return args, kwargs


def map_tensors(value: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``change`` applied to every tensor in it (lists and dicts recursed)."""
    if isinstance(value, torch.Tensor):
        return change(value)
    if isinstance(value, list | tuple):
        return [map_tensors(v, change) for v in value]
    if isinstance(value, dict):
        return {k: map_tensors(v, change) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------------- the op


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, or None."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        return f"unknown device {device!r}"
    if kind == "cuda" and not torch.cuda.is_available():
        return "cuda is not available here (run with --device cpu)"
    if kind == "mps" and not torch.backends.mps.is_available():
        return "mps is not available here (run with --device cpu)"
    if kind == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return "xpu is not available here (run with --device cpu)"
    return None


def resolve_op(op: str, overload: str) -> Any:
    """``torch.ops.<ns>.<name>.<overload>``; CaseError when this torch does not have it."""
    ns, _, name = op.partition("::")
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError) as e:
        raise CaseError(f"op {op}.{overload} is not registered in this torch ({torch.__version__})", e) from e


def is_inplace(op_name: str, op: Any) -> bool:
    """Whether the op writes into its inputs (``add_``, or a ``Tensor(a!)`` argument such as ``out=``)."""
    name = op_name.rpartition("::")[2]
    if name.endswith("_") and not name.endswith("__"):  # __and__ is not in-place (__iand__ is, by its schema)
        return True
    schema = getattr(op, "_schema", None)
    if schema is None:
        return False
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def device_kind(device: str) -> str:
    """``cuda`` of ``cuda:1``: the device type, without asking torch (a trace's device string may be anything)."""
    return device.partition(":")[0]


def synchronize(device: str) -> None:
    """Wait for the device's queued work (kernels run asynchronously on GPUs)."""
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind in ("xpu", "mps") and hasattr(torch, kind):
        getattr(torch, kind).synchronize()


def tensors_of(output: Any) -> list[torch.Tensor]:
    """The op's result flattened to a list of tensors, copied to the CPU (an in-place op's result aliases an input
    that later calls change). Python numbers become 0-d tensors."""
    if isinstance(output, torch.Tensor):
        return [output.detach().to("cpu", copy=True)]
    if isinstance(output, list | tuple):
        return [t for item in output for t in tensors_of(item)]
    if isinstance(output, bool | int | float | complex):
        return [torch.tensor(output)]
    return []


def first_call(fn: Callable[[], Any], device: str) -> list[torch.Tensor]:
    """Call ``fn`` once on its fresh inputs and wait for the device: its outputs, on the CPU (what variants are
    compared with)."""
    outputs = tensors_of(fn())
    synchronize(device)
    return outputs


def warm_up(fn: Callable[[], Any], device: str, calls: int = WARMUP_CALLS) -> None:
    """Call ``fn`` ``calls`` times, waiting for the device each time (caches, allocators, lazy initialisation)."""
    for _ in range(calls):
        fn()
        synchronize(device)


#: Timed runs each side needs at least (the baseline alone, a variant, the baseline beside it), even past the
#: budget: opscope's interval of a speed-up needs 5 runs a side.
MIN_RUNS = 5


def time_fn(fn: Callable[[], Any], budget: float, threads: int, min_runs: int = MIN_RUNS) -> dict:
    """One call's time over about ``budget`` seconds of runs (at least ``min_runs``, even past the budget): a run
    is a block of ``calls_per_run`` calls, and its time is the block's over its calls, in ns. ``times_ns``: every
    run's; ``replay_ns``: their median; ``runs``: how many. torch's Timer synchronises CUDA around each block; it
    runs 1 thread unless told, so it is told."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=budget)
    times = list(m.times)
    while len(times) < min_runs:
        times.extend(timer.timeit(m.number_per_run).times)
    times_ns = [round(t * 1e9) for t in times]
    return {"replay_ns": median_of(times_ns), "runs": len(times_ns), "calls_per_run": m.number_per_run,
            "times_ns": times_ns}


def median_of(values: list) -> int | None:
    """The median of ``values``, rounded to an integer (None for none)."""
    return round(statistics.median(values)) if values else None


def quantile(values: list, q: float) -> float:
    """The ``q`` quantile of ``values``, interpolated linearly between the two order statistics around position
    ``q x (n - 1)`` (what opscope's tables show as p10 and p90)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def significant(x: float) -> float:
    """``x`` to 4 significant digits (a ratio of 1e-5 or 1e5 keeps its digits, unlike round(x, 4))."""
    return float(f"{x:.4g}")


def one_line(e: BaseException) -> str:
    """``Type: first line of the message`` (cut at 300 characters)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
    return text[:300]


# ---------------------------------------------------------------------------------------------------- check


def descendant_names(event: Any) -> list[str]:
    """Distinct names of the ops that ran under a profiler event, in first-seen (depth-first) order."""
    names: dict[str, None] = {}
    stack = list(reversed(event.cpu_children))
    while stack:
        child = stack.pop()
        names.setdefault(child.name)
        stack.extend(reversed(child.cpu_children))
    return list(names)


#: Calls timed under the profiler after one untimed call (the first call under a profiler is much slower).
PROFILED_CALLS = 5


def profile_once(fn: Callable[[], Any], op_name: str, device: str) -> tuple[list[str], list[str], int | None]:
    """Run ``fn`` under torch.profiler recording shapes, memory and FLOPs (as ``opscope record`` does): the child
    ops under the op's event, the kernels (GPU only), and the median duration in ns of the op's event over
    :data:`PROFILED_CALLS` calls after the first: the replay's time with the recording's profiler overhead."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True, with_flops=True) as prof:
        for _ in range(1 + PROFILED_CALLS):
            fn()
            synchronize(device)
    events = prof.events()
    named = [e for e in events if e.name == op_name]
    if not named:
        raise LookupError(f"{op_name} did not appear in the profile")
    tops = sorted((e for e in named if e.cpu_parent is None), key=lambda e: e.time_range.start) or named[:1]
    top = tops[0]  # the first call itself, not a nested one
    timed = sorted(round(e.time_range.elapsed_us() * 1000) for e in tops[1:])
    profiled_ns = timed[len(timed) // 2] if timed else None
    kernels: dict[str, None] = {}
    if on_gpu:
        # only this op ran under the profiler, so every device event is the op's
        for e in events:
            if e.device_type != torch.autograd.DeviceType.CPU:
                kernels.setdefault(e.name)
    return descendant_names(top), list(kernels), profiled_ns


def compare_names(recorded: list, replayed: list) -> dict:
    """``same`` / ``differs`` of two name sets, with what each lacks."""
    rec, rep = set(recorded), set(replayed)
    return {"check": "same" if rec == rep else "differs", "recorded": list(recorded), "replayed": list(replayed),
            "missing": [n for n in recorded if n not in rep], "extra": [n for n in replayed if n not in rec]}


def check_case(case: Case, fn: Callable[[], Any], device: str) -> dict:
    """What the replay ran under the op against what the trace recorded: kernels on a GPU when the trace has them,
    else child ops (an empty list: the trace recorded none, so the replay should run none either). ``check`` is
    None when the case carries no recording or the profiler failed (``check_note`` says)."""
    on_gpu = device_kind(device) == "cuda"
    of = "kernels" if on_gpu and case.recorded_kernels else "ops"
    recorded = case.recorded_kernels if of == "kernels" else case.recorded_ops
    out: dict = {"check": None, "check_of": None, "check_note": None, "profiled_ns": None, "profiled_ratio": None}
    notes = []
    try:
        ops, kernels, profiled_ns = profile_once(fn, case.op, device)
    except Exception as e:
        notes.append(f"the profiler failed: {one_line(e)}")
    else:
        out["profiled_ns"] = profiled_ns
        if profiled_ns and case.trace_ns:
            out["profiled_ratio"] = significant(profiled_ns / case.trace_ns)
        replayed = kernels if of == "kernels" else ops
        if recorded is not None:
            out.update(compare_names(list(recorded), replayed), check_of=of)
        else:
            out["replayed"] = replayed
            notes.append("the case carries no recorded ops or kernels: nothing to compare")
    if device_kind(device) != device_kind(case.device):
        notes.append(f"the recorded {of} came from a {case.device} trace and this replay ran on {device}: "
                     "they can differ for that reason alone")
    out["check_note"] = "; ".join(notes) or None
    return out


# ---------------------------------------------------------------------------------------------------- compare


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """torch.testing's default (rtol, atol) for ``dtype``; (0, 0), exact, for integers, bool and the rest."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


def compare_tensors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float, bool]:
    """Max absolute error, relative error (max |a-b| over max |b|: relative to the output's magnitude) and whether
    ``got`` is within the tolerance of ``want``'s dtype: max |a-b| <= atol + rtol * max |b|. Relative to the
    magnitude, not to each element, because another kernel or layout sums in another order, which moves a result
    by a few units of the output's scale, not of each element's (an element near zero would fail any elementwise
    test). Compared in float64 (complex128) on the CPU; NaN in the same places counts as equal, a NaN on one side
    only is an infinite error."""
    rtol, atol = tolerance(want.dtype)
    wide = torch.complex128 if (want.is_complex() or got.is_complex()) else torch.float64
    a = got.detach().to(want.dtype).to("cpu").to(wide)  # a variant's output in the baseline's dtype first
    b = want.detach().to("cpu").to(wide)
    if a.shape != b.shape:
        return math.inf, math.inf, False
    if a.numel() == 0:
        return 0.0, 0.0, True
    both_nan = torch.isnan(a) & torch.isnan(b)
    equal = (a == b) | both_nan  # also infinities of the same sign, where a - b is NaN
    zero, inf = torch.zeros((), dtype=torch.float64), torch.full((), math.inf, dtype=torch.float64)
    diff = (a - b).abs()
    diff = torch.where(equal, zero, torch.where(torch.isnan(diff), inf, diff))
    finite = torch.where(torch.isfinite(b.abs()), b.abs(), zero)
    scale = float(finite.max())
    worst = float(diff.max())
    rel = worst / max(scale, torch.finfo(torch.float64).tiny) if worst else 0.0
    within = worst <= atol + rtol * scale
    return worst, rel, within


def compare_outputs(got: list[torch.Tensor], want: list[torch.Tensor]) -> dict:
    """The variant-result fields that compare a variant's outputs with the baseline's (worst over the tensors)."""
    if len(got) != len(want):
        return {"max_abs_err": None, "max_rel_err": None, "within_tolerance": False}
    worst_abs, worst_rel, within = 0.0, 0.0, True
    for g, w in zip(got, want):
        e_abs, e_rel, ok = compare_tensors(g, w)
        worst_abs, worst_rel, within = max(worst_abs, e_abs), max(worst_rel, e_rel), within and ok
    return {"max_abs_err": worst_abs, "max_rel_err": worst_rel, "within_tolerance": within}


# ---------------------------------------------------------------------------------------------------- variants


@contextlib.contextmanager
def switched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    """``obj.attr = value`` for the block, then the old value back (whatever the block raised)."""
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


@contextlib.contextmanager
def unchanged(device: str) -> Iterator[None]:
    """No global switch (variants that change the inputs or the call instead)."""
    yield


@contextlib.contextmanager
def tf32(device: str) -> Iterator[None]:
    with switched(torch.backends.cuda.matmul, "allow_tf32", True), switched(torch.backends.cudnn, "allow_tf32", True):
        yield


@contextlib.contextmanager
def fp32_precision_high(device: str) -> Iterator[None]:
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def autocast_to(dtype: torch.dtype) -> Callable[[str], contextlib.AbstractContextManager]:
    """The context of an autocast variant; the autocast block restores the previous state itself."""
    return lambda device: torch.autocast(device_type=torch.device(device).type, dtype=dtype)


@contextlib.contextmanager
def cudnn_benchmark(device: str) -> Iterator[None]:
    with switched(torch.backends.cudnn, "benchmark", True):
        yield


@contextlib.contextmanager
def no_cudnn(device: str) -> Iterator[None]:
    # cudnn.flags(enabled=False) would also reset benchmark, deterministic and TF32 to its defaults: switch one flag
    with switched(torch.backends.cudnn, "enabled", False):
        yield


@contextlib.contextmanager
def no_mkldnn(device: str) -> Iterator[None]:
    # as above: mkldnn.flags(enabled=False) resets the other oneDNN flags too
    with switched(torch.backends.mkldnn, "enabled", False):
        yield


@contextlib.contextmanager
def deterministic(device: str) -> Iterator[None]:
    # an op without a deterministic implementation raises RuntimeError in the block: the variant's status
    old = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old[0], warn_only=old[1])


@contextlib.contextmanager
def thread_count(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def channels_last(t: torch.Tensor) -> torch.Tensor:
    """4-D tensors to channels_last, 5-D to channels_last_3d, the rest unchanged."""
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


class Variant(NamedTuple):
    """How a variant differs from the baseline: the device type it needs, the global switch it flips (a context
    manager factory taking the device), how it changes each tensor input, its thread count, whether it compiles."""

    needs: str | None = None
    state: Callable[[str], contextlib.AbstractContextManager] = unchanged
    inputs: Callable[[torch.Tensor], torch.Tensor] | None = None
    threads: int | None = None
    compiled: bool = False


KNOWN_VARIANTS = {
    "channels_last": Variant(inputs=channels_last),
    "contiguous": Variant(inputs=lambda t: t.contiguous()),
    "tf32": Variant(needs="cuda", state=tf32),
    "fp32_precision_high": Variant(state=fp32_precision_high),
    "autocast_bf16": Variant(state=autocast_to(torch.bfloat16)),
    "autocast_fp16": Variant(state=autocast_to(torch.float16)),
    "cudnn_benchmark": Variant(needs="cuda", state=cudnn_benchmark),
    "no_cudnn": Variant(needs="cuda", state=no_cudnn),
    "no_mkldnn": Variant(needs="cpu", state=no_mkldnn),
    "deterministic": Variant(state=deterministic),
    "compile": Variant(compiled=True),
}


def known_variant(name: str) -> Variant | None:
    """The variant called ``name`` (``threads=N`` for any N >= 1), or None when the harness does not know it."""
    if name.startswith("threads="):
        n = name.removeprefix("threads=")
        return Variant(needs="cpu", threads=int(n)) if n.isdigit() and int(n) > 0 else None
    return KNOWN_VARIANTS.get(name)


def select_variants(spec: str, variants: dict) -> list[str]:
    """``auto``: every variant of the case but compile (minutes of compiling); ``all``; ``none``; or names."""
    spec = spec.strip()
    if spec == "auto":
        return [n for n in variants if n != "compile"]
    if spec == "all":
        return list(variants)
    if spec == "none":
        return []
    return [n.strip() for n in spec.split(",") if n.strip()]


def variant_problem(variant: Variant | None, device: str) -> str | None:
    """Why a variant cannot run on ``device``, or None."""
    if variant is None:
        return "unknown variant"
    kind = torch.device(device).type
    if variant.needs is not None and kind != variant.needs:
        return f"needs {variant.needs}"
    if variant.compiled and kind == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cc")):
        return NO_COMPILER
    return None


#: A variant and its baseline are timed in this many alternating rounds: on a shared machine the speed of the
#: same call drifts (another process takes a core), and alternating exposes both to the same drift.
ROUNDS = 3


def run_variant(name: str, case: Case, op: Any, device: str, budget: float, baseline: dict) -> dict:
    """One variant: its own fresh inputs (the same values as the baseline's), warmed up, then timed in rounds
    alternating with the baseline, and its outputs compared with the baseline's. ``times_ns``: every run of the
    variant; ``baseline_times_ns``: every run of the baseline in those rounds (opscope computes the speed-up's
    interval from the two); ``speedup`` = the baseline's median over the variant's. Failures become its status;
    global state is restored whatever happens."""
    result: dict = {"name": name, "change": case.variants.get(name), "status": "ok", "replay_ns": None,
                    "runs": None, "calls_per_run": None, "times_ns": None, "speedup": None, "baseline_ns": None,
                    "baseline_times_ns": None, "max_abs_err": None, "max_rel_err": None, "within_tolerance": None}
    variant = known_variant(name)
    problem = variant_problem(variant, device)
    if problem is not None or variant is None:
        result["status"] = problem
        return result
    threads = variant.threads or torch.get_num_threads()
    per_round = -(-MIN_RUNS // ROUNDS)  # runs per round, so that the rounds make at least MIN_RUNS a side
    try:
        args, kwargs = build_inputs(case, device)
        if variant.inputs is not None:
            args, kwargs = map_tensors(args, variant.inputs), map_tensors(kwargs, variant.inputs)
        with contextlib.ExitStack() as stack:
            if variant.compiled:
                stack.callback(torch.compiler.reset)  # drop the compiled code and its guards afterwards
            fn = call_of(op, args, kwargs, compiled=variant.compiled)
            with variant_state(variant, device):
                started = time.perf_counter()
                outputs = first_call(fn, device)  # for compile, this call compiles
                if variant.compiled:
                    result["compile_s"] = round(time.perf_counter() - started, 3)
                warm_up(fn, device)
            base_times, variant_times, calls = [], [], []
            for _ in range(ROUNDS):
                timed = time_fn(baseline["fn"], budget / ROUNDS, torch.get_num_threads(), per_round)
                base_times.extend(timed["times_ns"])
                baseline.setdefault("times_ns", []).extend(timed["times_ns"])
                with variant_state(variant, device):
                    timed = time_fn(fn, budget / ROUNDS, threads, per_round)
                variant_times.extend(timed["times_ns"])
                calls.append(timed["calls_per_run"])
    except Exception as e:
        result["status"] = one_line(e)
        return result
    result.update(replay_ns=median_of(variant_times), runs=len(variant_times), calls_per_run=min(calls),
                  times_ns=variant_times, baseline_ns=median_of(base_times), baseline_times_ns=base_times)
    if result["replay_ns"]:
        result["speedup"] = significant(result["baseline_ns"] / result["replay_ns"])
    result.update(compare_outputs(outputs, baseline["outputs"]))
    return result


@contextlib.contextmanager
def variant_state(variant: Variant, device: str) -> Iterator[None]:
    """The global switches and thread count of a variant, undone on leaving."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(variant.state(device))
        if variant.threads:
            stack.enter_context(thread_count(variant.threads))
        yield


def call_of(op: Any, args: list, kwargs: dict, compiled: bool = False) -> Callable[[], Any]:
    """A no-argument function that calls the op on these inputs (through torch.compile if ``compiled``)."""
    if not compiled:
        return lambda: op(*args, **kwargs)

    def call(*a: Any, **k: Any) -> Any:
        return op(*a, **k)

    fast = torch.compile(call)  # the inputs are passed in, not closed over, so they are graph inputs
    return lambda: fast(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------- main


def new_result(case: Case, device: str) -> dict:
    """The result object before anything ran."""
    return {"status": "ok", "op": case.op, "overload": case.overload, "device": device,
            "trace_device": case.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "replay_ns": None, "runs": None, "calls_per_run": None, "times_ns": None, "trace_ns": case.trace_ns,
            "ratio": None, "profiled_ns": None, "profiled_ratio": None, "check": None, "check_of": None,
            "check_note": None,
            "recorded": [], "replayed": [], "missing": [], "extra": [], "variants": [], "notes": [], "error": None}


def run_case(case: Case, device: str, budget: float, variants: str, check: bool, result: dict) -> None:
    """Fill ``result``: the baseline's time, the check and the variants. CaseError when the case cannot run."""
    problem = device_problem(device)
    if problem:
        raise CaseError(problem)
    op = resolve_op(case.op, case.overload)
    try:
        args, kwargs = build_inputs(case, device)
    except Exception as e:
        raise CaseError(f"could not build the inputs: {one_line(e)}", e) from e
    if is_inplace(case.op, op):
        result["notes"].append("in-place op: inputs change between timed runs")

    fn = call_of(op, args, kwargs)
    try:
        outputs = first_call(fn, device)
        warm_up(fn, device)
        result.update(time_fn(fn, budget, torch.get_num_threads()))
    except Exception as e:
        raise CaseError(f"the op raised: {one_line(e)}", e) from e
    if case.trace_ns:
        result["ratio"] = significant(result["replay_ns"] / case.trace_ns)

    if check:
        result.update(check_case(case, fn, device))
    else:
        result["check_note"] = "not checked (--no-check)"

    alone = len(result["times_ns"])
    baseline = {"outputs": outputs, "fn": fn, "times_ns": result["times_ns"]}
    for name in select_variants(variants, case.variants):
        result["variants"].append(run_variant(name, case, op, device, budget, baseline))
    if len(baseline["times_ns"]) > alone:
        # the baseline was timed again beside each variant: the median of all its runs is steadier than the first
        # ones alone on a shared machine (a busy neighbour can slow a multi-threaded op several times for a while)
        times = baseline["times_ns"]
        result.update(replay_ns=median_of(times), runs=len(times), times_ns=times)
        result["notes"].append(f"replay_ns: the median of the baseline's {len(times)} timed runs (alone, then "
                               f"beside each variant), {format_ns(min(times))} to {format_ns(max(times))}")
        if case.trace_ns:
            result["ratio"] = significant(result["replay_ns"] / case.trace_ns)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats written as strings ("inf", "nan"): JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(result: dict, path: str) -> None:
    """Write ``result`` to ``path`` whole or not at all (a temporary file in the same folder, then renamed)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".repro-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(json_safe(result), f, indent=1, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def format_ns(ns: Any) -> str:
    """A time in ns as text with a unit: 812 ns, 45.6 us, 1.23 ms, 2.5 s."""
    if not isinstance(ns, int | float):
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def p10_p90(times: Any) -> str:
    """``1.2 ms-1.5 ms``: the 10th to 90th percentile of a list of times in ns."""
    if not times:
        return "-"
    return f"{format_ns(quantile(times, 0.1))}-{format_ns(quantile(times, 0.9))}"


def spread_text(times: Any) -> str:
    """``p10-p90 1.2 ms-1.5 ms, 12 runs``."""
    return f"p10-p90 {p10_p90(times)}, {len(times or ())} runs"


def format_err(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def summary(result: dict) -> str:
    """The readable report printed when --json is not given."""
    lines = [f"op: {result['op']}.{result['overload']}   torch {result['torch']}   threads {result['threads']}"]
    device = result["device"]
    if device != result["trace_device"]:
        device += f" (trace: {result['trace_device']})"
    lines.append(f"device: {device}")
    if result["status"] != "ok":
        lines.append(f"status: {result['status']}")
        return "\n".join(lines) + "\n"
    ratio = f"   ratio {result['ratio']:.2f}" if result["ratio"] is not None else ""
    lines.append(f"replay: {format_ns(result['replay_ns'])} median ({spread_text(result['times_ns'])})   "
                 f"trace: {format_ns(result['trace_ns'])}{ratio}")
    if result["check"] is not None:
        lines.append(f"check ({result['check_of']}): {result['check']}: {len(result['recorded'])} recorded, "
                     f"{len(result['replayed'])} replayed")
        lines.extend(f"  {key}: {', '.join(result[key])}" for key in ("missing", "extra") if result[key])
    else:
        lines.append("check: -")
    if result["check_note"]:
        lines.append(f"  ({result['check_note']})")
    lines.extend(f"note: {n}" for n in result["notes"])
    if result["variants"]:
        lines.append("variants:")
        lines.append(f"  {'name':<22}{'time':>10}{'p10-p90':>22}{'speed-up':>10}{'max abs err':>13}"
                     f"{'max rel err':>13}  within tol")
        for v in result["variants"]:
            if v["status"] != "ok":
                lines.append(f"  {v['name']:<22}{v['status']}")
                continue
            speedup = f"{v['speedup']:.2f}x" if v["speedup"] else "-"
            within = {True: "yes", False: "NO"}.get(v["within_tolerance"], "-")
            lines.append(f"  {v['name']:<22}{format_ns(v['replay_ns']):>10}{p10_p90(v['times_ns']):>22}{speedup:>10}"
                         f"{format_err(v['max_abs_err']):>13}{format_err(v['max_rel_err']):>13}  {within}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Time one op call as recorded in a trace, check it, try variants.")
    parser.add_argument("--device", help="run on this device instead of the trace's (cpu, cuda, cuda:1, ...)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                        help="seconds of timing for the baseline and again for each variant (default 1.0)")
    parser.add_argument("--variants", default="auto",
                        help="auto (all but compile), all, none, or names separated by commas (default auto)")
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH instead of printing it")
    parser.add_argument("--no-check", action="store_true", help="skip the profiler check")
    parser.add_argument("--threads", type=int, help="CPU threads for the op (torch.set_num_threads); default: torch's")
    opts = parser.parse_args(argv)
    if opts.threads is not None and opts.threads < 1:
        parser.error("--threads must be a positive number")
    if not opts.budget > 0:
        parser.error("--budget must be a positive number of seconds")
    return opts


def prime_allocator() -> None:
    """Free one 16 MiB block before anything is timed. In a fresh process glibc maps fresh pages for every large
    allocation (its threshold rises only when a larger block is freed), so an op whose outputs are a few MB paid
    page faults on every call: a depthwise backward ran 2.3 ms instead of 0.55 ms, until a variant's bigger
    allocation raised the threshold and the baseline sped up in mid-run. After this free, blocks below 16 MiB come
    from the heap, as in a training process that has long since freed big activations."""
    block = torch.empty(16 << 20, dtype=torch.uint8)
    del block


def main(namespace: dict, argv: list[str] | None = None) -> int:
    """Run the case in ``namespace`` (a script's globals); 0 when the baseline ran, 3 when it could not."""
    opts = parse_args(argv)
    case = Case.from_namespace(namespace)
    device = opts.device or case.device
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    prime_allocator()
    result = new_result(case, device)
    if opts.device and opts.device != case.device:
        result["notes"].append(f"device: {device} (trace: {case.device}), chosen with --device")
    try:
        run_case(case, device, opts.budget, opts.variants, not opts.no_check, result)
    except CaseError as failed:
        result["status"] = failed.reason
        result["error"] = one_line(failed.error) if failed.error is not None else None
    if opts.json:
        try:
            write_json(result, opts.json)
        except OSError as e:
            sys.stderr.write(f"error: cannot write {opts.json}: {e.strerror or e}\n")
            return 2
    else:
        sys.stdout.write(summary(result))
    return 0 if result["status"] == "ok" else 3
