"""The child side of ``opscope record`` / ``tune-threads`` / ``numerics``: run the user's program as
``__main__`` inside an instrument.

Started by :func:`opscope.capture.launch.run_child` as ``python -m opscope.capture.runner`` with its
settings in the ``OPSCOPE_RUNNER`` environment variable (JSON: ``mode``, ``target`` and the mode's own
keys; ``changes``: the remedies a re-run of ``advise --measure`` applies, :mod:`opscope.capture.changes`;
``report_fd``: a pipe to the parent for the instrument's last word, :func:`report`). The mode
picks the instrument, what runs around the program: a profiler session
(:class:`opscope.capture.session.RecordingInstrument`, writes ``run.json``) or the numerics dispatch mode
(:class:`opscope.capture.numerics.NumericsInstrument`, writes the dump). The instrument always gets to
finish (also when the program crashes, is interrupted (SIGINT) or is asked to end (SIGTERM, SIGHUP: raised in
the program as :class:`Terminated`, as SIGINT raises KeyboardInterrupt)). The program's stdout, stderr and exit
code are its own (128+N after signal N, as a shell reports it); a missing script or module is a one-line error
with exit code 2.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

ENV = "OPSCOPE_RUNNER"
#: The configuration key of the pipe the instrument's last word goes to (see :func:`report`).
REPORT_FD = "report_fd"
#: The signals that ask a program to end: like SIGINT's KeyboardInterrupt, each becomes an exception in the
#: program (:class:`Terminated`), so that the instrument still finishes and saves what it measured.
ENDING_SIGNALS = ("SIGTERM", "SIGHUP")
#: Exit code of the runner itself when it could not start the program (the CLI's usage-error code).
SETUP_ERROR = 2
#: mode -> the instrument class that runs around the program in that mode (imported in the child only).
INSTRUMENTS = {
    "record": "opscope.capture.session:RecordingInstrument",
    "time": "opscope.capture.session:RecordingInstrument",  # tune-threads: step times, no profiler
    "numerics": "opscope.capture.numerics:NumericsInstrument",
}


@dataclass
class Program:
    """The user's program as found: a script or a module, its arguments, and the directory it lives in."""

    kind: str  # script | module
    value: str
    args: list[str]
    directory: Path  # a script's own directory, the working directory for a module


@dataclass
class Outcome:
    """How the program ended."""

    exit_code: int = 0
    status: str = "ok"  # ok | interrupted | terminated | import-error | crashed
    crash: str | None = None


class Terminated(BaseException):
    """Raised in the program when a signal asks it to end (SIGTERM, SIGHUP), as SIGINT raises KeyboardInterrupt: the
    program's ``finally`` blocks run, and so does the instrument's ``finish``. A BaseException, so that the program's
    ``except Exception`` does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"{self.name} received")


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def _hold_ending_signals(handler: Any) -> None:
    """Set ``handler`` for each ending signal whose handling is still Python's default (one the parent left ignored
    stays ignored)."""
    for name in ENDING_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:  # not on this platform
            continue
        current = signal.getsignal(sig)
        if current is signal.SIG_DFL or current in (_raise_terminated, _note_late):
            signal.signal(sig, handler)


def _ours_to_default() -> None:
    """In a process the program forks (DataLoader workers, multiprocessing): the ending signals' default again, so
    that they end it as they would without opscope."""
    for name in ENDING_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (_raise_terminated, _note_late):
            signal.signal(sig, signal.SIG_DFL)


def _note_late(signum: int, _frame: Any) -> None:
    """An ending signal while the instrument saves what it measured: it is not interrupted (the sender's next step,
    SIGKILL, still ends it)."""
    sys.stderr.write(f"opscope: {signal.Signals(signum).name} while saving the recording: finishing it first\n")
    sys.stderr.flush()


class Instrument(Protocol):
    """What one mode does in the child around the user's program."""

    #: True: an ImportError out of the program is a one-line setup error (exit 2, status import-error);
    #: False: it is a crash like any other (traceback, exit 1).
    import_error_is_setup_error: bool

    def prepare(self) -> None:
        """Before the program is looked up: import torch (or :func:`fail`), settings that must come first."""

    def start(self, program: Program) -> None:
        """Right before the program runs."""

    def finish(self, outcome: Outcome) -> None:
        """Always, last: save what was recorded."""


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    # A fresh name made with O_EXCL (mkstemp), never a fixed one: a symlink planted in the output
    # directory under a predictable name would otherwise be followed and its target overwritten.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, indent=2, default=str))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide run.json from the user's group
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def report(config: dict[str, Any], data: dict[str, Any]) -> None:
    """Send ``data`` (JSON, one line) to the parent through the pipe named in ``config``, once, then close it; no
    pipe (another parent), or a parent that is gone, is not an error: the parent then reads run.json alone."""
    fd = config.pop(REPORT_FD, None)
    if not isinstance(fd, int):
        return
    message = memoryview(json.dumps(data, default=str).encode() + b"\n")
    try:
        while message:
            message = message[os.write(fd, message):]
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def fail(message: str) -> NoReturn:
    """The one-line error of a program that could not be started; exit code :data:`SETUP_ERROR`."""
    from opscope.text import one_line

    print(f"opscope: error: {one_line(message)}", file=sys.stderr)
    sys.exit(SETUP_ERROR)


