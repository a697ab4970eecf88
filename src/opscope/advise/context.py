"""What the rules look at: one trace's analyses, computed once and shared by every rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import share_pct
from opscope.analyses.recording import find_run_info  # noqa: F401  (advise's callers find it here)
from opscope.model.memo import memoized
from opscope.model.trace import Trace

if TYPE_CHECKING:
    from opscope.analyses.gpu import GpuAnalysis
    from opscope.analyses.job.view import JobView
    from opscope.analyses.peaks import Peaks
    from opscope.analyses.recording import Inflation


@dataclass(frozen=True)
class MeasuredFactor:
    """A speed-up measured on this machine for one of the dominant-op rule's alternatives (``opscope advise
    --measure``), to use instead of the factor the rule assumes."""

    factor: float
    detail: str  # what was measured: the cases, their speed-ups, the device
    command: str  # the command that reproduces the measurement


class AdviceContext:
    """A trace, the analyses rules ask for (lazily, each once per trace: the memo) and what is known about the run.

    Every saving is expressed *per step*: the window is the first ProfilerStep's start to the last one's end
    (the whole trace when it has no steps), ``steps`` the number of steps in it (1 without steps), and
    ``step_ns`` is the mean step (the mean of the steps' durations, as every command shows it). A rule turns a
    total over the window into a per-step figure with :meth:`per_step` and into a share of the step with
    :meth:`pct`.

    ``run`` is the recording's run.json when there is one (thread settings, CPU cores, GPUs); ``peers`` are
    traces of the other ranks of the same job, for comparisons across ranks (``job``: their combined view, computed
    rank by rank without holding the ranks, which the communication rule prefers); ``measured`` are speed-ups measured
    here for the dominant-op rule's alternatives (by alternative id), which replace its assumed factors.
    """

    def __init__(self, trace: Trace, run: dict[str, Any] | None = None, peers: tuple[Trace, ...] = (),
                 measured: Mapping[str, MeasuredFactor] | None = None, job: JobView | None = None) -> None:
        self.trace = trace
        self.run = run
        self.peers = peers
        #: the whole job's view (``opscope advise DIR``): collectives matched across ranks, stragglers by delay
        self.job = job
        self.measured: Mapping[str, MeasuredFactor] = measured or {}
        self._looked_at_device = False  # whether a rule asked for the GPU analysis (window_lines says its unseen time)

    # --- the window and per-step arithmetic ---------------------------------------------------------

    @property
    def window(self) -> tuple[int, int]:
        return _window(self.trace)

    @property
    def window_ns(self) -> int:
        return max(0, self.window[1] - self.window[0])

    @property
    def steps(self) -> int:
        return max(1, self.trace.steps.num_rows)

    @property
    def has_steps(self) -> bool:
        return self.trace.steps.num_rows > 0

    @property
    def step_ns(self) -> int:
        """The mean step (:class:`~opscope.analyses.steps.StepStats`, as every command shows it); the window itself
        for a trace without steps."""
        return _step_ns(self.trace)

    @property
    def unit(self) -> str:
        """What a saving is per: "step", or "trace" for a trace without steps."""
        return "step" if self.has_steps else "trace"

    def window_lines(self) -> list[str]:
        """Which window every saving is of, and the unseen busy time it leaves out, one line each."""
        from opscope.analyses.gpu import unseen_line
        from opscope.analyses.steps import window_line

        lines = [window_line(self.trace) + "; savings are per step of it" if self.has_steps else
                 window_line(self.trace) + "; savings are over the whole trace"]
        if self._looked_at_device and self.gpu is not None:  # only when a rule looked at the device
            lines += [unseen_line(device, u) for device, u in self.gpu.work.unseen.items()]
        inflation = self.inflation
        if inflation is not None and inflation.inflated:
            lines.append(inflation.line() + "; so are the savings, which are of these inflated steps")
        return lines

    @property
    def inflation(self) -> Inflation | None:
        """How much slower the recorded steps ran than unrecorded ones (from run.json), None when unknown."""
        from opscope.analyses.recording import step_inflation

        return step_inflation(self.run)  # a few medians of run.json's step times: not worth keeping

    def per_step(self, total_ns: int | float) -> int:
        return round(total_ns / self.steps)

    def pct(self, per_step_ns: int | float | None) -> float | None:
        """A per-step figure as a share of the window's time per step: the mean step where the steps tile the
        window, more where time passes between them (a saving found there is of the window, never over 100% of
        it)."""
        return share_pct(per_step_ns, max(self.step_ns, self.window_ns / self.steps if self.has_steps else 0))

    # --- analyses: each computed once per trace (the memo), whichever rule or context asks first ------------

    @property
    def step_table(self) -> pa.Table:
        from opscope.analyses.steps import step_table

        return step_table(self.trace)

    @property
    def gpu(self):
        """The GpuAnalysis of the trace, or None when it has no device work."""
        self._looked_at_device = True
        return _gpu(self.trace)

    @property
    def breakdown(self) -> pa.Table:
        """Device rows of the GPU breakdown (stream null), empty without device work."""
        self._looked_at_device = True
        return _device_rows(self.trace)

    @property
    def idle(self) -> pa.Table:
        from opscope.analyses.idle import IDLE_SCHEMA

        gpu = self.gpu
        return IDLE_SCHEMA.empty_table() if gpu is None else gpu.idle()

    @property
    def launches(self) -> pa.Table:
        from opscope.analyses.gpu import LAUNCH_SCHEMA

        gpu = self.gpu
        return LAUNCH_SCHEMA.empty_table() if gpu is None else gpu.launches()

    @property
    def ops(self) -> pa.Table:
        """cpu_op groups by name (self time with duplicate ops folded), with the Python API."""
        from opscope.analyses.ops import op_table

        return op_table(self.trace, python_api=True)

    @property
    def kernels(self) -> pa.Table:
        """Device work grouped by short kernel name."""
        from opscope.analyses.kernels import kernel_table

        return kernel_table(self.trace, names="short")

    @property
    def sync_calls(self) -> list:
        """The blocking host-device synchronisations inside the steps (:func:`opscope.analyses.sync.sync_calls`)."""
        return _sync_calls(self.trace)

    @property
    def host(self) -> HostCores | None:
        """The cores the run had and how many its own threads and the host's other processes left free
        (:func:`host_cores`), or None without run.json's core count."""
        return host_cores(self.run)  # a few fields of run.json: not worth keeping

    @property
    def peaks(self) -> tuple[Peaks | None, str]:
        """The peaks of the trace's device (:func:`opscope.analyses.peaks.trace_peaks`: the published ones of the
        device it names) and where they come from; None and why when the device is not recognised."""
        return _peaks(self.trace)

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        """GPUs as the trace (Kineto's deviceProperties) or the run (torch's properties) describe them, with
        ``name``, ``capability`` ("8.0") and ``total_memory`` (bytes) where known (read from the metadata and
        run.json on each use: a few fields)."""
        # both come from files anyone can write: a value of the wrong type is unknown (None), never a crash
        out = []
        props = self.trace.metadata.get("device_properties")
        for p in props if isinstance(props, list) else []:
            if not isinstance(p, dict):
                continue
            major, minor = _typed(p.get("computeMajor"), int), _typed(p.get("computeMinor"), int)
            out.append({"id": _typed(p.get("id"), int), "name": _typed(p.get("name"), str),
                        "capability": f"{major}.{minor or 0}" if major is not None else None,
                        "total_memory": _typed(p.get("totalGlobalMem"), int)})
        gpus = self.run.get("gpus") if isinstance(self.run, dict) else None
        if not out and isinstance(gpus, list):
            out.extend({"id": _typed(g.get("index"), int), "name": _typed(g.get("name"), str),
                        "capability": _typed(g.get("capability"), str),
                        "total_memory": _typed(g.get("total_memory"), int)} for g in gpus if isinstance(g, dict))
        return out


@memoized()
def _window(trace: Trace) -> tuple[int, int]:
    from opscope.analyses.steps import step_window

    return step_window(trace)


@memoized()
def _step_ns(trace: Trace) -> int:
    from opscope.analyses.steps import step_stats, step_table

    mean = step_stats(step_table(trace)).mean_ns if trace.steps.num_rows else None
    return mean if mean is not None else max(0, _window(trace)[1] - _window(trace)[0])


@memoized()
def _gpu(trace: Trace) -> GpuAnalysis | None:
    from opscope.analyses.gpu import gpu_analysis

    analysis = gpu_analysis(trace)
    return analysis if analysis.has_work else None


@memoized()
def _device_rows(trace: Trace) -> pa.Table:
    from opscope.analyses.gpu import BREAKDOWN_SCHEMA

    gpu = _gpu(trace)
    if gpu is None:
        return BREAKDOWN_SCHEMA.empty_table()
    b = gpu.breakdown()
    return b.filter(pc.is_null(b["stream"]))


@memoized()
def _peaks(trace: Trace) -> tuple[Peaks | None, str]:
    from opscope.analyses.peaks import trace_peaks

    return trace_peaks(trace)


@memoized()
def _sync_calls(trace: Trace) -> list:
    from opscope.analyses.sync import sync_calls

    return sync_calls(trace)


def _typed(value: Any, kind: type) -> Any:
    """``value`` when it is a ``kind`` (a bool is no int), else None."""
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class HostCores:
    """The CPU budget of a recorded run: ``cores`` usable by the process (its affinity), ``intra_op`` torch's
    compute threads, ``load`` the host's 1-minute load average when the program started (runnable threads of
    other processes: opscope record reads it before the program runs; None when run.json lacks it) and
    ``others`` the cores that load keeps busy (rounded)."""

    cores: int
    intra_op: int | None
    load: float | None

    @property
    def others(self) -> int:
        return round(self.load) if self.load is not None else 0

    @property
    def free(self) -> int:
        """Cores left over once the job's compute threads (one when unknown: the main process runs somewhere) and
        the other processes have theirs (never below 0)."""
        return max(0, self.cores - (self.intra_op or 1) - self.others)

    @property
    def fitting_intra_op(self) -> int:
        """Intra-op threads that fit this host: the usable cores less those other processes keep busy (at least 1)."""
        return max(1, self.cores - self.others)

    def describe(self) -> str:
        text = f"{self.cores} usable cores"
        if self.intra_op:
            text += f", {self.intra_op} of them for torch's intra-op threads"
        if self.load is not None:
            text += f", load {self.load:.2f} from other processes when the program started"
        return text


def host_cores(run: dict[str, Any] | None) -> HostCores | None:
    """:class:`HostCores` from a run.json (None without a usable core count)."""
    cpu = (run or {}).get("cpu") or {}
    cores = cpu.get("usable_cores")
    if not isinstance(cores, int) or cores < 1:
        return None
    intra = ((run or {}).get("threads") or {}).get("intra_op")
    load = cpu.get("load_average")
    one_minute = load[0] if isinstance(load, list) and load and isinstance(load[0], (int, float)) else None
    return HostCores(cores, intra if isinstance(intra, int) and intra > 0 else None,
                     float(one_minute) if one_minute is not None and one_minute >= 0 else None)

