"""Input pipeline bottleneck: the step waits for the DataLoader while the device (or the CPU's compute) idles.

PyTorch's DataLoader records each ``__next__`` as ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``
(``_MultiProcessingDataLoaderIter`` with workers). On a GPU trace the cost is the device's idle time while the
host is in such a span (the ``input_pipeline`` idle cause); on a CPU-only trace it is the time the main
thread spends in them inside the steps.

The cause is usually the user's own ``__getitem__`` (decoding, augmenting, building samples in Python): when the
trace has Python frames (``with_stack``), the rule names the user's frames that run inside the DataLoader spans
and their time. Worker processes only help when cores are free for them, so ``num_workers`` is suggested only
when run.json says so (usable cores minus torch's intra-op threads minus the host's load from other processes).
"""

from __future__ import annotations

import bisect
import re
import sys
from collections import defaultdict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from opscope.advise.context import AdviceContext, HostCores
from opscope.advise.finding import Finding, NotApplicable, Rule
from opscope.analyses.arrays import combined, name_flags, name_match, rows_equal, share_pct
from opscope.analyses.idle import INPUT_KINDS, INPUT_PIPELINE
from opscope.analyses.intervals import merged_intervals, union_by_group, union_ns
from opscope.model.schema import kind_mask
from opscope.units import format_ns

#: The rule fires when the input pipeline costs at least this share of the step.
INPUT_SHARE = 0.05
#: At most this many worker processes are suggested, however many cores are free.
MAX_WORKERS = 8
#: User frames named in the finding (the hottest first).
TOP_FRAMES = 3
#: A Python frame as torch records it: ``file(line): function``.
_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
#: Top-level packages whose files are library code, not the user's (the standard library is added below).
LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch", "triton", "numpy", "PIL",
    "pandas", "scipy", "sklearn", "cv2", "albumentations", "transformers", "datasets", "tokenizers", "accelerate",
    "lightning", "pytorch_lightning", "timm", "tqdm", "six", "opscope", "tensorflow", "jax", "h5py", "pyarrow",
})


def loader_spans(ctx: AdviceContext) -> pa.Table:
    """DataLoader spans (``ts_ns``, ``dur_ns``, ``step``, ``name``, ``pid``, ``tid``) inside the steps (the window
    without steps)."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns", "step", "pid", "tid"])
    mask = pc.and_(kind_mask(ev, INPUT_KINDS), name_match(ev["name"], INPUT_PIPELINE))
    spans = ev.filter(mask)
    if ctx.has_steps:
        spans = spans.filter(pc.is_valid(spans["step"]))
    else:
        spans = spans.set_column(spans.schema.get_field_index("step"), "step",
                                 pa.array([0] * spans.num_rows, pa.int64()))
    return spans


def inside_steps(ctx: AdviceContext, spans: pa.Table) -> dict[int, int]:
    """Per step: the union of its DataLoader spans clipped to the step itself (to the window without steps), so
    that a span running past its step's end counts only up to it."""
    if ctx.has_steps:
        steps = ctx.trace.steps
        at = pc.index_in(spans["step"], combined(steps["step"]))
        lo = pc.take(combined(steps["ts_ns"]), at)
        hi = pc.add(lo, pc.take(combined(steps["dur_ns"]), at))
    else:
        w0, w1 = ctx.window
        lo = pa.array([w0] * spans.num_rows, pa.int64())
        hi = pa.array([w1] * spans.num_rows, pa.int64())
    starts = pc.max_element_wise(spans["ts_ns"], lo)
    ends = pc.max_element_wise(pc.min_element_wise(pc.add(spans["ts_ns"], spans["dur_ns"]), hi), starts)
    return union_by_group(starts, pc.subtract(ends, starts), spans["step"])


