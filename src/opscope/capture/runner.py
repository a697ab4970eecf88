"""The child side of ``opscope record`` / ``tune-threads`` / ``numerics``: run the user's program as
``__main__`` inside an instrument.

Started by :func:`opscope.capture.launch.run_child` as ``python -m opscope.capture.runner`` with its
settings in the ``OPSCOPE_RUNNER`` environment variable (JSON: ``mode``, ``target`` and the mode's own
keys; ``changes``: the remedies a re-run of ``advise --measure`` applies, :mod:`opscope.capture.changes`). The mode
picks the instrument, what runs around the program: a profiler session
(:class:`opscope.capture.session.RecordingInstrument`, writes ``run.json``) or the numerics dispatch mode
(:class:`opscope.capture.numerics.NumericsInstrument`, writes the dump). The instrument always gets to
finish (also when the program crashes or is interrupted). The program's stdout, stderr and exit code
are its own; a missing script or module is a one-line error with exit code 2.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

ENV = "OPSCOPE_RUNNER"
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
    status: str = "ok"  # ok | interrupted | import-error | crashed
    crash: str | None = None


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


def fail(message: str) -> NoReturn:
    """The one-line error of a program that could not be started; exit code :data:`SETUP_ERROR`."""
    print(f"opscope: error: {message}", file=sys.stderr)
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
    instrument = instrument_for(config)
    instrument.prepare()
    if config.get("changes"):  # advise --measure's re-runs only (opscope.capture.changes)
        from opscope.capture.changes import apply_in_child

        apply_in_child(config["changes"])
    program = locate(config["target"])
    instrument.start(program)
    outcome = Outcome()
    sys.argv = ["-c" if program.kind == "code" else program.value, *program.args]
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
    except BaseException as exc:
        outcome.crash = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ImportError) and instrument.import_error_is_setup_error:
            outcome.exit_code, outcome.status = SETUP_ERROR, "import-error"  # a module the program needs
            print(f"opscope: error: the program failed to import a module ({exc}); run it without opscope to "
                  "see the traceback", file=sys.stderr)
        else:
            traceback.print_exc()
            outcome.exit_code, outcome.status = 1, "crashed"
    finally:
        instrument.finish(outcome)
    sys.stdout.flush()
    sys.exit(outcome.exit_code)


if __name__ == "__main__":
    main()
