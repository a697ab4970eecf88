"""The parent side of ``opscope record``, ``tune-threads`` and ``numerics``: parse the program's command
line, pick the output directory, and run the program in a child Python under the runner
(:mod:`opscope.capture.runner`); for record and tune-threads, read its ``run.json``.

Running the program in its own process keeps its exit code, stdout and stderr its own, and keeps
opscope's analysis (and its memory) out of the measured process. The runner tells this side how its side ended
through a pipe (its last word: the final run.json), so that a run.json it could not write (disk full) is still
known here, and written here when it can be.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opscope.capture.finalise import finalised
from opscope.capture.outdir import claim_output_dir, remove_staging_dirs
from opscope.capture.runner import ENV, REPORT_FD, write_json_atomic
from opscope.capture.session import RecordOptions
from opscope.errors import UsageError
from opscope.runtime import child_environment, starting_programs

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")


@dataclass
class Target:
    """A Python program: ``interpreter script args``, ``interpreter -m module args`` or ``interpreter -c code
    args``."""

    interpreter: str
    kind: str  # script | module | code
    value: str
    args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def parse_command(argv: list[str], cwd: Path | None = None) -> Target:
    """``python train.py --lr 1``, ``python -m pkg.train``, ``python -c "code"``, or just ``train.py ...``; a relative
    script is looked for in ``cwd`` (None: the working directory), where the program will run."""
    if not argv:
        raise UsageError("no program given: put it after --, e.g. opscope record -- python train.py")
    head, rest = argv[0], list(argv[1:])
    if _PYTHON.match(Path(head).name) or Path(head).resolve() == Path(sys.executable).resolve():
        interpreter = sys.executable if Path(head).name == head and not _on_path(head) else head
    elif head.endswith(".py") or head == "-m":
        interpreter, rest = sys.executable, list(argv)
    else:
        raise UsageError(f"{head!r} is not a Python program: give `-- python script.py ARGS` or "
                         "`-- python -m module ARGS`")
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest.pop(0)  # interpreter flags such as -u or -O: the runner's interpreter runs as is
    if not rest:
        raise UsageError("no script or -m module after the interpreter")
    if rest[0] == "-m":
        if len(rest) < 2 or not rest[1]:
            raise UsageError("-m needs a module name")
        return Target(interpreter, "module", rest[1], rest[2:], list(argv))
    if rest[0] == "-c":  # the program's text itself, as python -c takes it
        if len(rest) < 2:
            raise UsageError("-c needs the program's text")
        return Target(interpreter, "code", rest[1], rest[2:], list(argv))
    script = Path(rest[0])
    if cwd is not None and not script.is_absolute():
        script = cwd / script
    if not script.exists():
        raise UsageError(f"{script}: no such script")
    if not script.is_file():
        raise UsageError(f"{script}: is not a file (give the script to run)")
    return Target(interpreter, "script", str(Path(rest[0])), rest[1:], list(argv))


def _on_path(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def fresh_output_dir(path: Path) -> tuple[Path, bool]:
    """``path`` if it is new, or empty and ours, else ``path-1``, ``path-2``..., claimed atomically (see
    :func:`opscope.capture.outdir.claim_output_dir`): a recording is never overwritten, also by a second one
    started at the same moment."""
    return claim_output_dir(path)


@dataclass
class ChildRun:
    exit_code: int
    output: Path
    info: dict[str, Any] | None  # run.json, None when the program could not be started
    #: The program ended before its side wrote the final run.json, so this side did (see capture.finalise).
    finalised: bool = False
    #: Why that final run.json could not be written (disk full), None when it was.
    unsaved: str | None = None
    #: Why the program's side could not write its final run.json (disk full), which this side then wrote from
    #: what the runner reported; None when the program's side wrote it (or said nothing).
    rescued: str | None = None


def run_child(interpreter: str, config: dict[str, Any], extra_env: dict[str, str] | None = None,
              stdout: Any = None, stderr: Any = None, cwd: Path | None = None,
              base_env: dict[str, str] | None = None, report: bytearray | None = None) -> int:
    """Run ``interpreter -m opscope.capture.runner`` with ``config`` (its mode and target) and return its exit
    code. Ctrl-C goes to the program, not to us; ``stdout``/``stderr`` are where the program's go
    (``None``: ours); ``cwd`` where it runs (None: here); ``base_env`` its environment (None: ours); ``report``:
    gets what the runner's instrument reports at its end (see :func:`reported`; POSIX only, else nothing)."""
    env = child_environment(dict(base_env) if base_env is not None else None)
    pipe = os.pipe() if report is not None and os.name == "posix" else None
    if pipe is not None:
        config = {**config, REPORT_FD: pipe[1]}
    env[ENV] = json.dumps(config)
    # The program's interpreter may be another venv: make this opscope importable there.
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update(extra_env or {})
    cmd = [interpreter, "-m", "opscope.capture.runner"]
    child: list[subprocess.Popen] = []

    def forward(signum: int, _frame: Any) -> None:
        # A Python handler, never SIG_IGN: an ignored SIGINT is inherited across exec and the program's
        # Ctrl-C (KeyboardInterrupt) would never fire. A terminal's Ctrl-C already reaches the program
        # (same foreground process group), so SIGINT is forwarded only when it did not come from one.
        if not child or child[0].poll() is not None:
            return
        if signum == signal.SIGINT and _terminal_delivers_sigint():
            return
        with contextlib.suppress(OSError):
            child[0].send_signal(signum)

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        try:
            with starting_programs():
                child.append(subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, cwd=cwd,
                                              pass_fds=(pipe[1],) if pipe is not None else ()))
        except OSError as exc:
            raise UsageError(f"cannot start {interpreter}: {exc.strerror}") from None
        finally:
            if pipe is not None:
                os.close(pipe[1])  # the child holds it now: the read end sees EOF when the child is done
        code = child[0].wait() if pipe is None or report is None else _wait_reading(child[0], pipe[0], report)
    finally:
        if pipe is not None:
            os.close(pipe[0])
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Killed by signal n: 128+n, as a shell reports it (not -n, which sys.exit turns into 256-n).
    return 128 - code if code < 0 else code