def idle_while_loading(ctx: AdviceContext, spans: pa.Table) -> dict[int, int]:
    """Per step: how long a device was idle while the host was in a DataLoader span, summed over devices (the
    window-clipped spans minus their overlap with each device's busy time)."""
    w0, w1 = ctx.window
    starts = pc.max_element_wise(spans["ts_ns"], w0)
    ends = pc.max_element_wise(pc.min_element_wise(pc.add(spans["ts_ns"], spans["dur_ns"]), w1), starts)
    loading = merged_intervals(combined(spans["step"]), combined(starts), combined(ends))
    busy = ctx.gpu.device_not_idle  # unseen busy time is not idle
    groups, lo, hi = loading["group"].to_pylist(), loading["start"].to_pylist(), loading["end"].to_pylist()
    out: dict[int, int] = {}
    for device in ctx.gpu.devices:
        mine = rows_equal(busy, "group", device).sort_by("start")
        covered = _busy_until(mine["start"].to_pylist(), mine["end"].to_pylist())
        for step, s, e in zip(groups, lo, hi):
            out[step] = out.get(step, 0) + (e - s) - (covered(e) - covered(s))
    return out


def _busy_until(starts: list[int], ends: list[int]):
    """For disjoint sorted intervals: t -> their total length before t."""
    before = [0]
    for s, e in zip(starts, ends):
        before.append(before[-1] + e - s)

    def covered(t: int) -> int:
        i = bisect.bisect_right(starts, t) - 1
        return before[i] + min(t, ends[i]) - starts[i] if i >= 0 else 0

    return covered


def is_user_frame(name: str) -> bool:
    """Whether a Python frame is the user's code: a ``file(line): function`` frame whose file is neither in a
    library (site-packages, :data:`LIBRARIES`) nor in the standard library (torch records paths relative to
    their sys.path entry: ``torch/utils/data/dataloader.py``, ``typing.py``)."""
    m = _FRAME.match(name)
    if not m:  # built-ins, nn.Module scopes
        return False
    path = m.group(1).replace("\\", "/")
    if path.startswith("<") or "site-packages/" in path or "dist-packages/" in path or "/lib/python" in path:
        return False
    if path.startswith("/"):  # an absolute path outside the interpreter's library directories
        return True
    top = path.split("/", 1)[0].removesuffix(".py")
    return top not in LIBRARIES and top not in sys.stdlib_module_names


#: The loader "waits" when at least this share of its time is in waiting built-ins.
WAITING_SHARE = 0.5
#: Python built-ins in which a process waits rather than computes (sleep, reading files and sockets, waiting on
#: locks, events and selectors): a loader that spends its time there needs no free core to run in a worker.
WAITING_FRAME = re.compile(r"^<built-in (function|method) (sleep|read|readinto|readline|readlines|recv|recv_into|"
                           r"recvfrom|accept|select|poll|wait|acquire|urlopen)\b")


def is_waiting_frame(name: str) -> bool:
    """Whether a Python frame is a built-in that waits (:data:`WAITING_FRAME`)."""
    return bool(WAITING_FRAME.match(name))


