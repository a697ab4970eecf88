"""A recording session: ``torch.profiler`` with a schedule, automatic steps and an output directory.

Used by ``opscope record`` (in the child process that runs the user's program) and by the
``opscope.profile`` API. Steps advance at every ``optimizer.step()`` (a global optimizer hook) or,
once the program calls :func:`opscope.step` itself, only at those calls.

The time before the first step is recorded too, as "step 0": a program that never steps is then
saved as one long window. As soon as the first step arrives, that window is dropped and the scheduled
profiler takes over, so stepping programs pay for it only during start-up.
"""

from __future__ import annotations

import sys
import time
import warnings
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
    """What to record and when. Defaults: skip 1 step, warm up 1, record 3, once."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    shapes: bool = True
    memory: bool = True
    stack: bool = True
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

    def tick(self) -> None:
        self.boundaries_ns.append(time.perf_counter_ns())

    @property
    def count(self) -> int:
        return len(self.boundaries_ns)

    def durations_ns(self) -> list[int]:
        """Durations of the complete steps 1..count-1 (step 0 is start-up; the last one never ended)."""
        b = self.boundaries_ns
        return [b[i] - b[i - 1] for i in range(1, len(b))]


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

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> Recording:
        import torch

        self._torch = torch
        self.output.mkdir(parents=True, exist_ok=True)
        if self.profile:
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
        if self._prof is not None:
            prof, self._prof = self._prof, None
            self._stopping = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof.stop()
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
            self.step()

    def step(self, explicit: bool = False) -> None:
        if explicit and not self.explicit_steps:
            self.explicit_steps = True
        self.clock.tick()
        if self._prof is None:
            return
        if self._startup:
            self._leave_startup(self._prof)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._prof.step()

    def _leave_startup(self, startup: Profiler) -> None:
        """First step: drop the start-up window and hand over to the scheduled profiler at step 1."""
        self._startup = False
        self._discard = True
        with warnings.catch_warnings():
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
        path = self.output / f"trace-{len(self.traces) + 1}.pt.trace.json.gz"
        prof.export_chrome_trace(str(path))
        self.traces.append(path.name)
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
            "traces": self.traces,
        }


class RecordingInstrument:
    """The runner's instrument for ``opscope record`` (mode ``record``) and ``tune-threads`` (mode ``time``:
    step times only): a :class:`Recording` around the program, and ``run.json`` written before the program
    starts and again when it has ended, whatever the way."""

    import_error_is_setup_error = True

    def __init__(self, config: dict[str, Any]) -> None:
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
        from opscope.capture.runner import write_json_atomic

        self.info = run_info(self.command, program.directory, self._torch)
        self.info.update({"status": "running", "mode": self.mode, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self.output.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.output / "run.json", self.info)
        self.recording = Recording(self.output, self.options, profile=self.mode == "record")
        self.recording.start()

    def finish(self, outcome: Outcome) -> None:
        from opscope.capture.runner import write_json_atomic

        if self.recording is not None:  # the runner calls finish only after start
            self.recording.stop()
            self.info.update(self.recording.result())
        self.info.update({"status": outcome.status, "exit_code": outcome.exit_code, "crash": outcome.crash,
                          "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        write_json_atomic(self.output / "run.json", self.info)