#: The most of the runner's report kept (a run.json with a million step times is ~20 MB).
MAX_REPORT = 64 << 20


def _wait_reading(proc: subprocess.Popen, fd: int, sink: bytearray) -> int:
    """Wait for ``proc`` while reading what it writes to ``fd`` into ``sink`` (so that a long report never fills
    the pipe and blocks the child). Once the child has exited, what is left in the pipe is read and no more is
    waited for: a process the program forked may still hold the pipe open, and it never blocks this side."""
    os.set_blocking(fd, False)
    open_ = True
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            code = proc.poll()
            if not open_:
                return proc.wait() if code is None else code
            if selector.select(timeout=0.25 if code is None else 0):
                open_ = _drain(fd, sink)
            elif code is not None:
                return code


def _drain(fd: int, sink: bytearray) -> bool:
    """Read what ``fd`` holds now into ``sink`` (at most :data:`MAX_REPORT` kept); False at its end."""
    while True:
        try:
            block = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not block:
            return False
        if len(sink) < MAX_REPORT:
            sink += block[: MAX_REPORT - len(sink)]


def reported(report: bytes | bytearray) -> dict[str, Any] | None:
    """The runner's report (the first line it wrote: a JSON object), or None when it wrote none whole (it died
    before its end, or it is not this opscope's runner)."""
    line, newline, _ = bytes(report).partition(b"\n")
    if not newline:
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("run"), dict) else None


def _terminal_delivers_sigint() -> bool:
    """Whether we run in the foreground of a terminal, whose Ctrl-C the program receives by itself."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def target_config(target: Target) -> dict[str, Any]:
    """What the runner needs to find the program: see :func:`opscope.capture.runner.locate`."""
    return {"kind": target.kind, "value": target.value, "args": target.args}


def run_program(target: Target, output: Path, options: RecordOptions, mode: str = "record",
                quiet: bool = False, changes: dict[str, Any] | None = None, cwd: Path | None = None,
                base_env: dict[str, str] | None = None, stderr: Any = None) -> ChildRun:
    """Run ``target`` under a profiler session (``mode`` record) or its step clock only (``mode`` time);
    returns its exit code and run.json. ``changes``: remedies the runner applies to the program
    (:mod:`opscope.capture.changes`, advise --measure's re-runs only); ``cwd``, ``base_env``: see :func:`run_child`;
    ``stderr``: where the program's stderr goes (None: ours, or nowhere when ``quiet``)."""
    config: dict[str, Any] = {"mode": mode, "output": str(output.resolve() if cwd is not None else output),
                              "options": options.to_dict(), "command": target.command,
                              "target": target_config(target)}
    if changes:
        config["changes"] = changes
    threads = {}
    if options.intra_op_threads:
        threads = {var: str(options.intra_op_threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    sink = subprocess.DEVNULL if quiet else None
    report = bytearray()
    code = run_child(target.interpreter, config, threads, stdout=sink, stderr=stderr if stderr is not None else sink,
                     cwd=cwd, base_env=base_env, report=report)
    last = reported(report)
    info = None
    run_json = output / "run.json"
    if run_json.is_file():
        try:
            info = json.loads(run_json.read_text())
        except ValueError:
            info = None
    if info is not None and info.get("status") == "starting":  # the runner failed before the program started
        with contextlib.suppress(OSError):
            run_json.unlink()
            output.rmdir()  # only when empty: the claim left nothing else
        return ChildRun(code, output, None)
    remove_staging_dirs(output)  # half-written windows of a program killed while saving one
    if last is not None and last.get("unsaved") and info is not None and info.get("status") == "running":
        # the program ended and its side said how, but could not write run.json (disk full): this side writes it
        why = str(last["unsaved"])
        rescued = {**last["run"], "saved_by": f"opscope record: the program's side could not write run.json ({why})"}
        try:
            write_json_atomic(run_json, rescued)
        except OSError as exc:
            return ChildRun(code, output, rescued, unsaved=exc.strerror or str(exc), rescued=why)
        return ChildRun(code, output, rescued, rescued=why)
    final = finalised(info, output, code)
    if final is None:
        return ChildRun(code, output, info)
    try:
        write_json_atomic(run_json, final)
    except OSError as exc:
        return ChildRun(code, output, final, finalised=True, unsaved=exc.strerror or str(exc))
    return ChildRun(code, output, final, finalised=True)