def loader_frames(ctx: AdviceContext, spans: pa.Table, wanted: Callable[[str], bool] | None = None) -> list[dict]:
    """The user's frames (those ``wanted`` picks, when given) that start inside a DataLoader span on the same
    thread, by name: ``frame`` (as recorded), ``time_ns`` (their calls' union, clipped to the span's end, so that a
    recursive or repeated frame counts once), ``calls``; the hottest first. Frames that enclose the loader (the
    training loop) do not start inside it and are not counted."""
    ev = ctx.trace.select(["kind", "name", "ts_ns", "dur_ns", "pid", "tid"])
    py = ev.filter(kind_mask(ev, ("python",)))
    if py.num_rows == 0:
        return []
    pick = wanted or is_user_frame
    # asked once per distinct frame name (millions of frames, a few thousand names); the frames as text only for the
    # user's own
    py = py.filter(name_flags(py["name"], lambda name: bool(name) and pick(name)))
    if py.num_rows == 0:
        return []
    # the loader's merged spans per thread, to place each frame's start
    by_thread: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for pid, tid, s, d in zip(spans["pid"].to_pylist(), spans["tid"].to_pylist(), spans["ts_ns"].to_pylist(),
                              spans["dur_ns"].to_pylist()):
        by_thread[(pid, tid)].append((s, s + d))
    merged: dict[tuple, tuple[list[int], list[int]]] = {}
    for key, intervals in by_thread.items():
        starts: list[int] = []
        ends: list[int] = []
        for s, e in sorted(intervals):
            if starts and s <= ends[-1]:
                ends[-1] = max(ends[-1], e)
            else:
                starts.append(s)
                ends.append(e)
        merged[key] = (starts, ends)
    clipped: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    calls: dict[str, int] = defaultdict(int)
    for name, pid, tid, s, d in zip(py["name"].cast(pa.string()).to_pylist(), py["pid"].to_pylist(),
                                    py["tid"].to_pylist(), py["ts_ns"].to_pylist(), py["dur_ns"].to_pylist()):
        starts, ends = merged.get((pid, tid), ([], []))
        i = bisect.bisect_right(starts, s) - 1
        # inside: starts in the span (a frame that starts with it must also end in it: it is not an enclosing one)
        if i < 0 or s >= ends[i] or (s == starts[i] and s + d > ends[i]):
            continue
        calls[name] += 1
        clipped[name][0].append(s)
        clipped[name][1].append(min(s + d, ends[i]) - s)
    rows = [{"frame": name, "time_ns": union_ns(pa.array(st, pa.int64()), pa.array(du, pa.int64())),
             "calls": calls[name]} for name, (st, du) in clipped.items()]
    return sorted(rows, key=lambda r: (-r["time_ns"], r["frame"]))


def _has_python_frames(ctx: AdviceContext) -> bool:
    return bool(pc.any(kind_mask(ctx.trace.select(["kind"]), ("python",))).as_py())


def workers_advice(host: HostCores | None, frames: list[dict], waits: bool = False) -> tuple[int | None, str]:
    """(workers to suggest or None, the sentence about workers): a number when run.json shows free cores, or when
    the loader mostly waits (``waits``: a waiting worker needs no core)."""
    if waits and (host is None or host.free < 1):
        n = min(MAX_WORKERS, 2)
        return n, (f"load in worker processes: DataLoader(..., num_workers={n}, persistent_workers=True): the loader "
                   f"mostly waits (sleep, reads, sockets) rather than computes, so workers overlap the waits even "
                   f"without a free core")
    if host is None:
        return None, ("worker processes (DataLoader(num_workers=N, persistent_workers=True)) help only with cores "
                      "to spare: N = the cores the training process and other programs leave free, unknown here "
                      "(opscope record writes the core count and the host's load to run.json)")
    if host.free >= 1:
        n = min(MAX_WORKERS, host.free)
        return n, (f"load in worker processes: DataLoader(..., num_workers={n}, persistent_workers=True, "
                   f"prefetch_factor=2) ({host.free} core(s) free: {host.describe()})")
    cheaper = "make " + (_function(frames[0]["frame"]) if frames else "__getitem__")
    return None, (f"no core is free for worker processes ({host.describe()}): they would compete with the "
                  f"compute threads; {cheaper} cheaper instead")


def _workers_change(n: int | None, loader_total: int, ctx: AdviceContext) -> str | None:
    """The whatif change that stands for ``n`` workers: each loads every n-th batch while the step runs, so the main
    process waits max(0, L/n - S) per step for L of loading and S of the rest of the step: ``loader=`` that over L.
    None without a number of workers (the rule cannot say how many would run)."""
    if not n:
        return None
    loading = ctx.per_step(loader_total)
    rest = max(ctx.step_ns - loading, 0)
    factor = max(0.0, loading / n - rest) / loading if loading else 0.0
    return f"loader={factor:.3g}"


