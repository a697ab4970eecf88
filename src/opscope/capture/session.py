"""A recording session: ``torch.profiler`` with a schedule, automatic steps and an output directory.

Used by ``opscope record`` (in the child process that runs the user's program) and by the
``opscope.profile`` API. Steps advance at every ``optimizer.step()`` (a global optimizer hook) or,
once the program calls :func:`opscope.step` itself, only at those calls.

The time before the first step is recorded too, as "step 0": a program that never steps is then
saved as one long window. As soon as the first step arrives, that window is dropped and the scheduled
profiler takes over, so stepping programs pay for it only during start-up.

The profiler's own work at a step boundary (stopping, post-processing and saving a window, which takes
minutes for a big trace) is kept out of what it measures: an optimizer step's boundary is handled after
``optimizer.step()`` has returned (not in its post hook, inside the ``Optimizer.step`` span), and the
:class:`StepClock` leaves that work out of the step times.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opscope.errors import UsageError

if TYPE_CHECKING:
    from types import ModuleType

    from torch.profiler import profile as Profiler  # noqa: N812 - torch's profiler class is named `profile`
    from torch.utils.hooks import RemovableHandle

    from opscope.capture.runner import Outcome, Program

#: Thread counts above this are refused as a typo (no machine this runs on has that many cores).
MAX_THREADS = 1024


@dataclass
class RecordOptions:
    """What to record and when. Defaults: skip 1 step, warm up 1, record 3, once.

    ``stack`` (Python stacks) is off by default: torch records it by tracing every Python function call,
    which made the recorded steps of a Python-heavy program several times slower than unrecorded ones
    (BENCHMARKS.md, "Capture overhead on Python-heavy code"). ``--stack`` turns it on for ``opscope code``,
    ``scope`` and the Python frames in advise; ``modules`` has no effect without it (torch's nn.Module
    events come from the same Python tracer).
    """

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    shapes: bool = True
    memory: bool = True
    stack: bool = False
    modules: bool = True
    flops: bool = True
    activities: str = "auto"  # auto | cpu | cuda
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def validate(self) -> RecordOptions:
        if self.wait < 0 or self.warmup < 0:
            raise UsageError(f"invalid schedule: --wait ({self.wait}) and --warmup ({self.warmup}) must be >= 0")
        if self.active < 1:
            raise UsageError(f"invalid schedule: --active must be >= 1 (got {self.active})")
        if self.repeat < 0:
            raise UsageError(f"invalid schedule: --repeat must be >= 0 (0 = until the program ends), "
                             f"got {self.repeat}")
        if self.activities not in ("auto", "cpu", "cuda"):
            raise UsageError(f"--activities must be auto, cpu or cuda (got {self.activities!r})")
        for name, value in (("--intra-op-threads", self.intra_op_threads),
                            ("--inter-op-threads", self.inter_op_threads)):
            if value is not None and not 1 <= value <= MAX_THREADS:
                raise UsageError(f"{name} must be between 1 and {MAX_THREADS} (got {value})")
        return self

    @property
    def steps_needed(self) -> int:
        """Steps the program must make before the first active step is complete."""
        return self.wait + self.warmup + self.active

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepClock:
    """Wall-clock time of each step boundary.

    Numbered as torch.profiler numbers steps (``ProfilerStep#N``): step 0 is everything before the first
    boundary, step N runs from the N-th boundary to the next one.
    """

    start_ns: int = field(default_factory=time.perf_counter_ns)
    boundaries_ns: list[int] = field(default_factory=list)
    #: When the program got control back after each boundary: the boundary plus the profiler's own work there.
    resumed_ns: list[int] = field(default_factory=list)

    def tick(self) -> None:
        now = time.perf_counter_ns()
        self.boundaries_ns.append(now)
        self.resumed_ns.append(now)

    def resume(self) -> None:
        """The profiler's work at the last boundary is done: the next step starts now."""
        if self.resumed_ns:
            self.resumed_ns[-1] = time.perf_counter_ns()

    @property
    def count(self) -> int:
        return len(self.boundaries_ns)

    def durations_ns(self) -> list[int]:
        """Durations of the complete steps 1..count-1 (step 0 is start-up; the last one never ended), without
        the profiler's work at their start (saving a window happens between two steps, not in one)."""
        b, r = self.boundaries_ns, self.resumed_ns
        return [b[i] - r[i - 1] for i in range(1, len(b))]

    def profiler_ns(self) -> int:
        """Time the profiler took at the step boundaries (starting, stopping and saving windows)."""
        return sum(r - b for b, r in zip(self.boundaries_ns, self.resumed_ns))


class _Progress:
    """Lines on stderr while the profiler is busy for long (post-processing and saving a big window takes
    minutes with --stack): after ``QUIET_S`` seconds, then every ``EVERY_S``, and how long it took. A watch
    that ends sooner prints nothing. The thread lives only during a watch, so that the profiler's Python
    tracer sees no opscope thread while the program's steps are recorded."""

    QUIET_S = 3.0
    EVERY_S = 15.0

    @contextlib.contextmanager
    def watch(self, label: str) -> Iterator[None]:
        done = threading.Event()
        since = time.monotonic()
        said: list[float] = []

        def poll() -> None:
            wait = self.QUIET_S
            while not done.wait(wait):
                _say(f"{label} (the profiler's own work, left out of the step times): "
                     f"{time.monotonic() - since:.0f} s so far")
                said.append(time.monotonic())
                wait = self.EVERY_S

        thread = threading.Thread(target=poll, name="opscope-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            if said:
                _say(f"{label}: done in {time.monotonic() - since:.0f} s")


def _say(line: str) -> None:
    from opscope.text import one_line

    # the child's stderr is the program's; our lines are prefixed, with the file names in them spelled out
    sys.stderr.write(f"opscope: {one_line(line)}\n")
    sys.stderr.flush()


_active: list[Recording] = []


def step() -> None:
    """Mark a step boundary in the active recording (no-op when none is active).

    Call it once per training or inference iteration when the program has no optimizer, or to
    choose the step boundaries yourself: after the first call, optimizer steps no longer count.
    """
    if _active:
        _active[-1].step(explicit=True)


class Recording:
    """One profiling session writing traces into ``output``."""

    def __init__(self, output: Path, options: RecordOptions | None = None, profile: bool = True) -> None:
        """With ``profile=False`` only the step times are measured (thread tuning, overhead baselines)."""
        self.output = Path(output)
        self.profile = profile
        self.options = (options or RecordOptions()).validate()
        self.clock = StepClock()
        self.traces: list[str] = []
        self.recorded_steps: list[int] = []
        self.explicit_steps = False
        self._pacing_optimizer: int | None = None
        self._hook: RemovableHandle | None = None
        self._prof: Profiler | None = None
        self._startup = False  # the current profiler is the "step 0" window
        self._discard = False
        self._stopping = False
        self._saved_upto = -1
        self._torch: ModuleType | None = None  # set by start()
        #: Steps during which the profiler collected events (warm-up and recorded steps; step 0 always).
        self.profiled_steps: list[int] = []
        self._pending = False  # an optimizer step's boundary waits for optimizer.step() to return
        self._wrapped: list[tuple[type, Any]] = []  # optimizer classes whose step we wrapped, and what was there
        self._progress = _Progress()
        #: Why profiling stopped early (a trace that could not be saved: disk full...), None when it did not.
        self.failure: str | None = None

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> Recording:
        import torch

        self._torch = torch
        self.output.mkdir(parents=True, exist_ok=True)
        if self.profile:
            self.profiled_steps = [0]
            base = self._base_schedule()
            if base(0) in (self._action().RECORD, self._action().RECORD_AND_SAVE):
                self._prof = self._make_profiler(base, first_step=0)
            else:
                self._startup = True
                self._prof = self._make_profiler(lambda n: self._action().RECORD, first_step=0)
            self._prof.start()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        _active.append(self)
        self.clock = StepClock()
        return self

    def stop(self) -> None:
        """Stop profiling; the window in progress is saved (a crash keeps the steps recorded so far)."""
        if self in _active:
            _active.remove(self)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._unwrap_optimizers()
        if self._prof is not None:
            prof, self._prof = self._prof, None
            self._stopping = True
            try:
                with warnings.catch_warnings(), self._progress.watch("saving the last profiled window"):
                    warnings.simplefilter("ignore")
                    prof.stop()
            except Exception as exc:  # any: the profiler's failure must not become the program's
                self._give_up(exc, prof)
            finally:
                self._stopping = False

    def __enter__(self) -> Recording:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- steps ----------------------------------------------------------------
    def _on_optimizer_step(self, optimizer, *_args) -> None:
        if self.explicit_steps:
            return
        # With several optimizers (GANs, per-module optimizers) the first one to step sets the pace.
        if self._pacing_optimizer is None:
            self._pacing_optimizer = id(optimizer)
        if id(optimizer) == self._pacing_optimizer:
            if self._wrap_optimizer(type(optimizer)):
                self._pending = True  # the wrapper steps once optimizer.step() has returned
            else:
                self.step()

    def _wrap_optimizer(self, cls: type) -> bool:
        """Make ``cls.step`` handle our pending boundary after it returns, outside its ``Optimizer.step`` span
        (the post hook runs inside it, and a window's stop and save there would be charged to the user's
        optimizer step). True when the wrapper was already there; the first step is handled in the hook."""
        current = cls.__dict__.get("step")
        if current is not None and getattr(current, "_opscope_recording", None) is self:
            return True
        if self._torch is None or not self.profile:
            return False  # step times only: no profiler work to keep out of any span
        inner = getattr(cls, "step", None)
        if inner is None or not getattr(inner, "hooked", False):
            return False  # not torch's profiled step (an odd subclass): step in the hook as before
        recording = self

        @functools.wraps(inner)  # copies torch's `hooked` flag too, so torch does not wrap it again
        def step(*args: Any, **kwargs: Any) -> Any:
            try:
                return inner(*args, **kwargs)
            finally:
                if recording._pending:
                    recording._pending = False
                    recording.step()

        step._opscope_recording = self  # type: ignore[attr-defined]
        self._wrapped.append((cls, current))
        cls.step = step  # type: ignore[attr-defined]
        return False

    def _unwrap_optimizers(self) -> None:
        for cls, previous in reversed(self._wrapped):
            if previous is None:
                with contextlib.suppress(AttributeError):
                    delattr(cls, "step")
            else:
                cls.step = previous
        self._wrapped.clear()
        self._pending = False

    def step(self, explicit: bool = False) -> None:
        if explicit and not self.explicit_steps:
            self.explicit_steps = True
        self.clock.tick()
        if self._prof is None:
            return
        # This runs inside the program's optimizer.step() (or its opscope.step()): a profiler that cannot
        # save a window (disk full) stops profiling; the program runs on.
        try:
            if self._startup:
                self._leave_startup(self._prof)
            else:
                with warnings.catch_warnings(), self._progress.watch("saving a profiled window"):
                    warnings.simplefilter("ignore")
                    self._prof.step()
        except Exception as exc:  # any: the profiler's failure must not become the program's
            self._give_up(exc, self._prof)
            self.clock.resume()
            return
        if self._prof.current_action != self._action().NONE:
            self.profiled_steps.append(self.clock.count)
        self.clock.resume()

    def _give_up(self, exc: Exception, prof: Profiler) -> None:
        """Stop profiling for good after ``exc``, say so once on stderr, and keep why for run.json."""
        self._prof = None
        self._startup = False
        self._discard = True  # stopping what is left saves nothing more
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.stop()
        self._discard = False
        if self.failure is None:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            self.failure = f"failed: {why}"
            _say(f"profiling stopped, the program runs on: {why} (in {self.output}); the traces saved before "
                 "are kept")

    def _leave_startup(self, startup: Profiler) -> None:
        """First step: drop the start-up window and hand over to the scheduled profiler at step 1."""
        self._startup = False
        self._discard = True
        with warnings.catch_warnings(), self._progress.watch("dropping the start-up window"):
            warnings.simplefilter("ignore")
            startup.stop()
        self._discard = False
        self._prof = self._make_profiler(self._base_schedule(), first_step=self.clock.count)
        self._prof.start()

    # -- torch.profiler plumbing -------------------------------------------
    def _action(self):
        from torch.profiler import ProfilerAction

        return ProfilerAction

    def _base_schedule(self):
        from torch.profiler import schedule

        o = self.options
        return schedule(wait=o.wait, warmup=o.warmup, active=o.active, repeat=o.repeat)

    def _activities(self) -> list:
        from torch.profiler import ProfilerActivity

        if self._torch is None:
            raise RuntimeError("a Recording makes its profilers in start()")
        acts = [ProfilerActivity.CPU]
        want = self.options.activities
        if want == "cuda" or (want == "auto" and self._torch.cuda.is_available()):
            acts.append(ProfilerActivity.CUDA)
        return acts

    def _make_profiler(self, sched, first_step: int) -> Profiler:
        from torch.profiler import profile

        o = self.options
        prof = profile(
            activities=self._activities(),
            schedule=sched,
            on_trace_ready=self._save,
            record_shapes=o.shapes,
            profile_memory=o.memory,
            with_stack=o.stack,
            with_modules=o.modules,
            with_flops=o.flops,
        )
        # Continue the step numbering (and ProfilerStep#N names) where the start-up window ended.
        prof.step_num = first_step
        prof.current_action = sched(first_step)
        return prof

    def _save(self, prof) -> None:
        if self._discard:
            return
        from opscope.capture.tracefile import save_trace

        first = len(self.traces) + 1
        names = (f"trace-{n}.pt.trace.json.gz" for n in range(first, first + 1000))
        self.traces.append(save_trace(prof, self.output, names).name)
        if self._startup:
            self.recorded_steps.append(0)
            return
        # Called from step() the step number has already moved on to the next step; from stop()
        # the current (unfinished) step was recorded too.
        last = prof.step_num if self._stopping else prof.step_num - 1
        record = (self._action().RECORD, self._action().RECORD_AND_SAVE)
        base = self._base_schedule()
        window = [n for n in range(self._saved_upto + 1, last + 1) if base(n) in record]
        self.recorded_steps.extend(window)
        self._saved_upto = last

    # -- results --------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        """Facts about the session for ``run.json``."""
        return {
            "options": self.options.to_dict(),
            "steps": self.clock.count,
            "step_source": "opscope.step()" if self.explicit_steps else
                           ("optimizer.step()" if self.clock.count else None),
            "step_times_ns": self.clock.durations_ns(),
            "recorded_steps": self.recorded_steps,
            # Steps the profiler ran in (warm-up included): the others are the unrecorded baseline.
            "profiled_steps": [n for n in self.profiled_steps if n < self.clock.count] if self.profile else [],
            "profiler_ns": self.clock.profiler_ns(),
            "traces": self.traces,
            "profiler_failed": self.failure,
        }


class RecordingInstrument:
    """The runner's instrument for ``opscope record`` (mode ``record``) and ``tune-threads`` (mode ``time``:
    step times only): a :class:`Recording` around the program, and ``run.json`` written before the program
    starts and again when it has ended, whatever the way."""

    import_error_is_setup_error = True

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.mode = config["mode"]
        self.output = Path(config["output"])
        self.command = config["command"]
        self.option_values = config["options"]
        self.info: dict[str, Any] = {}
        self.recording: Recording | None = None
        self._torch: ModuleType | None = None

    def prepare(self) -> None:
        from opscope.capture.runner import fail

        try:
            import torch
        except ImportError:
            fail(f"the program's Python ({sys.executable}) has no PyTorch: pip install torch==2.13.0")
        self._torch = torch
        self.options = RecordOptions(**self.option_values)
        # Thread pools are sized once: set them before the program touches torch.
        if self.options.intra_op_threads:
            torch.set_num_threads(self.options.intra_op_threads)
        if self.options.inter_op_threads:
            torch.set_num_interop_threads(self.options.inter_op_threads)

    def start(self, program: Program) -> None:
        from opscope.capture.runinfo import run_info
        from opscope.capture.runner import fail, write_json_atomic

        self.info = run_info(self.command, program.directory, self._torch)
        self.info.update({"status": "running", "mode": self.mode, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        try:  # the parent claimed the directory; its run.json is ours to rewrite
            write_json_atomic(self.output / "run.json", self.info)
        except OSError as exc:
            fail(f"{self.output}: cannot write run.json ({exc.strerror or exc})")
        self.recording = Recording(self.output, self.options, profile=self.mode == "record")
        self.recording.start()

    def finish(self, outcome: Outcome) -> None:
        from opscope.capture.runner import report, write_json_atomic

        if self.recording is not None:  # the runner calls finish only after start
            self.recording.stop()
            self.info.update(self.recording.result())
        self.info.update({"status": outcome.status, "exit_code": outcome.exit_code, "crash": outcome.crash,
                          "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        unsaved = None
        try:
            write_json_atomic(self.output / "run.json", self.info)
        except OSError as exc:  # disk full: the program's exit code stays its own; record says what is missing
            unsaved = exc.strerror or str(exc)
            _say(f"cannot update {self.output / 'run.json'} ({unsaved}); the traces in that directory are complete")
        # the parent's copy of how the run ended: it writes run.json itself when this side could not
        report(self.config, {"run": self.info, "unsaved": unsaved})