def locate(target: dict[str, Any]) -> Program:
    """The script or module to run (``target``: kind, value, args), or a one-line error if there is none."""
    kind, value = target["kind"], target["value"]
    if kind == "module":
        import importlib.util

        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(value)
        except (ImportError, ValueError) as exc:
            found, why = None, str(exc)
        else:
            why = f"no module named {value!r}"
        if found is None:
            fail(f"cannot run -m {value}: {why}")
        return Program(kind, value, list(target["args"]), Path(os.getcwd()))
    if kind == "code":
        return Program(kind, value, list(target["args"]), Path(os.getcwd()))
    script = Path(value)
    if not script.is_file():
        fail(f"{script}: no such script")
    return Program(kind, value, list(target["args"]), script.resolve().parent)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def instrument_for(config: dict[str, Any]) -> Instrument:
    module, name = INSTRUMENTS[config["mode"]].split(":")
    return getattr(importlib.import_module(module), name)(config)


def main() -> None:
    """Run the program of ``$OPSCOPE_RUNNER`` inside its mode's instrument, then exit as the program did.

    The program runs as ``__main__`` right here, not in a helper, so that the Python stacks of a
    recorded trace hold no more opscope frames above the program's than this one."""
    config = json.loads(os.environ.pop(ENV))
    if isinstance(config.get(REPORT_FD), int):
        with contextlib.suppress(OSError):  # the program's own subprocesses do not get it
            os.set_inheritable(config[REPORT_FD], False)
    instrument = instrument_for(config)
    instrument.prepare()
    if config.get("changes"):  # advise --measure's re-runs only (opscope.capture.changes)
        from opscope.capture.changes import apply_in_child

        apply_in_child(config["changes"])
    program = locate(config["target"])
    instrument.start(program)
    outcome = Outcome()
    sys.argv = ["-c" if program.kind == "code" else program.value, *program.args]
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_ours_to_default)
    _hold_ending_signals(_raise_terminated)
    try:
        if program.kind == "module":
            runpy.run_module(program.value, run_name="__main__", alter_sys=True)
        elif program.kind == "code":
            # `python -c CODE`: the user's own program text from their command line, run as python runs it
            sys.path.insert(0, "")
            code = compile(program.value, "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 (the user's -c program)
        else:
            sys.path.insert(0, str(program.directory))
            runpy.run_path(program.value, run_name="__main__")
    except SystemExit as exc:
        outcome.exit_code = _exit_code(exc)
    except KeyboardInterrupt:
        outcome.exit_code, outcome.status, outcome.crash = 130, "interrupted", "KeyboardInterrupt"
    except Terminated as ended:
        outcome.exit_code, outcome.status, outcome.crash = 128 + ended.signum, "terminated", ended.name
    except BaseException as exc:
        outcome.crash = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ImportError) and instrument.import_error_is_setup_error:
            outcome.exit_code, outcome.status = SETUP_ERROR, "import-error"  # a module the program needs
            from opscope.text import one_line

            print(one_line(f"opscope: error: the program failed to import a module ({exc}); run it without opscope "
                           "to see the traceback"), file=sys.stderr)
        else:
            traceback.print_exc()
            outcome.exit_code, outcome.status = 1, "crashed"
    finally:
        _hold_ending_signals(_note_late)
        instrument.finish(outcome)
    sys.stdout.flush()
    sys.exit(outcome.exit_code)


if __name__ == "__main__":
    main()