def _function(frame: str) -> str:
    m = _FRAME.match(frame)
    return m.group(3) if m else frame


def check(ctx: AdviceContext) -> list[Finding]:
    spans = loader_spans(ctx)
    if spans.num_rows == 0:
        raise NotApplicable("no DataLoader spans in this trace (torch records enumerate(DataLoader)#... when a "
                            "DataLoader is iterated inside the profiled steps)")
    per_step = union_by_group(spans["ts_ns"], spans["dur_ns"], spans["step"])  # nested spans count once
    loader_total = sum(per_step.values())
    names = set(spans["name"].cast(pa.string()).to_pylist())
    workers = any("MultiProcessing" in n for n in names)
    if ctx.gpu is not None:
        idle = ctx.idle.filter(pc.equal(ctx.idle["cause"], "input_pipeline"))
        cost_total = pc.sum(idle["idle_ns"]).as_py() or 0
        basis = (f"the device idled {format_ns(cost_total)} over {ctx.steps} {ctx.unit}(s) while the host was in "
                 f"the DataLoader (idle time attributed to input_pipeline, summed over devices); that wait goes "
                 f"away when the next batch is ready before the step asks for it")
    else:
        cost_total = loader_total
        basis = (f"the steps spent {format_ns(cost_total)} over {ctx.steps} {ctx.unit}(s) in the DataLoader on "
                 f"the main thread; loading in worker processes on free cores overlaps it with compute, a cheaper "
                 f"__getitem__ shrinks it")
    saving = ctx.per_step(cost_total)
    if saving < INPUT_SHARE * ctx.step_ns:
        return []
    steps = ctx.trace.steps
    durations = dict(zip(steps["step"].to_pylist(), steps["dur_ns"].to_pylist())) if ctx.has_steps else \
        {0: ctx.window_ns}
    idle = idle_while_loading(ctx, spans) if ctx.gpu is not None else {}
    inside = inside_steps(ctx, spans)
    # a row's share is of the step it names: the DataLoader time inside that step over that step's duration
    evidence = [{"step": s if ctx.has_steps else None, "dataloader_ns": ns, "in_step_ns": inside.get(s, 0),
                 "device_idle_ns": idle.get(s, 0) if ctx.gpu is not None else None, "step_ns": durations.get(s),
                 "step_pct": share_pct(inside.get(s, 0), durations.get(s))}
                for s, ns in sorted(per_step.items())][:10]
    frames = loader_frames(ctx, spans)
    hot = frames[:TOP_FRAMES]
    cause = ""
    if hot:
        cause = ("; the user's code inside the DataLoader (each frame's calls, callees included, clipped to the "
                 "DataLoader spans): " + ", ".join(
                     f"{r['frame']} {format_ns(ctx.per_step(r['time_ns']))} per {ctx.unit} "
                     f"({share_pct(r['time_ns'], loader_total, 1)}% of the DataLoader time)" for r in hot))
    elif not _has_python_frames(ctx):
        cause = ("; the trace has no Python frames to name the code inside the DataLoader (record with "
                 "opscope record --stack, or torch.profiler's with_stack=True)")
    fix = (f"make {_function(hot[0]['frame'])} cheaper (vectorise it, precompute or cache the samples, decode "
           f"once)" if hot else "make __getitem__ cheaper (vectorise, precompute, cache)")
    waiting_ns = sum(r["time_ns"] for r in loader_frames(ctx, spans, is_waiting_frame))
    waits = waiting_ns >= WAITING_SHARE * loader_total
    if waiting_ns:
        cause += (f"; {share_pct(waiting_ns, loader_total, 1)}% of the DataLoader time is in built-ins that wait "
                  f"(sleep, reads, sockets, locks): it " + ("waits more than it computes" if waits else "computes"))
    n, about_workers = workers_advice(ctx.host, hot, waits)
    if workers:
        cores = ctx.host.describe() if ctx.host else "core count unknown without run.json"
        change = (f"the DataLoader already has workers but they fall behind ({cores}): {fix}; or raise "
                  f"num_workers where cores are free, prefetch_factor=4, persistent_workers=True, pin_memory=True")
    elif n is not None:
        change = f"{about_workers}; {fix}"
    elif ctx.host is not None:
        change = about_workers
    else:  # the core count is unknown: the named hot code first, else the usual remedy first
        change = f"{fix}; {about_workers}" if hot else f"{about_workers}; or {fix}"
    if ctx.gpu is not None and not workers:
        change += "; pin_memory=True for the copies to the device"
    return [Finding(
        rule=RULE.id,
        title=f"Input pipeline: {format_ns(saving)} per {ctx.unit} waiting for the DataLoader"
              + (" (single process)" if not workers else "")
              + (f", mostly in {hot[0]['frame']} ({format_ns(ctx.per_step(hot[0]['time_ns']))})" if hot else ""),
        saving_ns=saving,
        saving_pct=ctx.pct(saving),
        estimate=basis + cause + ".",
        remedy=change,
        change=_workers_change(n, loader_total, ctx) if not workers else None,
        program_change={"num_workers": n, "persistent_workers": True} if n and not workers else None,
        evidence=evidence,
        evidence_title="per step: DataLoader time (union of its spans on the host), in_step_ns: its part inside "
                       "the step, device idle time meanwhile (summed over devices; none on a CPU trace), the step's "
                       "time and step_pct: in_step_ns over the step's time",
    )]


RULE = Rule(
    id="input-pipeline",
    title="Input pipeline bottleneck",
    explain=f"""\
Fires when waiting for input costs at least {INPUT_SHARE:.0%} of the step. The DataLoader's spans are the host
events PyTorch records around each batch (enumerate(DataLoader)#...__next__); their union per step is shown.

Estimated saving, GPU traces: the device's idle time while the host is inside a DataLoader span (the
input_pipeline cause of the idle breakdown), per step. Loading in background workers, with a batch prefetched,
removes that wait; the device time itself does not change. CPU-only traces: the DataLoader time inside the
steps on the main thread, assuming the machine has spare cores for worker processes (on a machine whose cores
are all busy computing, workers compete with the compute threads and the saving is smaller).

The cause: when the trace has Python frames (opscope record --stack; torch's with_stack=True), the user's own frames
that start inside a DataLoader span (files outside the standard library, site-packages and known libraries such
as torch and numpy) are named with their time per step (their calls clipped to the span, callees included;
the top {TOP_FRAMES}), e.g. train.py(23): __getitem__.

Change: making that code cheaper (vectorise, precompute or cache the samples). Worker processes
(num_workers = N) only when run.json shows free cores: N = usable cores - torch's intra-op threads - the
host's load from other processes (the 1-minute load average when the program started, rounded), at most
{MAX_WORKERS}. When no core is free, workers would compete with the compute threads and the finding says so,
unless the loader mostly waits: when at least {WAITING_SHARE:.0%} of its time is in Python built-ins that wait
(sleep, file and socket reads, selectors, locks), N = 2 workers overlap the waits without a core of their own.
Without run.json the number of free cores is unknown and no N is given. Loaders that already have workers:
a cheaper __getitem__, or more workers where cores are free.

Simulated: with N workers each loads every N-th batch while the step runs, so the main process waits
max(0, L/N - S) per step for L of loading and S of the rest of the step: the finding's change is loader=that/L,
replayed on the dependency graph. Without an N (no free core and a loader that computes; core count unknown;
workers already) the saving stays the rule's estimate.

Evidence, per step (the first 10): the DataLoader time, its part inside the step, the device idle time
meanwhile (summed over devices: the time the saving counts, step by step, except where a synchronising call
inside the loader claims it), the step's time and the loader's share of it: its part inside that step over that
step's time (a span that runs past its step's end counts only up to it), never above 100%.""",
    check=check,
)
